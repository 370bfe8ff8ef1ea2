#!/usr/bin/env python3
"""Clocks and power per step of a GPU script's call: nvidia-smi's samples (smi.csv, written by
`nvidia-smi --query-gpu=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu[,clocks_event_reasons.active]
--format=csv,noheader,nounits -lms 250`) split by the steps' spans (step_marks.txt: "NAME START END",
epoch seconds, scripts/lib/step.sh with STEP_MARKS): per step and GPU the median SM clock (MHz),
median and max power (W), max temperature (C) and the share of samples with an active clock event
other than idle (bit 0x1), e.g. the power cap (0x4) or a thermal slowdown. Run on the machine that
logged them (nvidia-smi's timestamps are its local time).

Usage: python3 smi_windows.py smi.csv step_marks.txt
"""
import statistics as st
import sys
import time


def parse(path):
    rows = []
    for line in open(path):
        f = [x.strip() for x in line.split(",")]
        if len(f) < 6:
            continue
        try:
            stamp, frac = f[0].split(".") if "." in f[0] else (f[0], "0")
            t = time.mktime(time.strptime(stamp, "%Y/%m/%d %H:%M:%S")) + float("0." + frac)
            reasons = int(f[6], 16) if len(f) > 6 and f[6].startswith("0x") else 0
            rows.append((t, int(f[1]), float(f[2]), float(f[3]), float(f[4]), float(f[5]), reasons))
        except ValueError:
            continue  # a header or a field the GPU did not report
    return rows


def main():
    samples = parse(sys.argv[1])
    marks = [l.split() for l in open(sys.argv[2]) if len(l.split()) == 3]
    print("| step | GPU | samples | SM MHz (median) | mem MHz | power W (median / max) | temp C (max) | clock events |")
    print("|---|---|---|---|---|---|---|---|")
    for name, t0, t1 in marks:
        t0, t1 = float(t0), float(t1)
        for gpu in sorted({s[1] for s in samples}):
            w = [s for s in samples if s[1] == gpu and t0 <= s[0] <= t1]
            if not w:
                continue
            busy = [s for s in w if s[4] > 150] or w  # leave out idle gaps (loading, building)
            events = sum(1 for s in busy if s[6] & ~0x1) / len(busy)
            print(f"| {name} | {gpu} | {len(busy)} | {st.median(s[2] for s in busy):.0f} | "
                  f"{st.median(s[3] for s in busy):.0f} | {st.median(s[4] for s in busy):.0f} / "
                  f"{max(s[4] for s in busy):.0f} | {max(s[5] for s in busy):.0f} | {100 * events:.0f}% |")


if __name__ == "__main__":
    main()
