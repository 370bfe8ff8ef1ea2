#!/usr/bin/env bash
# Configures and builds servelab into build/ (Release): everything, or the given targets.
#   bash scripts/build.sh [--target T]... [cmake configure args]...
#   bash scripts/build.sh --target servelab       # only the CLI (what the quickstart needs)
# Uses ccache when it is installed (with the sloppiness that precompiled headers need; CMakeLists.txt
# also sets it on the targets that use them). The libraries and the CLI compile as unity batches
# (SERVELAB_UNITY_LIBS: a build from cold, the quickstart's, parses the shared headers once per batch;
# pass -DSERVELAB_UNITY_LIBS=OFF for edit-one-file iteration).
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
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSERVELAB_UNITY_LIBS=ON "${launcher[@]}" "${configure[@]}" >/dev/null
cmake --build build -j"$(nproc)" "${targets[@]}"
