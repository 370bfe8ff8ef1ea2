import json, sys
rows = []
for name, path in [("copied spans", sys.argv[1]), ("random prompts", sys.argv[2])]:
    d = json.load(open(path))
    base = None
    for r in d["runs"]:
        m = r["metrics"]
        sd = m.get("spec_decode") or {}
        tpot = m["tpot_ms"]["p50"]
        if r["label"].startswith("plain"): base = tpot
        rows.append([name, r["label"], tpot, sd, None])
    for row in rows:
        if row[0] == name: row[4] = row[2] / base
print("| prompts | strategy | TPOT p50 (ms) | TPOT vs plain | acceptance rate | mean acceptance length | accepted / drafted at position 1..4 | drafts |")
print("|---|---|---|---|---|---|---|---|")
for n, l, t, sd, ratio in rows:
    if sd:
        nd = sd.get("num_drafts", 0)
        pos = sd.get("num_accepted_tokens_per_pos", [])
        drafted = sd.get("num_draft_tokens_per_pos", [])
        per = " / ".join(f"{p / q:.2f}" if q else "-" for p, q in zip(pos, drafted)) if nd else "-"
        print(f"| {n} | {l} | {t:.2f} | {ratio:.3f}x | {sd.get('acceptance_rate', 0):.3f} | {sd.get('mean_acceptance_length', 0):.2f} | {per} | {nd} |")
    else:
        print(f"| {n} | {l} | {t:.2f} | 1x | - | - | - | - |")
