#!/usr/bin/env python3
"""Static SASS statistics of mul_mat_vec kernels (a measuring tool, not the product).

usage: sass_stats.py CUBIN PTXAS_LOG [NAME_REGEX]

Per kernel: registers (from the `ptxas -v` log), global loads by kind, barriers, float fmas,
wide IMADs (64-bit address arithmetic), and for the straight-line regions holding the most
global loads (for our kernels: the full chunk and the predicated partial chunk): how many loads
each issues and in how many latency rounds (min-max over those regions). A round ends where an
instruction reads the result of a load issued since the previous round ended (the warp stalls
there for one memory latency; loads issued before it are in flight together). Fewer rounds per
thread = fewer memory latencies on the kernel's critical path.
"""
import re
import subprocess
import sys

cubin, log = sys.argv[1], sys.argv[2]
want = re.compile(sys.argv[3] if len(sys.argv) > 3 else ".")
cuobjdump = "cuobjdump"
for cand in [__import__("os").environ.get("CUOBJDUMP", "")]:
    if cand:
        cuobjdump = cand

regs = {}
cur = None
for line in open(log):
    m = re.search(r"Compiling entry function '([^']+)'", line)
    if m:
        cur = m.group(1)
    m = re.search(r"Used (\d+) registers", line)
    if m and cur:
        regs[cur] = int(m.group(1))

sass = subprocess.run([cuobjdump, "-sass", cubin], capture_output=True, text=True, check=True).stdout
funcs = {}
name = None
for line in sass.splitlines():
    m = re.match(r"\s+Function : (\S+)", line)
    if m:
        name = m.group(1)
        funcs[name] = []
        continue
    m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
    if m and name:
        funcs[name].append(m.group(2))


def regs_of(tok, width):
    m = re.match(r"-?\|?R(\d+)", tok)
    if not m:
        return []
    return [int(m.group(1)) + i for i in range(width)]


def parse(ins):
    pred = ""
    if ins.startswith("@"):
        pred, ins = ins.split(None, 1)
    parts = ins.split(None, 1)
    op = parts[0]
    ops = [o.strip() for o in parts[1].split(",")] if len(parts) > 1 else []
    return pred, op, ops


def src_regs(ops):
    out = []
    for o in ops:
        for m in re.finditer(r"(?<![A-Z0-9_])R(\d+)(\.64)?", o):
            base = int(m.group(1))
            out += [base, base + 1] if m.group(2) else [base]
    return out


def regions(body):
    cur = []
    for ins in body:
        _, op, _ = parse(ins)
        cur.append(ins)
        if op.startswith(("BRA", "EXIT", "BSYNC", "BAR", "RET", "WARPSYNC")):
            yield cur
            cur = []
    yield cur


def rounds(region):
    outstanding = set()
    loads = rnds = 0
    for ins in region:
        _, op, ops = parse(ins)
        srcs = src_regs(ops[1:]) if ops else []
        if op.startswith("LDG") or op.startswith("STG") or op.startswith("ST"):
            # address registers are sources too
            srcs = src_regs(ops[1:]) if op.startswith("LDG") else src_regs(ops)
        if any(r in outstanding for r in srcs):
            rnds += 1
            outstanding.clear()
        if op.startswith("LDG"):
            width = 4 if ".128" in op else 2 if ".64" in op else 1
            outstanding.update(regs_of(ops[0], width))
            loads += 1
    if outstanding:
        rnds += 1
    return loads, rnds


print(f"{'kernel':<64} {'regs':>4} {'LDG':>4} {'.64':>4} {'.CONST':>6} {'BAR':>4} {'FMA':>4} {'WIDE':>4}  busiest regions: loads/rounds")
for name, body in sorted(funcs.items()):
    if not want.search(name):
        continue
    ops = [parse(i)[1] for i in body]
    ldg = [o for o in ops if o.startswith("LDG")]
    # HFMA2.MMA is the same f16x2 fma on another pipe (ptxas alternates them, for nvcc's code
    # too); `HFMA2.MMA Rx, -RZ, RZ, …` only materialises a constant.
    fma = sum(1 for i in body for _, o, a in [parse(i)] if o.startswith(("FFMA", "HFMA2")) and a[1:3] != ["-RZ", "RZ"])
    wide = sum(1 for o in ops if o.startswith("IMAD.WIDE"))
    stats = [rounds(r) for r in regions(body)]
    most = max((lr[0] for lr in stats), default=0)
    rs = sorted(lr[1] for lr in stats if lr[0] == most) or [0]
    best = (most, f"{rs[0]}" if rs[0] == rs[-1] else f"{rs[0]}-{rs[-1]}")
    print(f"{name[:64]:<64} {regs.get(name, '?'):>4} {len(ldg):>4} {sum('.64' in o for o in ldg):>4} "
          f"{sum('CONSTANT' in o for o in ldg):>6} {sum(o.startswith('BAR') for o in ops):>4} {fma:>4} {wide:>4}  "
          f"{best[0]}/{best[1]}")
