#!/usr/bin/env bash
# Call 10 (2026-11-30, one H200), from the repository root: where one decode beside a chunk costs
# 1.7 ms on the decode-kernel path (call 7: llama3-8b at 3,773, the chunk of 501 rows alone 13.03 ms,
# with one decode 14.69). Nsight Compute times every kernel of one run of each point (step_probe,
# mixed_decodes decode), summed per kernel in kernels.txt; everything packed into OUT/ncu.tgz.
#   OUT=$OUT bash results/sim-validation/mixed-2026-11-30/call10.sh
set -uo pipefail
B=build-gpu
t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DSERVELAB_KERNELS_FP16=OFF > "$OUT/configure.log" 2>&1
timeout 240 cmake --build $B -j"$(nproc)" --target step_probe > "$OUT/build.log" 2>&1
echo "build rc $? $(( $(date +%s) - t0 ))s"
P=${POINTS:-501:0,501:1,501:2}
W=$OUT/w; mkdir -p $W
for i in ${NCU_POINTS:-0 1}; do
  timeout 150 ncu --profile-from-start off --clock-control none --cache-control none --csv --page raw --print-units base \
    --metrics gpu__time_duration.sum,launch__grid_size \
    $B/step_probe llama3-8b 3773 $P 3 ${MODE:-decode} $i > "$W/ncu-$i.csv" 2> "$W/ncu-$i.err"
  echo "ncu $i rc $? $(( $(date +%s) - t0 ))s"
done
python3 - "$W" ${NCU_POINTS:-0 1} <<'PY' | tee "$OUT/kernels.txt"
import csv, sys, collections, re
w = sys.argv[1]
f = lambda s: float(s.replace(',', ''))
for i in sys.argv[2:]:
    rows = [l for l in open(f"{w}/ncu-{i}.csv") if l.startswith('"')]
    r = list(csv.DictReader(rows))[1:]
    agg = collections.OrderedDict()
    for x in r:
        n = re.sub(r"\(.*", "", x["Kernel Name"])[:90]
        d = agg.setdefault((n, x["launch__grid_size"]), [0, 0.0]); d[0] += 1; d[1] += f(x["gpu__time_duration.sum"]) / 1e6
    print(f"== point {i}: {len(r)} kernels {sum(v[1] for v in agg.values()):.3f} ms")
    for (n, g), (c, ms) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print(f"  {n:90s} grid {g:>7s} x{c:4d} {ms:8.3f}")
PY
grep -h "context 3773\|  5" $W/ncu-0.csv | head -5
tar czf "$OUT/ncu.tgz" -C "$OUT" w && rm -rf "$W"
echo "done $(( $(date +%s) - t0 ))s"
