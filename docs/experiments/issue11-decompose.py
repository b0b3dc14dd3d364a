import sys, collections
R=[];S=[];Z=[]
for line in open(sys.argv[1]):
    p=line.rstrip('\n').split(',',1)
    if p[0]=='R':
        _,i,m,a,g,f,fin,ok=line.strip().split(',')
        R.append((int(i),m,float(a),float(g),float(f),float(fin)))
    elif p[0]=='S':
        x=line.strip().split(',',4); S.append((float(x[1]),x[2],x[3],x[4]))
    elif p[0]=='Z':
        x=line.strip().split(',',5); Z.append((x[1],x[2],float(x[3]),float(x[4])))
starting=collections.defaultdict(list)
for m,st,fr,to in Z:
    if st=='starting': starting[m].append((fr,to))
# in-flight intervals per model
infl=collections.defaultdict(list)
for i,m,a,g,f,fin in R: infl[m].append((g,fin))
def busy(m,t):
    return any(g<=t<fin for g,fin in infl[m])
def resident_at(t):
    out={}
    for m,st,fr,to in Z:
        if fr<=t<to: out[m]=st
    return out
waits=sorted(g-a for i,m,a,g,f,fin in R)
n=len(waits); p95=waits[int(0.95*n+0.5)-1]
print("n",n,"p50",waits[n//2],"p95",p95,"mean",sum(waits)/n)
cat=collections.Counter(); tot=collections.Counter(); tail=collections.Counter(); tailn=collections.Counter()
blk_idle=0.0; blk_all=0.0
permodel=collections.defaultdict(lambda: collections.Counter())
for i,m,a,g,f,fin in R:
    w=g-a
    if w<1e-9: cat['none']+=1; continue
    seg=[s for s in starting[m] if abs(s[1]-g)<1e-6]
    if seg:
        s,d=seg[0]
        if s<=a+1e-9:
            parts={'join_load':d-a}
        else:
            parts={'blocked':s-a,'load':d-s}
            # sample blocked interval: is there an idle ready model?
            k=0;idle=0
            t=a
            while t<s:
                res=resident_at(t)
                if any(st=='ready' and not busy(mm,t) for mm,st in res.items()): idle+=1
                k+=1; t+=0.5
            blk_idle+=idle/k*(s-a); blk_all+=(s-a)
    else:
        parts={'other(ready-limit?)':w}
    for k,v in parts.items():
        tot[k]+=v; permodel[m][k]+=v
        if w>=p95: tail[k]+=v
    cat[ '+'.join(sorted(parts))]+=1
    if w>=p95: tailn['+'.join(sorted(parts))]+=1
print("categories",dict(cat))
print("total wait seconds by part",{k:round(v) for k,v in tot.items()})
print("tail (w>=p95) count",dict(tailn),"seconds",{k:round(v) for k,v in tail.items()})
print("blocked time with an idle ready model present: %.0f of %.0f s"%(blk_idle,blk_all))
for m in sorted(permodel): print(m,{k:round(v) for k,v in permodel[m].items()}, sum(1 for r in R if r[1]==m))
# loads
print("swaps",len(S)); lt=collections.Counter(s[1] for s in S); print(sorted(lt.items()))
print("--- other samples")
k=0
for i,m,a,g,f,fin in R:
    w=g-a
    if w<1e-9: continue
    seg=[s for s in starting[m] if abs(s[1]-g)<1e-6]
    if not seg and k<15:
        k+=1
        res=resident_at(a); res2=resident_at(g-1e-4)
        print(i,m,round(a,2),round(g,2),"res@a",res,"inflight@a",sum(1 for gg,ff in infl[m] if gg<=a<ff),"starting segs",[s for s in starting[m] if s[0]<=g+1 and s[1]>=a-1])
