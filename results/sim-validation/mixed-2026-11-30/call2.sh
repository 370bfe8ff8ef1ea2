#!/usr/bin/env bash
# As run at efee3a5 (2026-11-30): the sustained probe's mixed phase it measured was removed in 01dfb6b.
# One device call on the two-GPU kind (2026-11-30, second session): the sustained-load probe with
# its mixed phase on five matrix cells' grids (GPU 1: the two long-prompt cells; GPU 0: three chat
# cells), then on GPU 0 engine_bench's quantized steps with decode attention's PDL modes and the
# LoRA prompt-grouping A/B (scenarios/lora-zipf.yaml, bursts of short prompts on 8 adapters, on
# cuda with and without workload.lora.group_prompts). nvidia-smi sampled every 250 ms beside it.
#   OUT=$OUT bash scripts/gpu-session-2026-11-30b.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
export SERVELAB_COMMIT=$(cat GPU_COMMIT 2>/dev/null || git rev-parse --short HEAD)
B=build-gpu
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DSERVELAB_KERNELS_FP16=OFF > "$OUT/configure.log" 2>&1
t0=$(date +%s)
timeout 300 cmake --build $B -j"$(nproc)" --target servelab engine_bench > "$OUT/build.log" 2>&1
echo "build rc $? $(( $(date +%s) - t0 ))s"
P=profile-mixedprobe-$SERVELAB_COMMIT.json
nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv -lms 250 > "$OUT/smi.csv" 2>&1 &
smi=$!
( export CUDA_VISIBLE_DEVICES=1
  echo "w1 start $(date +%s)"
  CELLS="h200-llama3-8b-poisson-longprompt-paged h200-llama2-13b-ramp-longprompt-naive" SUSTAINED_S=8 PROFILE_NAME=$P \
    BIN=$B/servelab OUT=$OUT/m bash results/sim-validation/matrix.sh profile
  echo "w1 done $(date +%s)" ) > "$OUT/w1.log" 2>&1 &
w1=$!
( export CUDA_VISIBLE_DEVICES=0
  echo "w0 start $(date +%s)"
  CELLS="h200-llama3-8b-gamma-chat-paged h200-llama2-7b-ramp-chat-paged h200-llama2-13b-poisson-chat-paged" SUSTAINED_S=8 \
    PROFILE_NAME=$P BIN=$B/servelab OUT=$OUT/m bash results/sim-validation/matrix.sh profile
  echo "w0 profiles $(date +%s)"
  timeout 90 $B/engine_bench --quantization fp8,int4_awq,none:a1,fp8:a1,int4_awq:a1,none:a2,fp8:a2,int4_awq:a2 --quick \
    --json "$OUT/quant-attn.json" --commit "$SERVELAB_COMMIT" > "$OUT/quant-attn.log" 2>&1
  echo "w0 quant rc $? $(date +%s)"
  for g in true false; do
    timeout 120 $B/servelab run scenarios/lora-zipf.yaml -q --no-plots --out "$OUT/lora-$g" --set 'backend={kind: cuda}' \
      --set 'workload.rates=[64]' --set workload.n_requests=2000 --set 'workload.arrival={process: gamma, cv: 4}' \
      --set 'workload.prompt_tokens={dist: uniform, min: 32, max: 96}' \
      --set 'workload.output_tokens={dist: uniform, min: 16, max: 64}' \
      --set 'workload.lora={count: 8, distribution: uniform, base_fraction: 0.0, rank: 16, max_loras: 8}' \
      --set workload.lora.group_prompts=$g > "$OUT/lora-$g.log" 2>&1
    echo "lora $g rc $? $(date +%s)"
  done ) > "$OUT/w0.log" 2>&1
wait $w1
kill $smi
cat "$OUT/w0.log" "$OUT/w1.log"
grep -h "sustained load\|  mixed" "$OUT"/m/*/profile-mixed*.txt
grep -E "quant_step_vs" "$OUT/quant-attn.log"
cd "$OUT" && gzip -9 smi.csv
rm -f lora-*/report.html lora-*/steps.jsonl
tar czf all.tgz m lora-true lora-false quant-attn.* smi.csv.gz w0.log w1.log build.log lora-*.log && rm -rf m lora-true lora-false
ls
