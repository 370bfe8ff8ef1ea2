#!/usr/bin/env bash
# The CPU backend's decode step with the small-rows GEMM loop (engine/backend/cpu_small_gemm.h)
# and gemm_nt's padding against plain OpenBLAS (`profile --cpu-gemm openblas`), qwen2.5-0.5b shapes with
# random weights, decode batches 1-16 at context 128, both timed in alternating rounds (ABAB) in
# one run. Prints each batch's fastest round per side (the VM is shared: other work only ever
# adds time, so the minimum over rounds is the figure least touched by it) and the ratio; writes the raw profiles and the table to
# results/cpu-profile/small-gemm/ (machine, date and commit in the table's header).
# Usage: bash scripts/cpu-gemm-bench.sh [rounds (default 2)] [preset (default qwen2.5-0.5b)]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
preset=${2:-qwen2.5-0.5b}
out=results/cpu-profile/small-gemm
mkdir -p "$out"
run() {  # $1 label, $2 --cpu-gemm path
  ./build/servelab profile --cpu-gemm "$2" --preset "$preset" --batch 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16 \
    --contexts 128 --prefill-lens 16 --chunk-lens 32 --max-rows 16 --no-bucket-edges --no-padded-decodes \
    --no-host-overhead --repeats 3 > "$out/$1.txt" 2>&1
}
for r in $(seq 1 "$rounds"); do
  run "openblas-$r" openblas
  run "loop-$r" tuned
done
python3 - "$out" "$rounds" "$preset" <<'PY'
import re, subprocess, sys, platform, datetime
out, rounds, preset = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def decode_ms(path):
    d = {}
    for line in open(path):
        m = re.search(r"decode\s+seqs\s+(\d+)\s+rows\s+\d+\s+context\s+\d+:\s+([\d.]+) ms", line)
        if m: d.setdefault(int(m.group(1)), []).append(float(m.group(2)))
    return d
sides = {}
for side in ("openblas", "loop"):
    acc = {}
    for r in range(1, rounds + 1):
        for b, v in decode_ms(f"{out}/{side}-{r}.txt").items(): acc.setdefault(b, []).extend(v)
    sides[side] = {b: min(v) for b, v in acc.items()}
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
lines = [f"# decode step, {preset} (random weights), context 128, {rounds} alternating rounds a side, fastest round each",
         f"# machine: {cpu}; date {datetime.date.today()}; commit {commit}",
         "| batch | OpenBLAS ms | small-rows loop ms | ratio |", "|---:|---:|---:|---:|"]
for b in sorted(sides["openblas"]):
    a, l = sides["openblas"][b], sides["loop"].get(b, float("nan"))
    lines.append(f"| {b} | {a:.1f} | {l:.1f} | {l / a:.2f} |")
open(f"{out}/table.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
