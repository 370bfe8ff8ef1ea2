#!/usr/bin/env python3
"""Per-kernel summary of the `ncu --page raw --csv` files in a folder (scripts/gpu-quant-ncu.sh).

usage: python3 scripts/lib/ncu_summary.py DIR

For each DIR/*.raw.csv (one profiled launch each; the file name is the probe's tag): duration,
DRAM throughput and bytes, achieved and theoretical occupancy, waves, registers, issue activity
and eligible warps, L1/L2 hit rates, the warp stall reasons (cycles per issued instruction,
largest first) and the busiest pipes (% of peak while the SM is active).
"""
import csv
import glob
import os
import sys

KEYS = [("gpu__time_duration.sum", "duration"), ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "dram %peak"),
        ("dram__bytes_read.sum", "dram read"), ("sm__warps_active.avg.pct_of_peak_sustained_active", "occupancy %"),
        ("sm__maximum_warps_per_active_cycle_pct", "theoretical occ %"),
        ("launch__occupancy_limit_registers", "blocks/SM by regs"), ("launch__waves_per_multiprocessor", "waves"),
        ("launch__grid_size", "grid"), ("launch__registers_per_thread", "regs"),
        ("smsp__issue_active.avg.pct_of_peak_sustained_active", "issue active %"),
        ("smsp__warps_eligible.avg.per_cycle_active", "eligible warps/cyc"),
        ("smsp__warps_active.avg.per_cycle_active", "active warps/smsp"),
        ("lts__t_sector_hit_rate.pct", "L2 hit %"), ("l1tex__t_sector_hit_rate.pct", "L1 hit %"),
        ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "SM %peak"),
        ("smsp__inst_executed.sum", "warp instructions"), ("sm__cycles_elapsed.avg", "SM cycles")]


def num(x):
    try:
        return float(x.replace(",", ""))
    except (ValueError, AttributeError):
        return 0.0


def main(d):
    for path in sorted(glob.glob(os.path.join(d, "*.raw.csv"))):
        rows = list(csv.reader(open(path)))
        rows = [r for r in rows if r]
        hi = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
        if hi is None or len(rows) < hi + 3:
            print(os.path.basename(path), ": no kernel", rows[:2])
            continue
        head, units = rows[hi], rows[hi + 1]
        for r in rows[hi + 2:]:
            m, u = dict(zip(head, r)), dict(zip(head, units))
            print(f"== {os.path.basename(path)[:-8]}: {m.get('Kernel Name', '')[:100]}")
            print("   " + "; ".join(f"{n} {m[k]} {u.get(k, '')}".strip() for k, n in KEYS if k in m))
            st = [(k, num(m[k])) for k in head if k.startswith("smsp__average_warps_issue_stalled_") and k.endswith(".ratio")]
            if not st:
                st = [(k, num(m[k])) for k in head if "issue_stalled" in k and k.endswith(".ratio")]
            st.sort(key=lambda kv: -kv[1])
            print("   stalls (warps per issue): " + ", ".join(
                f"{k.split('stalled_')[1].split('_per_issue')[0].split('.')[0]} {v:.2f}" for k, v in st[:9] if v > 0))
            pipes = [(k, num(m[k])) for k in head
                     if (k.startswith("sm__inst_executed_pipe_") or k.startswith("sm__pipe_"))
                     and k.endswith("pct_of_peak_sustained_active")]
            pipes.sort(key=lambda kv: -kv[1])
            print("   pipes (% of peak, active): " + ", ".join(
                f"{k.replace('sm__inst_executed_pipe_', 'inst:').replace('sm__pipe_', 'cyc:').split('.')[0]} {v:.1f}"
                for k, v in pipes[:10] if v > 0))


if __name__ == "__main__":
    main(sys.argv[1])
