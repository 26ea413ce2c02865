#!/usr/bin/env bash
# Builds arm-NAME.txz for scripts/device-batch-arms.sh (through scripts/arm-bundle.sh) from HEAD
# with PATCH… applied: an experiment binary built in a worktree and a cargo target directory of
# its own, with the PTX rebuilt from the patched kernel source, so that no build reuses
# another's PTX. The arm's label is HEAD's short commit, then "+ LABEL". ARM_ENV and ARM_ARGS
# become the arm's bundle/ENV and bundle/ARGS.
#   scripts/arm-from-patch.sh NAME LABEL PATCH [PATCH…]
#   ARM_ARGS="--replay half" scripts/arm-from-patch.sh four "the four-column second phase" \
#     results/2026-12-07-h100-replay-step-four-columns/four-columns-c5d4fdc.patch
set -euo pipefail
name=${1:?arm name}; label=${2:?label}
shift 2
[ $# -ge 1 ] || { echo "arm-from-patch: give at least one patch" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
wt=$(mktemp -d "/tmp/rgdn-arm-$name.XXXX")
tgt=/tmp/rgdn-arm-target-$name
git -C "$root" worktree add -q --detach "$wt" HEAD
trap 'git -C "$root" worktree remove --force "$wt"' EXIT
for p in "$@"; do git -C "$wt" apply "$(cd "$(dirname "$p")" && pwd)/$(basename "$p")"; done
# The build script must rebuild the PTX from the patched source.
touch "$wt"/kernels-gpu/src/*.rs
(cd "$wt" && RGDN_PTX_FROM=source CARGO_TARGET_DIR="$tgt" cargo build --release --bin rgdn)
bash "$root/scripts/arm-bundle.sh" "$name" "$tgt/release/rgdn" "$(git -C "$root" rev-parse --short HEAD) + $label" "${ARM_ENV:-}" "${ARM_ARGS:-}"
