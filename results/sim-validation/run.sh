#!/usr/bin/env bash
# Re-measures the committed sim validation: profile the CPU engine, then run validate-sim right
# after it, so the profile and the real runs see the same machine load (on a shared VM the load
# moves step times by several x). Usage: bash results/sim-validation/run.sh [tiny|spec|qwen|all|gpu]
# qwen: N_REQUESTS a run (default 8), REAL_REPEATS real runs a point (default 1; 2+ prints the
# spec: speculative decoding on the CPU (tiny-cpu-spec.yaml, batch 1, and tiny-cpu-spec-poisson.yaml):
# profile tiny on 1 thread (with verification points and its one-layer draft), run both scenarios on cpu, then on the sim with that profile and the
# acceptance each real run measured (sim_acceptance.summary), and compare them with spec_compare.py
# (SPEC_OUT the folder, default results/sim-validation/tiny-cpu-spec).
# machine's run-to-run spread beside every error), QWEN_OUT the folder, QWEN_PROFILE the profile's path
# (default results/profiles/qwen2.5-0.5b-cpu.json), PROFILE_ARGS as for gpu.
# gpu (on the GPU machine, BIN=build-gpu/servelab OUT=folder): profile the cuda backend on
# llama2-7b, then validate-sim of gpu-llama2-7b.yaml against it; everything is written under OUT.
# GPU_RUNS="continuous-paged:1000 continuous-naive:500" runs one validate-sim per strategy with its own
# request count (validation-LABEL/); otherwise one validate-sim with N_REQUESTS and VALIDATE_ARGS.
# The label `static` runs gpu-llama2-7b-static.yaml (static batching, relaxed TTFT SLO) instead.
# NAIVE_SPREAD=1 (default): naive strategies are priced from a profile whose regions spread over the
# runs' 16 GiB arena (profile --kv-spread, profile-naive-spread.json); NAIVE_PACKED=1 takes the
# packed one too (for comparison; NAIVE_SPREAD=0 prices from it).
# PROFILE_ARGS: `servelab profile` options for every gpu profile (default --interleave: points timed
# in shuffled rounds, as steps follow each other in serving; PROFILE_ARGS= times them back to back).
# gpu-spec-real (on the GPU machine, BIN=build-gpu/servelab SPEC_OUT=folder): profile llama2-7b on
# the cuda backend with verification points (k = 4) and the one-layer `self` draft, then run
# scenarios/gpu-spec-llama2-7b.yaml (residual scale GPU_SPEC_SCALE, default 0.005) at 1 user
# (4 requests) and 32 users (64 requests); GPU_SPEC_PROFILE_ARGS: more profile options (e.g.
# --no-draft-rounds: the profile without the draft's timed proposer rounds; GPU_SPEC_GRID=rounds: the
# grid before batches 3 / 6, prefills to 4096 rows and k = 3 verification). gpu-spec-sim (here,
# SPEC_OUT the folder it wrote): the same runs on the sim from that profile and the acceptance each
# real run measured (GPU_SPEC_ACCEPTANCE: another folder's real-LOAD/summary.json), compared with
# spec_compare.py where the real run's summary.json is there.
set -euo pipefail
cd "$(dirname "$0")/../.."
what="${1:-all}"
bin=${BIN:-build/servelab}
if [ "$what" = tiny ] || [ "$what" = all ]; then
  "$bin" profile --preset tiny --threads 1 --json results/profiles/tiny-cpu-1thread.json \
    > results/profiles/tiny-cpu-1thread.txt 2>&1
  "$bin" validate-sim results/sim-validation/tiny-cpu.yaml --profile results/profiles/tiny-cpu-1thread.json \
    --out results/sim-validation/tiny-cpu
fi
if [ "$what" = spec ] || [ "$what" = all ]; then
  out=${SPEC_OUT:-results/sim-validation/tiny-cpu-spec}
  mkdir -p "$out"
  # Verification points (k = 3: 4 drawn rows a sequence, --verify-k) at every batch and context, and
  # the one-layer `self` draft profiled beside the target (--draft-layers 1, the JSON's "draft"),
  # which prices its catch-up and one-row steps. 15 repeats a point: on this loaded VM a median of 3
  # moved single points by 1.6x (verify, 1 sequence: 1.118 / 0.708 / 1.220 ms at contexts 36 / 132 / 260).
  "$bin" profile --preset tiny --threads 1 --chunk-lens 2,4,8,64,256 --verify-k 3 --draft-layers 1 --repeats 15 --interleave \
    --json "$out/profile.json" > "$out/profile.txt" 2>&1
  for load in batch1 poisson; do
    scn=results/sim-validation/tiny-cpu-spec.yaml
    [ "$load" = poisson ] && scn=results/sim-validation/tiny-cpu-spec-poisson.yaml
    "$bin" run "$scn" --out "$out/real-$load" --force --quiet --no-plots
    "$bin" run "$scn" --out "$out/sim-$load" --force --quiet --no-plots --set backend.kind=sim --set backend.threads=0 \
      --set backend.sim_profile="$PWD/$out/profile.json" \
      --set strategies.1.speculative.sim_acceptance.summary="$PWD/$out/real-$load/summary.json"
    python3 results/sim-validation/spec_compare.py "$out/real-$load" "$out/sim-$load" > "$out/compare-$load.md"
    rm -f "$out"/{real,sim}-$load/report.html
    gzip -9f "$out"/{real,sim}-$load/steps.jsonl
  done
