#!/usr/bin/env python3
"""The instructions where a kernel's warps stall most, from Nsight Compute's source page:

    ncu -i REPORT.ncu-rep --page source --csv --print-source sass > source.csv
    python3 bench/kernels/ncu_source_top.py source.csv [N]

Prints the share of all warp-stall samples on each of the N (default 25) instructions with the
most, with its executed count and its two largest stall reasons, then the share of the samples on
every instruction of each opcode's kind (the first word after any predicate).
"""
import csv
import sys
from collections import Counter


def main() -> int:
    path = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    rows = list(csv.reader(open(path, newline="")))
    at = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    hdr, data = rows[at], [r for r in rows[at + 1:] if len(r) == len(rows[at])]
    col = {h: i for i, h in enumerate(hdr)}
    samples = col["Warp Stall Sampling (All Samples)"]
    executed = col["Instructions Executed"]
    reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]

    def num(r, i):
        try:
            return float(r[i] or 0)
        except ValueError:
            return 0.0

    total = sum(num(r, samples) for r in data)
    print(f"{len(data)} instructions, {total:.0f} stall samples, "
          f"{sum(num(r, executed) for r in data):.0f} warp instructions executed")
    print(f"{'share':>6} {'executed':>10}  {'instruction':<48} reasons")
    for r in sorted(data, key=lambda r: -num(r, samples))[:n]:
        top = sorted(((num(r, col[h]), h[6:]) for h in reasons), reverse=True)[:2]
        why = ", ".join(f"{name} {v / max(num(r, samples), 1):.0%}" for v, name in top if v > 0)
        print(f"{num(r, samples) / total:6.1%} {num(r, executed):10.0f}  {r[1].strip()[:48]:<48} {why}")
    kinds = Counter()
    for r in data:
        words = r[1].split()
        op = words[1] if words and words[0].startswith("@") and len(words) > 1 else (words[0] if words else "?")
        kinds[op.split(".")[0]] += num(r, samples)
    print("by opcode: " + ", ".join(f"{k} {v / total:.1%}" for k, v in kinds.most_common(12)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
