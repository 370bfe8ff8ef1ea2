#!/usr/bin/env bash
# The cuda backend on the GPU machine, in one device call: configure (-DCMAKE_CUDA_ARCHITECTURES=90a),
# build servelab and the backend tests (-j16), run them, check logits against Hugging Face
# transformers on synthesized qwen2.5-0.5b / llama3.2-1b folders, then a short end-to-end
# `servelab run` of scenarios/gpu-llama2-7b.yaml. Logs, summary.json and records come back under
# $OUT; a short table is printed last.
# Environment: OUT (default results/runs/gpu-engine-check), BUILD (default build-gpu),
#   STEPS (default "build tests hf bench run"; bench: engine_bench --quick (llama2-7b steps); also
#   serve: `servelab serve --backend cuda --gpu-memory-utilization 0.85` driven over HTTP by
#   `servelab bench` for 20 s; validate: `results/sim-validation/run.sh gpu` (cuda profile of
#   llama2-7b, then validate-sim against it); qwen: `results/sim-validation/run.sh qwen` on this
#   machine's CPUs (the cpu backend's profile and validate-sim, N_REQUESTS 16, REAL_REPEATS 2, under
#   $OUT/qwen-cpu; QWEN_LIMIT seconds, default 240); http: scripts/bench-http-driver.sh on this machine's CPUs;
#   memcheck: compute-sanitizer over the backend's GPU tests),
#   DEBS (folder of Debian .debs unpacked into a prefix
#   when the image lacks OpenBLAS or yaml-cpp: libopenblas0-pthread libopenblas-pthread-dev
#   libopenblas-dev libopenblas0 libgfortran5 libyaml-cpp0.7 libyaml-cpp-dev, fetched with
#   `apt-get download` on a machine with network), RUN_SET (extra --set options for the sweep),
#   BUILD_TARGETS (default "servelab test_cuda_backend test_cuda_backend_gpu"), TESTS_FILTER (gtest
#   filter of the GPU tests), SCENARIO (default scenarios/gpu-llama2-7b.yaml), RUN_LIMIT (seconds for the sweep, default 420), PACK=0 (leave $OUT unpacked; by default all of
#   it but summary.json and environment.txt goes into gpu-engine-check.tgz).
# Exit status: 0 when every step passed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/runs/gpu-engine-check}
BUILD=${BUILD:-build-gpu}
STEPS=" ${STEPS:-build tests hf bench run} "
want() { [[ "$STEPS" == *" $1 "* ]]; }
JOBS=$(nproc 2>/dev/null || echo 8)
mkdir -p "$OUT"
declare -a TABLE=()
FAILED=0

STEP_DIR=$OUT
. scripts/lib/step.sh  # step NAME TIMEOUT_S CMD...: output to $OUT/NAME.log, a row in TABLE

# A copy outside its git checkout (the device tool's .gpu/NAME) names its commit in GPU_COMMIT.
[ -f GPU_COMMIT ] && export SERVELAB_COMMIT=$(cat GPU_COMMIT)
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nvcc --version | tail -1; cmake --version | head -1
  echo "commit ${SERVELAB_COMMIT:-$(git rev-parse HEAD 2>/dev/null)}"; date -u; } >"$OUT/environment.txt" 2>&1 || true

