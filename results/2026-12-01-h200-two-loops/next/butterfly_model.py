#!/usr/bin/env python3
"""Exact model (binary32 additions, round to nearest; no subnormals in the draws) of the
quarter-warp phase 2's column sums (quarter-warp-columns.patch, `column_sums_scattered`)
against ggml's 32-lane butterfly (`warp_sum`): thread m of a column's eight lanes holds the
butterfly lanes m, m+8, m+16, m+24; offsets 16 and 8 are additions inside the thread, offset 4
a two-value reduce-scatter, offsets 2 and 1 the butterfly. Python adds two binary32 values in
binary64 and rounds to binary32: double rounding is exact for + at 53 >= 2*24 + 2 bits.
With `--plant`, the thread pairs its lanes the wrong way (m with m+8 first): it must mismatch."""
import random
import struct
import sys


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def add(a, b):
    return f32(a + b)


def butterfly(a):
    x = list(a)
    for o in (16, 8, 4, 2, 1):
        x = [add(x[l], x[l ^ o]) for l in range(32)]
    return x


def scattered(a_out, a_kv, plant=False):
    if plant:
        local = lambda a, m: add(add(a[m], a[m + 8]), add(a[m + 16], a[m + 24]))
    else:
        local = lambda a, m: add(add(a[m], a[m + 16]), add(a[m + 8], a[m + 24]))
    c_out = [local(a_out, m) for m in range(8)]
    c_kv = [local(a_kv, m) for m in range(8)]
    w = []
    for m in range(8):
        p = m ^ 4
        keep = c_kv[m] if (m >> 2) & 1 else c_out[m]
        partner_sends = c_out[p] if (p >> 2) & 1 else c_kv[p]
        w.append(add(keep, partner_sends))
    for o in (2, 1):
        w = [add(w[m], w[m ^ o]) for m in range(8)]
    return w


def main():
    plant = "--plant" in sys.argv
    random.seed(1)
    bad = 0
    n = 20000
    for _ in range(n):
        scale = 10.0 ** random.randint(-3, 3)
        a_out = [f32(random.gauss(0, 1) * scale) for _ in range(32)]
        a_kv = [f32(random.gauss(0, 1)) for _ in range(32)]
        ref_out, ref_kv = butterfly(a_out)[0], butterfly(a_kv)[0]
        w = scattered(a_out, a_kv, plant)
        if any(w[m] != ref_out for m in range(4)) or any(w[m] != ref_kv for m in range(4, 8)):
            bad += 1
    print(f"{'planted' if plant else 'patch'}: {bad} of {n} draws differ from warp_sum")
    sys.exit(0 if (bad > 0) == plant else 1)


if __name__ == "__main__":
    main()
