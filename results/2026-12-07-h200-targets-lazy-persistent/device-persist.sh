#!/usr/bin/env bash
# [experiment] One device call for the persistent replay-verify (branch exp-persist): the replay
# step at n_s = 64 (T = 4 and 8) with the plain replay-verify (`def`: the evidence bundle's own
# binary, a = T/2; `all`: a = T), the persistent one (`persist`, `persistall`: the experiment
# binary with RGDN_REPLAY_VERIFY_PERSISTENT=792) and the commit store skipped (`nostore`), in
# ROUNDS rounds; ncu of the replay-verify kernel in `def` and `persist`; then on an H200 the
# open targets' `half` run and the DRAM byte-mix probe (device-targets.sh). Carry bundle.txz and
# arm-{def,all,persist,persistall,nostore}.txz. Everything comes back in at most 4 files.
#   run(command="bash scripts/device-persist.sh", carry=[...])
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin" RGDN_REQUIRE_GPU=1
O=${OUT:-bundle/out}
[ -d bundle ] || python3 -c 'import tarfile; tarfile.open("bundle.txz").extractall(".")'
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "gpu: $gpu"
ARMS=${ARMS:-"def persist nostore all persistall"} SEQS=${SEQS:-64} MODES=${MODES:-mtp3,dflash7} ROUNDS=${ROUNDS:-1} bash scripts/device-batch-arms.sh > /dev/null 2>&1
mv "$O/summary.txt" "$O/arms-summary.txt"
mkdir -p "$O/ncu"
for a in def persist; do
  env $(cat "arm/$a/bundle/ENV" 2>/dev/null) timeout 150 ncu --clock-control none --section SpeedOfLight --section Occupancy \
    --section WarpStateStats --section SchedulerStats --section LaunchStats --section MemoryWorkloadAnalysis \
    --print-details all -k "regex:gated_delta_net_replay_verify" -s 2 -c 1 \
    "arm/$a/bundle/rgdn" bench --no-progress --quick --seqs 64 --modes mtp3 --replay half --layers 2 --rounds 1 > "$O/ncu/ncu-rv-$a.txt" 2>&1
  echo "ncu $a: exit $?" >> "$O/arms-summary.txt"
  grep -E "Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Grid Size|Issued Warp|No Eligible|Warp Cycles Per Issued|Stall Long|Dynamic Shared|Local" "$O/ncu/ncu-rv-$a.txt" | head -14 >> "$O/arms-summary.txt"
done
tar czf "$O/ncu.tgz" -C "$O" ncu && rm -rf "$O/ncu"
if [[ $gpu == *H200* ]] && [ "${TARGETS:-1}" = 1 ]; then
  TARGET_RUNS=${TARGET_RUNS:-half} bash scripts/device-targets.sh > /dev/null 2>&1
  mv "$O/summary.txt" "$O/targets-summary.txt"
fi
cat "$O/arms-summary.txt" "$O/targets-summary.txt" 2>/dev/null
