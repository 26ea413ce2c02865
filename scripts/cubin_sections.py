# Compares two ELF files (ptxas cubins) section by section: one line per section of the first
# whose name starts with PREFIX ("" for all): "same" or "DIFF", its name and both sizes. Used by
# scripts/same-sass.sh.
#   python3 cubin_sections.py before.cubin after.cubin PREFIX
import struct
import sys


def sections(path):
    """Section name -> bytes (empty for SHT_NOBITS) of a little-endian ELF64 file."""
    b = open(path, "rb").read()
    shoff = struct.unpack_from("<Q", b, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", b, shoff + i * shentsize) for i in range(shnum)]
    names = headers[shstrndx][4]
    out = {}
    for h in headers:
        name = b[names + h[0] : b.index(b"\0", names + h[0])].decode()
        out[name] = b[h[4] : h[4] + h[5]] if h[1] != 8 else b""
    return out


a, c = sections(sys.argv[1]), sections(sys.argv[2])
prefix = sys.argv[3] if len(sys.argv) > 3 else ""
for name in sorted(set(a) | set(c)):
    if name.startswith(prefix):
        print("same " if a.get(name) == c.get(name) else "DIFF ", name, len(a.get(name, b"")), len(c.get(name, b"")))
