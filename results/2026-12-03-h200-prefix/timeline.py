import struct, sys, os, statistics as st
# Reads the per-block timelines the timestamped batched step (timeline-stamps.patch) leaves after
# the readiness state: per block 2 KiB, a header of 16 u64 (start, setup, n, arrive, close, smid,
# prefix stamps 6/7/12/13/14), then records of 4 u64 (meta, begin, ready, end) from u64 16.
# TL_V1=1: the first build's layout (header of 8 u64, records from u64 8, no prefix stamps).
V1 = os.environ.get('TL_V1') == '1'
REC = 8 if V1 else 16
def load(path):
    b = open(path,'rb').read()
    blocks=[]
    for blk in range(len(b)//2048):
        w = struct.unpack_from('<256Q', b, blk*2048)
        if w[0]==0: continue
        n=w[2]; recs=[]
        for i in range(min(n,60 if V1 else 56)):
            meta,t0,tr,t1 = w[REC+4*i:REC+4+4*i]
            recs.append((meta&0xff,(meta>>8)&0xff,meta,t0,tr,t1))
        blocks.append(dict(b=blk,start=w[0],setup=w[1],n=n,arrive=w[3],close=w[4],sm=w[5],recs=recs,fine=[w[6],w[7],w[1],w[12],w[13],w[14]],conv=list(w[240:256])))
    return blocks
def pct(xs,q):
    xs=sorted(xs); return xs[min(len(xs)-1,int(q*len(xs)))] if xs else 0
def summ(path):
    bl=load(path)
    if not bl: print(path,'empty'); return
    t0=min(x['start'] for x in bl)
    # only the last launch: blocks with start within 1 ms of max start
    tmax=max(x['start'] for x in bl)
    bl=[x for x in bl if x['start']>tmax-200000]
    t0=min(x['start'] for x in bl)
    end=max(x['arrive'] for x in bl); close=max(x['close'] for x in bl)
    print(f"== {path}: blocks {len(bl)}  span start→last arrive {(end-t0)/1e3:.2f} µs, close {(close-t0)/1e3:.2f}")
    print(f"  block start skew p50/p90/max {(pct([x['start']-t0 for x in bl],.5))/1e3:.2f}/{pct([x['start']-t0 for x in bl],.9)/1e3:.2f}/{max(x['start']-t0 for x in bl)/1e3:.2f}; setup p50/max {pct([x['setup']-x['start'] for x in bl],.5)/1e3:.2f}/{max(x['setup']-x['start'] for x in bl)/1e3:.2f}")
    if not V1:
        names=['copy+walk(t0)','srcrow(t0)','sync','pre-advance','advance','first-loop']
        print('  prefix stamps p50/max (µs from block start):', '; '.join(f"{nm} {pct([x['fine'][i]-x['start'] for x in bl],.5)/1e3:.2f}/{max(x['fine'][i]-x['start'] for x in bl)/1e3:.2f}" for i,nm in enumerate(names)))
        fb=[x['recs'][0][3]-x['start'] for x in bl if x['recs']]
        print(f"  first item begin p50/max {pct(fb,.5)/1e3:.2f}/{max(fb)/1e3:.2f}")
    kinds={0:'tile',1:'rows',2:'groups'}
    by={}
    for x in bl:
        for (k,c,meta,a,r,e) in x['recs']:
            by.setdefault((k,c),[]).append((a-t0,r-t0,e-t0))
    for (k,c),v in sorted(by.items()):
        d=[e-a for a,r,e in v]; w=[r-a for a,r,e in v]
        print(f"  chunk {c} {kinds[k]:6s} n={len(v):4d} begin min/max {min(a for a,_,_ in v)/1e3:6.2f}/{max(a for a,_,_ in v)/1e3:6.2f} end max {max(e for *_,e in v)/1e3:6.2f}  dur p50/p90/max {pct(d,.5)/1e3:5.2f}/{pct(d,.9)/1e3:5.2f}/{max(d)/1e3:5.2f}" + (f"  wait(begin→ready) p50/max {pct(w,.5)/1e3:5.2f}/{max(w)/1e3:5.2f}  ready min {min(r for _,r,_ in v)/1e3:6.2f}" if k==2 else ""))
    if not V1 and os.environ.get('TL_CONV') == '1':
        # next-timeline-conv-phases.patch: u64 240 + 4i + k, sequence i < 4 of the block's first
        # conv item: k = 0 start, 1 after the CONCAT barrier, 2 after the snapshot rows, 3 after
        # the conv; the sequence ends where the next one starts (the last: at the item's end).
        phases={}
        for x in bl:
            w=x['conv']
            tiles=[r for r in x['recs'] if r[0]==0]
            if not tiles or w[0]==0: continue
            end_item=tiles[0][5]
            for i in range(4):
                st=w[4*i:4*i+4]
                if st[0]==0 or st[0]<x['start']: break
                nxt=w[4*(i+1)] if i<3 and w[4*(i+1)]>=st[0] else end_item
                for k,nm in enumerate(['concat','rows','conv','norms+barrier']):
                    a=st[k]; b=st[k+1] if k<3 else nxt
                    phases.setdefault((i,nm),[]).append(b-a)
        for (i,nm),v in sorted(phases.items()):
            print(f"  conv item sequence {i} {nm:14s} p50/max {pct(v,.5)/1e3:5.2f}/{max(v)/1e3:5.2f} µs (n={len(v)})")
    arr=[x['arrive']-t0 for x in bl]
    print(f"  arrive p10/p50/max {pct(arr,.1)/1e3:.2f}/{pct(arr,.5)/1e3:.2f}/{max(arr)/1e3:.2f}; items per block max {max(x['n'] for x in bl)}")
for p in sys.argv[1:]: summ(p)
