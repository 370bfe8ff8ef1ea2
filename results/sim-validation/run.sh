#!/usr/bin/env bash
# Re-measures the committed sim validation: profile the CPU engine, then run validate-sim right
# after it, so the profile and the real runs see the same machine load (on a shared VM the load
# moves step times by several x). Usage: bash results/sim-validation/run.sh [tiny|qwen|all]
set -euo pipefail
cd "$(dirname "$0")/../.."
what="${1:-all}"
bin=build/servelab
if [ "$what" = tiny ] || [ "$what" = all ]; then
  "$bin" profile --preset tiny --threads 1 --json results/profiles/tiny-cpu-1thread.json \
    > results/profiles/tiny-cpu-1thread.txt 2>&1
  "$bin" validate-sim results/sim-validation/tiny-cpu.yaml --profile results/profiles/tiny-cpu-1thread.json \
    --out results/sim-validation/tiny-cpu
fi
if [ "$what" = qwen ] || [ "$what" = all ]; then
  "$bin" profile --preset qwen2.5-0.5b --json results/profiles/qwen2.5-0.5b-cpu.json \
    > results/profiles/qwen2.5-0.5b-cpu.txt 2>&1
  "$bin" validate-sim results/sim-validation/qwen-cpu.yaml --profile results/profiles/qwen2.5-0.5b-cpu.json \
    --out results/sim-validation/qwen-cpu --n-requests 8
fi
