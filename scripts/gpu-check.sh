#!/usr/bin/env bash
# GPU check, meant for one device call on the GPU machine (an H100/H200, sm_90a):
#   configure (-DCMAKE_CUDA_ARCHITECTURES=90a, ptxas resource report on), build, run the CPU
#   reference tests, the GPU tests (ctest -L gpu, and test_kernels_gpu directly), compute-sanitizer
#   memcheck over the kernel tests, then kernel_bench. Logs and JSON go under $OUT (default
#   results/runs/gpu-check); a short table is printed last.
# Environment: OUT, BUILD (build dir, default build-gpu), QUICK=1 (fewer bench shapes),
#   DEBS_DIR (a folder of carried Debian .deb files, unpacked into a prefix when the machine's
#   image lacks the build dependencies: GTest, yaml-cpp, CLI11, Boost, nlohmann_json, OpenBLAS).
# Exit status: 0 when every step passed, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/runs/gpu-check}
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

if step configure 300 cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90a -DSERVELAB_PTXAS_VERBOSE=ON "${PREFIX_ARGS[@]}" &&
  step build 600 cmake --build "$BUILD" -j"$JOBS"; then
  grep -E "ptxas info|spill" "$OUT/build.log" >"$OUT/ptxas.txt" || true
  step cpu_ref_tests 120 "$BUILD/test_kernels"
  step gpu_kernel_tests 300 "$BUILD/test_kernels_gpu" --gtest_output="json:$OUT/gpu_kernel_tests.json"
  step ctest_gpu 300 ctest --test-dir "$BUILD" -L gpu --output-on-failure
  if command -v compute-sanitizer >/dev/null; then
    step memcheck 600 compute-sanitizer --tool memcheck --error-exitcode 3 "$BUILD/test_kernels_gpu"
  else
    TABLE+=("$(printf '%-22s %-6s' memcheck 'n/a (no compute-sanitizer)')")
  fi
  BENCH_ARGS=(--json "$OUT/kernel_bench.json" --commit "$(git rev-parse HEAD 2>/dev/null || echo unknown)")
  [ "${QUICK:-0}" = 1 ] && BENCH_ARGS+=(--quick)
  step kernel_bench 600 "$BUILD/kernels/kernel_bench" "${BENCH_ARGS[@]}"
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
