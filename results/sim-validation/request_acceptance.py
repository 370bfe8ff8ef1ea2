#!/usr/bin/env python3
"""Per-request draft acceptance recovered from a real run's records (records.jsonl[.gz]).

A verification step hands a sequence its accepted drafts and one more token at one time, so a
request's token_times_s fall in chunks of equal times: a chunk of c tokens is c - 1 drafts
accepted. The drafts proposed each step follow the engine's adaptive-k rule
(engine/spec/adaptive.h: k starts at --k-max, +2 after a verification that accepted every draft,
-1 otherwise, within [1, k_max]; never more than the output room left less the bonus token), so
replaying it over the chunks gives each request's drafted and accepted counts per position, the
counters summary.json carries for the whole run. A one-token step is a draft rejected at position
0 or a step without drafts (the per-step rule turned them off); the reading with the fewest steps
without drafts that fits every later chunk is kept (in the H200 runs of 256 requests it finds 98 /
189 such steps where the summary's num_drafts says 170 / 275, and the summed per-position counts
are within 0.05% of the summary's).

Writes JSON for the sim (`sim_acceptance.requests`, engine/spec/sim_acceptance.h):
{"source": ..., "strategy": ..., "k_max": K, "requests": [{"id": i, "output_tokens": n, "drafted_per_pos": [...],
"tried_per_pos": [...], "accepted_per_pos": [...]}, ...]}: drafted[j] drafts longer than j,
tried[j] of them with drafts < j accepted (so draft j was verified), accepted[j] of those kept.

Usage: request_acceptance.py RECORDS --strategy LABEL --k-max K > FILE.json
"""
import argparse
import gzip
import json
import sys


def chunks(times):
    """Token counts of each step after the first token (the prefill's), in order."""
    out, prev = [], None
    for t in times[1:]:
        if t == prev:
            out[-1] += 1
        else:
            out.append(1)
            prev = t
    return out


def replay(sizes, k_max, n_output):
    """(drafted_per_pos, tried_per_pos, accepted_per_pos, no_draft_steps) of one request from its chunk sizes.

    A one-token chunk is a draft rejected at position 0 (k - 1 after it) or a step without drafts
    (k unchanged); a later chunk of c tokens needs k >= c - 1. Of the readings consistent with
    every chunk, the one with the fewest steps without drafts is kept (a search over k, 1..k_max,
    chunk by chunk)."""
    big = float("inf")
    # best[k] = (steps without drafts, path) of the readings reaching this chunk with k
    best = {k_max: (0, [])}
    generated = 1  # the prefill's token
    for c in sizes:
        room = n_output - generated - 1  # the bonus token must still fit (engine.cpp)
        a = c - 1
        nxt = {}
        def offer(k, cost, path):
            if cost < nxt.get(k, (big,))[0]:
                nxt[k] = (cost, path)
        for k, (cost, path) in best.items():
            n = min(k, room)
            if n < 1:
                if a == 0:
                    offer(k, cost, path + [0])
                continue
            if a <= n:  # a verification of n drafts
                offer(max(1, min(k_max, k + 2 if a >= n else k - 1)), cost, path + [n])
            if a == 0:  # or no drafts this step
                offer(k, cost + 1, path + [0])
        if not nxt:
            raise ValueError(f"a step of {c} tokens fits no adaptive-k reading")
        best = nxt
        generated += c
    cost, path = min(best.values(), key=lambda v: v[0])
    drafted, tried, accepted = [0] * k_max, [0] * k_max, [0] * k_max
    for c, n in zip(sizes, path):
        for j in range(n):
            drafted[j] += 1
        for j in range(min(c, n)):  # draft j is tried when drafts < j were accepted
            tried[j] += 1
        for j in range(min(c - 1, n)):
            accepted[j] += 1
    return drafted, tried, accepted, cost


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("records")
    ap.add_argument("--strategy", required=True, help="the run label's strategy (before '@')")
    ap.add_argument("--k-max", type=int, required=True, help="num_speculative_tokens")
    a = ap.parse_args()
    opener = gzip.open if a.records.endswith(".gz") else open
    reqs = []
    total_d, total_a, n_chunks, n_no_draft = [0] * a.k_max, [0] * a.k_max, 0, 0
    with opener(a.records, "rt") as f:
        for line in f:
            r = json.loads(line)
            if r["run"].split("@")[0] != a.strategy or r.get("status") != "ok":
                continue
            sizes = chunks(r["token_times_s"])
            d, tr, acc, nd = replay(sizes, a.k_max, r["output_tokens"])
            n_chunks += len(sizes)
            n_no_draft += nd
            reqs.append({"id": r["id"], "output_tokens": r["output_tokens"], "drafted_per_pos": d, "tried_per_pos": tr,
                         "accepted_per_pos": acc})
            total_d = [x + y for x, y in zip(total_d, d)]
            total_a = [x + y for x, y in zip(total_a, acc)]
    if not reqs:
        sys.exit(f"{a.records}: no finished requests of strategy {a.strategy}")
    reqs.sort(key=lambda q: q["id"])
    print(f"{len(reqs)} requests, {n_chunks} steps, {n_no_draft} read as without drafts; drafted per position {total_d}, accepted {total_a}",
          file=sys.stderr)
    json.dump({"source": a.records, "strategy": a.strategy, "k_max": a.k_max, "requests": reqs}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
