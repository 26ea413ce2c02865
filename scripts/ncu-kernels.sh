#!/usr/bin/env bash
# Per-kernel GPU time of the GDN layer chain under Nsight Compute, beside upstream's numbers.
#
# Runs the bench's quick mode (every mode: n_t = 1/4/8/16, fusion off and on, no graph) under
#   ncu --clock-control none --metrics gpu__time_duration.sum
# (ALWAYS --clock-control none: the card keeps its own clocks; nothing here locks or changes
# them), then matches ncu's kernels with the bench's launch manifest and writes to OUT_DIR:
#   ncu.csv       op,config,n_t,columns,dtype,kernel,median_us,samples  (one row per kernel and
#                 shape; what issue 7 commits as results/<date>-h200-speed/ncu.csv)
#   ncu-table.md  per-kernel medians in the format of results/2026-11-30-h200-speed/upstream-ggml.md
#                 (rows = ops, columns n_t = 1/4/8/16), also printed
#   ncu-raw.csv   ncu's own CSV; manifest.csv; bench/ (the bench's report of the same run)
#
# Use, from the repository root on the GPU machine:
#   scripts/ncu-kernels.sh [OUT_DIR] [extra bench options, e.g. --preset 27b --weights bf16]
# Binary: $RGDN_BIN, else bundle/rgdn, else target/release/rgdn (`rgdn bench …`); or set
# RGDN_BENCH to a whole command that takes the bench options (e.g. the `cargo bench` binary).
# ncu: on PATH or /usr/local/cuda/bin.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-ncu-out}}
shift || true
mkdir -p "$out"

if [ -n "${RGDN_BENCH:-}" ]; then
  bench=($RGDN_BENCH)
else
  bin=${RGDN_BIN:-}
  if [ -z "$bin" ]; then
    for b in bundle/rgdn target/release/rgdn; do
      if [ -x "$b" ]; then bin=$b; break; fi
    done
  fi
  [ -n "$bin" ] || { echo "no rgdn binary (bundle/rgdn, target/release/rgdn, or set RGDN_BIN)" >&2; exit 2; }
  bench=("$bin" bench)
fi
ncu=$(command -v ncu || true)
[ -n "$ncu" ] || ncu=/usr/local/cuda/bin/ncu
[ -x "$ncu" ] || { echo "ncu not found (PATH or /usr/local/cuda/bin)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "python3 is needed to summarise ncu's CSV" >&2; exit 2; }

echo "== $("$ncu" --version | tail -1)"
echo "== ${bench[*]} --quick under ncu --clock-control none (clocks untouched)"
# --events: CUPTI's activity API is left to ncu. --graph-layers 0: ncu would profile every
# node of every graph replay.
"$ncu" --clock-control none --metrics gpu__time_duration.sum --nvtx --csv --print-units base \
  --log-file "$out/ncu-raw.csv" \
  "${bench[@]}" --quick --events --no-progress --graph-layers 0 \
  --out "$out/bench" --manifest "$out/manifest.csv" "$@"

python3 "$(dirname "$0")/ncu_summary.py" "$out/ncu-raw.csv" "$out/manifest.csv" "$out/ncu.csv" "$out/ncu-table.md"
cat "$out/ncu-table.md"
