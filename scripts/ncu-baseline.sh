#!/usr/bin/env bash
# Baseline: ncu kernel times of the unfused chain (9B) and full sections for GDN / mmvf / concat.
set -uo pipefail
# Use: scripts/gpu-bundle.sh here, then on the H200: bash scripts/ncu-baseline.sh (rgdn at bundle/rgdn)
rgdn=${RGDN_BIN:-bundle/rgdn}
export PATH="$PATH:/usr/local/cuda/bin"
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
which ncu compute-sanitizer | tee -a "$out/gpu.txt"
for m in "1 0" "4 3" "8 7" "16 15"; do set -- $m
  for i in 1 2 3 4 5 6; do
    ncu --clock-control none --metrics gpu__time_duration.sum --csv "$rgdn" layer 9b --tokens $1 --rollback $2 2>/dev/null \
      | grep '^"' | sed "s/^/T$1,/" >> "$out/times.csv"
  done
done
python3 - "$out/times.csv" <<'PY' | tee "$out/times-summary.txt"
import csv, sys, statistics, collections
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    mode, rest = line.split(',', 1)
    row = next(csv.reader([rest]))
    if row[0] == 'ID': continue
    v = float(row[-1].replace(',', ''))
    unit = row[-2]
    v = v / 1000 if unit in ('ns', 'nsecond') else v * 1000 if unit in ('ms', 'msecond') else v
    d[(int(mode[1:]), row[4])].append(v)
for (mode, name), vs in sorted(d.items()):
    print(f"T{mode:<3} {name:34} n={len(vs):3} median={statistics.median(vs):7.2f} us")
PY
ncu --clock-control none --set full -k regex:'gated_delta_net|mul_mat_vec|concat' "$rgdn" layer 9b --tokens 4 --rollback 3 > "$out/ncu-full-t4.txt" 2>&1
ncu --clock-control none --set full -k regex:'gated_delta_net|mul_mat_vec' "$rgdn" layer 9b --tokens 8 --rollback 7 > "$out/ncu-full-t8.txt" 2>&1
ncu --clock-control none --set full -k regex:'mul_mat_vec|concat|softplus|sigmoid|add|mul' "$rgdn" layer 9b --tokens 1 --rollback 0 > "$out/ncu-full-t1.txt" 2>&1
tail -5 "$out/ncu-full-t4.txt"
