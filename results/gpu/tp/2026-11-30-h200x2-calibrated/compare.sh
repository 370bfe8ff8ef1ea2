#!/usr/bin/env bash
# The sim against this folder's real sweep (a/static: 64 requests a rate; b/continuous: 200), each
# strategy's sim run with the KV arena its real run had (run_kv_bytes.py), priced once by the
# calibrated profile (a/profile.json: the grid + a/calibration's 300-request run, another seed) and
# once by the grid alone (a/profile-grid.json). No GPU needed (~3 s):
#   bash results/gpu/tp/2026-11-30-h200x2-calibrated/compare.sh [SERVELAB] > compare.md
set -euo pipefail
cd "$(dirname "$0")"
SL=${1:-../../../../build-dev/servelab}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
SCENARIO=../llama3-70b-sweep-200.yaml
for real in a/static b/continuous; do
  [ -f "$real/steps.jsonl" ] || gunzip -k "$real/steps.jsonl.gz"
done
sim() {  # PROFILE REAL [--set ...] -> $TMP/PROFILE-NAME/STRATEGY
  local profile=$1 real=$2; shift 2
  while read -r strategy kv_bytes; do
    "$SL" run "$SCENARIO" --out "$TMP/$(basename "$profile" .json)/$strategy" --force --quiet --no-plots "$@" \
      --set "strategies=[$(python3 -c "
import json, yaml; print(json.dumps(next(s for s in yaml.safe_load(open('$SCENARIO'))['strategies'] if s['label'] == '$strategy')))")]" \
      --set "backend={kind: sim, tensor_parallel: 2, sim_profile: $PWD/$profile}" \
      --set "engine={kv_cache_bytes: $kv_bytes, max_model_len: 2048}" >/dev/null
  done < <(python3 ../../../sim-validation/run_kv_bytes.py "$real" "$profile")
}
for p in a/profile.json a/profile-grid.json; do
  sim "$p" b/continuous
  sim "$p" a/static --set workload.n_requests=64
  n=$TMP/$(basename "$p" .json)
  echo; echo "### the sim from $p against the real runs"; echo
  python3 ../../../sim-validation/run_compare.py b/continuous "$n/continuous-paged" \
    "continuous-paged=$n/continuous-paged" "continuous-naive=$n/continuous-naive"
  python3 ../../../sim-validation/run_compare.py a/static "$n/static" | tail -n +3
done
rm -f a/static/steps.jsonl b/continuous/steps.jsonl
