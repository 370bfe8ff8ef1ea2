#!/usr/bin/env bash
# Issue 26's GPU tests and figures in one short device call (quantized weights on the GPU):
#   OUT=$OUT bash scripts/gpu-quant-check.sh
# Builds (sm_90a; the fp16 kernel variants left out, as nothing here runs f16, and their tests
# filtered out) test_kernels_gpu,
# test_cuda_backend_gpu, kernel_bench and engine_bench into BUILD (default build-gpu-quant), while
# torch._scaled_mm's peers run (scripts/gpu-bench-peers.py --gemm-only: the GPU is idle during the
# build); then the FP8/INT4 kernel tests and the quantized cuda-backend tests, kernel_bench
# --quant-only (FP8 GEMM 8192^3 and llama2-7b prefill products vs bf16, quantized decode products
# at M = 1, 8, 16) and engine_bench --quantization $FORMATS (default fp8,int4_awq; llama2-7b steps
# vs bf16).
# QUANT_GEMV_KERNELS (e.g. "warp mma stream") runs engine_bench once more per quant_gemv kernel
# (SERVELAB_QUANT_GEMV=<kernel>: engine_bench_<kernel>.log/.json) beside the default (auto);
# STEPS_VECTORS (e.g. "2") does the same per SERVELAB_QUANT_STEPS_VECTORS value (engine_bench_v<v>);
# PEERS=0 skips torch's peers; KERNEL_TESTS narrows test_kernels_gpu's filter (default
# '*Fp8*:*Int4*:*QuantGemv*:*Gemv*:*Pdl*').
# Logs and JSON under OUT; the commit recorded: GPU_COMMIT (a file) or git.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/runs/gpu-quant-check}
BUILD=${BUILD:-build-gpu-quant}
mkdir -p "$OUT"
COMMIT=$(cat GPU_COMMIT 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)
export SERVELAB_COMMIT=$COMMIT
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; echo "commit $COMMIT"; date -u; } >"$OUT/environment.txt" 2>&1
t0=$(date +%s)
step() {  # step NAME LIMIT CMD...: output to $OUT/NAME.log, a line in steps.txt
  local name=$1 limit=$2; shift 2
  local s=$(date +%s); timeout "$limit" "$@" >"$OUT/$name.log" 2>&1; local rc=$?
  echo "$name rc=$rc $(( $(date +%s) - s ))s (at $(( $(date +%s) - t0 ))s)" | tee -a "$OUT/steps.txt"
  return $rc
}
peers=
if [ "${PEERS:-1}" != 0 ]; then
  step peers 150 python3 scripts/gpu-bench-peers.py --gemm-only --out "$OUT/peers.json" &
  peers=$!
fi
G=(); command -v ninja >/dev/null && G=(-G Ninja)
step configure 60 cmake -S . -B "$BUILD" "${G[@]}" -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90a -DSERVELAB_KERNELS_FP16=OFF
step build "${BUILD_LIMIT:-250}" cmake --build "$BUILD" -j"$(nproc)" --target test_kernels_gpu test_cuda_backend_gpu \
  kernel_bench engine_bench -- -k 0
[ -n "$peers" ] && wait $peers
[ -x "$BUILD/test_kernels_gpu" ] &&
  step kernels_gpu 120 "$BUILD/test_kernels_gpu" --gtest_filter="${KERNEL_TESTS:-*Fp8*:*Int4*:*QuantGemv*:*Gemv*:*Pdl*}:-*/f16" &
kpid=$!
[ -x "$BUILD/test_cuda_backend_gpu" ] &&
  step backend_gpu 120 "$BUILD/test_cuda_backend_gpu" --gtest_filter='*QuantGpu*:*CudaBackendGpuTokens*bf16*:*CudaBackendGpuGraphs.DecodeReplayed*'
wait $kpid
[ -x "$BUILD/kernel_bench" ] &&
  step kernel_bench 200 "$BUILD/kernel_bench" --quant-only --json "$OUT/kernel_bench.json" --commit "$COMMIT"
[ -x "$BUILD/engine_bench" ] &&
  step engine_bench 100 "$BUILD/engine_bench" --quantization "${FORMATS:-fp8,int4_awq}" --quick --json "$OUT/engine_bench.json" \
    --commit "$COMMIT"
for kern in ${QUANT_GEMV_KERNELS:-}; do
  [ -x "$BUILD/engine_bench" ] &&
    SERVELAB_QUANT_GEMV=$kern step "engine_bench_$kern" 100 "$BUILD/engine_bench" --quantization "${FORMATS:-fp8,int4_awq}" \
      --quick --json "$OUT/engine_bench_$kern.json" --commit "$COMMIT"
done
for v in ${STEPS_VECTORS:-}; do  # INT4's steps kernel with v vectors a lane a step for the whole run
  [ -x "$BUILD/engine_bench" ] &&
    SERVELAB_QUANT_STEPS_VECTORS=$v step "engine_bench_v$v" 100 "$BUILD/engine_bench" --quantization "${FORMATS:-fp8,int4_awq}" \
      --quick --json "$OUT/engine_bench_v$v.json" --commit "$COMMIT"
done
echo "== gpu-quant-check: $(head -1 "$OUT/environment.txt"), commit $COMMIT =="
cat "$OUT/steps.txt"
grep -hE "^\[  (PASSED|FAILED) |^\[  FAILED|relative error|agreed|outer-vector|Failure" "$OUT"/kernels_gpu.log "$OUT"/backend_gpu.log 2>/dev/null | head -40
grep -E "fp8_|int4_|decode-row|quant_gemv_.*vs|decode_products|cublaslt_gemm|VALID" "$OUT/kernel_bench.log" 2>/dev/null | cut -c1-140 | head -40
grep -h "decode-step products" "$OUT/kernel_bench.log" 2>/dev/null | cut -c1-300
grep -E "quant_" "$OUT"/engine_bench*.log 2>/dev/null | cut -c1-160
grep -E "torch_" "$OUT/peers.log" 2>/dev/null
