#!/usr/bin/env bash
# [layer-step] One device call comparing measurement builds of rgdn: the GDN_LAYER_STEP suite
# cases of bundle/ (scripts/gpu-bundle.sh), then `rgdn bench --quick` (warm CUPTI medians, 9B,
# default fusion set, T = 1 / 4 / 8, no graph span) for bundle/rgdn and every variants/rgdn-*
# (bundle-variants.tgz: rgdn binaries of other builds, made with `cargo build --release --bin
# rgdn` and renamed), and the three fused kernels (layer_step off) once for calibration.
#   run(command="bash scripts/device-variants.sh", carry=["bundle.tgz", "bundle-variants.tgz"])
set -uo pipefail
[ -d bundle ] || tar xzf bundle.tgz
[ -f bundle-variants.tgz ] && tar xzf bundle-variants.tgz
export PATH="$PATH:/usr/local/cuda/bin" RGDN_REQUIRE_GPU=1
o=${OUT:-/tmp/out}/variants
mkdir -p "$o"
modes=${MODES:-decode,mtp3,dflash7}
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader; } > "$o/summary.txt" 2>&1
if [ "${OPS:-1}" = 1 ]; then
  timeout 170 bundle/tests/gpu_ops GDN_LAYER_STEP > "$o/ops.log" 2>&1
  echo "gpu_ops GDN_LAYER_STEP: exit $? $(grep -E '^GPU suite:' "$o/ops.log" | tail -1)" >> "$o/summary.txt"
fi
bench() { # name binary fusions
  timeout 120 "$2" bench --quick --no-progress --fusions "$3" --modes "$modes" --graph-layers 0 --out "$o/bench-$1" > "$o/bench-$1.txt" 2>&1
  echo "== $1 ($3): exit $?" >> "$o/summary.txt"
  grep -E "verify —|^chain total|^on/off" "$o/bench-$1.txt" >> "$o/summary.txt"
}
bench main bundle/rgdn default
for v in variants/rgdn-*; do [ -x "$v" ] && bench "$(basename "$v")" "$v" default; done
bench three-kernels bundle/rgdn conv_chain,pair,gate_pair,state_read
tar czf "${OUT:-/tmp/out}/variants.tgz" -C "$(dirname "$o")" variants
cat "$o/summary.txt"
