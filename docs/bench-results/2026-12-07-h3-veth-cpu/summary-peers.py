import re,sys,collections,statistics as st
v=collections.defaultdict(list)
for f in sys.argv[1:]:
  for line in open(f):
    m=re.search(r'round (\d+) (?:veth )?(?:(sy|caddy|envoy) )?(h[23]) (\S+) (\d+) B: (\d+) ok, CPU 0 ([\d.]+) us/request, the DUT.s utime\+stime ([\d.]+)',line)
    if not m: continue
    tgt=m[2] or 'sy'
    if float(m[7])-float(m[8]) <= float(m[7])/4: v[(tgt,m[5],m[3],m[4])].append(float(m[7]))
def med(k): return st.median(v[k]) if v.get(k) else float('nan')
for size in ('1024','65536'):
  for tool in ('oha','h3load'):
    row=[]
    for tgt in ('sy','caddy','envoy'):
        row.append((tgt,med((tgt,size,'h3',tool)),len(v[(tgt,size,'h3',tool)])))
    best=min(x[1] for x in row[1:] if x[1]==x[1]) if any(x[1]==x[1] for x in row[1:]) else float('nan')
    print(f"{size:>5} h3 {tool:6}: " + ", ".join(f"{t} {m:.1f} (n={n})" for t,m,n in row) + f"; sy / best peer {row[0][1]/best:.2f}x")
  for h3t,h2t in (('oha','oha'),('h3load','h3load'),('h3load','h2load')):
    for tgt in ('sy','caddy','envoy'):
        a=med((tgt,size,'h3',h3t)); b=med((tgt,size,'h2',h2t))
        if a==a and b==b: print(f"{size:>5} {tgt:6} h3 {h3t} / h2 {h2t}: {a:.1f}/{b:.1f} = {a/b:.2f}x")
