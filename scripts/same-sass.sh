#!/usr/bin/env bash
# Whether the working tree's committed-form PTX (kernels-gpu/ptx/<arch>.ptx.gz, refreshed by
# scripts/refresh-ptx.sh) compiles to the same machine code as REV's: both through ptxas (PyPI
# nvidia-cuda-nvcc, or $PTXAS), then every section of the two cubins compared byte for byte
# (scripts/cubin_sections.py). A refactor whose PTX differs only in register and label names
# usually passes; this says so without a GPU. It does not replace the GPU evidence: the driver
# JIT-compiles the PTX with its own compiler version.
#   scripts/same-sass.sh REV [ARCH]      # e.g. scripts/same-sass.sh 186fbec sm_90
set -euo pipefail
rev=${1:?a revision to compare with}
arch=${2:-sm_90}
cd "$(dirname "$0")/.."
ptxas=${PTXAS:-$(python3 -c 'import nvidia.cu13, os; print(os.path.join(list(nvidia.cu13.__path__)[0], "bin", "ptxas"))' 2>/dev/null || command -v ptxas)}
[ -x "$ptxas" ] || { echo "same-sass: no ptxas (pip install nvidia-cuda-nvcc, or set PTXAS)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Revisions before 2026-12-05 committed the PTX as text (<arch>.ptx), later ones gzipped.
git show "$rev:kernels-gpu/ptx/$arch.ptx.gz" 2>/dev/null | gzip -dc > "$tmp/before.ptx" || git show "$rev:kernels-gpu/ptx/$arch.ptx" > "$tmp/before.ptx"
gzip -dc "kernels-gpu/ptx/$arch.ptx.gz" > "$tmp/after.ptx"
"$ptxas" -arch="$arch" "$tmp/before.ptx" -o "$tmp/before.cubin"
"$ptxas" -arch="$arch" "$tmp/after.ptx" -o "$tmp/after.cubin"
"$ptxas" --version | tail -1
python3 scripts/cubin_sections.py "$tmp/before.cubin" "$tmp/after.cubin" "" > "$tmp/sections.txt"
echo "$(grep -c '^same' "$tmp/sections.txt") sections byte-identical, $(grep -vc '^same' "$tmp/sections.txt" || true) differ"
if grep -v '^same' "$tmp/sections.txt"; then exit 1; fi
