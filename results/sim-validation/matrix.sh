#!/usr/bin/env bash
# The sim validation matrix (issue 28 item 1): the cells of matrix-cells.tsv, each its own folder
# under OUT (default results/sim-validation/matrix/), then matrix.md from matrix_summarize.py.
# Resumable by cell: a cell whose validation/validation.json holds both loads, run from its YAML as it
# is now (scenario-as-run.yaml), is skipped, so a later session runs the cells still missing (or
# changed) with the same command.
# Usage: bash results/sim-validation/matrix.sh [gpu|profile|h100|repredict|dry|summary]
#   gpu (on the GPU machine, BIN=build-gpu/servelab): for each h200 cell in priority order (CELLS:
#     only these), `servelab profile --backend cuda --for-scenario CELL.yaml --interleave`, the sim's
#     capacity of the cell on that profile (`servelab capacity`; for a ramp cell first under plain
#     Poisson arrivals, whose capacity becomes the ramp's end rate, workload.arrival.ramp_to), then
#     `validate-sim --capacity` at 50% and 85% of it, N_REQUESTS (1000) a run (a cell's own
#     workload.n_requests where it is larger). DEADLINE (epoch s):
#     a cell is not started with less than MIN_CELL_S (120) left, nor run when the real runs'
#     wall time n / rate at its loads (plus 30 s) would pass it: it is left with skipped.txt (its
#     capacity and that cost), and validate-sim runs under `timeout` to DEADLINE - 20 s.
#     LOADS=0.5 or LOADS=0.85: that load alone, in CELL/load-L/ (its own profile and capacity): a
#     cell too long for one call runs its two loads in two calls.
#     GPUS="0 1" (a machine of several GPUs): one worker a GPU, each running its share of the cells
#     (dealt out in priority order) with CUDA_VISIBLE_DEVICES set, side by side; the workers' output
#     in OUT/worker-gpuN.log, printed at the end. Each cell's steps run on a GPU of their own; the
#     host (32 cores on the two-GPU kind) is shared.
#     SUSTAINED_S=S: each cell's profile ends with S seconds of the sustained-load probe
#     (`servelab profile --sustained-s`, off by default), which the sim then prices from.
#     LEAD_IN_SELF=1: `profile --lead-in-self` (each non-decode point timed after its own twin).
#     CALIBRATE=1 (the default; 0: off): after the grid's capacity, a real run of the cell with another seed (the YAML's
#     + 1000), CALIBRATE_N requests at CALIBRATE_LOAD of that capacity (defaults: with one load in LOADS,
#     1000 requests at that load, since 2026-12-01; with both, 300 at 0.65, as every earlier call), folded into the
#     profile by `servelab calibrate` (CELL/profile.json; the grid alone in CELL/profile-grid.json,
#     the run in CELL/calibration/); the capacity and the loads then come from the calibrated profile.
#     On a GPU, nvidia-smi logs each GPU's SM clock, power and clock events while its cells run
#     (SMI=0: off), summarized per cell's profile and validate-sim in OUT/smi-gpuN.txt: whether the
#     profile's steps and the real runs' ran at the same clocks.
#   profile (on the GPU machine, BIN=build-gpu/servelab): each h200 cell's profile alone, as gpu
#     takes it, into CELL/$PROFILE_NAME (and its log beside it): a later grid for repredict.
#   h100: the h100 cells here (sim only, CPU): a past validate-sim's real runs re-predicted with
#     today's sim from the profile of that same call, the same plans (`servelab run` on the sim at
#     each run's rate and request count; matrix_summarize.py checks request by request that the
#     prompts and outputs match the real records).
#   repredict: the h200 cells here (sim only, CPU): each measured load's real runs re-predicted with
#     today's sim from the profile of the call that measured them (CELL/profile.json, the same
#     plans: `servelab run` on the sim at each run's rate and request count, the ramp's end as that
#     call set it) into CELL/repredict/ (or CELL/load-L/repredict/); the summary then compares the
#     real records with those, as for the h100 cells, and validate-sim's own sim run is not used.
#     REPREDICT_PROFILE=FILE: CELL/FILE instead of CELL/profile.json (a later profile of the same
#     GPU kind, e.g. with a grid the call that measured the runs did not have; named in repredict/cell.txt).
#     REPREDICT_DIR=NAME: into CELL/NAME/ instead of CELL/repredict/ (summary reads the same variable).
#   dry: the gpu path on the cpu backend with the tiny preset, a small grid and few requests
#     (DRY_REQUESTS, default 12), under OUT (default /tmp/matrix-dry), to catch script bugs here.
#   summary: matrix_summarize.py over OUT into results/sim-validation/matrix.md (or MATRIX_MD; repredict ends with it too).
set -euo pipefail
cd "$(dirname "$0")/../.."
here=results/sim-validation
what=${1:-summary}
bin=${BIN:-build-dev/servelab}
out=${OUT:-$here/matrix}
[ "$what" = dry ] && out=${OUT:-/tmp/matrix-dry}
n=${N_REQUESTS:-1000}
[ "$what" = dry ] && n=${DRY_REQUESTS:-12}
deadline=${DEADLINE:-0}
min_cell_s=${MIN_CELL_S:-120}

