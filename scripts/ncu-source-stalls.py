#!/usr/bin/env python3
"""Condenses an ncu report's PC-sampling stall profile per SASS line (issue 8 item 3a, prefill attention).

  PYTHONPATH=<nsight-compute>/extras/python python3 scripts/ncu-source-stalls.py REPORT.ncu-rep \
      [--src kernels/attention_prefill_wgmma_ws.cuh] [--json OUT.json] [--top 30]
  python3 scripts/ncu-source-stalls.py --csv SOURCE.csv [--top 30]
      SOURCE.csv: `ncu -i REPORT --page source --csv --print-source sass` (no source lines: the
      regions come from the SASS alone, see csv_main)

Reads the first profiled kernel of the report (ncu --set full --import-source yes, a -lineinfo
build) through ncu's Python interface: the per-instruction metrics smsp__pcsamp_warps_issue_stalled_*
(warp samples by stall reason at each PC) and inst_executed, the SASS text and the source line of
each PC. Each PC is put in a region by its source line in --src, the warp-specialized kernel's file:
"producer" (from the line holding "---- producer" to the one holding "---- consumer"), "consumer
loop" (the consumer's key-tile loop: from "for (int kt = 0; kt + 1 < n_key_tiles" to "const int tl =
n_key_tiles - 1"), "consumer" (the rest of the consumer branch), "setup" (before the producer
branch); PCs of inlined helpers from other files (softmax, wgmma wrappers, mbarrier waits) take the
region of the nearest preceding PC that has one of --src's lines. Prints, per region, samples and
instructions executed with the top stall reasons, then the hottest SASS lines with their top
reasons; --json writes every PC's values.
"""
import argparse
import collections
import json
import sys

PREFIX = "smsp__pcsamp_warps_issue_stalled_"
MARKERS = (("producer", "---- producer"), ("consumer", "---- consumer"),
           ("consumer loop", "for (int kt = 0;"), ("consumer tail", "const int tl = n_key_tiles - 1"))


def line_regions(src_path):
    """Line number -> region for the kernel file, from the markers (first kernel in the file)."""
    lines = open(src_path).read().splitlines()
    at = {}
    for name, text in MARKERS:
        for i, l in enumerate(lines, 1):
            if text in l:
                at[name] = i
                break
    if "producer" not in at or "consumer" not in at:
        return None, at
    loop0, loop1 = at.get("consumer loop", 10 ** 9), at.get("consumer tail", 10 ** 9)

    def region(n):
        if n < at["producer"]:
            return "setup"
        if n < at["consumer"]:
            return "producer"
        if loop0 <= n < loop1:
            return "consumer loop"
        return "consumer"
    return region, at


