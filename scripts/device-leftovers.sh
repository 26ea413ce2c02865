#!/usr/bin/env bash
# [replay] One device call on any card for what the last whole evidence left out, beside an ncu
# look at issue 26's last n_s = 1 gap (the one-launch replay step at n_s = 1, T = 1, a = 0 slower
# than the single-sequence snapshot step though it writes no state): ncu of both kernels there,
# then, side by side, the 9B n_s = 16 layer-step cases under memcheck, the episodes with the
# products as row blocks and with two replay-verify groups a warp, and the overlapped episodes
# under memcheck. Carry bundle.txz (the head's evidence bundle). About 300 s on an H100.
#   run(command="bash scripts/device-leftovers.sh", carry=["bundle.txz"])
set -uo pipefail
cd "$(dirname "$0")/.."
[ -d bundle ] || python3 -c 'import tarfile; tarfile.open("bundle.txz").extractall(".")'
export PATH="$PATH:/usr/local/cuda/bin" RGDN_REQUIRE_GPU=1
o=${OUT:-bundle/out}/leftovers
mkdir -p "$o"
s="$o/summary.txt"
start=$(date +%s)
at() { echo "$(( $(date +%s) - start )) s"; }
{
  echo "date: $(date -u +%FT%TZ)"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | head -1)"
  echo "commit: $(cat bundle/COMMIT 2>/dev/null || echo unknown)"
} > "$s"
for mode in decode mtp3; do
  for kernel in gdn_layer_step_f32_d4 gdn_layer_step_replay_f32_d4; do
    timeout 100 ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
      --section WarpStateStats --section SchedulerStats --print-details all -k "regex:^$kernel\$" -s 2 -c 1 \
      bundle/rgdn bench --no-progress --quick --seqs 1 --modes $mode --replay half --layers 2 --rounds 1 > "$o/ncu-$kernel-n1-$mode.txt" 2>&1
    echo "ncu $kernel n_s=1 $mode: exit $? ($(at))" >> "$s"
    grep -E "^ +(Duration|DRAM Throughput|Achieved Occupancy|Registers Per Thread|Grid Size|Block Limit|Issued Warp|No Eligible|Warp Cycles Per Issued|Dynamic Shared|Theoretical Occ)" "$o/ncu-$kernel-n1-$mode.txt" | head -14 >> "$s"
  done
done
export RGDN_SKIP_PARITY=1
pids=()
bg() { local name=$1; shift; (timeout ${LEFTOVER_TIMEOUT:-330} "$@" > "$o/$name.log" 2>&1; echo "$name: exit $? ($(at))" >> "$o/exits.txt") & pids+=($!); }
bg memcheck-n16 compute-sanitizer --tool memcheck --error-exitcode 9 bundle/tests/gpu_ops "n_t=4,R=3,M=17,read=1,write=1,n_s=16"
RGDN_PAIR_TILES=0 RGDN_REPLAY_9B=0 bg replay-pair-rows bundle/tests/gpu_replay
RGDN_REPLAY_VERIFY_GROUPS=2 RGDN_REPLAY_9B=0 bg replay-rv-groups2 bundle/tests/gpu_replay
RGDN_REPLAY_9B=0 RGDN_REPLAY_SEQS=64 bg memcheck-replay-overlap compute-sanitizer --tool memcheck --error-exitcode 9 bundle/tests/gpu_replay
wait "${pids[@]}"
cat "$o/exits.txt" >> "$s"
for f in "$o"/*.log; do echo "$(basename "$f"): $(grep -E 'test result|ERROR SUMMARY|identical' "$f" | tail -2 | tr '\n' ' ')" >> "$s"; done
tar czf "${OUT:-bundle/out}/leftovers.tgz" -C "$o" .
cp "$s" "${OUT:-bundle/out}/summary.txt"
rm -rf "$o"
cat "${OUT:-bundle/out}/summary.txt"
