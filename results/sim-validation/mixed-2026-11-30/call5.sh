#!/usr/bin/env bash
# Call 5 (2026-11-30, one H200), from the repository root: where a mixed step's extra cost goes.
# A llama3-8b grid at one context (3,773): chunks of 501 and 512 rows alone, beside 2 and 11
# decodes (rows 503 / 514 and 512 / 523), decodes of 1, 2 and 11; then, where nsys is installed,
# a trace of the same grid's steps once each, its kernels summed per step kind.
#   OUT=$OUT bash results/sim-validation/mixed-2026-11-30/call5.sh
set -uo pipefail
export SERVELAB_COMMIT=$(cat GPU_COMMIT 2>/dev/null || git rev-parse --short HEAD)
B=build-gpu
t0=$(date +%s)
{ which nsys ncu; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; } > "$OUT/env.txt" 2>&1
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DSERVELAB_KERNELS_FP16=OFF > "$OUT/configure.log" 2>&1
timeout 200 cmake --build $B -j"$(nproc)" --target servelab > "$OUT/build.log" 2>&1
echo "build rc $? $(( $(date +%s) - t0 ))s"
G=(profile --backend cuda --preset llama3-8b --batch 1,2,11 --contexts 3773 --chunk-lens 501,512 --prefill-lens 512
   --prompt-len 512 --no-bucket-edges --no-padded-decodes --no-host-overhead --kv-gb 20)
timeout 90 $B/servelab "${G[@]}" --repeats 7 --min-point-s 0 --json "$OUT/grid.json" > "$OUT/grid.txt" 2>&1
echo "grid rc $?"
grep -E "^ *(chunk|mixed|decode|prefill) " "$OUT/grid.txt"
if command -v nsys >/dev/null; then
  timeout 120 nsys profile -t cuda -o "$OUT/trace" --force-overwrite true $B/servelab "${G[@]}" --repeats 1 --warmup 1 \
    --warmup-s 0 --min-point-s 0 > "$OUT/nsys.log" 2>&1
  echo "nsys rc $?"
  timeout 90 nsys stats --report cuda_gpu_trace --format csv --output "$OUT/kern" "$OUT/trace.nsys-rep" > /dev/null 2>&1
  echo "stats rc $?"; ls "$OUT"
  gzip -9 "$OUT"/kern*.csv 2>/dev/null; rm -f "$OUT"/trace.sqlite
fi
