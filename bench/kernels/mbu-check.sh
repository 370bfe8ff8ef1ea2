#!/usr/bin/env bash
# Batch-1 decode MBU work in one device call (issue 8, item 1): build the GPU tests and engine_bench,
# run the kernel and backend GPU tests, then `engine_bench --mbu` (decode MBU per decode-path
# variant, beside a copy measured in the same process) in ROUNDS interleaved rounds, each round
# also running the same bench built from the tree in base/ (the code before this work, with this
# engine_bench.cpp) as "before"; medians over the rounds. Then an ncu breakdown of one
# graph-replayed decode step of base/ and of the new default (kernel durations, caches and clocks
# as found; under ncu the step's gaps are not representative, the per-kernel rates are).
#   prepare: git archive BASE | tar x -C TREE/base; cp bench/engine_bench.cpp TREE/base/bench/
#   from the device tool: cd .gpu/NAME && OUT=$OUT bash bench/kernels/mbu-check.sh
# Environment: OUT (default results/runs/mbu), BUILD (default build-gpu; base/ builds in BUILD-base),
#   STEPS (default "build tests mbu ncu"), BUDGET_S (seconds for the whole script, default 285:
#   every step's timeout is cut to what is left), ROUNDS (default 3), VARIANTS (engine_bench
#   kMbuVariants names, default plain,unsplit,after_nopdl,after; "before" is base/'s), NCU_VARIANT (default after), NCU_POINT (default 1,128),
#   MBU_ARGS (extra engine_bench --mbu arguments).
# Output ($OUT, 5 files): environment.txt, mbu.json (median rows over the rounds), ncu.txt
# (per-kernel tables), logs.tgz (every log and each round's JSON), summary.txt (printed last).
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-285}
OUT=${OUT:-results/runs/mbu}
BUILD=${BUILD:-build-gpu}
STEPS=${STEPS:-build tests mbu ncu}
COMMIT=$(cat GPU_COMMIT 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)
export SERVELAB_COMMIT=$COMMIT NCCL_NVLS_ENABLE=0
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOGS=$(mktemp -d)
declare -a TABLE=()
FAILED=0
STEP_DIR=$LOGS
# shellcheck source=scripts/lib/step.sh
source scripts/lib/step.sh
left() { echo $((BUDGET_S - ($(date +%s) - T0))); }
timed() {  # timed NAME LIMIT CMD...: step with the limit cut to the time left
  local name=$1 limit=$2 l
  shift 2
  l=$(left)
  [ "$l" -lt "$limit" ] && limit=$l
  if [ "$limit" -le 5 ]; then TABLE+=("$(printf '%-16s %-5s' "$name" "no time left")"); return 1; fi
  step "$name" "$limit" "$@"
}
has() { [[ " $STEPS " == *" $1 "* ]]; }

{ date -u; echo "commit $COMMIT"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.sm,power.limit --format=csv
  nvcc --version | tail -1; nproc; } >"$OUT/environment.txt" 2>&1

if has build; then
  G=(); command -v ninja >/dev/null && G=(-G Ninja)
  timed configure 120 cmake -S . -B "$BUILD" "${G[@]}" -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90a &&
    timed build 240 cmake --build "$BUILD" -j"$(nproc)" --target engine_bench test_kernels_gpu test_cuda_backend_gpu
  if [ -d base ]; then
    timed configure_base 120 cmake -S base -B "$BUILD-base" "${G[@]}" -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90a &&
      timed build_base 240 cmake --build "$BUILD-base" -j"$(nproc)" --target engine_bench
  fi
fi
if has tests && [ -x "$BUILD/test_cuda_backend_gpu" ]; then
  timed kernels_gpu 90 "$BUILD/test_kernels_gpu" --gtest_brief=1
  timed backend_gpu 120 "$BUILD/test_cuda_backend_gpu" --gtest_brief=1 --gtest_filter='-*Bench*:*Hf*'
