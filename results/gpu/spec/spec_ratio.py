#!/usr/bin/env python3
"""TPOT, TTFT and output tok/s of each speculative run against the plain run at the same load, with
the share of decode steps that carried drafts and the summed step time against plain.

  python3 results/gpu/spec/spec_ratio.py RUN_FOLDER [RUN_FOLDER ...]

RUN_FOLDER: a `servelab run` output (summary.json, steps.jsonl or steps.jsonl.gz) of a scenario with a
`plain` strategy beside speculative ones (scenarios/gpu-spec-llama2-7b.yaml). Steps with a prefill row
are counted apart: "drafted" is the share of the run's steps with drafts among its steps without
prefill rows (n_tokens == batch_size plus the step's draft tokens, a probe's included). "probed" is the
share of those steps that were probes of the measured rule (spec_decode.probe: drafts for a few
sequences, only the plain step's token kept).
"""
import gzip
import json
import os
import sys


def steps_of(folder):
    for name in ("steps.jsonl", "steps.jsonl.gz"):
        p = os.path.join(folder, name)
        if os.path.exists(p):
            with (gzip.open(p, "rt") if name.endswith(".gz") else open(p)) as f:
                for line in f:
                    yield json.loads(line)
            return


def main(folders):
    print(f"{'folder':<28}{'run':<16}{'TPOT p50':>10}{'TTFT p50':>10}{'out tok/s':>11}{'acc rate':>10}"
          f"{'drafted':>9}{'probed':>8}{'steps s':>9}{'TPOT/plain':>11}{'tok/s/plain':>12}{'steps/plain':>12}")
    for folder in folders:
        runs = json.load(open(os.path.join(folder, "summary.json")))["runs"]
        drafted, probed, total, summed = {}, {}, {}, {}
        for s in steps_of(folder):
            run = s["run"]
            summed[run] = summed.get(run, 0.0) + s["duration_s"]
            sd = s.get("spec_decode")
            sd = sd or {}
            probe = sd.get("probe") or {}
            if s["n_tokens"] != s["batch_size"] + sd.get("num_draft_tokens", 0) + probe.get("num_draft_tokens", 0):
                continue
            total[run] = total.get(run, 0) + 1
            drafted[run] = drafted.get(run, 0) + (1 if sd.get("num_drafts", 0) > 0 else 0)
            probed[run] = probed.get(run, 0) + (1 if probe.get("num_drafts", 0) > 0 else 0)
        plain = {}
        for r in runs:
            name, load = r["label"].split("@")[0], r["label"].split("@")[-1]
            if name == "plain":
                plain[load] = r
        for r in runs:
            name, load = r["label"].split("@")[0], r["label"].split("@")[-1]
            m = r["metrics"]
            sd = m.get("spec_decode") or {}
            p = plain.get(load)
            ratio = lambda key, sub=None: (
                f"{(m[key][sub] if sub else m[key]) / ((p['metrics'][key][sub]) if sub else p['metrics'][key]):.3f}x"
                if p else "")
            label = r["label"]
            share = drafted.get(label, 0) / total[label] if total.get(label) else 0.0
            pshare = probed.get(label, 0) / total[label] if total.get(label) else 0.0
            steps_ratio = f"{summed.get(label, 0) / summed[p['label']]:.3f}x" if p and summed.get(p["label"]) else ""
            print(f"{os.path.basename(folder.rstrip('/')):<28}{label:<16}{m['tpot_ms']['p50']:>10.3f}{m['ttft_ms']['p50']:>10.1f}"
                  f"{m['output_throughput_tok_s']:>11.1f}{sd.get('acceptance_rate', 0):>10.3f}{share:>9.3f}{pshare:>8.3f}"
                  f"{summed.get(label, 0):>9.2f}{ratio('tpot_ms', 'p50'):>11}{ratio('output_throughput_tok_s'):>12}{steps_ratio:>12}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
