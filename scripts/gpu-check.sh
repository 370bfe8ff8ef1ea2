#!/usr/bin/env bash
# GPU check, meant for one device call on the GPU machine (an H100/H200, sm_90a):
#   configure (-DCMAKE_CUDA_ARCHITECTURES=90a, ptxas resource report on; when the full configure
#   fails, e.g. no OpenBLAS on the image, again with -DSERVELAB_KERNELS_ONLY=ON), build the kernel
#   targets, run the CPU reference tests, the GPU tests (test_kernels_gpu, verbose), compute-sanitizer
#   memcheck over them, kernel_bench, and the PyTorch peers (scripts/gpu-bench-peers.py), joined
#   into benchmarks.json. A short table is printed last.
# Output: $OUT (default results/runs/gpu-check) gets at most 8 files: logs.tgz (every log),
#   kernel_bench.json, peers.json, benchmarks.json, gpu_kernel_tests.json, summary.txt (and with
#   PEERS_AROUND=1 peers_before.json, with NCU_SOURCE=1 ncu_stalls.txt).
# A device call is capped at 10 minutes: STEPS picks steps (default all of
#   "build tests memcheck bench peers"; "ctest" builds everything and runs ctest -L gpu).
# Environment: OUT, BUILD (build dir, default build-gpu), QUICK=1 (fewer bench shapes), SWEEP=1
#   (kernel_bench --sweep: decode split policies), DECODE_ONLY=1 (kernel_bench and the peers time
#   decode attention only), PREFILL_ONLY=1 (kernel_bench and the peers time the ceilings and
#   prefill attention only; the prefill kernel's SASS instruction counts go to the logs), COMMIT,
#   GTEST_FILTER (for the GPU tests and memcheck), MEMCHECK_FILTER (memcheck's own, default GTEST_FILTER),
#   BACKEND_GPU=1 (also build test_cuda_backend_gpu and run it, filter BACKEND_FILTER, default
#   '-*Bench*:*Hf*', beside the kernel GPU tests: the engine path runs the dispatched kernels),
#   NCU_KERNEL (a regex: ncu on kernel_bench --prefill-only --quick, NCU_SKIP / NCU_COUNT launches,
#   NCU_TIMEOUT, NCU_ARGS: more ncu arguments; runs after the peers), NCU_SOURCE=1 (that ncu run with --set full
#   --import-source yes and PC sampling every 2^(5+NCU_SAMPLING) cycles (default 3), saved as a report; the per-SASS-line
#   stall profile is condensed by scripts/ncu-source-stalls.py into ncu_stalls.txt, regions from NCU_SRC, default
#   kernels/attention_prefill_wgmma_ws.cuh; NCU_KERNEL2 / NCU_SKIP2 / NCU_ARGS2: a second such profile, ncu_stalls2.txt), PEERS_AROUND=1 (the peers also run before kernel_bench: peers_before.json;
#   the prefill rows are then read against the mean of the SDPA runs before and after), TESTS_TIMEOUT / MEMCHECK_TIMEOUT (seconds, default 300 / 200; a timed-out test step, e.g. a
#   hung kernel, skips memcheck and the benchmarks so the logs still come back), DEBS_DIR (a folder of carried Debian .deb files,
#   unpacked into a prefix when the machine's image lacks the build dependencies; recipe:
#     mkdir -p shared/debs && cd shared/debs && apt-get download libgtest-dev libyaml-cpp-dev \
#       libyaml-cpp0.7 libcli11-dev nlohmann-json3-dev libboost-dev libopenblas-dev \
#       libopenblas0-pthread libopenblas-pthread-dev
#   then run with DEBS_DIR=shared/debs).
# Exit status: 0 when every step passed, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/runs/gpu-check}
STEPS=" ${STEPS:-build tests memcheck bench peers} "
want() { [[ "$STEPS" == *" $1 "* ]]; }
COMMIT=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
BUILD=${BUILD:-build-gpu}
JOBS=$(nproc 2>/dev/null || echo 4)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOGS=$(mktemp -d)  # every log; packed into $OUT/logs.tgz at the end (the device returns <= 8 files)
declare -a TABLE=()
FAILED=0

