#!/usr/bin/env python3
"""Summarise an ncu CSV log of `rgdn bench --manifest`: per-kernel medians.

usage: ncu_summary.py NCU_RAW_CSV MANIFEST_CSV OUT_CSV OUT_MD

ncu's kernels (by ID) are matched one to one with the bench's launch manifest (same order,
same names, checked); warm-up launches are left out. Writes OUT_CSV with the header
`op,config,n_t,columns,dtype,kernel,median_us,samples` (one row per kernel and shape) and
OUT_MD, a table in the format of results/2026-11-30-h200-speed/upstream-ggml.md (rows = ops, columns
n_t = 1/4/8/16; an op with several launches per layer, e.g. the mat-vecs at n_t = 16, is the
sum of their medians).
"""

import collections
import csv
import statistics
import sys

UNIT_TO_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}
HEADER = ["op", "config", "n_t", "columns", "dtype", "kernel", "median_us", "samples"]


def read_ncu(path):
    """Kernel rows of gpu__time_duration.sum, in ID order: (name, µs)."""
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    rows = [r for r in csv.DictReader(lines) if r.get("Metric Name") == "gpu__time_duration.sum"]
    rows.sort(key=lambda r: int(r["ID"]))
    out = []
    for r in rows:
        unit = (r.get("Metric Unit") or "nsecond").strip()
        if unit not in UNIT_TO_US:
            sys.exit(f"unknown ncu unit {unit!r}")
        value = float(r["Metric Value"].replace(",", ""))
        name = r["Kernel Name"].split("(")[0].strip()
        out.append((name, value * UNIT_TO_US[unit]))
    return out


def summarise(ncu_rows, manifest):
    if len(ncu_rows) != len(manifest):
        sys.exit(f"ncu profiled {len(ncu_rows)} kernels, the bench launched {len(manifest)}: cannot match them")
    groups = collections.OrderedDict()
    for (name, us), m in zip(ncu_rows, manifest):
        if name != m["entry"]:
            sys.exit(f"launch {m['index']}: ncu saw {name!r}, the bench launched {m['entry']!r}")
        if m["arm"] not in ("off", "on"):
            continue  # warm-up and graph launches
        role = f" {m['role']}" if m["role"] else ""
        config = f"{m['key']}{role} R={m['rollback']} {m['arm']}"
        key = (m["op"], config, int(m["n_t"]), int(m["columns"]), m["dtype"], m["entry"])
        groups.setdefault(key, {"samples": [], "m": m})["samples"].append(us)
    return groups


def write_csv(groups, path):
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(HEADER)
        for (op, config, n_t, columns, dtype, kernel), g in groups.items():
            w.writerow([op, config, n_t, columns, dtype, kernel, f"{statistics.median(g['samples']):.3f}", len(g["samples"])])


def table(groups):
    """Markdown: one row per (arm, op, role), one column per n_t."""
    cells = collections.OrderedDict()
    widths = set()
    for (op, _config, n_t, _columns, dtype, kernel), g in groups.items():
        m = g["m"]
        what = m["role"] or m["key"]
        row = (m["arm"], op, what, dtype)
        cell = cells.setdefault(row, {}).setdefault(n_t, {"us": 0.0, "launches": 0, "kernels": set()})
        cell["us"] += statistics.median(g["samples"])
        cell["launches"] += 1
        cell["kernels"].add(kernel)
        widths.add(n_t)
    cols = sorted(widths)
    lines = ["| op (one launch unless said) | " + " | ".join(f"n_t = {c}" if i == 0 else str(c) for i, c in enumerate(cols)) + " |"]
    lines.append("|---|" + "---|" * len(cols))
    for (arm, op, what, dtype), by_nt in cells.items():
        kernels = sorted(set().union(*(c["kernels"] for c in by_nt.values())))
        label = f"{op} {what} ({dtype}; `{kernels[0]}`{'…' if len(kernels) > 1 else ''}) [{arm}]"
        vals = []
        for c in cols:
            cell = by_nt.get(c)
            if cell is None:
                vals.append("–")
            elif cell["launches"] > 1:
                vals.append(f"{cell['us']:.2f} ({cell['launches']} launches)")
            else:
                vals.append(f"{cell['us']:.2f}")
        lines.append(f"| {label} | " + " | ".join(vals) + " |")
    return "\n".join(lines) + "\n"


def main(argv):
    if len(argv) != 5:
        sys.exit(__doc__)
    raw, manifest_path, out_csv, out_md = argv[1:]
    with open(manifest_path, newline="") as f:
        manifest = list(csv.DictReader(f))
    groups = summarise(read_ncu(raw), manifest)
    if not groups:
        sys.exit("no timed kernel found")
    write_csv(groups, out_csv)
    head = (
        "Per-kernel GPU time, ncu --clock-control none --metrics gpu__time_duration.sum (L2 flushed before each "
        "launch), median µs over the bench's timed launches; [off] unfused, [on] fused chain.\n\n"
    )
    with open(out_md, "w") as f:
        f.write(head + table(groups))


if __name__ == "__main__":
    main(sys.argv)
