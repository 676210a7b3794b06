import re,statistics as st,collections,sys
d=collections.defaultdict(lambda: collections.defaultdict(list))
for l in open(sys.argv[1]):
    m=re.match(r'round \d+ (h\d) (\w+) (\d+) req/s: .*tool p50_ms ([\d.]+) p99_ms ([\d.]+), turnaround_p50_ms ([\d.]+) p99_ms ([\d.]+) p99.9_ms ([\d.]+) responses (\d+), member_p50_ms ([\d.]+) p99_ms ([\d.]+), DUT CPU ([\d.]+)',l)
    if not m: print('skip',l[:80]); continue
    p,t,r=m.group(1,2,3)
    for k,v in zip(['tp50','tp99','ta50','ta99','ta999','resp','m50','m99','cpu'],m.groups()[3:]): d[(r,t)][p+k].append(float(v))
for k,v in d.items():
    print(k, len(v['h3cpu']))
    for kk in ['tp99','ta50','ta99','m99','cpu','resp']:
        print('   %-5s h3 %s med %.3f | h2 %s med %.3f | ratio %.2f'%(kk, v['h3'+kk], st.median(v['h3'+kk]), v['h2'+kk], st.median(v['h2'+kk]), st.median(v['h3'+kk])/st.median(v['h2'+kk])))
