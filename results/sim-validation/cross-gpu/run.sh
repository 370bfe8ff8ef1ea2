#!/usr/bin/env bash
# A profile of one GPU predicting another's real runs (issue 28, item 3), both ways, on the sim
# (`backend.sim_retarget`: every profile sample keeps the profiled device's fixed per-step part
# and scales the rest by its roofline bound on the target over the source):
#   h100 -> h200: the H100 llama2-7b profile (gpu-llama2-7b-1000-interleave, ef052e7) predicting the
#     H200 matrix cell h200-llama2-7b-ramp-chat-paged's real runs (086359a, 1,000 requests at 19 and
#     32.3 req/s), beside the same cell re-predicted from its own H200 profile (matrix/.../repredict);
#   h200 -> h100: that cell's H200 profile predicting the H100 cell's real runs (ef052e7, 1,000
#     requests at 10.75 and 18.275 req/s), beside its own H100 re-prediction (matrix/.../sim).
# No GPU. Writes table.txt here.   BIN=build-dev/servelab bash results/sim-validation/cross-gpu/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
bin=${BIN:-build-dev/servelab}
here=results/sim-validation/cross-gpu
m=results/sim-validation/matrix
out=${OUT:-results/runs/cross-gpu}
mkdir -p "$out"
h100_prof=$PWD/results/sim-validation/gpu-llama2-7b-1000-interleave/profile-paged-interleaved.json
h200_cell=$m/h200-llama2-7b-ramp-chat-paged
h100_cell=$m/h100-llama2-7b-poisson-chat-paged
"$bin" run "$h200_cell/scenario-as-run.yaml" --out "$out/h100-to-h200" --force --quiet --no-plots \
  --set workload.arrival.ramp_to=37.0 --set "workload.rates=[19.0,32.3]" --set workload.n_requests=1000 \
  --set "backend={kind: sim, sim_profile: $h100_prof, sim_device: h200, sim_retarget: true}" >/dev/null
"$bin" run "$h100_cell/scenario.yaml" --out "$out/h200-to-h100" --force --quiet --no-plots \
  --set "strategies=[{label: continuous-paged, batching: continuous, max_num_seqs: 256, max_num_batched_tokens: 4096, kv: {kind: paged, block_size: 16}}]" \
  --set "workload.rates=[10.75,18.275]" --set workload.n_requests=1000 \
  --set "backend={kind: sim, sim_profile: $PWD/$h200_cell/profile.json, sim_device: h100, sim_retarget: true}" >/dev/null
zcat "$h200_cell/validation/steps_real.jsonl.gz" > "$out/h200-steps.jsonl"
zcat results/sim-validation/gpu-llama2-7b-1000-interleave/continuous-paged/steps_real.jsonl.gz > "$out/h100-steps.jsonl"
{
  echo "== Step by step: the H200 runs' recorded steps priced by the H100 profile retargeted, then by the H200's own =="
  "$bin" price-steps "$out/h200-steps.jsonl" --profile "$h100_prof" --preset llama2-7b --device h200 --retarget
  "$bin" price-steps "$out/h200-steps.jsonl" --profile "$h200_cell/profile.json" --preset llama2-7b
  echo "== Step by step: the H100 runs' recorded steps priced by the H200 profile retargeted, then by the H100's own =="
  "$bin" price-steps "$out/h100-steps.jsonl" --profile "$h200_cell/profile.json" --preset llama2-7b --device h100 --retarget
  "$bin" price-steps "$out/h100-steps.jsonl" --profile "$h100_prof" --preset llama2-7b
  echo "== H200 real runs (h200-llama2-7b-ramp-chat-paged): from the H100 profile, retargeted; then from the H200's own =="
  python3 $here/compare.py "$h200_cell/validation/validation.json" "$out/h100-to-h200/summary.json" "$h200_cell/repredict/summary.json"
  echo "== H100 real runs (gpu-llama2-7b-1000-interleave): from the H200 profile, retargeted; then from the H100's own =="
  python3 $here/compare.py results/sim-validation/gpu-llama2-7b-1000-interleave/continuous-paged/validation.json \
    "$out/h200-to-h100/summary.json" "$h100_cell/sim/summary.json"
} | sed -e "s|$out/||g" -e "s|$PWD/||g" | tee "$here/table.txt"
