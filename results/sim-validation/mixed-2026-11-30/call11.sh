#!/usr/bin/env bash
# As run at e72bf73, whose grid change (mixed points at the smallest batch) was reverted after it.
# Call 11 (2026-11-30, one H200), from the repository root: the llama3-8b long-prompt cell's profile
# with mixed points at the smallest batch too (profiler.cpp), as matrix.sh takes it, with the
# 4-second sustained probe; its real steps of call 10 are re-priced with it here (price-steps).
#   OUT=$OUT bash results/sim-validation/mixed-2026-11-30/call11.sh
set -uo pipefail
export SERVELAB_COMMIT=$(cat GPU_COMMIT 2>/dev/null || git rev-parse --short HEAD)
B=build-gpu
t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DSERVELAB_KERNELS_FP16=OFF > "$OUT/configure.log" 2>&1
timeout 300 cmake --build $B -j"$(nproc)" --target servelab > "$OUT/build.log" 2>&1
echo "build rc $? $(( $(date +%s) - t0 ))s"
timeout 200 $B/servelab profile --backend cuda --seed 1 --kv paged \
  --for-scenario results/sim-validation/matrix/cells/h200-llama3-8b-poisson-longprompt-paged.yaml --interleave --repeats 3 \
  --min-point-s 0.5 --sustained-s 4 --preset llama3-8b --json "$OUT/profile-smallmixed.json" > "$OUT/profile-smallmixed.txt" 2>&1
echo "profile rc $? $(( $(date +%s) - t0 ))s"; grep -E "^ *mixed |sustained load" "$OUT/profile-smallmixed.txt"
