#!/usr/bin/env bash
# Multi-LoRA on the GPU in one short device call: builds the LoRA tests and engine_bench
# (-DCMAKE_CUDA_ARCHITECTURES=90a), runs the LoRA kernel and backend GPU tests (with the graph
# tests beside them), then `engine_bench --lora` (docs/lora.md cites its figures):
#   OUT=$OUT bash scripts/gpu-lora-check.sh
# KERNEL_TESTS=0 leaves the LoRA kernel tests (test_kernels_gpu) out (KERNEL_FILTER: their gtest filter, default *Lora*); BENCH=0 leaves engine_bench out. QUICK=1 runs the bench's short version; TOTAL_LIMIT (default 340 s) bounds the whole script. The commit recorded: GPU_COMMIT (a file) or git.
# NCU=1 (before the bench): ncu (--clock-control none) on one decode step (a graph replay) per
#   NCU_POINTS entry B,CTX,K (default "32,512,1 32,512,8 64,512,64": K adapters; NCU_VARIANT: a
#   decode variant of the bench), each ncu_bB_kK.log, summarized by scripts/lib/ncu_lora_table.py
#   into ncu_lora.txt (the LoRA launches, their serialized durations and DRAM rates).
# SERVE=1 (after the bench): `servelab run scenarios/lora-compare.yaml` on the cuda backend (the
#   base model beside 8, 64 and 512 Zipf adapters over the same requests; issue 31's side-by-side
#   serving figures) into OUT/lora-compare/, its runs table printed; SERVE_LIMIT (default 330 s); SERVE_ARGS
#   more options for that run (e.g. "--set workload.rates=[8,24]").
# PROFILE_LORA=1 (before the bench): `servelab profile --lora-rank 16` of llama2-7b on a small grid
#   (profile-lora.json, profile-lora.txt): the sim's LoRA figures fitted to this GPU's own adapter
#   steps, to compare with the H200 fit the GPU presets carry (engine/backend/hardware.h: decode
#   knots at 1 / 8 / 16 / 32 / 64 rows of 5.4 / 15.8 / 16.6 / 23.3 / 46.8 us a layer; prefill 16.8 a
#   step + 37.7 a run after the first + 0.106 a row, us a layer; weights at 0.71 of the bandwidth).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/runs/gpu-lora-check}
BUILD=${BUILD:-build-gpu}
mkdir -p "$OUT"
COMMIT=$(cat GPU_COMMIT 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)
Q=(); [ "${QUICK:-0}" = 1 ] && Q=(--quick)
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; echo "commit $COMMIT"; date -u; } >"$OUT/environment.txt" 2>&1
G=(); command -v ninja >/dev/null && G=(-G Ninja)
t0=$(date +%s)
cmake -S . -B "$BUILD" "${G[@]}" -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
# -k 0: a target that fails to build leaves the others to run.
T=(test_cuda_backend_gpu engine_bench); [ "${KERNEL_TESTS:-1}" = 1 ] && T+=(test_kernels_gpu)
[ "${PROFILE_LORA:-0}" = 1 ] || [ "${SERVE:-0}" = 1 ] && T+=(servelab)
cmake --build "$BUILD" -j"$(nproc)" --target "${T[@]}" -- -k 0 \
  >"$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -40; }
echo "build $(($(date +%s) - t0)) s"
rc=0
touch "$OUT/kernels_gpu.log"
[ "${KERNEL_TESTS:-1}" = 1 ] && { timeout 120 "$BUILD/test_kernels_gpu" --gtest_filter="${KERNEL_FILTER:-*Lora*}" >"$OUT/kernels_gpu.log" 2>&1 || rc=1; }
timeout 180 "$BUILD/test_cuda_backend_gpu" --gtest_filter='*Lora*:*Graphs*:*GraphBranch*' >"$OUT/backend_gpu.log" 2>&1 || rc=1
grep -hE "^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is|rel_error" "$OUT/kernels_gpu.log" "$OUT/backend_gpu.log" | head -40
if [ "${NCU:-0}" = 1 ]; then
  NCU_BIN=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  V=(); [ -n "${NCU_VARIANT:-}" ] && V=(--variants "$NCU_VARIANT")
  for pt in ${NCU_POINTS:-32,512,1 32,512,8 64,512,64}; do
    IFS=, read -r b ctx k <<<"$pt"
    timeout "${NCU_TIMEOUT:-60}" "$NCU_BIN" --profile-from-start off --clock-control none --csv --page raw \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size \
      "$BUILD/engine_bench" --lora --ncu-decode "$b,$ctx" --lora-adapters "$k" "${V[@]}" >"$OUT/ncu_b${b}_k${k}.log" 2>&1 || rc=1
  done
  python3 scripts/lib/ncu_lora_table.py "$OUT"/ncu_b*_k*.log >"$OUT/ncu_lora.txt" 2>&1
  cut -c1-150 "$OUT/ncu_lora.txt"
fi
if [ "${PROFILE_LORA:-0}" = 1 ]; then
  timeout "${PROFILE_LORA_LIMIT:-150}" "$BUILD/servelab" profile --backend cuda --preset llama2-7b --lora-rank 16 \
    --lora-adapters 1,8,32 --batch 1,8,16,32,64 --contexts 512 --prefill-lens 64,128,256,512,1024 --prompt-len 64 --max-rows 2048 \
    --chunk-lens 128 --no-padded-decodes --no-bucket-edges --json "$OUT/profile-lora.json" >"$OUT/profile-lora.txt" 2>&1 || rc=1
  sed -n '/^LoRA, rank/,/^sim.s LoRA fit/p' "$OUT/profile-lora.txt"
fi
# The bench gets what is left of TOTAL_LIMIT seconds (its figures print as they come).
left=$(( ${TOTAL_LIMIT:-340} - ($(date +%s) - t0) )); [ $left -lt 30 ] && left=30
if [ "${BENCH:-1}" = 1 ]; then
  timeout "$left" "$BUILD/engine_bench" --lora "${Q[@]}" --json "$OUT/engine_bench_lora.json" --commit "$COMMIT" \
    >"$OUT/engine_bench_lora.log" 2>&1 || rc=1
  cut -c1-180 "$OUT/engine_bench_lora.log"
fi
if [ "${SERVE:-0}" = 1 ]; then
  # shellcheck disable=SC2086  # SERVE_ARGS: more options for the run, e.g. "--set workload.rates=[8,24]"
  timeout "${SERVE_LIMIT:-330}" "$BUILD/servelab" run scenarios/lora-compare.yaml --set 'backend={kind: cuda}' ${SERVE_ARGS:-} \
    --out "$OUT/lora-compare" --force --quiet --no-plots >"$OUT/lora-compare.log" 2>&1 || rc=1
  tail -3 "$OUT/lora-compare.log"
  grep -E "^\| (base|lora-[0-9]+) \| [0-9]+ \|" "$OUT/lora-compare/report.md" | cut -d'|' -f2-11,15-18
fi
exit $rc
