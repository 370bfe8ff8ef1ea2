#!/usr/bin/env bash
# Issue 26 item 5: the formats side by side with their accuracy measured on the GPU, in one report.
# Device calls on one H200 (of the two-GPU kind), from the repository root, one PHASE a call, the
# machine kept warm between them (phase b reuses phase a's build):
#   a: build servelab and test_cuda_backend_gpu; `QuantCheckGpu.*` (quant_check_backends on cuda).
#   b: `servelab run scenarios/gpu-quant-compare.yaml` (each strategy's formats against bf16 on the
#      cuda backend over 1,024 positions, then the sweep).
# Everything lands in $OUT/PHASE and comes back as $OUT/PHASE.tgz (the device returns few files).
#   PHASE=a OUT=$OUT bash results/gpu/quant/accuracy-call/call.sh
set -uo pipefail
export SERVELAB_COMMIT=$(cat GPU_COMMIT 2>/dev/null || git rev-parse --short HEAD)
B=build-gpu P=${PHASE:?PHASE a or b}
O=$OUT/$P && mkdir -p "$O"
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 ))s"; }
{ nvidia-smi --query-gpu=index,name,memory.total,driver_version,clocks.max.sm --format=csv
  echo "commit $SERVELAB_COMMIT"; date -u; } > "$O/environment.txt" 2>&1
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DSERVELAB_KERNELS_FP16=OFF > "$O/configure.log" 2>&1
case $P in
a)
  timeout 420 cmake --build $B -j"$(nproc)" --target servelab test_cuda_backend_gpu > "$O/build.log" 2>&1
  echo "build rc $? $(el)"; grep -m5 -E "error|FAILED" "$O/build.log"
  CUDA_VISIBLE_DEVICES=0 timeout 120 $B/test_cuda_backend_gpu --gtest_filter='QuantCheckGpu.*:QuantGpu.*' \
    > "$O/tests.log" 2>&1
  echo "tests rc $? $(el)"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|top-1" "$O/tests.log"
  ;;
b)
  timeout 120 cmake --build $B -j"$(nproc)" --target servelab > "$O/build.log" 2>&1
  echo "build rc $? $(el)"
  CUDA_VISIBLE_DEVICES=0 timeout $(( ${TOTAL_S:-585} - ($(date +%s) - t0) )) build-gpu/servelab run \
    scenarios/gpu-quant-compare.yaml --out "$O/quant-compare" --force --no-plots > "$O/quant-compare.log" 2>&1
  echo "quant-compare rc $? $(el)"; grep "accuracy:" "$O/quant-compare.log"; grep -A40 "^strategy" "$O/quant-compare.log" | head -40
  sed -n '/Storage formats/,/^## KV/p' "$O/quant-compare/report.md"
  ;;
esac
for f in "$O"/*/records.jsonl "$O"/*/steps.jsonl; do [ -f "$f" ] && gzip "$f"; done
rm -f "$O"/*/report.html
tar czf "$OUT/$P.tgz" -C "$OUT" "$P" && rm -rf "$O"
echo "done $(el)"
