#!/usr/bin/env bash
# As run at 5ea49a4 (2026-11-30): --no-mixed-decode-kernel went with the path it turned off (bf19de4).
# One device call on the two-GPU kind (2026-11-30, second session, call 3): a mixed step's decodes
# through the decode attention kernel (CudaBackendOptions::mixed_decode_kernel). Builds the
# backend GPU tests and servelab; GPU 0: every backend GPU test, then the llama3-8b long-prompt
# matrix cell at both loads (matrix.sh gpu: profile, capacity, validate-sim) with the new path;
# GPU 1: that cell's profile grid with and without the path (--no-mixed-decode-kernel), then the
# held-out llama2-13b long-prompt cell at 85% load. nvidia-smi logged by matrix.sh.
#   OUT=$OUT bash scripts/gpu-session-2026-11-30c.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
export SERVELAB_COMMIT=$(cat GPU_COMMIT 2>/dev/null || git rev-parse --short HEAD)
B=build-gpu
t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DSERVELAB_KERNELS_FP16=OFF > "$OUT/configure.log" 2>&1
timeout 330 cmake --build $B -j"$(nproc)" --target servelab test_cuda_backend_gpu > "$OUT/build.log" 2>&1
echo "build rc $? $(( $(date +%s) - t0 ))s"
DL=$(( t0 + ${TOTAL_S:-585} ))
Y=results/sim-validation/matrix/cells
( export CUDA_VISIBLE_DEVICES=1
  for mode in on off; do
    flag=(); [ $mode = off ] && flag=(--no-mixed-decode-kernel)
    timeout 120 $B/servelab profile --backend cuda --seed 1 --kv paged --for-scenario $Y/h200-llama3-8b-poisson-longprompt-paged.yaml \
      --interleave --repeats 3 --min-point-s 0.5 --preset llama3-8b --no-host-overhead "${flag[@]}" \
      --json "$OUT/profile-8b-mixed-$mode.json" > "$OUT/profile-8b-mixed-$mode.txt" 2>&1
    echo "profile $mode rc $? $(date +%s)"
  done
  DEADLINE=$DL MIN_CELL_S=200 LOADS=0.85 CELLS=h200-llama2-13b-ramp-longprompt-naive BIN=$B/servelab OUT=$OUT/m1 \
    bash results/sim-validation/matrix.sh gpu
  echo "w1 done $(date +%s)" ) > "$OUT/w1.log" 2>&1 &
w1=$!
( export CUDA_VISIBLE_DEVICES=0
  timeout 200 $B/test_cuda_backend_gpu --gtest_filter='-*TwoGpu*:*Tp*' > "$OUT/backend_gpu.log" 2>&1
  echo "backend tests rc $? $(date +%s)"
  DEADLINE=$DL MIN_CELL_S=200 CELLS=h200-llama3-8b-poisson-longprompt-paged BIN=$B/servelab OUT=$OUT/m0 \
    bash results/sim-validation/matrix.sh gpu
  echo "w0 done $(date +%s)" ) > "$OUT/w0.log" 2>&1
wait $w1
cat "$OUT/w0.log" "$OUT/w1.log" | grep -v "^  "
grep -E "^\[  (PASSED|FAILED)|FAILED  \]|worst relative" "$OUT/backend_gpu.log" | head -20
for m in on off; do grep -E "^ *mixed|wrote" "$OUT/profile-8b-mixed-$m.txt" | head -8; done
cd "$OUT" && tar czf all.tgz m0 m1 profile-8b-* backend_gpu.log build.log w0.log w1.log && rm -rf m0 m1
ls
