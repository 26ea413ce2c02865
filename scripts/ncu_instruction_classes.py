#!/usr/bin/env python3
"""Instruction classes of one kernel from ncu's SASS source page (`ncu --page source --csv
--print-source sass`, gzipped, as scripts/device-diagnose.sh and device-batch-arms.sh save it).

usage: ncu_instruction_classes.py SOURCE_CSV_GZ [TOP_LINES]

Prints the warp instructions executed in all, the stall samples, the SASS lines, the opcodes
(without modifiers) by instructions executed, and with TOP_LINES the lines with the most stall
samples.
"""

import collections
import csv
import gzip
import sys


def main():
    path = sys.argv[1]
    lines = gzip.open(path, "rt").read().splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith('"Address"'))
    rows = list(csv.DictReader(lines[start:]))
    executed = lambda r: int(r["Instructions Executed"] or 0)
    samples = lambda r: int(r["Warp Stall Sampling (All Samples)"] or 0)
    print(path, "instructions executed (warp):", sum(map(executed, rows)), "samples", sum(map(samples, rows)), "sass lines", len(rows))
    ops = collections.Counter()
    for r in rows:
        words = r["Source"].split()
        op = words[1] if words and words[0].startswith("@") and len(words) > 1 else (words[0] if words else "")
        ops[op.split(".")[0]] += executed(r)
    print(ops.most_common(25))
    for r in sorted(rows, key=lambda r: -samples(r))[: int(sys.argv[2]) if len(sys.argv) > 2 else 0]:
        print(r["Address"], r["Source"][:60], executed(r), samples(r))


if __name__ == "__main__":
    main()
