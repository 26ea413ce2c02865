#!/usr/bin/env bash
# One device call that does what the card it gets is good for. First, on any card, the
# "lazy commit" sizing arms (docs: NOTES "Next levers"): the replay step at n_s = 64, T = 4 and 8
# with a = T/2 as built (`def`), with the replay-verify's commit store skipped (`nostore`: the
# step that would not commit; an experiment binary, never for main) and with a = T (`all`: the
# step that would commit after two steps' accepted tokens). Then on an H200 the open speed
# targets (scripts/device-targets.sh with NCU1=1: the targets are set there); on any other card
# the n_s = 1 ncu and what the last whole evidence left out (scripts/device-leftovers.sh).
# ARM_MODES narrows the arms' modes, TARGET_RUNS the targets' runs (device-targets.sh), H200_ONLY=1
# runs nothing on another card. Carry bundle.txz, arm-def.txz, arm-nostore.txz, arm-all.txz.
#   run(command="bash scripts/device-any.sh", carry=["bundle.txz", "arm-def.txz", "arm-nostore.txz", "arm-all.txz"])
set -uo pipefail
cd "$(dirname "$0")/.."
# H200_ONLY=1: on any other card, stop before anything runs (the call then costs only its start).
if [ "${H200_ONLY:-0}" = 1 ] && ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  echo "not an H200 ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)): nothing run (H200_ONLY=1)"
  exit 0
fi
[ -d bundle ] || python3 -c 'import tarfile; tarfile.open("bundle.txz").extractall(".")'
if ls arm-*.txz > /dev/null 2>&1; then
  ARMS=${ARMS:-"def nostore all"} SEQS=${SEQS:-64} MODES=${ARM_MODES:-mtp3,dflash7} ROUNDS=${ROUNDS:-1} bash scripts/device-batch-arms.sh
  mkdir -p "${OUT:-bundle/out}/lazy"
  mv "${OUT:-bundle/out}/arms.tgz" "${OUT:-bundle/out}/lazy/" 2>/dev/null
  mv "${OUT:-bundle/out}/summary.txt" "${OUT:-bundle/out}/lazy/summary.txt" 2>/dev/null
  rm -rf "${OUT:-bundle/out}/arms"
fi
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  NCU1=1 bash scripts/device-targets.sh
else
  LEFTOVER_TIMEOUT=${LEFTOVER_TIMEOUT:-150} bash scripts/device-leftovers.sh
fi
cat "${OUT:-bundle/out}/lazy/summary.txt" 2>/dev/null