cells() {  # cells GPU: the rows of that GPU, in priority order, as tab-separated fields
  grep -v '^#' "$here/matrix-cells.tsv" | awk -F'\t' -v g="$1" '$2 == g' | sort -t$'\t' -k8,8 -s
}
wanted() { [ -z "${CELLS:-}" ] || [[ " $CELLS " == *" $1 "* ]]; }
loads=${LOADS:-0.5,0.85}
n_loads() { tr ',' '\n' <<< "$loads" | grep -c .; }
measured() {  # measured DIR YAML N: DIR/validation/validation.json has N runs, run from this YAML as it is now
  cmp -s "$2" "$1/scenario-as-run.yaml" && [ -f "$1/validation/validation.json" ] &&
    python3 -c 'import json,sys; sys.exit(0 if len(json.load(open(sys.argv[1]))["runs"]) >= int(sys.argv[2]) else 1)' \
      "$1/validation/validation.json" "$3"
}
done_cell() {  # done_cell DIR YAML: both loads measured, in one call (DIR) or one call each (DIR/load-L)
  measured "$1" "$2" 2 || { measured "$1/load-0.5" "$2" 1 && measured "$1/load-0.85" "$2" 1; }
}
left() { [ "$deadline" = 0 ] && echo 100000 || echo $((deadline - $(date +%s))); }
capacity_of() {  # capacity_of DIR: capacity_rps of capacity.json's first strategy
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]+"/capacity.json"))["strategies"][0]["capacity_rps"])' "$1"
}
pack() {  # gzip the big outputs; report.html is not kept
  for f in "$@"; do [ -f "$f" ] && gzip -9f "$f"; done
  return 0
}

cuda_prof_args() {  # cuda_prof_args YAML KV: the cell's `servelab profile` arguments on the GPU, into prof
  prof=(--backend cuda --seed 1 --kv "$2" --for-scenario "$1" --interleave --repeats 3 --min-point-s 0.5)
  # SUSTAINED_S=4: the profile ends with the sustained-load probe (sustained-h200x2/README.md)
  [ "${SUSTAINED_S:-0}" != 0 ] && prof+=(--sustained-s "$SUSTAINED_S")
  # LEAD_IN_SELF=1: each non-decode point timed right after an untimed twin (mixed-2026-11-30/README.md)
  [ "${LEAD_IN_SELF:-0}" != 0 ] && prof+=(--lead-in-self)
  local mib
  mib=$(sed -n 's/.*kv_cache_mb: *\([0-9]*\).*/\1/p' "$1" | head -1)
  # naive regions spread over the run's arena (engine.kv_cache_mb MiB, --kv-gb in 1e9 bytes)
  [ "$2" = naive ] && prof+=(--kv-spread --kv-gb "$(python3 -c "print($mib * 1048576 / 1e9)")")
  prof+=(--preset "$(sed -n 's/^model: {preset: \([^,}]*\).*/\1/p' "$1")")
}

