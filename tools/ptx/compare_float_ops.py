#!/usr/bin/env python3
"""Compares two float_ops.py listings per entry: identical (not printed), PREFIX+ (the old
sequence is a prefix of the new one: only ops appended), NEW, GONE or CHANGED.
Usage: compare_float_ops.py OLD NEW [tail]"""
import sys
def load(f):
    d={};cur=None
    for l in open(f):
        if l.startswith('== '):
            cur=l.split()[1]; d[cur]=[]
        else: d[cur].append(l.strip())
    return d
a,b=load(sys.argv[1]),load(sys.argv[2])
for n in sorted(set(a)|set(b)):
    if n not in a: print('NEW', n, len(b[n])); continue
    if n not in b: print('GONE', n); continue
    if a[n]==b[n]: continue
    if b[n][:len(a[n])]==a[n]: print('PREFIX+', n, len(a[n]), '->', len(b[n]), 'tail:', ' | '.join(b[n][len(a[n]):][:11]) if len(sys.argv)>3 else '')
    else: print('CHANGED', n)
