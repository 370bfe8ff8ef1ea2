#!/usr/bin/env python3
"""Sim against real, run by run: two `servelab run` folders of the same scenario (the real backend's
and the sim's), each run's TTFT and TPOT p50 / p99 and output throughput, error = (sim - real) / real,
marked where it misses issue 28's targets (p50s within 5%, p99s and throughput within 10%).
Usage: run_compare.py REAL_DIR SIM_DIR [STRATEGY=SIM_DIR ...] > compare.md
A STRATEGY=SIM_DIR argument takes that strategy's runs from its own sim folder (e.g. a sim run with
the KV arena the real engine gave that strategy)."""
import json
import sys

FIGURES = (("TTFT p50", "ttft_ms", "p50", 0.05), ("TTFT p99", "ttft_ms", "p99", 0.10),
           ("TPOT p50", "tpot_ms", "p50", 0.05), ("TPOT p99", "tpot_ms", "p99", 0.10),
           ("output tok/s", "output_throughput_tok_s", None, 0.10))


def runs(folder):
    return {r["label"]: r["metrics"] for r in json.load(open(f"{folder}/summary.json"))["runs"]}


def value(metrics, key, pct):
    v = metrics.get(key)
    if isinstance(v, dict):
        v = v.get(pct)
    return v if isinstance(v, (int, float)) else None


def main(real_dir, sim_dir, per_strategy=()):
    real, sim = runs(real_dir), runs(sim_dir)
    for arg in per_strategy:
        strategy, folder = arg.split("=", 1)
        sim.update({k: v for k, v in runs(folder).items() if k.split("@")[0] == strategy})
    print("| run | " + " | ".join(name for name, *_ in FIGURES) + " |")
    print("|---|" + "---:|" * len(FIGURES))
    for label, r in real.items():
        if label not in sim:
            print(f"| {label} | " + " | ".join("no sim run" for _ in FIGURES) + " |")
            continue
        cells = []
        for _, key, pct, bound in FIGURES:
            a, b = value(r, key, pct), value(sim[label], key, pct)
            if a is None or b is None or a == 0:
                cells.append("–")
                continue
            err = (b - a) / a
            text = f"{err * 100:+.1f}% ({a:.4g} → {b:.4g})"
            cells.append(f"**{text}**" if abs(err) > bound else text)
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    if len(sys.argv) < 3 or any("=" not in a for a in sys.argv[3:]):
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
