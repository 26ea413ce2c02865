import struct, sys
import statistics as st
def load(p):
    b=open(p,'rb').read(); return list(struct.unpack('<%dQ'%(len(b)//8), b))
for m,(nt) in [('decode',1),('mtp3',4),('dflash7',8)]:
    v=load(f'{sys.argv[1]}/{m}.bin')
    G=396
    starts=[v[4*b] for b in range(G)]
    t0=min(x for x in starts if x)
    rel=lambda x: (x-t0)/1000 if x else None
    H_v=32; pairs=(nt+1)//2; pair_items=2*H_v*pairs; items=pair_items+64
    S=[rel(v[4*b]) for b in range(G)]
    A=[rel(v[4*b+1]) for b in range(G)]
    W=[rel(v[4*b+2]) for b in range(G)]
    E=[rel(v[4*b+3]) for b in range(G)]
    I=[rel(v[4096+i]) for i in range(items)]
    def q(xs):
        xs=sorted(x for x in xs if x is not None)
        if not xs: return "-"
        return "min %.2f med %.2f p90 %.2f max %.2f (n=%d)"%(xs[0],xs[len(xs)//2],xs[int(len(xs)*.9)],xs[-1],len(xs))
    print(f"== {m}: items {items} (rows {pair_items}, tiles 64)")
    print(" block start ", q(S))
    print(" row items done ", q(I[:pair_items]))
    print(" tile items done", q(I[pair_items:]))
    print(" arrive      ", q(A))
    print(" wait done   ", q(W))
    print(" block end   ", q(E))
    # per item duration: item i is run by block i%G ... first item of block b = b; publish - start
    d=[I[i]-S[i] for i in range(min(items,G)) if I[i] is not None]
    print(" first item publish - its block start: rows", q([I[i]-S[i] for i in range(min(pair_items,G))]), "tiles", q([I[i]-S[i] for i in range(pair_items,min(items,G))]))
    # phase-2 compute: end - wait
    print(" end - wait", q([E[b]-W[b] for b in range(G) if W[b] is not None and E[b] is not None]))
    # globaltimer resolution
    raw=[x for x in starts if x]
    print(" start stamps mod 32:", set(x%32 for x in raw[:50]), " distinct starts", len(set(raw)))
print("---- row item breakdown (relative to item's block start)")
for m,nt in [('decode',1),('mtp3',4),('dflash7',8)]:
    v=load(f'{sys.argv[1]}/{m}.bin')
    G=396; pairs=(nt+1)//2; pair_items=2*32*pairs
    t0=min(v[4*b] for b in range(G) if v[4*b])
    rows=[]
    for i in range(min(pair_items,G)):
        s=[v[6000+i*8+k] for k in range(5)]
        if 0 in s: continue
        bs=v[4*i]
        rows.append([(x-bs)/1000 for x in s]+[(v[4096+i]-bs)/1000])
    import statistics as st
    cols=list(zip(*rows))
    names=['enter','low done','high done','reduced','stored','published']
    print(m, "n=",len(rows), "  ".join("%s %.2f"%(n, st.median(c)) for n,c in zip(names,cols)))
