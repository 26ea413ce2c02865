#!/usr/bin/env bash
# [layer-step] Builds bundle-plant-NAME.txz for scripts/device-plants.sh: the GPU sweep, the
# GPU suite and [replay] the GPU replay episodes built from HEAD with one planted change (a
# patch), in a worktree of its own with a cargo target directory of its own, so that no plant
# build can reuse another's PTX (session 6 lost a device call to that: two plant worktrees
# sharing a target directory, the build script not re-run). Checks that the plant's embedded
# PTX differs from HEAD's committed PTX.
#   scripts/plant-bundle.sh NAME PATCH [PATCH…]    # e.g. results/…/next/plant-pairing.patch
#   PLANT_FILTER=GATED_DELTA_NET_REPLAY scripts/plant-bundle.sh …   # the suite cases it must fail
#   PLANT_FILTER=GATED_DELTA_NET_REPLAY_VERIFY scripts/plant-bundle.sh replay-verify-short \
#     results/2026-12-02-local-replay-verify/plant-replay-verify-short.patch   # [replay] a − 1 replayed
#   PLANT_TESTS="gpu_ops" scripts/plant-bundle.sh …   # only those test executables (a smaller carry)
#   PLANT_ENV="RGDN_BATCH_ONE_ROW=1" scripts/plant-bundle.sh …   # variables its runs get
set -euo pipefail
name=${1:?plant name}
shift
[ $# -ge 1 ] || { echo "plant-bundle: give at least one patch" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
wt=$(mktemp -d /tmp/rgdn-plant-$name.XXXX)
tgt=/tmp/rgdn-plant-target-$name
tests=${PLANT_TESTS:-gpu_sweep gpu_ops gpu_replay}
git -C "$root" worktree add -q --detach "$wt" HEAD
trap 'git -C "$root" worktree remove --force "$wt"' EXIT
for p in "$@"; do git -C "$wt" apply "$(cd "$(dirname "$p")" && pwd)/$(basename "$p")"; done
# The plant is in the kernels: the build script must rebuild the PTX from source.
touch "$wt"/kernels-gpu/src/*.rs
(cd "$wt" && RGDN_PTX_FROM=source CARGO_TARGET_DIR="$tgt" cargo test --release --no-run $(printf -- '--test %s ' $tests) \
  --message-format=json 2>/dev/null) > "$tgt.json"
out=$(mktemp -d)
mkdir -p "$out/bundle/tests"
python3 - "$tgt.json" "$out/bundle/tests" "$root/kernels-gpu/ptx/sm_90.ptx.gz" "$tests" <<'PY'
import gzip, hashlib, json, os, shutil, sys
found = {}
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    exe = m.get("executable")
    if m.get("reason") == "compiler-artifact" and exe and m["target"]["name"] in sys.argv[4].split():
        shutil.copy2(exe, os.path.join(sys.argv[2], m["target"]["name"]))
        found[m["target"]["name"]] = exe
if sorted(found) != sorted(sys.argv[4].split()):
    sys.exit(f"plant-bundle: built {sorted(found)}, not {sys.argv[4]}")
def embedded(path):
    b = open(path, "rb").read()
    i = b.find(b".version 7.8")
    p = b[i:b.find(b"\0", i)]
    return p[: p.rfind(b"\n}\n") + 3]
plant = embedded(os.path.join(sys.argv[2], sorted(found)[0]))
head = gzip.open(sys.argv[3], "rb").read()
# The committed file starts with a comment header; the binary embeds it too, so compare from
# `.version` on, as `embedded` extracts.
head = head[head.find(b".version 7.8") :]
print("plant PTX md5", hashlib.md5(plant).hexdigest(), "HEAD's committed PTX md5", hashlib.md5(head).hexdigest())
if plant == head:
    sys.exit("plant-bundle: the plant's embedded PTX is HEAD's: the plant did not reach the kernels")
PY
# The GPU suite cases the plant must fail (scripts/device-batch-final.sh; default GDN_LAYER_STEP_VS).
[ -n "${PLANT_FILTER:-}" ] && echo "$PLANT_FILTER" > "$out/bundle/FILTER"
# Variables the plant's runs get (e.g. a knob that forces the planted path on every case).
[ -n "${PLANT_ENV:-}" ] && echo "$PLANT_ENV" > "$out/bundle/ENV"
# xz (scripts/device-batch-final.sh takes .txz plants): a fifth of gzip's size, which the 64 MiB
# carry needs now that the tree itself is over 50 MB (session 41: 9.0 MB gzip, 1.7 MB xz).
tar cf - -C "$out" bundle | xz -9 -T2 > "$root/bundle-plant-$name.txz"
rm -rf "$out"
echo "bundle-plant-$name.txz: $(wc -c < "$root/bundle-plant-$name.txz") bytes"
