#!/usr/bin/env bash
# The FP8 KV cache on the GPU in one device call (issue 26; kernels/kv_fp8.h): builds the GPU
# tests and both benches (-DCMAKE_CUDA_ARCHITECTURES=90a), runs the FP8 KV kernel tests and the
# cuda backend's FP8 KV tests (with the bf16 RoPE/KV and decode tests beside them), then
# `kernel_bench --fp8kv` (decode attention over FP8 beside bf16 KV) and
# `engine_bench --kv-cache-dtype auto,fp8` (llama2-7b steps with either cache):
#   OUT=$OUT bash scripts/gpu-fp8kv-check.sh
# BUILD (default build-gpu), TESTS=0 skips the tests, BENCH=0 the benches; QUICK=1 (default)
# passes --quick to engine_bench. Logs go to $OUT as one tarball (the device returns few files),
# the JSON and a summary beside it. The commit: GPU_COMMIT (a file) or git.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/runs/gpu-fp8kv-check}
BUILD=${BUILD:-build-gpu}
L=$OUT/logs
mkdir -p "$L"
COMMIT=$(cat GPU_COMMIT 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)
export SERVELAB_COMMIT=$COMMIT
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; echo "commit $COMMIT"; date -u; } >"$OUT/summary.txt" 2>&1
step() {  # step NAME LIMIT CMD...: output to $L/NAME.log, a line in the summary
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s); timeout "$limit" "$@" >"$L/$name.log" 2>&1; local rc=$?
  printf '%-16s %-8s %4ss\n' "$name" "$([ $rc = 0 ] && echo ok || echo "FAIL($rc)")" $(($(date +%s) - t0)) >>"$OUT/summary.txt"
  return $rc
}
G=(); command -v ninja >/dev/null && G=(-G Ninja)
step configure 120 cmake -S . -B "$BUILD" "${G[@]}" -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a &&
  step build "${BUILD_LIMIT:-300}" cmake --build "$BUILD" -j"$(nproc)" --target test_kernels_gpu test_cuda_backend_gpu kernel_bench engine_bench
tail -n 40 "$L/build.log" | grep -E "error|Error" | head -20 >>"$OUT/summary.txt"
if [ "${TESTS:-1}" = 1 ]; then
  step kernels_gpu 150 "$BUILD/test_kernels_gpu" --gtest_filter='*KvFp8*:*OpsGpu.RopeKv*:*AttentionGpu.DecodeMatchesReferenceOnAwkwardShapes*' &
  # The backend's FP8 KV tests, and with ALL_BACKEND=1 every backend GPU test (bf16 steps through the
  # same ops) but the benches and the HF checkpoint ones.
  BF='*Fp8KvGpu*'; [ "${ALL_BACKEND:-0}" = 1 ] && BF='-*Bench*:*Hf*'
  step backend_gpu "${BACKEND_LIMIT:-150}" "$BUILD/test_cuda_backend_gpu" --gtest_filter="$BF" &
  wait
  for f in kernels_gpu backend_gpu; do
    grep -hE "^\[  (PASSED|FAILED) |^\[  FAILED  \]|Failure|error|worst|agreed" "$L/$f.log" | head -40 | sed "s/^/$f: /" >>"$OUT/summary.txt"
  done
fi
if [ "${BENCH:-1}" = 1 ]; then
  step kernel_bench 150 "$BUILD/kernel_bench" --fp8kv --json "$OUT/kernel_bench.json" --commit "$COMMIT"
  grep -E "decode_attn|d2d_copy" "$L/kernel_bench.log" >>"$OUT/summary.txt"
  Q=(); [ "${QUICK:-1}" = 1 ] && Q=(--quick)
  step engine_bench "${ENGINE_LIMIT:-150}" "$BUILD/engine_bench" --kv-cache-dtype auto,fp8 "${Q[@]}" --json "$OUT/engine_bench.json" --commit "$COMMIT"
  grep -E "kv_" "$L/engine_bench.log" >>"$OUT/summary.txt"
fi
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
cat "$OUT/summary.txt"
