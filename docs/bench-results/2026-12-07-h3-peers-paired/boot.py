import re,sys,random,statistics as st,collections
# rounds of Switchyard's paired turnaround: the build's own lines only
rows=collections.defaultdict(dict)
def add(key,p,p50,p99): rows[key][p]=(p50,p99)
for f in sys.argv[1:]:
    tag=None
    for line in open(f):
        if line.startswith('=='): tag=line.split()[1]+line.split()[-1]; continue
        m=re.match(r'round (\d+) (h[23]) (\S+) (\d+) req/s paired: .*turnaround_p50_ms ([\d.]+) p99_ms ([\d.]+)',line)
        if not m or 'invalid' in line: continue
        if 'target' in line and 'target sy' not in line: continue
        if tag and not tag.startswith('busy'): continue
        add((f,tag,m[1],m[3],m[4]),m[2],float(m[5]),float(m[6]))
random.seed(1)
for tool,rate in (('oha','1000'),('h3load','1000'),('oha','5000')):
    ks=[k for k in rows if k[3]==tool and k[4]==rate and len(rows[k])==2]
    r99=[rows[k]['h3'][1]/rows[k]['h2'][1] for k in ks]
    d99=[(rows[k]['h3'][1]-rows[k]['h2'][1])*1000 for k in ks]
    r50=[rows[k]['h3'][0]/rows[k]['h2'][0] for k in ks]
    boots=sorted(st.median(random.choices(r99,k=len(r99))) for _ in range(10000))
    print(f"{tool:6} {rate}: n={len(r99)} P99 h3/h2 median {st.median(r99):.3f}x, 95% CI of the median [{boots[250]:.3f}, {boots[9750]:.3f}], "
          f"mean {st.mean(r99):.3f}; P99 difference median {st.median(d99):+.1f} us; rounds at or below 1: {sum(r<=1 for r in r99)}; P50 h3/h2 {st.median(r50):.3f}x")
