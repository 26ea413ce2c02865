//! L2_NORM — ggml's `l2_norm_f32` for rows shorter than 1024 (spec §2.6): `y = x · rsqrt(max(Σx²,
//! eps²))` per row.
//!
//! Thread mapping: one warp per row; grid (x = row, y = channel, z = sample), i.e. ggml's
//! (ne01, ne02, ne03). Lane `l` owns columns `l, l+32, l+64, …`.
//!
//! Layouts (element strides, checked by the host): source row (r, ch, s) starts at
//! `r·src_row + ch·src_channel + s·src_sample`, columns contiguous (the q/k head views of the
//! conv output are such views); destination likewise with its own strides.
//!
//! Aliasing: `dst` may equal `src` element for element (each lane reads its columns before it
//! writes them); partial overlap is refused by the host.

use crate::device::math::mul;
use crate::device::thread::{block_idx_x, block_idx_y, block_idx_z, thread_idx_x};
use crate::device::warp::warp_sum;
use crate::fast_math::{dot_step, l2_scale};

/// This lane's partial Σx² over columns `lane, lane+32, …` (`fma` from a +0 addend), reading
/// column `col` through `load` (global memory here, shared memory in the fused conv chain).
/// Shared with the fused conv-chain kernel.
#[inline(always)]
pub fn lane_sum_sq_with(load: impl Fn(u32) -> f32, lane: u32, n_cols: u32) -> f32 {
    let mut acc = 0.0f32;
    let mut col = lane;
    while col < n_cols {
        let x = load(col);
        acc = dot_step(acc, x, x);
        col += 32;
    }
    acc
}

/// [`lane_sum_sq_with`] over a row in memory.
///
/// # Safety
/// `row` must point to `n_cols` readable f32.
#[inline(always)]
pub unsafe fn lane_sum_sq(row: *const f32, lane: u32, n_cols: u32) -> f32 {
    // SAFETY: `load` is only called with col < n_cols, forwarded to the caller.
    lane_sum_sq_with(|col| unsafe { *row.add(col as usize) }, lane, n_cols)
}

/// The normalised row: `store(col, scale · load(col))` for columns `lane, lane+32, …`; each
/// column is read just before it is written. Shared with the fused conv-chain kernel.
#[inline(always)]
pub fn scale_row_with(scale: f32, load: impl Fn(u32) -> f32, mut store: impl FnMut(u32, f32), lane: u32, n_cols: u32) {
    let mut col = lane;
    while col < n_cols {
        store(col, mul(scale, load(col)));
        col += 32;
    }
}

/// The row's scale: the butterfly sum of the lanes' partials, then `rsqrt(max(·, eps²))`.
/// Identical in all lanes.
///
/// # Safety
/// All 32 lanes of the warp must call it together.
#[inline(always)]
pub unsafe fn row_scale(lane_partial: f32, eps: f32) -> f32 {
    // SAFETY: forwarded to the caller (whole warp converged).
    l2_scale(unsafe { warp_sum(lane_partial) }, eps)
}

/// # Safety
/// See the module docs: the host validates every view before launching with 32 threads.
#[cfg(target_arch = "nvptx64")]
#[unsafe(export_name = crate::abi::entry_name!(l2_norm))]
pub unsafe extern "ptx-kernel" fn l2_norm_f32(p: crate::abi::L2NormParams) {
    let (src, dst, n_cols, eps) = (p.src as *const f32, p.dst as *mut f32, p.n_cols, p.eps);
    let (src_row, src_channel, src_sample) = (p.src_row as usize, p.src_channel as usize, p.src_sample as usize);
    let (dst_row, dst_channel, dst_sample) = (p.dst_row as usize, p.dst_channel as usize, p.dst_sample as usize);
    let (r, ch, s) = (block_idx_x() as usize, block_idx_y() as usize, block_idx_z() as usize);
    let lane = thread_idx_x();
    // SAFETY: the host checked both views cover n_cols columns of every (r, ch, s) in the grid.
    let x = unsafe { src.add(r * src_row + ch * src_channel + s * src_sample) };
    let y = unsafe { dst.add(r * dst_row + ch * dst_channel + s * dst_sample) };
    // SAFETY: the block is exactly one full warp, every lane reaches both collectives.
    let scale = unsafe { row_scale(lane_sum_sq(x, lane, n_cols), eps) };
    // SAFETY: `scale_row_with` calls both with col < n_cols; this lane reads x[col] before it
    // writes y[col].
    scale_row_with(scale, |col| unsafe { *x.add(col as usize) }, |col, v| unsafe { *y.add(col as usize) = v }, lane, n_cols);
}
