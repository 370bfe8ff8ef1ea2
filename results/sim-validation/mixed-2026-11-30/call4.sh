#!/usr/bin/env bash
# Call 4 (2026-11-30, two-GPU kind), from the repository root: the held-out llama2-13b long-prompt
# cell at 50% load (GPU 0) and the two chat cells the mixed-row term moved in re-prediction
# (GPU 1), each through matrix.sh gpu (profile, capacity, validate-sim) with today's engine and sim.
#   OUT=$OUT bash results/sim-validation/mixed-2026-11-30/call4.sh
set -uo pipefail
export SERVELAB_COMMIT=$(cat GPU_COMMIT 2>/dev/null || git rev-parse --short HEAD)
B=build-gpu
t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DSERVELAB_KERNELS_FP16=OFF > "$OUT/configure.log" 2>&1
timeout 300 cmake --build $B -j"$(nproc)" --target servelab > "$OUT/build.log" 2>&1
echo "build rc $? $(( $(date +%s) - t0 ))s"
DL=$(( t0 + ${TOTAL_S:-580} ))
( CUDA_VISIBLE_DEVICES=1 DEADLINE=$DL MIN_CELL_S=100 CELLS="h200-llama3-8b-gamma-chat-paged h200-llama2-13b-poisson-chat-paged" \
    BIN=$B/servelab OUT=$OUT/m1 bash results/sim-validation/matrix.sh gpu > "$OUT/w1.log" 2>&1 ) &
w1=$!
CUDA_VISIBLE_DEVICES=0 DEADLINE=$DL MIN_CELL_S=200 LOADS=0.5 CELLS=h200-llama2-13b-ramp-longprompt-naive BIN=$B/servelab \
  OUT=$OUT/m0 bash results/sim-validation/matrix.sh gpu > "$OUT/w0.log" 2>&1
wait $w1
grep -v "^  " "$OUT/w0.log" "$OUT/w1.log" | tail -30
cd "$OUT" && tar czf all.tgz m0 m1 build.log w0.log w1.log && rm -rf m0 m1
ls