STEP_DIR=$LOGS STEP_WIDTH=22 STEP_FAIL_HINT=" (see logs.tgz:%s.log)"
. scripts/lib/step.sh  # step NAME TIMEOUT_S CMD...: output to $LOGS/NAME.log, a row in TABLE

{ date -u; nvidia-smi; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.sm --format=csv
  nvcc --version; cmake --version; python3 -c 'import torch; print("torch", torch.__version__)'
  echo "commit $COMMIT"; } >"$LOGS/environment.txt" 2>&1 || true

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
  CFG=(-S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a
       -DSERVELAB_PTXAS_VERBOSE=ON "${PREFIX_ARGS[@]}")
  # The full project first (tells whether the engine's dependencies are on the image); without
  # them, only the kernels, their references and their tests.
  if ! step configure 300 cmake "${CFG[@]}" -DSERVELAB_KERNELS_ONLY=OFF; then
    grep -E "Could NOT find|Could not find|not found|Error" "$LOGS/configure.log" | head -5
    rm -rf "$BUILD"
    step configure_kernels_only 300 cmake "${CFG[@]}" -DSERVELAB_KERNELS_ONLY=ON || BUILT=0
  fi
  TARGETS=(test_kernels test_kernels_gpu kernel_bench)
  [ "${BACKEND_GPU:-0}" = 1 ] && TARGETS+=(test_cuda_backend_gpu)
  [ $BUILT = 1 ] && { step build_kernels 500 cmake --build "$BUILD" -j"$JOBS" --target "${TARGETS[@]}" &&
    { ! want ctest || step build_all 400 cmake --build "$BUILD" -j"$JOBS"; } || BUILT=0; }
  grep -E "ptxas info|spill|Compiling entry" "$LOGS/build_kernels.log" >"$LOGS/ptxas.txt" 2>/dev/null || true
  obj=$(find "$BUILD" -name 'attention_prefill_wgmma*.cu.o' | sort)
  if [ -n "$obj" ] && command -v cuobjdump >/dev/null; then  # wgmma shows as HGMMA; mma.sync as HMMA
    for o in $obj; do cuobjdump -sass "$o"; done >"$LOGS/sass_prefill_wgmma.txt" 2>&1
    echo "prefill wgmma SASS: $(grep -c HGMMA "$LOGS/sass_prefill_wgmma.txt") HGMMA, $(grep -c 'HMMA' "$LOGS/sass_prefill_wgmma.txt") HMMA, $(grep -cE 'LDL|STL' "$LOGS/sass_prefill_wgmma.txt") LDL/STL"
  fi
