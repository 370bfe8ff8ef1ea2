#!/usr/bin/env python3
"""Per run of a folder's steps.jsonl (or .gz): the median forward time (host.forward_s: the
backend's step, the GPU's time and the host's packing and launch) of the decode steps that carried
no drafts, the median device span (host.device_s, where recorded: the forward's launch to its
tokens on the GPU) and the rest (forward - device: packing, upload, launch and wake-up), the
steps' count, and each run's forward median against the first run's.

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
            h = s["host"]
            runs.setdefault(s["run"], []).append((h["forward_s"], h.get("device_s")))
    first = None
    print(f"{'run':<20}{'plain decode steps':>20}{'forward median ms':>19}{'vs first':>10}"
          f"{'device median ms':>18}{'rest median ms':>16}")
    for name, steps in runs.items():
        med = statistics.median(f for f, _ in steps)
        first = first or med
        dev = [d for _, d in steps if d]
        dev_s = f"{statistics.median(dev) * 1e3:>18.3f}" if dev else f"{'-':>18}"
        rest_s = f"{statistics.median(f - d for f, d in steps if d) * 1e3:>16.3f}" if dev else f"{'-':>16}"
        print(f"{name:<20}{len(steps):>20}{med * 1e3:>19.3f}{med / first:>9.3f}x{dev_s}{rest_s}")


if __name__ == "__main__":
    main(sys.argv[1])
