#!/usr/bin/env bash
# The whole GPU evidence of one commit, in two device calls (each under 10 minutes). Build the
# bundle here first (scripts/gpu-bundle.sh), then on the H200, from the repository root:
#   bash scripts/device-final.sh suite    # every test executable (GPU suite, fusion sweep,
#                                         # 24-layer forwards, CPU tests) + compute-sanitizer
#   bash scripts/device-final.sh speed    # ncu per-kernel table/CSV, fused conv chain vs unfused, rgdn bench
# Everything goes under $OUT/<stage>/, archived as $OUT/<stage>.tgz. ncu always runs with
# --clock-control none: the card's clocks and settings are never touched.
set -uo pipefail
stage=${1:?suite or speed}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export PATH="$PATH:/usr/local/cuda/bin"
o=${OUT:-$root/bundle/out}/$stage
mkdir -p "$o"
rgdn=bundle/rgdn
case $stage in
suite)
  OUT="$o/tests" timeout 300 bash bundle/run-all.sh > "$o/run-all.txt" 2>&1
  echo "run-all exit $?" >> "$o/run-all.txt"
  cp "$o/tests/summary.txt" "$o/summary.txt" 2>/dev/null
  # [layer-step] The sweep again with GDN_LAYER_STEP's grid capped (host knob): several item
  # rounds, blocks running items and groups, several groups per warp.
  for g in 1 3 7 24; do
    RGDN_REQUIRE_GPU=1 RGDN_SWEEP_FORWARDS=0 RGDN_LAYER_STEP_MAX_GRID=$g timeout 120 bundle/tests/gpu_sweep > "$o/sweep-grid$g.log" 2>&1
    echo "gpu_sweep, layer-step grid ≤ $g: exit $? $(grep -E 'SWEEP:' "$o/sweep-grid$g.log" | cut -c1-60)" >> "$o/summary.txt"
  done
  # compute-sanitizer: memcheck on every 4th sweep case and the fused ops' suite cases,
  # racecheck (shared memory) on every 8th sweep case.
  export RGDN_REQUIRE_GPU=1 RGDN_SKIP_PARITY=1 RGDN_SWEEP_FORWARDS=0
  RGDN_SWEEP_STRIDE=4 timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 bundle/tests/gpu_sweep > "$o/memcheck-sweep.log" 2>&1
  echo "memcheck gpu_sweep (every 4th case): exit $?" >> "$o/summary.txt"
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 bundle/tests/gpu_ops GDN_CONV_CHAIN,MUL_MAT_VEC_PAIR,GATED_DELTA_NET_FROM_CACHE,GDN_LAYER_STEP > "$o/memcheck-fused-ops.log" 2>&1
  echo "memcheck gpu_ops GDN_CONV_CHAIN,MUL_MAT_VEC_PAIR(_GATE),GATED_DELTA_NET_FROM_CACHE,GDN_LAYER_STEP: exit $?" >> "$o/summary.txt"
  # [layer-step] racecheck (shared memory) and synccheck (barriers) on the one-launch layer step.
  timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 bundle/tests/gpu_ops GDN_LAYER_STEP_VS_CHAIN > "$o/racecheck-layer-step.log" 2>&1
  echo "racecheck gpu_ops GDN_LAYER_STEP_VS_CHAIN: exit $?" >> "$o/summary.txt"
  timeout 150 compute-sanitizer --tool synccheck --error-exitcode 9 bundle/tests/gpu_ops GDN_LAYER_STEP_VS_CHAIN > "$o/synccheck-layer-step.log" 2>&1
  echo "synccheck gpu_ops GDN_LAYER_STEP_VS_CHAIN: exit $?" >> "$o/summary.txt"
  RGDN_SWEEP_STRIDE=8 timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 bundle/tests/gpu_sweep > "$o/racecheck-sweep.log" 2>&1
  echo "racecheck gpu_sweep (every 8th case): exit $?" >> "$o/summary.txt"
  for f in memcheck-sweep memcheck-fused-ops racecheck-sweep racecheck-layer-step synccheck-layer-step; do
    echo "$f: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|SWEEP:|GPU suite:' "$o/$f.log" | tr '\n' ' ')" >> "$o/summary.txt"
  done
  ;;
speed)
  RGDN_BIN=$rgdn timeout 240 bash scripts/ncu-kernels.sh "$o/ncu" > "$o/ncu-kernels.txt" 2>&1
  echo "ncu-kernels exit $?" >> "$o/summary.txt"
  # The fused conv chain beside the five kernels it replaces, on the suite's 9B/27B cases
  # (each GDN_CONV_CHAIN_VS_UNFUSED case launches the fused kernel, then the unfused chain).
  for i in 1 2 3; do
    RGDN_SKIP_PARITY=1 RGDN_REQUIRE_GPU=1 timeout 60 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
      -k regex:'gdn_conv_chain|get_rows|concat|cpy|ssm_conv|l2_norm' bundle/tests/gpu_ops H_K=16 2>/dev/null | grep '^"' >> "$o/conv-chain.csv"
  done
  python3 - "$o/conv-chain.csv" <<'PY' | tee "$o/conv-chain.txt"
import csv, statistics, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if r and r[0] != "ID"]
by = {}
for r in rows:  # ID, PID, process, host, kernel, context, stream, block, grid, ..., unit, value
    v = float(r[-1].replace(",", "")) / (1000 if r[-2] in ("ns", "nsecond") else 1)
    by.setdefault((int(r[0]), r[4].split("(")[0], r[8]), []).append(v)
# Launch index within the process (the same across the 3 runs), in the suite's case order.
for (i, k, grid), vs in sorted(by.items()):
    print(f"#{i:<4} {k:28} grid {grid:14} n={len(vs):2} median {statistics.median(vs):6.2f} us  min {min(vs):6.2f}  max {max(vs):6.2f}")
PY
  timeout 240 $rgdn bench --no-progress --out "$o/bench" > "$o/bench.txt" 2>&1
  echo "bench exit $?" >> "$o/summary.txt"
  timeout 60 $rgdn > "$o/main-job.txt" 2>&1
  echo "main job exit $?" >> "$o/summary.txt"
  ;;
esac
tar czf "${OUT:-$root/bundle/out}/$stage.tgz" -C "$(dirname "$o")" "$stage" 2>/dev/null
cat "$o/summary.txt" 2>/dev/null
