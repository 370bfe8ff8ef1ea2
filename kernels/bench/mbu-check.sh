#!/usr/bin/env bash
# Batch-1 decode MBU work in one device call (issue 8, item 1): build the GPU tests and engine_bench,
# run the kernel and backend GPU tests, `engine_bench --mbu` (decode MBU per decode-path variant,
# before and after in one process, beside a copy measured in the same run), and an ncu breakdown of
# one graph-replayed decode step per variant in NCU_VARIANTS (kernel durations, caches and clocks
# as found: their sum against the step time is the launch gaps).
#   from the device tool: cd .gpu/NAME && OUT=$OUT bash kernels/bench/mbu-check.sh
# Environment: OUT (default results/runs/mbu), BUILD (default build-gpu), STEPS (default
#   "build tests mbu ncu"), BUDGET_S (seconds for the whole script, default 285: every step's
#   timeout is cut to what is left), NCU_VARIANTS (default "before after"; names of engine_bench's
#   kMbuVariants), NCU_POINT (default 1,128), MBU_ARGS (extra engine_bench --mbu arguments).
# Output ($OUT, 5 files): environment.txt, mbu.json (engine_bench's figures), ncu.txt (per-variant
# kernel tables), logs.tgz (every log), summary.txt (the short table printed last).
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
fi
if has tests && [ -x "$BUILD/test_cuda_backend_gpu" ]; then
  timed kernels_gpu 90 "$BUILD/test_kernels_gpu" --gtest_brief=1
  timed backend_gpu 120 "$BUILD/test_cuda_backend_gpu" --gtest_brief=1 --gtest_filter='-*Bench*:*Hf*'
fi
BENCH=$BUILD/kernels/engine_bench
if has mbu && [ -x "$BENCH" ]; then
  # shellcheck disable=SC2086  # MBU_ARGS is words
  timed mbu 150 "$BENCH" --mbu --json "$OUT/mbu.json" --commit "$COMMIT" ${MBU_ARGS:-}
fi
NCU_BIN=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
if has ncu && [ -x "$BENCH" ]; then
  for v in ${NCU_VARIANTS:-before after}; do
    case $v in  # the environment of engine_bench's kMbuVariants entry of that name
      before) E=(SERVELAB_GEMV=off SERVELAB_PDL=0 SERVELAB_GEMV_SILU=0) ;;
      pdl) E=(SERVELAB_GEMV=off SERVELAB_PDL=1 SERVELAB_GEMV_SILU=0) ;;
      after) E=(SERVELAB_GEMV=unsplit SERVELAB_PDL=1 SERVELAB_GEMV_SILU=1) ;;
      all_pdl_silu) E=(SERVELAB_GEMV=all SERVELAB_PDL=1 SERVELAB_GEMV_SILU=1) ;;
      *) echo "unknown NCU variant $v"; continue ;;
    esac
    timed "ncu_$v" 100 env "${E[@]}" "$NCU_BIN" --profile-from-start off --graph-profiling node --cache-control none \
      --clock-control none --csv --page raw --metrics gpu__time_duration.sum,dram__bytes_read.sum \
      "$BENCH" --ncu-decode "${NCU_POINT:-1,128}" --graphs &&
      python3 - "$LOGS/ncu_$v.log" "$v" >>"$OUT/ncu.txt" 2>&1 <<'PY'
import csv, re, sys
lines = open(sys.argv[1]).read().splitlines()
step = next((l for l in lines if "per step" in l), "")
rows = list(csv.reader([l for l in lines if l.startswith('"')]))
head, units, data = rows[0], rows[1], rows[2:]
col = {h: i for i, h in enumerate(head)}
scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3,
         "second": 1.0, "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9, "B": 1.0}
def val(r, key):
    i = col[key]
    return float(r[i].replace(",", "")) * scale.get(units[i], 1.0)
def short(n):
    n = re.sub(r"\(anonymous namespace\)::|<unnamed>::", "", n)
    n = re.sub(r"\(.*", "", n)
    n = re.sub(r"<.*", "", n)
    return n.split("::")[-1].replace("void ", "")[:44]
agg = {}
for r in data:
    k = short(r[col["Kernel Name"]])
    a = agg.setdefault(k, [0, 0.0, 0.0])
    a[0] += 1
    a[1] += val(r, "gpu__time_duration.sum")
    a[2] += val(r, "dram__bytes_read.sum")
total = sum(a[1] for a in agg.values())
m = re.search(r"([0-9.]+) ms per step", step)
print(f"== ncu {sys.argv[2]}: {step.strip()}")
print(f"{len(data)} kernels, sum of durations {total*1e3:.3f} ms" +
      (f"; step - sum = {float(m.group(1)) - total*1e3:.3f} ms (launch gaps and ramps)" if m else ""))
print(f"{'kernel':<44} {'calls':>5} {'total_ms':>9} {'share':>6} {'us/call':>8} {'rd GB/s':>8}")
for k, (n, t, b) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print(f"{k:<44} {n:>5} {t*1e3:>9.3f} {t/total:>6.1%} {t/n*1e6:>8.1f} {b/t/1e9:>8.0f}")
PY
  done
fi

tar czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null
{
  echo "== mbu-check: $(head -3 "$OUT/environment.txt" | tail -1 | cut -d, -f1), commit $COMMIT, $(($(date +%s) - T0)) s =="
  printf '%s\n' "${TABLE[@]}"
  for f in kernels_gpu backend_gpu; do grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED" "$LOGS/$f.log" 2>/dev/null | sed "s/^/$f: /"; done
  [ -f "$LOGS/mbu.log" ] && sed -n '/^MBU per variant/,$p' "$LOGS/mbu.log"
  [ -f "$OUT/ncu.txt" ] && grep -A8 "^== ncu" "$OUT/ncu.txt"
} | tee "$OUT/summary.txt"
exit $FAILED
