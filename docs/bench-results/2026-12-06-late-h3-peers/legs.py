import re,sys,bisect
LINE=re.compile(r"(\S+) IP 127\.0\.0\.1\.(\d+) > 127\.0\.0\.1\.(\d+):.* length (\d+)")
path,port,oport=sys.argv[1],sys.argv[2],sys.argv[3]
P=[]
for l in open(path):
    m=LINE.match(l)
    if m: P.append((float(m[1]),m[2],m[3],int(m[4])))
t0=P[0][0]+2
P=[p for p in P if p[0]>=t0]
import collections
lens=collections.Counter(n for _,_,d,n in P if d==port and n>0)
rl=lens.most_common(1)[0][0]
tol=16 if 'udp' in open(path).read(2000).lower() or True else 0
creq=[t for t,s,d,n in P if d==port and abs(n-rl)<=16]
mlens=collections.Counter(n for _,_,d,n in P if d==oport and n>0)
mrl=mlens.most_common(1)[0][0]
mreq=[t for t,s,d,n in P if d==oport and n==mrl]
mresp=[t for t,s,d,n in P if s==oport and n>1000]
cresp=[t for t,s,d,n in P if s==port and n>1000]
def legs(a,b):
    # for each b, time since the latest a before it
    out=[]
    for t in b:
        i=bisect.bisect_right(a,t)-1
        if i>=0: out.append((t-a[i])*1e6)
    out.sort()
    return out
def q(x,p): return round(x[int(len(x)*p)],1)
for name,(a,b) in {'client req -> member req':(creq,mreq),'member req -> member resp':(mreq,mresp),'member resp -> client resp':(mresp,cresp)}.items():
    x=legs(a,b); print('%-28s n=%d p50 %s p90 %s p99 %s us'%(name,len(x),q(x,.5),q(x,.9),q(x,.99)))
