#!/usr/bin/env python3
"""Where the cost model misses a real run's decode steps: each step's residual (measured /
predicted - 1) grouped by batch size, by whether a prefill came just before, by the batch's change
from the previous step, by the contexts' spread ((max - mean) / mean) and by the mean context, so a
missing term shows as a trend in one of them; then batch against spread (groups of >= 10 steps),
which tells a batch effect from a spread effect where the two grow together, and batch against the
run's quarter (a drift over the run, e.g. clocks settling under sustained load) (stdlib only).

  servelab price-steps STEPS --profile P --preset M [--tensor-parallel N] --per-step PRICED.jsonl
  python3 results/sim-validation/step_residuals.py PRICED.jsonl [STEPS]

PRICED.jsonl is price-steps' --per-step output (one line per step of STEPS, in order); STEPS (the
steps file priced, a run's steps.jsonl or validate-sim's steps_real.jsonl, .gz read too) supplies
the run labels so that a step is compared with its own run's previous step. Medians per group.
"""
import gzip
import json
import statistics as st
import sys


def lines(path):
    f = gzip.open(path, "rt") if path.endswith(".gz") else open(path)
    return [json.loads(l) for l in f if l.strip()]


def is_decode(r):
    return r["n_tokens"] == r["n_seqs"] and r["prefill_pairs"] == 0 and r.get("n_padding_tokens", 0) == 0


def main():
    priced = lines(sys.argv[1])
    if len(sys.argv) > 2:  # the run labels of the priced steps (price-steps keeps their order)
        src = [s for s in lines(sys.argv[2]) if "measured_s" in s or "shape" in s.get("roofline", {})]
        if len(src) != len(priced):
            sys.exit(f"{sys.argv[2]}: {len(src)} priceable steps, {sys.argv[1]}: {len(priced)}")
        for p, s in zip(priced, src):
            p["run"] = s.get("run", "")
    rows, prev = [], None
    for r in priced:
        if prev is not None and prev.get("run") == r.get("run") and is_decode(r) and r["predicted_s"] > 0:
            mean = r["sum_context"] / r["n_seqs"]
            rows.append({"res": r["measured_s"] / r["predicted_s"] - 1, "B": r["n_seqs"], "mean": mean,
                         "spread": (r["max_context"] - mean) / max(mean, 1.0), "after_prefill": not is_decode(prev),
                         "dB": r["n_seqs"] - prev["n_seqs"]})
        prev = r
    if not rows:
        sys.exit("no decode steps after a step of their own run")
    print(f"{len(rows)} decode steps, median residual {100 * st.median(x['res'] for x in rows):+.2f}%")
    step = 16 if max(x["B"] for x in rows) > 64 else 8

    def group(title, key):
        g = {}
        for x in rows:
            g.setdefault(key(x), []).append(x["res"])
        print(title)
        for k in sorted(g):
            print(f"  {str(k):>14} n={len(g[k]):6d}  median {100 * st.median(g[k]):+6.2f}%")

    group(f"batch size (groups of {step})", lambda x: x["B"] // step * step)
    group("a prefill step just before", lambda x: x["after_prefill"])
    group("batch against the previous step", lambda x: "same" if x["dB"] == 0 else ("larger" if x["dB"] > 0 else "smaller"))
    group("spread (max - mean) / mean, to 0.5", lambda x: round(min(x["spread"], 4.0) * 2) / 2)
    group("mean context (groups of 256)", lambda x: int(x["mean"] // 256) * 256)
    for i, x in enumerate(rows):
        x["quarter"] = 4 * i // len(rows)
    bstep = 2 * step

    def cross(title, col, cols):
        g = {}
        for x in rows:
            g.setdefault((x["B"] // bstep * bstep, col(x)), []).append(x["res"])
        print(f"{title} (columns), batch (rows, groups of {bstep}): median residual (steps)")
        print("  " + " " * 8 + "".join(f"{str(c):>14}" for c in cols))
        for b in sorted({k[0] for k in g}):
            cells = [f"{100 * st.median(g[(b, c)]):+6.1f}% ({len(g[(b, c)]):4d})" if len(g.get((b, c), [])) >= 10 else ""
                     for c in cols]
            print(f"  {b:>8}" + "".join(f"{c:>14}" for c in cells))

    cross("spread", lambda x: round(min(x["spread"], 4.0) * 2) / 2, [i / 2 for i in range(9)])
    cross("quarter of the run's decode steps", lambda x: x["quarter"], [0, 1, 2, 3])


if __name__ == "__main__":
    main()
