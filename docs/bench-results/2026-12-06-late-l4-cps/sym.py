import subprocess,sys,json,collections
rows={}
tot={}
for t in ['switchyard','haproxy28','nginx131']:
    rps=json.load(open(f'{t}.load.json'))['rps']
    out=subprocess.run(['perf','report','-i',f'{t}.perf.data','--stdio','--sort','comm,sym','-F','sample,comm,sym','-q'],capture_output=True,text=True).stdout
    d=collections.Counter()
    n=0
    for l in out.splitlines():
        p=l.split(None,2)
        if len(p)<3: continue
        s=int(p[0]); n+=s
        d[p[1]+' '+p[2].strip()]+=s
    conns=rps*4
    us=lambda s: s*250/conns
    tot[t]=(n,us(n))
    rows[t]={k:us(v) for k,v in d.items()}
    print(t,'samples',n,'us/conn(all incl idle)',round(us(n),1),'idle',round(sum(v for k,v in rows[t].items() if 'swapper' in k),1))
keys=collections.Counter()
for t in rows:
    for k,v in rows[t].items():
        kk=k.split(' ',1)[1]
        keys[kk]+=0
agg={t:collections.Counter() for t in rows}
for t in rows:
    for k,v in rows[t].items():
        if 'swapper' in k: continue
        agg[t][k.split(' ',1)[1]]+=v
allk=set().union(*[set(a) for a in agg.values()])
lst=sorted(allk,key=lambda k:-max(agg[t][k] for t in agg))
print('%-50s %8s %8s %8s'%('sym','sy','hap28','ngx131'))
for k in lst[:60]:
    print('%-50s %8.2f %8.2f %8.2f'%(k[:50],agg['switchyard'][k],agg['haproxy28'][k],agg['nginx131'][k]))
