import csv, gzip, sys
f = gzip.open(sys.argv[1], 'rt'); lines = f.read().splitlines()
i = next(k for k,l in enumerate(lines) if l.startswith('"Address"'))
rows = list(csv.reader(lines[i:])); hdr = rows[0]; col = {h:k for k,h in enumerate(hdr)}
def num(x):
    try: return float(x.replace(',',''))
    except: return 0.0
tot=0; exc=0
out=[]
for r in rows[1:]:
    if len(r)!=len(hdr): continue
    s = num(r[col['L2 Theoretical Sectors Global']]); e = num(r[col['L2 Theoretical Sectors Global Excessive']])
    if s>0: out.append((s, e, r[1][:70], int(num(r[col['Instructions Executed']]))))
    tot+=s; exc+=e
print('total sectors', tot, 'MB', tot*32/1e6, 'excessive', exc)
for s,e,src,n in sorted(out, reverse=True)[:int(sys.argv[2]) if len(sys.argv) > 2 else 30]: print(int(s), int(e), n, src)
