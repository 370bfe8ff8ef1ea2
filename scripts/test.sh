#!/usr/bin/env bash
# The whole test suite, under AddressSanitizer + UndefinedBehaviorSanitizer + LeakSanitizer:
# installs dependencies, builds the asan preset (CMakePresets.json: gcc, the engine's libraries at
# -O1, the tests, CLI, loadgen, server and analysis at -O0, into build-asan/) with the CUDA
# kernels, backend and benchmarks when nvcc is
# there (compiled only: their GPU tests skip without a device), then runs every non-GPU test case
# (one ctest test per GoogleTest suite, its cases in one process of its folder's test_<folder>,
# spread over the cores; the CLI tests spawn the ASan build-asan/servelab). A sanitizer report (memory error, undefined
# behaviour, leak) fails its case. ASan/UBSan options: scripts/lib/sanitizer-env.sh.
# Extra args go to ctest (e.g. -R Scenario). The Release build (build/, scripts/build.sh) is the
# one scripts/setup.sh, the benchmarks and the GPU scripts use.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
source scripts/lib/sanitizer-env.sh
cmake --preset asan "${servelab_preset_args[@]}" > /dev/null
# What ctest runs: the CLI and every test_<folder> (with the CUDA kernels and backend when nvcc is
# there); not the all-in-one servelab_tests (`cmake --build build-asan` builds it too).
cmake --build build-asan -j"$(nproc)" --target servelab_test_binaries
servelab_asan_cuda build-asan
ctest --test-dir build-asan --output-on-failure -LE gpu -j"$(nproc)" "$@"
