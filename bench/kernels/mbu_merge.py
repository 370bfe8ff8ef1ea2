#!/usr/bin/env python3
"""Joins an `engine_bench --mbu` result (mbu-check.sh's mbu.json, medians over rounds) into
results/gpu/benchmarks.json: its decode_step_mbu, decode_step_tokens and decode_step_mbu_before
rows replace the rows of the same name and point (batch, context); other points (e.g. batch 256)
stay. Each replaced row's peer_or_ceiling names the copy of its own run.

  python3 bench/kernels/mbu_merge.py MBU_JSON BENCHMARKS_JSON OUT_JSON [--after SPEC]

--after SPEC builds the decode_step_mbu / decode_step_tokens rows from decode_step_mbu_variant rows
instead of the "after" variant's, SPEC = "VARIANT=POINT,POINT;VARIANT=POINT,..." with POINT as
"b1 ctx128": for a run whose variants measured the configuration the code now defaults to under
another name (each row says which variant it was).
"""
import json
import re
import sys

NAMES = ("decode_step_mbu", "decode_step_tokens", "decode_step_mbu_before")


def point(row):
    m = re.match(r"(b\d+ ctx\d+)", row["shape"])
    return m.group(1) if m else None


def from_variants(rows, spec):
    out = []
    for part in spec.split(";"):
        variant, points = part.split("=")
        for p in points.split(","):
            r = next((r for r in rows if r["name"] == "decode_step_mbu_variant" and point(r) == p.strip() and
                      f"[{variant.strip()}]" in r["shape"]), None)
            if r is None:
                sys.exit(f"no decode_step_mbu_variant row for {variant} at {p}")
            step_ms = float(re.search(r"step ([0-9.]+) ms", r["shape"]).group(1))
            batch = int(re.match(r"b(\d+)", p.strip()).group(1))
            shape = r["shape"].replace(f" [{variant.strip()}]", "") + f" [measured as variant {variant.strip()}]"
            out.append(dict(r, name="decode_step_mbu", shape=shape))
            out.append(dict(r, name="decode_step_tokens", value=batch / (step_ms * 1e-3), unit="tok/s",
                            peer_or_ceiling="-", ratio=None,
                            shape=f"{p.strip()} step {step_ms:.3f} ms [measured as variant {variant.strip()}]"))
    return out


def main(argv):
    if len(argv) not in (3, 5) or (len(argv) == 5 and argv[3] != "--after"):
        sys.exit(__doc__)
    mbu_path, bench_path, out_path = argv[:3]
    new = json.load(open(mbu_path))
    old = json.load(open(bench_path))
    copy = next((r["value"] for r in new if r["name"] == "engine_d2d_copy"), None)
    if len(argv) == 5:
        keep = [r for r in new if r["name"] == "decode_step_mbu_before" and r["value"] is not None]
        keep += from_variants(new, argv[4])
    else:
        keep = [r for r in new if r["name"] in NAMES and r["value"] is not None]
    for r in keep:
        if r["ratio"] is not None and copy:  # against the run's median copy (each round measured its own)
            r["ratio"] = r["value"] / copy
            r["peer_or_ceiling"] = f"engine_d2d_copy of the same run (median {copy:.0f} GB/s)"
    replaced = {(r["name"], point(r)) for r in keep}
    merged = [r for r in old if (r["name"], point(r)) not in replaced] + keep
    json.dump(merged, open(out_path, "w"), indent=2)
    print(f"{len(old)} rows, {len(replaced)} replaced or added, {len(merged)} now")


if __name__ == "__main__":
    main(sys.argv[1:])
