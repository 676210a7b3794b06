import re,sys,collections,statistics as st
v=collections.defaultdict(list)
for f in sys.argv[1:]:
  for line in open(f):
    m=re.search(r'round (\d+) (sy|caddy|envoy) (h[23]) (\S+) new B: (\d+) ok.*?CPU 0 ([\d.]+) us/request, the DUT.s utime\+stime ([\d.]+)',line)
    if m and 'invalid' not in line: v[(m[2],m[4])].append(float(m[6]))
for mode in ('new','resume','0rtt','h2load-new'):
    row={t:st.median(v[(t,mode)]) for t in ('sy','caddy','envoy') if v.get((t,mode))}
    best=min(x for t,x in row.items() if t!='sy')
    print(f"{mode:10} " + ", ".join(f"{t} {x:.0f} {[round(y) for y in v[(t,mode)]]}" for t,x in row.items()) + f"; sy/best peer {row['sy']/best:.2f}x")
sy=lambda m: st.median(v[('sy',m)])
print(f"sy h3 full / h2 full: {sy('new')/sy('h2load-new'):.2f}x")