fi
PEER_ARGS=()
[ "${QUICK:-0}" = 1 ] && PEER_ARGS+=(--quick)
[ "${DECODE_ONLY:-0}" = 1 ] && PEER_ARGS+=(--decode-only)
[ "${PREFILL_ONLY:-0}" = 1 ] && PEER_ARGS+=(--prefill-only)
if [ $BUILT = 1 ]; then
  HUNG=0
  if want tests; then
    step cpu_ref_tests 120 "$BUILD/test_kernels"
    BACKEND_PID=
    if [ "${BACKEND_GPU:-0}" = 1 ]; then  # beside the kernel tests (their CPU references take the time)
      timeout "${TESTS_TIMEOUT:-300}" "$BUILD/test_cuda_backend_gpu" --gtest_filter="${BACKEND_FILTER:--*Bench*:*Hf*}" \
        >"$LOGS/backend_gpu_tests.log" 2>&1 &
      BACKEND_PID=$!
    fi
    step gpu_kernel_tests "${TESTS_TIMEOUT:-300}" "$BUILD/test_kernels_gpu" --gtest_print_time=1 ${GTEST_FILTER:+--gtest_filter=$GTEST_FILTER} \
      --gtest_output="json:$OUT/gpu_kernel_tests.json"
    [ $? = 124 ] && HUNG=1
    if [ -n "$BACKEND_PID" ]; then
      wait "$BACKEND_PID"
      rc=$?
      [ $rc = 124 ] && HUNG=1
      summ=$(grep -E "^\[  (PASSED|FAILED) " "$LOGS/backend_gpu_tests.log" | tr '\n' ' ')
      TABLE+=("$(printf '%-22s %-5s %s' backend_gpu_tests "$([ $rc = 0 ] && echo ok || echo FAIL)" "rc $rc $summ")")
      [ $rc = 0 ] || { FAILED=1; tail -n 25 "$LOGS/backend_gpu_tests.log"; }
    fi
    grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|Failure|rel|Expected|Which is" "$LOGS/gpu_kernel_tests.log" | head -40
    n_skip=$(grep -oE '^\[  SKIPPED \] [0-9]+ test' "$LOGS/gpu_kernel_tests.log" | grep -oE '[0-9]+' | head -1)
    if [ "${n_skip:-0}" -gt 0 ]; then  # skipping means no device was seen: not a pass on a GPU machine
      TABLE+=("$(printf '%-22s %-6s %s' gpu_tests_skipped FAIL "$n_skip skipped (no CUDA device seen?)")")
      FAILED=1
    fi
  fi
  want ctest && step ctest_gpu 300 ctest --test-dir "$BUILD" -L gpu --output-on-failure
  if [ $HUNG = 1 ]; then
    TABLE+=("$(printf '%-22s %-6s' skipped 'memcheck and bench: a test step timed out')")
    STEPS=" "
  fi
  if want memcheck; then
    if command -v compute-sanitizer >/dev/null; then
      MC_FILTER=${MEMCHECK_FILTER:-${GTEST_FILTER:-}}
      step memcheck "${MEMCHECK_TIMEOUT:-200}" compute-sanitizer --tool memcheck --error-exitcode 3 --print-limit 20 "$BUILD/test_kernels_gpu" \
        ${MC_FILTER:+--gtest_filter=$MC_FILTER}
      grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED) " "$LOGS/memcheck.log" | head -5
    else
      TABLE+=("$(printf '%-22s %-6s' memcheck 'n/a (no compute-sanitizer)')")
    fi
  fi
  if want bench && want peers && [ "${PEERS_AROUND:-0}" = 1 ]; then  # the SDPA peer's figure moves between runs
    step peers_before 400 python3 scripts/gpu-bench-peers.py --out "$OUT/peers_before.json" "${PEER_ARGS[@]}"
  fi
  if want bench; then
    BENCH_ARGS=(--json "$OUT/kernel_bench.json" --commit "$COMMIT")
    [ "${QUICK:-0}" = 1 ] && BENCH_ARGS+=(--quick)
    [ "${SWEEP:-0}" = 1 ] && BENCH_ARGS+=(--sweep)
    [ "${DECODE_ONLY:-0}" = 1 ] && BENCH_ARGS+=(--decode-only)
    [ "${PREFILL_ONLY:-0}" = 1 ] && BENCH_ARGS+=(--prefill-only)
    step kernel_bench 400 "$BUILD/kernel_bench" "${BENCH_ARGS[@]}"
  fi
fi
if want peers; then
  step peers 400 python3 scripts/gpu-bench-peers.py --out "$OUT/peers.json" "${PEER_ARGS[@]}"
  if [ -f "$OUT/kernel_bench.json" ] && [ -f "$OUT/peers.json" ]; then
    BEFORE=()
    [ -f "$OUT/peers_before.json" ] && BEFORE=(--peers-before "$OUT/peers_before.json")
    python3 scripts/gpu-bench-peers.py --combine "$OUT/kernel_bench.json" "$OUT/peers.json" "${BEFORE[@]}" \
      --benchmarks "$OUT/benchmarks.json" --commit "$COMMIT" >"$LOGS/combine.log" 2>&1 || FAILED=1
  fi
