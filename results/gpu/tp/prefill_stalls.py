#!/usr/bin/env python3
"""Prefill-only steps (one sequence, several tokens) of each steps.jsonl that took over 10 ms more
than the run's median prefill-only step: a stall count that needs no profile (stdlib only).

  python3 results/gpu/tp/prefill_stalls.py STEPS.jsonl[.gz] ...
"""
import gzip,json,sys,statistics as st
for p in sys.argv[1:]:
    rs=[json.loads(l) for l in (gzip.open(p,'rt') if p.endswith('.gz') else open(p))]
    pre=[r for r in rs if r['batch_size']==1 and r['n_tokens']>1]
    dec=[r['duration_s'] for r in rs if r['n_tokens']==r['batch_size']]
    med=st.median(r['duration_s'] for r in pre) if pre else 0
    slow=[(r['n_tokens'],round(r['duration_s']*1e3,1)) for r in pre if r['duration_s']>med+0.010]
    print(p, 'prefill-only',len(pre),'median %.2f ms'%(med*1e3),'decode median %.2f ms'%(st.median(dec)*1e3 if dec else 0),'slow(>median+10ms):',len(slow),slow[:12])
