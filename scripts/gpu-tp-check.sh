#!/usr/bin/env bash
# Tensor parallelism (issue 13) on the GPU machine, in one device call on the nvidia-h200-x2 kind:
# build (through scripts/gpu-engine-check.sh's configure and carried-.deb handling), the CPU
# sharding tests, the TP GPU tests (TP=2 against one GPU on 2-layer llama3-8b / llama2-13b-shaped
# synthesized checkpoints, greedy tokens, swap, shards), the all-reduce bus-bandwidth benchmark and
# the llama2-13b decode step benchmark TP=2 vs TP=1 at batch 1, 32, 128 with the communication
# share; optionally (STEPS=... profile) `servelab profile --backend cuda --tensor-parallel 2`.
# NVLink multicast stays off: NCCL_NVLS_ENABLE=0 (and PyTorch's / NVSHMEM's) exported here.
# A short table is printed last; logs and the figures come back under $OUT.
# Environment: OUT (default results/gpu/tp/check), BUILD (default build-gpu), STEPS (default
#   "build cpu gpu bench"; add "profile"), DEBS (as gpu-engine-check.sh), PROFILE_PRESET (default
#   llama2-13b).
# Run it: the device tool, kind nvidia-h200-x2: `bash scripts/gpu-tp-check.sh` (OUT=$OUT/tp).
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-results/gpu/tp/check}
BUILD=${BUILD:-build-gpu}
STEPS=" ${STEPS:-build cpu gpu bench} "
want() { [[ "$STEPS" == *" $1 "* ]]; }
mkdir -p "$OUT"
declare -a TABLE=()
FAILED=0

STEP_DIR=$OUT STEP_WIDTH=12
. scripts/lib/step.sh  # step NAME TIMEOUT_S CMD...: output to $OUT/NAME.log, a row in TABLE

[ -f GPU_COMMIT ] && export SERVELAB_COMMIT=$(cat GPU_COMMIT)
{ nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv; nvidia-smi topo -m
  echo "NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"; ls /usr/local/cuda/lib64/libnccl.so* 2>/dev/null
  echo "commit ${SERVELAB_COMMIT:-$(git rev-parse HEAD 2>/dev/null)}"; date -u; } >"$OUT/environment.txt" 2>&1 || true

BUILT=1
if want build; then
  step build 480 env OUT="$OUT/build" BUILD="$BUILD" STEPS=build PACK=0 \
    BUILD_TARGETS="servelab test_cuda_backend test_cuda_backend_gpu" bash scripts/gpu-engine-check.sh || BUILT=0
  grep -q "NCCL ON" "$OUT/build/configure.log" 2>/dev/null || TABLE+=("configure: NCCL not found, TP tests will skip")
fi
[ -x "$BUILD/test_cuda_backend_gpu" ] || BUILT=0
if [ $BUILT = 1 ] && want cpu; then
  step cpu_tests 120 "$BUILD/test_cuda_backend" --gtest_filter='Tp*:*TpPlan*'
fi
if [ $BUILT = 1 ] && want gpu; then
  step gpu_tests 300 "$BUILD/test_cuda_backend_gpu" --gtest_filter='*TpGpu*:-*Bench*' \
    --gtest_output="json:$OUT/gpu_tests.json"
  n_skip=$(grep -oE '^\[  SKIPPED \] [0-9]+ test' "$OUT/gpu_tests.log" | grep -oE '[0-9]+' | head -1)
  n_pass=$(grep -oE '^\[  PASSED  \] [0-9]+ test' "$OUT/gpu_tests.log" | grep -oE '[0-9]+' | head -1)
  TABLE+=("$(printf '%-12s %s passed, %s skipped' gpu_count "${n_pass:-0}" "${n_skip:-0}")")
  grep -E "rel error|greedy tokens agreed" "$OUT/gpu_tests.log" >"$OUT/gpu_summary.txt" 2>/dev/null
fi
if [ $BUILT = 1 ] && want bench; then
  SERVELAB_GPU_BENCH=1 step bench 420 "$BUILD/test_cuda_backend_gpu" --gtest_filter='TpGpuBench*'
  grep -E "^tp-allreduce|NCCL" "$OUT/bench.log" | head -20 >"$OUT/allreduce.txt"
  grep -E "^tp-decode|^llama" "$OUT/bench.log" >"$OUT/decode.txt"
fi
if [ $BUILT = 1 ] && want profile; then
  step profile 400 "$BUILD/servelab" profile --backend cuda --preset "${PROFILE_PRESET:-llama2-13b}" \
    --tensor-parallel 2 --batch 1,32,128 --json "$OUT/profile-tp2.json"
fi

echo
echo "== gpu-tp-check ($(sed -n 2p "$OUT/environment.txt" 2>/dev/null)) =="
printf '%s\n' "${TABLE[@]}"
[ -f "$OUT/gpu_summary.txt" ] && cat "$OUT/gpu_summary.txt"
[ -f "$OUT/allreduce.txt" ] && cat "$OUT/allreduce.txt"
[ -f "$OUT/decode.txt" ] && cat "$OUT/decode.txt"
exit $FAILED
