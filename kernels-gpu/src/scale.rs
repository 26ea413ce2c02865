//! SCALE — ggml's `scale_f32` (spec §2.4): `dst[i] = scale·src[i] + bias`, which nvcc contracts
//! into one `fma.rn.ftz`. The layer uses it with scale = bias = 0 to zero a fresh state row in
//! place (+0 for every finite input, NaN for ±Inf and NaN).
//!
//! Thread mapping: block of [`SCALE_BLOCK`](crate::abi::SCALE_BLOCK) threads, at most
//! [`SCALE_MAX_BLOCKS`](crate::abi::SCALE_MAX_BLOCKS) blocks, grid-stride loop over the
//! contiguous elements (the grid size does not change any result).
//!
//! Aliasing: `dst` may be `src` itself (each thread reads its element before writing it);
//! partial overlap is refused by the host.

use crate::device::math::fma;
use crate::device::thread::{block_dim_x, block_idx_x, grid_dim_x, thread_idx_x};

/// One element: `fma(scale, x, bias)`, a single rounding (ggml's contracted `scale * x + bias`).
/// Shared with fused kernels.
#[inline(always)]
pub fn scale_bias(x: f32, scale: f32, bias: f32) -> f32 {
    fma(scale, x, bias)
}

/// # Safety
/// See the module docs: the host validated that `src` and `dst` hold `n` contiguous f32 and are
/// the same elements or disjoint.
#[unsafe(export_name = crate::abi::entry_name!(scale))]
pub unsafe extern "ptx-kernel" fn scale_f32(p: crate::abi::ScaleParams) {
    let (src, dst, scale, bias, n) = (p.src as *const f32, p.dst as *mut f32, p.scale, p.bias, p.n as usize);
    let mut i = (block_idx_x() * block_dim_x() + thread_idx_x()) as usize;
    let stride = (grid_dim_x() * block_dim_x()) as usize;
    while i < n {
        // SAFETY: i < n; this thread reads src[i] before it writes dst[i].
        unsafe { *dst.add(i) = scale_bias(*src.add(i), scale, bias) };
        i += stride;
    }
}
