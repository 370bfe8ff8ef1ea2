#!/usr/bin/env python3
"""Decode steps of a real run against a profile's decode points, by CUDA graph bucket (stdlib only).

  python3 results/sim-validation/decode_buckets.py STEPS.jsonl[.gz] PROFILE.json [--run PREFIX]

For each graph bucket (the profile's decode_row_buckets: a decode of B sequences replays the graph
of the smallest bucket >= B) it prints the real run's decode steps (roofline class "decode":
count, median and quartiles of duration_s) beside the profile's unpadded decode points whose batch
falls in that bucket (their step_s, lowest and highest over the profiled contexts). A bucket where
the real median lies outside the profile's range is marked: the sim, fitted to those points,
cannot price it. --run keeps steps whose run label starts with PREFIX (e.g. continuous).
Used for docs/tensor-parallel.md's decode gap (llama3-70b TP=2 on 2 x H200).
"""
import argparse, bisect, gzip, json, statistics


def open_any(path):
    return gzip.open(path, "rt") if path.endswith(".gz") else open(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("steps")
    ap.add_argument("profile")
    ap.add_argument("--run", default="")
    a = ap.parse_args()
    prof = json.load(open(a.profile))
    buckets = prof.get("decode_row_buckets") or []
    if not buckets:
        raise SystemExit("the profile has no decode_row_buckets (written before profiles recorded them)")

    def bucket(b):
        i = bisect.bisect_left(buckets, b)
        return buckets[i] if i < len(buckets) else None  # past the last bucket: eager

    real, points = {}, {}
    with open_any(a.steps) as f:
        for line in f:
            s = json.loads(line)
            if s.get("roofline", {}).get("class") != "decode" or not s.get("run", "").startswith(a.run):
                continue
            real.setdefault(bucket(s["batch_size"]), []).append(s["duration_s"] * 1e3)
    for p in prof["samples"]:
        if p["phase"] == "decode" and p.get("n_padding_tokens", 0) == 0:
            points.setdefault(bucket(p["n_seqs"]), []).append(p["step_s"] * 1e3)
    print("| bucket | real steps | real p25 / p50 / p75 ms | profile points | profile min … max ms | real p50 − profile max |")
    print("|---:|---:|---|---:|---|---:|")
    for b in sorted(real, key=lambda x: (x is None, x or 0)):
        v = sorted(real[b])
        q = statistics.quantiles(v, n=4) if len(v) > 1 else [v[0]] * 3
        pts = points.get(b, [])
        rng = f"{min(pts):.2f} … {max(pts):.2f}" if pts else "–"
        gap = f"{q[1] - max(pts):+.2f}" + (" **outside**" if q[1] > max(pts) or q[1] < min(pts) else "") if pts else "–"
        print(f"| {b if b else 'eager'} | {len(v)} | {q[0]:.2f} / {q[1]:.2f} / {q[2]:.2f} | {len(pts)} | {rng} | {gap} |")


if __name__ == "__main__":
    main()
