#!/usr/bin/env bash
# The FP8 KV cache on the GPU in one device call (issue 26; kernels/kv_fp8.h): builds the GPU
# tests, kernel_bench and servelab (-DCMAKE_CUDA_ARCHITECTURES=90a), runs the FP8 KV kernel tests
# and the cuda backend's FP8 KV tests (with the bf16 RoPE/KV and decode tests beside them), then
# `kernel_bench --fp8kv` (decode attention over FP8 beside bf16 KV: the tensor-core and CUDA-core
# FP8 kernels), `servelab run scenarios/gpu-fp8kv-capacity.yaml` (bf16 against FP8 KV where the
# KV budget binds) and, with ENGINE=1, `engine_bench --kv-cache-dtype auto,fp8` (llama2-7b steps):
#   OUT=$OUT bash scripts/gpu-fp8kv-check.sh
# BUILD (default build-gpu), TESTS=0 skips the tests, BENCH=0 kernel_bench, RUN=0 the scenario
# (RUN_LIMIT seconds, default 200, cut to what is left of TOTAL_S seconds from the start, less 20,
# when TOTAL_S is set; SCENARIO, default scenarios/gpu-fp8kv-capacity.yaml); PROBE=1 adds
# bench/kernels/kv_ring_probe.cu's tables (ring-probe.txt); QUICK=1
# (default) passes --quick to engine_bench. When the FP8 kernel tests fail, the scenario runs with
# SERVELAB_FP8KV_DECODE=shift_mask (the CUDA-core kernel), and the summary says so. Logs go to
# $OUT as one tarball (the device returns few files), the JSON, the run's summary and a summary
# beside it. The commit: GPU_COMMIT (a file) or git.
set -uo pipefail
T0=$(date +%s)
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
TARGETS="test_kernels_gpu test_cuda_backend_gpu kernel_bench"
[ "${RUN:-1}" = 1 ] && TARGETS="$TARGETS servelab"
[ "${ENGINE:-0}" = 1 ] && TARGETS="$TARGETS engine_bench"
# shellcheck disable=SC2086  # the targets are words
step configure 120 cmake -S . -B "$BUILD" "${G[@]}" -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a &&
  step build "${BUILD_LIMIT:-300}" cmake --build "$BUILD" -j"$(nproc)" --target $TARGETS
tail -n 40 "$L/build.log" | grep -E "error|Error" | head -20 >>"$OUT/summary.txt"
KERNELS_OK=1
if [ "${TESTS:-1}" = 1 ]; then
  step kernels_gpu "${KERNELS_LIMIT:-150}" "$BUILD/test_kernels_gpu" --gtest_filter='*KvFp8*:*OpsGpu.RopeKv*:*AttentionGpu.DecodeMatchesReferenceOnAwkwardShapes*' &
  KPID=$!
  # The backend's FP8 KV tests, and with ALL_BACKEND=1 every backend GPU test (bf16 steps through the
  # same ops) but the benches and the HF checkpoint ones.
  BF='*Fp8KvGpu*'; [ "${ALL_BACKEND:-0}" = 1 ] && BF='-*Bench*:*Hf*'
  step backend_gpu "${BACKEND_LIMIT:-150}" "$BUILD/test_cuda_backend_gpu" --gtest_filter="$BF" &
  wait "$KPID" || KERNELS_OK=0
  wait
  for f in kernels_gpu backend_gpu; do
    grep -hE "^\[  (PASSED|FAILED) |^\[  FAILED  \]|Failure|error|worst|agreed" "$L/$f.log" | head -40 | sed "s/^/$f: /" >>"$OUT/summary.txt"
  done
fi
if [ "${BENCH:-1}" = 1 ]; then
  step kernel_bench 150 "$BUILD/kernel_bench" --fp8kv --json "$OUT/kernel_bench.json" --commit "$COMMIT"
  grep -E "decode_attn|d2d_copy" "$L/kernel_bench.log" >>"$OUT/summary.txt"
fi
if [ "${RUN:-1}" = 1 ]; then
  if [ "$KERNELS_OK" = 0 ]; then
    export SERVELAB_FP8KV_DECODE=shift_mask
    echo "scenario: FP8 kernel tests failed, the run uses SERVELAB_FP8KV_DECODE=shift_mask" >>"$OUT/summary.txt"
  fi
  RL=${RUN_LIMIT:-200}
  if [ -n "${TOTAL_S:-}" ]; then LEFT=$((TOTAL_S - ($(date +%s) - T0) - 20)); [ "$LEFT" -lt "$RL" ] && RL=$LEFT; [ "$RL" -lt 10 ] && RL=1; fi
  step scenario "$RL" "$BUILD/servelab" run "${SCENARIO:-scenarios/gpu-fp8kv-capacity.yaml}" --out "$OUT/run" --no-plots --force
  unset SERVELAB_FP8KV_DECODE
  sed -n '/^strategy/,$p' "$L/scenario.log" | head -30 >>"$OUT/summary.txt"
fi
if [ "${ENGINE:-0}" = 1 ]; then
  Q=(); [ "${QUICK:-1}" = 1 ] && Q=(--quick)
  step engine_bench "${ENGINE_LIMIT:-150}" "$BUILD/engine_bench" --kv-cache-dtype auto,fp8 "${Q[@]}" --json "$OUT/engine_bench.json" --commit "$COMMIT"
  grep -E "kv_" "$L/engine_bench.log" >>"$OUT/summary.txt"
fi
if [ "${PROBE:-0}" = 1 ]; then  # the read-only ring probe (bench/kernels/kv_ring_probe.cu), both tables
  step probe_build 120 nvcc -O3 -arch=sm_90a -std=c++17 bench/kernels/kv_ring_probe.cu -o "$BUILD/kv_ring_probe" &&
    step probe 120 "$BUILD/kv_ring_probe" && cp "$L/probe.log" "$OUT/ring-probe.txt"
fi
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
cat "$OUT/summary.txt"
