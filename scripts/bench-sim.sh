#!/usr/bin/env bash
# Fast virtual time: 100,000 ShareGPT-like requests through llama2-7b on a simulated H100 at 80%
# of its capacity (scenarios/capacity.yaml: vLLM-like continuous batching, paged KV sized from
# 80 GB at gpu_memory_utilization 0.9). Finds the capacity first (bisection, 3,000 requests a
# probe), then runs the one 100k-request point and prints simulated time, wall time, CPU time
# and their ratio. Usage: scripts/bench-sim.sh [N_REQUESTS] [LOAD]   (defaults 100000 0.8)
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-100000}"
load="${2:-0.8}"
bin=build/servelab
[ -x "$bin" ] || { echo "build first: cmake --build build --target servelab" >&2; exit 2; }
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
"$bin" capacity scenarios/capacity.yaml --out "$out" --quiet --no-plots > "$out/capacity.txt"
cap="$(sed -n 's/^ *"capacity_rps": \([0-9.eE+-]*\),*$/\1/p' "$out/capacity.json" | head -1)"
rate="$(awk -v c="$cap" -v l="$load" 'BEGIN { printf "%.4f", c * l }')"
echo "capacity (roofline H100, llama2-7b, SLO TTFT<=1s TPOT<=100ms at 90%): $cap req/s; running $n requests at $load x = $rate req/s"
/usr/bin/time -f "process: %e s wall, %U s user, %S s sys, %M KiB max RSS" \
  "$bin" capacity scenarios/capacity.yaml --rate "$rate" --set "capacity.n_requests=$n" --quiet
