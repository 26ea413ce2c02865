#!/usr/bin/env bash
# [speed] The replay-verify's L2 prefetch of the block ahead, measured: `rgdn bench --replay`
# with RGDN_REPLAY_VERIFY_AHEAD = 0 (none) and other distances, in rounds A B C … A B C …
# on one machine (same call), at n_s = 16 and 64, T = 4 and 8, a = T/2 (and a = T for 0 and the
# default; and with one column group a warp, RGDN_REPLAY_VERIFY_GROUPS=1). Then the replay episodes' 9B shapes alone (RGDN_REPLAY_SEQS=none) with the default
# distance, while the call has time. Everything under $OUT/rv-ahead/ comes back as rv-ahead.tgz
# beside summary.txt.
#   run(command="bash scripts/device-rv-ahead.sh", carry=["bundle.txz"])
set -uo pipefail
cd "$(dirname "$0")/.."
[ -d bundle ] || tar xJf bundle.txz
export PATH="$PATH:/usr/local/cuda/bin" RGDN_REQUIRE_GPU=1
o=${OUT:-bundle/out}/rv-ahead
mkdir -p "$o"
s="$o/summary.txt"
t0=$(date +%s)
el() { echo $(($(date +%s) - t0)); }
{
  echo "date: $(date -u +%FT%TZ)"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | head -1)"
  echo "commit: $(cat bundle/COMMIT)"
} > "$s"
bench() { # name, ahead, replay, seqs, modes
  RGDN_REPLAY_VERIFY_AHEAD=$2 timeout 60 bundle/rgdn bench --no-progress --quick --seqs "$4" --modes "$5" --replay "$3" --out "$o/$1" > "$o/$1.txt" 2>&1
  echo "$1 (ahead $2, a: $3, n_s $4, $5): exit $? at $(el) s" >> "$s"
}
for round in 1 2; do
  for ahead in ${AHEADS:-0 4 8 16}; do bench "half-r$round-a$ahead" "$ahead" half 16,64 mtp3,dflash7; done
done
for ahead in 0 4; do bench "all-a$ahead" "$ahead" all 64 mtp3,dflash7; done
# One column group a warp (twice the blocks, no in-block L2 hint) with and without the prefetch.
for ahead in 0 8; do RGDN_REPLAY_VERIFY_GROUPS=1 bench "g1-a$ahead" "$ahead" half 64 mtp3,dflash7; done
left=$((${DEADLINE:-560} - $(el)))
if [[ $left -gt 60 ]]; then
  RGDN_REPLAY_SEQS=none timeout "$left" bundle/tests/gpu_replay > "$o/gpu_replay-9b.log" 2>&1
  echo "gpu_replay RGDN_REPLAY_SEQS=none (default distance): exit $? at $(el) s" >> "$s"
fi
{
  for f in "$o"/half-*.txt "$o"/all-*.txt "$o"/g1-*.txt; do
    echo "== $(basename "$f" .txt)"
    grep -E '^(MTP|DFlash)|gated_delta_net_replay_verify_f32|^graph span' "$f" | sed 's/  */ /g' | cut -c1-150
  done
  grep -E '^REPLAY EPISODES|FAIL|test result' "$o/gpu_replay-9b.log" 2>/dev/null | cut -c1-300
} >> "$s"
tar czf "${OUT:-bundle/out}/rv-ahead.tgz" -C "$(dirname "$o")" rv-ahead
cp "$s" "${OUT:-bundle/out}/summary.txt"
cat "$s"
