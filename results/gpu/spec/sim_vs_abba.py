#!/usr/bin/env python3
"""The sim against an ABBA run on the GPU: TPOT and TTFT p50, output tok/s, the plain decode step's
median, the probes (count, mean ms, drafting ms) and the steps that drafted for all (count, mean
ms, drafting mean and max ms) of plain and self-k4, the real figure the mean of
the ABBA pair (plain-a / plain-d, self-k4-b / self-k4-c), with the sim's error and each side's
self / plain ratio.

  python3 results/gpu/spec/sim_vs_abba.py REAL_ABBA_FOLDER SIM_FOLDER

REAL_ABBA_FOLDER: scripts/gpu-spec-check.sh's abba-NAME (results/gpu/spec/abba.yaml: summary.json and
steps.jsonl); SIM_FOLDER: the same load on the sim (results/sim-validation/spec-probe.sh's
wrong-usersN or right-usersN: strategies plain and self-k4, steps.jsonl.gz).
"""
import json
import os
import statistics
import sys


from spec_ratio import steps_of  # the same folder: a run's steps.jsonl (or .gz)


def side(label):
    return "plain" if label.startswith("plain") else "self-k4"


def figures(folder):
    """{side: {figure: [values, one per run]}}"""
    out = {}
    for r in json.load(open(os.path.join(folder, "summary.json")))["runs"]:
        m = r["metrics"]
        d = out.setdefault(side(r["label"].split("@")[0]), {})
        d.setdefault("TPOT p50 ms", []).append(m["tpot_ms"]["p50"])
        d.setdefault("TTFT p50 ms", []).append(m["ttft_ms"]["p50"])
        d.setdefault("output tok/s", []).append(m["output_throughput_tok_s"])
    per_run = {}
    for s in steps_of(folder):
        run = s["run"]
        sd = s.get("spec_decode") or {}
        d = per_run.setdefault(run, {"plain": [], "probe": [], "draft": [], "spec": [], "spec_draft": []})
        if sd.get("probe"):
            d["probe"].append(s["duration_s"] * 1e3)
            d["draft"].append(sd.get("draft_s", 0.0) * 1e3)
        elif sd.get("num_drafts"):
            d["spec"].append(s["duration_s"] * 1e3)
            d["spec_draft"].append(sd.get("draft_s", 0.0) * 1e3)
        elif s["n_tokens"] == s["batch_size"]:
            d["plain"].append(s["duration_s"] * 1e3)
    for run, d in per_run.items():
        f = out.setdefault(side(run.split("@")[0]), {})
        f.setdefault("plain step median ms", []).append(statistics.median(d["plain"]))
        if d["probe"]:
            f.setdefault("probes", []).append(len(d["probe"]))
            f.setdefault("probe step mean ms", []).append(statistics.mean(d["probe"]))
            f.setdefault("probe drafting mean ms", []).append(statistics.mean(d["draft"]))
        if d["spec"]:
            f.setdefault("drafting steps", []).append(len(d["spec"]))
            f.setdefault("drafting step mean ms", []).append(statistics.mean(d["spec"]))
            f.setdefault("their drafting mean ms", []).append(statistics.mean(d["spec_draft"]))
            f.setdefault("their drafting max ms", []).append(max(d["spec_draft"]))
    return {k: {n: statistics.mean(v) for n, v in d.items()} for k, d in out.items()}


def main(real_dir, sim_dir):
    real, sim = figures(real_dir), figures(sim_dir)
    print(f"real: {real_dir} (means of the ABBA pair); sim: {sim_dir}")
    print(f"{'side':<9}{'figure':<24}{'real':>10}{'sim':>10}{'sim error':>11}")
    for s in ("plain", "self-k4"):
        for name, r in real.get(s, {}).items():
            v = sim.get(s, {}).get(name)
            err = f"{100 * (v / r - 1):+.1f}%" if v is not None and r else "-"
            print(f"{s:<9}{name:<24}{r:>10.3f}{(v if v is not None else float('nan')):>10.3f}{err:>11}")
    for name in ("TPOT p50 ms", "output tok/s"):
        rr = real["self-k4"][name] / real["plain"][name]
        ss = sim["self-k4"][name] / sim["plain"][name]
        print(f"self / plain {name}: real {rr:.3f}x, sim {ss:.3f}x")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
