#!/usr/bin/env bash
# [replay] One device call (about 8 minutes) for GDN_LAYER_STEP_REPLAY (the opt-in `replay_step`
# fusion), built in session 24 without a GPU:
# 1. its GPU suite groups (GDN_LAYER_STEP_REPLAY against the CPU reference fed the GPU's MUFU
#    results, GDN_LAYER_STEP_REPLAY_VS_PARTS against the three launches it replaces, bitwise);
# 2. compute-sanitizer memcheck, racecheck and synccheck on the 4B case of each group (the
#    filter's names hold no comma: RGDN_OPS splits on them);
# 3. the replay episodes on the GPU (small shape: `replay_step` fires at n_s = 1 and 4 in the
#    every-fusion arm, the defaults beside it);
# 4. a planted bug (plant-NAME.txz: `scripts/plant-bundle.sh`; the second phase skipping its
#    readiness wait, `results/2026-12-05-local-replay-step/plant-replay-step-no-wait.patch`):
#    its suite cases must fail (its episodes too with PLANT_REPLAY=1: a skipped wait can hang
#    them past the 90 s limit);
# 5. the one launch against the three (`--replay-arms fusions`) at n_s = 1, 2, 4 (and 8, 16 with
#    the scope knob `RGDN_REPLAY_STEP_MAX_SEQS`), and the
#    replay step (now one launch) against the snapshot step at n_s = 1 and 4 (issue 26: n_s = 1
#    no slower than snapshots), a = T/2 and a = T (the one launch against the three at a = T
#    too with ALL_ARMS=1);
# 6. ncu of the one-launch step at n_s = 1, T = 4 (--clock-control none, always).
# Everything comes back under r/ (written there as it runs: a call cut short keeps what ran).
#   run(command="bash scripts/device-replay-step.sh", carry=["bundle.txz", "plant-replay-step-no-wait.txz"])
set -u
tar xJf bundle.txz
o=$OUT/r; mkdir -p "$o"; export RGDN_REQUIRE_GPU=1 PATH=$PATH:/usr/local/cuda/bin; t0=$(date +%s); L=$o/log.txt
lg() { echo "$1: exit $2 ($(($(date +%s) - t0)) s)" >> "$L"; }
echo "commit $(cat bundle/COMMIT) $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" > "$L"
timeout 150 bundle/tests/gpu_ops GDN_LAYER_STEP_REPLAY > "$o/ops.txt" 2>&1; lg "gpu_ops GDN_LAYER_STEP_REPLAY" $?
b() { local name=$1 limit=$2; shift 2; timeout "$limit" bundle/rgdn bench --no-progress --quick --layers 8 --out "$o/$name" "$@" > "$o/$name.txt" 2>&1; lg "$name ($*)" $?; }
# The speed first (a call cut by the session's device time keeps what is written under $OUT).
b step-vs-three-half 90 --seqs 1,2,4 --modes decode,mtp3,dflash7 --replay half --replay-arms fusions
b step-vs-snapshots-half 90 --seqs 1,4 --modes decode,mtp3,dflash7,t16 --replay half
RGDN_REPLAY_9B=0 timeout 120 bundle/tests/gpu_replay > "$o/replay.txt" 2>&1; lg "gpu_replay (small shape)" $?
for tool in memcheck racecheck synccheck; do
  RGDN_OPS='REPLAY(4B,PARTS(4B' timeout 120 \
    compute-sanitizer --tool "$tool" --error-exitcode 9 bundle/tests/gpu_ops > "$o/sanitizer-$tool.txt" 2>&1; lg "compute-sanitizer $tool" $?
done
for p in plant-*.txz; do
  [ -f "$p" ] || continue; n=${p#plant-}; n=${n%.txz}; mkdir -p "p-$n" && xz -dc "$p" | tar xf - -C "p-$n"
  pe=$(cat "p-$n/bundle/ENV" 2>/dev/null)
  env $pe timeout 90 "p-$n/bundle/tests/gpu_ops" GDN_LAYER_STEP_REPLAY > "$o/plant-$n-ops.txt" 2>&1; lg "plant-$n-ops (must fail)" $?
  [ "${PLANT_REPLAY:-0}" = 1 ] && { env $pe RGDN_REPLAY_9B=0 timeout 90 "p-$n/bundle/tests/gpu_replay" > "$o/plant-$n-replay.txt" 2>&1; lg "plant-$n-replay (must fail)" $?; }
done
[ "${ALL_ARMS:-0}" = 1 ] && b step-vs-three-all 60 --seqs 1,4 --modes mtp3,dflash7 --replay all --replay-arms fusions
# Wider steps in one launch (the knob lifts the fusion's 4-sequence scope; the readiness flags
# still bound it): where the one launch stops paying, for REPLAY_STEP_MAX_SEQS.
(export RGDN_REPLAY_STEP_MAX_SEQS=16; b step-vs-three-wide 90 --seqs 8,16 --modes decode,mtp3 --replay half --replay-arms fusions)
b step-vs-snapshots-all 60 --seqs 1 --modes mtp3,dflash7 --replay all
k=gdn_layer_step_replay
timeout 100 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
  --section WarpStateStats --section SchedulerStats --section LaunchStats --print-details all \
  -k "regex:$k" -s 2 -c 1 bundle/rgdn bench --no-progress --quick --seqs 1 --modes mtp3 --layers 2 --rounds 1 --replay half > "$o/ncu-$k.txt" 2>&1; lg ncu $?
cat "$L"
