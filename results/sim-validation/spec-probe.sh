#!/usr/bin/env bash
# Speculation where drafts are mostly wrong and where they are right, on the sim from the committed
# H200 profile (gpu-llama2-7b-spec-final/profile.json), each load at the acceptance its real H200
# run measured (sim_acceptance.summary), scenarios/gpu-spec-llama2-7b.yaml (plain against self-k4):
#   wrong-usersN:   residual scale 0.05, acceptance of h200-2026-11-29-2f98274-wrong/real-usersN (N = 32, 64)
#   uniform-usersN: the same with output lengths uniform in 128-384 (no lockstep to lose)
#   right-usersN:   scale 0.005, acceptance of gpu-llama2-7b-spec-final/real-usersN (N = 32, 64),
#                   and at 1 user of h200-2026-11-28-7bfab2f/batch1 (64 requests)
# then spec_ratio.py over them all (spec_ratio.txt). 256 requests a batched load.
#   BIN=build-dev/servelab OUT=results/sim-validation/gpu-llama2-7b-spec-probe bash results/sim-validation/spec-probe.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${BIN:-build-dev/servelab}
out=${OUT:?OUT: the folder}
prof=$PWD/results/sim-validation/gpu-llama2-7b-spec-final/profile.json
wrong=$PWD/results/gpu/spec/h200-2026-11-29-2f98274-wrong
right=$PWD/results/sim-validation/gpu-llama2-7b-spec-final
mkdir -p "$out"
run() {  # run NAME SCALE USERS REQUESTS ACCEPTANCE_SUMMARY [--set ...]
  local name=$1 scale=$2 users=$3 n=$4 acc=$5; shift 5
  "$bin" run scenarios/gpu-spec-llama2-7b.yaml --out "$out/$name" --force --quiet --no-plots \
    --set model.residual_scale.scale="$scale" --set "workload.concurrency=[$users]" --set workload.n_requests="$n" \
    --set "backend={kind: sim, sim_profile: $prof}" --set strategies.1.speculative.sim_acceptance.summary="$acc" "$@" \
    > "$out/$name.log" 2>&1
  rm -f "$out/$name/report.html" "$out/$name/records.jsonl"
}
for n in 32 64; do
  run "wrong-users$n" 0.05 "$n" 256 "$wrong/real-users$n/summary.json"
  run "uniform-users$n" 0.05 "$n" 256 "$wrong/real-users$n/summary.json" \
    --set "workload.output_tokens={dist: uniform, min: 128, max: 384}"
  run "right-users$n" 0.005 "$n" 256 "$right/real-users$n/summary.json"
done
run right-users1 0.005 1 64 "$PWD/results/gpu/spec/h200-2026-11-28-7bfab2f/batch1/summary.json"
python3 results/gpu/spec/spec_ratio.py "$out"/wrong-users{32,64} "$out"/uniform-users{32,64} "$out"/right-users{1,32,64} \
  | tee "$out/spec_ratio.txt"
for f in "$out"/*/steps.jsonl; do gzip -9f "$f"; done
