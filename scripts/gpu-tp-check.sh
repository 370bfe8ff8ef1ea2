#!/usr/bin/env bash
# Tensor parallelism (issue 13) on the GPU machine, in one device call on the nvidia-h200-x2 kind:
# build (through scripts/gpu-engine-check.sh's configure and carried-.deb handling), the CPU
# sharding tests, the TP GPU tests (TP=2 against one GPU on 2-layer llama3-8b / llama2-13b-shaped
# synthesized checkpoints, greedy tokens, swap, shards), the all-reduce bus-bandwidth benchmark and
# the llama2-13b decode step benchmark TP=2 vs TP=1 at batch 1, 32, 128 with the communication
# share; optionally (STEPS=... profile) `servelab profile --backend cuda --tensor-parallel 2`.
# NVLink multicast stays off: NCCL_NVLS_ENABLE=0 (and PyTorch's / NVSHMEM's) exported here.
# A short table is printed last; logs and the figures come back under $OUT.
# Issue 25 steps: `repro` builds bench/kernels/tp_init_repro.cpp with nvcc and runs its NCCL set-up
# modes side by side (each under a timeout; the stacks of a mode still running after 15 s are
# dumped with cuda-gdb); `diag` runs the TpGpuDiag tests (the pre-fix blocking set-up after a
# rank's set-up, in a process each, stacks dumped if it hangs); `allreduce` builds bench/kernels/allreduce_bench.cu (NCCL against our
# one-shot peer-memory all-reduce, bit-checked, 4 KiB .. 64 MiB) and writes $OUT/allreduce.json.
# `kernels` runs the custom all-reduce's GPU tests (tests/kernels_gpu/custom_allreduce_gpu_test.cpp:
# bit-checked against kernels/ref, graphs, a peer that never arrives); `bench` runs tp_bench
# (NCCL against ours inside graphs, llama2-13b decode TP=2 vs TP=1 with each, llama3-70b against
# the bandwidth bound; BENCH_ARGS passes e.g. `--only decode`).
# PREBUILT=DIR: binaries built elsewhere (test_kernels_gpu, test_cuda_backend_gpu, tp_bench,
# allreduce_bench) are run from DIR and nothing is built.
# Every test and binary runs under `timeout`; the GPU tests run suite by suite.
# Environment: OUT (default results/gpu/tp/check), BUILD (default build-gpu), STEPS (default
#   "build cpu gpu bench"; add "repro", "diag", "allreduce", "kernels", "profile", "sweep", "simtp", "stall"), BENCH_LIMIT, BENCH_ARGS,
#   PREBUILT, BENCH_ALWAYS (1: the bench even after a failed test), DEBS (as gpu-engine-check.sh),
#   PROFILE_PRESET (default llama2-13b), AR_INIT (the bench's NCCL set-up, default threads_nb),
#   GPU_FILTER (gtest filter of the GPU step, default '*TpGpu*:-*Bench*'), KERNELS_FILTER (of the
#   kernels step, default 'CustomAllReduceGpu*').
# Run it: the device tool, kind nvidia-h200-x2: `bash scripts/gpu-tp-check.sh` (OUT=$OUT/tp).
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-results/gpu/tp/check}
BUILD=${BUILD:-build-gpu}
STEPS=" ${STEPS:-build cpu gpu bench} "
want() { [[ "$STEPS" == *" $1 "* ]]; }
mkdir -p "$OUT"
declare -a TABLE=()
FAILED=0

STEP_DIR=$OUT STEP_WIDTH=12
. scripts/lib/step.sh  # step NAME TIMEOUT_S CMD...: output to $OUT/NAME.log, a row in TABLE

[ -f GPU_COMMIT ] && export SERVELAB_COMMIT=$(cat GPU_COMMIT)
{ nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv; nvidia-smi topo -m
  echo "NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"; ls /usr/local/cuda/lib64/libnccl.so* 2>/dev/null
  echo "commit ${SERVELAB_COMMIT:-$(git rev-parse HEAD 2>/dev/null)}"; date -u; } >"$OUT/environment.txt" 2>&1 || true

