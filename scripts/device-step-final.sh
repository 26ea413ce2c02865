#!/usr/bin/env bash
# [layer-step] The speed evidence and the planted-bug check of GDN_LAYER_STEP in one device
# call. Carry bundle.tgz (scripts/gpu-bundle.sh) and, optionally, bundle-plant.tgz (the same
# build with a planted kernel bug). Writes $OUT/step-final.tgz.
set -uo pipefail
export PATH="$PATH:/usr/local/cuda/bin" RGDN_REQUIRE_GPU=1
o=${OUT:-/tmp/out}/step-final
mkdir -p "$o" plant
[ -d bundle ] || tar xzf bundle.tgz
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$o/summary.txt" 2>&1
# The planted bug must fail the sweep (every fusion on, every output and both caches compared).
# Optional: several plants run through scripts/device-plants.sh instead.
if [ -f bundle-plant.tgz ]; then
  tar xzf bundle-plant.tgz -C plant
  RGDN_SWEEP_FORWARDS=0 timeout 150 plant/bundle/tests/gpu_sweep > "$o/plant-sweep.log" 2>&1
  echo "planted layer-step bug, gpu_sweep: exit $? (must be non-zero) $(grep -E 'SWEEP:' "$o/plant-sweep.log" | tail -1)" >> "$o/summary.txt"
  tar czf "${OUT:-/tmp/out}/plant.tgz" -C "$o" plant-sweep.log summary.txt
fi
timeout 200 bundle/rgdn bench --no-progress --out "$o/bench" > "$o/bench.txt" 2>&1
echo "bench (default fusions) exit $?" >> "$o/summary.txt"
timeout 200 bundle/rgdn bench --no-progress --quick --cold --out "$o/bench-cold" > "$o/bench-cold.txt" 2>&1
echo "bench --cold exit $?" >> "$o/summary.txt"
timeout 150 bundle/rgdn bench --no-progress --quick --fusions conv_chain,pair,gate_pair,state_read --modes decode,mtp3,dflash7 --out "$o/bench-3k" > "$o/bench-3k.txt" 2>&1
echo "bench three kernels exit $?" >> "$o/summary.txt"
true

tar czf "${OUT:-/tmp/out}/step-final.tgz" -C "$(dirname "$o")" step-final
cat "$o/summary.txt"
grep -E "verify —|decode —|chain total|graph span" "$o/bench.txt" "$o/bench-cold.txt" "$o/bench-3k.txt"
