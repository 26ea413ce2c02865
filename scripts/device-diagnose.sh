#!/usr/bin/env bash
# [seq-batch] [replay] ncu diagnosis, warm (--cache-control none, --clock-control none), of the
# kernels behind the open targets' slack, in one device call of the carried evidence bundle
# (bundle.txz): GDN_CONV_CHAIN and the pair-gate tiles at n_s = 64, T = 1 (the chain streams at
# about a third of the card's rate there) and T = 4, and the two one-launch layer steps at
# n_s = 1, T = 1 (the replay step's warm-only gap). Each kernel: the sections, then the SASS
# source counters. Then the README's small-batch rows (n_s = 2, 4, 8) on an H200. Everything comes back as
# diag.tgz beside summary.txt.
#   run(command="bash scripts/device-diagnose.sh", carry=["bundle.txz"])
set -uo pipefail
cd "$(dirname "$0")/.."
[ -d bundle ] || python3 -c 'import tarfile; tarfile.open("bundle.txz").extractall(".")'
export PATH="$PATH:/usr/local/cuda/bin" RGDN_REQUIRE_GPU=1
out=${OUT:-bundle/out}
o=$out/diag
mkdir -p "$o"
s="$o/summary.txt"
{
  echo "date: $(date -u +%FT%TZ)"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | head -1)"
  echo "commit: $(cat bundle/COMMIT 2>/dev/null || echo unknown)"
} > "$s"
# name | kernel regex | bench arguments
runs=(
  "chain-n64-decode|^gdn_conv_chain_f32_d4\$|--seqs 64 --modes decode"
  "pair-n64-decode|^mul_mat_vec_pair_tiles_wide_f32\$|--seqs 64 --modes decode"
  "chain-n64-mtp3|^gdn_conv_chain_f32_d4\$|--seqs 64 --modes mtp3"
  "step-n1-decode|^gdn_layer_step_f32_d4\$|--seqs 1 --modes decode --replay half"
  "replay-step-n1-decode|^gdn_layer_step_replay_f32_d4\$|--seqs 1 --modes decode --replay half"
)
for r in "${runs[@]}"; do
  IFS='|' read -r name kernel args <<< "$r"
  # shellcheck disable=SC2086 # the arguments are words
  timeout 150 ncu --clock-control none --cache-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats --print-details all \
    -k "regex:$kernel" -s 3 -c 1 bundle/rgdn bench --no-progress --quick --layers 4 --rounds 1 --graph-layers 0 $args \
    > "$o/$name.txt" 2>&1
  echo "$name ($kernel, $args): exit $?" >> "$s"
  grep -E "^ +(Duration|DRAM Throughput|Memory Throughput|L2 Hit Rate|Achieved Occupancy|Theoretical Occupancy|Registers Per Thread|Grid Size|Block Limit Registers|Issued Warp Per Scheduler|No Eligible|Warp Cycles Per Issued Instruction|Compute \(SM\) Throughput)" "$o/$name.txt" | head -16 >> "$s"
  # shellcheck disable=SC2086
  timeout 150 ncu --clock-control none --cache-control none --section SourceCounters --section WarpStateStats \
    --page source --csv --print-source sass -k "regex:$kernel" -s 3 -c 1 \
    bundle/rgdn bench --no-progress --quick --layers 4 --rounds 1 --graph-layers 0 $args 2>&1 | gzip > "$o/$name-source.csv.gz"
  echo "$name source: exit ${PIPESTATUS[0]}" >> "$s"
done
# The README's rows are the H200's: elsewhere they are skipped (SMALL=1 runs them anyway).
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || [ "${SMALL:-0}" = 1 ]; then
timeout 150 bundle/rgdn bench --no-progress --quick --seqs 2,4,8 --modes decode,mtp3,dflash7 --replay half --out "$o/small-half" > "$o/small-half.txt" 2>&1
echo "small batches (--replay half): exit $?" >> "$s"
timeout 100 bundle/rgdn bench --no-progress --quick --seqs 4 --modes t16 --replay half --out "$o/small-t16" > "$o/small-t16.txt" 2>&1
echo "n_s 4 t16 (--replay half): exit $?" >> "$s"
sed -n '/per layer step/,/^$/p' "$o/small-half.txt" "$o/small-t16.txt" >> "$s"
fi
tar czf "$out/diag.tgz" -C "$o" .
cp "$s" "$out/summary.txt"
rm -rf "$o"
cat "$out/summary.txt"
