#!/usr/bin/env bash
# Flaky-test hunt: the suite's non-GPU cases run oversubscribed, each up to ROUNDS times, so that a
# case whose assertion leans on timing or on the machine's load fails here rather than once in CI.
#   bash scripts/stress-tests.sh              # build-asan (as scripts/test.sh builds it), 4 jobs a core, 3 rounds
#   JOBS=16 ROUNDS=5 bash scripts/stress-tests.sh -R Capacity   # extra args go to ctest
# Needs a built tree (BUILD, default build-asan: run scripts/test.sh first). Prints every failing
# case with its output (ctest --output-on-failure) and exits non-zero when any failed.
# Found this way (2026-11-24, 2-core VM, -j8, 2 rounds of 616 cases, 141 s): the validate-sim
# test's TPOT sensitivity came out negative (-0.12) under load: its sign is no longer asserted;
# after that, 3 rounds passed (211 s).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-asan}
[ -f "$BUILD/CTestTestfile.cmake" ] || { echo "stress-tests: $BUILD is not built (run scripts/test.sh first)" >&2; exit 2; }
source scripts/lib/sanitizer-env.sh
jobs=${JOBS:-$((4 * $(nproc)))}
rounds=${ROUNDS:-3}
echo "stress-tests: $BUILD, -j$jobs, up to $rounds rounds per case"
ctest --test-dir "$BUILD" -LE gpu -j"$jobs" --repeat until-fail:"$rounds" --output-on-failure "$@"
