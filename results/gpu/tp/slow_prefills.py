#!/usr/bin/env python3
"""Prefill-only steps (one sequence, several tokens) of a real run that took more than 20 ms longer
than the profile's one-prompt prefill points say for their length (linear between the points), per
run: what a steps.jsonl(.gz) shows of steps slowed by something their shape does not explain
(stdlib only).

  python3 results/gpu/tp/slow_prefills.py STEPS.jsonl[.gz] PROFILE.json
"""
import bisect, gzip, json, sys


def main():
    steps_path, profile_path = sys.argv[1], sys.argv[2]
    f = gzip.open(steps_path, "rt") if steps_path.endswith(".gz") else open(steps_path)
    steps = [json.loads(line) for line in f]
    prof = json.load(open(profile_path))
    pts = sorted((s["n_tokens"], s["step_s"]) for s in prof["samples"] if s["phase"] == "prefill" and s["n_seqs"] == 1)
    xs = [x for x, _ in pts]

    def price(n):
        i = min(max(bisect.bisect_left(xs, n), 1), len(xs) - 1)
        (x0, y0), (x1, y1) = pts[i - 1], pts[i]
        return y0 + (y1 - y0) * (n - x0) / (x1 - x0)

    total = slow = 0
    for run in sorted({s["run"] for s in steps}):
        pre = sorted((s for s in steps if s["run"] == run and s["batch_size"] == 1 and s["n_tokens"] > 1),
                     key=lambda s: s["start_s"])
        hits = [(s["n_tokens"], round((s["duration_s"] - price(s["n_tokens"])) * 1e3, 1)) for s in pre
                if s["duration_s"] > price(s["n_tokens"]) + 0.020]
        total += len(pre)
        slow += len(hits)
        print(f"{run:24s} {len(pre):3d} prefill steps, {len(hits)} slow (tokens, ms over the profile): {hits}")
    print(f"all runs: {slow} of {total} prefill-only steps over the profile by more than 20 ms")


if __name__ == "__main__":
    main()
