#!/usr/bin/env bash
# Call 9 (2026-11-30, one H200), from the repository root: the llama3-8b long-prompt matrix cell at
# 85% load re-run on the engine whose mixed steps pick their decodes' attention kernel
# (backend.mixed_decodes auto): matrix.sh gpu (profile --for-scenario, capacity, validate-sim) into
# OUT/m, packed into OUT/m.tgz (the device returns few files).
#   OUT=$OUT bash results/sim-validation/mixed-2026-11-30/call9.sh
set -uo pipefail
export SERVELAB_COMMIT=$(cat GPU_COMMIT 2>/dev/null || git rev-parse --short HEAD)
B=build-gpu
t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DSERVELAB_KERNELS_FP16=OFF > "$OUT/configure.log" 2>&1
timeout 300 cmake --build $B -j"$(nproc)" --target servelab > "$OUT/build.log" 2>&1
echo "build rc $? $(( $(date +%s) - t0 ))s"
DEADLINE=$(( t0 + ${TOTAL_S:-570} )) MIN_CELL_S=200 LOADS=${LOADS:-0.85} CELLS=${CELLS:-h200-llama3-8b-poisson-longprompt-paged} \
  BIN=$B/servelab OUT=$OUT/m bash results/sim-validation/matrix.sh gpu > "$OUT/matrix.log" 2>&1
echo "matrix rc $? $(( $(date +%s) - t0 ))s"; tail -25 "$OUT/matrix.log"
tar czf "$OUT/m.tgz" -C "$OUT" m && rm -rf "$OUT/m"
echo "done $(( $(date +%s) - t0 ))s"