fi
# ncu_source TAG KERNEL_REGEX SKIP EXTRA_ARGS: one launch, --set full with source (the build has -lineinfo), PC sampling;
# the per-SASS-line stall profile condensed by scripts/ncu-source-stalls.py into $OUT/ncu_stalls$TAG.txt.
ncu_source() {
  local tag=$1 kernel=$2 skip=$3 extra=$4
  step "ncu$tag" "${NCU_TIMEOUT:-180}" ncu --kernel-name "regex:$kernel" --launch-skip "$skip" --launch-count 1 \
    --set full --import-source yes --warp-sampling-interval "${NCU_SAMPLING:-3}" -f -o "$LOGS/ncu_source$tag" $extra \
    "$BUILD/kernel_bench" --prefill-only --quick
  [ -f "$LOGS/ncu_source$tag.ncu-rep" ] || return 0
  ncu -i "$LOGS/ncu_source$tag.ncu-rep" --page details >"$LOGS/ncu_details$tag.txt" 2>&1
  ncu -i "$LOGS/ncu_source$tag.ncu-rep" --page source --csv --print-source sass >"$LOGS/ncu_source_sass$tag.csv" 2>&1
  python3 scripts/ncu-source-stalls.py --csv "$LOGS/ncu_source_sass$tag.csv" >"$OUT/ncu_stalls$tag.txt" 2>&1
  tail -n 45 "$OUT/ncu_stalls$tag.txt"
  # With source lines too, where ncu's Python interface (extras/python/ncu_report.py) is found.
  NCU_PY=$(find /opt /usr/local -name ncu_report.py -path '*extras/python*' 2>/dev/null | head -1)
  if [ -n "$NCU_PY" ]; then
    PYTHONPATH="$(dirname "$NCU_PY"):${PYTHONPATH:-}" python3 scripts/ncu-source-stalls.py "$LOGS/ncu_source$tag.ncu-rep" \
      --src "${NCU_SRC:-kernels/attention_prefill_wgmma_ws.cuh}" --json "$LOGS/ncu_stalls$tag.json" >>"$OUT/ncu_stalls$tag.txt" 2>&1
  fi
  [ "$(stat -c %s "$LOGS/ncu_source$tag.ncu-rep")" -gt 12000000 ] && rm -f "$LOGS/ncu_source$tag.ncu-rep"  # logs.tgz must come back
  return 0
}
if [ $BUILT = 1 ] && [ -n "${NCU_KERNEL:-}" ] && command -v ncu >/dev/null; then  # one launch of the named kernel(s), after the validation ones
  if [ "${NCU_SOURCE:-0}" = 1 ]; then  # where the warps stall, per SASS line
    ncu_source "" "$NCU_KERNEL" "${NCU_SKIP:-2}" "${NCU_ARGS:-}"
    # NCU_KERNEL2 / NCU_SKIP2 / NCU_ARGS2 (ninth pass): a second profile the same way (ncu_stalls2.txt), e.g. one
    # instance of the ws kernel picked by its template arguments with NCU_ARGS2='--kernel-name-base demangled'.
    [ -n "${NCU_KERNEL2:-}" ] && ncu_source 2 "$NCU_KERNEL2" "${NCU_SKIP2:-2}" "${NCU_ARGS2:-}"
  else
    step ncu "${NCU_TIMEOUT:-120}" ncu --kernel-name "regex:$NCU_KERNEL" --launch-skip "${NCU_SKIP:-2}" --launch-count "${NCU_COUNT:-1}" \
      --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats \
      --section InstructionStats --section ComputeWorkloadAnalysis ${NCU_ARGS:-} "$BUILD/kernel_bench" --prefill-only --quick
  fi
fi

tar czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null
{
  if [ -f "$LOGS/combine.log" ]; then
    cat "$LOGS/combine.log"
  elif [ -f "$OUT/kernel_bench.json" ]; then
    echo "== kernel_bench figures (value, unit, ratio to ceiling) =="
    python3 - "$OUT/kernel_bench.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    ratio = f"{r['ratio']:.2f} of {r['peer_or_ceiling']}" if r["ratio"] else ""
    print(f"{r['name']:<28} {r['shape']:<34} {r['value']:>9.1f} {r['unit']:<8} {ratio}")
PY
  fi
  echo
  echo "== gpu-check steps (logs in $OUT/logs.tgz) =="
  printf '%s\n' "${TABLE[@]}"
} | tee "$OUT/summary.txt"
rm -rf "$LOGS"
exit $FAILED
