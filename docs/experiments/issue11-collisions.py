import sys, collections
R=[];S=[];Z=[]
for line in open(sys.argv[1]):
    x=line.strip().split(',')
    if x[0]=='R': R.append((int(x[1]),x[2],float(x[3]),float(x[4])))
    if x[0]=='S':
        y=line.strip().split(',',4); S.append((float(y[1]),y[2],y[4].strip('[]').split()))
    if x[0]=='Z': Z.append((x[1],x[2],float(x[3]),float(x[4])))
starting=collections.defaultdict(list)
for m,st,fr,to in Z:
    if st=='starting': starting[m].append((fr,to))
def swap_end(t0,target):
    for fr,to in starting[target]:
        if abs(fr-t0)<1e-6: return to
    return t0
ev=[(t0,swap_end(t0,tg),ev) for t0,tg,ev in S]
coll=0; blk=0
for i,m,a,g in R:
    seg=[s for s in starting[m] if abs(s[1]-g)<1e-6]
    if not seg: continue
    s,d=seg[0]
    if s<=a: continue
    blk+=s-a
    # overlap of [a,s] with swaps evicting m
    iv=[(max(a,t0),min(s,t1)) for t0,t1,e in ev if m in e and t1>a and t0<s]
    # union
    iv.sort(); tot=0; cur=None
    for x,y in iv:
        if y<=x: continue
        if cur and x<=cur[1]: cur=(cur[0],max(cur[1],y))
        else:
            if cur: tot+=cur[1]-cur[0]
            cur=(x,y)
    if cur: tot+=cur[1]-cur[0]
    coll+=tot
print("blocked %.0f s, of which a running swap was evicting the request's own model: %.0f s"%(blk,coll))
