#!/usr/bin/env bash
# Every GPU test of the kernels and the cuda backend (in parallel shards), then the decode/prefill
# engine figures and the kernel bench, in one short device call (about 5 minutes on an H100):
#   OUT=$OUT bash scripts/gpu-quick-check.sh
# Builds with -DCMAKE_CUDA_ARCHITECTURES=90a into BUILD (default build-gpu), writes logs and JSON
# under OUT and prints a short table last. QUICK=1 (default) runs the benches' short grids.
# BENCH=0 runs the tests only (no engine_bench / kernel_bench). EXTRA_TARGETS builds more targets
# in the same build (e.g. servelab, for a script that runs after it).
# The commit recorded in the JSON: GPU_COMMIT (a file, for a tree copied outside its checkout) or git.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/runs/gpu-quick-check}
BUILD=${BUILD:-build-gpu}
mkdir -p "$OUT"
COMMIT=$(cat GPU_COMMIT 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)
export SERVELAB_COMMIT=$COMMIT NCCL_NVLS_ENABLE=0
Q=(); [ "${QUICK:-1}" = 1 ] && Q=(--quick)
declare -a TABLE=()
run() {  # run NAME LIMIT CMD...: output to $OUT/NAME.log, a line in the table
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s); timeout "$limit" "$@" >"$OUT/$name.log" 2>&1; local rc=$?
  TABLE+=("$(printf '%-14s %-4s %4ss' "$name" "$([ $rc = 0 ] && echo ok || echo "FAIL($rc)")" $(($(date +%s) - t0)))")
  [ $rc = 0 ] || tail -n 30 "$OUT/$name.log"
  return $rc
}
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; echo "commit $COMMIT"; date -u; } >"$OUT/environment.txt" 2>&1
G=(); command -v ninja >/dev/null && G=(-G Ninja)
run configure 120 cmake -S . -B "$BUILD" "${G[@]}" -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a &&
  run build 300 cmake --build "$BUILD" -j"$(nproc)" --target test_kernels_gpu test_cuda_backend_gpu \
    $([ "${BENCH:-1}" = 1 ] && echo engine_bench kernel_bench) ${EXTRA_TARGETS:-}
if [ -x "$BUILD/test_cuda_backend_gpu" ]; then
  # The kernel GPU tests in SHARDS gtest shards beside the backend GPU tests, all at once on the one
  # GPU (the 4k prefill reference tests take 47 s a dtype on the host's CPU; one after the other the
  # kernel tests alone reached ~300 s by the tenth prefill pass). Timings come after, alone.
  shards=${SHARDS:-6}; t0=$(date +%s); pids=()
  for ((i = 0; i < shards; ++i)); do
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i timeout "${KERNELS_LIMIT:-300}" "$BUILD/test_kernels_gpu" --gtest_brief=1 \
      >"$OUT/kernels_gpu_shard$i.log" 2>&1 & pids+=($!)
  done
  timeout 200 "$BUILD/test_cuda_backend_gpu" --gtest_brief=1 --gtest_filter='-*Bench*:*Hf*' >"$OUT/backend_gpu.log" 2>&1 & bpid=$!
  krc=0; for p in "${pids[@]}"; do wait "$p" || krc=1; done; wait "$bpid"; brc=$?
  cat "$OUT"/kernels_gpu_shard*.log >"$OUT/kernels_gpu.log"
  TABLE+=("$(printf '%-14s %-4s %4ss' kernels_gpu "$([ $krc = 0 ] && echo ok || echo FAIL)" $(($(date +%s) - t0)))")
  TABLE+=("$(printf '%-14s %-4s %4ss' backend_gpu "$([ $brc = 0 ] && echo ok || echo "FAIL($brc)")" $(($(date +%s) - t0)))")
  [ $krc = 0 ] || grep -hE "FAILED|Failure" "$OUT"/kernels_gpu_shard*.log | head -30
  [ $brc = 0 ] || tail -n 30 "$OUT/backend_gpu.log"
  if [ "${BENCH:-1}" = 1 ]; then
    run engine_bench 120 "$BUILD/engine_bench" "${Q[@]}" --json "$OUT/engine_bench.json" --commit "$COMMIT"
    run kernel_bench 200 "$BUILD/kernel_bench" "${Q[@]}" --json "$OUT/kernel_bench.json" --commit "$COMMIT"
  fi
fi
echo
echo "== gpu-quick-check: $(head -1 "$OUT/environment.txt"), commit $COMMIT =="
printf '%s\n' "${TABLE[@]}"
for f in kernels_gpu backend_gpu; do grep -hE "^\[  (PASSED|FAILED|SKIPPED) " "$OUT/$f.log" 2>/dev/null | sed "s/^/$f: /"; done
grep -E "prefill_attn +seq4096|fa11 (==|!=)|engine table" "$OUT/kernel_bench.log" 2>/dev/null | cut -c1-150 | head -20
grep -E "decode_step_mbu|prefill_model_tflops|engine_d2d_copy" "$OUT/engine_bench.log" 2>/dev/null | cut -c1-150
grep -iE "gemv|skinny|decode_products|VALIDATION" "$OUT/kernel_bench.log" 2>/dev/null | cut -c1-150 | head -30
grep -q "FAIL" <(printf '%s\n' "${TABLE[@]}") && exit 1 || exit 0
