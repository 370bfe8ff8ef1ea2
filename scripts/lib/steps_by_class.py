#!/usr/bin/env python3
"""A run folder's steps.jsonl by step class, one line per run: prefill steps of one prompt, median
duration by prompt length; decode steps, median by batch bucket; and the time between steps
(the engine idle on the host: e.g. an in-process workload drawing an adapter's weights); and the
steps that loaded a LoRA adapter into a slot (its host -> GPU copy, or packing its image first).
Then, for a real run's steps that recorded their host split (`host`: before_s, forward_s,
device_s), where a one-prompt prefill's time goes, median ms by prompt length: the engine's host
work before the backend call, the backend call's host part (forward - device: packing the step
before its first kernel, the sync after) and the device span (first kernel to last copy).

    python3 scripts/lib/steps_by_class.py OUT/steps.jsonl
"""
import collections
import json
import statistics
import sys


def bucket(b):
    for e in (1, 2, 4, 8, 16, 24, 32, 48, 64):
        if b <= e:
            return e
    return b


def is_decode(s):
    """A real run's roofline class; a sim run's steps (no roofline): one token a sequence."""
    if "roofline" in s:
        return s["roofline"]["class"] == "decode"
    return s["n_tokens"] == s["batch_size"]


def main(path):
    runs = collections.defaultdict(list)
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            runs[r["run"]].append(r)
    print("| run | prefill steps | prefill s | one prompt's prefill p50 ms, tokens 0-127 / 128-255 / 256-383 / 384-511 "
          "| decode s | decode p50 ms at batch <=8 / <=16 / <=64 | gaps > 2 ms between steps (s) "
          "| steps loading an adapter: n, p50 / max ms, s |")
    print("|---|---:|---:|---|---:|---|---|---|")
    med = lambda v: "%.2f" % statistics.median(v) if v else "-"
    for run, steps in runs.items():
        steps.sort(key=lambda s: s["start_s"])
        pre = [s for s in steps if not is_decode(s)]
        dec = [s for s in steps if is_decode(s)]
        by_len = collections.defaultdict(list)
        for s in pre:
            if s["batch_size"] == 1:
                by_len[min(s["n_tokens"] // 128, 3)].append(s["duration_s"] * 1e3)
        by_batch = collections.defaultdict(list)
        for s in dec:
            by_batch[bucket(s["batch_size"])].append(s["duration_s"] * 1e3)
        gaps = [b["start_s"] - a["start_s"] - a["duration_s"] for a, b in zip(steps, steps[1:])]
        big = [g for g in gaps if g > 0.002]
        loads = [s["duration_s"] * 1e3 for s in steps if s.get("lora", {}).get("n_loads", 0) > 0]
        load_col = f"{len(loads)}, {med(loads)} / {max(loads):.2f}, {sum(loads) / 1e3:.2f}" if loads else "0"
        print(f"| {run} | {len(pre)} | {sum(s['duration_s'] for s in pre):.2f} | "
              + " / ".join(med(by_len[k]) for k in range(4))
              + f" | {sum(s['duration_s'] for s in dec):.2f} | {med(by_batch[8])} / {med(by_batch[16])} / {med(by_batch[64])}"
              + f" | {len(big)}: {sum(big):.2f} | {load_col} |")
    host_split(runs)


def host_split(runs):
    """One line per run: a one-prompt prefill's before / forward - device / device, median ms by length."""
    rows = []
    for run, steps in runs.items():
        by_len = collections.defaultdict(lambda: ([], [], []))
        for s in steps:
            h = s.get("host")
            if is_decode(s) or s["batch_size"] != 1 or not h or not h.get("device_s"):
                continue
            b = by_len[min(s["n_tokens"] // 128, 3)]
            b[0].append(h["before_s"] * 1e3)
            b[1].append((h["forward_s"] - h["device_s"]) * 1e3)
            b[2].append(h["device_s"] * 1e3)
        if by_len:
            rows.append((run, by_len))
    if not rows:
        return
    print()
    print("| run | one prompt's prefill, p50 ms before / forward - device / device: tokens 0-127 | 128-255 | 256-383 | 384-511 |")
    print("|---|---|---|---|---|")
    med = lambda v: "%.2f" % statistics.median(v) if v else "-"
    for run, by_len in rows:
        cells = [" / ".join(med(v) for v in by_len[k]) if k in by_len else "-" for k in range(4)]
        print(f"| {run} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