fi
gpu_spec_sets() {  # the scenario's settings of each load: gpu_spec_sets LOAD (users1, usersN)
  echo --set model.residual_scale.scale="${GPU_SPEC_SCALE:-0.005}"
  local n=${1#users}
  [ "$n" != 1 ] && echo --set "workload.concurrency=[$n]" --set workload.n_requests="${GPU_SPEC_REQUESTS:-$((2 * n))}"
  return 0
}
gpu_spec_loads=${GPU_SPEC_LOADS:-users1 users32}  # GPU_SPEC_REQUESTS: requests of each usersN load (default 2N)
if [ "$what" = gpu-spec-real ]; then
  out=${SPEC_OUT:?SPEC_OUT: the folder}
  mkdir -p "$out"
  # GPU_SPEC_GRID=rounds: the grid of gpu-llama2-7b-spec-rounds/ and before (batches 1-64 in powers of
  # two and 48, prefills up to 1024 rows, verification at k = 4 alone). The default adds what the
  # runs' steps have and that grid lacked: batches 3 and 6 (prefills of 3 and 6 prompts, 384 and
  # 768 rows, where M(rows) otherwise runs between a 65-sequence mixed step and 512 rows), batched
  # prefills up to 4096 rows (a wave of 32 prompts), and verification at k = 3 beside k = 4
  # (adaptive k gives a sequence 2-5 rows: 64 sequences verify ~300 rows, between 256 and 320).
  grid="--batch 1,2,3,4,6,8,16,32,48,64 --max-rows 4096 --verify-k 3,4"
  [ "${GPU_SPEC_GRID:-}" = rounds ] && grid="--batch 1,2,4,8,16,32,48,64 --verify-k 4"
  # shellcheck disable=SC2086
  "$bin" profile --backend cuda --preset llama2-7b --seed 1 --prefill-lens 64,128,256,512 $grid \
    --contexts 128,256,384 --chunk-lens 64,256 --prompt-len 128 --draft-layers 1 --repeats 3 --interleave \
    ${GPU_SPEC_PROFILE_ARGS:-} --json "$out/profile.json" > "$out/profile.txt" 2>&1
  for load in $gpu_spec_loads; do
    # shellcheck disable=SC2046
    "$bin" run scenarios/gpu-spec-llama2-7b.yaml --out "$out/real-$load" --force --quiet --no-plots $(gpu_spec_sets $load)
  done
fi
if [ "$what" = gpu-spec-sim ]; then
  out=${SPEC_OUT:?SPEC_OUT: the folder gpu-spec-real wrote}
  # GPU_SPEC_ACCEPTANCE: the folder whose real-LOAD/summary.json gives the acceptance (default SPEC_OUT)
  acc=${GPU_SPEC_ACCEPTANCE:-$out}
  # GPU_SPEC_SPREAD=1: requests differ in acceptance as that folder's real requests did
  # (request_acceptance.py over real-LOAD/records.jsonl.gz writes real-LOAD/request-acceptance.json;
  # sim_acceptance.requests); the sim runs go to sim-spread-LOAD/.
  sim=sim cmp=compare
  [ "${GPU_SPEC_SPREAD:-}" = 1 ] && sim=sim-spread cmp=compare-spread
  for load in $gpu_spec_loads; do
    spread=()
    if [ "$sim" = sim-spread ]; then
      python3 results/sim-validation/request_acceptance.py "$acc/real-$load/records.jsonl.gz" --strategy self-k4 \
        --k-max 4 > "$acc/real-$load/request-acceptance.json"
      spread=(--set strategies.1.speculative.sim_acceptance.requests="$PWD/$acc/real-$load/request-acceptance.json")
    fi
    # shellcheck disable=SC2046
    "$bin" run scenarios/gpu-spec-llama2-7b.yaml --out "$out/$sim-$load" --force --quiet --no-plots $(gpu_spec_sets $load) \
      --set "backend={kind: sim, sim_profile: $PWD/$out/profile.json}" \
      --set strategies.1.speculative.sim_acceptance.summary="$PWD/$acc/real-$load/summary.json" "${spread[@]}"
    [ -f "$out/real-$load/summary.json" ] &&
      python3 results/sim-validation/spec_compare.py "$out/real-$load" "$out/$sim-$load" > "$out/$cmp-$load.md"
    rm -f "$out"/{real,$sim}-$load/report.html
    for f in "$out"/{real,$sim}-$load/{steps,records}.jsonl; do [ -f "$f" ] && gzip -9f "$f"; done
  done
fi
if [ "$what" = qwen ] || [ "$what" = all ]; then
  qprof=${QWEN_PROFILE:-results/profiles/qwen2.5-0.5b-cpu.json}
  mkdir -p "$(dirname "$qprof")"
  "$bin" profile --preset qwen2.5-0.5b ${PROFILE_ARGS---interleave} --json "$qprof" > "${qprof%.json}.txt" 2>&1
  "$bin" validate-sim results/sim-validation/qwen-cpu.yaml --profile "$qprof" \
    --out "${QWEN_OUT:-results/sim-validation/qwen-cpu}" --n-requests "${N_REQUESTS:-8}" --real-repeats "${REAL_REPEATS:-1}"
fi
if [ "$what" = gpu ]; then
  out=${OUT:-results/sim-validation/gpu-llama2-7b}
  mkdir -p "$out"
  # Dense in prompt lengths and batch sizes: GEMM time steps with the row count (tile buckets), and
  # the matrix term is interpolated linearly between the profiled row counts (~90 points, ~15 s).
  # Batched prefills of 256- and 1024-token prompts reach 16 x 1024 rows: static batching's padded
  # prefills (16 prompts padded to the longest) run that many, and per row they cost ~6% less than
  # at 4096 rows, which a grid ending at 4096 rows cannot know (the roofline scales linearly).
  # One profile per KV layout (--kv): decode attention reads paged and contiguous K/V differently.
  profile() {  # profile KV OUTFILE [extra profile options]
    local kv=$1 file=$2; shift 2
    "$bin" profile --backend cuda --preset llama2-7b --seed 1 --kv "$kv" "$@" \
      --prefill-lens 16,32,64,96,128,192,256,384,512,768,1024,1536,2048 --batch 1,2,4,8,16,32,48,64,96,128 \
      --contexts 128,256,512,1024,2048 --chunk-lens 64,256,1024 --prompt-len 256,1024 --max-rows 16384 \
      --repeats 3 --min-point-s 0.5 ${PROFILE_ARGS---interleave} --json "$file" > "${file%.json}.txt" 2>&1
  }
  if [ -z "${GPU_RUNS:-}" ]; then
    profile paged "$out/profile.json"
    "$bin" validate-sim results/sim-validation/gpu-llama2-7b.yaml --profile "$out/profile.json" --out "$out/validation" \
      --n-requests "${N_REQUESTS:-120}" ${VALIDATE_ARGS:-}
  else  # GPU_RUNS="LABEL:N ...": one validate-sim per strategy, N requests a run, each in validation-LABEL/,
        # priced from the profile of its KV layout (naive for continuous-naive and static)
    for run in $GPU_RUNS; do
      label=${run%%:*} prof="$out/profile.json"
      case $label in *naive* | static*)
        if [ "${NAIVE_SPREAD:-1}" != 1 ] || [ "${NAIVE_PACKED:-0}" = 1 ]; then
          [ -f "$out/profile-naive.json" ] || profile naive "$out/profile-naive.json"
          prof="$out/profile-naive.json"
        fi
        if [ "${NAIVE_SPREAD:-1}" = 1 ]; then  # the scenario's engine.kv_cache_mb: 16384 MiB
          [ -f "$out/profile-naive-spread.json" ] ||
            profile naive "$out/profile-naive-spread.json" --kv-spread --kv-gb 17.179869184
          prof="$out/profile-naive-spread.json"
        fi ;;
      esac
      [ -f "$prof" ] || profile paged "$prof"
      scenario=results/sim-validation/gpu-llama2-7b.yaml
      [ "$label" = static ] && scenario=results/sim-validation/gpu-llama2-7b-static.yaml
      "$bin" validate-sim "$scenario" --profile "$prof" \
        --out "$out/validation-$label" --strategy "$label" --n-requests "${run##*:}" ${VALIDATE_ARGS:-}
    done
  fi
fi
