#!/usr/bin/env bash
# The fusion fuzzer's long run on the GPU machine's CPU cores (no GPU needed): N cases split
# over J processes with disjoint seeds; the summary of each process under $OUT/fuzz/.
#   bash scripts/device-fuzz.sh [cases, default 1000000] [processes, default nproc − 2]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cases=${1:-1000000}
jobs=${2:-$(( $(nproc) > 3 ? $(nproc) - 2 : 1 ))}
o=${OUT:-$root/bundle/out}/fuzz
mkdir -p "$o"
per=$(( (cases + jobs - 1) / jobs ))
for k in $(seq 0 $((jobs - 1))); do
  RGDN_FUZZ_CASES=$per RGDN_FUZZ_SEED=$(( 3000000000 + k * per )) "$root/bundle/tests/fusion_fuzz" --nocapture > "$o/fuzz-$k.log" 2>&1 &
done
wait
python3 - "$o" "$jobs" "$per" <<'PY' | tee "$o/summary.txt"
import glob, re, sys
o, jobs, per = sys.argv[1], sys.argv[2], sys.argv[3]
tot = {"cases": 0, "invalid": 0, "rewrites": 0, "runtime": 0, "layer": 0}
fired, refused, results = {}, {}, []
for f in sorted(glob.glob(o + "/fuzz-*.log")):
    t = open(f).read()
    m = re.search(r"fusion fuzzer: (\d+) cases \((\d+) did not validate unfused\), (\d+) with a rewrite; fused graphs refused at run time: (\d+)", t)
    if m:
        for k, v in zip(["cases", "invalid", "rewrites", "runtime"], m.groups()):
            tot[k] += int(v)
    for name, n, pct in re.findall(r"^  (\w+)\s+fired in\s+(\d+) layer-cases \(([\d.]+) %", t, re.M):
        fired[name] = fired.get(name, 0) + int(n)
        if float(pct) > 0:
            tot["layer"] += 0
    for n, r in re.findall(r"refused\s+(\d+)× (.+)", t):
        refused[r] = refused.get(r, 0) + int(n)
    results += re.findall(r"test result: .*", t)
    if "unsafe rewrite" in t:
        print("UNSAFE REWRITE in", f)
        print("\n".join(l for l in t.splitlines() if "unsafe" in l or l.startswith("seed"))[:4000])
print(f"fusion fuzzer long run: {jobs} processes x {per} cases (seeds from 3000000000)")
print(f"{tot['cases']} cases, {tot['invalid']} did not validate unfused, {tot['rewrites']} with at least one rewrite; fused graphs refused at run time: {tot['runtime']}")
for k, v in fired.items():
    print(f"  {k:<12} fired in {v} layer-cases")
for r, n in sorted(refused.items(), key=lambda x: -x[1])[:30]:
    print(f"  refused {n:>8}x {r}")
print("processes:", len(results), "| passed:", sum("ok." in r for r in results), "| failed:", sum("FAILED" in r for r in results))
PY
