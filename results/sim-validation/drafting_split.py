#!/usr/bin/env python3
"""drafting_split: a verification step's drafting, real against the sim's price of its forward steps.

  python3 results/sim-validation/drafting_split.py REAL_RUN_DIR SIM_RUN_DIR [--catch-up]

Reads both runs' steps.jsonl(.gz) (spec_decode.draft_s: the wall time of the proposer's round in
a real run, the priced round on the sim) and prints, per strategy run, the median drafting of
steady steps (the step before prefilled nothing, so every drafting sequence catches up 1-2 rows)
by drafting sequences B and longest draft k: real, sim, and real - sim per sequence. Where the sim
priced the draft's forward steps alone, real - sim is the proposer's work around them.
--catch-up also lists each real drafting step that follows a step which prefilled P prompt rows
(those sequences' drafts catch their whole prompt up in this round).
"""
import collections
import gzip
import json
import os
import statistics
import sys


def read_steps(folder):
    path = os.path.join(folder, "steps.jsonl")
    opener = open
    if not os.path.exists(path):
        path += ".gz"
        opener = gzip.open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f]


def drafting_steps(steps):
    """(run, B, k, draft_s, P, start_s) for every step that drafted; P: prompt rows of the step before."""
    out, prev = [], None
    for d in steps:
        sd = d.get("spec_decode") or {}
        if sd.get("num_drafts", 0) > 0:
            p = 0
            if prev is not None and prev["run"] == d["run"]:
                ps = prev.get("spec_decode") or {}
                p = max(0, prev["n_tokens"] - prev["batch_size"] - ps.get("num_draft_tokens", 0))
            k = sum(1 for x in sd["num_draft_tokens_per_pos"] if x > 0)
            out.append((d["run"], sd["num_drafts"], k, sd["draft_s"], p, d["start_s"]))
        prev = d
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    real, sim = drafting_steps(read_steps(sys.argv[1])), drafting_steps(read_steps(sys.argv[2]))
    groups = collections.defaultdict(lambda: ([], []))
    for i, rows in enumerate((real, sim)):
        for run, b, k, s, p, _ in rows:
            if p == 0:
                groups[(run, b, k)][i].append(s)
    print("| run | B | k | real median ms (steps) | sim median ms (steps) | real − sim ms | per sequence µs |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for key in sorted(groups):
        a, b = groups[key]
        if len(a) < 5 or len(b) < 5:
            continue
        ma, mb = statistics.median(a) * 1e3, statistics.median(b) * 1e3
        print(f"| {key[0]} | {key[1]} | {key[2]} | {ma:.3f} ({len(a)}) | {mb:.3f} ({len(b)}) | {ma - mb:+.3f} | "
              f"{(ma - mb) * 1e3 / key[1]:.1f} |")
    if "--catch-up" in sys.argv:
        print("\nreal drafting steps after a step that prefilled P prompt rows:")
        for run, b, k, s, p, t in real:
            if p > 0:
                print(f"  {run} t={t:.3f} s  B={b} k={k} P={p}: {s * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
