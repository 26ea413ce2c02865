# Compares two PTX files function by function after renaming virtual registers (%r12 -> %r)
# and labels ($L__BB3_7 -> L): prints each function whose normalised text differs.
#   python3 ptx_alpha_diff.py before.ptx after.ptx
import re, sys
def funcs(p):
    parts = re.split(r'\n(?=\.visible \.entry|\.func|\.visible \.func)', open(p).read())
    out = {}
    for x in parts:
        m = re.match(r'\.(?:visible )?\.?(?:entry|func)\s+(?:\([^)]*\)\s*)?(\w+)', x)
        out[m.group(1) if m else '_head'] = x
    return out
norm = lambda s: [re.sub(r'%(r|rd|p|f|rs|fd)\d+', r'%\1', re.sub(r'\$L__BB\d+_\d+', 'L', l)) for l in s.split('\n')
                  if not l.lstrip().startswith('.reg ')]
a, b = funcs(sys.argv[1]), funcs(sys.argv[2])
differ = [k for k in sorted(set(a) | set(b)) if norm(a.get(k, '')) != norm(b.get(k, ''))]
raw = sum(1 for k in set(a) | set(b) if a.get(k) != b.get(k))
print(f"{len(set(a) | set(b))} functions; {raw} differ as text; {len(differ)} differ after renaming registers and labels (the .reg declarations left out)")
for k in differ:
    print("differs:", k)