run_cell() {  # run_cell NAME YAML: one gpu (or dry) cell, at LOADS (one load: in DIR/load-L)
  local name=$1 yaml=$2 dir=$out/$1
  if done_cell "$dir" "$yaml"; then echo "$name: done, skipped"; return 0; fi
  # The cell's workload.n_requests where it asks for more than N_REQUESTS: a cell whose p99 carries
  # more sampling noise at 1,000 requests than its 10% target (the gamma chat cell at 85%: ±23.8%).
  local n=$n n_yaml
  n_yaml=$(sed -n 's/^  n_requests: *\([0-9]*\).*/\1/p' "$yaml" | head -1)
  [ "$what" != dry ] && [ -n "$n_yaml" ] && [ "$n_yaml" -gt "$n" ] && n=$n_yaml
  if [ "$(n_loads)" = 1 ]; then
    measured "$dir/load-$loads" "$yaml" 1 && { echo "$name: load $loads done, skipped"; return 0; }
    [ -f "$dir/scenario-as-run.yaml" ] && rm -rf "$dir"  # a whole-cell run (or a failed one) gives way
    dir=$dir/load-$loads
  fi
  if [ "$(left)" -lt "$min_cell_s" ]; then echo "$name: $(left) s left, not started"; return 0; fi
  rm -rf "$dir" && mkdir -p "$dir"
  cp "$yaml" "$dir/scenario-as-run.yaml"  # a cell whose YAML changes after its run is run again
  local -a real=() prof=() sim=(--set "backend={kind: sim, sim_profile: $(realpath "$dir")/profile.json}")
  local kv=paged
  grep -q 'kind: naive' "$yaml" && kv=naive
  if [ "$what" = dry ]; then
    real=(--set model.preset=tiny --set "backend={kind: cpu, threads: 1}" --set engine.kv_cache_mb=64
          --set engine.max_model_len=256 --set "workload.prompt_tokens={dist: uniform, min: 8, max: 96}"
          --set "workload.output_tokens={dist: uniform, min: 2, max: 24}" --set capacity.n_requests=48
          --set slo.ttft_ms=20 --set slo.tpot_ms=5
          --set strategies.0.max_num_seqs=16 --set strategies.0.max_num_batched_tokens=128)
    prof=(--preset tiny --threads 1 --kv "$kv" --prefill-lens 8,32,96 --batch 1,2,4,8 --contexts 32,128
          --chunk-lens 32,128 --prompt-len 32 --max-rows 512 --repeats 1)
  else
    cuda_prof_args "$yaml" "$kv"
  fi
  { echo "cell $name ($yaml), $(date -u +%FT%TZ), commit ${SERVELAB_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no GPU (dry)"; } > "$dir/cell.txt"
  echo "$name: profile"
  echo "$bin profile ${prof[*]} --json $dir/profile.json" >> "$dir/cell.txt"
  local t_mark=$(date +%s)
  if ! "$bin" profile "${prof[@]}" --json "$dir/profile.json" > "$dir/profile.txt" 2>&1; then
    echo "not run: the profile failed (profile.txt)" | tee "$dir/skipped.txt"; return 0
  fi
  [ -n "${SMI_MARKS:-}" ] && echo "$name:profile $t_mark $(date +%s)" >> "$SMI_MARKS"
  local -a ramp=()
  local cap cost
  sim_capacity() {  # the cell's capacity on the sim from DIR/profile.json: sets ramp and cap
    ramp=()
    if [[ $name == *-ramp-* ]]; then  # the ramp ends at the cell's capacity under plain Poisson arrivals
      if ! "$bin" capacity "$yaml" "${real[@]}" "${sim[@]}" --quiet --no-plots --out "$dir/capacity-poisson" \
          > "$dir/capacity-poisson.txt" 2>&1; then
        echo "not run: no sim capacity under Poisson (capacity-poisson.txt)" | tee "$dir/skipped.txt"; return 1
      fi
      ramp=(--set "workload.arrival.ramp_to=$(capacity_of "$dir/capacity-poisson")")
      echo "ramp: ${ramp[*]}" >> "$dir/cell.txt"
    fi
    if ! "$bin" capacity "$yaml" "${real[@]}" "${ramp[@]}" "${sim[@]}" --quiet --no-plots --out "$dir/capacity" \
        > "$dir/capacity.txt" 2>&1; then
      echo "not run: no sim capacity (capacity.txt)" | tee "$dir/skipped.txt"; return 1
    fi
    cap=$(capacity_of "$dir/capacity")
  }
  sim_capacity || return 0
  if [ "${CALIBRATE:-1}" != 0 ]; then
    # CALIBRATE=1 (default): a real run of the cell's scenario with another seed, CALIBRATE_N requests at
    # CALIBRATE_LOAD of the grid's capacity (header), folded into the profile (`servelab calibrate`;
    # the grid alone stays in profile-grid.json); the capacity then comes from the calibrated profile.
    local cseed crate
    cseed=$(( $(sed -n 's/^seed: *\([0-9]*\).*/\1/p' "$yaml" | head -1) + 1000 ))
    local cload=0.65 cn=300
    [[ "$loads" != *,* ]] && cload=$loads && cn=1000  # one load a call: calibrate at it, as long as a run
    cload=${CALIBRATE_LOAD:-$cload} cn=${CALIBRATE_N:-$cn}
    crate=$(python3 -c "print(round($cload * $cap, 4))")
    mv "$dir/profile.json" "$dir/profile-grid.json"
    mv "$dir/capacity" "$dir/capacity-grid" && mv "$dir/capacity.txt" "$dir/capacity-grid.txt"
    local -a calib=(run "$yaml" "${real[@]}" "${ramp[@]}" --set "seed=$cseed" --set "workload.rates=[$crate]"
                    --set "workload.n_requests=$cn" --out "$dir/calibration" --quiet --no-plots --force)
    echo "$bin ${calib[*]}" >> "$dir/cell.txt"
    echo "$name: calibration run, $cn requests at $crate req/s ($cload of the grid's capacity; seed $cseed)"
    t_mark=$(date +%s)
    if ! "$bin" "${calib[@]}" > "$dir/calibration.txt" 2>&1; then
      echo "not run: the calibration run failed (calibration.txt)" | tee "$dir/skipped.txt"; return 0
    fi
    [ -n "${SMI_MARKS:-}" ] && echo "$name:calibration $t_mark $(date +%s)" >> "$SMI_MARKS"
    local preset
    preset=$(sed -n 's/^model: {preset: \([^,}]*\).*/\1/p' "$yaml")
    [ "$what" = dry ] && preset=tiny
    echo "$bin calibrate $dir/calibration/steps.jsonl --profile $dir/profile-grid.json --preset $preset --host-from-run --json $dir/profile.json" >> "$dir/cell.txt"
    if ! "$bin" calibrate "$dir/calibration/steps.jsonl" --profile "$dir/profile-grid.json" --preset "$preset" --host-from-run \
        --json "$dir/profile.json" >> "$dir/calibration.txt" 2>&1; then
      echo "not run: calibrate failed (calibration.txt)" | tee "$dir/skipped.txt"; return 0
    fi
    rm -f "$dir/calibration/report.html"
    pack "$dir/calibration/records.jsonl" "$dir/calibration/steps.jsonl"
    sim_capacity || return 0
  fi
  # n / the mean rate at each load (a ramp's: halfway from the load's rate to ramp_to), + 30 s
  cost=$(python3 -c "
ramp = float('${ramp[*]}'.rpartition('=')[2] or 0)
print(round(sum($n / ((l * $cap + ramp) / 2 if ramp else l * $cap) for l in [$loads]) + 30))")
  echo "$name: sim capacity $cap req/s, real runs ~$cost s, $(left) s left"
  if [ "$cost" -gt "$(( $(left) - 20 ))" ]; then
    echo "not run: sim capacity $cap req/s; the real runs of $n requests at loads $loads would take ~$cost s, $(left) s were left" \
      | tee "$dir/skipped.txt"
    return 0
  fi
  local -a args=(validate-sim "$yaml" "${real[@]}" "${ramp[@]}" --profile "$dir/profile.json" --capacity "$cap"
                 --loads "$loads" --n-requests "$n" --out "$dir/validation")
  [ "$what" = dry ] && args+=(--warmup-requests 2)
  echo "$bin ${args[*]}" >> "$dir/cell.txt"
  local rc=0
  t_mark=$(date +%s)
  if [ "$deadline" = 0 ]; then "$bin" "${args[@]}" > "$dir/validate.txt" 2>&1 || rc=$?
  else timeout "$(( $(left) - 20 ))" "$bin" "${args[@]}" > "$dir/validate.txt" 2>&1 || rc=$?; fi
  [ -n "${SMI_MARKS:-}" ] && echo "$name:validate-sim $t_mark $(date +%s)" >> "$SMI_MARKS"
  echo "$name: validate-sim rc $rc"
  echo "validate-sim rc $rc" >> "$dir/cell.txt"
  rm -f "$dir"/capacity*/report.html
  pack "$dir/validation/records_real.jsonl" "$dir/validation/records_sim.jsonl" "$dir/validation/steps_real.jsonl"
}

if [ "$what" = gpu ] || [ "$what" = dry ]; then
  mkdir -p "$out"
  declare -A src_of=()
  order=()
  while IFS=$'\t' read -r name _ _ _ _ _ _ _ src; do
    wanted "$name" && { src_of[$name]=$src; order+=("$name"); }
  done < <(cells h200)
  read -r -a gpus <<<"${GPUS:-}"
  # On a GPU: nvidia-smi's SM clock, power and clock events every 250 ms while each GPU's cells run,
  # split by each cell's profile and validate-sim (scripts/lib/smi_windows.py): OUT/smi-gpuN.txt.
  smi_on() { [ "$what" = gpu ] && [ "${SMI:-1}" = 1 ] && command -v nvidia-smi >/dev/null; }
  smi_log() {  # smi_log GPU: starts the log, sets SMI_PID and SMI_MARKS
    export SMI_MARKS="$out/smi-marks-gpu$1.txt"
    : > "$SMI_MARKS"
    nvidia-smi -i "$1" --query-gpu=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
      --format=csv,noheader,nounits -lms 250 > "$out/smi-gpu$1.csv" 2>&1 &
    SMI_PID=$!
  }
  smi_done() {  # smi_done GPU
    kill "$SMI_PID" 2>/dev/null || true
    python3 scripts/lib/smi_windows.py "$out/smi-gpu$1.csv" "$SMI_MARKS" > "$out/smi-gpu$1.txt" 2>&1
    gzip -9f "$out/smi-gpu$1.csv"
  }
  if [ ${#gpus[@]} -le 1 ]; then
    g=${gpus[0]:-${CUDA_VISIBLE_DEVICES:-0}}
    smi_on && smi_log "$g"
    for name in "${order[@]}"; do run_cell "$name" "$here/${src_of[$name]}"; done
    smi_on && smi_done "$g" && cat "$out/smi-gpu$g.txt"
  else  # one worker a GPU (CUDA_VISIBLE_DEVICES), the cells dealt out in priority order
    for w in "${!gpus[@]}"; do
      ( export CUDA_VISIBLE_DEVICES=${gpus[$w]}
        smi_on && smi_log "${gpus[$w]}"
        for ((i = w; i < ${#order[@]}; i += ${#gpus[@]})); do run_cell "${order[$i]}" "$here/${src_of[${order[$i]}]}"; done
        smi_on && smi_done "${gpus[$w]}" && cat "$out/smi-gpu${gpus[$w]}.txt"
      ) >"$out/worker-gpu${gpus[$w]}.log" 2>&1 &
    done
    wait
    for g in "${gpus[@]}"; do echo "== GPU $g"; cat "$out/worker-gpu$g.log"; done
  fi
  [ "$what" = dry ] && python3 "$here/matrix_summarize.py" "$out" --md "$out/matrix.md" && cat "$out/matrix.md"
fi

if [ "$what" = h100 ]; then
  while IFS=$'\t' read -r name _ _ _ _ strategy _ _ src; do
    wanted "$name" || continue
    dir=$out/$name past=$here/${src%%:*} profile=$here/$(dirname "${src%%:*}")/${src##*:}
    if [ -f "$dir/sim/records.jsonl.gz" ]; then echo "$name: done, skipped"; continue; fi
    rm -rf "$dir" && mkdir -p "$dir"
    # The runs of the past validate-sim: their rates and request counts, and its scenario as it was then.
    read -r rates nreq < <(python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))
print("[" + ",".join(repr(r["rate"]) for r in j["runs"]) + "]", j["runs"][0]["n_requests"])' "$past/validation.json")
    commit=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["environment"]["commit"])' "$past/validation.json")
    git show "$commit:$here/gpu-llama2-7b.yaml" > "$dir/scenario.yaml" 2>/dev/null || cp "$here/gpu-llama2-7b.yaml" "$dir/scenario.yaml"
    strat=$(python3 - "$dir/scenario.yaml" "$strategy" <<'PY'
import sys
# the strategy's block of the scenario's `strategies:` list, as a flow-style YAML list of one
lines, name, out, on = open(sys.argv[1]).read().split("\n"), sys.argv[2], [], False
for l in lines:
    if l.startswith("  - label:"): on = l.split(":", 1)[1].strip() == name
    elif not l.startswith("    "): on = False
    if on: out.append(l[4:].strip())
kv = [f"{k.strip()}: {v.strip()}" for k, v in (x.split(":", 1) for x in out)]
print("[{" + ", ".join(kv) + "}]")
PY
)
    { echo "cell $name: re-predicted from $past (real runs at commit $commit) with $profile, $(date -u +%FT%TZ),"
      echo "sim at commit $(git rev-parse --short HEAD), rates $rates, $nreq requests a run, strategies=$strat"; } > "$dir/cell.txt"
    "$bin" run "$dir/scenario.yaml" --out "$dir/sim" --force --quiet --no-plots \
      --set "backend={kind: sim, sim_profile: $PWD/$profile}" --set "strategies=$strat" \
      --set "workload.rates=$rates" --set "workload.n_requests=$nreq"
    rm -f "$dir/sim/report.html"
    pack "$dir/sim/records.jsonl" "$dir/sim/steps.jsonl"
    echo "$name: re-predicted"
  done < <(cells h100)
fi

if [ "$what" = profile ]; then
  while IFS=$'\t' read -r name _ _ _ _ _ _ _ src; do
    wanted "$name" || continue
    yaml=$here/$src kv=paged
    grep -q 'kind: naive' "$yaml" && kv=naive
    cuda_prof_args "$yaml" "$kv"
    mkdir -p "$out/$name"
    f=$out/$name/${PROFILE_NAME:?PROFILE_NAME names the profile file, e.g. profile-spread-COMMIT.json}
    { echo "cell $name ($yaml), $(date -u +%FT%TZ), commit ${SERVELAB_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
      nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
      echo "$bin profile ${prof[*]} --json $f"; } > "${f%.json}.txt"
    "$bin" profile "${prof[@]}" --json "$f" >> "${f%.json}.txt" 2>&1 || echo "$name: the profile failed (${f%.json}.txt)"
    echo "$name: $f"
  done < <(cells h200)
  exit 0
fi

if [ "$what" = repredict ]; then
  rdir=${REPREDICT_DIR:-repredict}
  while IFS=$'\t' read -r name _ _ _ _ _ _ _ _; do
    wanted "$name" || continue
    for part in "$out/$name" "$out/$name"/load-*; do
      [ -f "$part/validation/validation.json" ] || continue
      read -r rates nreq < <(python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))
print("[" + ",".join(repr(r["rate"]) for r in sorted(j["runs"], key=lambda r: r["rate"])) + "]", j["n_requests_per_run"])' \
        "$part/validation/validation.json")
      ramp=()
      r=$(sed -n 's/^ramp: //p' "$part/cell.txt" | tail -1)  # the last: a calibrated cell's validate-sim ramp
      [ -n "$r" ] && read -r -a ramp <<< "$r"
      rm -rf "$part/$rdir"
      "$bin" run "$part/scenario-as-run.yaml" --out "$part/$rdir" --force --quiet --no-plots "${ramp[@]}" \
        --set "backend={kind: sim, sim_profile: $PWD/$part/${REPREDICT_PROFILE:-profile.json}}" \
        --set "workload.rates=$rates" --set "workload.n_requests=$nreq"
      rm -f "$part/$rdir"/{report.html,steps.jsonl,junit.xml,results.csv}
      pack "$part/$rdir/records.jsonl"
      echo "re-predicted at sim commit $(git rev-parse --short HEAD), $(date -u +%FT%TZ): rates $rates, $nreq requests, profile ${REPREDICT_PROFILE:-profile.json}" \
        > "$part/$rdir/cell.txt"
      echo "$name ($part): re-predicted"
    done
  done < <(cells h200)
fi
if [ "$what" = summary ] || [ "$what" = h100 ] || [ "$what" = repredict ]; then
  python3 "$here/matrix_summarize.py" "$out" --md "${MATRIX_MD:-$here/matrix.md}"
fi
