import re,sys,collections,statistics as st
d=collections.defaultdict(dict); invalid=collections.Counter()
for f in sys.argv[1:]:
  for line in open(f):
    m=re.match(r'round (\d+) (h3|h2) (\S+) (\d+) req/s paired: ok (\d+), tool p50_ms (\S+) p99_ms (\S+), turnaround_p50_ms ([\d.]+) p99_ms ([\d.]+) p99.9_ms ([\d.]+).*DUT CPU ([\d.]+).*target (\S+)',line)
    if not m: continue
    r,p,tool,rate,ok,tp50,tp99,p50,p99,p999,cpu,tgt=m.groups()
    key=(tgt,rate,tool,f,r)
    if 'invalid' in line or 'dropped' in line: invalid[key]+=1
    d[key][p]=(float(p50),float(p99),float(p999),float(cpu))
for tgt in ('sy','caddy','envoy'):
  for rate in ('1000','5000'):
    for tool in ('oha','h3load'):
        ks=[k for k in sorted(d) if k[:3]==(tgt,rate,tool) and 'h3' in d[k] and 'h2' in d[k]]
        bad=sum(1 for k in ks if invalid[k]); ks=[k for k in ks if not invalid[k]]
        if not ks:
            if bad: print(f"{tgt:6} {rate:>5} {tool:7} all {bad} rounds invalid")
            continue
        rs=[d[k] for k in ks]
        r99=[x['h3'][1]/x['h2'][1] for x in rs]; r50=[x['h3'][0]/x['h2'][0] for x in rs]
        print(f"{tgt:6} {rate:>5} {tool:7} rounds {len(rs)} (+{bad} invalid): P99 h3/h2 {st.median(r99):.2f}x {[round(v,2) for v in r99]}; "
              f"P50 h3/h2 {st.median(r50):.2f}x; h3 P50/P99 {st.median(x['h3'][0] for x in rs):.3f}/{st.median(x['h3'][1] for x in rs):.3f} ms, "
              f"h2 {st.median(x['h2'][0] for x in rs):.3f}/{st.median(x['h2'][1] for x in rs):.3f} ms; CPU/req both {st.median(x['h3'][3] for x in rs):.1f} us")
