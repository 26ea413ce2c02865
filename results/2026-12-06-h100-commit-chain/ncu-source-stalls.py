import csv, gzip, sys, collections
f = gzip.open(sys.argv[1], 'rt')
lines = f.read().splitlines()
i = next(k for k,l in enumerate(lines) if l.startswith('"Address"'))
rows = list(csv.reader(lines[i:]))
hdr = rows[0]; data = [r for r in rows[1:] if len(r) == len(hdr)]
col = {h:k for k,h in enumerate(hdr)}
def num(x):
    try: return float(x.replace(',',''))
    except: return 0.0
tot = collections.Counter(); inst = 0; samp = 0
stall_cols = [h for h in hdr if h.startswith('stall_') and 'Not Issued' not in h]
for r in data:
    inst += num(r[col['Instructions Executed']]); samp += num(r[col['Warp Stall Sampling (All Samples)']])
    for h in stall_cols: tot[h] += num(r[col[h]])
print('instructions', inst, 'samples', samp, 'n sass', len(data))
for h,v in tot.most_common(12): print(f'{h:28s} {v/samp*100:6.2f}%')
# top instructions by samples
data.sort(key=lambda r: -num(r[col['Warp Stall Sampling (All Samples)']]))
for r in data[:int(sys.argv[2]) if len(sys.argv)>2 else 25]:
    top = sorted(((num(r[col[h]]),h) for h in stall_cols), reverse=True)[:2]
    print(r[0], f"{num(r[col['Warp Stall Sampling (All Samples)']])/samp*100:5.2f}%", r[1][:60], [(h[6:],int(v)) for v,h in top], int(num(r[col['Instructions Executed']])))
