#!/usr/bin/env bash
# [seq-batch] The batched layer step on the H200 in one call: its GPU suite cases (match, twins vs the
# three-kernel and the unfused chain, batch invariance up to 256 sequences), the fusion sweep
# (single- and multi-sequence cases) and the forwards, then `rgdn bench --seqs`. Logs under
# $OUT/batch/. Build first: scripts/gpu-bundle.sh (carry bundle.tgz).
#   bash scripts/device-batch.sh [suite|sweep|bench|all] [bench args...]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[ -d bundle ] || tar xzf bundle.tgz
export PATH="$PATH:/usr/local/cuda/bin" RGDN_REQUIRE_GPU=1 RGDN_SKIP_PARITY=1
o=${OUT:-$root/bundle/out}/batch
mkdir -p "$o"
what=${1:-all}
shift || true
s="$o/summary.txt"
echo "date: $(date -u +%FT%TZ) gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)" >> "$s"
if [[ $what == suite || $what == all ]]; then
  timeout 300 bundle/tests/gpu_ops GDN_LAYER_STEP > "$o/gpu_ops-layer-step.log" 2>&1
  echo "gpu_ops GDN_LAYER_STEP: exit $? $(grep -E '^GPU suite:' "$o/gpu_ops-layer-step.log")" >> "$s"
  grep -E 'FAIL|failed' "$o/gpu_ops-layer-step.log" | head -20 >> "$s"
fi
if [[ $what == sweep || $what == all ]]; then
  timeout 300 bundle/tests/gpu_sweep > "$o/gpu_sweep.log" 2>&1
  echo "gpu_sweep: exit $? $(grep -E '^SWEEP:' "$o/gpu_sweep.log" | cut -c1-80)" >> "$s"
  grep -E '^FORWARD|FAIL' "$o/gpu_sweep.log" | head -30 >> "$s"
fi
if [[ $what == bench || $what == all ]]; then
  timeout 400 bundle/rgdn bench --no-progress --out "$o/bench" "$@" > "$o/bench.txt" 2>&1
  echo "bench $*: exit $?" >> "$s"
  sed -n '/per layer step/,$p' "$o/bench.txt" >> "$s"
fi
tar czf "$o.tgz" -C "$(dirname "$o")" batch
cat "$s"
