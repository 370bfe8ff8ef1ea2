#!/usr/bin/env bash
# How fast can the HTTP driver load a server and still send every request on time?
# Starts `servelab serve --backend echo` (answers at once: 64 streamed tokens, one SSE chunk each)
# on loopback, then runs `servelab bench` at rising rates. A rate passes when the driver's
# lateness (sent - intended) has p99 < 1 ms and < 1% of requests are more than 1 ms late, with
# no failed request. Prints a table and the highest passing rate.
#
#   bash scripts/bench-http-driver.sh                      # rates 1000..12000, 3 s each, poisson
#   RATES="2000 5000" DURATION=5 ARRIVAL=constant bash scripts/bench-http-driver.sh
#   CPUS=0,1 bash scripts/bench-http-driver.sh            # both processes pinned to cores 0,1 (taskset):
#                                                          # a 2-core machine emulated on a larger one
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/servelab}
PORT=${PORT:-18931}
DURATION=${DURATION:-3}
ARRIVAL=${ARRIVAL:-poisson}
OUTPUT_TOKENS=${OUTPUT_TOKENS:-64}
RATES=${RATES:-"1000 2000 3000 4000 5000 6000 7000 8000 10000 12000"}
OUT=${OUT:-results/runs/bench-http-driver}
CPUS=${CPUS:-}
mkdir -p "$OUT"
PIN=()
if [ -n "$CPUS" ]; then PIN=(taskset -c "$CPUS"); fi

${PIN[@]+"${PIN[@]}"} "$BIN" serve --backend echo --preset tiny --port "$PORT" > "$OUT/serve.log" 2>&1 &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  if (exec 3<>/dev/tcp/127.0.0.1/"$PORT") 2>/dev/null; then break; fi
  sleep 0.1
done

echo "HTTP driver on-time benchmark: echo responder on 127.0.0.1:$PORT, $OUTPUT_TOKENS streamed tokens per request,"
echo "$ARRIVAL arrivals, $DURATION s per rate, $(nproc) cores ($(uname -n))${CPUS:+, both processes on cores $CPUS}; pass = lateness p99 < 1 ms, < 1% late, 0 failed"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine delays both processes)"
printf "%9s %9s %9s %11s %11s %8s %7s %12s %12s %s\n" rate sent achieved "late p50 ms" "late p99 ms" "% late" failed "drv us/req" "srv us/req" verdict
best=0
for R in $RATES; do
  dir="$OUT/r$R"
  rm -rf "$dir"
  srv0=$(awk '{print $14 + $15}' /proc/$SERVER/stat)
  /usr/bin/time -f "%U %S" -o "$dir.cpu" ${PIN[@]+"${PIN[@]}"} "$BIN" bench --url "http://127.0.0.1:$PORT" --rate "$R" --duration "$DURATION" --arrival "$ARRIVAL" \
    --prompt-tokens 32 --output-tokens "$OUTPUT_TOKENS" --timeout 30 --name "http-driver-$R" \
    --out "$dir" --quiet --no-plots > "$dir.log" 2>&1 || true
  line=$(python3 - "$dir/records.jsonl" "$R" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])] if sys.argv[1] else []
rate = float(sys.argv[2])
if not recs:
    print("0 0 0 0 100 0 FAIL"); sys.exit()
late = sorted(r["sent_s"] - r["arrival_s"] for r in recs)
def pct(p):
    k = (len(late) - 1) * p / 100; f = int(k); c = min(f + 1, len(late) - 1)
    return late[f] + (late[c] - late[f]) * (k - f)
n_late = sum(1 for x in late if x > 0.001)
failed = sum(1 for r in recs if r["status"] != "ok")
span = max(r["end_s"] for r in recs) - min(r["arrival_s"] for r in recs)
p99 = pct(99) * 1e3
share = 100.0 * n_late / len(recs)
verdict = "pass" if p99 < 1.0 and share < 1.0 and failed == 0 else "FAIL"
print(len(recs), f"{len(recs)/span:.0f}", f"{pct(50)*1e3:.3f}", f"{p99:.3f}", f"{share:.2f}", failed, verdict)
PY
)
  srv1=$(awk '{print $14 + $15}' /proc/$SERVER/stat)
  read -r n achieved p50 p99 share failed verdict <<< "$line"
  # CPU per request: the driver's includes writing records and reports; ticks are 1/100 s.
  drv=$(awk -v n="$n" '{ if (n > 0) printf "%.0f", ($1 + $2) * 1e6 / n; else print "-" }' "$dir.cpu")
  srv=$(awk -v a="$srv0" -v b="$srv1" -v n="$n" 'BEGIN { if (n > 0) printf "%.0f", (b - a) * 1e4 / n; else print "-" }')
  printf "%9s %9s %9s %11s %11s %8s %7s %12s %12s %s\n" "$R" "$n" "$achieved" "$p50" "$p99" "$share" "$failed" "$drv" "$srv" "$verdict"
  if [ "$verdict" = pass ]; then best=$R; fi
done
echo "highest on-time rate: $best requests/s (64-token streams, loopback, $ARRIVAL arrivals)"
