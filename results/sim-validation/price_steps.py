#!/usr/bin/env python3
"""Price every real step of a validate-sim run offline with a profile, two ways: the sim's step
model as it was fitted before (engine/backend/cost_model_fit.cpp, ProfiledStepModel: one joint
weighted least-squares fit of M(rows), the sampled, prefill-pair and decode-context terms, then G
at each CUDA graph bucket from what the rest leaves) and as it is fitted now, and print the error
by step class beside validate-sim's own prediction (stdlib only).

  python3 results/sim-validation/price_steps.py STEPS_REAL.jsonl.gz PROFILE.json [--buckets 1,2,4,...]

Now (the well-posed fit): the sampled term is pinned to 0 when the samples cannot tell it from M
(its column in the span of the others: every sample that draws rows on a knot whose other
samples draw as many, decodes on knots no eager step measured); with graph buckets, M is then
refitted on the eager samples with the joint fit's scalars (knots outside the eager rows, set by
graphed decodes alone, keep their values) and a mixed step (prefill rows beside decodes) pays a
fixed c_mixed fitted there, mixed samples setting no knot inside the pure eager steps' range.

--buckets: for a profile written before it recorded decode_row_buckets (default: the profile's).
The re-implementation is checked against validate-sim: its "before" column must match the
"validate-sim" column (the same model on the same profile, when validate-sim ran before the
well-posed fit) to about 0.1% where that fit was well posed. Where it was not (the long-prompt
cell: M and the sampled term collinear), this solver and the sim's landed on different splits and
the columns differ. Steps do not record their sampled rows: every sequence is taken to draw one.
The sim also clamps shapes past the grid and this script does not.
"""
import argparse, bisect, collections, gzip, json


def solve(a, b, w, active):
    """Weighted least squares over the active columns, columns scaled to unit norm first."""
    n = len(a[0])
    norms = [sum((a[r][c] * w[r]) ** 2 for r in range(len(a))) ** 0.5 for c in range(n)]
    idx = [c for c in range(n) if active[c] and norms[c] > 0]
    m = len(idx)
    g = [[0.0] * m for _ in range(m)]
    v = [0.0] * m
    for r in range(len(a)):
        row = [a[r][c] / norms[c] for c in idx]
        ww = w[r] * w[r]
        for i in range(m):
            if row[i]:
                v[i] += ww * row[i] * b[r]
                for j in range(m):
                    g[i][j] += ww * row[i] * row[j]
    for i in range(m):  # Gaussian elimination, partial pivoting
        p = max(range(i, m), key=lambda k: abs(g[k][i]))
        g[i], g[p], v[i], v[p] = g[p], g[i], v[p], v[i]
        for k in range(i + 1, m):
            f = g[k][i] / g[i][i] if g[i][i] else 0.0
            if f:
                for j in range(i, m):
                    g[k][j] -= f * g[i][j]
                v[k] -= f * v[i]
    x = [0.0] * m
    for i in reversed(range(m)):
        x[i] = (v[i] - sum(g[i][j] * x[j] for j in range(i + 1, m))) / g[i][i] if g[i][i] else 0.0
    out = [0.0] * n
    for i, c in enumerate(idx):
        out[c] = x[i] / norms[c]
    return out


def knot_weights(knots, x):
    if x <= knots[0] or len(knots) == 1:
        return 0, 0.0
    if x >= knots[-1]:
        return len(knots) - 2, 1.0
    i = bisect.bisect_right(knots, x) - 1
    return i, (x - knots[i]) / (knots[i + 1] - knots[i])


def rows(s):
    return s["n_tokens"] + s.get("n_padding_tokens", 0)


def padded(s):
    return s.get("n_padding_tokens", 0) > 0 and s["prefill_pairs"] == 0


def mixed(s):
    return s["prefill_pairs"] > 0 and s["decode_context"] > 0


def spanned(a, w, active, c):
    """Whether column c of W·A is in the span of the other active columns (relative residual < 1e-6)."""
    y = [r[c] for r in a]
    norm = sum((y[i] * w[i]) ** 2 for i in range(len(a)))
    if norm == 0:
        return True
    others = list(active)
    others[c] = False
    x = solve(a, y, w, others)
    res = sum(((y[i] - sum(a[i][j] * x[j] for j in range(len(x)))) * w[i]) ** 2 for i in range(len(a)))
    return res <= 1e-12 * norm