# Build dependencies the image may lack: unpack the carried .debs into a prefix.
CFG=(-S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a)
command -v ninja >/dev/null && CFG+=(-G Ninja)
have_lib() { ldconfig -p 2>/dev/null | grep -q "$1"; }
if [ -n "${DEBS:-}" ] && [ -d "$DEBS" ]; then
  PREFIX="$PWD/$BUILD-deps"
  mkdir -p "$PREFIX"
  if ! have_lib libopenblas; then
    for d in "$DEBS"/*openblas*.deb "$DEBS"/libgfortran*.deb; do [ -f "$d" ] && dpkg -x "$d" "$PREFIX"; done
    OB=$(find "$PREFIX" -name 'libopenblas.so*' | head -1)
    CB=$(dirname "$(find "$PREFIX" -name cblas.h | head -1)")
    CFG+=(-DBLAS_LIBRARIES="$OB" -DCBLAS_INCLUDE_DIR="$CB")
    echo "OpenBLAS from carried debs: $OB" >>"$OUT/environment.txt"
  fi
  if ! have_lib libyaml-cpp; then
    for d in "$DEBS"/*yaml-cpp*.deb; do [ -f "$d" ] && dpkg -x "$d" "$PREFIX"; done
    CFG+=(-DCMAKE_PREFIX_PATH="$PREFIX/usr")
    echo "yaml-cpp from carried debs" >>"$OUT/environment.txt"
  fi
  export LD_LIBRARY_PATH="$(find "$PREFIX" -name '*.so*' -printf '%h\n' 2>/dev/null | sort -u | paste -sd:):${LD_LIBRARY_PATH:-}"
fi

BUILT=1
if want build; then
  step configure 200 cmake "${CFG[@]}" &&
    step build 420 cmake --build "$BUILD" -j"$JOBS" --target ${BUILD_TARGETS:-servelab test_cuda_backend test_cuda_backend_gpu engine_bench} ||
    BUILT=0
fi
if [ $BUILT = 1 ] && want tests; then
  [ -x "$BUILD/test_cuda_backend" ] && step cpu_tests 120 "$BUILD/test_cuda_backend"
  step gpu_tests 300 "$BUILD/test_cuda_backend_gpu" --gtest_output="json:$OUT/gpu_tests.json" \
    --gtest_filter="${TESTS_FILTER:-*}"
  n_skip=$(grep -oE '^\[  SKIPPED \] [0-9]+ test' "$OUT/gpu_tests.log" | grep -oE '[0-9]+' | head -1)
  n_pass=$(grep -oE '^\[  PASSED  \] [0-9]+ test' "$OUT/gpu_tests.log" | grep -oE '[0-9]+' | head -1)
  TABLE+=("$(printf '%-16s %s passed, %s skipped' gpu_test_count "${n_pass:-0}" "${n_skip:-0}")")
fi
if [ $BUILT = 1 ] && want memcheck; then  # compute-sanitizer over the backend's GPU tests
  step memcheck 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$BUILD/test_cuda_backend_gpu" \
    --gtest_filter='-*Bench*:*Hf*'
  grep -E "ERROR SUMMARY" "$OUT/memcheck.log" | tail -1 | sed 's/^/  memcheck: /' >"$OUT/memcheck_summary.txt"
fi
if [ $BUILT = 1 ] && want hf; then
  W="$BUILD/hf"
  mkdir -p "$W"
  REFS=""
  for p in qwen2.5-0.5b llama3.2-1b; do
    step "synth_$p" 240 "$BUILD/servelab" model synth --preset "$p" --out "$W/$p" --seed 5 &&
      step "hf_$p" 240 python3 scripts/gpu-hf-check.py "$W/$p" "$W/$p.hf.json" &&
      REFS="$REFS${REFS:+:}$W/$p.hf.json"
  done
  [ -n "$REFS" ] && SERVELAB_HF_REFERENCE="$REFS" step hf_match 240 "$BUILD/test_cuda_backend_gpu" --gtest_filter='*Hf*'
  grep "rel error" "$OUT/hf_match.log" 2>/dev/null | sed 's/^/  /' >"$OUT/hf_summary.txt"
fi
if [ $BUILT = 1 ] && want bench; then
  step bench 240 "$BUILD/engine_bench" --quick --json "$OUT/engine_bench.json"
  grep -E "decode|prefill" "$OUT/bench.log" | head -40 >"$OUT/bench_summary.txt"
fi
if [ $BUILT = 1 ] && want run; then
  RUN_ARGS=(${RUN_SET:-})
  if grep -q 'FAILED.*Graphs' "$OUT/gpu_tests.log" 2>/dev/null; then  # graphs wrong here: measure eagerly
    RUN_ARGS+=(--set backend.cuda_graphs=false)
    TABLE+=("run: CUDA graph tests failed, sweep with cuda_graphs off")
  fi
  step run "${RUN_LIMIT:-420}" "$BUILD/servelab" run "${SCENARIO:-scenarios/gpu-llama2-7b.yaml}" --out "$OUT/run" \
    --no-plots "${RUN_ARGS[@]}"
  [ -f "$OUT/run/summary.json" ] && cp "$OUT/run/summary.json" "$OUT/summary.json"
fi

if [ $BUILT = 1 ] && want serve; then
  step serve 180 env BIN="$BUILD/servelab" OUT="$OUT/serve" bash scripts/gpu-serve-check.sh
fi
if [ $BUILT = 1 ] && want validate; then
  step validate "${VALIDATE_LIMIT:-400}" env BIN="$BUILD/servelab" OUT="$OUT/sim-validation" bash results/sim-validation/run.sh gpu
fi
if [ $BUILT = 1 ] && want qwen; then
  step qwen "${QWEN_LIMIT:-240}" env BIN="$BUILD/servelab" QWEN_OUT="$OUT/qwen-cpu" QWEN_PROFILE="$OUT/qwen-cpu/profile.json" \
    N_REQUESTS="${QWEN_REQUESTS:-16}" REAL_REPEATS=2 bash results/sim-validation/run.sh qwen
fi
if [ $BUILT = 1 ] && want http; then
  step http 200 env BIN="$BUILD/servelab" OUT="$OUT/http-driver" bash scripts/bench-http-driver.sh
fi

echo
echo "== gpu-engine-check ($(head -1 "$OUT/environment.txt" 2>/dev/null; sed -n 2p "$OUT/environment.txt")) =="
printf '%s\n' "${TABLE[@]}"
[ -f "$OUT/hf_summary.txt" ] && cat "$OUT/hf_summary.txt"
[ -f "$OUT/memcheck_summary.txt" ] && cat "$OUT/memcheck_summary.txt"
[ -f "$OUT/bench_summary.txt" ] && cat "$OUT/bench_summary.txt"
[ -f "$OUT/run.log" ] && tail -n 30 "$OUT/run.log"
[ -f "$OUT/serve.log" ] && grep -E "KV cache|throughput|TTFT|failed" "$OUT/serve.log" | head -8
[ -f "$OUT/validate.log" ] && tail -n 20 "$OUT/validate.log"
[ -f "$OUT/http.log" ] && tail -n 14 "$OUT/http.log"
# The device tool brings back a few files only: everything else travels in one archive.
if [ "${PACK:-1}" = 1 ]; then
  tar czf /tmp/gpu-engine-check.tgz -C "$OUT" --exclude='*.tgz' . 2>/dev/null &&
    find "$OUT" -mindepth 1 -maxdepth 1 ! -name summary.json ! -name environment.txt -exec rm -rf {} + &&
    mv /tmp/gpu-engine-check.tgz "$OUT/"
fi
exit $FAILED
