#!/usr/bin/env bash
# The whole test suite: installs dependencies, builds everything, runs every non-GPU test case
# (one ctest test per GoogleTest case, spread over the cores). Extra args go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
ctest --test-dir build --output-on-failure -LE gpu -j"$(nproc)" "$@"