fi
BENCH=$BUILD/engine_bench
BASE_BENCH=$BUILD-base/kernels/engine_bench
BASE_COMMIT=$(cat base/GPU_COMMIT 2>/dev/null || echo base)
if has mbu && [ -x "$BENCH" ]; then
  VARGS=(--variants "${VARIANTS:-plain,unsplit,after_nopdl,after}")
  for r in $(seq 1 "${ROUNDS:-3}"); do
    [ -x "$BASE_BENCH" ] &&
      timed "mbu_base_$r" 60 "$BASE_BENCH" --mbu --variants before --before-label "code of $BASE_COMMIT" \
        --json "$LOGS/mbu_base_$r.json" --commit "$BASE_COMMIT"
    # shellcheck disable=SC2086  # MBU_ARGS is words
    timed "mbu_$r" 120 "$BENCH" --mbu "${VARGS[@]}" --json "$LOGS/mbu_new_$r.json" --commit "$COMMIT" ${MBU_ARGS:-}
  done
  python3 - "$OUT/mbu.json" "$LOGS"/mbu_*.json >"$LOGS/mbu_table.txt" 2>&1 <<'PY'
import json, re, sys, statistics
rows = []
for f in sys.argv[2:]:
    try:
        rows += json.load(open(f))
    except Exception as e:
        print("unreadable", f, e)
groups = {}
for r in rows:
    if r["value"] is None:
        continue
    key = (r["name"], re.split(r" step | \(", r["shape"])[0].strip())
    groups.setdefault(key, []).append(r)
out = []
for key, rs in groups.items():
    rs.sort(key=lambda r: r["value"])
    med = dict(rs[(len(rs) - 1) // 2])  # the lower median: a row that was measured
    med["shape"] += f" (median of {len(rs)} rounds: {rs[0]['value']:.0f}-{rs[-1]['value']:.0f} {rs[0]['unit']})" if len(rs) > 1 else ""
    out.append(med)
json.dump(out, open(sys.argv[1], "w"), indent=2)
copy = [r["value"] for r in rows if r["name"] == "engine_d2d_copy"]
print(f"copy GB/s per process: {' '.join(f'{c:.0f}' for c in copy)}")
table = {}
for r in rows:
    if r["name"] == "decode_step_mbu_variant" or r["name"] == "decode_step_mbu_before":
        m = re.match(r"(b\d+ ctx\d+)(?: \[(\S+)\])?.*?step ([0-9.]+) ms", r["shape"])
        if not m:
            continue
        v = m.group(2) or "base"
        table.setdefault(v, {}).setdefault(m.group(1), []).append((float(m.group(3)), r["ratio"]))
points = []
for v in table.values():
    for p in v:
        if p not in points:
            points.append(p)
print("step ms per round (MBU of the median); variant 'base' = the code before, built from base/")
print(f"{'variant':<16}" + "".join(f"{p:>26}" for p in points))
for v, d in table.items():
    cells = []
    for p in points:
        xs = d.get(p, [])
        if not xs:
            cells.append(f"{'-':>26}")
            continue
        ms = sorted(x[0] for x in xs)
        ratio = sorted(xs)[(len(xs) - 1) // 2][1]
        cells.append(f"{'/'.join(f'{x:.3f}' for x in ms) + f' {ratio:.3f}':>26}")
    print(f"{v:<16}" + "".join(cells))
PY
fi
NCU_BIN=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
if has ncu && [ -x "$BENCH" ]; then
  for v in base ${NCU_VARIANT:-after}; do
    if [ "$v" = base ]; then B=$BASE_BENCH; VA=(); else B=$BENCH; VA=(--variants "$v"); fi
    [ -x "$B" ] || continue
    timed "ncu_$v" 100 "$NCU_BIN" --profile-from-start off --graph-profiling node --cache-control none \
      --clock-control none --csv --page raw --metrics gpu__time_duration.sum,dram__bytes_read.sum \
      "$B" --ncu-decode "${NCU_POINT:-1,128}" --graphs "${VA[@]}" &&
      python3 scripts/lib/ncu_table.py "$LOGS/ncu_$v.log" "$v" >>"$OUT/ncu.txt" 2>&1
  done
fi

tar czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null
{
  echo "== mbu-check: $(sed -n 4p "$OUT/environment.txt" | cut -d, -f1), commit $COMMIT, $(($(date +%s) - T0)) s =="
  printf '%s\n' "${TABLE[@]}"
  for f in kernels_gpu backend_gpu; do grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED" "$LOGS/$f.log" 2>/dev/null | sed "s/^/$f: /"; done
  [ -f "$LOGS/mbu_table.txt" ] && cat "$LOGS/mbu_table.txt"
  [ -f "$OUT/ncu.txt" ] && grep -A14 "^== ncu" "$OUT/ncu.txt"
} | tee "$OUT/summary.txt"
exit $FAILED
