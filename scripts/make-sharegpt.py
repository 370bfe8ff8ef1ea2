#!/usr/bin/env python3
"""Writes a synthetic dataset in ShareGPT format, seeded, for benchmarking the dataset loader.

The layout matches ShareGPT_V3_unfiltered_cleaned_split.json (a JSON list, two-space indent, one
{"id", "conversations": [{"from", "value"}, ...]} per entry); the defaults match its size (about
94k conversations, about 650 MB). Texts are random words with the things real text has: escaped
newlines and quotes, backslashes, non-ASCII UTF-8 (accents, CJK, emoji). Some entries have one
turn or an empty turn, as in the real file (the loader skips those).

  python3 scripts/make-sharegpt.py --out /tmp/sharegpt.json               # ~650 MB
  python3 scripts/make-sharegpt.py --out /tmp/small.json --conversations 1000 --mb 7

Standard library only. Do not commit the output.
"""
import argparse
import json
import random
import sys

WORDS = (
    "the of and to in is you that it for on was with as have be at one are this but not what all "
    "were when we there can an your which their said if do will each about how up out them then "
    "she many some so these would other into has more her two like him see time could no make "
    "than first been its who now people my made over did down only way find use may water long "
    "little very after words called just where most know get through back much before go good "
    "new write our used me man too any day same right look think also around another came come "
    "work three word must because does part even place well such here take why things help put "
    "model token latency throughput batch kernel cache memory request server GPU tensor python "
    "function return value error install config build test deploy query answer explain example"
).split()
ODD = ["café", "naïve", "Größe", "东京", "你好世界", "데이터", "🙂", "🚀", "\"quoted\"", "back\\slash",
       "tab\there", "{brace}", "[bracket]", "line\nbreak", "code: `x = y[0]`", "\u00e9t\u00e9"]


def text(rng, n_bytes):
    """Random words totalling about n_bytes, with some paragraphs and odd characters."""
    out, size = [], 0
    while size < n_bytes:
        r = rng.random()
        if r < 0.02:
            w = rng.choice(ODD)
        elif r < 0.04:
            w = "\n\n"
        else:
            w = rng.choice(WORDS)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="file to write (e.g. under /tmp)")
    ap.add_argument("--conversations", type=int, default=94145, help="entries (default 94145, as ShareGPT_V3)")
    ap.add_argument("--mb", type=float, default=650.0, help="approximate size in MB (default 650)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.conversations < 1 or a.mb <= 0:
        sys.exit("--conversations must be >= 1 and --mb > 0")
    rng = random.Random(a.seed)
    mean_turns = 4.0
    # Text bytes per turn for the requested size; 1.06 calibrates the estimate of JSON overhead
    # (keys, indentation: ~150 bytes an entry, ~80 a turn) so the defaults give ~650 MB.
    per_turn = max(16.0, 1.06 * ((a.mb * 1e6 / a.conversations - 150) / mean_turns - 80))
    # Text is built from a pool of pieces (fast), cut at random offsets.
    pool = [text(rng, int(rng.expovariate(1 / per_turn)) + 8) for _ in range(4096)]
    written = 0
    with open(a.out, "w", encoding="utf-8", newline="\n") as f:
        f.write("[\n")
        for i in range(a.conversations):
            r = rng.random()
            n_turns = 1 if r < 0.03 else 0 if r < 0.04 else 2 * rng.randint(1, 3)
            turns = []
            for t in range(n_turns):
                piece = rng.choice(pool)
                start = rng.randrange(len(piece))
                value = "" if rng.random() < 0.005 else piece[start:] + piece[:start]
                turns.append({"from": "human" if t % 2 == 0 else "gpt", "value": value})
            entry = {"id": "%08x_%d" % (rng.getrandbits(32), i % 7), "conversations": turns}
            s = "  " + json.dumps(entry, indent=2, ensure_ascii=False).replace("\n", "\n  ")
            s += ",\n" if i + 1 < a.conversations else "\n"
            f.write(s)
            written += len(s.encode("utf-8"))
        f.write("]\n")
    print("wrote %s: %d conversations, %.0f MB" % (a.out, a.conversations, written / 1e6), file=sys.stderr)


if __name__ == "__main__":
    main()
