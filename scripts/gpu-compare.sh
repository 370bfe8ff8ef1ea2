#!/usr/bin/env bash
# Old tree against new tree on the GPU machine, in one or two device calls (issue 24, item 6):
# builds both (in parallel, -j per tree = cores / 2), runs every GPU test of the new tree, the
# batch-invariant strategies test in both (its TOKENS digest: greedy tokens of static, dynamic,
# continuous+naive and continuous+paged, which that test asserts equal within a tree), and
# engine_bench in both, alternating old, new, old, new; prints a short table last.
#   OLD=.old-tree  the old tree (e.g. `git archive <commit> | tar -x -C .old-tree`, carried)
#   STEPS          default "build tests tokens bench"; a second call with STEPS="tokens bench"
#                  reuses the build folders while the machine is warm
#   OUT            where logs and JSON go (default results/runs/gpu-compare)
#   RUNS           engine_bench runs per tree (default 2)
set -uo pipefail
cd "$(dirname "$0")/.."
OLD=${OLD:-.old-tree}
OUT=${OUT:-results/runs/gpu-compare}
STEPS=" ${STEPS:-build tests tokens bench} "
want() { [[ "$STEPS" == *" $1 "* ]]; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
JOBS=$(( $(nproc) / 2 ))
export NCCL_NVLS_ENABLE=0
declare -a TABLE=()
row() { TABLE+=("$(printf '%-34s %s' "$1" "$2")"); }

build() {  # build TREE TARGETS...
  local tree=$1; shift
  (cd "$tree" && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
     >/dev/null && ninja -C build-gpu -j"$JOBS" "$@")
}
if want build; then
  t0=$SECONDS
  build . ${NEW_TARGETS:-test_kernels_gpu test_cuda_backend_gpu engine_bench} >"$OUT/build-new.log" 2>&1 & pn=$!
  build "$OLD" ${OLD_TARGETS:-test_cuda_backend_gpu engine_bench} >"$OUT/build-old.log" 2>&1 & po=$!
  wait $pn; rn=$?; wait $po; ro=$?
  row "build new / old" "rc $rn / $ro ($((SECONDS - t0)) s)"
  tail -5 "$OUT/build-new.log"; tail -5 "$OUT/build-old.log"
fi
if want tests; then
  timeout 240 build-gpu/test_kernels_gpu --gtest_brief=1 >"$OUT/tests-kernels.log" 2>&1; r1=$?
  timeout 300 build-gpu/test_cuda_backend_gpu --gtest_brief=1 --gtest_filter='-*Bench*:*Hf*:TpGpu*' \
    >"$OUT/tests-backend.log" 2>&1; r2=$?
  row "GPU tests kernels / backend" "rc $r1 / $r2 ($(grep -c '^\[  FAILED' "$OUT/tests-kernels.log" "$OUT/tests-backend.log" | tr '\n' ' '))"
  grep -h "PASSED\|FAILED" "$OUT"/tests-*.log | tail -8
fi
if want tokens; then
  for t in new old; do
    dir=build-gpu; [ $t = old ] && dir=$OLD/build-gpu
    timeout 120 $dir/test_cuda_backend_gpu --gtest_filter='*Strategies*' >"$OUT/tokens-$t.log" 2>&1
    row "strategies test $t" "rc $? $(grep '^TOKENS' "$OUT/tokens-$t.log" | tr '\n' ' ')"
  done
  if diff <(grep '^TOKENS' "$OUT/tokens-old.log") <(grep '^TOKENS' "$OUT/tokens-new.log") >/dev/null &&
     grep -q '^TOKENS' "$OUT/tokens-new.log"; then row "greedy tokens old vs new" "identical"
  else row "greedy tokens old vs new" "DIFFER"; fi
fi
if want bench; then
  for i in $(seq 1 "${RUNS:-2}"); do
    for t in old new; do
      dir=build-gpu; [ $t = old ] && dir=$OLD/build-gpu
      eb=$dir/engine_bench; [ -x "$eb" ] || eb=$dir/kernels/engine_bench  # the old tree built it under kernels/
      timeout 200 $eb --json "$OUT/bench-$t-$i.json" >"$OUT/bench-$t-$i.log" 2>&1
      row "engine_bench $t run $i" "rc $?"
    done
  done
  python3 - "$OUT" <<'PY' | tee "$OUT/compare.txt"
import json, sys, glob, statistics as st
out = sys.argv[1]
def load(t):
    rows = {}
    for f in sorted(glob.glob(f"{out}/bench-{t}-*.json")):
        try: data = json.load(open(f))
        except Exception: continue
        for r in data:
            key = (r.get("name"), json.dumps(r.get("shape"), sort_keys=True))
            rows.setdefault(key, []).append(r.get("value"))
    return rows
old, new = load("old"), load("new")
print(f"{'row':70s} {'old':>10s} {'new':>10s} {'new/old':>8s}")
for key in sorted(set(old) & set(new)):
    o, n = st.median(old[key]), st.median(new[key])
    if not o: continue
    print(f"{(key[0] + ' ' + key[1])[:70]:70s} {o:10.4g} {n:10.4g} {n / o:8.3f}")
PY
fi
printf '%s\n' "${TABLE[@]}"
