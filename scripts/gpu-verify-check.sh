#!/usr/bin/env bash
# Speculative verification on the GPU (issue 27, item 2 of the specgpu brief) in one or two short
# device calls: builds test_kernels_gpu, test_cuda_backend_gpu and kernel_bench
# (-DCMAKE_CUDA_ARCHITECTURES=90a) into BUILD (default /tmp/build-verify: outside the copied tree,
# so a second call on a still-warm machine only rebuilds what changed), then runs
#   PART=tests (default): DecodeRowsGpu.* (multi-row decode attention against its reference),
#     VerifyDraftGpu.* (rejection sampling against q: GPU = reference = CPU draw for draw, chi-square),
#     SpecGpu.* (speculative output on the GPU);
#   PART=bench: kernel_bench --verify-rows (the rows kernel beside the one-row transform and plain
#     decode) and SpecGpuBench.* (the llama2-7b verification step at 1 / 32 / 64 users: eager,
#     graphs with the one-row transform, graphs with the rows kernel);
#   PART=all: both.
# Logs under OUT; a short summary last.   OUT=$OUT PART=all bash scripts/gpu-verify-check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/runs/gpu-verify-check}
BUILD=${BUILD:-/tmp/build-verify}
PART=${PART:-tests}
mkdir -p "$OUT"
COMMIT=$(cat GPU_COMMIT 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; echo "commit $COMMIT"; date -u; } >"$OUT/environment.txt" 2>&1
t0=$(date +%s)
G=(); command -v ninja >/dev/null && G=(-G Ninja)
[ -f "$BUILD/CMakeCache.txt" ] || cmake -S . -B "$BUILD" "${G[@]}" -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90a >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
timeout "${BUILD_LIMIT:-290}" cmake --build "$BUILD" -j"$(nproc)" --target test_kernels_gpu test_cuda_backend_gpu kernel_bench -- -k 0 \
  >"$OUT/build.log" 2>&1 || { echo "build failed or timed out:"; grep -E "error|FAILED" "$OUT/build.log" | head -30; }
echo "build $(($(date +%s) - t0)) s"
rc=0
left() { echo $(( ${TOTAL_LIMIT:-320} - ($(date +%s) - t0) )); }
brief() { grep -hE "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|Failure|Expected|Which is|actual|  [0-9]+ of" "$1" | head -${2:-25}; }
step() {  # step NAME LIMIT CMD...: skipped when less time is left than asked
  local name=$1 limit=$2; shift 2
  local l; l=$(left)
  if [ "$l" -lt 15 ]; then echo "== $name: skipped (no time left)"; return; fi
  [ "$l" -lt "$limit" ] && limit=$l
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1 || { rc=1; echo "== $name: rc $?"; }
}
want() { [ "$PART" = all ] || [ "$PART" = "$1" ]; }
if want tests; then
  step decode_rows_gpu 90 "$BUILD/test_kernels_gpu" --gtest_filter='*DecodeRowsGpu.*'
  echo "== DecodeRowsGpu"; brief "$OUT/decode_rows_gpu.log"
  step verify_draft_gpu 60 "$BUILD/test_cuda_backend_gpu" --gtest_filter='VerifyDraftGpu.*'
  echo "== VerifyDraftGpu"; brief "$OUT/verify_draft_gpu.log"
  # What the changes touch besides: the sampler's own tests, the backend's graphs and sampling.
  step sampling_gpu 60 "$BUILD/test_kernels_gpu" --gtest_filter='SamplingGpu.*'
  echo "== SamplingGpu"; brief "$OUT/sampling_gpu.log" 8
  step backend_gpu 90 "$BUILD/test_cuda_backend_gpu" --gtest_filter='*CudaBackendGpu*:CudaLateMasks.*:BlockTableGpu.*:-*Bench*'
  echo "== CudaBackendGpu*, CudaLateMasks, BlockTableGpu"; brief "$OUT/backend_gpu.log" 12
fi
if want bench; then
  step kernel_bench_verify_rows 80 "$BUILD/kernel_bench" --verify-rows
  echo "== kernel_bench --verify-rows"; grep -vE "^\s*$" "$OUT/kernel_bench_verify_rows.log" | tail -28
fi
if want tests; then
  step spec_gpu 150 "$BUILD/test_cuda_backend_gpu" --gtest_filter='SpecGpu.*'
  echo "== SpecGpu"; brief "$OUT/spec_gpu.log"
fi
if want bench; then
  export SERVELAB_GPU_BENCH=1; step spec_gpu_bench 200 "$BUILD/test_cuda_backend_gpu" --gtest_filter='SpecGpuBench.*'
  echo "== SpecGpuBench"; grep -E "mode|eager|graphs|llama2|FAILED|Failure" "$OUT/spec_gpu_bench.log" | head -20
fi
echo "total $(($(date +%s) - t0)) s, rc $rc"
exit $rc
