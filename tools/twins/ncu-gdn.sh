#!/usr/bin/env bash
# [speed] Kernel times of GATED_DELTA_NET (ours vs the CUDA twin of upstream's kernel), CONCAT
# and the gate path, on the GPU machine, in one go:
#
#   bash tools/twins/ncu-gdn.sh [PROCESSES]      # from the repository root; rgdn at bundle/rgdn
#
# With the device tool: scripts/gpu-bundle.sh here, then
#   run(command="bash tools/twins/ncu-gdn.sh", carry=["bundle"], timeout_s=600)
# (about 5–7 minutes; PROCESSES = 3 halves it; $OUT/summary.txt is rewritten after each
# configuration, so a run cut short keeps what it measured).
#
# Method = the upstream table's (results/2026-11-30-h200-speed/upstream-ggml.md): Nsight Compute,
# `--clock-control none` (ALWAYS: the card keeps its own clocks; never lock or change them),
# metric gpu__time_duration.sum, caches flushed before each profiled launch (ncu's default
# --cache-control all), median over the samples.
#
# What runs (9B shapes):
# - ours: `bundle/rgdn layer 9b --tokens N --rollback R` (GATED_DELTA_NET with K = R + 1 slots,
#   CONCAT, the unfused gate path SIGMOID/ADD/SOFTPLUS/MUL); each process launches the chain
#   twice, so PROCESSES (default 6) processes give 12 samples per kernel;
# - the twin: tools/twins/gdn_twin.cu built here with nvcc (ggml's flags), `gdn_twin N K 12`;
# - the fused SOFTPLUS·MUL at the gate's n_t = 1 shape: `bundle/rgdn check gate_n_t=1` (the
#   UNARY_MUL suite cases H_v = 32 and 48, one launch each per process).
# - the experimental GDN entry with paired butterflies: the same layer runs with RGDN_GDN_PAIRED=1;
# - bits first: `rgdn check GATED_DELTA_NET,GDN_LAYER,CONCAT,UNARY_MUL` with each GDN entry.
# Configurations: GDN with K = n_t slots (n_t 4, 8, 16) and with 1 slot (n_t 1, 4, 8, 16).
# Output: $OUT (or /tmp/ncu-gdn): raw ncu CSVs, twin build logs and SASS, and summary.txt —
# per configuration and kernel: samples and median µs, the twin next to ours.
set -euo pipefail
procs="${1:-6}"
root="$(pwd)"
rgdn="${RGDN_BIN:-$root/bundle/rgdn}"
out="${OUT:-/tmp/ncu-gdn}"
mkdir -p "$out"
export PATH="$PATH:/usr/local/cuda/bin"
ncu="${NCU:-$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || true)}"
[[ -x "$ncu" ]] || { echo "ncu-gdn.sh: no ncu found (set NCU)"; exit 1; }
[[ -x "$rgdn" ]] || { echo "ncu-gdn.sh: no rgdn binary at $rgdn (scripts/gpu-bundle.sh, carry bundle)"; exit 1; }

# The twin (and its SASS next to ours, from the PTX embedded in bundle/).
RGDN_PTX="${RGDN_PTX:-$root/bundle/rgdn.ptx}" bash "$root/tools/twins/build-gdn.sh" --exe "$out/twin" > "$out/twin-build.log" 2>&1 \
    || { echo "twin build failed:"; cat "$out/twin-build.log"; exit 1; }
twin="$out/twin/gdn_twin"

# Bits first (no profiler): the suite cases of the kernels this branch touched, with the default
# GDN entry and with the paired one (RGDN_GDN_PAIRED=1); every case must pass.
checks="$out/checks.txt"; : > "$checks"
for paired in 0 1; do
    rc=0
    RGDN_GDN_PAIRED=$paired RGDN_REQUIRE_GPU=1 "$rgdn" check GATED_DELTA_NET,GDN_LAYER,CONCAT,UNARY_MUL \
        > "$out/check-paired$paired.log" 2>&1 || rc=$?
    fails=$(grep -c '^FAIL' "$out/check-paired$paired.log" || true)
    echo "rgdn check GATED_DELTA_NET,GDN_LAYER,CONCAT,UNARY_MUL with RGDN_GDN_PAIRED=$paired: exit $rc ($fails FAIL lines; $out/check-paired$paired.log)" >> "$checks"
done
cat "$checks"

kernels='regex:gated_delta_net|gdn_twin|concat|unary|binary'
profile() { # name, command...
    local name="$1"; shift
    "$ncu" --clock-control none --metrics gpu__time_duration.sum --print-units base --csv \
        --target-processes all -k "$kernels" "$@" > "$out/$name.csv" 2> "$out/$name.err" \
        || { echo "ncu failed for $name (see $out/$name.err)"; tail -5 "$out/$name.err"; }
}

configs=("1 1" "4 1" "8 1" "16 1" "4 4" "8 8" "16 16")   # n_t, K
cat > "$out/summarize.py" <<'PY'
import csv, glob, os, statistics, sys
out, configs = sys.argv[1], sys.argv[2:]

