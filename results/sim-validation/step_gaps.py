#!/usr/bin/env python3
"""The engine's time between back-to-back steps of a real run, against the host overhead the sim adds.

A real run's steps.jsonl (a cell's calibration/steps.jsonl.gz) records each step's start and
duration (its host work before forward() and forward() itself); the time from one step's end to
the next one's start, while requests wait (n_waiting > 0: the engine had work), is the engine's and
the in-process driver's own work between steps (tokens, retirements, records, arrivals). The sim
adds the profile's "host_overhead" (per_step_s + per_seq_s x sequences, measured by `servelab
profile`'s probe) to each step instead. Prints, by running sequences, the median gap and the
median host time before forward() beside the probe's figure.

    python3 results/sim-validation/step_gaps.py CELL_DIR [CELL_DIR ...]
"""
import collections
import gzip
import json
import os
import statistics
import sys


def main(dirs):
    for d in dirs:
        steps_path = os.path.join(d, "calibration", "steps.jsonl.gz")
        if not os.path.exists(steps_path):
            print(f"{d}: no calibration/steps.jsonl.gz")
            continue
        steps = sorted((json.loads(l) for l in gzip.open(steps_path, "rt")), key=lambda s: s["start_s"])
        probe = json.load(open(os.path.join(d, "profile.json"))).get("host_overhead", {})
        a0, a1 = probe.get("per_step_s", 0.0), probe.get("per_seq_s", 0.0)
        by = collections.defaultdict(list)
        for a, b in zip(steps, steps[1:]):
            if a.get("n_waiting", 0) > 0 and "host" in a:
                gap = b["start_s"] - a["start_s"] - a["duration_s"]
                by[min(a["n_running"], 255) // 64 * 64].append((gap * 1e6, a["host"]["before_s"] * 1e6))
        print(f"{d}: probe {a0 * 1e6:.1f} + {a1 * 1e6:.3f} us a sequence")
        for k, v in sorted(by.items()):
            mid = k + 32
            print(f"  running {k:3d}-{k + 63:3d}: {len(v):5d} back-to-back steps, gap p50 "
                  f"{statistics.median(x[0] for x in v):6.1f} us, before forward() p50 "
                  f"{statistics.median(x[1] for x in v):5.1f} us; the probe at {mid} sequences {(a0 + a1 * mid) * 1e6:5.1f} us")


if __name__ == "__main__":
    main(sys.argv[1:])
