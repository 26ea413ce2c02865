#!/usr/bin/env bash
# [layer-step] One device call for GDN_LAYER_STEP work: its GPU suite cases, `rgdn bench` with
# every fusion on (the layer step fires at n_t ≤ 8), and ncu's full sections plus per-SASS
# samples of the layer-step kernel. Carry bundle.tgz (scripts/gpu-bundle.sh). ncu runs with
# --clock-control none: the card's clocks and settings are never touched.
#   run(command="bash scripts/device-step-speed.sh [modes]", carry=["bundle.tgz"])
set -uo pipefail
modes=${1:-decode,mtp3,dflash7}
[ -d bundle ] || tar xzf bundle.tgz
export PATH="$PATH:/usr/local/cuda/bin" RGDN_REQUIRE_GPU=1
o=${OUT:-/tmp/out}/step
mkdir -p "$o"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$o/summary.txt" 2>&1
if [ "${OPS:-1}" = 1 ]; then
  timeout 150 bundle/tests/gpu_ops GDN_LAYER_STEP > "$o/ops.log" 2>&1
  echo "gpu_ops GDN_LAYER_STEP: exit $? $(grep -E '^GPU suite:' "$o/ops.log" | tail -1)" >> "$o/summary.txt"
fi
timeout 200 bundle/rgdn bench --no-progress --fusions all --modes "$modes" --out "$o/bench" > "$o/bench.txt" 2>&1
echo "bench exit $?" >> "$o/summary.txt"
if [ "${NCU:-1}" = 1 ]; then
  # The report for the GUI, then the details and per-SASS pages printed by profiling runs of
  # their own: ncu 2025 refuses --clock-control with --import, and every ncu call here carries it.
  prof="ncu --clock-control none --set full --import-source yes -k regex:gdn_layer_step -c 3"
  run_bench="bundle/rgdn bench --quick --no-progress --fusions all --modes mtp3 --graph-layers 0 --out /tmp/ncu-bench"
  timeout 150 $prof -f -o "$o/layer-step" $run_bench > "$o/ncu.log" 2>&1
  echo "ncu exit $?" >> "$o/summary.txt"
  timeout 150 $prof --page details --print-details all $run_bench > "$o/ncu-details.txt" 2>&1
  timeout 150 $prof --page source --csv --print-source sass $run_bench > "$o/ncu-source-sass.csv" 2>&1
fi
tar czf "${OUT:-/tmp/out}/step.tgz" -C "$(dirname "$o")" step
cat "$o/summary.txt"; grep -A40 "per layer" "$o/bench.txt" | head -60
