#!/usr/bin/env python3
"""Joins one gpu-check run's paged decode attention rows into results/gpu/benchmarks.json.

  python3 bench/kernels/decode_rows.py RUN_DIR results/gpu/benchmarks.json [--default-from VARIANT --where CUT_WORD]

RUN_DIR holds the run's benchmarks.json, kernel_bench.json and peers.json (scripts/gpu-check.sh).
The rows paged_decode_attn, paged_decode_attn_vs_copy, paged_decode_attn_invariant,
paged_decode_attn_shuffled and sdpa_decode_attn of the run replace those of the same name and base
shape ("b1 ctx4096 gqa4", "... split512") in the target (rows the target lacks are added at its
end); the others stay. Since the seventh pass the default rows read the engine's own layout (their
shape says "engine blocks: PagedKvManager after a seeded churn") and paged_decode_attn_shuffled
is the same shape on the shuffled 16-slot table, against the same SDPA row.

--default-from VARIANT --where CUT_WORD: where the run's default configuration shows CUT_WORD in
its cut (e.g. "ring": a default the final code no longer has), take paged_decode_attn and
paged_decode_attn_vs_copy from the kernel_bench column paged_decode_attn_VARIANT of the same run
instead (the final code's configuration, measured in the same binary), and leave the target's
paged_decode_attn_invariant row of that shape alone when its cut shows CUT_WORD too.
--default-from VARIANT --for-shapes "b8 ctx1024 gqa4;...": the same, on the listed base shapes
(where the final code's default is a rule change measured as that variant's column).
Prints the rows written.
"""
import argparse
import json
import os


def base_of(name, shape):
    s = shape.split(" (")[0]
    if name == "sdpa_decode_attn":
        s = " ".join(s.split()[:3])  # drop the backend
    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("target")
    ap.add_argument("--default-from")
    ap.add_argument("--where")
    ap.add_argument("--for-shapes", help="';'-separated base shapes whose default comes from --default-from")
    a = ap.parse_args()
    for_shapes = {x.strip() for x in (a.for_shapes or "").split(";") if x.strip()}
    if (a.where or for_shapes) and not a.default_from:
        ap.error("--where / --for-shapes need --default-from")
    run = json.load(open(os.path.join(a.run_dir, "benchmarks.json")))
    kb = json.load(open(os.path.join(a.run_dir, "kernel_bench.json")))
    copy = next(r["value"] for r in kb if r["name"] == "d2d_copy")
    sdpa = {base_of(r["name"], r["shape"]): r["value"] for r in run if r["name"] == "sdpa_decode_attn"}
    variant = {}
    if a.default_from:
        for r in kb:
            if r["name"] == "paged_decode_attn_" + a.default_from:
                variant[r["shape"].split(" (")[0]] = r
    wanted = ("paged_decode_attn", "paged_decode_attn_vs_copy", "paged_decode_attn_invariant", "paged_decode_attn_shuffled",
              "sdpa_decode_attn")
    new = []
    for r in run:
        if r["name"] not in wanted:
            continue
        cut = r["shape"].split(" (")[1].split(")")[0] if " (" in r["shape"] else ""
        base = base_of(r["name"], r["shape"])
        ours = r["name"] in ("paged_decode_attn", "paged_decode_attn_vs_copy", "paged_decode_attn_invariant")
        if ours and ((a.where and a.where in cut.split()) or base in for_shapes):
            if r["name"] == "paged_decode_attn_invariant":
                continue  # not measured in the final configuration: the target keeps its row
            v = variant[base]
            r = dict(r)
            r["value"] = round(v["value"], 2)
            vs = v["shape"]  # "base (cut)[; layout]" -> "base (cut) hd128 block16[; layout]"
            r["shape"] = vs[:vs.find(")") + 1] + " hd128 block16" + vs[vs.find(")") + 1:]
            if r["name"] == "paged_decode_attn":
                r["ratio"] = round(v["value"] / sdpa[base], 3)
            else:
                r["ratio"] = round(v["value"] / copy, 3)
        new.append(r)
    by_key = {(r["name"], base_of(r["name"], r["shape"])): r for r in new}
    target = json.load(open(a.target))
    out, used = [], set()
    for r in target:  # in place, so the file's order (and other writers' rows) stay put
        k = (r["name"], base_of(r["name"], r["shape"]))
        out.append(by_key.get(k, r))
        used.add(k)
    out += [r for k, r in by_key.items() if k not in used]
    json.dump(out, open(a.target, "w"), indent=2)
    open(a.target, "a").write("\n")
    for r in new:
        if r["name"] in ("paged_decode_attn", "paged_decode_attn_vs_copy", "paged_decode_attn_shuffled"):
            print(f"{r['name']:<26} {r['shape']:<52} {r['value']:8.1f} {r['ratio']:.3f} {r['peer_or_ceiling']}")
    print(f"{len(new)} rows from {a.run_dir} into {a.target} ({len(out)} rows)")


if __name__ == "__main__":
    main()
