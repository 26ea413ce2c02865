import struct, sys
def load(p):
    b=open(p,'rb').read(); return list(struct.unpack('<%dQ'%(len(b)//8), b))
G=396; H_v=32
for m,nt in [('decode',1),('mtp3',4),('dflash7',8),('t16',16)]:
    v=load(f'{sys.argv[1]}/{m}.bin')
    S=[v[4*b] for b in range(G)]
    t0=min(x for x in S if x)
    rel=lambda x: (x-t0)/1000 if x else None
    pairs=(nt+1)//2; pair_items=2*H_v*pairs; items=pair_items+64
    A=[rel(v[4*b+1]) for b in range(G)]; W=[rel(v[4*b+2]) for b in range(G)]; E=[rel(v[4*b+3]) for b in range(G)]
    I=[rel(v[4096+i]) for i in range(items)]
    def q(xs):
        xs=sorted(x for x in xs if x is not None)
        if not xs: return "-"
        return "min %.2f med %.2f p90 %.2f max %.2f (n=%d)"%(xs[0],xs[len(xs)//2],xs[int(len(xs)*.9)],xs[-1],len(xs))
    print(f"== {m}: items {items} (rows {pair_items}, tiles 64), grid {G}")
    print(" block start    ", q([rel(x) for x in S]))
    print(" row items done ", q(I[:pair_items]))
    print(" tile items done", q(I[pair_items:]))
    print(" arrive         ", q(A))
    p2=[b for b in range(G) if W[b] is not None]
    both=[b for b in p2 if b < items]
    only=[b for b in p2 if b >= items]
    print(" wait done (p2 blocks)", q([W[b] for b in p2]))
    print("   p2 blocks w/ item  ", q([W[b] for b in both]))
    print("   p2 blocks no item  ", q([W[b] for b in only]))
    print(" block end (p2)      ", q([E[b] for b in p2]))
    print("   end w/ item       ", q([E[b] for b in both]))
    print("   end no item       ", q([E[b] for b in only]))
    print(" end - wait          ", q([E[b]-W[b] for b in p2]))
    # latest-ready input per head: compare W with max publish of its items
