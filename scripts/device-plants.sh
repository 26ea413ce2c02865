#!/usr/bin/env bash
# [layer-step] Planted GDN_LAYER_STEP bugs against the GPU evidence: for each bundle-plant-*.tgz (or .txz)
# (scripts/gpu-bundle.sh on a tree with one planted kernel change), the fusion sweep (every
# fusion on, every output and both caches vs unfused) and the GDN_LAYER_STEP suite cases (9B
# and 27B shapes beside the small ones). Each plant must fail at least one of them.
#   run(command="bash scripts/device-plants.sh", carry=["bundle-plant-rows.tgz", ...])
set -uo pipefail
export PATH="$PATH:/usr/local/cuda/bin" RGDN_REQUIRE_GPU=1
o=${OUT:-/tmp/out}/plants
mkdir -p "$o"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$o/summary.txt" 2>&1
for t in bundle-plant-*.tgz bundle-plant-*.txz; do
  [ -f "$t" ] || continue
  name=${t#bundle-plant-}; name=${name%.tgz}; name=${name%.txz}
  mkdir -p "plant-$name"
  case $t in *.txz) python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$t" "plant-$name" ;; *) tar xzf "$t" -C "plant-$name" ;; esac
  RGDN_SWEEP_FORWARDS=0 timeout 120 "plant-$name/bundle/tests/gpu_sweep" > "$o/$name-sweep.log" 2>&1
  echo "plant $name, gpu_sweep: exit $? $(grep -E 'SWEEP:' "$o/$name-sweep.log" | tail -1 | cut -c1-60)" >> "$o/summary.txt"
  # [layer-step] The sweep with the layer step's grid capped (host knob): 3 blocks (several
  # item rounds) and 24 (phase 2 beside idle blocks).
  for g in 3 24; do
    RGDN_SWEEP_FORWARDS=0 RGDN_LAYER_STEP_MAX_GRID=$g timeout 120 "plant-$name/bundle/tests/gpu_sweep" > "$o/$name-sweep-grid$g.log" 2>&1
    echo "plant $name, gpu_sweep (layer-step grid ≤ $g): exit $? $(grep -E 'SWEEP:' "$o/$name-sweep-grid$g.log" | tail -1 | cut -c1-60)" >> "$o/summary.txt"
  done
  [ "${PLANT_OPS:-1}" = 1 ] || continue
  timeout 150 "plant-$name/bundle/tests/gpu_ops" GDN_LAYER_STEP > "$o/$name-ops.log" 2>&1
  echo "plant $name, gpu_ops GDN_LAYER_STEP: exit $? $(grep -E '^GPU suite:' "$o/$name-ops.log" | tail -1)" >> "$o/summary.txt"
done
tar czf "${OUT:-/tmp/out}/plants.tgz" -C "$(dirname "$o")" plants
cat "$o/summary.txt"
