#!/usr/bin/env bash
# Call 7 (2026-11-30, one H200), from the repository root: a mixed step's decodes through the decode
# kernel where cuda/mixed_attention_plan.h prices it cheaper (backend.mixed_decodes: auto) against
# always the prefill kernel (prefill, the path before) and always the decode kernel (decode), one
# backend each in one process (bench/step_probe.cpp), after the GPU tests of the mixed path.
#   OUT=$OUT bash results/sim-validation/mixed-2026-11-30/call7.sh
set -uo pipefail
B=build-gpu
t0=$(date +%s)
{ cat GPU_COMMIT 2>/dev/null; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; } > "$OUT/env.txt" 2>&1
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DSERVELAB_KERNELS_FP16=OFF > "$OUT/configure.log" 2>&1
timeout 300 cmake --build $B -j"$(nproc)" --target step_probe test_cuda_backend_gpu ${TARGETS:-} > "$OUT/build.log" 2>&1
echo "build rc $? $(( $(date +%s) - t0 ))s"
timeout 120 $B/test_cuda_backend_gpu --gtest_filter='MixedAttention*:*Chunk*:*Mixed*' > "$OUT/tests.txt" 2>&1
echo "tests rc $? $(( $(date +%s) - t0 ))s"; grep -E "^\[  (PASSED|FAILED) |worst relative" "$OUT/tests.txt"
M=auto,prefill,decode
probe() { timeout 150 $B/step_probe "$@" 11 $M >> "$OUT/times.txt" 2>&1; echo "probe $1 $2 rc $? $(( $(date +%s) - t0 ))s"; }
probe llama3-8b 3773 501:0,501:1,501:2,501:4,501:8,501:11,496:16,480:32,125:2,125:11,256:4,256:16
probe llama3-8b 1024 501:0,501:2,496:16,480:32,256:8
probe llama2-7b 2048 512:0,510:2,504:8,496:16,256:4,128:16
cat "$OUT/times.txt"
echo "done $(( $(date +%s) - t0 ))s"
