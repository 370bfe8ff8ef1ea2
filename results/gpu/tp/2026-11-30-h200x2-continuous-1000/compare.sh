#!/usr/bin/env bash
# The sim against the three real runs of results/gpu/tp/llama3-70b-continuous-1000.yaml in this
# folder, from the TP=2 profile taken in the same lease as run 1 (no GPU needed; ~2 s):
#   bash results/gpu/tp/2026-11-30-h200x2-continuous-1000/compare.sh [SERVELAB] > compare.md
# Each strategy's sim run gets the KV arena its real run had (run_kv_bytes.py); SCALES adds sim
# runs with every step priced that much slower (sim_cost_scale), to show how far a p50 moves.
set -euo pipefail
cd "$(dirname "$0")"
SL=${1:-../../../../build-dev/servelab}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
SCENARIO=../llama3-70b-continuous-1000.yaml
sim() {  # SCALE -> $TMP/SCALE/STRATEGY
  while read -r strategy kv_bytes; do
    "$SL" run "$SCENARIO" --out "$TMP/$1/$strategy" --force --quiet --no-plots \
      --set "backend={kind: sim, tensor_parallel: 2, sim_profile: $PWD/profile-tp2.json, sim_cost_scale: $1}" \
      --set "engine={kv_cache_bytes: $kv_bytes, max_model_len: 2048}" >/dev/null
  done < <(python3 ../../../sim-validation/run_kv_bytes.py run1-78c43dd profile-tp2.json)
}
cmp() {  # REAL SCALE
  python3 ../../../sim-validation/run_compare.py "$1" "$TMP/$2/continuous-paged" \
    "continuous-paged=$TMP/$2/continuous-paged" "continuous-naive=$TMP/$2/continuous-naive"
}
for s in 1 ${SCALES:-1.02 1.03 1.04}; do sim "$s"; done
for r in run1-78c43dd run2-2163e07 run3-e4887d7-rate12; do echo; echo "### sim against $r"; echo; cmp "$r" 1; done
echo; echo "### run 2 and run 3 against run 1 (real against real: the same plan on other leases)"; echo
python3 ../../../sim-validation/run_compare.py run1-78c43dd run2-2163e07
python3 ../../../sim-validation/run_compare.py run1-78c43dd run3-e4887d7-rate12 | tail -n +3 | grep -v "no sim run"
for s in ${SCALES:-1.02 1.03 1.04}; do echo; echo "### sim with every step $s x its price, against run1-78c43dd"; echo; cmp run1-78c43dd "$s"; done
