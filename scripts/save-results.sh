#!/usr/bin/env bash
# Copies a finished run folder into results/NAME for committing: summary, reports, plots and the
# raw records and steps, gzipped (`gunzip -k results/NAME/*.jsonl.gz`, then `servelab report
# results/NAME` re-renders it). Usage: save-results.sh RUN_DIR NAME
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 RUN_DIR NAME" >&2; exit 2; }
src=$1; dst="$(dirname "$0")/../results/$2"
[ -f "$src/summary.json" ] || { echo "$src: no summary.json (not a finished run folder)" >&2; exit 2; }
rm -rf "$dst"; mkdir -p "$dst/plots"
cp "$src"/{summary.json,runs.json,records.jsonl,steps.jsonl,results.csv,report.md,report.html,junit.xml} "$dst/"
cp "$src"/plots/*.{svg,png,dat,gp} "$dst/plots/" 2>/dev/null || true
gzip -9 -n "$dst/records.jsonl" "$dst/steps.jsonl"
echo "saved $src -> $dst"
