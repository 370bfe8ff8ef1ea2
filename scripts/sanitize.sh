#!/usr/bin/env bash
# Runs the tests under the sanitizers (CMakePresets.json):
#   asan: AddressSanitizer + UBSan (leaks included) over the whole suite, or the folders given
#   tsan: ThreadSanitizer over the threaded parts: the thread pool, CPU attention and backend,
#         the engine, the in-process and HTTP drivers, the server's io threads, HTTP sessions,
#         engine thread and aborts, and the threaded checkpoint load and random init
#         (test_backend, test_engine, test_loadgen, test_server, test_model)
# Usage:
#   bash scripts/sanitize.sh                 # asan (whole suite) then tsan
#   bash scripts/sanitize.sh asan            # whole suite under ASan+UBSan
#   bash scripts/sanitize.sh asan loadgen model cli   # only test_<folder> for those folders
#   bash scripts/sanitize.sh tsan
# Exits non-zero on the first sanitizer report or failing test. GPU tests are left out.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${SANITIZE_JOBS:-2}
which=${1:-all}; [ $# -gt 0 ] && shift
folders=("$@")
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
filter='-*Gpu*:*GPU*'

run_asan() {
  cmake --preset asan > /dev/null
  if [ ${#folders[@]} -eq 0 ]; then
    cmake --build build-asan -j"$jobs" --target servelab servelab_tests
    echo "== ASan+UBSan: servelab_tests"
    build-asan/servelab_tests --gtest_filter="$filter" --gtest_brief=1
  else
    targets=(servelab); for f in "${folders[@]}"; do targets+=("test_$f"); done
    cmake --build build-asan -j"$jobs" --target "${targets[@]}"
    for f in "${folders[@]}"; do
      echo "== ASan+UBSan: test_$f"
      build-asan/test_"$f" --gtest_filter="$filter" --gtest_brief=1
    done
  fi
}

run_tsan() {
  cmake --preset tsan > /dev/null
  cmake --build build-tsan -j"$jobs" --target test_backend test_engine test_loadgen test_server test_model
  for t in backend engine loadgen server model; do
    echo "== TSan: test_$t"
    build-tsan/test_"$t" --gtest_filter="$filter" --gtest_brief=1
  done
}

case "$which" in
  asan) run_asan ;;
  tsan) run_tsan ;;
  all) run_asan; run_tsan ;;
  *) echo "usage: scripts/sanitize.sh [asan|tsan|all] [FOLDER...]" >&2; exit 2 ;;
esac
