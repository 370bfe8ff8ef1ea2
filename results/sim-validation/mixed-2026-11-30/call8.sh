#!/usr/bin/env bash
# Call 8 (2026-11-30, one H200), from the repository root: the mixed-step decode choice in serving.
# The llama3-8b long-prompt matrix cell (Poisson, prompts 1,024-3,840, chunked prefill of 512-token
# steps, continuous+paged) at 85% and 50% of its capacity (10.41 / 6.125 req/s) with
# backend.mixed_decodes auto, prefill (the path before) and decode; N85 / N50 requests a run. Then
# the mixed-attention GPU test.
#   OUT=$OUT bash results/sim-validation/mixed-2026-11-30/call8.sh
set -uo pipefail
export SERVELAB_COMMIT=$(cat GPU_COMMIT 2>/dev/null || git rev-parse --short HEAD)
B=build-gpu
t0=$(date +%s)
{ echo "commit $SERVELAB_COMMIT"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; } > "$OUT/env.txt" 2>&1
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DSERVELAB_KERNELS_FP16=OFF > "$OUT/configure.log" 2>&1
timeout 300 cmake --build $B -j"$(nproc)" --target servelab test_cuda_backend_gpu > "$OUT/build.log" 2>&1
echo "build rc $? $(( $(date +%s) - t0 ))s"
Y=results/sim-validation/matrix/cells/h200-llama3-8b-poisson-longprompt-paged.yaml
run() {  # run RATE N MODE
  timeout 200 $B/servelab run $Y --out "$OUT/r$1-$3" --no-plots --force -q --set workload.rates=[$1] \
    --set workload.n_requests=$2 --set backend.mixed_decodes=$3 > "$OUT/r$1-$3.log" 2>&1
  echo "run $1 $3 rc $? $(( $(date +%s) - t0 ))s"
  rm -f "$OUT/r$1-$3"/report.html; gzip -9 "$OUT/r$1-$3"/*.jsonl 2>/dev/null
}
for m in auto prefill decode; do run 10.41 ${N85:-600} $m; done
for m in auto prefill; do run 6.125 ${N50:-400} $m; done
timeout 60 $B/test_cuda_backend_gpu --gtest_filter='MixedAttention*' > "$OUT/tests.txt" 2>&1
echo "tests rc $? $(( $(date +%s) - t0 ))s"; grep -E "^\[  (PASSED|FAILED) |worst relative|not a near tie" "$OUT/tests.txt"
python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import csv, glob, os, sys
print(f"{'run':18s} {'req/s':>6s} {'n':>5s} {'TTFT p50':>9s} {'TTFT p99':>9s} {'TPOT p50':>9s} {'TPOT p99':>9s} {'tok/s':>8s}")
for f in sorted(glob.glob(sys.argv[1] + "/r*/results.csv")):
    for r in csv.DictReader(open(f)):
        print(f"{os.path.basename(os.path.dirname(f)):18s} {float(r['rate']):6.2f} {r['n_requests']:>5s} {float(r['ttft_p50_ms']):9.1f} "
              f"{float(r['ttft_p99_ms']):9.1f} {float(r['tpot_p50_ms']):9.2f} {float(r['tpot_p99_ms']):9.2f} {float(r['output_throughput_tok_s']):8.1f}")
PY
echo "done $(( $(date +%s) - t0 ))s"
