#!/usr/bin/env bash
# [seq-batch] [replay] The open speed targets of issues 25 and 26 measured on whatever card the
# call gets (it names it first: the targets are set on the H200, an H100's figures only say where
# a change goes), in one device call of the carried evidence bundle (bundle.txz, its own binary,
# no arm files): the DRAM byte-mix probe (tools/bandwidth/stream_mix.cu), then in ROUNDS rounds
# (default 1) the snapshot step beside the replay step at n_s 1, 16 and 64 (decode, mtp3, dflash7) with the
# accepted count a = T/2 and a = T, and the snapshot step as the one cooperative launch at every
# n_s (RGDN_LAYER_STEP_MAX_SEQS=256: the default's three launches against it), then T = 16 at
# n_s 1 and 16 (a = T/2). One round is about 300 s on an H100 (session 41's arms: about 100 s a
# bench at n_s 16–64); two rounds may not fit one call. Everything comes back as targets.tgz beside
# summary.txt, whose lines are the per-layer-step rows of every run.
#   run(command="bash scripts/device-targets.sh", carry=["bundle.txz"])
set -uo pipefail
cd "$(dirname "$0")/.."
[ -d bundle ] || python3 -c 'import tarfile; tarfile.open("bundle.txz").extractall(".")'
export PATH="$PATH:/usr/local/cuda/bin" RGDN_REQUIRE_GPU=1
o=${OUT:-bundle/out}/targets
mkdir -p "$o"
s="$o/summary.txt"
{
  echo "date: $(date -u +%FT%TZ)"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | head -1)"
  echo "commit: $(cat bundle/COMMIT 2>/dev/null || echo unknown)"
} > "$s"
nvcc -O3 -arch=sm_90 -o /tmp/stream_mix tools/bandwidth/stream_mix.cu > "$o/stream_mix.txt" 2>&1 && timeout 30 /tmp/stream_mix >> "$o/stream_mix.txt" 2>&1
echo "stream probe: exit $?" >> "$s"
# name | environment | bench arguments
runs=(
  "half||--seqs 1,16,64 --modes decode,mtp3,dflash7 --replay half"
  "all||--seqs 1,16,64 --modes decode,mtp3,dflash7 --replay all"
  "one|RGDN_LAYER_STEP_MAX_SEQS=256|--seqs 16,64 --modes mtp3,dflash7 --replay half"
)
for round in $(seq 1 "${ROUNDS:-1}"); do
  for r in "${runs[@]}"; do
    IFS='|' read -r name env args <<< "$r"
    # TARGET_RUNS (names, e.g. "half"): only those runs, and no T = 16 run unless named "t16".
    [ -n "${TARGET_RUNS:-}" ] && [[ " $TARGET_RUNS " != *" $name "* ]] && continue
    # shellcheck disable=SC2086 # the arguments are words
    timeout 150 env $env bundle/rgdn bench --no-progress --quick $args --out "$o/$name-$round" > "$o/$name-$round.txt" 2>&1
    echo "$name round $round ($env $args): exit $?" >> "$s"
    sed -n '/per layer step/,/^$/p' "$o/$name-$round.txt" | awk -v a="$name-$round" 'NF == 11 && $1 ~ /^[0-9]+$/ {print a": n_s "$1" T "$2" a "$3" snapshots "$4" µs, replay "$7" µs"}' >> "$s"
  done
done
if [ -z "${TARGET_RUNS:-}" ] || [[ " $TARGET_RUNS " == *" t16 "* ]]; then
timeout 120 bundle/rgdn bench --no-progress --quick --seqs 1,16 --modes t16 --replay half --out "$o/t16" > "$o/t16.txt" 2>&1
echo "t16 (--replay half): exit $?" >> "$s"
fi
sed -n '/per layer step/,/^$/p' "$o/t16.txt" | awk 'NF == 11 && $1 ~ /^[0-9]+$/ {print "t16: n_s "$1" T "$2" a "$3" snapshots "$4" µs, replay "$7" µs"}' >> "$s"
grep -E "^GPU:|16-byte" "$o/stream_mix.txt" >> "$s"
# NCU1=1: ncu of the two one-launch layer steps at n_s = 1, T = 1 (issue 26's last n_s = 1 gap:
# the replay step, a = 0, slower than the snapshot step though it writes no state), about 60 s.
if [ "${NCU1:-0}" = 1 ]; then
  for kernel in gdn_layer_step_f32_d4 gdn_layer_step_replay_f32_d4; do
    timeout 120 ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
      --section WarpStateStats --section SchedulerStats --print-details all -k "regex:^$kernel\$" -s 2 -c 1 \
      bundle/rgdn bench --no-progress --quick --seqs 1 --modes decode --replay half --layers 2 --rounds 1 > "$o/ncu-$kernel-n1-decode.txt" 2>&1
    echo "ncu $kernel n_s=1 decode: exit $?" >> "$s"
    grep -E "Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Grid Size|Issued Warp|No Eligible|Warp Cycles Per Issued|Dynamic Shared" "$o/ncu-$kernel-n1-decode.txt" | head -12 >> "$s"
  done
fi
# The reports' JSON and plots stay on the machine: the logs hold every figure.
tar czf "${OUT:-bundle/out}/targets.tgz" -C "$o" --exclude='*.json' --exclude='*.png' --exclude='*.svg' .
cp "$s" "${OUT:-bundle/out}/summary.txt"
rm -rf "$o"
cat "${OUT:-bundle/out}/summary.txt"
