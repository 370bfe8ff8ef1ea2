#!/usr/bin/env python3
"""The sampling noise of each continuous run's TTFT p50 (first token - arrival, warm-up left out)
in a records.jsonl(.gz): the median and a bootstrap 95% interval (2,000 resamples, seed 1), to say
whether a sim error on that p50 can be told from the run's own sampling (stdlib only).

  python3 results/sim-validation/ttft_p50_noise.py RECORDS.jsonl[.gz] ...
"""
import json,gzip,random,sys
def recs(p):
    f=gzip.open(p,'rt') if p.endswith('.gz') else open(p)
    return [json.loads(l) for l in f]
def p50(v):
    v=sorted(v); n=len(v); return v[(n-1)//2] if n%2 else 0.5*(v[n//2-1]+v[n//2])
random.seed(1)
for p in sys.argv[1:]:
    rs=recs(p)
    print(p)
    for run in sorted(set(r['run'] for r in rs)):
        if run.startswith('static'): continue
        v=[(r['first_token_s']-r['arrival_s'])*1e3 for r in rs if r['run']==run and not r.get('warmup') and r.get('first_token_s') is not None]
        b=sorted(p50([random.choice(v) for _ in v]) for _ in range(2000))
        m=p50(v); lo,hi=b[50],b[1949]
        print(f"  {run:22s} n={len(v)} TTFT p50 {m:6.1f} ms, bootstrap 95% {lo:6.1f}-{hi:6.1f} ({(lo/m-1)*100:+.0f}% / {(hi/m-1)*100:+.0f}%)")
