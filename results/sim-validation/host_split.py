#!/usr/bin/env python3
"""Host time per step around the forward, from a real run's steps.jsonl (its "host" objects).

Usage: python3 results/sim-validation/host_split.py RUN_DIR/steps.jsonl [--bin 64]
For each run and batch-size bin, the medians of: the engine's work before the forward (inside
duration_s), the forward (the backend's execute()), the engine's work after it, and the driver's
gap to the next step's start (records, callbacks, admissions; steps more than 5 ms apart are idle
and left out), in microseconds, and the share of the step period outside the forward.
"""
import json
import statistics as st
import sys


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    width = 64
    if "--bin" in args:
        i = args.index("--bin")
        width = int(args[i + 1])
        del args[i:i + 2]
    steps = [json.loads(line) for line in open(args[0])]
    rows = {}
    for a, b in zip(steps, steps[1:]):
        h = a.get("host")
        if not h or a["run"] != b["run"]:
            continue
        gap = b["start_s"] - (a["start_s"] + a["duration_s"]) - h["after_s"]
        if gap > 0.005:
            continue
        key = (a["run"], (a["batch_size"] - 1) // width)
        rows.setdefault(key, []).append((h["before_s"], h["forward_s"], h["after_s"], gap))
    print("| run | sequences | steps | before µs | forward ms | after µs | driver µs | outside the forward |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for (run, k), v in sorted(rows.items()):
        before, fwd, after, gap = (st.median(x[i] for x in v) for i in range(4))
        out = sum(x[0] + x[2] + x[3] for x in v) / sum(x[0] + x[1] + x[2] + x[3] for x in v)
        print(f"| {run} | {k * width + 1}-{k * width + width} | {len(v)} | {before * 1e6:.0f} | {fwd * 1e3:.2f} | "
              f"{after * 1e6:.0f} | {gap * 1e6:.0f} | {out * 100:.1f}% |")


if __name__ == "__main__":
    main()
