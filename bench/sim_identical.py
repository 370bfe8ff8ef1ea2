#!/usr/bin/env python3
"""sim_identical: the simulator's results must not change when its host work gets faster.

Runs the same sim scenarios with two servelab binaries (an old build, e.g. main's, and a new
one) and compares what they wrote: records.jsonl, steps.jsonl and results.csv byte for byte,
summary.json / runs.json / capacity.json as JSON with the fields that describe the machine and
the wall clock left out (environment, *wall*). A steps.jsonl that differs only in
spec_decode.draft_s counts as identical, named in the output: that field is the wall time a real
proposer (n-gram lookup on the sim) took, and differs between two runs of one binary. Exit 0 when
every case is identical, 1 otherwise.

  bench/sim_identical.py OLD_SERVELAB NEW_SERVELAB [--out DIR] [--only NAME]

The cases cover the paths the engine loop takes on the sim: continuous batching with prefix
caching and paged KV, static/dynamic batching and naive KV (quickstart on the sim), recompute and
swap preemption (a small arena), n-gram speculative decoding, LoRA adapters, long contexts, the
prefix cache's hits (system-prompt groups; with sessions in a small arena that evicts), and
`servelab capacity` (bisection probes with repeats; with a small arena, with chunked prefill, and
the 20-point sweep: the probes' steps of plain decodes are made without a scheduler pass).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCEN = os.path.join(os.path.dirname(HERE), "scenarios")

# name: (subcommand, scenario, extra args)
CASES = {
    "quick": ("run", "quick.yaml", []),
    "quickstart-sim": ("run", "quickstart.yaml", ["--set", "backend.kind=sim", "--set", "workload.rates=[8,64]"]),
    "recompute": ("run", "quick.yaml", ["--set", "engine.kv_cache_mb=1500"]),
    "swap": ("run", "quick.yaml", ["--set", "engine.kv_cache_mb=1500", "--set", "strategies.0.preemption=swap"]),
    "ngram": ("run", "quick.yaml", ["--set", "engine.kv_cache_mb=1500", "--set", "strategies.0.speculative={method: ngram}"]),
    "capacity-run": ("run", "capacity.yaml", ["--set", "workload.rates=[30,44]"]),
    "chat-slo": ("run", "chat-slo.yaml", ["--set", "workload.rates=[4,16]"]),
    "lora-zipf": ("run", "lora-zipf.yaml", []),
    "long-context": ("run", "long-context.yaml", []),
    # Prefix-cache hits: two system-prompt groups; then a small arena (evictions decide which
    # prefixes stay cached, preemptions) with multi-turn sessions (a turn's prompt is the last's).
    "prefix-groups": ("run", "load-shapes.yaml", []),
    "prefix-evict": ("run", "load-shapes.yaml", ["--set", "engine.kv_cache_mb=1200",
                                                 "--set", "workload.sessions={turns: 3, think_time_s: 1}"]),
    "capacity": ("capacity", "capacity.yaml", []),
    # Capacity probes take steps of plain decodes without a scheduler pass (Engine::step_decodes):
    # a small arena (the queue held back, preemptions), chunked prefill, the 20-point sweep.
    "capacity-small": ("capacity", "capacity.yaml", ["--set", "capacity.gpu_memory_utilization=0.22"]),
    "capacity-chunked": ("capacity", "capacity.yaml", ["--set", "strategies.0.chunked_prefill=true"]),
    "capacity-sweep": ("capacity", "capacity-sweep.yaml", []),
}

BYTES = ["records.jsonl", "steps.jsonl", "results.csv"]
JSONS = ["summary.json", "runs.json", "capacity.json"]


def strip(o):
    """The JSON without machine and wall-clock fields."""
    if isinstance(o, dict):
        return {k: strip(v) for k, v in o.items() if k != "environment" and "wall" not in k}
    if isinstance(o, list):
        return [strip(v) for v in o]
    return o


def run(binary, case, out):
    sub, scen, extra = CASES[case]
    cmd = [binary, sub, os.path.join(SCEN, scen), "-o", out, "--quiet", "--no-plots", "--force"] + extra
    if sub == "capacity":
        cmd = [binary, sub, os.path.join(SCEN, scen), "-o", out, "--no-plots"] + extra
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode not in (0, 1):  # 1: a gate failed, still a result
        sys.exit(f"{case}: {' '.join(cmd)} exited {r.returncode}:\n{r.stdout[-2000:]}")


def steps_without_draft_wall(path):
    """steps.jsonl's steps with spec_decode.draft_s left out (a real proposer's wall seconds)."""
    steps = []
    for line in open(path):
        s = json.loads(line)
        if isinstance(s.get("spec_decode"), dict):
            s["spec_decode"].pop("draft_s", None)
        steps.append(s)
    return steps


def compare(case, a, b):
    problems, compared = [], 0
    for name in BYTES + JSONS:
        pa, pb = os.path.join(a, name), os.path.join(b, name)
        if not os.path.exists(pa) and not os.path.exists(pb):
            continue
        if os.path.exists(pa) != os.path.exists(pb):
            problems.append(f"{name}: only in {'old' if os.path.exists(pa) else 'new'}")
            continue
        compared += 1
        if name in BYTES:
            same = open(pa, "rb").read() == open(pb, "rb").read()
            if not same and name == "steps.jsonl" and steps_without_draft_wall(pa) == steps_without_draft_wall(pb):
                print(f"{case}: steps.jsonl identical but for spec_decode.draft_s (a real proposer's wall time)")
                same = True
        else:
            same = strip(json.load(open(pa))) == strip(json.load(open(pb)))
        if not same:
            problems.append(f"{name} differs")
    if compared == 0:
        problems.append("no output files to compare")
    return problems, compared


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--out", default="/tmp/sim_identical")
    ap.add_argument("--only", action="append", help="run only these cases (repeatable)")
    args = ap.parse_args()
    cases = args.only or list(CASES)
    failed = 0
    for case in cases:
        a, b = os.path.join(args.out, case, "old"), os.path.join(args.out, case, "new")
        for d in (a, b):
            shutil.rmtree(d, ignore_errors=True)
        run(os.path.abspath(args.old), case, a)
        run(os.path.abspath(args.new), case, b)
        problems, compared = compare(case, a, b)
        print(f"{case:16s} {'identical' if not problems else 'DIFFERENT'} ({compared} files)" +
              ("" if not problems else ": " + "; ".join(problems)))
        failed += bool(problems)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
