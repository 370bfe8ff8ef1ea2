#!/usr/bin/env bash
# Fuzzes servelab's parsers with libFuzzer (clang, ASan, UBSan): scenario + --set overrides,
# safetensors, HF config.json, datasets and traces, the `servelab report` readers, the server's
# request bodies (request_parse), the HTTP driver's SSE/chunk reader (stream_chunk) and the grammar
# engine's front ends and matcher (grammar) and the report's regex / choice / GBNF output checkers
# (constraint_check; these two only when named: the default list is CI's). Not part of
# the unit tests; installs Debian's clang and libclang-rt-14-dev when missing.
#   bash scripts/fuzz.sh                    # 20 s per harness (the CI pass)
#   bash scripts/fuzz.sh --minutes 10       # the real run
#   bash scripts/fuzz.sh --seconds 60 report dataset
# Seeds: tests/fuzz/seeds/<harness>/; the growing corpus lives in build-fuzz/corpus/<harness>/ and
# crash inputs in build-fuzz/artifacts/<harness>/. Prints one line per harness (executions,
# corpus size) and exits 1 when any harness found a crash, a leak or a hang.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=20
harnesses=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --minutes) seconds=$(( $2 * 60 )); shift 2 ;;
    -h|--help) sed -n 2,10p "$0"; exit 0 ;;
    *) harnesses+=("$1"); shift ;;
  esac
done
[ ${#harnesses[@]} -eq 0 ] && harnesses=(scenario safetensors hf_config dataset report request_parse stream_chunk)

if ! command -v clang++ > /dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a > /dev/null 2>&1; then
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get install -y clang libclang-rt-14-dev
fi
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_C_COMPILER=clang -DSERVELAB_CUDA=OFF -DSERVELAB_FUZZ=ON "${launcher[@]}" > /dev/null
targets=(); for h in "${harnesses[@]}"; do targets+=("fuzz_$h"); done
cmake --build build-fuzz -j"${FUZZ_JOBS:-2}" --target "${targets[@]}"

failed=0
for h in "${harnesses[@]}"; do
  corpus=build-fuzz/corpus/$h; artifacts=build-fuzz/artifacts/$h
  mkdir -p "$corpus" "$artifacts"
  [ -d "tests/fuzz/seeds/$h" ] && cp -n tests/fuzz/seeds/"$h"/* "$corpus"/ 2> /dev/null || true
  log=build-fuzz/fuzz_$h.log
  rc=0
  build-fuzz/fuzz_"$h" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "$corpus" > "$log" 2>&1 || rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  echo "fuzz_$h: ${seconds} s, ${execs} executions, corpus $(ls "$corpus" | wc -l) files, exit $rc"
  if [ "$rc" -ne 0 ]; then
    failed=1
    grep -E 'ERROR|SUMMARY|Test unit written' "$log" | head -5
  fi
done
exit $failed
