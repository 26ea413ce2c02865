#!/usr/bin/env bash
# [seq-batch] Measurement call: the batched layer step's GPU twins (fast correctness), the sweep's
# batched cases, the bench at every n_s, the schedule knobs at two shapes, and ncu's sections of
# one batched launch (--clock-control none: the card's clocks are never touched).
set -uo pipefail
cd "$(dirname "$0")/.."
[ -d bundle ] || tar xzf bundle.tgz
export PATH="$PATH:/usr/local/cuda/bin" RGDN_REQUIRE_GPU=1 RGDN_SKIP_PARITY=1
o=${OUT:-bundle/out}
mkdir -p "$o"
timeout 120 bundle/tests/gpu_ops GDN_LAYER_STEP_VS > "$o/twins.log" 2>&1; echo "twins: exit $? $(grep -E '^GPU suite' "$o/twins.log")"
RGDN_SWEEP_FORWARDS=0 timeout 120 bundle/tests/gpu_sweep > "$o/sweep.log" 2>&1; echo "sweep: exit $? $(grep -E '^SWEEP' "$o/sweep.log" | cut -c1-60)"
grep FAIL "$o/sweep.log" | head -5
b() { timeout 200 bundle/rgdn bench --no-progress --quick "$@" 2>&1; }
b --seqs 1,4,16,64 --modes decode,mtp3,dflash7 --out "$o/bench" > "$o/bench.txt"; sed -n '/per layer step/,/^$/p' "$o/bench.txt"
b --seqs 1,4,16 --modes t16 --out "$o/bench16" > "$o/bench16.txt"; sed -n '/per layer step/,/^$/p' "$o/bench16.txt" | tail -3
for v in "RGDN_BATCH_GROUPS=1" "RGDN_BATCH_CHUNK=2" "RGDN_BATCH_CHUNK=16" "RGDN_BATCH_TILE_SEQS=1" "RGDN_BATCH_TILE_SEQS=8"; do
  env $v timeout 100 bundle/rgdn bench --no-progress --quick --seqs 4,64 --modes decode,mtp3 --layers 8 > "$o/var.txt" 2>&1
  echo "$v: $(sed -n '/per layer step/,/^$/p' "$o/var.txt" | awk 'NR>2 && NF>5 {printf "%s/%s %s; ", $1, $2, $5}')"
done
timeout 150 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section SchedulerStats \
  -k regex:gdn_layer_step_batch -s 2 -c 1 bundle/rgdn bench --no-progress --quick --seqs 64 --modes mtp3 --layers 2 --rounds 1 > "$o/ncu.txt" 2>&1
echo "ncu: exit $?"; grep -E "Duration|DRAM Throughput|Memory Throughput|L2 Hit|Achieved Occupancy|Registers|Eligible Warps|Issued Warp|No Eligible|Stall" "$o/ncu.txt" | head -30
