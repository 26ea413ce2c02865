#!/usr/bin/env bash
# One short device call: a planted bug's GPU suite and replay episodes (one plant-NAME.txz,
# must fail), then the replay-mode bench (rollback by replay beside the snapshot step, a = T/2
# and a = T) of bundle.txz and ncu of its replay-verify kernel at n_s = 64, T = 4, a = 2. Everything comes back as r.tgz beside log.txt.
#   run(command="bash scripts/device-bench-replay-plant.sh", carry=["bundle.txz", "plant-NAME.txz"])
set -u
tar xJf bundle.txz
o=$OUT/r; mkdir -p "$o"; export RGDN_REQUIRE_GPU=1 PATH=$PATH:/usr/local/cuda/bin; t0=$(date +%s); L=$o/log.txt
lg() { echo "$1: exit $2 ($(($(date +%s) - t0)) s)" >> "$L"; }
echo "commit $(cat bundle/COMMIT) $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" > "$L"
for p in plant-*.txz; do
  [ -f "$p" ] || continue; n=${p#plant-}; n=${n%.txz}; mkdir -p "p-$n" && xz -dc "$p" | tar xf - -C "p-$n"
  pe=$(cat "p-$n/bundle/ENV" 2>/dev/null)
  env $pe timeout 60 "p-$n/bundle/tests/gpu_ops" "$(cat "p-$n/bundle/FILTER" 2>/dev/null || echo GDN_LAYER_STEP_VS)" > "$o/plant-$n-ops.txt" 2>&1; lg "plant-$n-ops" $?
  [ -x "p-$n/bundle/tests/gpu_replay" ] && { env $pe RGDN_REPLAY_9B=0 timeout 60 "p-$n/bundle/tests/gpu_replay" > "$o/plant-$n-replay.txt" 2>&1; lg "plant-$n-replay" $?; }
done
b() { local name=$1 limit=$2; shift 2; timeout "$limit" bundle/rgdn bench --no-progress --quick --layers 8 "$@" > "$o/$name.txt" 2>&1; lg "$name ($*)" $?; }
b replay-half 120 --seqs 1,16,64 --modes mtp3,dflash7 --replay half
b replay-all 60 --seqs 64 --modes mtp3,dflash7 --replay all
b replay-t16-half 60 --seqs 1,16 --modes t16 --replay half
# An experiment arm (arm-NAME.txz, scripts/arm-bundle.sh) with its bundle/ENV knob off and on,
# A B A B, beside the bundle's own binary.
for a in arm-*.txz; do
  [ -f "$a" ] || continue; n=${a#arm-}; n=${n%.txz}; mkdir -p "a-$n" && tar xJf "$a" -C "a-$n"; ae=$(cat "a-$n/bundle/ENV" 2>/dev/null)
  for r in 1 2; do
    for v in off on; do
      e=; [ $v = on ] && e=$ae
      env $e timeout 50 "a-$n/bundle/rgdn" bench --no-progress --quick --layers 8 --seqs 16,64 --modes mtp3,dflash7 --replay half > "$o/arm-$n-$v-$r.txt" 2>&1; lg "arm $n $v ($e) round $r" $?
    done
  done
done
# ncu of the replay-verify kernel at n_s = 64, T = 4, a = 2 (--clock-control none, always).
k=gated_delta_net_replay_verify
timeout 100 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
  --section WarpStateStats --section SchedulerStats --section InstructionStats --section LaunchStats --print-details all \
  -k "regex:$k" -s 2 -c 1 bundle/rgdn bench --no-progress --quick --seqs 64 --modes mtp3 --layers 2 --rounds 1 --replay half > "$o/ncu-$k.txt" 2>&1; lg ncu $?
timeout 100 ncu --clock-control none --section SourceCounters --section WarpStateStats --page source --csv --print-source sass \
  -k "regex:$k" -s 2 -c 1 bundle/rgdn bench --no-progress --quick --seqs 64 --modes mtp3 --layers 2 --rounds 1 --replay half 2>&1 | gzip > "$o/ncu-$k-source.csv.gz"; lg ncu-source "${PIPESTATUS[0]}"
tar czf "$OUT/r.tgz" -C "$OUT" r; cp "$L" "$OUT/log.txt"; rm -rf "$o"
cat "$OUT/log.txt"
