#!/usr/bin/env bash
# Session 35's second call (temporary): the replay bench beside the snapshot step, and the 9B
# replay episode at n_s = 64 (RGDN_REPLAY_SEQS=64: the small shape's n_s = 64 episodes, both 9B
# ones, the plant). On an H200 the bench goes first; on an H100 the episode.
set -uo pipefail
[ -d bundle ] || tar xJf bundle.txz
export PATH="$PATH:/usr/local/cuda/bin" RGDN_REQUIRE_GPU=1
o=$OUT/e; mkdir -p "$o"; t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader; echo "commit: $(cat bundle/COMMIT)"; } > "$o/log.txt"
bench() {
  timeout "$1" bundle/rgdn bench --no-progress --seqs 1,64 --modes decode,mtp3,dflash7 --replay half --rounds 2 --layers 8 --out "$o/replay-half" > "$o/replay-half.txt" 2>&1
  echo "bench --seqs 1,64 --modes decode,mtp3,dflash7 --replay half: exit $? ($(el) s)" >> "$o/log.txt"
  timeout "$2" bundle/rgdn bench --no-progress --seqs 16 --modes mtp3,t16 --replay half --rounds 2 --layers 8 --out "$o/replay-half-16" > "$o/replay-half-16.txt" 2>&1
  echo "bench --seqs 16 --modes mtp3,t16 --replay half: exit $? ($(el) s)" >> "$o/log.txt"
}
episode() {
  RGDN_REPLAY_SEQS=64 timeout "$1" bundle/tests/gpu_replay > "$o/gpu_replay-9b.txt" 2>&1
  echo "gpu_replay RGDN_REPLAY_SEQS=64: exit $? ($(el) s)" >> "$o/log.txt"
}
if grep -q H200 "$o/log.txt"; then bench 170 60; episode $((580 - $(el))); else episode 380; bench $(( (560 - $(el)) * 3 / 4 )) $(( (560 - $(el)) / 4 )); fi
rm -f "$o"/*/*.png "$o"/*/*.svg
cat "$o/log.txt"; grep -hE "^measured" "$o"/replay-half*.txt; grep -E "  ok|FAIL|group|REPLAY" "$o/gpu_replay-9b.txt" | cut -c1-260
