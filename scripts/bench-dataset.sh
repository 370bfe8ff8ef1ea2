#!/usr/bin/env bash
# Times `servelab validate` and `servelab plan` on a ShareGPT-format dataset the size of
# ShareGPT_V3 (~94k conversations, ~650 MB), generated under /tmp by scripts/make-sharegpt.py
# (kept between runs; never commit it). Needs build/servelab.
#   bash scripts/bench-dataset.sh [--conversations N] [--mb M]   # arguments go to the generator
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$PWD/build/servelab
[ -x "$bin" ] || { echo "build/servelab not found: run bash scripts/build.sh (or cmake --build build --target servelab)" >&2; exit 2; }
dir=${BENCH_DIR:-/tmp/servelab-bench-dataset}
mkdir -p "$dir"
tag=$(printf '%s' "${*:-default}" | tr -c 'A-Za-z0-9._-' '_')
data=$dir/sharegpt-$tag.json
if [ ! -s "$data" ]; then
  echo "generating $data"
  python3 scripts/make-sharegpt.py --out "$data.tmp" "$@"
  mv "$data.tmp" "$data"
fi
cat > "$dir/bench.yaml" <<YAML
name: bench-dataset
seed: 1
model: {preset: tiny}
backend: {kind: sim}
engine: {kv_cache_mb: 64, max_model_len: 2048}
strategies:
  - {batching: continuous, kv: {kind: paged}, max_num_batched_tokens: 2048}
workload:
  arrival: {process: poisson}
  rates: [4, 8, 16]
  n_requests: 1000
  prompt_tokens: {dataset: $(basename "$data")}
  output_tokens: {dataset: $(basename "$data")}
YAML
size_mb=$(( $(stat -c %s "$data") / 1000000 ))
entries=$(grep -c '"conversations"' "$data" || true)
echo "dataset: $data ($size_mb MB, $entries conversations)"
TIMEFORMAT='%R s wall, %U s user, %S s sys'
for cmd in validate plan; do
  printf '%-9s ' "$cmd"
  { time "$bin" "$cmd" "$dir/bench.yaml" >"$dir/$cmd.out" 2>&1; } 2>&1
done
echo "(validate reads the dataset once and plans the first rate; plan reads it once and plans all 3 rates)"
