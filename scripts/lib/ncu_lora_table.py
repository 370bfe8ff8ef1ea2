#!/usr/bin/env python3
"""The LoRA share of one engine_bench --lora --ncu-decode step under ncu (scripts/gpu-lora-check.sh NCU=1).

usage: python3 scripts/lib/ncu_lora_table.py LOG [LOG ...]

For each `ncu --csv --page raw` log (metrics gpu__time_duration.sum, dram__bytes_read.sum,
dram__bytes_write.sum, launch__grid_size): the step line engine_bench wrote (its time outside the
profiler), the kernel count, the sum of the serialized durations split into the LoRA kernels
(names with "lora") and the rest, then one row per LoRA kernel name and per product (gemm or
gemv) name: calls, µs a call, total ms, DRAM GB/s and grid. Under ncu every launch runs alone, so
the sums say what the kernels cost without overlap; the step's own time says what they cost
beside each other. Reuses scripts/lib/ncu_table.py's reading.
"""
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncu_table import SCALE, short  # noqa: E402


def table(path):
    lines = open(path).read().splitlines()
    step = next((l for l in lines if "per step" in l), "(no step line)").strip()
    rows = list(csv.reader([l for l in lines if l.startswith('"')]))
    if len(rows) < 3:
        print(f"== {os.path.basename(path)}: {step}\n   no kernels profiled")
        return
    head, units, data = rows[0], rows[1], rows[2:]
    col = {h: i for i, h in enumerate(head)}

    def val(r, key):
        if key not in col or not r[col[key]].strip():
            return 0.0
        return float(r[col[key]].replace(",", "")) * SCALE.get(units[col[key]], 1.0)

    agg = {}
    for r in data:
        name = short(r[col["Kernel Name"]])
        a = agg.setdefault(name, [0, 0.0, 0.0, set()])
        a[0] += 1
        a[1] += val(r, "gpu__time_duration.sum")
        a[2] += val(r, "dram__bytes_read.sum") + val(r, "dram__bytes_write.sum")
        a[3].add(int(val(r, "launch__grid_size")))
    total = sum(a[1] for a in agg.values())
    lora = {k: a for k, a in agg.items() if "lora" in k.lower()}
    lora_t = sum(a[1] for a in lora.values())
    lora_n = sum(a[0] for a in lora.values())
    print(f"== {step}")
    print(f"   {len(data)} kernels, serialized sum {total * 1e3:.3f} ms: LoRA {lora_n} launches {lora_t * 1e3:.3f} ms "
          f"({lora_t / total:.1%}), the rest {(total - lora_t) * 1e3:.3f} ms")
    print(f"   {'kernel':<40} {'calls':>5} {'us/call':>8} {'total_ms':>8} {'GB/s':>6} grid")
    shown = sorted(agg.items(), key=lambda kv: -kv[1][1])
    for i, (k, (n, t, b, grids)) in enumerate(shown):
        if k in lora or i < 6:
            g = ",".join(str(x) for x in sorted(grids)[:3]) + ("..." if len(grids) > 3 else "")
            print(f"   {k:<40} {n:>5} {t / n * 1e6:>8.2f} {t * 1e3:>8.3f} {b / t / 1e9 if t else 0:>6.0f} {g}")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        table(p)
