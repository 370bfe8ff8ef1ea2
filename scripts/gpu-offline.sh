#!/usr/bin/env bash
# Offline throughput, servelab against Hugging Face transformers on the same plan, same GPU, one
# device call (issue 8 item 4): build servelab with CUDA (reused when $BUILD/servelab exists),
# export the plan of scenarios/gpu-offline-llama2-7b.yaml (1,000 ShareGPT-like requests at t = 0),
# run servelab's strategies on it, replay the same plan through transformers' static batching
# (`generate`, padded batches of 32) and its continuous batching manager
# (scripts/hf-offline-peer.py), then one `servelab report` over the three record sets. A short
# table (output tok/s, req/s, ratios) is printed last.
#
# Environment:
#   OUT      where the results go (default results/runs/gpu-offline); at most 8 files: summary.json
#            and report.md of the combined report, table.txt, environment.txt, gpu-offline.log and
#            gpu-offline.tgz (everything else: records, runs.json, step logs, peers' .run.json)
#   BUILD    build folder (default build-gpu)
#   STEPS    default "build servelab static continuous report"; also "profile" (a static decode
#            step under torch.profiler, scripts/hf-offline-peer.py --profile-steps)
#   PLAN_JSON  replay this exported plan instead of exporting one (then no build is needed for
#            the peers alone; the report is made where servelab is built)
#   TOTAL_S       the whole script's time (default 570, inside the device tool's 10-minute call):
#                 each later step gets what is left, and the peers' --max-seconds shrink to fit
#   SERVELAB_MAX_S  limit of `servelab run` (default 260; SIGINT: it keeps its records and reports)
#   STATIC_MAX_S  --max-seconds of the static peer at most (default 120; the whole plan takes ~15 min)
#   CB_MAX_S      --max-seconds of the continuous peer at most (default 240)
#   PEER_LIMIT    replay only the first N requests in both peers (default 0 = all)
#   RUN_SET       extra --set options for `servelab run` (e.g. to drop a strategy)
#   SCENARIO default scenarios/gpu-offline-llama2-7b.yaml (another one for a dry run on the CPU)
#   PACK=0   leave $OUT unpacked
# Exit status: 0 when every step passed.
set -uo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
TOTAL_S=${TOTAL_S:-570}
left() { echo $((TOTAL_S - ($(date +%s) - START))); }
min() { if [ "$1" -lt "$2" ]; then echo "$1"; else echo "$2"; fi; }
PEER_SETUP_S=75   # a peer's python start, model build and warm-up, before its clock starts
OUT=${OUT:-results/runs/gpu-offline}
BUILD=${BUILD:-build-gpu}
STEPS=" ${STEPS:-build servelab static continuous report} "
SCENARIO=${SCENARIO:-scenarios/gpu-offline-llama2-7b.yaml}
want() { [[ "$STEPS" == *" $1 "* ]]; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
W="$OUT/work"
mkdir -p "$W"
LOG="$OUT/gpu-offline.log"
: >"$LOG"
declare -a TABLE=()
FAILED=0
export PYTHONUNBUFFERED=1

STEP_DIR=$W STEP_LOG=$LOG STEP_WIDTH=12 STEP_TIMEOUT_OPTS="-s INT -k 20"
. scripts/lib/step.sh  # step NAME TIMEOUT_S CMD...: output to $W/NAME.log and the log, a row in TABLE

[ -f GPU_COMMIT ] && export SERVELAB_COMMIT=$(cat GPU_COMMIT)
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nvcc --version | tail -1
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
  echo "commit ${SERVELAB_COMMIT:-$(git rev-parse HEAD 2>/dev/null)}"; date -u; } >"$OUT/environment.txt" 2>&1 || true

if want build; then
  if [ -x "$BUILD/servelab" ] && grep -q "^CMAKE_CUDA_ARCHITECTURES:STRING=90a" "$BUILD/CMakeCache.txt" 2>/dev/null; then
    TABLE+=("$(printf '%-12s %-5s' build reused)")
  else  # the cuda backend's build step (configure with sm_90a, Ninja, -j$(nproc)), servelab only
    step build 560 env STEPS=build BUILD="$BUILD" BUILD_TARGETS=servelab PACK=0 OUT="$W/build" \
      bash scripts/gpu-engine-check.sh
  fi
fi
SL="$BUILD/servelab"
[ -x "$SL" ] || [ -n "${PLAN_JSON:-}" ] || { echo "no $SL: nothing to run"; FAILED=1; }

PLAN="$W/plan.json"
if [ -n "${PLAN_JSON:-}" ]; then  # a plan exported earlier (the plan is a function of the scenario and seed)
  cp "$PLAN_JSON" "$PLAN"
else
  [ -x "$SL" ] && "$SL" plan "$SCENARIO" >"$W/plan.txt" 2>&1 && "$SL" plan "$SCENARIO" --json >"$PLAN" ||
    { echo "servelab plan failed" | tee -a "$LOG"; FAILED=1; }
  cat "$W/plan.txt" >>"$LOG" 2>/dev/null
