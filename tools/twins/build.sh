#!/usr/bin/env bash
# Static comparison of mul_mat_vec_f: the CUDA C++ twin (tools/twins/mmvf_twin.cu, ggml's
# kernel written from spec §2.9, compiled with ggml's flags) against our Rust kernels (the PTX
# the build made, assembled by ptxas). A measuring tool, never part of the product.
#
# usage: tools/twins/build.sh [PTX]       (PTX: default the newest target/*/build/rgdn-*/out/rgdn.ptx)
# Writes target/twins/{twin,rgdn}.{cubin,log} and one SASS file per kernel under
# target/twins/sass/, and prints sass_stats.py's table (registers, loads, barriers, fmas,
# wide IMADs, loads per latency round) for the 9B instances of both.
# Tools: nvcc, ptxas, cuobjdump from PATH, /usr/local/cuda/bin or pip's nvidia-cuda-nvcc +
# nvidia-cuda-cuobjdump (+ nvidia-cuda-cccl for the headers nvcc needs).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/tools/twins"
out="$root/target/twins"
mkdir -p "$out/sass"

find_tool() {
  local name=$1
  if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return; fi
  if [ -x "/usr/local/cuda/bin/$name" ]; then echo "/usr/local/cuda/bin/$name"; return; fi
  local pip
  pip=$(python3 -c "import nvidia, os; print(list(nvidia.__path__)[0])" 2>/dev/null || true)
  for d in cu13 cuda_nvcc cuda_cuobjdump; do
    if [ -n "$pip" ] && [ -x "$pip/$d/bin/$name" ]; then echo "$pip/$d/bin/$name"; return; fi
  done
  echo "missing $name (pip install nvidia-cuda-nvcc nvidia-cuda-cuobjdump nvidia-cuda-cccl)" >&2
  exit 1
}
NVCC=$(find_tool nvcc)
PTXAS=$(find_tool ptxas)
export CUOBJDUMP=$(find_tool cuobjdump)

ptx=${1:-$(ls -t "$root"/target/*/build/rgdn-*/out/rgdn.ptx 2>/dev/null | head -1)}
[ -f "$ptx" ] || { echo "no rgdn.ptx: build first (cargo build --release)" >&2; exit 1; }

# ggml's flags: -O3 -use_fast_math, sm_90.
"$NVCC" -O3 -use_fast_math -arch=sm_90 -cubin -DTWIN_NO_MAIN -Xptxas -v \
  "$here/mmvf_twin.cu" -o "$out/twin.cubin" 2> "$out/twin.log"
"$PTXAS" -arch=sm_90 -v "$ptx" -o "$out/rgdn.cubin" 2> "$out/rgdn.log"

for cubin in twin rgdn; do
  "$CUOBJDUMP" -sass "$out/$cubin.cubin" | awk -v dir="$out/sass" -v tag="$cubin" '
    /Function : / { f = dir "/" tag "-" $3 ".sass" }
    f { print > f }'
done

echo "== twin (nvcc -O3 -use_fast_math, block 256; PAIR=false instances)"
python3 "$here/sass_stats.py" "$out/twin.cubin" "$out/twin.log" 'Li256ELb0E'
echo
echo "== twin, pair instances (grid y = 2)"
python3 "$here/sass_stats.py" "$out/twin.cubin" "$out/twin.log" 'Li256ELb1E'
echo
echo "== rgdn ($ptx)"
python3 "$here/sass_stats.py" "$out/rgdn.cubin" "$out/rgdn.log" '^mul_mat_vec_'
echo
echo "SASS per kernel: $out/sass/"
