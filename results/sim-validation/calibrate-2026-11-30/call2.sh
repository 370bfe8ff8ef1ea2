#!/usr/bin/env bash
# Calls 2 and 3 (2026-11-30, one H200), from the repository root: matrix cells re-run with
# CALIBRATE=1 (matrix.sh: profile, the grid's capacity, a 300-request calibration run at 65% of it
# with another seed folded in by `servelab calibrate`, the calibrated capacity, validate-sim at 50%
# and 85% of it), into OUT/m, packed into OUT/m.tgz (the device returns few files).
#   CELLS="..." LOADS=0.5,0.85 SUSTAINED_S=4 OUT=$OUT bash results/sim-validation/calibrate-2026-11-30/call2.sh
set -uo pipefail
export SERVELAB_COMMIT=$(cat GPU_COMMIT 2>/dev/null || git rev-parse --short HEAD)
B=build-gpu
t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DSERVELAB_KERNELS_FP16=OFF > "$OUT/configure.log" 2>&1
timeout 300 cmake --build $B -j"$(nproc)" --target servelab > "$OUT/build.log" 2>&1
echo "build rc $? $(( $(date +%s) - t0 ))s"
DEADLINE=$(( t0 + ${TOTAL_S:-570} )) MIN_CELL_S=${MIN_CELL_S:-200} LOADS=${LOADS:-0.5,0.85} CALIBRATE=1 \
  CELLS=${CELLS:-h200-llama3-8b-poisson-longprompt-paged} BIN=$B/servelab OUT=$OUT/m \
  bash results/sim-validation/matrix.sh gpu > "$OUT/matrix.log" 2>&1
echo "matrix rc $? $(( $(date +%s) - t0 ))s"; grep -v "^- \`\|^$" "$OUT/matrix.log" | tail -30
for c in $OUT/m/*/calibration.txt $OUT/m/*/*/calibration.txt; do [ -f "$c" ] && { echo "== $c"; tail -20 "$c"; }; done
tar czf "$OUT/m.tgz" -C "$OUT" m && rm -rf "$OUT/m"
echo "done $(( $(date +%s) - t0 ))s"
