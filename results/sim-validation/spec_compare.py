#!/usr/bin/env python3
"""Speculative decoding, sim vs real: per run of two `servelab run` folders (same scenario), the
TPOT p50, ITL p50, output throughput, acceptance, and the mean time of verification steps (every
entry verifying drafts, no prefill rows; drafting included, as the engine stamps it) and of plain
decode steps (mean and median: on a loaded machine a few descheduled steps move the mean), with error = (sim - real) / real. Usage: spec_compare.py REAL_DIR SIM_DIR > compare.md"""
import gzip
import json
import os
import sys


def load(folder):
    summary = json.load(open(f"{folder}/summary.json"))
    steps = {}
    path = f"{folder}/steps.jsonl"
    lines = open(path) if os.path.exists(path) else gzip.open(path + ".gz", "rt")  # committed runs keep it gzipped
    for line in lines:
        s = json.loads(line)
        steps.setdefault(s["run"], []).append(s)
    return {r["label"]: r for r in summary["runs"]}, steps


def step_means(steps):
    verify, draft, plain = [], [], []
    for s in steps:
        sd = s.get("spec_decode")
        if sd and sd["num_drafts"] == s["batch_size"] and s["n_tokens"] == sd["num_drafts"] + sd["num_draft_tokens"]:
            verify.append(s["duration_s"])
            draft.append(sd.get("draft_s", 0.0))
        elif not sd and s["n_tokens"] == s["batch_size"]:
            plain.append(s["duration_s"])
    mean = lambda xs: sum(xs) / len(xs) * 1e3 if xs else float("nan")
    median = lambda xs: sorted(xs)[len(xs) // 2] * 1e3 if xs else float("nan")
    return (mean(verify), mean(draft), len(verify), mean(plain), len(plain), median(verify), median(draft),
            median(plain))


def step_class(s):
    """verify: every entry verifies drafts; verify+other: verification beside prefill or plain
    decode entries; decode: one row a sequence, no drafts; prefill/mixed: the rest."""
    sd = s.get("spec_decode")
    if sd and sd["num_drafts"] > 0:
        pure = sd["num_drafts"] == s["batch_size"] and s["n_tokens"] == sd["num_drafts"] + sd["num_draft_tokens"]
        return "verify" if pure else "verify+other"
    return "decode" if s["n_tokens"] == s["batch_size"] else "prefill/mixed"


def class_rows(real_steps, sim_steps):
    """Per step class: (class, figure, real mean ms, sim mean ms, real count, sim count); a
    verification's time split into the target's part (step minus drafting) and drafting."""
    rows = []
    for c in ("decode", "prefill/mixed", "verify", "verify+other"):
        r = [s for s in real_steps if step_class(s) == c]
        m = [s for s in sim_steps if step_class(s) == c]
        if not r and not m:
            continue
        mean = lambda xs, f: sum(f(x) for x in xs) / len(xs) * 1e3 if xs else float("nan")
        draft = lambda x: (x.get("spec_decode") or {}).get("draft_s", 0.0)
        rows.append((c, "step", mean(r, lambda x: x["duration_s"]), mean(m, lambda x: x["duration_s"]), len(r), len(m)))
        if c.startswith("verify"):
            rows.append((c, "target part", mean(r, lambda x: x["duration_s"] - draft(x)),
                         mean(m, lambda x: x["duration_s"] - draft(x)), len(r), len(m)))
            rows.append((c, "drafting", mean(r, draft), mean(m, draft), len(r), len(m)))
    return rows


def err(sim, real):
    if real != real or sim != sim or real == 0:
        return "–"
    return f"{(sim - real) / real * 100:+.1f}%"


def main(real_dir, sim_dir):
    real_runs, real_steps = load(real_dir)
    sim_runs, sim_steps = load(sim_dir)
    print("| run | figure | real | sim | error |")
    print("|---|---|---:|---:|---:|")
    for label, r in real_runs.items():
        s = sim_runs.get(label)
        if not s:
            continue
        rm, sm = r["metrics"], s["metrics"]
        rows = [("TPOT p50 (ms)", rm["tpot_ms"]["p50"], sm["tpot_ms"]["p50"]),
                ("ITL p50 (ms)", rm["itl_ms"]["p50"], sm["itl_ms"]["p50"]),
                ("output tok/s", rm["output_throughput_tok_s"], sm["output_throughput_tok_s"])]
        rv, rd, rn, rp, rpn, rvm, rdm, rpm = step_means(real_steps.get(label, []))
        sv, sd_, sn, sp, spn, svm, sdm, spm = step_means(sim_steps.get(label, []))
        if rn or sn:
            rows.append((f"verification step, mean ms (real {rn}, sim {sn} steps)", rv, sv))
            rows.append(("verification step, median ms", rvm, svm))
            rows.append(("  of which drafting, mean ms", rd, sd_))
            rows.append(("  of which drafting, median ms", rdm, sdm))
        if rpn or spn:
            rows.append((f"plain decode step, mean ms (real {rpn}, sim {spn} steps)", rp, sp))
            rows.append(("plain decode step, median ms", rpm, spm))
        rsd, ssd = rm.get("spec_decode"), sm.get("spec_decode")
        if rsd and ssd:
            rows.append(("mean acceptance length", rsd["mean_acceptance_length"], ssd["mean_acceptance_length"]))
        for name, a, b in rows:
            print(f"| {label} | {name} | {a:.3f} | {b:.3f} | {err(b, a)} |")
    print()
    print("Per step class (mean ms; verification split into the target's part and drafting):")
    print()
    print("| run | class | figure | steps (real / sim) | real | sim | error |")
    print("|---|---|---|---:|---:|---:|---:|")
    for label in real_runs:
        if label not in sim_runs:
            continue
        for c, name, a, b, n_r, n_s in class_rows(real_steps.get(label, []), sim_steps.get(label, [])):
            print(f"| {label} | {c} | {name} | {n_r} / {n_s} | {a:.3f} | {b:.3f} | {err(b, a)} |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
