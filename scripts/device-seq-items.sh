#!/usr/bin/env bash
# [seq-batch] One device call for the small-batch launch (several sequences on the single-sequence
# entries, `StepShape::split`): same-call benches of the arms, then the whole GPU evidence of the
# bundle's commit (scripts/device-batch-final.sh, with its bench unless BENCH=0). Arms: `new`,
# `sched` and `one` are the bundle's own rgdn with RGDN_BATCH_SEQ_ITEMS=1 / 0 (the
# single-sequence entries forced wherever the flags allow / the batched schedule at every n_s) /
# 1 with RGDN_BATCH_SEQ_GROUPS=1 (one column group a warp); `c4` / `c2` chunks of 16 / 128
# sequences (four chunks at n_s = 64, two at 256); `rows` / `tiles` the products never / always as
# tiles (RGDN_PAIR_TILES=0 / 1); `g1` / `g2` one / two column groups a replay-verify warp
# (RGDN_REPLAY_VERIFY_GROUPS); `def` the defaults; any other arm is arm-NAME.txz
# (scripts/arm-bundle.sh). Each ARMS_k="arms|seqs|modes|rounds" line is one
# scripts/device-batch-arms.sh run; EXTRA_k adds bench arguments to it (e.g. "--replay half");
# NCU_k names the arm its ncu profiles (NCU_KERNELS, NCU_SHAPES, NCU_EXTRA: device-batch-arms.sh).
# FINAL=0 leaves the evidence run out (measurements only). Everything comes back as
# seq-items.tgz beside summary.txt.
#   run(command="ARMS_1='new prev|2,4|decode,3:2|1' bash scripts/device-seq-items.sh", carry=["bundle.txz", "arm-prev.txz"])
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
out=${OUT:-bundle/out}
[ -d bundle ] || tar xJf bundle.txz
# The plants wait until the arms ran (device-batch-arms.sh runs any plant bundle it finds).
mkdir -p later
for p in plant-*.txz; do [ -f "$p" ] && { n=${p#plant-}; xz -dc "$p" | gzip -1 > "later/bundle-plant-${n%.txz}.tgz"; }; done
for a in new:RGDN_BATCH_SEQ_ITEMS=1 sched:RGDN_BATCH_SEQ_ITEMS=0 one:RGDN_BATCH_SEQ_ITEMS=1,RGDN_BATCH_SEQ_GROUPS=1 c4:RGDN_BATCH_CHUNK=16 c2:RGDN_BATCH_CHUNK=128 rows:RGDN_PAIR_TILES=0 tiles:RGDN_PAIR_TILES=1 g1:RGDN_REPLAY_VERIFY_GROUPS=1 g2:RGDN_REPLAY_VERIFY_GROUPS=2 def:; do
  n=${a%%:*}; vars=$(echo "${a#*:}" | tr , ' ')
  mkdir -p "arm/$n/bundle" && cp bundle/rgdn "arm/$n/bundle/"
  echo "$(cat bundle/COMMIT) $vars" > "arm/$n/bundle/COMMIT"
  echo "$vars" > "arm/$n/bundle/ENV"
done
mkdir -p "$out/seq-items"
for k in 1 2 3 4; do
  v=ARMS_$k; [ -n "${!v:-}" ] || continue
  IFS='|' read -r arms seqs modes rounds <<< "${!v}"
  e=EXTRA_$k
  n=NCU_$k
  NCU_ARM="${!n:-}" OUT="$out/seq-items/$k" ARMS="$arms" SEQS="$seqs" MODES="$modes" ROUNDS="$rounds" BENCH_EXTRA="--layers 8 ${!e:-}" \
    timeout "${ARMS_TIMEOUT:-120}" bash scripts/device-batch-arms.sh > /dev/null 2>&1
  echo "arms $k ($arms | $seqs | $modes | $rounds): exit $? ($(($(date +%s) - t0)) s)" >> "$out/seq-items/log.txt"
  # A run cut by ARMS_TIMEOUT leaves its bench running (its own `timeout` outlives the killed
  # script): session 17's n_s = 256 arm ran on beside the next bench and disturbed it.
  pkill -KILL -f 'arm/.*/bundle/rgdn' 2>/dev/null && echo "arms $k: a bench left running, killed" >> "$out/seq-items/log.txt"
done
mv later/bundle-plant-*.tgz . 2>/dev/null
left=$((${BUDGET:-570} - ($(date +%s) - t0)))
echo "final: deadline $((left - 15)) s (its bench, then the correctness runs)" >> "$out/seq-items/log.txt"
if [ "${FINAL:-1}" = 1 ]; then
  OUT="$out/seq-items" DEADLINE=$((left - 15)) RGDN_REPLAY_9B=0 bash scripts/device-batch-final.sh all > "$out/seq-items/final-out.txt" 2>&1
  echo "final: exit $? ($(($(date +%s) - t0)) s)" >> "$out/seq-items/log.txt"
else
  echo "final: left out (FINAL=0)" >> "$out/seq-items/log.txt"
fi
{
  cat "$out/seq-items/log.txt"
  for k in 1 2 3 4; do [ -f "$out/seq-items/$k/summary.txt" ] && grep -E "µs|exit|arm |ncu|Duration|Throughput|Occupancy|Issued|Eligible|Registers" "$out/seq-items/$k/summary.txt"; done
  cat "$out/seq-items/summary.txt"
} > "$out/summary.txt"
tar czf "$out/seq-items.tgz" -C "$out" seq-items
rm -rf "$out/seq-items"
cat "$out/summary.txt"
