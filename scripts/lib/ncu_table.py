#!/usr/bin/env python3
"""Per-kernel table of an `ncu --csv --page raw` log of one engine_bench --ncu-decode step.

usage: python3 scripts/lib/ncu_table.py LOG [TITLE]

Reads the metrics gpu__time_duration.sum, dram__bytes_read.sum and, when the log has it,
dram__bytes_write.sum; prints the step line engine_bench wrote, the kernel count, the sum of
their durations and DRAM bytes, then one row per kernel name (calls, total ms, share, µs a call,
GB/s). Under ncu every launch is serialized at whatever clocks the GPU has between them, so the
sum is not the step's real time: compare it with engine_bench's own timing of the same point.
Used by scripts/gpu-perf.sh and bench/kernels/mbu-check.sh.
"""
import csv
import re
import sys

SCALE = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3,
         "second": 1.0, "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9,
         "B": 1.0}


def short(name):
    name = re.sub(r"\(anonymous namespace\)::|<unnamed>::", "", name)
    name = re.sub(r"\(.*", "", name)
    name = re.sub(r"<.*", "", name)
    return name.split("::")[-1].replace("void ", "")[:44]


def main(path, title=""):
    lines = open(path).read().splitlines()
    step = next((l for l in lines if "per step" in l), "").strip()
    rows = list(csv.reader([l for l in lines if l.startswith('"')]))
    head, units, data = rows[0], rows[1], rows[2:]
    col = {h: i for i, h in enumerate(head)}

    def val(r, key):
        if key not in col:
            return 0.0
        i = col[key]
        return float(r[i].replace(",", "")) * SCALE.get(units[i], 1.0)

    agg = {}
    for r in data:
        a = agg.setdefault(short(r[col["Kernel Name"]]), [0, 0.0, 0.0])
        a[0] += 1
        a[1] += val(r, "gpu__time_duration.sum")
        a[2] += val(r, "dram__bytes_read.sum") + val(r, "dram__bytes_write.sum")
    total = sum(a[1] for a in agg.values())
    total_b = sum(a[2] for a in agg.values())
    print(f"== ncu {title}: {step}" if title else step)
    print(f"{len(data)} kernels, sum of durations {total * 1e3:.3f} ms, DRAM {total_b / 1e9:.2f} GB, "
          f"{total_b / total / 1e9:.0f} GB/s over the sum")
    print(f"{'kernel':<44} {'calls':>5} {'total_ms':>9} {'share':>6} {'us/call':>8} {'GB/s':>7}")
    for k, (n, t, b) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print(f"{k:<44} {n:>5} {t * 1e3:>9.3f} {t / total:>6.1%} {t / n * 1e6:>8.1f} {b / t / 1e9:>7.0f}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "")
