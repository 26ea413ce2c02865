#!/usr/bin/env bash
# mul_mat_vec_f kernel times on the GPU machine, with Nsight Compute, the way
# results/2026-11-30-h200-speed/upstream-ggml.md measured upstream:
#   ncu --clock-control none --metrics gpu__time_duration.sum   (L2 flushed before each launch,
#   ncu's default cache control). NEVER lock or change clocks: --clock-control none, always.
#
# Times, per kernel and launch shape, the median over all samples (µs):
#   1. the CUDA C++ twin (tools/twins/mmvf_twin.cu, ggml's kernel from spec §2.9 at ggml's flags),
#      built here with nvcc: E = 4096, 32 rows, 1–8 columns, F32 / F16 half / F16 f32-acc / BF16,
#      unfused and paired (grid y = 2); REPS launches each;
#   2. our unfused kernels through `rgdn layer 9b --tokens N --weights W` (the layer's alpha and
#      beta projections: [4096 × 32] at N columns; 4 launches per run: warm-up + timed, alpha + beta);
#   3. our MUL_MAT_VEC_PAIR kernels through `rgdn check MUL_MAT_VEC_PAIR` (grid (32, 2, 1) is the
#      9B shape; the other cases have other grids);
#   4. both again with RGDN_MMVF_COLS_PER_BLOCK=4, 2, 1 (columns split over blocks: grid z),
#      after a bit-exactness run of every MUL_MAT_VEC / MUL_MAT_VEC_PAIR case under each.
#
# usage (repository root of the bundle carried to the GPU machine, after scripts/gpu-bundle.sh):
#   bash tools/twins/ncu-mmvf.sh [BUNDLE_DIR=bundle] [REPS=5]
# (LAYER_RUNS=1 rgdn layer runs per weight type and column count, PAIR_RUNS=3 suite runs; about
# 24 + 3 short processes under ncu, a few minutes.)
# e.g. run(command="bash tools/twins/ncu-mmvf.sh", carry=["bundle"]). Output under $OUT (or
# target/ncu-mmvf): the raw CSVs and summary.txt.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bundle=${1:-$root/bundle}
reps=${2:-5}
out=${OUT:-$root/target/ncu-mmvf}
mkdir -p "$out"
export PATH="$PATH:/usr/local/cuda/bin"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "ncu not found" >&2; exit 1; }
ncu_run() { # ncu_run CSV KERNEL_REGEX CMD...
  local csv=$1 regex=$2; shift 2
  "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv --print-kernel-base mangled \
    --kernel-name-base function -k "regex:$regex" "$@" > "$csv" 2> "$csv.err"
  echo "exit $? : $*" >> "$out/commands.txt"
}

# 1. The twin.
nvcc -O3 -use_fast_math -arch=sm_90 -o "$out/mmvf_twin" "$root/tools/twins/mmvf_twin.cu" 2> "$out/nvcc.log" \
  && ncu_run "$out/twin.csv" "mul_mat_vec_f" "$out/mmvf_twin" "$reps"

# 2. Our unfused kernels at 1–8 columns.
for w in f32 f16 bf16; do
  for n in 1 2 3 4 5 6 7 8; do
    for r in $(seq 1 "${LAYER_RUNS:-1}"); do
      ncu_run "$out/rgdn-layer-$w-$n-$r.csv" "^mul_mat_vec_" "$bundle/rgdn" layer 9b --tokens "$n" --rollback 0 --weights "$w"
    done
  done
done

# 3. Our pair kernels (every MUL_MAT_VEC_PAIR case once per run).
for r in $(seq 1 "${PAIR_RUNS:-3}"); do
  ncu_run "$out/rgdn-pair-$r.csv" "^mul_mat_vec_pair_" "$bundle/rgdn" check MUL_MAT_VEC_PAIR
done

# 4. The column-group knob (host/ops/mmvf.rs::cols_per_block): at most k columns per block,
#    ncols / k blocks per row (grid z). Same bits by construction; the runs below check them
#    (rgdn check, every MUL_MAT_VEC and MUL_MAT_VEC_PAIR case, without ncu) and time them.
for k in ${KNOBS:-4 2 1}; do
  RGDN_MMVF_COLS_PER_BLOCK=$k "$bundle/rgdn" check MUL_MAT_VEC > "$out/bits-k$k.log" 2>&1
  echo "RGDN_MMVF_COLS_PER_BLOCK=$k rgdn check MUL_MAT_VEC: exit $? $(grep -E '^total' "$out/bits-k$k.log" | tail -1)" >> "$out/bits.txt"
  for w in f32 bf16; do
    for n in 4 6 8; do
      RGDN_MMVF_COLS_PER_BLOCK=$k ncu_run "$out/k$k-rgdn-layer-$w-$n.csv" "^mul_mat_vec_" "$bundle/rgdn" layer 9b --tokens "$n" --rollback 0 --weights "$w"
    done
  done
  RGDN_MMVF_COLS_PER_BLOCK=$k ncu_run "$out/k$k-rgdn-pair.csv" "^mul_mat_vec_pair_" "$bundle/rgdn" check MUL_MAT_VEC_PAIR
done

python3 - "$out" <<'PY' | tee "$out/summary.txt"
import csv, glob, os, re, statistics, sys
out = sys.argv[1]
scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6}
def rows(path):
    lines = open(path, errors="replace").read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        return []
    return list(csv.DictReader(lines[start:]))
def short(name):
    # twin: mangled mul_mat_vec_f<T, acc, ncols, 256, pair>
    m = re.match(r"_Z13mul_mat_vec_fI(.+?)Li(\d+)ELi256ELb([01])E", name)
    if m:
        t = {"ff": "f32", "6__halfS0_": "f16_half", "6__halff": "f16_f32acc", "13__nv_bfloat16f": "bf16"}.get(m.group(1), m.group(1))
        return f"twin_{'pair_' if m.group(3) == '1' else ''}{t}_c{m.group(2)}"
    return name.split("(")[0]
groups = {}
for path in sorted(glob.glob(os.path.join(out, "*.csv"))):
    for r in rows(path):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        us = float(r["Metric Value"].replace(",", "")) * scale.get(r["Metric Unit"], float("nan"))
        tag = os.path.basename(path).split("-")[0]
        tag = tag if re.fullmatch(r"k\d+", tag) else ""
        key = (f"{tag + ' ' if tag else ''}{short(r['Kernel Name'])}", r.get("Grid Size", ""), r.get("Block Size", ""))
        groups.setdefault(key, []).append(us)
print(f"{'kernel':<34} {'grid':>14} {'block':>12} {'n':>3} {'median µs':>10} {'min':>7} {'max':>7}")
for (k, g, b), v in sorted(groups.items()):
    print(f"{k:<34} {g:>14} {b:>12} {len(v):>3} {statistics.median(v):>10.2f} {min(v):>7.2f} {max(v):>7.2f}")
print("\nupstream ggml (ggml-h200-timings.md), [4096 x 32], 1 column: F32 3.79, F16 3.95, BF16 4.24 µs")
print("targets: 1 column <= upstream; 2-8 columns <= 1.25 x upstream 1-column time of the same type")
print("(rgdn layer's --weights f16 runs the half-accumulating kernels: mul_mat_vec_f16_cN)")
print("kN rows: RGDN_MMVF_COLS_PER_BLOCK=N (entry cK with grid z = ncols / K); bits under the knob:")
print(open(os.path.join(out, "bits.txt")).read() if os.path.exists(os.path.join(out, "bits.txt")) else "(no knob runs)")
PY
