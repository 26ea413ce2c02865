#!/usr/bin/env bash
# [speed] Builds the GATED_DELTA_NET twin (tools/twins/gdn_twin.cu, a yardstick, never the
# product) with ggml's flags and dumps its SASS next to the SASS of our own PTX entry.
#
#   tools/twins/build-gdn.sh [OUT_DIR]          # cubins + SASS + ptxas -v (no GPU needed)
#   tools/twins/build-gdn.sh --exe [OUT_DIR]    # also the runnable twin (needs a host compiler)
#
# Tools: $RGDN_NVCC or nvcc on PATH or pip's nvidia-cuda-nvcc; cuobjdump next to it.
# Our PTX: $RGDN_PTX, else target/release/build/rgdn-*/out/rgdn.ptx (cargo build --release),
# else bundle/rgdn.ptx.
set -euo pipefail
exe=0
if [[ "${1:-}" == "--exe" ]]; then exe=1; shift; fi
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-$root/target/twins}"
mkdir -p "$out"

nvcc="${RGDN_NVCC:-}"
if [[ -z "$nvcc" ]]; then
    if command -v nvcc >/dev/null; then nvcc="$(command -v nvcc)"
    else
        site="$(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null || true)"
        [[ -n "$site" && -x "$site/nvidia/cu13/bin/nvcc" ]] && nvcc="$site/nvidia/cu13/bin/nvcc"
    fi
fi
[[ -n "$nvcc" ]] || { echo "build-gdn.sh: no nvcc (set RGDN_NVCC or pip install nvidia-cuda-nvcc)" >&2; exit 1; }
bin="$(dirname "$nvcc")"
ptxas="$bin/ptxas"; cuobjdump="$bin/cuobjdump"
[[ -x "$cuobjdump" ]] || cuobjdump="$(command -v cuobjdump || true)"

# ggml's flags: -O3 -use_fast_math, sm_90 (its CMake also passes -extended-lambda: no effect here).
flags=(-O3 -use_fast_math -arch=sm_90)
"$nvcc" "${flags[@]}" -DGDN_TWIN_NO_MAIN -cubin -Xptxas -v -o "$out/gdn_twin.cubin" "$here/gdn_twin.cu" 2> "$out/gdn_twin.ptxas.txt"
"$nvcc" "${flags[@]}" -DGDN_TWIN_NO_MAIN -ptx -o "$out/gdn_twin.ptx" "$here/gdn_twin.cu"
awk '/Compiling entry/ { f = $(NF-2) } /Used [0-9]+ registers/ { print f, $0 }' "$out/gdn_twin.ptxas.txt"

ptx="${RGDN_PTX:-}"
if [[ -z "$ptx" ]]; then
    ptx="$(ls -t "$root"/target/release/build/rgdn-*/out/rgdn.ptx 2>/dev/null | head -1 || true)"
    [[ -n "$ptx" ]] || ptx="$root/bundle/rgdn.ptx"
fi
if [[ -f "$ptx" ]]; then
    "$ptxas" -arch=sm_90 -v "$ptx" -o "$out/rgdn.cubin" 2> "$out/rgdn.ptxas.txt"
    awk '/Compiling entry/ { f = $(NF-2) } /Used [0-9]+ registers/ && f ~ /gated_delta|concat|unary/ { print f, $0 }' "$out/rgdn.ptxas.txt"
fi

# SASS listings per kernel (instruction lines only) and counts.
split_sass() { # cubin prefix
    "$cuobjdump" -sass "$1" | awk -v out="$out" -v prefix="$2" '
        /Function : / { f = $NF; file = out "/" prefix f ".sass"; printf "" > file; next }
        f != "" && /^ +\/\*[0-9a-f]+\*\// { line = $0; sub(/ *\/\* 0x[0-9a-f]+ \*\//, "", line); print line >> file }'
}
if [[ -x "$cuobjdump" ]]; then
    split_sass "$out/gdn_twin.cubin" ""
    [[ -f "$out/rgdn.cubin" ]] && split_sass "$out/rgdn.cubin" "rgdn."
    for f in "$out"/*gdn_twin*.sass "$out"/rgdn.gated_delta_net*.sass "$out"/rgdn.concat*.sass "$out"/rgdn.unary_softplus*.sass; do
        [[ -f "$f" ]] || continue
        printf '%-72s %4d instructions (NOPs excluded), %3d LDG, %3d STG\n' "$(basename "$f")" \
            "$(grep -vc 'NOP' "$f" || true)" "$(grep -c 'LDG' "$f" || true)" "$(grep -c 'STG' "$f" || true)"
    done
fi

if [[ $exe == 1 ]]; then
    "$nvcc" "${flags[@]}" -o "$out/gdn_twin" "$here/gdn_twin.cu"
    echo "runnable twin: $out/gdn_twin N_TOKENS K [N_REPS]"
fi
