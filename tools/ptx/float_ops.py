#!/usr/bin/env python3
"""Per .entry, the sequence of floating-point instructions (opcode with modifiers; registers
renamed away, immediates kept; inline-asm blocks `{ a; b; }` split into their instructions) of a
PTX file — to show that a change moved no float op: run it on the PTX before and after
(target/debug/build/rgdn-*/out/rgdn.ptx, RGDN_PTX_PATH) and compare with compare_float_ops.py.
Usage: float_ops.py PTX [ENTRY_REGEX]"""
import re, sys
ptx = open(sys.argv[1]).read()
pat = re.compile(sys.argv[2]) if len(sys.argv) > 2 else None
FLOAT = re.compile(r'^(fma|add|sub|mul|div|rcp|rsqrt|sqrt|ex2|lg2|sin|cos|tanh|neg|abs|min|max|cvt|setp|testp|copysign)\.')
FTYPE = re.compile(r'\.(f16|f16x2|bf16|bf16x2|f32|f64|rn|rz|rm|rp|approx|ftz|sat)(\.|$)')
entries = re.split(r'\n\.visible \.entry ', ptx)
for chunk in entries[1:]:
    name = chunk.split('(')[0].strip()
    if pat and not pat.search(name):
        continue
    body = chunk[chunk.find('{'):]
    # cut at the next function (entries are split already; .func bodies follow entries, cut at a top-level '}' line)
    end = re.search(r'\n}\n', body)
    body = body[:end.start()] if end else body
    ops = []
    lines = []
    for line in body.split('\n'):
        t = line.strip()
        if t.startswith('{') or t.endswith('}'):
            t = t.strip('{} ')
            lines.extend(x.strip() + ';' for x in t.split(';') if x.strip())
        else:
            lines.append(t)
    for s in lines:
        if not s or s.startswith('//') or s.startswith('.') or s.endswith(':'):
            continue
        s = re.sub(r'^@!?%p\d+\s+', '', s)
        op = s.split()[0].rstrip(';')
        if not FLOAT.match(op) or not FTYPE.search(op):
            continue
        args = s[len(op):].strip().rstrip(';')
        args = re.sub(r'%[a-z]+\d+', 'R', args)
        ops.append(f'{op} {args}')
    print(f'== {name} ({len(ops)} float ops)')
    for o in ops:
        print('  ' + o)
