#!/usr/bin/env bash
# Configures and builds servelab into build/ (Release): everything, or the given targets.
#   bash scripts/build.sh [--target T]... [cmake configure args]...
#   bash scripts/build.sh --target servelab       # only the CLI (what the quickstart needs)
# Uses ccache when it is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
targets=()
configure=()
while (($#)); do
  case $1 in
    --target) targets+=(--target "$2"); shift 2 ;;
    *) configure+=("$1"); shift ;;
  esac
done
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" "${configure[@]}" >/dev/null
cmake --build build -j"$(nproc)" "${targets[@]}"
