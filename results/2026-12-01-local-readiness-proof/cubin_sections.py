import struct,sys,hashlib
def sections(p):
    b=open(p,'rb').read()
    shoff=struct.unpack_from('<Q',b,0x28)[0]; shentsize,shnum,shstrndx=struct.unpack_from('<HHH',b,0x3A)
    hdr=[struct.unpack_from('<IIQQQQIIQQ',b,shoff+i*shentsize) for i in range(shnum)]
    stro=hdr[shstrndx][4]
    out={}
    for h in hdr:
        name=b[stro+h[0]:b.index(b'\0',stro+h[0])].decode()
        out[name]=b[h[4]:h[4]+h[5]] if h[1]!=8 else b''
    return out
a=sections(sys.argv[1]); c=sections(sys.argv[2])
for k in sorted(a):
    if k.startswith(sys.argv[3]):
        print(('same ' if a[k]==c.get(k) else 'DIFF '), k, len(a[k]), len(c.get(k,b'')))