fi

if want servelab && [ -x "$SL" ]; then
  step servelab "$(min "${SERVELAB_MAX_S:-260}" $(($(left) - 60)))" \
    "$SL" run "$SCENARIO" --out "$W/servelab" --force --no-plots ${RUN_SET:-} ||
    if [ ! -s "$W/servelab/records.jsonl" ] && grep -q gpu_memory_utilization "$SCENARIO"; then
      # gpu_memory_utilization had not run on a GPU before this script: if it is what failed,
      # measure with a fixed 48 GiB arena instead (said in the table) rather than lose the run.
      TABLE+=("servelab: retried with engine.kv_cache_mb=49152 instead of gpu_memory_utilization")
      step servelab_fixed_kv "$(min "${SERVELAB_MAX_S:-260}" $(($(left) - 60)))" \
        "$SL" run "$SCENARIO" --out "$W/servelab" --force --no-plots ${RUN_SET:-} \
        --set engine.gpu_memory_utilization=null --set engine.kv_cache_mb=49152
    fi
fi
PEER=(python3 scripts/hf-offline-peer.py "$PLAN" --limit "${PEER_LIMIT:-0}")
if want profile && [ -s "$PLAN" ]; then  # where a static decode step's time goes (no records)
  step hf_profile 150 "${PEER[@]}" --mode static --out "$W/unused.jsonl" --profile-steps 24
fi
# What is left is shared: static gets at most 40% of it after both peers' set-up, continuous the rest.
if want static && [ -s "$PLAN" ]; then
  S=$(min "${STATIC_MAX_S:-120}" $((($(left) - 40 - 2 * PEER_SETUP_S) * 2 / 5)))
  if [ "$S" -ge 20 ]; then
    step hf_static $((S + PEER_SETUP_S + 60)) "${PEER[@]}" --mode static --out "$W/hf-static.jsonl" --max-seconds "$S"
  else TABLE+=("hf_static    skipped: ${S}s left"); fi
fi
if want continuous && [ -s "$PLAN" ]; then
  S=$(min "${CB_MAX_S:-240}" $(($(left) - 40 - PEER_SETUP_S)))
  if [ "$S" -ge 20 ]; then
    step hf_continuous $(($(left) - 30)) "${PEER[@]}" --mode continuous --out "$W/hf-continuous.jsonl" --max-seconds "$S"
  else TABLE+=("hf_continuous skipped: ${S}s left"); fi
fi
if want report && [ -x "$SL" ] && [ -f "$W/servelab/runs.json" ]; then
  ADD=()
  for f in "$W/hf-static.jsonl" "$W/hf-continuous.jsonl"; do [ -f "$f" ] && ADD+=(--add "$f"); done
  step report 120 "$SL" report "$W/servelab" "${ADD[@]}" --out "$W/combined" --force --no-plots
  cp "$W/combined/summary.json" "$W/combined/report.md" "$OUT/" 2>/dev/null
fi

# The table: every run's output tokens/s and requests/s, and servelab's best against each peer.
if [ -f "$OUT/summary.json" ]; then
  python3 - "$OUT/summary.json" >"$OUT/table.txt" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
rows = []
for r in s["runs"]:
    m = r["metrics"]
    rows.append((r["label"], r.get("backend", ""), r.get("n_requests", 0), r.get("n_planned", 0),
                 m.get("output_throughput_tok_s") or 0.0, m.get("request_throughput_rps") or 0.0))
print(f"{'run':24} {'backend':16} {'done/planned':>13} {'out tok/s':>10} {'req/s':>8}")
for label, be, n, planned, tok, rps in rows:
    print(f"{label:24} {be:16} {f'{n}/{planned}':>13} {tok:10.1f} {rps:8.3f}")
ours = [r for r in rows if r[1] != "hf-transformers"]
if ours:
    best = max(ours, key=lambda r: r[4])
    for r in rows:
        if r[1] == "hf-transformers" and r[4] > 0:
            print(f"{best[0]} / {r[0]}: {best[4] / r[4]:.2f}x output tok/s, {best[5] / r[5]:.2f}x req/s")
EOF
fi

{
  echo
  echo "== gpu-offline ($(sed -n 2p "$OUT/environment.txt" 2>/dev/null)) =="
  printf '%s\n' "${TABLE[@]}"
  for f in "$W"/hf_*.log; do [ -f "$f" ] && tail -n 1 "$f"; done
  [ -f "$OUT/table.txt" ] && cat "$OUT/table.txt"
} | tee -a "$LOG"
if [ "${PACK:-1}" = 1 ]; then  # the device tool brings back 8 files: the rest travels in one archive
  rm -rf "$W/build/CMakeFiles" 2>/dev/null
  tar czf "$OUT/gpu-offline.tgz" -C "$W" . 2>/dev/null && rm -rf "$W"
fi
exit $FAILED
