#!/usr/bin/env bash
# The OpenAI server on the cuda backend, its KV cache sized from GPU memory (vLLM's
# gpu_memory_utilization rule), driven over HTTP by `servelab bench` for 20 s. Run on the GPU
# machine by scripts/gpu-engine-check.sh (STEPS=serve). Env: BIN (servelab), OUT (folder).
set -uo pipefail
BIN=${BIN:-build-gpu/servelab}
OUT=${OUT:-results/runs/gpu-serve-check}
PORT=${PORT:-18977}
mkdir -p "$OUT"
"$BIN" serve --backend cuda --preset llama2-7b --gpu-memory-utilization 0.85 --max-num-seqs 128 \
  --max-num-batched-tokens 4096 --max-model-len 2048 --port "$PORT" >"$OUT/server.log" 2>&1 &
pid=$!
ok=0
for _ in $(seq 300); do
  if (exec 3<>/dev/tcp/127.0.0.1/"$PORT") 2>/dev/null; then ok=1; break; fi
  kill -0 $pid 2>/dev/null || break
  sleep 0.2
done
if [ $ok != 1 ]; then
  kill $pid 2>/dev/null
  cat "$OUT/server.log"
  exit 1
fi
"$BIN" bench --url "http://127.0.0.1:$PORT" --rate 8 --duration 20 --prompt-tokens 256 --output-tokens 128 \
  --out "$OUT/bench" --no-plots
rc=$?
kill -TERM $pid
wait $pid
echo "server exit status $? (SIGTERM drains and exits 0)"
cat "$OUT/server.log"
exit $rc
