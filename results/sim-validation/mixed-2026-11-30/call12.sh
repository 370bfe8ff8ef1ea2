#!/usr/bin/env bash
# Call 12 (2026-11-30, one H200), from the repository root: every cuda-backend GPU test on the
# engine whose mixed steps pick their decodes' attention kernel (mixed_decodes auto by default),
# bf16 kernels only (the f16 cases fail by design in such a build: counted apart).
#   OUT=$OUT bash results/sim-validation/mixed-2026-11-30/call12.sh
set -uo pipefail
B=build-gpu
t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DSERVELAB_KERNELS_FP16=OFF > "$OUT/configure.log" 2>&1
timeout 200 cmake --build $B -j"$(nproc)" --target test_cuda_backend_gpu > "$OUT/build.log" 2>&1
echo "build rc $? $(( $(date +%s) - t0 ))s"
timeout ${TEST_S:-150} $B/test_cuda_backend_gpu > "$OUT/tests.txt" 2>&1
echo "tests rc $? $(( $(date +%s) - t0 ))s"
grep -E "^\[==========\]|^\[  PASSED" "$OUT/tests.txt"
f16=$(grep -c "built without the fp16 kernels" "$OUT/tests.txt")
echo "failed: $(grep -c '^\[  FAILED  \].*ms)' "$OUT/tests.txt") (of which fp16-not-built: $f16)"
grep -B2 "^\[  FAILED  \].*ms)" "$OUT/tests.txt" | grep -v "fp16 kernels\|^--$\|^\[  FAILED\|^$" | head -20
grep "^\[  FAILED  \].*ms)" "$OUT/tests.txt" | head -40
gzip -9 "$OUT/tests.txt"
