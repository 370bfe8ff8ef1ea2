#!/usr/bin/env python3
"""What adapters cost a serving run's decode steps: the median forward time of decode steps by
batch size in two runs of the same plan, one without adapters and one with them (each a
`servelab run` output folder's steps.jsonl), and their ratio.

Usage: python3 lora_cost.py BASE/steps.jsonl LORA/steps.jsonl
"""
import json
import statistics
import sys


def decode_medians(path):
    groups = {}
    for line in open(path):
        step = json.loads(line)
        if step["roofline"]["class"] != "decode":
            continue
        b = step["batch_size"]
        key = "1" if b == 1 else "2-4" if b <= 4 else "5-8" if b <= 8 else "9-16" if b <= 16 else "17+"
        groups.setdefault(key, []).append(step["host"]["forward_s"])
    return {k: (len(v), statistics.median(v)) for k, v in groups.items()}


def main():
    base, lora = decode_medians(sys.argv[1]), decode_medians(sys.argv[2])
    print("| decode batch | steps (base / LoRA) | base median ms | LoRA median ms | LoRA / base |")
    print("|---|---|---|---|---|")
    for key in ["1", "2-4", "5-8", "9-16", "17+"]:
        if key in base and key in lora:
            (nb, b), (nl, l) = base[key], lora[key]
            print(f"| {key} | {nb} / {nl} | {b * 1e3:.3f} | {l * 1e3:.3f} | {l / b:.3f} |")


if __name__ == "__main__":
    main()
