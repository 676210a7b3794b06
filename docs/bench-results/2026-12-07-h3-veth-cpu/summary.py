import re,sys,collections,statistics as st
v=collections.defaultdict(list); l=collections.defaultdict(list); lo=collections.defaultdict(list)
for f in sys.argv[1:]:
  for line in open(f):
    m=re.search(r'veth (h[23]) (\S+) (\d+) B: (\d+) ok, CPU 0 ([\d.]+) us/request, the DUT.s utime\+stime ([\d.]+)',line)
    if m:
        if float(m[5])-float(m[6]) <= float(m[5])/4: v[(m[3],m[1],m[2])].append(float(m[5]))
        continue
    m=re.search(r'sy (h[23]) (\S+) (\d+) B: (\d+) ok, DUT CPU ([\d.]+) .*own ([\d.]+)',line)
    if m: l[(m[3],m[1],m[2])].append(float(m[5])); lo[(m[3],m[1],m[2])].append(float(m[6]))
def med(d,k): return st.median(d[k]) if d.get(k) else float('nan')
for size in ('1024','65536'):
  for h3t,h2t in (('oha','oha'),('h3load','h3load'),('h3load','h2load'),('oha','h2load')):
    a=(size,'h3',h3t); b=(size,'h2',h2t)
    print(f"{size:>5} h3 {h3t:6} / h2 {h2t:6}: veth {med(v,a):6.1f}/{med(v,b):6.1f} = {med(v,a)/med(v,b):.2f}x (n={len(v[a])})"
          + (f"; loopback {med(l,a):6.1f}/{med(l,b):6.1f} = {med(l,a)/med(l,b):.2f}x, without receivers' path {med(lo,a):6.1f}/{med(lo,b):6.1f} = {med(lo,a)/med(lo,b):.2f}x" if l.get(a) and l.get(b) else ""))
