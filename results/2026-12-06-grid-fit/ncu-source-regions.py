import csv, gzip, sys
f = gzip.open(sys.argv[1], 'rt'); lines = f.read().splitlines()
i = next(k for k,l in enumerate(lines) if l.startswith('"Address"'))
rows = list(csv.reader(lines[i:])); hdr = rows[0]; data = [r for r in rows[1:] if len(r) == len(hdr)]
col = {h:k for k,h in enumerate(hdr)}
def num(x):
    try: return float(x.replace(',',''))
    except: return 0.0
S='Warp Stall Sampling (All Samples)'; E='Instructions Executed'
tot=sum(num(r[col[S]]) for r in data)
# bucket by execution count segments: print a line per run of rows with same exec count
cur=None; acc=0; start=None; n=0; first=''
base=int(data[0][0],16)
for r in data:
    e=int(num(r[col[E]]))
    if e!=cur:
        if cur is not None and (acc>0 or n>20): print(f"{start-base:6x} n={n:4d} exec={cur:6d} samples={acc/tot*100:5.1f}%  {first[:50]}")
        cur=e; acc=0; start=int(r[0],16); n=0; first=r[1]
    acc+=num(r[col[S]]); n+=1
print(f"{start-base:6x} n={n:4d} exec={cur:6d} samples={acc/tot*100:5.1f}%  {first[:50]}")
