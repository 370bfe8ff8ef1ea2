#!/usr/bin/env bash
# The CPU engine's speed figures in the README: prefill 1x128 and 32x128, decode at batch 1 and 32
# (context 128), a chunked and a mixed step, for tiny and qwen2.5-0.5b. Writes
# results/cpu-profile/<model>.{json,txt} (the JSON names machine, commit and date).
set -euo pipefail
cd "$(dirname "$0")/.."
out=results/cpu-profile
mkdir -p "$out"
for m in tiny qwen2.5-0.5b; do
  ./build/servelab profile --preset "$m" --prefill-lens 128 --batch 1,32 --contexts 128 --chunk-lens 32 \
    --prompt-len 128 --max-rows 4096 --repeats 3 --json "$out/$m.json" | tee "$out/$m.txt"
done
