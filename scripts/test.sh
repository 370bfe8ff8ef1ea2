#!/usr/bin/env bash
# The whole test suite: installs dependencies, builds, runs every non-GPU test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
ctest --test-dir build --output-on-failure -LE gpu "$@"
