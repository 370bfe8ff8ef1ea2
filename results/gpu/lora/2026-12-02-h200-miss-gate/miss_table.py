#!/usr/bin/env python3
"""The adapter miss's cost per run of a `servelab run` folder (records.jsonl, steps.jsonl,
summary.json): TTFT p50 / p90 / p99 and TPOT p50 from the records, every token gap's p99 (ITL),
the steps that took over 20 ms, and the steps with an adapter load (their count, p50 and total
from the summary's lora_loads). Prints a Markdown table.
    python3 miss_table.py RUN_FOLDER
"""
import json
import sys


def q(sorted_values, p):
    return sorted_values[min(len(sorted_values) - 1, int(p * len(sorted_values)))] if sorted_values else float("nan")


def main(folder):
    records, steps = {}, {}
    with open(f"{folder}/records.jsonl") as f:
        for line in f:
            r = json.loads(line)
            records.setdefault(r["run"], []).append(r)
    with open(f"{folder}/steps.jsonl") as f:
        for line in f:
            s = json.loads(line)
            steps.setdefault(s["run"], []).append(s["duration_s"])
    with open(f"{folder}/summary.json") as f:
        loads = {r["label"]: r.get("lora_loads") for r in json.load(f)["runs"]}
    print("| run | TTFT p50 / p90 / p99 (ms) | TPOT p50 (ms) | ITL p99 (ms) | steps > 20 ms | steps with a load: n, p50 (ms), total (s) |")
    print("|---|---|---:|---:|---:|---|")
    for run, rs in records.items():
        ok = [r for r in rs if r["status"] == "ok"]
        ttft = sorted((r["first_token_s"] - r["arrival_s"]) * 1e3 for r in ok)
        tpot = sorted((r["end_s"] - r["first_token_s"]) / (r["output_tokens"] - 1) * 1e3 for r in ok if r["output_tokens"] > 1)
        gaps = sorted((b - a) * 1e3 for r in ok for a, b in zip(r["token_times_s"], r["token_times_s"][1:]))
        slow = sum(1 for d in steps.get(run, []) if d > 0.020)
        ld = loads.get(run)
        load = f"{ld['n_steps']}, {ld['step_p50_ms']:.1f}, {ld['step_s']:.2f}" if ld else "-"
        print(f"| {run} | {q(ttft, .5):.1f} / {q(ttft, .9):.1f} / {q(ttft, .99):.1f} | {q(tpot, .5):.2f} | {q(gaps, .99):.1f} | {slow} | {load} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
