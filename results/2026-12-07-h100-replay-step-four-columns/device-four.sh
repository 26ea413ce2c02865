#!/usr/bin/env bash
# [replay] GDN_LAYER_STEP_REPLAY's four-column second phase (the host's rule at one sequence,
# `ops::gdn_layer_step_replay::replay_step_four_column_groups`) in one device call on any card:
# 1. arms, two rounds (the second a = T/2 only): the rule (`four`) against the eight-column items forced
#    (`RGDN_REPLAY_STEP_GROUPS=8`, the kernel's form before), n_s = 1 and 2, T = 1 / 4 / 8 / 16,
#    a = T/2 and a = T, the snapshot step beside each;
# 2. the replay step's GPU checks: its suite groups with the rule and with each form forced at
#    every n_s, the replay episodes (rule and four-column forced), `engine_replay`, `gpu_engine`,
#    memcheck / racecheck / synccheck on its 4B and 9B n_s = 1 cases in the four-column form;
# 3. the plant bundle-plant-four-v.txz (each logged token's v of column 0 for all four columns),
#    whose suite group and episodes must fail.
# Carry bundle.txz and bundle-plant-four-v.txz. About 300 s on an H100.
#   run(command="bash scripts/device-four.sh", carry=["bundle.txz", "bundle-plant-four-v.txz"])
set -uo pipefail
cd "$(dirname "$0")/.."
untar_xz() { tar xJf "$1" -C "$2" 2>/dev/null || python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$1" "$2"; }
[ -d bundle ] || untar_xz bundle.txz .
export PATH="$PATH:/usr/local/cuda/bin" RGDN_REQUIRE_GPU=1
o=${OUT:-bundle/out}/four
mkdir -p "$o"
s="$o/summary.txt"
start=$(date +%s)
at() { echo "$(( $(date +%s) - start )) s"; }
{
  echo "date: $(date -u +%FT%TZ)"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | head -1)"
  echo "commit: $(cat bundle/COMMIT 2>/dev/null || echo unknown)"
} > "$s"
for round in 1 2; do
  for arm in four:4 eight:8; do
    name=${arm%%:*}; groups=${arm#*:}
    # The second round a = T/2 only (the call's time).
    for accept in half $([ "$round" = 1 ] && echo all); do
      r="$name-$accept-$round"
      RGDN_REPLAY_STEP_GROUPS=$groups timeout 90 bundle/rgdn bench --no-progress --quick --seqs 1,2 --modes decode,mtp3,dflash7,t16 --replay $accept --out "$o/$r" > "$o/$r.txt" 2>&1
      echo "$r: exit $? ($(at))" >> "$s"
      sed -n '/per layer step/,/^$/p' "$o/$r.txt" | awk -v a="$r" 'NF == 11 && $1 ~ /^[0-9]+$/ {print a": n_s "$1" T "$2" a "$3" snapshots "$4" µs, replay "$7" µs"}' >> "$s"
    done
  done
done
export RGDN_SKIP_PARITY=1
pids=()
bg() { local name=$1; shift; (timeout ${CHECK_TIMEOUT:-170} "$@" > "$o/$name.log" 2>&1; echo "$name: exit $? ($(at))" >> "$o/exits.txt") & pids+=($!); }
bg ops-rule bundle/tests/gpu_ops GDN_LAYER_STEP_REPLAY
RGDN_REPLAY_STEP_GROUPS=4 bg ops-four bundle/tests/gpu_ops GDN_LAYER_STEP_REPLAY
RGDN_REPLAY_STEP_GROUPS=8 bg ops-eight bundle/tests/gpu_ops GDN_LAYER_STEP_REPLAY
RGDN_REPLAY_9B=0 bg replay-rule bundle/tests/gpu_replay
RGDN_REPLAY_STEP_GROUPS=4 RGDN_REPLAY_9B=0 bg replay-four bundle/tests/gpu_replay
bg engine_replay bundle/tests/engine_replay
bg gpu_engine bundle/tests/gpu_engine
RGDN_REPLAY_STEP_GROUPS=4 RGDN_OPS='STEP_REPLAY(4B,PARTS(4B,STEP_REPLAY(9b' bg memcheck-four compute-sanitizer --tool memcheck --error-exitcode 9 bundle/tests/gpu_ops
RGDN_REPLAY_STEP_GROUPS=4 RGDN_OPS='STEP_REPLAY(4B,PARTS(4B' bg racecheck-four compute-sanitizer --tool racecheck --error-exitcode 9 bundle/tests/gpu_ops
RGDN_REPLAY_STEP_GROUPS=4 RGDN_OPS='STEP_REPLAY(4B,PARTS(4B' bg synccheck-four compute-sanitizer --tool synccheck --error-exitcode 9 bundle/tests/gpu_ops
if [ -f bundle-plant-four-v.txz ]; then
  mkdir -p plant-four-v && untar_xz bundle-plant-four-v.txz plant-four-v
  bg plant-ops plant-four-v/bundle/tests/gpu_ops GDN_LAYER_STEP_REPLAY
  RGDN_REPLAY_9B=0 bg plant-replay plant-four-v/bundle/tests/gpu_replay
fi
wait "${pids[@]}"
sort "$o/exits.txt" >> "$s"
for f in "$o"/*.log; do echo "$(basename "$f"): $(grep -E '^GPU suite|REPLAY EPISODES|test result|ERROR SUMMARY|RACECHECK SUMMARY' "$f" | tail -2 | cut -c1-200 | tr '\n' ' ')" >> "$s"; done
tar czf "${OUT:-bundle/out}/four.tgz" -C "$o" --exclude='*.json' --exclude='*.png' --exclude='*.svg' .
cp "$s" "${OUT:-bundle/out}/summary.txt"
rm -rf "$o"
cat "${OUT:-bundle/out}/summary.txt"