class Model:
    def __init__(self, samples, buckets=(), well_posed=False):
        base = [s for s in samples if s.get("verify_rows", 0) == 0]
        self.knots = sorted({rows(s) for s in base if not padded(s)})
        self.pknots = sorted({rows(s) for s in base if padded(s)})
        nk, npk = len(self.knots), len(self.pknots)
        a, b, w = [], [], []
        for s in base:
            row = [0.0] * (nk + npk + 3)
            k, off = (self.pknots, nk) if padded(s) else (self.knots, 0)
            i, u = knot_weights(k, rows(s))
            row[off + i] += 1 - u
            if len(k) > 1:
                row[off + i + 1] += u
            row[nk + npk:] = [s["n_sampled"], s["prefill_pairs"], s["decode_context"]]
            a.append(row), b.append(s["step_s"]), w.append(1 / s["step_s"])
        active = [True] * (nk + npk + 3)
        if well_posed and spanned(a, w, active, nk + npk):
            active[nk + npk] = False
        for _ in range(3):  # a scalar coefficient driven negative is pinned to 0
            x = solve(a, b, w, active)
            neg = [c for c in range(nk + npk, nk + npk + 3) if active[c] and x[c] < 0]
            if not neg:
                break
            active[min(neg, key=lambda c: x[c])] = False
        self.m, self.p = x[:nk], x[nk:nk + npk]
        self.sampled, self.pair, self.ctx = x[nk + npk:]
        self.buckets = sorted(buckets)
        g = collections.defaultdict(lambda: [0.0, 0.0])
        for s in base:
            if self.graphable(s):
                wt = 1 / s["step_s"] ** 2
                g[self.bucket(s)][0] += wt * (s["step_s"] - self.pair * s["prefill_pairs"] - self.ctx * s["decode_context"])
                g[self.bucket(s)][1] += wt
        self.gknots = sorted(g)
        self.g = [max(0.0, g[k][0] / g[k][1]) for k in self.gknots]
        self.mixed_s = 0.0
        if well_posed and self.gknots:
            self.fit_eager(base)

    def fit_eager(self, base):
        eager = [s for s in base if not padded(s) and not self.graphable(s)]
        if not eager:
            return
        pure = {rows(s) for s in eager if not mixed(s)} or {rows(s) for s in eager}
        lo, hi = min(pure), max(pure)
        knots = sorted(pure | {rows(s) for s in eager if rows(s) < lo or rows(s) > hi})
        n = len(knots) + 1
        a, b, w = [], [], []
        for s in eager:
            row = [0.0] * n
            i, u = knot_weights(knots, rows(s))
            row[i] += 1 - u
            if len(knots) > 1:
                row[i + 1] += u
            row[n - 1] = 1.0 if mixed(s) else 0.0
            a.append(row)
            b.append(s["step_s"] - self.sampled * s["n_sampled"] - self.pair * s["prefill_pairs"] -
                     self.ctx * s["decode_context"])
            w.append(1 / s["step_s"])
        active = [True] * n
        if spanned(a, w, active, n - 1):
            active[n - 1] = False
        x = solve(a, b, w, active)
        if x[n - 1] < 0:
            active[n - 1] = False
            x = solve(a, b, w, active)
        kept = [(k, v) for k, v in zip(self.knots, self.m) if k < knots[0] or k > knots[-1]]
        merged = sorted(kept + list(zip(knots, x[:n - 1])))
        self.knots, self.m = [k for k, _ in merged], [v for _, v in merged]
        self.mixed_s = x[n - 1]

    def bucket(self, s):
        return self.buckets[bisect.bisect_left(self.buckets, s["n_seqs"])]

    def graphable(self, s):
        return bool(self.buckets) and s["n_seqs"] >= 1 and s["n_tokens"] == s["n_seqs"] and \
            s.get("n_padding_tokens", 0) == 0 and s.get("verify_rows", 0) == 0 and s["n_seqs"] <= self.buckets[-1]

    def __call__(self, s):
        if self.gknots and self.graphable(s) and self.gknots[0] <= self.bucket(s) <= self.gknots[-1]:
            i, u = knot_weights(self.gknots, self.bucket(s))
            g = (1 - u) * self.g[i] + (u * self.g[i + 1] if len(self.g) > 1 else 0.0)
            return g + self.pair * s["prefill_pairs"] + self.ctx * s["decode_context"]
        use_p = padded(s) and self.pknots and self.pknots[0] <= rows(s) <= self.pknots[-1]
        k, v = (self.pknots, self.p) if use_p else (self.knots, self.m)
        i, u = knot_weights(k, min(max(rows(s), k[0]), k[-1]))
        t = (1 - u) * v[i] + (u * v[i + 1] if len(v) > 1 else 0.0)
        return t + self.sampled * s["n_sampled"] + self.pair * s["prefill_pairs"] + self.ctx * s["decode_context"] + \
            (self.mixed_s if mixed(s) else 0.0)


def step_class(r):
    b = r["n_seqs"]
    if r["n_tokens"] == b:
        return "decode 1-16" if b <= 16 else "decode 17-64" if b <= 64 else "decode 65+"
    if not mixed(r):
        return "prefill only"
    return "mixed <= 256 rows" if r["n_tokens"] <= 256 else "mixed > 256 rows"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("steps", help="validate-sim's steps_real.jsonl(.gz)")
    ap.add_argument("profile", help="the profile it priced them with")
    ap.add_argument("--buckets", help="decode graph buckets, for a profile that does not record them")
    a = ap.parse_args()
    prof = json.load(open(a.profile))
    buckets = [int(x) for x in a.buckets.split(",")] if a.buckets else prof.get("decode_row_buckets", [])
    if not buckets:
        raise SystemExit(f"{a.profile} records no decode_row_buckets: give --buckets")
    host = prof.get("host_overhead", {"per_step_s": 0.0, "per_seq_s": 0.0})
    before, now = Model(prof["samples"], buckets), Model(prof["samples"], buckets, well_posed=True)
    opener = gzip.open if a.steps.endswith(".gz") else open
    tot = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for line in opener(a.steps, "rt"):
        r = json.loads(line)
        s = dict(r, n_sampled=r.get("n_sampled", r["n_seqs"]))  # every sequence of a step draws
        h = host["per_step_s"] + host["per_seq_s"] * r["n_seqs"]
        for k in ((r["run"], step_class(r)), (r["run"], "all steps")):
            t = tot[k]
            t[0] += r["measured_s"]; t[1] += r["predicted_s"]; t[2] += before(s) + h; t[3] += now(s) + h
    print("| run | class | Σ measured (s) | validate-sim | before | now |")
    print("|---|---|---:|---:|---:|---:|")
    for (run, cls), (m, vs, b, n) in sorted(tot.items()):
        print(f"| {run} | {cls} | {m:.3f} | {vs / m - 1:+.1%} | {b / m - 1:+.1%} | {n / m - 1:+.1%} |")


if __name__ == "__main__":
    main()
