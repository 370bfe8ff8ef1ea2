#!/usr/bin/env bash
# Call 1 (2026-11-30, one H200), from the repository root: does a heavy step cost more after a
# heavy step? For each long-prompt matrix cell, its profile twice in one call, back to back: as the
# matrix takes it (profile-plain-C.json) and with `--lead-in-self` (profile-leadin-C.json: each
# non-decode point timed right after an untimed twin of itself), then `matrix.sh repredict` here
# re-prices the cells' recorded runs from each. First, every cuda-backend GPU test (bf16 kernels).
#   OUT=$OUT bash results/sim-validation/leadin-2026-11-30/call1.sh
set -uo pipefail
export SERVELAB_COMMIT=$(cat GPU_COMMIT 2>/dev/null || git rev-parse --short HEAD)
B=build-gpu
t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DSERVELAB_KERNELS_FP16=OFF > "$OUT/configure.log" 2>&1
timeout 300 cmake --build $B -j"$(nproc)" --target servelab test_cuda_backend_gpu > "$OUT/build.log" 2>&1
echo "build rc $? $(( $(date +%s) - t0 ))s"; tail -3 "$OUT/build.log"
if [ "${TESTS:-1}" != 0 ]; then
  timeout ${TEST_S:-150} $B/test_cuda_backend_gpu > "$OUT/tests.txt" 2>&1
  echo "tests rc $? $(( $(date +%s) - t0 ))s"
  grep -E "^\[==========\]|^\[  PASSED" "$OUT/tests.txt"
  echo "failed: $(grep -c '^\[  FAILED  \].*ms)' "$OUT/tests.txt") (of which fp16-not-built: $(grep -c "built without the fp16 kernels" "$OUT/tests.txt"))"
  grep "^\[  FAILED  \].*ms)" "$OUT/tests.txt" | grep -v -i "f16\|fp16\|half" | head -20
  gzip -9 "$OUT/tests.txt"
fi
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active --format=csv -lms 250 > "$OUT/smi.csv" 2>/dev/null &
smi=$!
for cell in ${CELLS:-h200-llama3-8b-poisson-longprompt-paged h200-llama2-13b-ramp-longprompt-naive}; do
  s=0; [ "$cell" = h200-llama3-8b-poisson-longprompt-paged ] && s=4   # as the recorded profile
  for kind in plain leadin; do
    li=0; [ $kind = leadin ] && li=1
    echo "$cell $kind start $(date +%s)" >> "$OUT/marks.txt"
    CELLS=$cell SUSTAINED_S=$s LEAD_IN_SELF=$li PROFILE_NAME=profile-$kind-$SERVELAB_COMMIT.json \
      BIN=$B/servelab OUT=$OUT/m bash results/sim-validation/matrix.sh profile >> "$OUT/profile.log" 2>&1
    rc=$?
    echo "$cell $kind end $(date +%s)" >> "$OUT/marks.txt"
    echo "$cell $kind rc $rc $(( $(date +%s) - t0 ))s"
  done
done
kill $smi 2>/dev/null
gzip -9 "$OUT/smi.csv"
tar czf "$OUT/m.tgz" -C "$OUT" m && rm -rf "$OUT/m"
echo "done $(( $(date +%s) - t0 ))s"
