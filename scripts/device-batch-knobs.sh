#!/usr/bin/env bash
# [seq-batch] The schedule knobs (measurement-only) at a few shapes: for each "SEQS:MODE" and
# each knob setting "CHUNK/TILE/GROUPS" (- = default), the batched layer step's µs from
# `rgdn bench --quick --layers 2`. One line per run in $OUT/knobs.txt.
#   run(command="bash scripts/device-batch-knobs.sh", carry=["bundle.tgz"])
set -uo pipefail
cd "$(dirname "$0")/.."
[ -d bundle ] || tar xzf bundle.tgz
export RGDN_REQUIRE_GPU=1
o=${OUT:-bundle/out}
shapes=${SHAPES:-"4:decode 4:mtp3 16:mtp3 64:mtp3"}
knobs=${KNOBS:-"-/-/- 0/-/- -/-/2 0/-/2 -/1/- -/-/1"}
echo "commit $(cat bundle/COMMIT)" >> "$o/knobs.txt"
for s in $shapes; do
  n=${s%%:*}; m=${s#*:}
  for k in $knobs; do
    IFS=/ read -r c t g <<< "$k"
    [ "$c" = 0 ] && c=$n
    vars=()
    [ "$c" != - ] && vars+=("RGDN_BATCH_CHUNK=$c")
    [ "$t" != - ] && vars+=("RGDN_BATCH_TILE_SEQS=$t")
    [ "$g" != - ] && vars+=("RGDN_BATCH_GROUPS=$g")
    env "${vars[@]}" timeout 60 bundle/rgdn bench --no-progress --quick --seqs "$n" --modes "$m" --layers 2 > /tmp/k.txt 2>&1
    echo "n_s=$n $m chunk=$c tile=$t groups=$g: $(grep -E 'gdn_layer_step_batch|gdn_layer_step_f32' /tmp/k.txt | head -1 | awk '{print $(NF-1), $NF}')" >> "$o/knobs.txt"
  done
done
cat "$o/knobs.txt"
