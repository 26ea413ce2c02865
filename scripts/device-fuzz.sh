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
{
  echo "fusion fuzzer long run: $jobs processes × $per cases, seeds from 3000000000"
  grep -h "fusion fuzzer:\|fired in\|test result" "$o"/fuzz-*.log | sort | uniq -c | sort -rn | head -60
} > "$o/summary.txt"
cat "$o/summary.txt"
