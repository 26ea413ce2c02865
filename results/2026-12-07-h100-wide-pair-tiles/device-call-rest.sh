#!/usr/bin/env bash
# Session 41 (not committed): what call 12's deadline cut from the whole evidence of a5a9408.
set -uo pipefail
python3 -c 'import tarfile; tarfile.open("bundle.txz").extractall(".")'
mkdir -p plant && python3 -c 'import tarfile; tarfile.open("bundle-plant-wide-slots.txz").extractall("plant")'
export PATH="$PATH:/usr/local/cuda/bin" RGDN_REQUIRE_GPU=1 RGDN_SKIP_PARITY=1
o=$OUT/rest; mkdir -p "$o"; t0=$(date +%s)
bg() { local n=$1; shift; (timeout "${LEFT:-230}" "$@" > "$o/$n.log" 2>&1; echo "$n: exit $? ($(( $(date +%s) - t0 )) s)" >> "$o/exits.txt") & }
for j in 0 1 2 3 4 5; do RGDN_OPS_SHARD=$j/6 bg "gpu_ops-$j" bundle/tests/gpu_ops; done
RGDN_REPLAY_9B=0 bg gpu_replay bundle/tests/gpu_replay
bg certificates bundle/tests/certificates
RGDN_PAIR_TILES=1 RGDN_PAIR_TILES_WIDE=1 bg racecheck-pair-tiles-wide compute-sanitizer --tool racecheck --error-exitcode 9 bundle/tests/gpu_ops MUL_MAT_VEC_PAIR_GATE
RGDN_PAIR_TILES=1 RGDN_SWEEP_FORWARDS=0 RGDN_SWEEP_STRIDE=6 bg plant-sweep plant/bundle/tests/gpu_sweep
(for t in gpu_engine errors fusion fusion_fuzz gdn_conv_chain overlap plan reference replay; do
   timeout 200 bundle/tests/$t > "$o/$t.log" 2>&1; echo "$t: exit $? $(grep -E 'test result' "$o/$t.log" | tail -1) ($(( $(date +%s) - t0 )) s)" >> "$o/exits.txt"; done) &
wait
{ cat "$o/exits.txt"; for f in "$o"/gpu_ops-*.log; do echo "$(basename "$f"): $(grep -E '^GPU suite' "$f" | tail -1)"; grep -E '^  FAIL' "$f" | head -3; done
  grep -E '^REPLAY EPISODES' "$o/gpu_replay.log" | cut -c1-200; grep -E '^SWEEP' "$o/plant-sweep.log" | cut -c1-120
  grep -E 'RACECHECK SUMMARY|^GPU suite' "$o/racecheck-pair-tiles-wide.log"; grep -E 'test result' "$o/certificates.log"; } > "$OUT/summary.txt"
tar czf "$OUT/rest.tgz" -C "$o" . ; rm -rf "$o"; cat "$OUT/summary.txt"
