import sys, collections
exec(open(__file__.replace('bound', 'collisions')).read().split('coll=0; blk=0')[0])
waits=[];adj=[]
for i,m,a,g in R:
    w=g-a; waits.append(w)
    seg=[s for s in starting[m] if abs(s[1]-g)<1e-6]
    c=0
    if seg and seg[0][0]>a:
        s,d=seg[0]
        iv=sorted((max(a,t0),min(s,t1)) for t0,t1,e in ev if m in e and t1>a and t0<s)
        cur=None
        for x,y in iv:
            if y<=x: continue
            if cur and x<=cur[1]: cur=(cur[0],max(cur[1],y))
            else:
                if cur: c+=cur[1]-cur[0]
                cur=(x,y)
        if cur: c+=cur[1]-cur[0]
    adj.append(w-c)
def p(xs,q): xs=sorted(xs); return xs[int(q*len(xs)+.5)-1]
print("p95 %.1f -> at most %.1f without the collision seconds; p50 %.1f -> %.1f"%(p(waits,.95),p(adj,.95),p(waits,.5),p(adj,.5)))
