#!/usr/bin/env bash
# [seq-batch] Same-call comparison of several builds of the rgdn binary ("arms"), then ncu of one
# arm and the carried plant bundles, in one device call. Each arm is arm-NAME.txz (xz: half gzip's size, and the carry is 64 MiB with the tree) holding
# bundle/rgdn and bundle/COMMIT (scripts/arm-bundle.sh builds one); the arms' benches run in
# rounds, every arm once per round in ARMS order (default: the arm files sorted), each bench a
# separate process (`rgdn bench --quick --seqs $SEQS --modes $MODES`, with the arm's bundle/ENV). NCU_ARM names the arm ncu
# profiles (default: none): each kernel of NCU_KERNELS (name regexes, default
# gdn_layer_step_batch) at NCU_SHAPES (n_s:mode …, default "64:mtp3"), with NCU_EXTRA bench
# arguments (e.g. "--replay half"), always
# --clock-control none. BENCH_EXTRA adds bench arguments (e.g. "--replay half") to every arm, an
# arm's bundle/ARGS its own (e.g. "--fusions conv_chain,pair,gate_pair,state_read": the same
# binary as another arm, another fusion set). STREAM_PROBE=1 first builds and runs the DRAM
# byte-mix probe tools/bandwidth/stream_mix.cu (nvcc; its table in stream_mix.txt). CHECK runs
# each arm's `rgdn check CHECK` (below). Every bundle-plant-NAME.tgz (or .txz) carried runs its GPU suite's layer-step
# twins and every third sweep case, each of which must fail. Everything under $OUT/arms/ comes
# back as arms.tgz beside summary.txt.
#   run(command="ARMS='old new' NCU_ARM=new bash scripts/device-batch-arms.sh", carry=["arm-old.txz", "arm-new.txz"])
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin" RGDN_REQUIRE_GPU=1
o=${OUT:-bundle/out}/arms
mkdir -p "$o"
s="$o/summary.txt"
arms=${ARMS:-$(ls arm-*.txz 2>/dev/null | sed 's/^arm-//; s/\.txz$//' | tr '\n' ' ')}
# xz through tar, or through Python's tarfile where the machine has no xz binary.
untar_xz() { tar xJf "$1" -C "$2" 2>/dev/null || python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$1" "$2"; }
# An arm of the evidence bundle's own binary (bundle/USE, arm-bundle.sh BIN `bundle/rgdn`) needs
# bundle.txz carried beside it.
[ -d bundle ] || { [ -f bundle.txz ] && untar_xz bundle.txz .; }
for a in $arms; do
  mkdir -p "arm/$a" && untar_xz "arm-$a.txz" "arm/$a"
  [ -f "arm/$a/bundle/USE" ] && ln -sf "$PWD/$(cat "arm/$a/bundle/USE")" "arm/$a/bundle/rgdn"
done
{
  echo "date: $(date -u +%FT%TZ)"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
  for a in $arms; do echo "arm $a: $(cat "arm/$a/bundle/COMMIT" 2>/dev/null) $(cat "arm/$a/bundle/ENV" 2>/dev/null) $(cat "arm/$a/bundle/ARGS" 2>/dev/null)"; done
  echo "seqs ${SEQS:-4,16,64} modes ${MODES:-decode,mtp3} rounds ${ROUNDS:-2} extra bench args: ${BENCH_EXTRA:-none}"
} > "$s"
if [[ ${STREAM_PROBE:-0} == 1 ]]; then
  nvcc -O3 -arch=sm_90 -o /tmp/stream_mix tools/bandwidth/stream_mix.cu > "$o/stream_mix.txt" 2>&1 && timeout 30 /tmp/stream_mix >> "$o/stream_mix.txt" 2>&1
  echo "stream probe: exit $?" >> "$s"
fi
for round in $(seq 1 "${ROUNDS:-2}"); do
  for a in $arms; do
    timeout 150 env $(cat "arm/$a/bundle/ENV" 2>/dev/null) "arm/$a/bundle/rgdn" bench --no-progress --quick --seqs "${SEQS:-4,16,64}" --modes "${MODES:-decode,mtp3}" ${BENCH_EXTRA:-} $(cat "arm/$a/bundle/ARGS" 2>/dev/null) \
      --out "$o/$a-$round" > "$o/$a-$round.txt" 2>&1
    echo "$a round $round: exit $?" >> "$s"
    sed -n '/per layer step/,/^$/p' "$o/$a-$round.txt" | awk -v a="$a-$round" 'NF == 11 && $1 ~ /^[0-9]+$/ {print a": n_s "$1" T "$2" a "$3" snapshots "$4" µs, replay "$7" µs"; next} NF > 5 && $1 ~ /^[0-9]+$/ {print a": n_s "$1" T "$2" "$5" µs"}' >> "$s"
  done
done
# CHECK (a `rgdn check` filter, e.g. GDN_CONV_CHAIN): every arm's own binary runs those op-suite
# cases on the GPU, each bit-exact against its CPU reference (an experiment arm's correctness in
# the call that times it).
if [ -n "${CHECK:-}" ]; then
  for a in $arms; do
    timeout 150 "arm/$a/bundle/rgdn" check "$CHECK" > "$o/check-$a.txt" 2>&1
    echo "check $a ($CHECK): exit $? $(grep -E '^total' "$o/check-$a.txt" | tr -s ' ')" >> "$s"
  done
fi
if [ -n "${NCU_ARM:-}" ]; then
  for kernel in ${NCU_KERNELS:-gdn_layer_step_batch}; do
  for shape in ${NCU_SHAPES:-64:mtp3}; do
    n=${shape%%:*}; m=${shape#*:}
    # Each page from its own profiling run, both --clock-control none: ncu refuses the flag on a
    # report import (`-i`), so no report is saved and read back. (Not yet run in this form.)
    bin="arm/$NCU_ARM/bundle/rgdn"
    timeout 200 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
      --section WarpStateStats --section SchedulerStats --section InstructionStats --section LaunchStats \
      --print-details all -k "regex:$kernel" -s 2 -c 1 \
      "$bin" bench --no-progress --quick --seqs "$n" --modes "$m" --layers 2 --rounds 1 ${NCU_EXTRA:-} > "$o/ncu-$kernel-n$n-$m.txt" 2>&1
    echo "ncu $NCU_ARM $kernel n_s=$n $m: exit $?" >> "$s"
    timeout 200 ncu --clock-control none --section SourceCounters --section WarpStateStats \
      --page source --csv --print-source sass -k "regex:$kernel" -s 2 -c 1 \
      "$bin" bench --no-progress --quick --seqs "$n" --modes "$m" --layers 2 --rounds 1 ${NCU_EXTRA:-} 2>&1 | gzip > "$o/ncu-$kernel-n$n-$m-source.csv.gz"
    echo "ncu source $NCU_ARM $kernel n_s=$n $m: exit ${PIPESTATUS[0]}" >> "$s"
    grep -E "Duration|DRAM Throughput|L2 Hit|Achieved Occupancy|Registers Per|Issued Warp|No Eligible|Warp Cycles Per Issued" "$o/ncu-$kernel-n$n-$m.txt" | head -12 >> "$s"
  done
  done
fi
export RGDN_SKIP_PARITY=1
for t in bundle-plant-*.tgz bundle-plant-*.txz; do
  [ -f "$t" ] || continue
  n=${t#bundle-plant-}; n=${n%.tgz}; n=${n%.txz}
  mkdir -p "plant-$n"
  case $t in *.txz) untar_xz "$t" "plant-$n" ;; *) tar xzf "$t" -C "plant-$n" ;; esac
  timeout 150 "plant-$n/bundle/tests/gpu_ops" GDN_LAYER_STEP_VS > "$o/plant-$n-ops.log" 2>&1
  echo "plant $n ops (must fail): exit $? $(grep -E '^GPU suite' "$o/plant-$n-ops.log" | tail -1)" >> "$s"
  RGDN_SWEEP_FORWARDS=0 RGDN_SWEEP_STRIDE=3 timeout 150 "plant-$n/bundle/tests/gpu_sweep" > "$o/plant-$n-sweep.log" 2>&1
  echo "plant $n sweep (must fail): exit $? $(grep -E '^SWEEP' "$o/plant-$n-sweep.log" | cut -c1-80)" >> "$s"
done
tar czf "${OUT:-bundle/out}/arms.tgz" -C "$o" .
cp "$s" "${OUT:-bundle/out}/summary.txt"
cat "$s"
