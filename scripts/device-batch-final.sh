#!/usr/bin/env bash
# [seq-batch] The whole GPU evidence of one commit in one device call (under 10 minutes): the bench
# first with the GPU to itself, then every correctness run side by side (the CPU references are
# the long pole, so the GPU suite and the sweep run as interleaved shards, RGDN_OPS_SHARD /
# RGDN_SWEEP_SHARD): the GPU suite (every case), the fusion sweep (every case) and its 24-layer
# forwards, [replay] the replay episodes on the GPU (gpu_replay), every other bundled test
# executable, compute-sanitizer memcheck / racecheck / synccheck on batched cases and
# memcheck / racecheck on the replay ops' cases (GATED_DELTA_NET_REPLAY, and
# GATED_DELTA_NET_REPLAY_VERIFY on its own), a planted bug (bundle-plant-*.tgz, which
# must fail: its GPU suite runs the cases bundle/FILTER names, default GDN_LAYER_STEP_VS, and
# its gpu_replay, when the plant bundle has one, the small-shape episodes)
# and the candle example (bundle-candle.tgz) when carried. Logs under $OUT/final/, summary.txt
# first. ncu is not run here (scripts/device-batch-variants.sh has the sections, always
# --clock-control none).
# WIDE_BENCH=1 adds, in `all`, the bench at n_s = 256 and a `--cold` bench before the correctness runs.
# `recheck` instead of the default `all`: the bench at n_s = 256 alone, then the GPU suite, the sweep,
# the forwards and the other test executables (no plants, sanitizers, candle or n_s ≤ 64 bench).
# Everything under $OUT/final/ comes back as one archive, final.tgz, beside summary.txt (the
# device returns a handful of files per call).
#   run(command="bash scripts/device-batch-final.sh", carry=["bundle.tgz", "bundle-plant-seqrow.tgz", "bundle-candle.tgz", "bundle-kindplant.tgz"])
#   (bundle.txz and bundle-plant-NAME.txz, xz, are taken as well)
set -uo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
[ -d bundle ] || { [ -f bundle.txz ] && python3 -c 'import tarfile; tarfile.open("bundle.txz").extractall(".")'; } || tar xzf bundle.tgz
for t in bundle-plant-*.tgz; do [ -f "$t" ] || continue; n=${t#bundle-plant-}; n=${n%.tgz}; mkdir -p "plant-$n" && tar xzf "$t" -C "plant-$n"; done
# xz plants (`bundle-plant-NAME.txz`: a fifth of the gzip size, where the tree leaves little of
# the 64 MiB carry), through Python's tarfile where the machine has no xz binary.
for t in bundle-plant-*.txz; do [ -f "$t" ] || continue; n=${t#bundle-plant-}; n=${n%.txz}; mkdir -p "plant-$n" && python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$t" "plant-$n"; done
[ -f bundle-candle.tgz ] && tar xzf bundle-candle.tgz
export PATH="$PATH:/usr/local/cuda/bin" RGDN_REQUIRE_GPU=1
o=${OUT:-bundle/out}/final
mkdir -p "$o"
s="$o/summary.txt"
t0=$(date +%s)
at() { echo "$(($(date +%s) - t0)) s"; }
deadline=${DEADLINE:-530}
left() { echo $((deadline - ($(date +%s) - t0))); }
{
  echo "date: $(date -u +%FT%TZ)"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | head -1)"
  echo "commit: $(cat bundle/COMMIT 2>/dev/null || echo unknown)"
  bundle/rgdn info 2>&1 | grep -iE "ptx" | head -2
} > "$s"

# 1. Speed, the GPU to itself (BENCH=0 leaves it out: correctness alone, for a call with little
# device time left, when the speed of the same kernels is measured elsewhere).
if [[ ${BENCH:-1} == 0 ]]; then
echo "bench: left out (BENCH=0)" >> "$s"
elif [[ $what == all ]]; then
timeout 110 bundle/rgdn bench --no-progress --quick --seqs 1,4,16,64 --modes decode,mtp3,dflash7 --out "$o/bench" > "$o/bench.txt" 2>&1
echo "bench --seqs 1,4,16,64 --modes decode,mtp3,dflash7: exit $? ($(at))" >> "$s"
timeout 50 bundle/rgdn bench --no-progress --quick --seqs 1,4,16 --modes t16 --out "$o/bench-t16" > "$o/bench-t16.txt" 2>&1
echo "bench --seqs 1,4,16 --modes t16: exit $? ($(at))" >> "$s"
# [replay] The replay step beside the snapshot step (a = T/2) at issue 26's sequence counts, so
# that every evidence run also refreshes its figures.
timeout 90 bundle/rgdn bench --no-progress --quick --seqs 1,16,64 --modes decode,mtp3,dflash7 --replay half --out "$o/bench-replay" > "$o/bench-replay.txt" 2>&1
echo "bench --replay half --seqs 1,16,64 --modes decode,mtp3,dflash7: exit $? ($(at))" >> "$s"
if [[ -n ${WIDE_BENCH:-} ]]; then
  # n_s = 256 and a cold-cache run (every buffer set evicted from L2 before each launch).
  timeout 110 bundle/rgdn bench --no-progress --quick --seqs 256 --modes decode,mtp3 --layers 8 --out "$o/bench-256" > "$o/bench-256.txt" 2>&1
  echo "bench --seqs 256 --modes decode,mtp3 --layers 8: exit $? ($(at))" >> "$s"
  timeout 60 bundle/rgdn bench --no-progress --quick --cold --seqs 1,4,16,64 --modes mtp3 --out "$o/bench-cold" > "$o/bench-cold.txt" 2>&1
  echo "bench --cold --seqs 1,4,16,64 --modes mtp3: exit $? ($(at))" >> "$s"
fi
else
timeout 100 bundle/rgdn bench --no-progress --quick --seqs 256 --modes decode,mtp3 --layers 8 --out "$o/bench-256" > "$o/bench-256.txt" 2>&1
echo "bench --seqs 256 --modes decode,mtp3 --layers 8: exit $? ($(at))" >> "$s"
fi

# 2. Correctness, side by side.
pids=()
bg() { local name=$1; shift; (timeout "$(left)" "$@" > "$o/$name.log" 2>&1; echo "$name: exit $? ($(at))" >> "$o/exits.txt") & pids+=($!); }
for j in 0 1 2 3 4 5; do RGDN_OPS_SHARD=$j/6 bg "gpu_ops-$j" bundle/tests/gpu_ops; done
for j in 0 1 2 3; do RGDN_SWEEP_FORWARDS=0 RGDN_SWEEP_SHARD=$j/4 bg "gpu_sweep-$j" bundle/tests/gpu_sweep; done
RGDN_SWEEP_FORWARDS=only bg forwards bundle/tests/gpu_sweep
# [replay] The episode certificate on the GPU (about a minute alone; its 9B episodes move 1 GiB
# snapshot caches per step), beside the others rather than in the serial loop below.
bg gpu_replay bundle/tests/gpu_replay
(for t in bundle/tests/*; do
   n=$(basename "$t"); case $n in gpu_ops|gpu_sweep|gpu_replay) continue ;; esac
   timeout "$(left)" "$t" > "$o/$n.log" 2>&1; echo "$n: exit $? $(grep -E 'test result' "$o/$n.log" | tail -1) ($(at))" >> "$o/exits.txt"
 done) & pids+=($!)
export RGDN_SKIP_PARITY=1
if [[ $what == all ]]; then
# compute-sanitizer on batched cases: a 2-sequence step (every GDN_LAYER_STEP check of it),
# and every 50th sweep case (n_s up to 64 among them).
bg memcheck-ops compute-sanitizer --tool memcheck --error-exitcode 9 bundle/tests/gpu_ops "2:0]"
bg racecheck-ops compute-sanitizer --tool racecheck --error-exitcode 9 bundle/tests/gpu_ops "2:0]"
bg synccheck-ops compute-sanitizer --tool synccheck --error-exitcode 9 bundle/tests/gpu_ops "2:0]"
# [replay] GATED_DELTA_NET_REPLAY's suite cases (n_s up to 64, a source row that is also the
# destination) under memcheck and racecheck.
bg memcheck-replay compute-sanitizer --tool memcheck --error-exitcode 9 bundle/tests/gpu_ops GATED_DELTA_NET_REPLAY
bg racecheck-replay compute-sanitizer --tool racecheck --error-exitcode 9 bundle/tests/gpu_ops GATED_DELTA_NET_REPLAY
# [replay] GATED_DELTA_NET_REPLAY_VERIFY's cases (the fused replay + verify: the committed row
# read and written by one thread, the verify's out written while other blocks read the log).
# The filter above is a substring and runs them too; these logs are the fused op's alone.
bg memcheck-replay-verify compute-sanitizer --tool memcheck --error-exitcode 9 bundle/tests/gpu_ops GATED_DELTA_NET_REPLAY_VERIFY
bg racecheck-replay-verify compute-sanitizer --tool racecheck --error-exitcode 9 bundle/tests/gpu_ops GATED_DELTA_NET_REPLAY_VERIFY
# [replay] The conv chain with the window commit (its suite cases: every token-slot count).
bg memcheck-commit compute-sanitizer --tool memcheck --error-exitcode 9 bundle/tests/gpu_ops "CONV_CHAIN(COMMIT"
bg racecheck-commit compute-sanitizer --tool racecheck --error-exitcode 9 bundle/tests/gpu_ops "CONV_CHAIN(COMMIT"
# [replay] GDN_LAYER_STEP_REPLAY (the replay step in one cooperative launch: the replay before
# the readiness wait) under memcheck, racecheck and synccheck: the 4B cases of its two groups
# (filters without commas: RGDN_OPS splits on them).
RGDN_OPS='STEP_REPLAY(4B,PARTS(4B' bg memcheck-replay-step compute-sanitizer --tool memcheck --error-exitcode 9 bundle/tests/gpu_ops
RGDN_OPS='STEP_REPLAY(4B,PARTS(4B' bg racecheck-replay-step compute-sanitizer --tool racecheck --error-exitcode 9 bundle/tests/gpu_ops
RGDN_OPS='STEP_REPLAY(4B,PARTS(4B' bg synccheck-replay-step compute-sanitizer --tool synccheck --error-exitcode 9 bundle/tests/gpu_ops
# [seq-batch] GATED_DELTA_NET_FROM_CACHE's cases (its batched entry from n_s = 2 on: slots over the
# rows read) under memcheck and racecheck, and the 9B n_s = 16 layer-step cases under memcheck.
bg memcheck-from-cache compute-sanitizer --tool memcheck --error-exitcode 9 bundle/tests/gpu_ops GATED_DELTA_NET_FROM_CACHE
bg racecheck-from-cache compute-sanitizer --tool racecheck --error-exitcode 9 bundle/tests/gpu_ops GATED_DELTA_NET_FROM_CACHE
bg memcheck-n16 compute-sanitizer --tool memcheck --error-exitcode 9 bundle/tests/gpu_ops "n_t=4,R=3,M=17,read=1,write=1,n_s=16"
RGDN_SWEEP_FORWARDS=0 RGDN_SWEEP_STRIDE=50 bg memcheck-sweep compute-sanitizer --tool memcheck --error-exitcode 9 bundle/tests/gpu_sweep
# [seq-batch] The launches the defaults leave to some shapes, each forced: the batch-invariance
# cases and every 4th sweep case. The batched schedule at every n_s (RGDN_BATCH_SEQ_ITEMS=0: the
# defaults give n_s ≤ 4 every sequence's own items), with one-row mat-vec items too (the
# defaults: n_s·n_t ≤ 4); every sequence's own items wherever the flags allow
# (RGDN_BATCH_SEQ_ITEMS=1: n_s up to 64 in the sweep's small shapes), the invariance cases with
# one column group a warp (RGDN_BATCH_SEQ_GROUPS=1; the defaults: two from n_s = 2 on), the sweep
# on a grid of 7 blocks (several item rounds, blocks with items and column groups, several
# groups a warp).
RGDN_BATCH_SEQ_ITEMS=0 bg ops-schedule bundle/tests/gpu_ops GDN_LAYER_STEP_BATCH_INVARIANT
RGDN_BATCH_SEQ_ITEMS=0 RGDN_SWEEP_FORWARDS=0 RGDN_SWEEP_STRIDE=4 bg sweep-schedule bundle/tests/gpu_sweep
RGDN_BATCH_SEQ_ITEMS=0 RGDN_BATCH_ONE_ROW=1 bg ops-one-row bundle/tests/gpu_ops GDN_LAYER_STEP_BATCH_INVARIANT
RGDN_BATCH_SEQ_ITEMS=0 RGDN_BATCH_ONE_ROW=1 RGDN_SWEEP_FORWARDS=0 RGDN_SWEEP_STRIDE=4 bg sweep-one-row bundle/tests/gpu_sweep
RGDN_BATCH_SEQ_ITEMS=1 RGDN_BATCH_SEQ_GROUPS=1 bg ops-seq-items bundle/tests/gpu_ops GDN_LAYER_STEP_BATCH_INVARIANT
RGDN_BATCH_SEQ_ITEMS=1 RGDN_LAYER_STEP_MAX_GRID=7 RGDN_SWEEP_FORWARDS=0 RGDN_SWEEP_STRIDE=4 bg sweep-seq-items bundle/tests/gpu_sweep
# [speed] The tiled MUL_MAT_VEC_PAIR(_GATE) entries forced on every pair and pair-gate case (the
# defaults tile from PAIR_TILES_MIN_COLS columns on; the suite's cases have up to 16), in each
# form (the defaults take the wide one where the grid fits one round of them: the suite's
# small grids), under memcheck and racecheck in the wide form, and the replay episodes with
# them never (RGDN_PAIR_TILES=0).
RGDN_PAIR_TILES=1 bg ops-pair-tiles bundle/tests/gpu_ops MUL_MAT_VEC_PAIR
RGDN_PAIR_TILES=1 RGDN_PAIR_TILES_WIDE=0 bg ops-pair-tiles-128 bundle/tests/gpu_ops MUL_MAT_VEC_PAIR
RGDN_PAIR_TILES=1 RGDN_PAIR_TILES_WIDE=1 bg memcheck-pair-tiles-wide compute-sanitizer --tool memcheck --error-exitcode 9 bundle/tests/gpu_ops MUL_MAT_VEC_PAIR_GATE
RGDN_PAIR_TILES=1 RGDN_PAIR_TILES_WIDE=1 bg racecheck-pair-tiles-wide compute-sanitizer --tool racecheck --error-exitcode 9 bundle/tests/gpu_ops MUL_MAT_VEC_PAIR_GATE
# (The 9B episodes once, in gpu_replay above: at n_s = 64 each moves gigabytes a step.)
RGDN_PAIR_TILES=0 RGDN_REPLAY_9B=0 bg replay-pair-rows bundle/tests/gpu_replay
# [replay] GATED_DELTA_NET_REPLAY_VERIFY with two column groups a warp forced on its suite cases
# (the defaults take two only from H_v·n_s = 1024 on; the cases are smaller) and under memcheck
# and racecheck, and the replay episodes with two groups everywhere (the small shapes' defaults
# take one).
RGDN_REPLAY_VERIFY_GROUPS=2 bg ops-rv-groups2 bundle/tests/gpu_ops GATED_DELTA_NET_REPLAY_VERIFY
RGDN_REPLAY_VERIFY_GROUPS=2 bg memcheck-rv-groups2 compute-sanitizer --tool memcheck --error-exitcode 9 bundle/tests/gpu_ops GATED_DELTA_NET_REPLAY_VERIFY
RGDN_REPLAY_VERIFY_GROUPS=2 bg racecheck-rv-groups2 compute-sanitizer --tool racecheck --error-exitcode 9 bundle/tests/gpu_ops GATED_DELTA_NET_REPLAY_VERIFY
RGDN_REPLAY_VERIFY_GROUPS=2 RGDN_REPLAY_9B=0 bg replay-rv-groups2 bundle/tests/gpu_replay
# [overlap] The small shape's episodes at n_s = 64 (their replay steps overlapped: the chain lets
# the products start, the products and the replay-verify start early) under memcheck.
RGDN_REPLAY_9B=0 RGDN_REPLAY_SEQS=64 bg memcheck-replay-overlap compute-sanitizer --tool memcheck --error-exitcode 9 bundle/tests/gpu_replay
# The plants: each must fail.
for d in plant-*/; do
  n=${d#plant-}; n=${n%/}
  # A plant's bundle/ENV (PLANT_ENV of plant-bundle.sh, e.g. a knob forcing the planted path).
  plant_env=$(cat "$d/bundle/ENV" 2>/dev/null)
  RGDN_SWEEP_FORWARDS=0 RGDN_SWEEP_STRIDE=3 bg "plant-$n-sweep" env $plant_env "$d/bundle/tests/gpu_sweep"
  bg "plant-$n-ops" env $plant_env "$d/bundle/tests/gpu_ops" "$(cat "$d/bundle/FILTER" 2>/dev/null || echo GDN_LAYER_STEP_VS)"
  # [replay] A kernel plant in the replay path must fail the episodes too (small shape only).
  [ -x "$d/bundle/tests/gpu_replay" ] && RGDN_REPLAY_9B=0 bg "plant-$n-replay" env $plant_env "$d/bundle/tests/gpu_replay"
done
# A host plant (bundle-kindplant.tgz: gpu_engine built with every launch plain while the recorder
# is off): the oversize cooperative grid's refusal, recorder off, must fail.
[ -f bundle-kindplant.tgz ] && tar xzf bundle-kindplant.tgz && bg kind-plant-engine kind-plant/gpu_engine
[ -x candle/rgdn-candle ] && bg candle candle/rgdn-candle
fi
wait "${pids[@]}"
echo "all runs ended ($(at))" >> "$s"

# 3. Summary.
{
  cat "$o/exits.txt"
  for f in "$o"/gpu_ops-*.log; do echo "$(basename "$f"): $(grep -E '^GPU suite' "$f" | tail -1)"; grep -E '^  FAIL' "$f" | head -5; done
  for f in "$o"/gpu_sweep-*.log "$o"/sweep-*.log "$o"/plant-*-sweep.log; do echo "$(basename "$f"): $(grep -E '^SWEEP' "$f" | cut -c1-70)"; grep FAIL "$f" | head -3 | cut -c1-200; done
  grep -E '^FORWARD' "$o/forwards.log" | cut -c1-150
  grep -E '^REPLAY EPISODES|^  FAIL' "$o/gpu_replay.log" | cut -c1-300
  for f in "$o"/replay-*.log "$o"/plant-*-replay.log; do [ -f "$f" ] && echo "$(basename "$f"): $(grep -E '^REPLAY EPISODES' "$f" | cut -c1-90)"; done
  grep -E 'FAIL|test result' "$o/kind-plant-engine.log" 2>/dev/null | head -5
  tail -n 5 "$o/candle.log" 2>/dev/null
  for f in "$o"/ops-*.log "$o"/plant-*-ops.log; do echo "$(basename "$f"): $(grep -E '^GPU suite' "$f" | tail -1)"; done
  for f in "$o"/*check-*.log; do echo "$(basename "$f"): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK SUMMARY|^GPU suite|^SWEEP' "$f" | cut -c1-80 | tr '\n' ' ')"; done
  sed -n '/per layer step/,/^$/p' "$o"/bench*.txt
  grep -h '^measured' "$o/bench-replay.txt"
} >> "$s" 2>/dev/null
tar czf "${OUT:-bundle/out}/final.tgz" -C "$(dirname "$o")" final
cp "$s" "${OUT:-bundle/out}/summary.txt"
find "$o" -mindepth 1 -delete
cat "${OUT:-bundle/out}/summary.txt"
