#!/usr/bin/env python3
"""The KV arena each strategy of a real `servelab run` folder got, in the bytes a sim run with the
same model and tensor parallelism must be given (`engine.kv_cache_bytes`, per GPU) to hold the same
number of KV tokens. From runs.json's config.kv_cache_bytes where the run recorded it; else from the
strategy's first step's KV capacity (steps.jsonl, tokens) times the bytes a token takes on one rank,
from the profile's model (layers x KV heads x head_dim x 2 (K, V) x kv_dtype_bytes / tensor_parallel).
Usage: run_kv_bytes.py RUN_DIR PROFILE_JSON   prints "STRATEGY BYTES" per strategy."""
import json
import sys


def main(run_dir, profile_path):
    runs = json.load(open(f"{run_dir}/runs.json"))["runs"]
    out = {}
    for r in runs:
        if r["strategy"] not in out and "kv_cache_bytes" in r.get("config", {}):
            out[r["strategy"]] = int(r["config"]["kv_cache_bytes"])
    if len(out) < len({r["strategy"] for r in runs}):
        p = json.load(open(profile_path))
        m = p["model"]
        per_token = m["n_layers"] * m["n_kv_heads"] * m["head_dim"] * 2 * p["kv_dtype_bytes"] // p.get("tensor_parallel", 1)
        with open(f"{run_dir}/steps.jsonl") as f:
            for line in f:
                s = json.loads(line)
                strategy = s["run"].split("@")[0]
                if strategy not in out:
                    out[strategy] = s["kv"]["capacity"] * per_token
    for strategy, b in out.items():
        print(strategy, b)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
