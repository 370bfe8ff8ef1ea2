#!/usr/bin/env bash
# ncu of the decode-attention kernel beside SDPA's kernel on the same shapes, for one device call
# after scripts/gpu-check.sh has built $BUILD (kernel_bench):
#   ours: kernel_bench --decode-only --only SHAPE, the default variant's first (eager) launch of
#     decode_mma_kernel (--launch-skip 1 skips the validation's launch);
#   peer: scripts/gpu-bench-peers.py --profile-decode SHAPES --backend $BACKEND (3 eager calls a
#     shape, nothing else on the GPU: every kernel of the process is profiled, up to 12).
# Clocks as found (--clock-control none), caches flushed before each profiled kernel (ncu's default).
# Output in $OUT: ncu.tgz (details and raw pages of every report) and ncu-summary.txt (duration,
# DRAM, occupancy, launch shape and the warp stall reasons per kernel; printed).
# Environment: BUILD (default build-gpu), OUT, SHAPES (';'-separated, default b1 x 1k and 32k GQA 4),
# BACKEND (default cudnn), NCU_TIMEOUT (seconds per ncu run, default 90).
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-results/runs/decode-ncu}
SHAPES=${SHAPES:-"b1 ctx1024 gqa4;b1 ctx32768 gqa4"}
BACKEND=${BACKEND:-cudnn}
T=${NCU_TIMEOUT:-90}
mkdir -p "$OUT"
W=$(mktemp -d)
SECTIONS=(--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats
          --section SchedulerStats --section MemoryWorkloadAnalysis)
IFS=';' read -r -a shapes <<<"$SHAPES"
i=0
for sh in "${shapes[@]}"; do
  timeout "$T" ncu --clock-control none -f -o "$W/ours_$i" --kernel-name regex:decode_mma_kernel --launch-skip 1 \
    --launch-count 1 "${SECTIONS[@]}" "$BUILD/kernel_bench" --decode-only --only "$sh" --json "$W/kb_$i.json" \
    >"$W/ours_$i.log" 2>&1 || echo "ncu ours '$sh': rc $?"
  i=$((i + 1))
done
timeout "$T" ncu --clock-control none --target-processes all -f -o "$W/peer" --launch-count 12 "${SECTIONS[@]}" \
  python3 scripts/gpu-bench-peers.py --profile-decode "${shapes[@]}" --backend "$BACKEND" >"$W/peer.log" 2>&1 ||
  echo "ncu peer: rc $?"
for r in "$W"/*.ncu-rep; do
  [ -f "$r" ] || continue
  ncu -i "$r" --page details >"${r%.ncu-rep}.details.txt" 2>&1
  ncu -i "$r" --page raw --csv >"${r%.ncu-rep}.raw.csv" 2>&1
done
python3 - "$W" "${shapes[@]}" <<'PY' | tee "$OUT/ncu-summary.txt"
import csv, glob, os, sys
w, shapes = sys.argv[1], sys.argv[2:]
keys = [("gpu__time_duration.sum", "duration"), ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "dram %peak"),
        ("dram__bytes_read.sum", "dram read"), ("sm__cycles_active.avg", "sm active cyc"),
        ("gpc__cycles_elapsed.max", "elapsed cyc"), ("sm__warps_active.avg.pct_of_peak_sustained_active", "occupancy %"),
        ("launch__grid_size", "grid"), ("launch__block_size", "block"), ("launch__registers_per_thread", "regs"),
        ("launch__cluster_dim_z", "cluster z"), ("lts__t_sector_hit_rate.pct", "L2 hit %"),
        ("smsp__cycles_active.avg", "smsp active cyc"), ("smsp__inst_executed.sum", "instructions")]
for path in sorted(glob.glob(os.path.join(w, "*.raw.csv"))):
    rows = list(csv.reader(open(path)))
    if len(rows) < 3 or "Kernel Name" not in rows[0]:
        print(os.path.basename(path), ": no kernels", rows[:2] if rows else "")
        continue
    head, units = rows[0], rows[1]
    for r in rows[2:]:
        m = dict(zip(head, r))
        u = dict(zip(head, units))
        tag = os.path.basename(path).replace(".raw.csv", "")
        if tag.startswith("ours_"):
            tag += " (" + shapes[int(tag[5:])] + ")"
        print(f"== {tag}: {m.get('Kernel Name', '')[:110]}")
        print("   " + "; ".join(f"{n} {m[k]} {u.get(k, '')}".strip() for k, n in keys if k in m))
        st = [(k, m[k]) for k in head if k.startswith("smsp__average_warp_latency_issue_stalled_") and k.endswith(".ratio")]
        if not st:
            st = [(k, m[k]) for k in head if "issue_stalled" in k and k.endswith(".ratio")]
        def num(x):
            try:
                return float(x.replace(",", ""))
            except ValueError:
                return 0.0
        st.sort(key=lambda kv: -num(kv[1]))
        print("   stalls (cycles per issued instruction): " + ", ".join(
            f"{k.split('stalled_')[1].split('.')[0].replace('_per_issue_active', '')} {num(v):.1f}" for k, v in st[:8] if num(v) > 0))
PY
tar czf "$OUT/ncu.tgz" -C "$W" . 2>/dev/null
rm -rf "$W"
