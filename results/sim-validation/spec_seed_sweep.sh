#!/usr/bin/env bash
# The gpu-llama2-7b-spec-grid sim runs (256 requests at 32 and 64 users) at several scenario seeds,
# with every request alike (`alike`) and with the per-request acceptance spread of the real runs
# (`spread`: sim_acceptance.requests from gpu-llama2-7b-spec-rounds/real-LOAD/request-acceptance.json,
# written by run.sh gpu-spec-sim with GPU_SPEC_SPREAD=1). A request's draws are keyed by
# seed ^ request id, so seeds below 256 only permute the 256 request keys of seed 11 (the
# committed runs'): the others here are 1024-8192. Prints, for self-k4: TPOT p50, ITL p50 (ms),
# output tok/s and the standard deviation of the steps a request took (its token chunks).
# Usage: BIN=build-dev/servelab bash results/sim-validation/spec_seed_sweep.sh > OUT.txt
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${BIN:-build/servelab}
R=results/sim-validation
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "users mode seed tpot_p50_ms itl_p50_ms output_tok_s steps_sd"
for l in 32 64; do for mode in alike spread; do for seed in 11 1024 2048 3072 4096 5120 6144 7168 8192; do
  extra=()
  [ $mode = spread ] && extra=(--set strategies.1.speculative.sim_acceptance.requests="$PWD/$R/gpu-llama2-7b-spec-rounds/real-users$l/request-acceptance.json")
  "$bin" run scenarios/gpu-spec-llama2-7b.yaml --out "$tmp/run" --force --quiet --no-plots --set model.residual_scale.scale=0.005 \
    --set "workload.concurrency=[$l]" --set workload.n_requests=256 \
    --set "backend={kind: sim, sim_profile: $PWD/$R/gpu-llama2-7b-spec-grid/profile.json}" \
    --set strategies.1.speculative.sim_acceptance.summary="$PWD/$R/gpu-llama2-7b-spec-rounds/real-users$l/summary.json" \
    "${extra[@]}" --set seed=$seed > /dev/null 2>&1
  python3 - "$tmp/run" "$l $mode $seed" <<'PY'
import json, statistics, sys
run, tag = sys.argv[1], sys.argv[2]
m = json.load(open(f"{run}/summary.json"))["runs"][1]["metrics"]
def steps(times):
    return len(set(times[1:]))
sd = statistics.stdev(steps(r["token_times_s"]) for r in map(json.loads, open(f"{run}/records.jsonl"))
                      if r["run"].startswith("self"))
print(tag, f'{m["tpot_ms"]["p50"]:.3f} {m["itl_ms"]["p50"]:.3f} {m["output_throughput_tok_s"]:.0f} {sd:.2f}')
PY
done; done; done
