#!/usr/bin/env bash
# [overlap] One device call for the overlap pass (programmatic dependent launch of a replay step's
# three launches, docs/rollback.md "the three launches overlapped"): the bench's same-run arms
# (`--replay-arms overlap`: the same replay layer without and with the pass, ABBA rounds) at
# a = T/2 and a = T, then the replay episodes (gpu_replay: `Options::ALL` has the pass, so from 5
# sequences on its replay graphs run overlapped) and compute-sanitizer memcheck on the small
# shape's episodes (about 8 minutes with the defaults), then, with FINAL=1, the whole GPU
# evidence (scripts/device-batch-final.sh) in what is left of BUDGET seconds — better a call of
# its own: `tar xJf bundle.txz && bash scripts/device-batch-final.sh all`. Everything comes back
# as overlap.tgz beside summary.txt.
#   run(command="bash scripts/device-overlap.sh", carry=["bundle.txz"])
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
out=${OUT:-bundle/out}
[ -d bundle ] || tar xJf bundle.txz
export PATH="$PATH:/usr/local/cuda/bin" RGDN_REQUIRE_GPU=1
o="$out/overlap"
mkdir -p "$o"
log() { echo "$1 ($(($(date +%s) - t0)) s)" >> "$o/log.txt"; }
{
  echo "date: $(date -u +%FT%TZ)"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | head -1)"
  echo "commit: $(cat bundle/COMMIT 2>/dev/null || echo unknown)"
} > "$o/log.txt"
# The overlapped replay-verify runs one column group a warp; from H_v·n_s = 1024 on (the 9B's
# n_s = 64) the plain one runs two. `g1`: both arms at one group (RGDN_REPLAY_VERIFY_GROUPS=1),
# which isolates what the overlap itself buys.
# ARMS (default `half all half-g1`) picks the arms; EPISODES=0 / MEMCHECK=0 leave out the episodes
# or the sanitizer, for a call with little device time left.
for arm in ${ARMS:-half all half-g1}; do
  accept=${arm%-g1}; groups=; [ "$arm" = half-g1 ] && groups=1
  RGDN_REPLAY_VERIFY_GROUPS=$groups timeout "${BENCH_TIMEOUT:-100}" bundle/rgdn bench --seqs "${SEQS:-16,64}" \
    --modes "${MODES:-mtp3,dflash7}" --replay "$accept" --replay-arms overlap --rounds "${ROUNDS:-3}" --layers 8 \
    --no-progress --out "$o/bench-$arm" > "$o/bench-$arm.txt" 2>&1
  log "bench --replay $accept --replay-arms overlap ${groups:+(RGDN_REPLAY_VERIFY_GROUPS=1)}: exit $?"
done
if [ "${EPISODES:-1}" = 1 ]; then
  timeout 170 bundle/tests/gpu_replay > "$o/gpu_replay.txt" 2>&1
  log "gpu_replay (9B included): exit $?"
fi
if [ "${MEMCHECK:-1}" = 1 ]; then
  RGDN_REPLAY_9B=0 timeout 110 compute-sanitizer --tool memcheck --error-exitcode 9 bundle/tests/gpu_replay > "$o/memcheck-gpu_replay.txt" 2>&1
  log "memcheck gpu_replay (small shape): exit $?"
fi
left=$((${BUDGET:-570} - ($(date +%s) - t0)))
if [ "${FINAL:-0}" = 1 ]; then
  log "final: deadline $((left - 15)) s"
  OUT="$o" DEADLINE=$((left - 15)) RGDN_REPLAY_9B=0 bash scripts/device-batch-final.sh all > "$o/final-out.txt" 2>&1
  log "final: exit $?"
fi
{
  cat "$o/log.txt"
  grep -hE "REPLAY EPISODES|overlap" "$o/gpu_replay.txt" 2>/dev/null | head -5
  grep -hE "ERROR SUMMARY" "$o/memcheck-gpu_replay.txt" 2>/dev/null | head -2
  for arm in ${ARMS:-half all half-g1}; do echo "== bench $arm"; grep -E "µs|s[0-9]+ " "$o/bench-$arm.txt" | head -40; done
  [ -f "$o/final/summary.txt" ] && cat "$o/final/summary.txt"
} > "$out/summary.txt"
tar czf "$out/overlap.tgz" -C "$out" overlap
rm -rf "$o"
cat "$out/summary.txt"
