#!/usr/bin/env bash
# GPU check, meant for one device call on the GPU machine (an H100/H200, sm_90a):
#   configure (-DCMAKE_CUDA_ARCHITECTURES=90a, ptxas resource report on), build, run the CPU
#   reference tests, the GPU tests (ctest -L gpu, and test_kernels_gpu directly), compute-sanitizer
#   memcheck over the kernel tests, then kernel_bench. Logs and JSON go under $OUT (default
#   results/runs/gpu-check); a short table is printed last.
# A device call is capped at 10 minutes: STEPS picks steps (default all of
#   "build tests ctest memcheck bench"); the build folder persists while the machine stays warm, so
#   e.g. STEPS="build tests" then STEPS="memcheck bench" in a second call.
# Environment: OUT, BUILD (build dir, default build-gpu), QUICK=1 (fewer bench shapes), COMMIT,
#   DEBS_DIR (a folder of carried Debian .deb files, unpacked into a prefix when the machine's
#   image lacks the build dependencies: GTest, yaml-cpp, CLI11, Boost, nlohmann_json, OpenBLAS).
#   To carry them (the GPU machine has no network), on this machine:
#     mkdir -p shared/debs && cd shared/debs && apt-get download libgtest-dev libyaml-cpp-dev \
#       libyaml-cpp0.7 libcli11-dev nlohmann-json3-dev libboost-dev libopenblas-dev \
#       libopenblas0-pthread libopenblas-pthread-dev
#   then run with DEBS_DIR=shared/debs. (Whether the image already has them is the first thing to
#   check: configure.log says which find_package failed.)
# Exit status: 0 when every step passed, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/runs/gpu-check}
STEPS=" ${STEPS:-build tests ctest memcheck bench} "
want() { [[ "$STEPS" == *" $1 "* ]]; }
COMMIT=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
BUILD=${BUILD:-build-gpu}
JOBS=$(nproc 2>/dev/null || echo 4)
mkdir -p "$OUT"
declare -a TABLE=()
FAILED=0

# step NAME TIMEOUT_S CMD...: runs CMD with its output in $OUT/NAME.log, records status and time.
step() {
  local name=$1 limit=$2
  shift 2
  local t0 rc
  t0=$(date +%s)
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  local dt=$(($(date +%s) - t0))
  if [ $rc -eq 0 ]; then
    TABLE+=("$(printf '%-22s %-6s %5ss' "$name" ok "$dt")")
  else
    TABLE+=("$(printf '%-22s %-6s %5ss  (rc %s, see %s)' "$name" FAIL "$dt" "$rc" "$OUT/$name.log")")
    FAILED=1
    tail -n 30 "$OUT/$name.log"
  fi
  return $rc
}

{ nvidia-smi; nvcc --version; cmake --version; } >"$OUT/environment.txt" 2>&1 || true
git rev-parse HEAD >>"$OUT/environment.txt" 2>/dev/null || true

PREFIX_ARGS=()
if [ -n "${DEBS_DIR:-}" ] && ls "$DEBS_DIR"/*.deb >/dev/null 2>&1; then
  PREFIX="$PWD/$BUILD-deps"
  mkdir -p "$PREFIX"
  for d in "$DEBS_DIR"/*.deb; do dpkg -x "$d" "$PREFIX"; done
  PREFIX_ARGS=(-DCMAKE_PREFIX_PATH="$PREFIX/usr;$PREFIX/usr/lib/x86_64-linux-gnu/cmake")
  export LD_LIBRARY_PATH="$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
fi
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)

BUILT=1
if want build; then
  # The kernel targets first (what the later steps need), then everything (servelab_tests for ctest).
  step configure 300 cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90a -DSERVELAB_PTXAS_VERBOSE=ON "${PREFIX_ARGS[@]}" &&
    step build_kernels 400 cmake --build "$BUILD" -j"$JOBS" --target test_kernels test_kernels_gpu kernel_bench &&
    { ! want ctest || step build_all 400 cmake --build "$BUILD" -j"$JOBS"; } || BUILT=0
  grep -E "ptxas info|spill|Compiling entry" "$OUT/build_kernels.log" >"$OUT/ptxas.txt" 2>/dev/null || true
fi
if [ $BUILT = 1 ]; then
  if want tests; then
    step cpu_ref_tests 120 "$BUILD/test_kernels"
    step gpu_kernel_tests 300 "$BUILD/test_kernels_gpu" --gtest_output="json:$OUT/gpu_kernel_tests.json"
    n_skip=$(grep -oE '^\[  SKIPPED \] [0-9]+ test' "$OUT/gpu_kernel_tests.log" | grep -oE '[0-9]+' | head -1)
    if [ "${n_skip:-0}" -gt 0 ]; then  # skipping means no device was seen: not a pass on a GPU machine
      TABLE+=("$(printf '%-22s %-6s %s' gpu_tests_skipped FAIL "$n_skip skipped (no CUDA device seen?)")")
      FAILED=1
    fi
  fi
  want ctest && step ctest_gpu 300 ctest --test-dir "$BUILD" -L gpu --output-on-failure
  if want memcheck; then
    if command -v compute-sanitizer >/dev/null; then
      step memcheck 400 compute-sanitizer --tool memcheck --error-exitcode 3 "$BUILD/test_kernels_gpu"
    else
      TABLE+=("$(printf '%-22s %-6s' memcheck 'n/a (no compute-sanitizer)')")
    fi
  fi
  if want bench; then
    BENCH_ARGS=(--json "$OUT/kernel_bench.json" --commit "$COMMIT")
    [ "${QUICK:-0}" = 1 ] && BENCH_ARGS+=(--quick)
    step kernel_bench 400 "$BUILD/kernels/kernel_bench" "${BENCH_ARGS[@]}"
  fi
elif grep -qE "Could NOT find|Could not find|not found" "$OUT/configure.log" 2>/dev/null; then
  echo "hint: build dependencies missing on this machine; see DEBS_DIR at the top of scripts/gpu-check.sh"
fi

echo
echo "== kernel_bench figures (value, unit, ratio to ceiling) =="
if [ -f "$OUT/kernel_bench.json" ] && command -v python3 >/dev/null; then
  python3 - "$OUT/kernel_bench.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    ratio = f"{r['ratio']:.2f} of {r['peer_or_ceiling']}" if r["ratio"] else ""
    print(f"{r['name']:<28} {r['shape']:<34} {r['value']:>9.1f} {r['unit']:<8} {ratio}")
PY
fi
echo
echo "== gpu-check steps (logs under $OUT) =="
printf '%s\n' "${TABLE[@]}"
exit $FAILED
