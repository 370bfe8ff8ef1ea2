#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install dependencies, build, run the quickstart
# scenario on the built-in CPU engine (no GPU needed). Results land in results/runs/quickstart/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh --target servelab   # the tests build in scripts/test.sh
./build/servelab run scenarios/quickstart.yaml --force "$@"
