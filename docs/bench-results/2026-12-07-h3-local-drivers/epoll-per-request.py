import sys
for f in sys.argv[1:]:
    ev=[l.split() for l in open(f) if l[:1] in 'WMFTSV']
    ms=[i for i,e in enumerate(ev) if e[0]=='M']
    a,b=ms[0],ms[-1]
    seg=ev[a:b]
    T=sum(1 for e in seg if e[0]=='T'); W=sum(1 for e in seg if e[0]=='W'); W0=sum(1 for e in seg if e[0]=='W' and e[2]=='0')
    # also between an M (ret>0) and the next T: count W
    inpath=0; cnt=0; n=0
    for e in seg:
        if e[0]=='M' and int(e[2])>0: inpath=1; cnt=0
        elif e[0]=='W' and inpath: cnt+=1
        elif e[0]=='T' and inpath: n+=1; inpath=0; 
    print(f, "requests(T)",T,"epoll_wait/req %.2f"%(W/T), "zero-timeout-or-empty/req %.2f"%(W0/T))
for f in sys.argv[1:]:
    ev=[l.split() for l in open(f) if l[:1] in 'WMFTSV']
    ms=[i for i,e in enumerate(ev) if e[0]=='M']; seg=ev[ms[0]:ms[-1]]
    inpath=False; cnt=0; tot=0; n=0
    for e in seg:
        if e[0]=='M' and int(e[2])>0: inpath=True; cnt=0
        elif e[0]=='W' and inpath: cnt+=1
        elif e[0]=='T' and inpath: n+=1; tot+=cnt; inpath=False
    print(f,"epoll_wait inside request paths per request %.2f"%(tot/n))
