#!/usr/bin/env bash
# [seq-batch] ncu of the batched layer step (always --clock-control none): the SOL, warp-state,
# scheduler, instruction and source-counter sections at the shapes given as SEQS:MODE pairs
# (default 64:mtp3 4:decode), each report's per-SASS-line source page as CSV beside it; one
# archive, ncu.tgz, comes back.
#   run(command="bash scripts/device-batch-ncu.sh 64:mtp3 4:decode", carry=["bundle.tgz"])
set -uo pipefail
cd "$(dirname "$0")/.."
[ -d bundle ] || tar xzf bundle.tgz
export PATH="$PATH:/usr/local/cuda/bin" RGDN_REQUIRE_GPU=1
o=${OUT:-bundle/out}/ncu
mkdir -p "$o"
echo "commit: $(cat bundle/COMMIT)" > "$o/summary.txt"
for shape in "${@:-64:mtp3 4:decode}"; do
  for s in $shape; do
    n=${s%%:*}; m=${s#*:}
    # Each page from its own profiling run, both --clock-control none: ncu refuses the flag on a
    # report import (`-i`), so no report is saved and read back. (Not yet run in this form.)
    timeout 200 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
      --section WarpStateStats --section SchedulerStats --section InstructionStats --section LaunchStats \
      --print-details all -k regex:gdn_layer_step_batch -s 2 -c 1 \
      bundle/rgdn bench --no-progress --quick --seqs "$n" --modes "$m" --layers 2 --rounds 1 > "$o/n$n-$m.txt" 2>&1
    echo "ncu n_s=$n $m: exit $?" >> "$o/summary.txt"
    timeout 200 ncu --clock-control none --section SourceCounters --section WarpStateStats \
      --page source --csv --print-source sass -k regex:gdn_layer_step_batch -s 2 -c 1 \
      bundle/rgdn bench --no-progress --quick --seqs "$n" --modes "$m" --layers 2 --rounds 1 > "$o/n$n-$m-source.csv" 2>&1
    echo "ncu source n_s=$n $m: exit $?" >> "$o/summary.txt"
    grep -E "Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Issued Warp|No Eligible|Executed Ipc|Warp Cycles Per Issued" "$o/n$n-$m.txt" | head -12 >> "$o/summary.txt"
  done
done
tar czf "${OUT:-bundle/out}/ncu.tgz" -C "$o" .
cat "$o/summary.txt"
