#!/usr/bin/env bash
# The engine's GPU performance figures in one device call (issue 8, items 1, 3b, 5, 6): configure
# and build servelab and engine_bench (-DCMAKE_CUDA_ARCHITECTURES=90a, Ninja, -j$(nproc)), run
# engine_bench (decode MBU and tokens/s, whole-model prefill TFLOP/s, the fusion / cuda_graphs /
# batch_invariant / chunked-prefill ablation, beside a copy and a GEMM measured in the same run),
# then `servelab profile --backend cuda --preset llama2-7b` over a grid for the simulator.
# Output ($OUT, default results/runs/gpu-perf; at most 7 files): environment.txt,
# engine_bench.json (the bench's figures), benchmarks.json (results/gpu/benchmarks.json with the
# bench's figures replacing entries of the same name), PROFILE.json and PROFILE.txt (the profile,
# named llama2-7b-cuda-<gpu>), logs.tgz (every log), summary.txt. A short table is printed last.
# Environment: OUT, BUILD (build dir, default build-gpu; configure and build are skipped when it
#   already holds servelab and engine_bench), COMMIT (default GPU_COMMIT's content or git
#   HEAD), QUICK=1 (fewer bench shapes, a smaller profile grid), PROFILE_ARGS (replace the grid),
#   KV_GB (KV budget for both, default what 90% of the GPU leaves), NCU=1 (also a per-kernel
#   ncu breakdown of one eager decode step at each of NCU_POINTS, default "1,512 32,512":
#   duration and DRAM bytes per kernel, clocks left as found; summary in summary.txt).
# Exit status: 0 when every step passed, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/runs/gpu-perf}
BUILD=${BUILD:-build-gpu}
JOBS=$(nproc 2>/dev/null || echo 8)
if [ -z "${COMMIT:-}" ]; then
  if [ -f GPU_COMMIT ]; then COMMIT=$(cat GPU_COMMIT); else COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown); fi
fi
export SERVELAB_COMMIT=$COMMIT  # servelab profile's "commit" (the tree may be a copy outside its checkout)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOGS=$(mktemp -d)
declare -a TABLE=()
FAILED=0

step() {  # step NAME TIMEOUT_S CMD...: output in $LOGS/NAME.log; status and time in the table
  local name=$1 limit=$2
  shift 2
  local t0 rc dt
  t0=$(date +%s)
  timeout "$limit" "$@" >"$LOGS/$name.log" 2>&1
  rc=$?
  dt=$(($(date +%s) - t0))
  if [ $rc -eq 0 ]; then
    TABLE+=("$(printf '%-14s %-5s %5ss' "$name" ok "$dt")")
  else
    TABLE+=("$(printf '%-14s %-5s %5ss  rc %s (logs.tgz:%s.log)' "$name" FAIL "$dt" "$rc" "$name")")
    FAILED=1
    tail -n 25 "$LOGS/$name.log"
  fi
  return $rc
}

GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
HW=$(echo "$GPU" | tr 'A-Z' 'a-z' | grep -oE 'h100|h200|a100|l40s' | head -1)
PROFILE=llama2-7b-cuda-${HW:-gpu}
{ date -u; echo "commit $COMMIT"
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.max.sm,clocks.sm,power.limit --format=csv
  nvcc --version | tail -1; cmake --version | head -1; nproc; } >"$OUT/environment.txt" 2>&1

BUILT=1
if [ -x "$BUILD/servelab" ] && [ -x "$BUILD/engine_bench" ]; then
  TABLE+=("$(printf '%-14s %-5s' build "skipped ($BUILD holds the binaries)")")
else
  CFG=(-S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a)
  command -v ninja >/dev/null && CFG+=(-G Ninja)
  step configure 200 cmake "${CFG[@]}" &&
    step build 480 cmake --build "$BUILD" -j"$JOBS" --target servelab engine_bench || BUILT=0
fi

