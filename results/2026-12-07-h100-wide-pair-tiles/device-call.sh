#!/usr/bin/env bash
# Session 41 (not committed): the wide pair tiles measured (arms base = f8fa07e, wide = a5a9408,
# two rounds), then the whole GPU evidence of a5a9408 with the wide-slots plant.
set -uo pipefail
python3 -c 'import tarfile; tarfile.open("bundle.txz").extractall(".")'
[ -f bundle-plant-wide-slots.txz ] && mkdir -p plant-wide-slots && python3 -c 'import tarfile; tarfile.open("bundle-plant-wide-slots.txz").extractall("plant-wide-slots")'
export PATH="$PATH:/usr/local/cuda/bin"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
t0=$(date +%s)
if [[ $gpu == *H200* ]]; then
  ARMS="base wide" ROUNDS=2 SEQS=1,16,32,64 MODES=decode,mtp3,dflash7 BENCH_EXTRA="--replay half" STREAM_PROBE=1 bash scripts/device-batch-arms.sh > /dev/null 2>&1
else
  ARMS="base wide" ROUNDS=2 SEQS=16,32,64 MODES=mtp3,dflash7 BENCH_EXTRA="--replay half" bash scripts/device-batch-arms.sh > /dev/null 2>&1
fi
spent=$(( $(date +%s) - t0 ))
BENCH=0 RGDN_REPLAY_9B=0 DEADLINE=$(( 560 - spent )) bash scripts/device-batch-final.sh all > /dev/null 2>&1
{ echo "card: $gpu; arms took ${spent} s"; cat "$OUT/arms/summary.txt"; echo; cat "$OUT/final/summary.txt"; } > "$OUT/summary.txt"
tar czf "$OUT/arms.tgz" -C "$OUT/arms" .
rm -rf "$OUT/arms" "$OUT/final"
cat "$OUT/summary.txt"
