#!/usr/bin/env python3
"""The sim validation matrix's table (issue 28 item 1): one row per cell x load of matrix-cells.tsv.

Usage: matrix_summarize.py OUT [--md FILE] [--cells TSV]

Each figure is computed here from the run's records, as analysis/metrics.cpp does (TTFT = first
token - arrival; TPOT = (last token - first token) / (outputs - 1); percentiles interpolated
linearly between order statistics; output throughput = output tokens / (last finish - first
arrival)), and where the run's validation.json is there its real and sim figures must agree with
these to 1e-6: a check of both. Beside every error: the real figure's sampling noise, the
half-width of a bootstrap 95% interval over the run's requests (200 resamples, seeded), relative.
h200 cells: OUT/CELL/validation/ (validate-sim). h100 cells: the past folder's real records and
OUT/CELL/sim/records.jsonl.gz (matrix.sh h100); every request's prompt and output length must be
the same in both (the same plan), else the cell fails loudly.
Targets: p50s within 5%, p99s and throughput within 10%. Beside the preemption counts, each run's
KV peak (kv_peak over arena_slots): the most K/V tokens its admitted requests held at once, rebuilt
alike from both runs' records, over the arena's slots (the scenario's kv_cache_mb over the
profile's bytes a slot): how near a run came to the full arena where a paged engine preempts.
Python 3 standard library only.
"""
import argparse
import gzip
import json
import math
import os
import random
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FIGURES = ["ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "output_throughput"]
SHORT = {"ttft_p50_ms": "TTFT p50", "ttft_p99_ms": "TTFT p99", "tpot_p50_ms": "TPOT p50",
         "tpot_p99_ms": "TPOT p99", "output_throughput": "throughput"}
SLACK_MS = 1e-6  # analysis/metrics.cpp kSloSlackMs
TARGET = {"ttft_p50_ms": 0.05, "tpot_p50_ms": 0.05, "ttft_p99_ms": 0.10, "tpot_p99_ms": 0.10,
          "output_throughput": 0.10}


def percentile(sorted_values, q):
    """analysis/percentiles.cpp percentile_of_sorted."""
    if not sorted_values:
        return float("nan")
    h = (len(sorted_values) - 1) * q / 100.0
    lo = int(math.floor(h))
    if lo + 1 >= len(sorted_values):
        return sorted_values[-1]
    return sorted_values[lo] + (h - lo) * (sorted_values[lo + 1] - sorted_values[lo])


def finish(r):
    if r.get("end_s", -1) is not None and r.get("end_s", -1) >= 0:
        return r["end_s"]
    t = r.get("token_times_s") or []
    return t[-1] if t else r.get("first_token_s", -1)


def last_token(r):
    t = r.get("token_times_s") or []
    return t[-1] if t else r["end_s"]


def figures(records):
    """The five figures of one run's records (analysis/metrics.cpp compute_metrics)."""
    ttft, tpot, out_tokens = [], [], 0
    first_arrival, last_finish = float("inf"), float("-inf")
    for r in records:
        first_arrival = min(first_arrival, r["arrival_s"])
        f = finish(r)
        if f is not None and f >= 0:
            last_finish = max(last_finish, f)
        if r.get("status") != "ok":
            continue
        out_tokens += r["output_tokens"]
        if r["output_tokens"] <= 0:
            continue
        t_ms = (r["first_token_s"] - r["arrival_s"]) * 1000.0
        e2e_ms = (last_token(r) - r["arrival_s"]) * 1000.0
        ttft.append(t_ms)
        if r["output_tokens"] > 1:
            tpot.append((e2e_ms - t_ms) / (r["output_tokens"] - 1))
    ttft.sort()
    tpot.sort()
    d = last_finish - first_arrival
    return {"ttft_p50_ms": percentile(ttft, 50), "ttft_p99_ms": percentile(ttft, 99),
            "tpot_p50_ms": percentile(tpot, 50), "tpot_p99_ms": percentile(tpot, 99),
            "output_throughput": out_tokens / d if d > 0 else float("nan")}


def attainment(records, slo):
    """Share of the run's requests meeting the SLO's TTFT and TPOT bounds (analysis/metrics.cpp)."""
    met = 0
    for r in records:
        if r.get("status") != "ok" or r["output_tokens"] <= 0:
            continue
        t_ms = (r["first_token_s"] - r["arrival_s"]) * 1000.0
        ok = t_ms <= slo["ttft_ms"] + SLACK_MS
        if r["output_tokens"] > 1:
            e2e_ms = (last_token(r) - r["arrival_s"]) * 1000.0
            ok = ok and (e2e_ms - t_ms) / (r["output_tokens"] - 1) <= slo["tpot_ms"] + SLACK_MS
        met += ok
    return met / len(records) if records else float("nan")


def noise(records, n_resamples=200, level=0.95, seed=1):
    """Bootstrap half-width of each figure over the requests, relative (analysis/bootstrap.h)."""
    base = figures(records)
    rng = random.Random(seed)
    draws = {f: [] for f in FIGURES}
    for _ in range(n_resamples):
        sample = [records[rng.randrange(len(records))] for _ in records]
        for f, v in figures(sample).items():
            draws[f].append(v)
    out = {}
    for f in FIGURES:
        v = sorted(x for x in draws[f] if math.isfinite(x))
        lo, hi = percentile(v, 100 * (1 - level) / 2), percentile(v, 100 * (1 + level) / 2)
        out[f] = (hi - lo) / 2 / abs(base[f]) if base[f] and math.isfinite(base[f]) else float("nan")
    return out


def kv_peak(records):
    """(peak tokens, time): the most K/V tokens the admitted requests held at once, rebuilt from the
    records alike for both runs: a request holds its prompt from scheduled_s and one token more at
    each of its token times, until end_s (a preempted one is counted as holding on: an upper bound
    near a preemption, exact elsewhere). Blocks' rounding, reservations and shared prefixes are not
    counted."""
    ev = []
    for r in records:
        if r.get("status", "ok") != "ok" or r.get("scheduled_s") is None or r["scheduled_s"] < 0:
            continue
        p, tt = r.get("prompt_tokens", 0), r.get("token_times_s") or []
        ev.append((r["scheduled_s"], 2, p))
        ev += [(t, 0, 1) for t in tt]
        ev.append((finish(r), 1, -(p + len(tt))))
    ev.sort()  # at one instant: tokens, then ends (a request's last token before its end), then admissions
    cur, peak = 0, (0, float("nan"))
    for t, _, d in ev:
        cur += d
        if cur > peak[0]:
            peak = (cur, t)
    return peak


def arena_slots(scenario_path, profile_path):
    """Token slots of the run's KV arena: engine.kv_cache_mb (or kv_cache_bytes) of its scenario over
    the profile's bytes a slot (2 x layers x KV heads x head_dim x kv_dtype_bytes); None if unknown."""
    if not (scenario_path and profile_path and os.path.exists(scenario_path) and os.path.exists(profile_path)):
        return None
    text = open(scenario_path).read()
    mb, by = re.search(r"kv_cache_mb:\s*([0-9.]+)", text), re.search(r"kv_cache_bytes:\s*([0-9]+)", text)
    if not (mb or by):
        return None
    arena = float(mb.group(1)) * 1048576 if mb else float(by.group(1))
    prof = json.load(open(profile_path))
    m = prof["model"]
    slot = 2 * m["n_layers"] * m["n_kv_heads"] * m["head_dim"] * prof.get("kv_dtype_bytes", 2)
    return int(arena // slot)


def read_records(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def first_existing(*paths):
    for p in paths:
        if os.path.exists(p):
            return p
    return None


def by_run(records):
    """Records grouped by run label, runs ordered by their rate (the label's '@RATE')."""
    runs = {}
    for r in records:
        runs.setdefault(r["run"], []).append(r)
    return [runs[k] for k in sorted(runs, key=lambda k: float(k.rsplit("@", 1)[1]))]


def check_same_plan(name, real, sim):
    # lengths and arrival times: a re-prediction left from an earlier real run of another rate has
    # the same seeded lengths but not the same arrivals; arrivals agree to 1e-5 relative (a rate
    # written with fewer digits than the real run's, e.g. 0.85 x 37.0, moves them by ~1e-6 s)
    a = {r["id"]: (r["prompt_tokens"], r["output_tokens"], r["arrival_s"]) for r in real}
    b = {r["id"]: (r["prompt_tokens"], r["output_tokens"], r["arrival_s"]) for r in sim}

    def same(x, y):
        return (x is not None and y is not None and x[:2] == y[:2]
                and math.isclose(x[2], y[2], rel_tol=1e-5, abs_tol=1e-6))

    bad = sorted(i for i in set(a) | set(b) if not same(a.get(i), b.get(i)))
    if bad:
        raise SystemExit(f"{name}: the sim's plan is not the real run's: {len(bad)} requests differ "
                         f"(first ids {bad[:5]}: real {[a.get(i) for i in bad[:3]]}, sim {[b.get(i) for i in bad[:3]]})")


def check_against(name, load, mine, theirs, which):
    for f in FIGURES:
        ref = theirs[f][which]
        if not math.isclose(mine[f], ref, rel_tol=1e-6, abs_tol=1e-9):
            raise SystemExit(f"{name} at {load:.0%}: {which} {f} here {mine[f]!r}, validation.json {ref!r}")


def load_cells(tsv):
    cells = []
    with open(tsv) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            c = dict(zip(["cell", "gpu", "model", "arrival", "shape", "strategy", "held_out", "priority", "source"],
                         line.rstrip("\n").split("\t")))
            cells.append(c)
    return cells


def run_folders(c, out):
    """(real records, sim records, validation.json, steps known, arena slots, calibrated) of each folder holding runs
    of a cell; calibrated: the sim's profile took a calibration run's steps (matrix.sh CALIBRATE=1: profile-grid.json
    beside profile.json)."""
    d = os.path.join(out, c["cell"])
    if c["gpu"] == "h100":
        past = os.path.join(HERE, c["source"].split(":")[0])
        src, prof = c["source"].split(":")
        return [(first_existing(os.path.join(past, "records_real.jsonl.gz"), os.path.join(past, "records_real.jsonl")),
                 first_existing(os.path.join(d, "sim", "records.jsonl.gz"), os.path.join(d, "sim", "records.jsonl")),
                 os.path.join(past, "validation.json"), False,
                 arena_slots(os.path.join(d, "scenario.yaml"), os.path.join(HERE, os.path.dirname(src), prof)), False)]
    # both loads in one call (CELL/validation), or one call a load (CELL/load-L/validation)
    parts = [d] + sorted(os.path.join(d, x) for x in (os.listdir(d) if os.path.isdir(d) else []) if x.startswith("load-"))
    out_ = []
    for p in parts:
        v, rp = os.path.join(p, "validation"), os.path.join(p, os.environ.get("REPREDICT_DIR", "repredict"))
        # today's sim (matrix.sh repredict) where it ran, else validate-sim's own sim run
        repredicted = first_existing(os.path.join(rp, "records.jsonl.gz"), os.path.join(rp, "records.jsonl"))
        out_.append((first_existing(os.path.join(v, "records_real.jsonl.gz"), os.path.join(v, "records_real.jsonl")),
                     repredicted or first_existing(os.path.join(v, "records_sim.jsonl.gz"), os.path.join(v, "records_sim.jsonl")),
                     os.path.join(v, "validation.json"), not repredicted,
                     arena_slots(os.path.join(p, "scenario-as-run.yaml"), os.path.join(p, "profile.json")),
                     calibration_label(p)))
    return out_


def calibration_label(p):
    """None without a calibration run (no profile-grid.json beside profile.json), else "N at L%": the calibration
    run's requests and its rate over the grid's capacity, read from cell.txt's command and capacity-grid/."""
    if not os.path.exists(os.path.join(p, "profile-grid.json")):
        return None
    n, rate, cap = None, None, None
    try:
        for line in open(os.path.join(p, "cell.txt")):
            if " run " in line and "/calibration" in line:
                m = re.search(r"workload\.n_requests=(\d+)", line)
                r = re.search(r"workload\.rates=\[([0-9.]+)\]", line)
                n, rate = (int(m.group(1)) if m else None), (float(r.group(1)) if r else None)
        cap = json.load(open(os.path.join(p, "capacity-grid", "capacity.json")))["strategies"][0]["capacity_rps"]
    except (OSError, ValueError, KeyError, IndexError):
        pass
    if n is None or rate is None or not cap:
        return "?"
    return f"{n} at {round(100 * rate / cap)}%"


def latest_by_load(rows):
    """One row a load, sorted by load: a one-load call's row (CELL/load-L/, read after the cell's
    own folder) replaces an earlier call's row at the same load."""
    latest = {}
    for r in rows:
        latest[round(r["load"], 6)] = r
    return [latest[k] for k in sorted(latest)]


def cell_rows(c, out):
    """(rows, note): rows of measured loads, or a note why the cell has none."""
    rows = []
    for real_path, sim_path, vpath, steps_known, slots, calibrated in run_folders(c, out):
        if not (real_path and sim_path and os.path.exists(vpath)):
            continue
        vj = json.load(open(vpath))
        reals, sims = by_run(read_records(real_path)), by_run(read_records(sim_path))
        for i, run in enumerate(sorted(vj["runs"], key=lambda r: r["rate"])):
            if i >= len(reals) or i >= len(sims):
                break
            real, sim = reals[i], sims[i]
            check_same_plan(f"{c['cell']} at {run['load']:.0%}", real, sim)
            fr, fs, nz = figures(real), figures(sim), noise(real)
            check_against(c["cell"], run["load"], fr, run["figures"], "real")
            if steps_known:  # validate-sim's own sim run: the same records
                check_against(c["cell"], run["load"], fs, run["figures"], "sim")
            pre = run.get("preemptions", {})
            rows.append({"load": run["load"], "rate": run["rate"], "n": len(real),
                         "errors": {f: (fs[f] - fr[f]) / fr[f] for f in FIGURES}, "noise": nz,
                         "real": fr, "sim": fs,
                         "attainment": (attainment(real, vj["slo"]), attainment(sim, vj["slo"])),
                         "steps": run.get("steps", {}).get("total_error", float("nan")) if steps_known else float("nan"),
                         "preemptions": (pre.get("real"), sum(r.get("preemptions", 0) for r in sim)),
                         "kv_peak": (kv_peak(real)[0] / slots, kv_peak(sim)[0] / slots) if slots else (None, None),
                         "commit": vj.get("environment", {}).get("commit", "?"), "calibrated": calibrated})
    rows = latest_by_load(rows)
    if len(rows) >= 2:
        return rows, ""
    d = os.path.join(out, c["cell"])
    skipped = [os.path.join(r, f) for r, _, fs in os.walk(d) for f in fs if f == "skipped.txt"] if os.path.isdir(d) else []
    if skipped:
        return rows, "; ".join(open(p).read().strip() for p in sorted(skipped))
    return rows, f"{len(rows)} of 2 loads measured" if rows else "not run yet"


def pct(x, signed=True):
    return "–" if x is None or not math.isfinite(x) else (f"{x * 100:+.1f}%" if signed else f"{x * 100:.1f}%")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="matrix.sh's OUT folder (one folder per cell)")
    ap.add_argument("--md", help="write the table here (default: print it)")
    ap.add_argument("--cells", default=os.path.join(HERE, "matrix-cells.tsv"))
    a = ap.parse_args()
    cells = load_cells(a.cells)
    lines = ["# Sim validation matrix", "",
             "Generated by `results/sim-validation/matrix_summarize.py` from the cells of "
             "`matrix-cells.tsv` (run by `matrix.sh`). Error = (sim − real) / real; beside each, ± the real "
             "figure's sampling noise (bootstrap 95% half-width over the run's requests, 200 resamples). "
             "Targets: p50s within 5%, p99s and throughput within 10%; **bold** = misses it. "
             "held out = kept out of any tuning (fixed before any error was seen). steps = Σ predicted / Σ "
             "measured − 1 over the real run's steps (validate-sim; – for re-predicted cells: the h100 cells and any "
             "h200 cell with a repredict/ folder, where today's sim ran the real runs' plans from their call's profile). "
             "KV peak = the most K/V tokens the admitted requests held at once, rebuilt alike from each run's records "
             "(a preempted request counted as holding on), over the arena's token slots: how near each run came to "
             "the point where the engine preempts (the arena full, in blocks). profile = what the sim priced from: the "
             "cell's grid alone, or the grid and a calibration run (matrix.sh CALIBRATE=1: N requests of the cell "
             "with another seed at L% of the grid's capacity, folded in by `servelab calibrate`; the loads are then "
             "fractions of the calibrated capacity).", "",
             "| cell | GPU | model | arrival | shape | strategy | held out | load | rate (req/s) | requests | profile | steps "
             "| TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | throughput | SLO attainment real / sim "
             "| preemptions real / sim | KV peak real / sim | pass |",
             "|" + "---|" * 21]
    missing, n_pass, n_rows = [], 0, 0
    summary = []
    for c in cells:
        rows, note = cell_rows(c, a.out)
        if note:
            missing.append((c, note))
        for r in rows:
            ok = all(abs(r["errors"][f]) <= TARGET[f] for f in FIGURES)
            n_pass += ok
            n_rows += 1
            cellf = []
            for f in FIGURES:
                e = r["errors"][f]
                s = f"{pct(e)} ±{pct(r['noise'][f], False)}"
                cellf.append(f"**{s}**" if abs(e) > TARGET[f] else s)
            pre = r["preemptions"]
            lines.append(f"| {c['cell']} | {c['gpu'].upper()} | {c['model']} | {c['arrival']} | {c['shape']} | "
                         f"{c['strategy']} | {c['held_out']} | {r['load']:.0%} | {r['rate']:.4g} | {r['n']} | "
                         f"{'grid + calibration (' + r['calibrated'] + ')' if r['calibrated'] else 'grid'} | "
                         f"{pct(r['steps'])} | " + " | ".join(cellf) +
                         f" | {pct(r['attainment'][0], False)} / {pct(r['attainment'][1], False)}"
                         f" | {pre[0] if pre[0] is not None else '–'} / {pre[1]}"
                         f" | {pct(r['kv_peak'][0], False)} / {pct(r['kv_peak'][1], False)} | {'pass' if ok else 'FAIL'} |")
            summary.append({"cell": c["cell"], "load": r["load"], "rate": r["rate"], "n_requests": r["n"],
                            "held_out": c["held_out"] == "yes", "calibrated": r["calibrated"], "pass": ok, "steps_error": r["steps"],
                            "errors": r["errors"], "noise": r["noise"], "real": r["real"], "sim": r["sim"],
                            "preemptions": {"real": pre[0], "sim": pre[1]},
                            "kv_peak": {"real": r["kv_peak"][0], "sim": r["kv_peak"][1]},
                            "slo_attainment": {"real": r["attainment"][0], "sim": r["attainment"][1]}, "real_commit": r["commit"]})
    lines += ["", f"{n_pass} of {n_rows} cell × load rows meet every target."]
    if missing:
        lines += ["", "Cells without both loads measured:", ""]
        lines += [f"- `{c['cell']}` ({c['gpu'].upper()}, {c['model']}, {c['arrival']}, {c['shape']}, {c['strategy']}, "
                  f"held out: {c['held_out']}): {note}" for c, note in missing]
    lines += ["", "Coverage (cells with both loads measured / cells planned, per factor level):", ""]
    measured = {c["cell"] for c in cells} - {c["cell"] for c, note in missing}
    for factor in ["gpu", "model", "arrival", "shape", "strategy", "held_out"]:
        levels = sorted({c[factor] for c in cells})
        parts = [f"{lv} {sum(c[factor] == lv and c['cell'] in measured for c in cells)}/"
                 f"{sum(c[factor] == lv for c in cells)}" for lv in levels]
        lines.append(f"- {factor}: " + ", ".join(parts))
    text = "\n".join(lines) + "\n"
    if a.md:
        with open(a.md, "w") as f:
            f.write(text)
        with open(os.path.splitext(a.md)[0] + ".json", "w") as f:
            json.dump({"schema": "servelab.sim-matrix/1", "rows": summary}, f, indent=1)
            f.write("\n")
        print(f"wrote {a.md}: {n_pass} of {n_rows} rows pass; {len(missing)} cells incomplete")
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