def samples(path):
    """{kernel: [µs, ...]} from an ncu --csv file (gpu__time_duration.sum in ns)."""
    got = {}
    if not os.path.exists(path):
        return got
    lines = [l for l in open(path) if l.startswith('"')]
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = row["Kernel Name"].split("(")[0].replace("void ", "").strip()
        if "gdn_twin" in name:  # mangled or demangled template argument KEEP_SLOTS
            name = "gdn_twin<K>1>" if ("ILb1" in name or "<true>" in name) else "gdn_twin<K=1>"
        unit = row.get("Metric Unit", "ns")
        v = float(row["Metric Value"].replace(",", ""))
        v = v / 1000.0 if unit in ("ns", "nsecond") else v * 1000.0 if unit in ("ms", "msecond") else v
        got.setdefault(f'{name} grid{row.get("Grid Size", "")}', []).append(v)
    return got

print("ncu gpu__time_duration.sum, --clock-control none, caches flushed; median µs (samples)")
for c in configs:
    nt, K = c.split()
    print(f"\n== n_t = {nt}, K = {K} slot(s)   [rgdn layer 9b --tokens {nt} --rollback {int(K) - 1}; gdn_twin {nt} {K}]")
    s = samples(os.path.join(out, f"nt{nt}_K{K}.csv"))
    s.update(samples(os.path.join(out, f"nt{nt}_K{K}_paired.csv")))
    for k in sorted(s):
        print(f"  {k:<62} {statistics.median(s[k]):8.2f}  ({len(s[k])})")
    ours = [v for k, v in s.items() if k.startswith("gated_delta_net_f32_d128 ")]
    twin = [v for k, v in s.items() if "gdn_twin" in k]
    paired = [v for k, v in s.items() if k.startswith("gated_delta_net_f32_d128_paired")]
    if ours and twin:
        o, t = statistics.median(ours[0]), statistics.median(twin[0])
        print(f"  GDN ours / twin = {o:.2f} / {t:.2f} µs = {o / t:.2f}")
    if paired and twin:
        p, t = statistics.median(paired[0]), statistics.median(twin[0])
        print(f"  GDN paired / twin = {p:.2f} / {t:.2f} µs = {p / t:.2f}")
print("\n== fused SOFTPLUS·MUL at the gate's n_t = 1 shape (rgdn check gate_n_t=1: H_v = 32 and 48)")
s = samples(os.path.join(out, "gate_fused.csv"))
for k in sorted(s):
    print(f"  {k:<62} {statistics.median(s[k]):8.2f}  ({len(s[k])})")
print("\n== fused SOFTPLUS·MUL with a broadcast (rgdn check gate_broadcast: H_v 32 × n_t 4 = 1 block, 48 × 16 = 3 blocks)")
s = samples(os.path.join(out, "gate_fused_broadcast.csv"))
for k in sorted(s):
    print(f"  {k:<62} {statistics.median(s[k]):8.2f}  ({len(s[k])})")
print("\ngate path at n_t = 1: ours unfused = sigmoid + add + softplus + mul (n_t1_K1 above);"
      " fused = sigmoid + add + unary_softplus_mul; upstream 7.39 µs (3 launches);"
      " at n_t > 1 upstream runs 4 launches (10.46 / 10.29 / 10.94 µs at n_t = 4 / 8 / 16), ours could run 3")
PY
# Rewritten after every configuration, so a run cut short still leaves its numbers.
summarize() { python3 "$out/summarize.py" "$out" "${configs[@]}" > "$out/summary.txt"; cat "$checks" >> "$out/summary.txt"; }
for c in "${configs[@]}"; do
    set -- $c; nt=$1; K=$2; R=$((K - 1))
    profile "nt${nt}_K${K}" bash -c "for i in \$(seq $procs); do '$rgdn' layer 9b --tokens $nt --rollback $R > /dev/null; done; '$twin' $nt $K 12 > /dev/null"
    # The experimental paired-butterfly GDN entry (RGDN_GDN_PAIRED=1), GDN launches only.
    kernels='regex:gated_delta_net' profile "nt${nt}_K${K}_paired" bash -c "for i in \$(seq $procs); do RGDN_GDN_PAIRED=1 '$rgdn' layer 9b --tokens $nt --rollback $R > /dev/null; done"
    summarize
    echo "$(date -u +%H:%M:%S) n_t=$nt K=$K done"
done
profile "gate_fused" bash -c "for i in \$(seq $procs); do RGDN_SKIP_PARITY=1 RGDN_REQUIRE_GPU=1 '$rgdn' check gate_n_t=1 > /dev/null; done"
profile "gate_fused_broadcast" bash -c "for i in \$(seq $procs); do RGDN_SKIP_PARITY=1 RGDN_REQUIRE_GPU=1 '$rgdn' check gate_broadcast > /dev/null; done"

summarize
cat "$out/summary.txt"
