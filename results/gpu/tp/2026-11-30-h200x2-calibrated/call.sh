#!/usr/bin/env bash
# Issue 25 item 4 (the sim's TP term from measurement) with the calibration issue 28 uses: device
# calls on the two-GPU kind (2 x H200), from the repository root, one PHASE a call:
#   a: build servelab; `servelab profile --backend cuda --tensor-parallel 2 --for-scenario SWEEP
#      --interleave --sustained-s 4` (the grid); a calibration run (continuous+paged, another seed,
#      300 requests at 7 req/s) folded in by `servelab calibrate --tensor-parallel 2`; the sweep's
#      static runs (64 requests a rate).
#   b: the sweep's continuous runs (200 requests a rate).
#   c: scenarios/gpu-quant-compare.yaml on GPU 0 (issue 26 item 5), not TP.
#   d: the same at 4 req/s alone, after the roofline meter learned each strategy's formats.
# Everything lands in $OUT/PHASE and comes back as $OUT/PHASE.tgz (the device returns few files).
#   PHASE=a OUT=$OUT bash results/gpu/tp/2026-11-30-h200x2-calibrated/call.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export SERVELAB_COMMIT=$(cat GPU_COMMIT 2>/dev/null || git rev-parse --short HEAD)
B=build-gpu S=results/gpu/tp/llama3-70b-sweep-200.yaml P=${PHASE:?PHASE a, b or c}
O=$OUT/$P && mkdir -p "$O"
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 ))s"; }
{ nvidia-smi --query-gpu=index,name,memory.total,driver_version,clocks.max.sm --format=csv
  echo "commit $SERVELAB_COMMIT"; date -u; } > "$O/environment.txt" 2>&1
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DSERVELAB_KERNELS_FP16=OFF > "$O/configure.log" 2>&1
timeout 300 cmake --build $B -j"$(nproc)" --target servelab > "$O/build.log" 2>&1
echo "build rc $? $(el)"
sl=$B/servelab
case $P in
a)
  timeout 240 $sl profile --backend cuda --tensor-parallel 2 --for-scenario $S --interleave --sustained-s 4 \
    --json "$O/profile-grid.json" > "$O/profile.log" 2>&1
  echo "profile rc $? $(el)"
  timeout 150 $sl run $S --set seed=1025 --set workload.rates=[7] --set workload.n_requests=300 \
    --set 'strategies=[{label: continuous-paged, batching: continuous, max_num_seqs: 256, max_num_batched_tokens: 4096, kv: {kind: paged, block_size: 16}}]' \
    --out "$O/calibration" --force --quiet --no-plots > "$O/calibration.log" 2>&1
  echo "calibration run rc $? $(el)"
  $sl calibrate "$O/calibration/steps.jsonl" --profile "$O/profile-grid.json" --preset llama3-70b --tensor-parallel 2 \
    --json "$O/profile.json" >> "$O/calibration.log" 2>&1
  echo "calibrate rc $? $(el)"; tail -25 "$O/calibration.log"
  timeout $(( ${TOTAL_S:-575} - ($(date +%s) - t0) )) $sl run $S --set workload.n_requests=64 \
    --set 'strategies=[{label: static, batching: static, batch_size: 16, max_wait_ms: 200, kv: {kind: naive, reserve: max}}]' \
    --out "$O/static" --force --no-plots > "$O/static.log" 2>&1
  echo "static rc $? $(el)"; grep -A12 "^strategy" "$O/static.log" | head -8
  ;;
b)
  timeout $(( ${TOTAL_S:-575} - ($(date +%s) - t0) )) $sl run $S \
    --set 'strategies=[{label: continuous-paged, batching: continuous, max_num_seqs: 256, max_num_batched_tokens: 4096, kv: {kind: paged, block_size: 16}}, {label: continuous-naive, batching: continuous, max_num_seqs: 256, max_num_batched_tokens: 4096, kv: {kind: naive, reserve: max}}]' \
    --out "$O/continuous" --force --no-plots > "$O/continuous.log" 2>&1
  echo "continuous rc $? $(el)"; grep -A12 "^strategy" "$O/continuous.log" | head -10
  ;;
c)
  CUDA_VISIBLE_DEVICES=0 timeout $(( ${TOTAL_S:-575} - ($(date +%s) - t0) )) $sl run scenarios/gpu-quant-compare.yaml \
    --out "$O/quant-compare" --force --no-plots > "$O/quant-compare.log" 2>&1
  echo "quant-compare rc $? $(el)"; grep -A40 "^strategy" "$O/quant-compare.log" | head -40
  ;;
d)
  CUDA_VISIBLE_DEVICES=0 timeout $(( ${TOTAL_S:-575} - ($(date +%s) - t0) )) $sl run scenarios/gpu-quant-compare.yaml \
    --set workload.rates=[4] --out "$O/quant-compare-4" --force --no-plots > "$O/quant-compare-4.log" 2>&1
  echo "quant-compare at 4 req/s rc $? $(el)"; grep "roofline efficiency" "$O/quant-compare-4.log"
  ;;
esac
for f in "$O"/*/records.jsonl "$O"/*/steps.jsonl; do [ -f "$f" ] && gzip "$f"; done
rm -f "$O"/*/report.html
tar czf "$OUT/$P.tgz" -C "$OUT" "$P" && rm -rf "$O"
echo "done $(el)"
