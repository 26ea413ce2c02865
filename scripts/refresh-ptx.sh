#!/usr/bin/env bash
# Rebuilds the kernels with the pinned nightly and commits-ready copies them, gzipped, to
# kernels-gpu/ptx/<arch>.ptx.gz: what a stable-Rust build of rgdn embeds (decompressed). Run after any change under
# kernels-gpu/src (tests/ptx_committed.rs fails until you do), then `git add kernels-gpu/ptx`.
#
#   scripts/refresh-ptx.sh            # sm_90
#   ARCHS="sm_90 sm_80" scripts/refresh-ptx.sh
set -euo pipefail
cd "$(dirname "$0")/.."
for arch in ${ARCHS:-sm_90}; do
    # RGDN_PTX_FROM=source: build from kernels-gpu/src or fail (never copy the committed file
    # onto itself). The build script's OUT_DIR holds the PTX it embedded.
    out_dir=$(RGDN_CUDA_ARCH="$arch" RGDN_PTX_FROM=source cargo build --lib --no-default-features --message-format=json \
        | grep '"reason":"build-script-executed"' \
        | sed -n 's/.*"out_dir":"\([^"]*\/build\/rgdn-[0-9a-f]*\/out\)".*/\1/p' | tail -n 1)
    if [[ -z "$out_dir" || ! -f "$out_dir/rgdn.ptx" ]]; then
        echo "refresh-ptx: cargo reported no build-script output directory for rgdn ($arch)" >&2
        exit 1
    fi
    mkdir -p kernels-gpu/ptx
    # -n: no name or time stamp in the header, so the same PTX gives the same file.
    gzip -9 -n -c "$out_dir/rgdn.ptx" > "kernels-gpu/ptx/$arch.ptx.gz"
    echo "kernels-gpu/ptx/$arch.ptx.gz: $(wc -c < "kernels-gpu/ptx/$arch.ptx.gz") bytes, $(wc -c < "$out_dir/rgdn.ptx") of PTX (md5 $(md5sum < "$out_dir/rgdn.ptx" | cut -c1-8)…) from $out_dir"
done
