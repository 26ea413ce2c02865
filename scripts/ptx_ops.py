#!/usr/bin/env python3
"""Per PTX `.entry`: the sequence of floating-point instructions (opcode with modifiers, e.g.
`fma.rn.ftz.f32`), or with --mem the sequence of memory instructions other than `ld.param`.
Diff the output for two builds to show a refactoring left every entry's float arithmetic (or its
memory traffic) unchanged:

    python3 scripts/ptx_ops.py before.ptx > a; python3 scripts/ptx_ops.py after.ptx > b; diff a b

The PTX is the build's `rgdn.ptx` (target/debug/build/rgdn-*/out/, `RGDN_PTX_PATH`)."""
import re
import sys

FLOAT = re.compile(r'\.(f16|f16x2|bf16|bf16x2|f32|f64)\b')


def entries(path, mem):
    out, name, body = {}, None, []
    for line in open(path):
        m = re.match(r'\s*\.visible \.entry (\w+)\(', line)
        if m:
            name, body = m.group(1), []
            continue
        if name is None:
            continue
        if line.startswith('}'):
            out[name], name = body, None
            continue
        s = line.strip()
        if not s or s.startswith(('//', '.', '{', '}')) or s.endswith(':'):
            continue
        s = re.sub(r'^@!?%\w+\s+', '', s)  # predicate guard
        op = s.split()[0].rstrip(';')
        if mem:
            if re.match(r'(ld|st|atom|red)\.', op) and not op.startswith('ld.param'):
                body.append(op)
        elif not op.startswith(('ld.', 'st.', 'mov.')) and FLOAT.search(op):
            body.append(op)
    return out


if __name__ == '__main__':
    args = [a for a in sys.argv[1:] if a != '--mem']
    for name, ops in sorted(entries(args[0], '--mem' in sys.argv).items()):
        print(f'== {name} ({len(ops)})')
        for op in ops:
            print('  ' + op)
