#!/usr/bin/env python3
"""The headline figures (TPOT p50, ITL p50, output tok/s) of sim runs against real ones given as a
JSON of figures, for real runs whose summary.json did not come back (gpu-llama2-7b-spec-grid/:
real-headline.json). Usage: headline_compare.py REAL_JSON FOLDER [SIM] > compare-headline.md, with the
sim runs in FOLDER/SIM-LOAD/summary.json for each LOAD of REAL_JSON (SIM: sim, or sim-spread)."""
import json
import sys


def main(real_json, folder, sim_dir="sim"):
    real = json.load(open(real_json))
    print("| load | run | figure | real | sim | error |")
    print("|---|---|---|---:|---:|---:|")
    for load, runs in real.items():
        if not isinstance(runs, dict) or load == "source":
            continue
        sim = {r["label"]: r["metrics"] for r in json.load(open(f"{folder}/{sim_dir}-{load}/summary.json"))["runs"]}
        for label, fig in runs.items():
            m = sim[label]
            for name, key, value in (("TPOT p50 (ms)", "tpot_p50_ms", m["tpot_ms"]["p50"]),
                                     ("ITL p50 (ms)", "itl_p50_ms", m["itl_ms"]["p50"]),
                                     ("output tok/s", "output_tok_s", m["output_throughput_tok_s"])):
                r = fig[key]
                print(f"| {load} | {label} | {name} | {r:.3f} | {value:.3f} | {(value - r) / r * 100:+.1f}% |")


if __name__ == "__main__":
    main(*sys.argv[1:4])
