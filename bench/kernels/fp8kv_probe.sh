#!/usr/bin/env bash
# Why the FP8 KV decode reads at 0.6-0.7 of the copy (issue 26), for one device call:
#   OUT=$OUT bash bench/kernels/fp8kv_probe.sh
# 1. kv_read_probe (nvcc, standalone): a read-only kernel over the same pages in the arena's token
#    layout, the bf16 layout and a head-major page layout, at the FP8 kernel's occupancy and at full.
# 2. kernel_bench --fp8kv --only SHAPE under Nsight Compute (NCU_SHAPES, ';'-separated; sections for
#    DRAM, occupancy, stalls and instructions) for the default variant's first launch, and the
#    whole --fp8kv table (FULL_BENCH=1).
# SKIP_PROBE=1 leaves step 1 out; NCU_BASE=demangled matches NCU_KERNEL against the name with its
# template arguments; NCU_EXTRA adds ncu options (e.g. --section SourceCounters).
# Output in OUT: probe.txt, ncu-summary.txt, kernel_bench.log/.json, ncu.tgz; the steps' table last.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-results/runs/fp8kv-probe}
BUILD=${BUILD:-build-gpu}
mkdir -p "$OUT"
W=$(mktemp -d)
COMMIT=$(cat GPU_COMMIT 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; echo "commit $COMMIT"; date -u
  ncu --version 2>/dev/null | tail -1; } >"$OUT/environment.txt" 2>&1
STEP_DIR=$OUT
TABLE=()
# shellcheck source=scripts/lib/step.sh
. scripts/lib/step.sh  # step NAME LIMIT CMD...: output to $OUT/NAME.log, a row of TABLE
[ -n "${SKIP_PROBE:-}" ] || step probe_build 120 nvcc -O3 -arch=sm_90a -std=c++17 bench/kernels/kv_read_probe.cu -o "$W/kv_read_probe"
[ -n "${SKIP_BUILD:-}" ] || {
  G=(); command -v ninja >/dev/null && G=(-G Ninja)
  step configure 60 cmake -S . -B "$BUILD" "${G[@]}" -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90a -DSERVELAB_KERNELS_FP16=OFF
  step build "${BUILD_LIMIT:-240}" cmake --build "$BUILD" -j"$(nproc)" --target kernel_bench ${EXTRA_TARGETS:-} -- -k 0 &
}
bpid=${!:-}
[ -x "$W/kv_read_probe" ] && step probe 120 "$W/kv_read_probe"
cp "$OUT/probe.log" "$OUT/probe.txt" 2>/dev/null
wait $bpid 2>/dev/null
SECTIONS=(--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats
          --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats --section ComputeWorkloadAnalysis)
IFS=';' read -r -a shapes <<<"${NCU_SHAPES:-b32 ctx4096 gqa1;b32 ctx4096 gqa4}"
i=0
for sh in "${shapes[@]}"; do
  tag="fp8_$(echo "$sh" | tr ' ' '_')"
  [ -x "$BUILD/kernel_bench" ] && step "ncu_$i" 120 ncu --clock-control none -f -o "$W/$tag" \
    --kernel-name-base "${NCU_BASE:-function}" --kernel-name regex:"${NCU_KERNEL:-decode_fp8_mma_kernel}" --launch-skip "${NCU_SKIP:-0}" --launch-count 1 "${SECTIONS[@]}" ${NCU_EXTRA:-} \
    "$BUILD/kernel_bench" --fp8kv --only "$sh" --json "$W/kb_$i.json"
  i=$((i + 1))
done
for r in "$W"/*.ncu-rep; do
  [ -f "$r" ] || continue
  ncu -i "$r" --page details >"${r%.ncu-rep}.details.txt" 2>&1
  ncu -i "$r" --page raw --csv >"${r%.ncu-rep}.raw.csv" 2>&1
done
python3 scripts/lib/ncu_summary.py "$W" >"$OUT/ncu-summary.txt" 2>&1
[ "${FULL_BENCH:-1}" = 1 ] && [ -x "$BUILD/kernel_bench" ] &&
  step kernel_bench 200 "$BUILD/kernel_bench" --fp8kv --json "$OUT/kernel_bench.json" --commit "$COMMIT"
tar czf "$OUT/ncu.tgz" -C "$W" --exclude=kv_read_probe . 2>/dev/null
echo "== probe"; cat "$OUT/probe.txt" 2>/dev/null
echo "== ncu"; cat "$OUT/ncu-summary.txt"
echo "== kernel_bench"; grep -E "fp8kv |bf16kv " "$OUT/kernel_bench.log" 2>/dev/null | head -60
echo "== steps"; printf '%s\n' "${TABLE[@]}"