KV_ARGS=()
[ -n "${KV_GB:-}" ] && KV_ARGS=(--kv-gb "$KV_GB")
if [ $BUILT = 1 ]; then
  BENCH_ARGS=(--json "$OUT/engine_bench.json" --commit "$COMMIT" "${KV_ARGS[@]}")
  [ "${QUICK:-0}" = 1 ] && BENCH_ARGS+=(--quick)
  step engine_bench 300 "$BUILD/engine_bench" "${BENCH_ARGS[@]}"
  # The grid for the simulator: prefills of 32-4096 tokens, decode batches 1-256 x contexts 128-3072,
  # chunks of 128-1024 after those contexts, batched prefills of 512-token prompts up to 8192 rows,
  # mixed steps. Points whose KV does not fit are skipped and listed in the JSON.
  if [ -n "${PROFILE_ARGS:-}" ]; then
    read -r -a GRID <<<"$PROFILE_ARGS"
  elif [ "${QUICK:-0}" = 1 ]; then
    GRID=(--prefill-lens 512,4096 --batch 1,32 --contexts 128,2048 --chunk-lens 512 --prompt-len 512
          --max-rows 4096 --repeats 3)
  else
    GRID=(--prefill-lens 32,64,128,256,512,1024,2048,3072,4096 --batch 1,2,4,8,16,32,48,64,96,128,192,256
          --contexts 128,256,512,1024,2048,3072 --chunk-lens 128,256,512,1024 --prompt-len 512 --max-rows 8192
          --repeats 7 --min-point-s 0.3)
  fi
  step profile 300 "$BUILD/servelab" profile --backend cuda --preset llama2-7b "${GRID[@]}" "${KV_ARGS[@]}" \
    --json "$OUT/$PROFILE.json" &&
    sed -n '/^model /,$p' "$LOGS/profile.log" >"$OUT/$PROFILE.txt"
fi

# ncu: one eager decode step per point, every kernel's duration and DRAM traffic (clocks as found).
NCU_BIN=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
if [ $BUILT = 1 ] && [ "${NCU:-0}" = 1 ]; then
  for pt in ${NCU_POINTS:-1,512 32,512}; do
    name="ncu_b${pt%,*}_ctx${pt#*,}"
    step "$name" 240 "$NCU_BIN" --profile-from-start off --clock-control none --csv --page raw \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
      "$BUILD/engine_bench" --ncu-decode "$pt" &&
      python3 scripts/lib/ncu_table.py "$LOGS/$name.log" >"$LOGS/$name.txt" 2>&1
  done
fi

# benchmarks.json: the committed list with this run's figures replacing entries of the same name.
if [ -f "$OUT/engine_bench.json" ]; then
  python3 - "$OUT/engine_bench.json" results/gpu/benchmarks.json "$OUT/benchmarks.json" <<'PY' >"$LOGS/merge.log" 2>&1 || FAILED=1
import json, sys, os
new = json.load(open(sys.argv[1]))
old = json.load(open(sys.argv[2])) if os.path.exists(sys.argv[2]) else []
names = {e["name"] for e in new}
json.dump([e for e in old if e["name"] not in names] + new, open(sys.argv[3], "w"), indent=2)
print(len(old), "+", len(new))
PY
fi

tar czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null
{
  echo "== gpu-perf: $GPU, commit $COMMIT =="
  printf '%s\n' "${TABLE[@]}"
  if [ -f "$OUT/engine_bench.json" ]; then
    python3 - "$OUT/engine_bench.json" <<'PY'
import json, sys
for e in json.load(open(sys.argv[1])):
    v, r = e["value"], e["ratio"]
    shape = e["shape"] if len(e["shape"]) < 64 else e["shape"][:61] + "..."
    print(f"{e['name']:<22} {shape:<64} " + ("skipped" if v is None else f"{v:10.2f} {e['unit']:<7}") +
          ("" if r is None else f" {r:6.3f} of {e['peer_or_ceiling']}"))
PY
  fi
  for f in "$LOGS"/ncu_*.txt; do [ -f "$f" ] && { echo "-- $(basename "$f" .txt)"; head -n 14 "$f"; }; done
  [ -f "$OUT/$PROFILE.json" ] && python3 - "$OUT/$PROFILE.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
print(f"profile: {len(p['samples'])} points timed, {len(p['skipped'])} skipped (KV arena {p['kv_arena_bytes']/1e9:.1f} GB), "
      f"{p['wall_s']:.0f} s, hardware {p['hardware']}, device {p['device']}")
PY
} | tee "$OUT/summary.txt"
exit $FAILED
