#!/usr/bin/env python3
"""Each sim run of SUMMARY.json against the real runs of a validate-sim VALIDATION.json at the same
rate: TTFT and TPOT p50 / p99, real -> sim (error), and the real p50s' sampling noise (stdlib only).

  python3 results/sim-validation/cross-gpu/compare.py VALIDATION.json SUMMARY.json ...
"""
import json,sys
val=json.load(open(sys.argv[1]))
sims=sys.argv[2:]
real={r['rate']:r['figures'] for r in val['runs']}
for sp in sims:
    s=json.load(open(sp))
    print(sp)
    for r in s['runs']:
        rate=r.get('rate') or r['config'].get('rate')
        m=r['metrics']; f=real.get(rate)
        if not f: print('no real', rate); continue
        row=[]
        for key,mk,q in (('ttft_p50_ms','ttft_ms','p50'),('ttft_p99_ms','ttft_ms','p99'),('tpot_p50_ms','tpot_ms','p50'),('tpot_p99_ms','tpot_ms','p99')):
            rv=f[key]['real']; sv=m[mk][q]; noise=f[key].get('real_sampling_noise')
            row.append(f"{key} {rv:.2f} -> {sv:.2f} ({(sv/rv-1)*100:+.1f}%" + (f", noise ±{noise*100:.1f}%)" if noise is not None else ")"))
        print(' ',rate,' | '.join(row))
