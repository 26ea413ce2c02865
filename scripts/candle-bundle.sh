#!/usr/bin/env bash
# Builds examples/candle (rgdn inside candle-core 0.11's CUDA backend) on a machine with no GPU
# and no CUDA toolkit, into bundle-candle.tgz for the GPU machine (which has the CUDA 13 driver
# and toolkit, and no Rust):
#   1. PyPI's CUDA 13.0 toolchain into $TOOLS (nvcc, nvvm, the CCCL headers candle's kernels
#      include, and the NVRTC / cuBLAS / cuRAND libraries candle links) — 13.0 because the GPU
#      machine's driver (580, CUDA 13.0) JIT-compiles PTX up to ISA 9.0, and a newer nvcc writes
#      newer PTX;
#   2. a link-time stand-in for libcuda.so.1 (the driver, not on PyPI): every cu* symbol
#      cudarc 0.19 binds, generated from cudarc's own bindings, each returning
#      CUDA_ERROR_STUB_LIBRARY — never loaded at run time (the binary records the soname
#      libcuda.so.1, which the GPU machine's driver provides);
#   3. `cargo +stable build --release` of examples/candle with that toolchain.
# On the GPU machine: tar xzf bundle-candle.tgz && candle/rgdn-candle
# (it finds cuBLAS/cuRAND/NVRTC under /usr/local/cuda/lib64 through its run path, or
# LD_LIBRARY_PATH). With the device tool: run(command="tar xzf bundle-candle.tgz &&
# candle/rgdn-candle", carry=["bundle-candle.tgz"]).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
TOOLS=${TOOLS:-/tmp/rgdn-cuda130}
STUB=${STUB:-/tmp/rgdn-cudastub}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target/candle}

if [ ! -x "$TOOLS/nvidia/cu13/bin/nvcc" ]; then
  python3 -m pip install --quiet --disable-pip-version-check --target "$TOOLS" \
    nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-cuda-runtime==13.0.96 \
    nvidia-cuda-cccl==13.0.85 nvidia-cuda-nvrtc==13.0.88 nvidia-cublas==13.0.2.14 nvidia-curand==10.4.0.35
fi
N=$TOOLS/nvidia/cu13

(cd examples/candle && cargo +stable fetch --quiet)
sys=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/cudarc-0.19.*/src/driver/sys/mod.rs | sort -V | tail -1)
mkdir -p "$STUB"
grep -oE '^pub unsafe fn cu[A-Za-z0-9_]+\(' "$sys" | sed -E 's/pub unsafe fn (cu[A-Za-z0-9_]+)\(/\1/' | sort -u |
  awk 'BEGIN { print "/* libcuda.so.1 link-time stand-in: never loaded (scripts/candle-bundle.sh). */" }
       { print "int " $1 "(void) { return 34; /* CUDA_ERROR_STUB_LIBRARY */ }" }' > "$STUB/cuda_stub.c"
gcc -shared -fPIC -o "$STUB/libcuda.so" -Wl,-soname,libcuda.so.1 "$STUB/cuda_stub.c"
for l in nvrtc cublas cublasLt cudart; do ln -sf "$N/lib/lib$l.so.13" "$STUB/lib$l.so"; done
ln -sf "$N/lib/libcurand.so.10" "$STUB/libcurand.so"

export PATH="$N/bin:$PATH" CUDA_COMPUTE_CAP=90 CUDA_ROOT="$N" CUDA_PATH="$N" CUDA_HOME="$N"
export NVCC_PREPEND_FLAGS="-I$N/include/cccl" LIBRARY_PATH="$STUB" RUSTFLAGS="-L $STUB"
unset CUDARC_CUDA_VERSION
(cd examples/candle && cargo +stable build --release)

out=$(mktemp -d)
mkdir -p "$out/candle"
cp "$CARGO_TARGET_DIR/release/rgdn-candle" "$out/candle/"
strip "$out/candle/rgdn-candle" || true
tar czf "$root/bundle-candle.tgz" -C "$out" candle
rm -rf "$out"
echo "bundle-candle.tgz: $(stat -c %s "$root/bundle-candle.tgz") bytes; needs on the GPU machine: $(readelf -d "$CARGO_TARGET_DIR/release/rgdn-candle" | grep NEEDED | grep -oE '\[[^]]+\]' | tr -d '[]' | tr '\n' ' ')"