BUILT=1
if [ -n "${PREBUILT:-}" ]; then  # nothing to build: run what DIR holds
  BUILD=$PREBUILT
  STEPS=${STEPS// build / }
  mkdir -p "$BUILD-tp" && [ -x "$BUILD/allreduce_bench" ] && cp "$BUILD/allreduce_bench" "$BUILD-tp/"
fi
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
NVFLAGS=(-O3 -std=c++20 -arch=sm_90a -I. -lnccl -lpthread)
if [ -z "${PREBUILT:-}" ] && { want repro || want allreduce; }; then  # the standalone programs build beside the CMake build
  mkdir -p "$BUILD-tp"
  ( "$NVCC" "${NVFLAGS[@]}" -o "$BUILD-tp/tp_init_repro" bench/kernels/tp_init_repro.cpp >"$OUT/nvcc_repro.log" 2>&1
    "$NVCC" "${NVFLAGS[@]}" -o "$BUILD-tp/allreduce_bench" bench/kernels/allreduce_bench.cu kernels/custom_allreduce.cu kernels/elementwise.cu \
      kernels/ref/allreduce_ref.cpp >"$OUT/nvcc_allreduce.log" 2>&1 ) &
  NVCC_PID=$!
fi
if want build; then
  ( env OUT="$OUT/build" BUILD="$BUILD" STEPS=build PACK=0 \
    BUILD_TARGETS="${BUILD_TARGETS:-test_cuda_backend test_cuda_backend_gpu tp_bench}" bash scripts/gpu-engine-check.sh \
    >"$OUT/build_outer.log" 2>&1; echo $? >"$OUT/build.rc" ) &
  BUILD_PID=$!
fi
[ -n "${NVCC_PID:-}" ] && wait "$NVCC_PID"

# Stacks of a process still running: its threads' kernel wait channels, then cuda-gdb's backtraces.
dump_stacks() {  # PID FILE
  { for t in /proc/$1/task/*; do echo "$(basename "$t") $(cat "$t/comm") wchan=$(cat "$t/wchan" 2>/dev/null)"; done
    timeout 60 cuda-gdb -p "$1" -batch -ex "set pagination off" -ex "thread apply all bt 30" 2>&1 | grep -v "^\[New Thread" | head -400
  } >"$2" 2>&1
}
# Runs CMD under `timeout LIMIT`; if it still runs after DUMP_AT seconds, dumps its stacks to FILE.
run_watched() {  # NAME LIMIT DUMP_AT CMD...
  local name=$1 limit=$2 at=$3; shift 3
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1 &
  local pid=$! t=0
  while kill -0 $pid 2>/dev/null && [ $t -lt "$at" ]; do sleep 1; t=$((t + 1)); done
  if kill -0 $pid 2>/dev/null; then
    local child; child=$(pgrep -P $pid | head -1)
    dump_stacks "${child:-$pid}" "$OUT/$name.stacks.txt"
  fi
  wait $pid; local rc=$?
  TABLE+=("$(printf '%-22s rc %s' "$name" "$rc")")
  return $rc
}

if want repro && [ -x "$BUILD-tp/tp_init_repro" ]; then
  export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P
  for m in threads threads_cuda threads_nb group initall; do
    run_watched "repro_$m" 45 15 "$BUILD-tp/tp_init_repro" "$m" 2 &
    sleep 1
  done
  wait
  unset NCCL_DEBUG NCCL_DEBUG_SUBSYS
  grep -h " ok init_s" "$OUT"/repro_*.log >"$OUT/repro_summary.txt" 2>/dev/null
  TABLE+=("$(cat "$OUT/repro_summary.txt" 2>/dev/null)")
fi
if want allreduce && [ -x "$BUILD-tp/allreduce_bench" ]; then
  AR_INIT=${AR_INIT:-threads_nb}
  if [ -s "$OUT/repro_summary.txt" ] && ! grep -q "^$AR_INIT ok" "$OUT/repro_summary.txt"; then
    for m in threads_nb group initall threads; do grep -q "^$m ok" "$OUT/repro_summary.txt" && { AR_INIT=$m; break; }; done
  fi
  NCCL_DEBUG=WARN run_watched allreduce 120 110 "$BUILD-tp/allreduce_bench" --init "$AR_INIT" --json "$OUT/allreduce.json"
  grep -E "^ *[0-9]+ |allreduce_bench" "$OUT/allreduce.log" >"$OUT/allreduce.txt"
fi
if [ -n "${BUILD_PID:-}" ]; then
  wait "$BUILD_PID"
  [ "$(cat "$OUT/build.rc" 2>/dev/null)" = 0 ] || { BUILT=0; TABLE+=("build FAIL (see build_outer.log)"); tail -30 "$OUT/build_outer.log"; }
  grep -q "NCCL ON" "$OUT/build/configure.log" 2>/dev/null || TABLE+=("configure: NCCL not found, TP tests will skip")
fi
[ -x "$BUILD/test_cuda_backend_gpu" ] || [ -x "$BUILD/servelab" ] || BUILT=0
if [ $BUILT = 1 ] && want cpu; then
  step cpu_tests 120 "$BUILD/test_cuda_backend" --gtest_filter='Tp*:*TpPlan*'
fi
if [ $BUILT = 1 ] && want kernels && [ -x "$BUILD/test_kernels_gpu" ]; then
  run_watched kernels_gpu 90 80 "$BUILD/test_kernels_gpu" --gtest_filter="${KERNELS_FILTER:-CustomAllReduceGpu*}"
  grep -hE "ended after|OK \]|FAILED" "$OUT/kernels_gpu.log" >"$OUT/kernels_summary.txt" 2>/dev/null
  TABLE+=("$(cat "$OUT/kernels_summary.txt")")
fi
if [ $BUILT = 1 ] && want gpu; then
  G=$BUILD/test_cuda_backend_gpu
  # The watchdog first (each must end in its error within seconds), then one TP test with NCCL's
  # set-up log (stacks dumped if it still runs after 40 s), then the rest, each suite under a timeout.
  run_watched gpu_watchdog 60 50 "$G" --gtest_filter='TpGpuWatchdog*'
  if want diag; then  # issue 25's hang reproduced on purpose: pre-fix blocking set-up, stacks after 15 s
    for t in BlockingInitPlainThreads BlockingInitAfterRankSetup BlockingInitAfterRankSetupBesideOneGpu; do
      NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT run_watched "diag_$t" 30 15 "$G" --gtest_also_run_disabled_tests \
        --gtest_filter="TpGpuDiag.DISABLED_$t" &
      sleep 1
    done
    wait
    for t in "$OUT"/diag_*.log; do echo "$(basename "$t" .log): $(grep -cE '^rank [01]: done' "$t") of 2 ranks done, $(grep -c 'OK \]' "$t") ok"; done >"$OUT/diag_summary.txt"
    TABLE+=("$(cat "$OUT/diag_summary.txt")")
  fi
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P run_watched gpu_first 60 40 "$G" \
    --gtest_filter='Shapes/TpGpu.Tp2LogitsMatchOneGpu/llama3_8b_eager_naive'
  run_watched gpu_tests 120 110 "$G" --gtest_filter="${GPU_FILTER:-*TpGpu*:-*Bench*:*TpGpuWatchdog*}" \
    --gtest_output="json:$OUT/gpu_tests.json"
  GPU_OK=$?
  n_skip=$(grep -oE '^\[  SKIPPED \] [0-9]+ test' "$OUT/gpu_tests.log" | grep -oE '[0-9]+' | head -1)
  n_pass=$(grep -oE '^\[  PASSED  \] [0-9]+ test' "$OUT/gpu_tests.log" | grep -oE '[0-9]+' | head -1)
  TABLE+=("$(printf '%-12s %s passed, %s skipped' gpu_count "${n_pass:-0}" "${n_skip:-0}")")
  grep -hE "rel error|greedy tokens agreed|after [0-9.]+ s:|aborted;|FAILED|OK \]" "$OUT"/gpu_*.log >"$OUT/gpu_summary.txt" 2>/dev/null
fi
if [ $BUILT = 1 ] && want bench && { [ "${GPU_OK:-0}" = 0 ] || [ "${BENCH_ALWAYS:-0}" = 1 ]; }; then
  # shellcheck disable=SC2086  # BENCH_ARGS are words
  step bench ${BENCH_LIMIT:-420} "$BUILD/tp_bench" ${BENCH_ARGS:-}
  grep -E "^tp-allreduce|^NCCL" "$OUT/bench.log" | head -24 >"$OUT/tp_bench_allreduce.txt"
  grep -E "^tp-decode|^tp-bound|^llama" "$OUT/bench.log" >"$OUT/decode.txt"
fi
# Clocks and power beside the serving and profiling steps (SMI=0: off): nvidia-smi samples every
# 250 ms into smi.csv, each step's span into step_marks.txt, and scripts/lib/smi_windows.py
# gives each step's median SM clock, power and temperature per GPU (smi_summary.txt, in the
# summary): whether serving's sustained steps run at the profile's clocks (the 70B decode residual
# that grows with the batch, results/gpu/tp/2026-11-30-h200x2-continuous-1000/README.md).
if [ $BUILT = 1 ] && [ "${SMI:-1}" = 1 ] && command -v nvidia-smi >/dev/null &&
  { want sweep || want simtp || want stall || want profile; }; then
  export STEP_MARKS="$OUT/step_marks.txt"
  smi_query=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active
  nvidia-smi --query-gpu=$smi_query --format=csv,noheader,nounits -lms 250 >"$OUT/smi.csv" 2>&1 &
  SMI_PID=$!
  sleep 1
  if ! kill -0 $SMI_PID 2>/dev/null; then  # an older driver: no clocks_event_reasons
    nvidia-smi --query-gpu=${smi_query%,*} --format=csv,noheader,nounits -lms 250 >"$OUT/smi.csv" 2>&1 &
    SMI_PID=$!
  fi
fi
# Issue 25 items 3-4 (run 2026-11-29: results/gpu/tp/README.md): `sweep` runs scenarios/gpu-tp-llama3-70b.yaml
# (llama3-70b TP=2: continuous+paged, continuous+naive, static against rate) on the GPUs; `simtp`
# profiles the same TP=2 backend on that scenario's shapes, runs the scenario on the sim from the
# profile with each strategy's real KV arena and compares each run's p50s / p99s with the sweep's
# (results/sim-validation/run_compare.py). With the sweep from an earlier call: copy its folder to
# $OUT/sweep first and run STEPS="build simtp". SIMTP_PROFILE_ARGS adds flags to that profile
# (e.g. --spread-decodes).
TP_SCENARIO=${TP_SCENARIO:-scenarios/gpu-tp-llama3-70b.yaml}
if [ $BUILT = 1 ] && want sweep; then
  # shellcheck disable=SC2086  # SWEEP_ARGS are words (e.g. --set workload.rates=[12])
  step sweep "${SWEEP_LIMIT:-540}" "$BUILD/servelab" run "$TP_SCENARIO" --out "$OUT/sweep" --force --quiet --no-plots ${SWEEP_ARGS:-}
  # The records and steps come back as files of their own (a long sweep's records outgrow logs.tgz's
  # 8 MB a file): $OUT/sweep_records.jsonl.gz and $OUT/sweep_steps.jsonl.gz.
  for f in records steps; do
    [ -f "$OUT/sweep/$f.jsonl" ] && gzip -c "$OUT/sweep/$f.jsonl" >"$OUT/sweep_$f.jsonl.gz" && rm "$OUT/sweep/$f.jsonl"
  done
fi
if [ $BUILT = 1 ] && want simtp; then
  step simtp_profile "${SIMTP_PROFILE_LIMIT:-420}" "$BUILD/servelab" profile --backend cuda --tensor-parallel 2 --for-scenario "$TP_SCENARIO" \
    --interleave ${SIMTP_PROFILE_ARGS:-} --json "$OUT/profile-tp2-scenario.json"
  # The sim gets the KV arena the real engine got for each strategy (sized from
  # gpu_memory_utilization per GPU; static batching reserves more activations): one sim run each.
  extra=()
  while read -r strategy kv_bytes; do
    step "simtp_$strategy" 120 "$BUILD/servelab" run "$TP_SCENARIO" --out "$OUT/sweep-sim-$strategy" --force --quiet --no-plots \
      --set "backend={kind: sim, tensor_parallel: 2, sim_profile: $(realpath "$OUT")/profile-tp2-scenario.json}" \
      --set "engine={kv_cache_bytes: $kv_bytes, max_model_len: 2048}"
    extra+=("$strategy=$OUT/sweep-sim-$strategy")
  done < <(python3 results/sim-validation/run_kv_bytes.py "$OUT/sweep" "$OUT/profile-tp2-scenario.json")
  [ -f "$OUT/sweep/summary.json" ] && [ ${#extra[@]} -gt 0 ] &&
    python3 results/sim-validation/run_compare.py "$OUT/sweep" "${extra[0]#*=}" "${extra[@]}" >"$OUT/simtp_compare.md" 2>&1
fi
# `stall`: results/gpu/tp/prefill-stall.yaml (llama2-13b TP=2, short prefills beside decodes) once
# per variant of STALL_VARIANTS (default: auto nccl eager lamport0 nofuse spin0: the default; NCCL
# for every message; CUDA_MODULE_LOADING=EAGER; no lamport all-reduce; lamport without the fused
# norm; host hand-offs that block at once; add lamporteager: lamport in eager steps too), then prefill_stalls.py counts each run's stalled
# prefill-only steps (stall_summary.txt). STALL_SCENARIO and STALL_LIMIT (s a run) override.
if [ $BUILT = 1 ] && want stall; then
  for v in ${STALL_VARIANTS:-auto nccl eager lamport0 nofuse spin0}; do
    envs=() sets=()
    case $v in
      nccl) sets=(--set backend.all_reduce=nccl) ;;
      eager) envs=(CUDA_MODULE_LOADING=EAGER) ;;
      lamport0) envs=(SERVELAB_TP_LAMPORT_MAX_BYTES=0) ;;
      nofuse) envs=(SERVELAB_TP_FUSE=0) ;;
      spin0) envs=(SERVELAB_TP_SPIN_US=0) ;;
      lamporteager) envs=(SERVELAB_TP_LAMPORT_EAGER=1) ;;
    esac
    step "stall_$v" "${STALL_LIMIT:-90}" env "${envs[@]}" "$BUILD/servelab" run "${STALL_SCENARIO:-results/gpu/tp/prefill-stall.yaml}" \
      --out "$OUT/stall-$v" --force --quiet --no-plots "${sets[@]}"
  done
  python3 results/gpu/tp/prefill_stalls.py "$OUT"/stall-*/steps.jsonl >"$OUT/stall_summary.txt" 2>&1
  TABLE+=("$(cat "$OUT/stall_summary.txt")")
fi
if [ $BUILT = 1 ] && want profile; then
  step profile 400 "$BUILD/servelab" profile --backend cuda --preset "${PROFILE_PRESET:-llama2-13b}" \
    --tensor-parallel 2 --batch 1,32,128 --json "$OUT/profile-tp2.json"
fi

if [ -n "${SMI_PID:-}" ]; then
  kill $SMI_PID 2>/dev/null || true
  python3 scripts/lib/smi_windows.py "$OUT/smi.csv" "$OUT/step_marks.txt" >"$OUT/smi_summary.txt" 2>&1
fi
{
echo
echo "== gpu-tp-check ($(sed -n 2p "$OUT/environment.txt" 2>/dev/null)) =="
printf '%s\n' "${TABLE[@]}"
[ -f "$OUT/gpu_summary.txt" ] && cat "$OUT/gpu_summary.txt"
[ -f "$OUT/tp_bench_allreduce.txt" ] && cat "$OUT/tp_bench_allreduce.txt"
[ -f "$OUT/allreduce.txt" ] && cat "$OUT/allreduce.txt"
[ -f "$OUT/decode.txt" ] && cat "$OUT/decode.txt"
[ -f "$OUT/simtp_compare.md" ] && cat "$OUT/simtp_compare.md"
[ -f "$OUT/smi_summary.txt" ] && cat "$OUT/smi_summary.txt"
} | tee "$OUT/summary.txt"
# The device tool brings back at most 8 files: everything but the summaries goes into logs.tgz.
if [ "${PACK:-1}" = 1 ]; then
  ( cd "$OUT" && find . -type f ! -name summary.txt ! -name allreduce.json ! -name allreduce.txt ! -name gpu_summary.txt \
      ! -name gpu_tests.json ! -name environment.txt ! -name logs.tgz ! -name 'sweep_*.jsonl.gz' -size -8M -print0 | tar --null -czf logs.tgz -T - \
    && find . -mindepth 1 ! -name summary.txt ! -name allreduce.json ! -name allreduce.txt ! -name gpu_summary.txt \
      ! -name gpu_tests.json ! -name environment.txt ! -name logs.tgz ! -name 'sweep_*.jsonl.gz' -delete 2>/dev/null )
fi
exit $FAILED
