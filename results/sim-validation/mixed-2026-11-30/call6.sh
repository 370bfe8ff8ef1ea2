#!/usr/bin/env bash
# Call 6 (2026-11-30, one H200), from the repository root: which kernels a mixed step's extra cost
# sits in. step_probe (bench/step_probe.cpp) times llama3-8b steps at context 3,773 side by side
# (chunks of 501 / 512 / 125 rows alone and beside 2 or 11 decodes), then Nsight Compute times every
# kernel of one run of each NCU point (clocks as found, caches not flushed), summed per kernel.
#   OUT=$OUT bash results/sim-validation/mixed-2026-11-30/call6.sh
set -uo pipefail
B=build-gpu
t0=$(date +%s)
{ git rev-parse --short HEAD 2>/dev/null || cat GPU_COMMIT; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader; ncu --version | tail -1; } > "$OUT/env.txt" 2>&1
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DSERVELAB_KERNELS_FP16=OFF > "$OUT/configure.log" 2>&1
timeout 240 cmake --build $B -j"$(nproc)" --target step_probe > "$OUT/build.log" 2>&1
echo "build rc $? $(( $(date +%s) - t0 ))s"
CTX=${CTX:-3773}
POINTS=${POINTS:-501:0,501:2,501:11,512:0,512:2,503:0,125:0,125:2,0:2}
timeout 150 $B/step_probe llama3-8b $CTX $POINTS ${REPEATS:-15} > "$OUT/times.txt" 2>&1
echo "times rc $? $(( $(date +%s) - t0 ))s"; cat "$OUT/times.txt"
IFS=',' read -r -a pts <<<"$POINTS"
for i in ${NCU_POINTS:-0 1 3 4}; do
  timeout 150 ncu --profile-from-start off --clock-control none --cache-control none --csv --page raw --print-units base \
    --metrics gpu__time_duration.sum,launch__grid_size,launch__waves_per_multiprocessor,launch__occupancy_limit_shared_mem \
    $B/step_probe llama3-8b $CTX $POINTS 1 $i > "$OUT/ncu-$i.csv" 2> "$OUT/ncu-$i.err"
  echo "ncu ${pts[$i]} rc $? $(( $(date +%s) - t0 ))s"
done
python3 - "$OUT" "$POINTS" ${NCU_POINTS:-0 1 3 4} <<'PY' | tee "$OUT/kernels.txt"
import csv, sys, collections, re
out, pts, idx = sys.argv[1], sys.argv[2].split(','), [int(x) for x in sys.argv[3:]]
tables = {}
for i in idx:
    rows = [l for l in open(f"{out}/ncu-{i}.csv") if l.startswith('"')]
    if not rows: print(pts[i], "no ncu rows"); continue
    r = list(csv.DictReader(rows))[1:]  # the units row
    agg = collections.OrderedDict()
    for x in r:
        name = re.sub(r"<.*", "", x["Kernel Name"])[:60]
        key = (name, x["launch__grid_size"])
        d = agg.setdefault(key, [0, 0.0, x.get("launch__waves_per_multiprocessor", "")])
        d[0] += 1; d[1] += float(x["gpu__time_duration.sum"]) / 1e6
    tables[pts[i]] = agg
    print(f"== {pts[i]}: {len(r)} kernels, {sum(v[1] for v in agg.values()):.3f} ms summed")
    for (name, grid), (n, ms, waves) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print(f"  {name:60s} grid {grid:>7s} waves {waves:>6s} x{n:4d} {ms:8.3f} ms")
PY
echo "done $(( $(date +%s) - t0 ))s"
