#!/usr/bin/env bash
# The server under 10x its capacity for 60 s (issue 9): `servelab serve` on the CPU engine (tiny
# preset), first its capacity measured by `servelab bench` at doubling rates (the highest rate at
# which every request is admitted and TTFT p90 stays under 1 s), then RATE = 10x that for
# DURATION s. Checks: the server never dies, its resident memory stays bounded (sampled every
# second; the last 30 s may not exceed the first 30 s's peak by more than 10%), every request is
# either completed or rejected with 429 (none failed otherwise), the waiting queue never exceeds
# --max-waiting, and afterwards no request runs or waits and the KV cache is empty (/metrics).
#   bash scripts/overload-check.sh                 # 60 s
#   DURATION=20 bash scripts/overload-check.sh
# Writes OUT (default results/runs/overload-check): the bench records, the RSS/queue samples and a
# summary; prints PASS/FAIL per check and exits 1 on any FAIL.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/servelab}
OUT=${OUT:-results/runs/overload-check}
PORT=${PORT:-18955}
DURATION=${DURATION:-60}
MAX_WAITING=${MAX_WAITING:-64}
OUTPUT_TOKENS=${OUTPUT_TOKENS:-64}
rm -rf "$OUT" && mkdir -p "$OUT"
URL="http://127.0.0.1:$PORT"
"$BIN" serve --backend cpu --preset tiny --port "$PORT" --max-waiting "$MAX_WAITING" --max-num-seqs 32 \
  --kv-cache-mb 64 >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null; wait $SERVER 2>/dev/null' EXIT
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$PORT") 2>/dev/null && break; sleep 0.1; done
metric() {  # the value of one /metrics line
  python3 -c 'import sys, urllib.request
for l in urllib.request.urlopen(sys.argv[1] + "/metrics", timeout=5).read().decode().splitlines():
    p = l.split()
    if len(p) == 2 and p[0].split("{")[0] == sys.argv[2]: print(p[1])' "$URL" "$1" 2>/dev/null
}
bench() {  # bench RATE SECONDS DIR
  "$BIN" bench --url "$URL" --rate "$1" --duration "$2" --prompt-tokens 32 --output-tokens "$OUTPUT_TOKENS" \
    --timeout 120 --out "$3" --force --quiet --no-plots >"$3.log" 2>&1
}
# Capacity: the highest rate of a doubling series at which every request is admitted and TTFT p90
# stays under 1 s (the queue does not grow over the probe).
cap=0
for r in 10 20 40 80 160 320 640 1280; do
  bench "$r" 5 "$OUT/cap$r"
  read -r ok p90 < <(python3 - "$OUT/cap$r/records.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
okr = sorted(r["first_token_s"] - r["arrival_s"] for r in recs if r["status"] == "ok" and r.get("first_token_s") is not None)
if not recs or len(okr) < len(recs): print(0, "-"); sys.exit()
p90 = okr[int(0.9 * (len(okr) - 1))]
print(int(p90 < 1.0), round(p90 * 1000, 1))
PY
)
  echo "capacity probe $r req/s: TTFT p90 ${p90} ms, all admitted and p90 < 1 s: $ok"
  [ "$ok" = 1 ] && cap=$r || break
done
[ "$cap" = 0 ] && cap=10
RATE=$((cap * 10))
echo "capacity ≈ $cap req/s; overload at $RATE req/s for $DURATION s (max_waiting $MAX_WAITING)"
: >"$OUT/samples.tsv"
( while kill -0 $SERVER 2>/dev/null; do
    printf '%s\t%s\t%s\n' "$(date +%s.%N)" "$(awk '/VmRSS/ {print $2}' /proc/$SERVER/status)" "$(metric servelab:num_requests_waiting)" >>"$OUT/samples.tsv"
    sleep 1
  done ) &
SAMPLER=$!
bench "$RATE" "$DURATION" "$OUT/overload"
sleep 2
kill $SAMPLER 2>/dev/null
FAILS=0
check() { if [ "$2" = 1 ]; then echo "PASS  $1"; else echo "FAIL  $1"; FAILS=1; fi; }
check "server still running after the overload" "$(kill -0 $SERVER 2>/dev/null && echo 1)"
python3 - "$OUT/overload/records.jsonl" "$OUT/samples.tsv" "$MAX_WAITING" >"$OUT/summary.txt" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in recs:
    k = r["status"] if r["status"] != "error" else "error: " + (r.get("error") or "")[:60]
    by[k] = by.get(k, 0) + 1
rows = [l.split("\t") for l in open(sys.argv[2]) if l.strip()]
rss = [int(r[1]) for r in rows if r[1].strip().isdigit()]
waiting = [float(r[2]) for r in rows if r[2].strip()]
half = len(rss) // 2
print("requests", len(recs), "by status", by)
print("rss_kb first-half peak", max(rss[:half] or [0]), "second-half peak", max(rss[half:] or [0]), "samples", len(rss))
print("waiting max", max(waiting or [0]), "limit", sys.argv[3])
only_ok_or_429 = all(r["status"] in ("ok", "rejected") for r in recs)
bounded = bool(rss) and max(rss[half:]) <= 1.10 * max(rss[:half])
print("CHECK all_ok_or_rejected", int(only_ok_or_429 and by.get("ok", 0) > 0 and by.get("rejected", 0) > 0))
print("CHECK rss_bounded", int(bounded))
print("CHECK queue_bounded", int(bool(waiting) and max(waiting) <= float(sys.argv[3])))
PY
cat "$OUT/summary.txt" | grep -v '^CHECK'
while read -r _ name v; do check "$name" "$v"; done < <(grep '^CHECK' "$OUT/summary.txt")
check "afterwards nothing running or waiting" "$( [ "$(metric servelab:num_requests_running)" = 0 ] && [ "$(metric servelab:num_requests_waiting)" = 0 ] && echo 1)"
check "afterwards the KV cache is empty" "$(awk -v u="$(metric servelab:kv_cache_usage_perc)" 'BEGIN {print (u + 0 == 0) ? 1 : 0}')"
exit $FAILS
