#!/usr/bin/env python3
"""A validate-sim run's real steps against the profile's price, in windows of the run: does the
serving GPU drift slower as it heats? For each window, the GPU's busy share (Σ measured step time /
window) and Σ measured / Σ predicted for the steps with a prompt piece (prefill or mixed) and for
decode-only steps. predicted_s is the profile's price of the step's shape (steps_real.jsonl, written
by `servelab validate-sim`), without the sim's sustained-load state.

  python3 results/sim-validation/step_ratio_over_time.py CELL/load-0.85/validation/steps_real.jsonl.gz [WINDOW_S]
"""
import gzip
import json
import math
import sys


def main():
    path = sys.argv[1]
    window = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    end = max(r["start_s"] for r in rows)
    print(f"{path}: {len(rows)} steps over {end:.1f} s")
    print(f"{'window (s)':>12} {'busy':>5} {'prefill/mixed':>14} {'ratio':>6} {'decode':>7} {'ratio':>6}")

    def ratio(steps):
        p = sum(r["predicted_s"] for r in steps)
        return sum(r["measured_s"] for r in steps) / p if steps and p > 0 else math.nan

    for k in range(int(end // window) + 1):
        lo = k * window
        sel = [r for r in rows if lo <= r["start_s"] < lo + window]
        pre = [r for r in sel if r["n_tokens"] > r["n_seqs"]]
        dec = [r for r in sel if r["n_tokens"] == r["n_seqs"]]
        busy = sum(r["measured_s"] for r in sel) / window
        print(f"{lo:5.0f}-{lo + window:<6.0f} {busy:5.2f} {len(pre):14d} {ratio(pre):6.3f} {len(dec):7d} {ratio(dec):6.3f}")
    print(f"{'all':>12} {'':>5} {sum(r['n_tokens'] > r['n_seqs'] for r in rows):14d} "
          f"{ratio([r for r in rows if r['n_tokens'] > r['n_seqs']]):6.3f} "
          f"{sum(r['n_tokens'] == r['n_seqs'] for r in rows):7d} {ratio([r for r in rows if r['n_tokens'] == r['n_seqs']]):6.3f}")


if __name__ == "__main__":
    main()
