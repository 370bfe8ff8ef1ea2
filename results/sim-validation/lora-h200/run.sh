#!/usr/bin/env bash
# The sim's LoRA pricing against engine_bench's measured H200 decode steps (lora-decode.yaml says
# what runs): the base model, then uniform over 1, 8 and 32 adapters and Zipf over 8, 64 and 512,
# each at 32 and 64 users; prints each run's TPOT p50 against the base's at the same load and the
# measured step ratios beside them (table.md). No GPU: the sim on the committed profile.
#   BIN=build-dev/servelab bash results/sim-validation/lora-h200/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
bin=${BIN:-build-dev/servelab}
here=results/sim-validation/lora-h200
out=${OUT:-results/runs/lora-h200}
scen=$here/lora-decode.yaml
mkdir -p "$out"
"$bin" run "$scen" --out "$out/base" --force --quiet --no-plots --set 'workload.lora=null' >/dev/null
for spec in uniform:1 uniform:8 uniform:32 zipf:8 zipf:64 zipf:512; do
  "$bin" run "$scen" --out "$out/${spec/:/-}" --force --quiet --no-plots \
    --set "workload.lora.distribution=${spec%%:*}" --set "workload.lora.count=${spec##*:}" >/dev/null
done
python3 - "$out" <<'PY' | tee "$here/table.md"
import json, os, sys
out = sys.argv[1]
def tpot(name):
    runs = json.load(open(os.path.join(out, name, "summary.json")))["runs"]
    return {r["config"]["concurrency"]: r["metrics"]["tpot_ms"]["p50"] for r in runs}
# engine_bench on an H200 (results/gpu/lora/2026-12-01-h200-gemv16/engine_bench_lora.log, tree
# 2e9a5e70's defaults: base step / step with adapters, ctx 512; Zipf: b64 tok/s ratios).
measured = {("uniform", 1): {32: 0.874, 64: 0.825}, ("uniform", 8): {32: 0.850, 64: 0.823},
            ("uniform", 32): {32: 0.800, 64: 0.797}, ("zipf", 8): {64: 0.850}, ("zipf", 64): {64: 0.808},
            ("zipf", 512): {64: 0.752}}
base = tpot("base")
print("| adapters | users | base TPOT p50 ms | with adapters | sim base / adapters | measured | sim - measured |")
print("|---|---:|---:|---:|---:|---:|---:|")
for (dist, n), m in measured.items():
    t = tpot(f"{dist}-{n}")
    for users in (32, 64):
        r = base[users] / t[users]
        meas = m.get(users)
        print(f"| {dist} {n} | {users} | {base[users]:.3f} | {t[users]:.3f} | {r:.3f} | "
              f"{'' if meas is None else f'{meas:.3f}'} | {'' if meas is None else f'{r - meas:+.3f}'} |")
PY
