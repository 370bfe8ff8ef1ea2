#!/usr/bin/env python3
"""Opcode mix of kernels from `ncu -i REP --page source --csv --print-source sass` files.

usage: python3 scripts/lib/ncu_opcodes.py FILE...

Per file: the warp instructions executed, grouped by opcode (the SASS mnemonic without its
modifiers or predicate), largest first, with each one's share; the counts are the first column
whose name starts with "Instructions Executed" or "Warp Instructions Executed".
"""
import csv
import sys
from collections import Counter


def num(x):
    try:
        return float(x.replace(",", ""))
    except (ValueError, AttributeError):
        return 0.0


for path in sys.argv[1:]:
    rows = [r for r in csv.reader(open(path, errors="replace")) if r]
    hi = next((i for i, r in enumerate(rows) if any(c.strip().lower() == "source" for c in r)), None)
    if hi is None:
        print(path, ": no SASS table;", rows[:3])
        continue
    head = [c.strip() for c in rows[hi]]
    src = next(i for i, c in enumerate(head) if c.lower() == "source")
    cnt = next((i for i, c in enumerate(head)
                if c.startswith("Instructions Executed") or c.startswith("Warp Instructions Executed")), None)
    if cnt is None:
        print(path, ": no executed-instruction column;", head)
        continue
    ops = Counter()
    for r in rows[hi + 1:]:
        if len(r) <= max(src, cnt):
            continue
        words = r[src].strip().split()
        if words and words[0].startswith("@"):
            words = words[1:]
        if words:
            ops[words[0].split(".")[0]] += num(r[cnt])
    total = sum(ops.values()) or 1.0
    print(f"== {path.split('/')[-1]}: {total:.0f} warp instructions ({head[cnt]})")
    print("   " + ", ".join(f"{op} {v / total * 100:.1f}%" for op, v in ops.most_common(20) if v > 0))
