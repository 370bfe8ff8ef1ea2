#!/usr/bin/env python3
"""A profile without its spread decode points (profile --spread-decodes): the same call's uniform
grid, to re-predict with and without the sim's spread term from one set of measurements.

  python3 results/sim-validation/drop_spread.py IN.json OUT.json
"""
import json
import sys


def spread(s):
    n = s["n_seqs"]
    return (s["phase"] == "decode" and s["n_padding_tokens"] == 0 and n > 0 and s["n_tokens"] == n
            and s["max_context"] - s["sum_context"] / n > 0.5)


def main(src, dst):
    p = json.load(open(src))
    p["samples"] = [s for s in p["samples"] if not spread(s)]
    p["options"]["spread_decodes"] = False
    with open(dst, "w") as f:
        json.dump(p, f, indent=1)
    print(f"{dst}: {len(p['samples'])} samples")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
