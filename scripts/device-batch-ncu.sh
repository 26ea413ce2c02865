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
    timeout 200 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
      --section WarpStateStats --section SchedulerStats --section InstructionStats --section SourceCounters --section LaunchStats \
      --print-details all -k regex:gdn_layer_step_batch -s 2 -c 1 -o "$o/n$n-$m" \
      bundle/rgdn bench --no-progress --quick --seqs "$n" --modes "$m" --layers 2 --rounds 1 > "$o/n$n-$m.log" 2>&1
    echo "ncu n_s=$n $m: exit $?" >> "$o/summary.txt"
    # Reading a saved report back profiles nothing; ncu refuses --clock-control with -i
    # ("Invalid option --clock-control specified for --import": the 14:56 arms call lost its report).
    ncu -i "$o/n$n-$m.ncu-rep" --print-details all > "$o/n$n-$m.txt" 2>&1
    ncu -i "$o/n$n-$m.ncu-rep" --page source --csv --print-source sass > "$o/n$n-$m-source.csv" 2>&1
    grep -E "Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Issued Warp|No Eligible|Executed Ipc|Warp Cycles Per Issued" "$o/n$n-$m.txt" | head -12 >> "$o/summary.txt"
  done
done
tar czf "${OUT:-bundle/out}/ncu.tgz" -C "$o" .
cat "$o/summary.txt"
