#!/usr/bin/env bash
# Nsight Compute on quant_gemv's decode products (issue 26: why INT4/FP8 stream at half the copy),
# for one device call:   OUT=$OUT bash scripts/gpu-quant-ncu.sh
# Builds (sm_90a, no fp16 kernels) quant_gemv_probe and kernel_bench [and test_kernels_gpu with
# TESTS=1: its *QuantGemv* cases run], then profiles one eager launch of each product in PROBES
# ("fmt N K M kernel" ';'-separated; default: the steps kernel, INT4 and FP8 at M1 over llama2-7b's
# QKV and O) with SECTIONS, clocks as found (--clock-control none), caches flushed before each
# profiled kernel (ncu's default); FULL="fmt N K M kernel" gets --set full as well, and the opcode
# mix of its SASS (and of SOURCE_REPS, reports of an earlier call). Then kernel_bench --quant-only
# (QUANT_BENCH=0 skips it).
# Output in OUT: ncu-summary.txt (per kernel: duration, DRAM throughput, occupancy, waves, issue
# activity, the warp stall reasons, pipe utilization; printed), ncu.tgz (details pages, raw CSV and
# the .ncu-rep files), build/test/bench logs in logs.tgz, kernel_bench.json.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/runs/gpu-quant-ncu}
BUILD=${BUILD:-build-gpu-quant}
mkdir -p "$OUT"
L=$(mktemp -d)
W=$(mktemp -d)
COMMIT=$(cat GPU_COMMIT 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader; echo "commit $COMMIT"
  date -u; ncu --version | tail -1; } >"$OUT/environment.txt" 2>&1
t0=$(date +%s)
step() {  # step NAME LIMIT CMD...: output to $L/NAME.log, a line in $OUT/steps.txt
  local name=$1 limit=$2; shift 2
  local s=$(date +%s); timeout "$limit" "$@" >"$L/$name.log" 2>&1; local rc=$?
  echo "$name rc=$rc $(( $(date +%s) - s ))s (at $(( $(date +%s) - t0 ))s)" | tee -a "$OUT/steps.txt"
  return $rc
}
G=(); command -v ninja >/dev/null && G=(-G Ninja)
targets=(quant_gemv_probe kernel_bench)
[ "${TESTS:-1}" = 1 ] && targets+=(test_kernels_gpu)
step configure 60 cmake -S . -B "$BUILD" "${G[@]}" -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90a -DSERVELAB_KERNELS_FP16=OFF
step build "${BUILD_LIMIT:-200}" cmake --build "$BUILD" -j"$(nproc)" --target "${targets[@]}" -- -k 0
[ "${TESTS:-1}" = 1 ] && [ -x "$BUILD/test_kernels_gpu" ] &&
  step kernels_gpu 90 "$BUILD/test_kernels_gpu" --gtest_filter='*QuantGemv*:-*/f16' &
tpid=$!
PROBES=${PROBES:-"int4 12288 4096 1 steps;int4 4096 4096 1 steps;fp8 12288 4096 1 steps;fp8 4096 4096 1 steps"}
SECTIONS=(--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats
          --section SchedulerStats --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables
          --section InstructionStats --section ComputeWorkloadAnalysis)
wait $tpid 2>/dev/null  # ncu wants the GPU alone
IFS=';' read -r -a probes <<<"$PROBES"
i=0
for p in "${probes[@]}"; do
  read -r fmt n k m kern <<<"$p"
  tag=$(printf "%02d_%s_%sx%s_M%s_%s" $i $fmt $n $k $m $kern)
  step "ncu_$tag" 60 ncu --clock-control none -f -o "$W/$tag" --kernel-name regex:quant_gemv --launch-skip 2 --launch-count 1 \
    "${SECTIONS[@]}" "$BUILD/quant_gemv_probe" $fmt $n $k $m $kern 5
  i=$((i + 1))
done
if [ -n "${FULL:-}" ]; then
  read -r fmt n k m kern <<<"$FULL"
  step ncu_full 120 ncu --clock-control none -f -o "$W/full_${fmt}_${n}x${k}_M${m}_$kern" --kernel-name regex:quant_gemv \
    --launch-skip 2 --launch-count 1 --set full --import-source no "$BUILD/quant_gemv_probe" $fmt $n $k $m $kern 5
fi
for r in "$W"/*.ncu-rep; do
  [ -f "$r" ] || continue
  ncu -i "$r" --page details >"${r%.ncu-rep}.details.txt" 2>&1
  ncu -i "$r" --page raw --csv >"${r%.ncu-rep}.raw.csv" 2>&1
done
# The SASS of the --set full reports (and SOURCE_REPS, reports of an earlier call) with each
# instruction's executed count: the opcode mix per profiled kernel.
for r in "$W"/full_*.ncu-rep ${SOURCE_REPS:-}; do
  [ -f "$r" ] || continue
  b=$(basename "${r%.ncu-rep}")
  ncu -i "$r" --page source --csv --print-source sass >"$W/sass_$b.csv" 2>&1
done
python3 scripts/lib/ncu_summary.py "$W" >"$OUT/ncu-summary.txt" 2>&1
python3 scripts/lib/ncu_opcodes.py "$W"/sass_*.csv >>"$OUT/ncu-summary.txt" 2>&1
[ "${QUANT_BENCH:-1}" = 1 ] && [ -x "$BUILD/kernel_bench" ] &&
  step kernel_bench 150 "$BUILD/kernel_bench" --quant-only --json "$OUT/kernel_bench.json" --commit "$COMMIT"
for b in quant_gemv_probe kernel_bench; do  # the SASS of the kernels profiled
  [ -x "$BUILD/$b" ] && cuobjdump -sass -fun quant_gemv "$BUILD/$b" >"$W/sass_$b.txt" 2>&1
done
[ -x "$BUILD/quant_gemv_probe" ] && cuobjdump -res-usage "$BUILD/quant_gemv_probe" 2>&1 | grep -A1 quant_gemv >"$W/res_usage.txt"
tar czf "$OUT/ncu.tgz" -C "$W" . 2>/dev/null
tar czf "$OUT/logs.tgz" -C "$L" . 2>/dev/null
echo "== gpu-quant-ncu: $(head -1 "$OUT/environment.txt"), commit $COMMIT =="
cat "$OUT/steps.txt"
grep -hE "^\[  (PASSED|FAILED) |^\[  FAILED|worst relative error|Failure" "$L"/kernels_gpu.log 2>/dev/null | head -20
grep -h "eager median" "$L"/ncu_*.log 2>/dev/null | head -20
cat "$OUT/ncu-summary.txt"
grep -h "decode-step products" "$L/kernel_bench.log" 2>/dev/null | cut -c1-330
grep -E "quant_gemv_(fp8|int4)_(steps|packed) " "$L/kernel_bench.log" 2>/dev/null | grep -E " M(1|8) " | cut -c1-110
