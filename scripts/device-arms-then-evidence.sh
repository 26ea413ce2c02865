#!/usr/bin/env bash
# One device call for a kernel change that needs both its speed and its correctness measured in
# the one call a session may get: the same-call arms first (scripts/device-batch-arms.sh: each
# arm's `rgdn bench`, the GPU to itself), then the whole GPU evidence of bundle.txz
# (scripts/device-batch-final.sh all with BENCH=0: the GPU suite, the sweep, the forwards, the
# replay episodes, the sanitizers and every carried plant). The plant bundles are set aside
# while the arms run, so that they run once, in the evidence. The arms' files come back as
# arms.tgz and arms-summary.txt, the evidence's as final.tgz and summary.txt.
#   run(command="ARMS='def new' SEQS=1,2 MODES=decode,2:1,mtp3 BENCH_EXTRA='--replay half' bash scripts/device-arms-then-evidence.sh",
#       carry=["bundle.txz", "arm-def.txz", "arm-new.txz", "bundle-plant-NAME.txz"])
# ARMS_LIMIT (default 170 s) bounds the arms, DEADLINE (default 390 s) the evidence's
# correctness runs: together under the call's 600 s. The carry counts the tracked tree as well
# (results/ is most of its 54 MB): where the files do not fit, move results/ out of the
# checkout for the call (no device script reads it) and back after.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-bundle/out}
mkdir -p "$out"
hold=$(mktemp -d)
for t in bundle-plant-*.tgz bundle-plant-*.txz; do [ -f "$t" ] && mv "$t" "$hold/"; done
timeout "${ARMS_LIMIT:-170}" bash scripts/device-batch-arms.sh > "$out/arms-stdout.txt" 2>&1
arms_exit=$?
if [ -d "$out/arms" ]; then
  tar czf "$out/arms.tgz" -C "$out/arms" .
  { cat "$out/arms/summary.txt"; echo "arms: exit $arms_exit (timeout ${ARMS_LIMIT:-170} s)"; } > "$out/arms-summary.txt"
  rm -rf "$out/arms"
fi
rm -f "$out/summary.txt" "$out/arms-stdout.txt"
for t in "$hold"/*; do [ -f "$t" ] && mv "$t" .; done
BENCH=0 RGDN_REPLAY_9B=${RGDN_REPLAY_9B:-0} DEADLINE=${DEADLINE:-390} bash scripts/device-batch-final.sh all > /dev/null 2>&1
cat "$out/arms-summary.txt" "$out/summary.txt" 2>/dev/null
