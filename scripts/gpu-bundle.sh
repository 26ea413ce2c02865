#!/usr/bin/env bash
# Builds everything the GPU machine needs into bundle/ (git-ignored, < 64 MiB): the release
# test executables, the rgdn binary, the PTX, and run-all.sh, which runs them all there with
# RGDN_REQUIRE_GPU=1 and writes logs plus a summary (date, GPU, driver, pass/fail counts)
# under $OUT (or bundle/out).
#
# Use: scripts/gpu-bundle.sh, then on the GPU machine, from the repository root:
#   bash bundle/run-all.sh
# With the device tool: run(command="bash bundle/run-all.sh", carry=["bundle"]).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
bundle="$root/bundle"
rm -rf "$bundle"
mkdir -p "$bundle/tests"

export RGDN_GIT_COMMIT=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . || echo -dirty)
cargo build --release --bins --examples
cargo test --release --no-run --message-format=json 2>/dev/null > "$root/target/test-executables.json"
python3 - "$root/target/test-executables.json" "$bundle/tests" <<'PY'
import json, shutil, sys, os
src, dst = sys.argv[1], sys.argv[2]
for line in open(src):
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    exe = msg.get("executable")
    if msg.get("reason") != "compiler-artifact" or not exe or not msg.get("profile", {}).get("test"):
        continue
    kinds = msg["target"]["kind"]
    name = msg["target"]["name"] if "test" in kinds else kinds[0] + "-" + msg["target"]["name"]
    # CPU-only tests: CI runs them; they would only fill the carry. (The fusion fuzzer stays:
    # scripts/device-fuzz.sh runs its long run on the GPU machine's 16 cores.)
    # suite_cpu too: its every-case CPU pass takes ~4 minutes and outlasted run-all's timeout
    # on the GPU machine (results/2026-12-01-h200-staged/README.md).
    if name in ("builders", "hostile", "fused_refs", "ptx_committed", "lib-rgdn", "ptx", "ptxas", "evidence", "suite_cpu", "schedule", "kernel_emulation", "probe_entries", "probe_more"):
        print("left out (CPU only, run by CI)", name)
        continue
    shutil.copy2(exe, os.path.join(dst, name))
    print("bundled test", name)
PY
cp target/release/rgdn "$bundle/rgdn"
echo "$RGDN_GIT_COMMIT" > "$bundle/COMMIT"
mkdir -p "$bundle/examples"
for e in target/release/examples/*; do if [[ -x "$e" && -f "$e" && "$(basename "$e")" != *-* ]]; then cp "$e" "$bundle/examples/"; fi; done
ptx=$(ls -t target/release/build/rgdn-*/out/rgdn.ptx | head -1)
cp "$ptx" "$bundle/rgdn.ptx"
strip "$bundle"/rgdn "$bundle"/tests/* 2>/dev/null || true

cat > "$bundle/run-all.sh" <<'RUN'
#!/usr/bin/env bash
# Runs every bundled test executable and `rgdn check` on this GPU machine.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/out}
mkdir -p "$out"
export RGDN_REQUIRE_GPU=1
export PATH="$PATH:/usr/local/cuda/bin"
command -v ptxas >/dev/null && export RGDN_PTXAS=$(command -v ptxas)
summary="$out/summary.txt"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | head -1)"
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -1)"
  echo "host: $(uname -r)"
} > "$summary"
"$here/rgdn" info > "$out/rgdn-info.log" 2>&1
# The unfused layer on the 9B preset: per-launch times and per-kernel launch counts.
for args in "--tokens 1 --rollback 0" "--tokens 4 --rollback 3" "--tokens 16 --rollback 15"; do
  echo "===== rgdn layer 9b $args" >> "$out/rgdn-layer.log"
  "$here/rgdn" layer 9b $args >> "$out/rgdn-layer.log" 2>&1
  echo "rgdn layer 9b $args: exit $?" >> "$out/layer-exits.txt"
done
failures=0
for t in "$here"/tests/*; do
  name=$(basename "$t")
  echo "===== $name" | tee -a "$out/gpu-suite.log"
  args=""
  "$t" $args 2>&1 | tee "$out/$name.log" >> "$out/gpu-suite.log"
  rc=${PIPESTATUS[0]}
  passed=$(grep -Eo 'test result: [a-z]+\. [0-9]+ passed; [0-9]+ failed' "$out/$name.log" | tail -1)
  [ -z "$passed" ] && passed=$(grep -E '^GPU suite:' "$out/$name.log" | tail -1)
  echo "$name: exit $rc ${passed}" >> "$summary"
  [ "$rc" -ne 0 ] && failures=$((failures + 1))
done
cat "$out/layer-exits.txt" >> "$summary"
echo "failing executables: $failures" >> "$summary"
cat "$summary"
# Everything in one archive too (the device tool brings back at most 8 files).
tar czf "$out/all-logs.tgz" -C "$out" --exclude all-logs.tgz .
grep -A200 '^op ' "$out/gpu_ops.log" 2>/dev/null | head -40
exit $failures
RUN
chmod +x "$bundle/run-all.sh"
du -sh "$bundle"
# Every test binary embeds the PTX (6.5 MB of text): carry the bundle compressed
# (`tar xzf bundle.tgz` on the GPU machine first).
tar czf "$root/bundle.tgz" -C "$root" bundle
size=$(stat -c %s "$root/bundle.tgz")
echo "bundle.tgz: $size bytes ($(du -sb "$bundle" | cut -f1) unpacked)"
if (( size > 40 * 1024 * 1024 )); then
  echo "bundle.tgz is $size bytes: over the 40 MiB budget (the device tool carries 64 MiB with the tree)" >&2
  exit 1
fi
