#!/usr/bin/env bash
# [layer-step] ncu's sections of GDN_LAYER_STEP in every bench mode (T = 1 / 4 / 8 / 16, 9B F32),
# for NOTES.md's "why each target is missed": SpeedOfLight, memory workload, scheduler, warp
# state, occupancy, launch statistics, plus the DRAM / L2 byte counters. Warm caches
# (`--cache-control none`, as the bench's warm medians) and ALWAYS `--clock-control none`: the
# card's clocks and settings are never touched. Two launches per mode (`-c 2`).
#   run(command="bash scripts/device-step-ncu.sh", carry=["bundle.tgz"])
set -uo pipefail
[ -d bundle ] || tar xzf bundle.tgz
export PATH="$PATH:/usr/local/cuda/bin" RGDN_REQUIRE_GPU=1
o=${OUT:-/tmp/out}/ncu
mkdir -p "$o"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$o/summary.txt" 2>&1
sections="--section SpeedOfLight --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section Occupancy --section LaunchStats"
metrics="--metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum,sm__warps_active.avg.per_cycle_active,smsp__issue_active.avg.per_cycle_active"
for mode in ${MODES:-decode mtp3 dflash7 t16}; do
  timeout 140 ncu --clock-control none --cache-control none $sections $metrics -k regex:gdn_layer_step -c 2 \
    bundle/rgdn bench --quick --no-progress --fusions default --modes "$mode" --graph-layers 0 --out "/tmp/ncu-bench-$mode" \
    > "$o/$mode.txt" 2>&1
  echo "ncu $mode: exit $? $(grep -E 'gpu__time_duration.sum' "$o/$mode.txt" | tr -s ' ' | tr '\n' ';')" >> "$o/summary.txt"
done
# Where phase 2's cycles go: PC-sampled warp stalls per SASS instruction (SourceCounters) at
# the modes in STALL_MODES (default T = 4 and 16), one launch each, printed as the source page.
for mode in ${STALL_MODES:-mtp3 t16}; do
  # Each page from its own profiling run, both --clock-control none: ncu refuses the flag on a
  # report import (`-i`), so no report is saved and read back. (Not yet run in this form.)
  timeout 140 ncu --clock-control none --cache-control none --section SourceCounters --section WarpStateStats \
    --section InstructionStats -k regex:gdn_layer_step -c 1 --page source --csv --print-source sass \
    bundle/rgdn bench --quick --no-progress --fusions default --modes "$mode" --graph-layers 0 --out "/tmp/ncu-stall-$mode" \
    > "$o/stalls-$mode-sass.csv" 2> "$o/stalls-$mode.log"
  echo "ncu stalls $mode (source page): exit $? $(wc -l < "$o/stalls-$mode-sass.csv") lines" >> "$o/summary.txt"
  timeout 140 ncu --clock-control none --cache-control none --section SourceCounters --section WarpStateStats \
    --section InstructionStats -k regex:gdn_layer_step -c 1 --page details \
    bundle/rgdn bench --quick --no-progress --fusions default --modes "$mode" --graph-layers 0 --out "/tmp/ncu-stall2-$mode" \
    > "$o/stalls-$mode-details.txt" 2>> "$o/stalls-$mode.log"
  echo "ncu stalls $mode (details page): exit $?" >> "$o/summary.txt"
done
tar czf "${OUT:-/tmp/out}/ncu.tgz" -C "$(dirname "$o")" ncu
cat "$o/summary.txt"
