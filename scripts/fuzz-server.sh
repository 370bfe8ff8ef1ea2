#!/usr/bin/env bash
# Fuzzes the server's request-body parser and the HTTP driver's SSE/chunk reader with libFuzzer
# (clang, ASan, UBSan). Not part of the unit tests. Needs Debian's clang and libclang-rt-14-dev:
#   sudo apt-get install -y clang libclang-rt-14-dev
#   bash scripts/fuzz-server.sh            # 60 s per harness
#   SECONDS_EACH=600 bash scripts/fuzz-server.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${SECONDS_EACH:-60}
if ! command -v clang++ > /dev/null; then
  echo "fuzz-server.sh: clang++ not found (apt-get install clang libclang-rt-14-dev)" >&2
  exit 2
fi
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_C_COMPILER=clang -DSERVELAB_CUDA=OFF > /dev/null
cmake --build build-fuzz -j2 --target fuzz_request_parse fuzz_stream_chunk
for h in request_parse stream_chunk; do
  corpus=build-fuzz/corpus_$h
  mkdir -p "$corpus"
  cp tests/fuzz/corpus/* "$corpus"/
  echo "== fuzz_$h for $SECONDS_EACH s"
  build-fuzz/fuzz_$h -max_total_time="$SECONDS_EACH" -max_len=8192 -print_final_stats=1 "$corpus"
done