def csv_main(path, top):
    """The same tables from the source page's CSV (per SASS line: address, SASS, stall_* sample
    columns, Instructions Executed). Regions from the SASS of a warp-specialized kernel: "setup"
    up to the consumers' setmaxnreg (USETMAXREG.TRY_ALLOC), "consumer" up to the producer's
    (USETMAXREG.DEALLOC), "producer" up to the first instruction after it that no warp executed
    followed by the out-of-line mbarrier retry loops ("out-of-line waits"); each branch's widest
    backward branch marks its loop (" loop")."""
    import csv
    import re
    rows = list(csv.reader(open(path)))
    hi = next(i for i, r in enumerate(rows) if "Address" in r)
    hdr, data = rows[hi], [r for r in rows[hi + 1:] if len(r) == len(rows[hi])]
    ia, isrc = hdr.index("Address"), hdr.index("Source")
    iex = hdr.index("Instructions Executed")
    cols = [(i, h[len("stall_"):]) for i, h in enumerate(hdr) if h.startswith("stall_") and "Not Issued" not in h]
    base = int(data[0][ia], 16)
    recs = []
    for r in data:
        st = {n: float(r[i] or 0) for i, n in cols}
        recs.append({"off": int(r[ia], 16) - base, "sass": r[isrc].strip(), "ex": float(r[iex] or 0),
                     "samples": sum(st.values()), "stalls": st})
    cons = next((x["off"] for x in recs if "USETMAXREG.TRY_ALLOC" in x["sass"]), None)
    prod = next((x["off"] for x in recs if "USETMAXREG.DEALLOC" in x["sass"]), None)
    if cons is None or prod is None:
        print("no setmaxnreg in the SASS: one region")
        cons = prod = 10 ** 12
    first, second = ("consumer", "producer") if cons < prod else ("producer", "consumer")
    lo, mid = min(cons, prod), max(cons, prod)
    for x in recs:
        x["region"] = "setup" if x["off"] < lo else first if x["off"] < mid else second
    # The out-of-line retry loops after the second branch: from the last EXIT on.
    exits = [x["off"] for x in recs if re.search(r"\bEXIT\b", x["sass"])]
    if exits:
        for x in recs:
            if x["off"] > exits[-1]:
                x["region"] = "out-of-line waits"
    widest = {}
    for x in recs:
        m = re.search(r"\bBRA\b[^0-9a-fA-Fx]*(0x[0-9a-fA-F]+)", x["sass"])
        if not m or x["region"] not in ("consumer", "producer"):
            continue
        t = int(m.group(1), 16) - base
        if 0 <= t < x["off"]:
            w = widest.get(x["region"])
            if w is None or x["off"] - t > w[1] - w[0]:
                widest[x["region"]] = (t, x["off"])
    for x in recs:
        w = widest.get(x["region"])
        if w and w[0] <= x["off"] <= w[1]:
            x["region"] += " loop"
    print("loops (widest backward branch): " + ", ".join(f"{k} {v[0]:#x}-{v[1]:#x}" for k, v in widest.items()))
    total = sum(x["samples"] for x in recs) or 1.0
    print(f"total samples {total:.0f}, instructions executed {sum(x['ex'] for x in recs):.4g}")
    print("\n== per region: samples (share), SASS lines, instructions executed, top stall reasons (share of the region) ==")
    reg = {}
    for x in recs:
        g = reg.setdefault(x["region"], {"s": 0.0, "n": 0, "ex": 0.0, "st": collections.Counter()})
        g["s"] += x["samples"]
        g["n"] += 1
        g["ex"] += x["ex"]
        g["st"].update(x["stalls"])
    for k, g in reg.items():
        reasons = ", ".join(f"{a} {b / (g['s'] or 1):.0%}" for a, b in g["st"].most_common(7) if b)
        print(f"{k:<17} {g['s']:8.0f} ({g['s'] / total:5.1%}) {g['n']:5d} SASS {g['ex'] / 1e6:8.2f} M | {reasons}")
    print(f"\n== hottest {top} SASS lines: offset, region, samples (share of all), top reasons, SASS ==")
    for x in sorted(recs, key=lambda x: -x["samples"])[:top]:
        t3 = ", ".join(f"{a} {b / (x['samples'] or 1):.0%}" for a, b in sorted(x["stalls"].items(), key=lambda kv: -kv[1])[:2] if b)
        print(f"{x['off']:#07x} {x['region']:<15} {x['samples']:7.0f} ({x['samples'] / total:4.1%}) {t3:<32} {x['sass'][:72]}")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("report", nargs="?")
    ap.add_argument("--csv", help="the source page as CSV instead of the report (no ncu_report module needed)")
    ap.add_argument("--src", default="kernels/attention_prefill_wgmma_ws.cuh")
    ap.add_argument("--json")
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    if a.csv:
        return csv_main(a.csv, a.top)
    import ncu_report  # from <nsight-compute>/extras/python
    ctx = ncu_report.load_report(a.report)
    act = ctx.range_by_idx(0).action_by_idx(0)
    print(f"kernel: {act.name()}")
    names = list(act.metric_names())
    for k in ("launch__grid_size", "launch__block_size", "sm__cycles_elapsed.max", "smsp__inst_executed.sum",
              "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
              "smsp__issue_active.avg.pct_of_peak_sustained_active", "smsp__warps_eligible.avg.per_cycle_active",
              "gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second"):
        if k in names:
            m = act.metric_by_name(k)
            try:
                print(f"  {k} = {m.as_double():.4g}")
            except Exception:  # noqa: BLE001 - a metric of another type
                print(f"  {k} = {m.value()}")
    per_pc = collections.defaultdict(lambda: collections.defaultdict(float))
    used = []
    for n in names:
        if not (n.startswith(PREFIX) or n in ("inst_executed", "smsp__pcsamp_sample_count")):
            continue
        m = act.metric_by_name(n)
        if not m.has_correlation_ids():
            continue
        ids = m.correlation_ids()
        used.append(n)
        for i in range(m.num_instances()):
            per_pc[ids.as_uint64(i)][n] += m.as_double(i)  # zeros too: every PC gets a row (branches)
    print(f"  per-PC metrics: {len(used)} ({', '.join(sorted(u.replace(PREFIX, '') for u in used))})")
    region_of_line, at = line_regions(a.src)
    print(f"  regions from {a.src}: {at}")
    src_tail = a.src.split("/")[-1]
    rows = []
    last = "setup"
    for pc in sorted(per_pc):
        si = act.source_info(pc)
        f, ln = (str(si.file_name()), int(si.line())) if si else ("?", 0)
        if region_of_line and f.endswith(src_tail) and ln:
            last = region_of_line(ln)
        vals = per_pc[pc]
        stalls = {k[len(PREFIX):]: v for k, v in vals.items() if k.startswith(PREFIX) and not k.endswith("_not_issued")}
        rows.append({"pc": pc, "region": last, "file": f.split("/")[-1], "line": ln, "sass": str(act.sass_by_pc(pc)).strip(),
                     "inst_executed": vals.get("inst_executed", 0.0), "samples": sum(stalls.values()), "stalls": stalls})
    base = rows[0]["pc"] if rows else 0
    # Loops: the widest backward branch of each region (SASS "BRA <target>" to a lower address);
    # the rows inside it get the region name + " loop" where the source lines did not say so.
    import re
    widest = {}
    for r in rows:
        m = re.search(r"\bBRA\b[^0-9a-fA-Fx]*(0x[0-9a-fA-F]+)", r["sass"])
        if not m:
            continue
        t = int(m.group(1), 16)
        for tgt in (t, base + t):
            if base <= tgt < r["pc"]:
                reg0 = r["region"].replace(" loop", "")
                if reg0 not in widest or r["pc"] - tgt > widest[reg0][1] - widest[reg0][0]:
                    widest[reg0] = (tgt, r["pc"])
                break
    print("  widest backward branch per region: " + ", ".join(f"{k} {v[0] - base:#x}-{v[1] - base:#x}" for k, v in widest.items()))
    for r in rows:
        reg0 = r["region"].replace(" loop", "")
        if reg0 in widest and widest[reg0][0] <= r["pc"] <= widest[reg0][1] and reg0 in ("producer", "consumer"):
            r["region"] = reg0 + " loop"
    total = sum(r["samples"] for r in rows) or 1.0
    print(f"\ntotal samples {total:.0f}, instructions executed {sum(r['inst_executed'] for r in rows):.4g}")
    print("\n== per region: samples (share), instructions executed, samples per instruction, top stall reasons (share of the region) ==")
    reg = collections.OrderedDict()
    for r in rows:
        g = reg.setdefault(r["region"], {"samples": 0.0, "inst": 0.0, "n": 0, "stalls": collections.Counter()})
        g["samples"] += r["samples"]
        g["inst"] += r["inst_executed"]
        g["n"] += 1
        g["stalls"].update(r["stalls"])
    for name, g in reg.items():
        s = g["samples"] or 1.0
        top = ", ".join(f"{k} {v / s:.0%}" for k, v in g["stalls"].most_common(8) if v)
        print(f"{name:<14} {g['samples']:9.0f} ({g['samples'] / total:5.1%}) {g['n']:5d} SASS  inst {g['inst']:.4g}  {top}")
    print(f"\n== hottest {a.top} SASS lines: offset, region, samples (share of all), top reasons, source, SASS ==")
    for r in sorted(rows, key=lambda r: -r["samples"])[:a.top]:
        top = ", ".join(f"{k} {v / (r['samples'] or 1):.0%}" for k, v in sorted(r["stalls"].items(), key=lambda kv: -kv[1])[:3] if v)
        print(f"{r['pc'] - base:#07x} {r['region']:<13} {r['samples']:7.0f} ({r['samples'] / total:4.1%}) "
              f"{top:<48} {r['file']}:{r['line']:<4} {r['sass'][:70]}")
    if a.json:
        json.dump({"kernel": act.name(), "base": base, "rows": rows}, open(a.json, "w"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
