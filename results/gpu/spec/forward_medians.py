#!/usr/bin/env python3
"""Per run of a folder's steps.jsonl (or .gz): the median forward time (host.forward_s: the
backend's step, the GPU's time and the host's packing and launch) of the decode steps that carried
no drafts, the steps' count, and each run's median against the first run's.

  python3 results/gpu/spec/forward_medians.py RUN_FOLDER
"""
import collections
import statistics
import sys

from spec_ratio import steps_of  # the same folder


def main(folder):
    runs = collections.OrderedDict()
    for s in steps_of(folder):
        if s["roofline"]["class"] == "decode" and not s.get("spec_decode"):
            runs.setdefault(s["run"], []).append(s["host"]["forward_s"])
    first = None
    print(f"{'run':<20}{'plain decode steps':>20}{'forward median ms':>19}{'vs first':>10}")
    for name, fw in runs.items():
        med = statistics.median(fw)
        first = first or med
        print(f"{name:<20}{len(fw):>20}{med * 1e3:>19.3f}{med / first:>9.3f}x")


if __name__ == "__main__":
    main(sys.argv[1])
