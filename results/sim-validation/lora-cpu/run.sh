#!/usr/bin/env bash
# Multi-LoRA on the sim against the CPU engine (no GPU): profile this machine for
# results/sim-validation/lora-cpu.yaml (its LoRA points from the workload's adapters), then
# validate-sim twice on the same real runs' plans: with the profile's LoRA points (the sim's LoRA
# figures fitted to this CPU) and with them removed (the cpu-2core preset: adapters at their FLOPs).
# Both at the same rates (50% and 85% of CAPACITY req/s, default 44: the with-LoRA sim's capacity
# on this VM), each point's real side the mean of two real runs of the same plan.
# Writes profile.json, with-lora/ and without-lora/ here and prints the two tables.
# Usage: bash results/sim-validation/lora-cpu/run.sh [path/to/servelab]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
servelab="${1:-$root/build/servelab}"
capacity="${CAPACITY:-44}"
scenario="$root/results/sim-validation/lora-cpu.yaml"
"$servelab" profile --for-scenario "$scenario" --backend cpu --threads 2 --json "$here/profile.json" > "$here/profile.txt"
python3 - "$here/profile.json" "$here/profile-no-lora.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
p.pop("lora")
json.dump(p, open(sys.argv[2], "w"), indent=2)
PY
for side in with-lora without-lora; do
  profile="$here/profile.json"; [ "$side" = without-lora ] && profile="$here/profile-no-lora.json"
  "$servelab" validate-sim "$scenario" --profile "$profile" -o "$here/$side" --sensitivity 0 \
    --capacity "$capacity" --real-repeats 2
done
rm -f "$here/profile-no-lora.json"
gzip -f "$here"/*/records_*.jsonl "$here"/*/steps_real.jsonl
for side in with-lora without-lora; do echo "== $side"; cat "$here/$side/validation.md"; done
