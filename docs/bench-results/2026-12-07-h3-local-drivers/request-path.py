import sys,collections
ev=[l.split() for l in open(sys.argv[1]) if l[:1] in 'WMFTSV']
ev=[(k,int(t),int(r)) for k,t,r in ev]
req=collections.defaultdict(list); resp=collections.defaultdict(list); wake=collections.defaultdict(list)
t_in=None;kin=None;t_m=None;t_w=None
for k,t,r in ev:
    if k=='W':
        t_w=t if r>0 else None
    elif k=='M' and r>0:
        t_in=t;kin='h3'
        if t_w: wake['h3'].append(t-t_w); t_w=None
    elif k=='F' and r>0:
        if r>1000: t_m=t
        else:
            t_in=t;kin='h2'
            if t_w: wake['h2'].append(t-t_w); t_w=None
    elif k=='T':
        if t_in: req[kin].append(t-t_in); t_in=None
    elif k in 'SV':
        if t_m: resp['h3' if k=='S' else 'h2'].append(t-t_m); t_m=None
def q(x,p): x=sorted(x); return x[min(len(x)-1,int(len(x)*p))]/1000 if x else float('nan')
for name,d in (('wake->read-exit',wake),('request read->member sendto',req),('member resp read->client send',resp)):
    for p in ('h3','h2'):
        x=d[p]; print(f"{name:32s} {p} n={len(x):6d} p50 {q(x,.5):6.1f} p90 {q(x,.9):6.1f} p99 {q(x,.99):6.1f} us")
