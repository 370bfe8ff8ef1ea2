#!/usr/bin/env python3
"""Per run of a folder's steps.jsonl (or .gz): the decode steps that carried no drafts, their median
forward time (host.forward_s: the backend's step) and, where recorded, median device span
(host.device_s: the forward's launch to its tokens on the GPU), and each run against the first
run at the same load (the label's "@..." part) step by step: the median over step indices where
both ran a plain decode of the same batch of device_s (else forward_s) ratios. A median over each
run's own multiset of steps is not a comparison when runs drop different steps (a probe early in
a run removes fast short-context steps and moves the median up, 2026-11-30).

  python3 results/gpu/spec/forward_medians.py RUN_FOLDER
"""
import collections
import statistics
import sys

from spec_ratio import steps_of  # the same folder


def main(folder):
    runs = collections.OrderedDict()
    for s in steps_of(folder):
        runs.setdefault(s["run"], []).append(s)
    first_at = {}
    print(f"{'run':<20}{'plain decode steps':>20}{'forward median ms':>19}{'device median ms':>18}"
          f"{'paired vs first':>17}{'first':>16}")
    for name, steps in runs.items():
        plain = {i: s for i, s in enumerate(steps)
                 if s["roofline"]["class"] == "decode" and not s.get("spec_decode")}
        load = name.split("@")[-1]
        first_at.setdefault(load, (name, plain))
        ref_name, ref = first_at[load]
        key = "device_s" if all(s["host"].get("device_s") for s in plain.values()) else "forward_s"
        ratios = [plain[i]["host"][key] / ref[i]["host"][key] for i in plain
                  if i in ref and plain[i]["batch_size"] == ref[i]["batch_size"] and ref[i]["host"].get(key)]
        fwd = statistics.median(s["host"]["forward_s"] for s in plain.values())
        dev = [s["host"]["device_s"] for s in plain.values() if s["host"].get("device_s")]
        dev_s = f"{statistics.median(dev) * 1e3:>18.3f}" if dev else f"{'-':>18}"
        paired = f"{statistics.median(ratios):>16.4f}x" if ratios else f"{'-':>17}"
        print(f"{name:<20}{len(plain):>20}{fwd * 1e3:>19.3f}{dev_s}{paired}{ref_name:>16}")


if __name__ == "__main__":
    main(sys.argv[1])
