#!/usr/bin/env bash
# [seq-batch] Same-call A/B of two bundles' batched layer step: bundle-old.tgz (A) against
# bundle.tgz (B), `rgdn bench --quick` at SEQS × MODES, in the order A B A B (each bench a
# separate process), then the schedule knobs (scripts/device-batch-knobs.sh, knob list AB_KNOBS) on B when AB_KNOBS is
# set. Every bench's report under $OUT/ab/, one archive ab.tgz and a summary of the layer
# step's µs per run.
#   run(command="bash scripts/device-batch-ab.sh", carry=["bundle.tgz", "bundle-old.tgz"])
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p old && tar xzf bundle-old.tgz -C old
[ -d bundle ] || tar xzf bundle.tgz
export RGDN_REQUIRE_GPU=1
o=${OUT:-bundle/out}/ab
mkdir -p "$o"
seqs=${SEQS:-1,4,16,64}
modes=${MODES:-decode,mtp3}
{ echo "A: $(cat old/bundle/COMMIT)  B: $(cat bundle/COMMIT)  seqs $seqs modes $modes"; } > "$o/summary.txt"
for round in 1 2; do
  for arm in A B; do
    b=bundle; [ $arm = A ] && b=old/bundle
    timeout 120 $b/rgdn bench --no-progress --quick --seqs "$seqs" --modes "$modes" --out "$o/$arm$round" > "$o/$arm$round.txt" 2>&1
    echo "$arm$round exit $?" >> "$o/summary.txt"
    awk -v a="$arm$round" '/^(decode|MTP|DFlash|T=)/{mode=$0} /gdn_layer_step/{print a": "substr(mode,1,60)" | "$1" "$(NF-1)} /host µs per step, plan once/{print a": "substr(mode,1,60)" | host plan-once "$(NF-1)" "$NF}' "$o/$arm$round.txt" >> "$o/summary.txt"
  done
done
if [ -n "${AB_KNOBS:-}" ]; then OUT="$o" KNOBS="$AB_KNOBS" bash scripts/device-batch-knobs.sh > /dev/null 2>&1; cat "$o/knobs.txt" >> "$o/summary.txt"; fi
tar czf "${OUT:-bundle/out}/ab.tgz" -C "$o" .
cat "$o/summary.txt"
