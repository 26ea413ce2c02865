#!/usr/bin/env bash
# [seq-batch] Packs one arm for scripts/device-batch-arms.sh: arm-NAME.txz (xz) with bundle/rgdn (the
# release binary at BIN, stripped), bundle/COMMIT (LABEL: the commit and any patch on it) and,
# when given, bundle/ENV (VAR=VALUE words the arm's benches run with, e.g. a measurement knob) and
# bundle/ARGS (bench arguments of this arm alone, e.g. another `--fusions` set). BIN `bundle/rgdn`
# carries no binary: the arm runs the evidence bundle's own (bundle.txz, carried beside it), so
# an arm of the head costs a few bytes of the 64 MiB carry instead of 3 MB.
#   scripts/arm-bundle.sh NAME BIN LABEL [ENV] [ARGS]
set -euo pipefail
name=${1:?arm name}; bin=${2:?rgdn binary}; label=${3:?commit label}
root=$(cd "$(dirname "$0")/.." && pwd)
d=$(mktemp -d)
mkdir -p "$d/bundle"
if [[ $bin == bundle/rgdn ]]; then
  echo "$bin" > "$d/bundle/USE"
else
  cp "$bin" "$d/bundle/rgdn"
  strip "$d/bundle/rgdn" 2>/dev/null || true
fi
echo "$label" > "$d/bundle/COMMIT"
[ -n "${4:-}" ] && echo "$4" > "$d/bundle/ENV"
[ -n "${5:-}" ] && echo "$5" > "$d/bundle/ARGS"
tar cJf "$root/arm-$name.txz" -C "$d" bundle
rm -rf "$d"
echo "arm-$name.txz: $(wc -c < "$root/arm-$name.txz") bytes"
