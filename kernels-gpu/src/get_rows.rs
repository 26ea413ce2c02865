//! GET_ROWS f32 → f32 — ggml's `k_get_rows_float` (spec §2.1): `dst row i = src row rows[i]`,
//! the gather of the conv and ssm state rows of a ubatch from the recurrent cache.
//!
//! Thread mapping: block of [`GET_ROWS_BLOCK`](crate::abi::GET_ROWS_BLOCK) threads, grid
//! (x = destination row i, y = min(⌈row_len/256⌉, 65535)). Thread `tid` of block (i, by) copies
//! elements `by·256 + tid`, then `+ gridDim.y·256`, … of row i (ggml swaps x and y so that the
//! number of rows may exceed 65535).
//!
//! Layouts (element strides, checked by the host): `src` row r at `r·src_row`, `dst` row i at
//! `i·dst_row`, both with contiguous elements; row index i at `rows[i·rows_stride]` (I32).
//!
//! Values move as u32 bit patterns with no float instruction: exact for NaN payloads and
//! subnormals (ggml's int4 variant is the same copy in 16-byte chunks).
//!
//! Aliasing: `dst` must not overlap `src` (a row written could be a row another block still
//! reads); the host refuses overlapping views and checks every index against `src` beforehand.

use crate::abi::GetRowsParams;
use crate::device::thread::{block_idx_x, block_idx_y, grid_dim_y, thread_idx_x};

/// Copies elements `start, start + step, … < len` of one row. Shared with the fused conv-chain
/// kernel (the conv-state gather).
///
/// # Safety
/// `src` and `dst` must each hold `len` u32 and must not overlap.
#[inline(always)]
pub unsafe fn copy_row_strided(src: *const u32, dst: *mut u32, start: usize, step: usize, len: usize) {
    let mut i = start;
    while i < len {
        // SAFETY: i < len, forwarded to the caller.
        unsafe { *dst.add(i) = *src.add(i) };
        i += step;
    }
}

/// # Safety
/// See the module docs: the host validated that every `rows[i]` (i < gridDim.x) lies in `src`,
/// that every row touched lies inside its view, and that `dst` is disjoint from `src`.
#[unsafe(export_name = crate::abi::entry_name!(get_rows))]
pub unsafe extern "ptx-kernel" fn get_rows_f32(p: GetRowsParams) {
    let (src, rows, dst) = (p.src as *const u32, p.rows as *const i32, p.dst as *mut u32);
    let (src_row, rows_stride, dst_row, row_len) = (p.src_row as usize, p.rows_stride as usize, p.dst_row as usize, p.row_len as usize);
    let i = block_idx_x() as usize;
    let block = crate::abi::GET_ROWS_BLOCK as usize;
    // SAFETY: i < gridDim.x = the number of indices; the host checked 0 ≤ rows[i] < n_src_rows,
    // so the cast is lossless and both rows lie inside their views.
    let (from, to) = unsafe {
        let r = *rows.add(i * rows_stride) as usize;
        (src.add(r * src_row), dst.add(i * dst_row))
    };
    let start = block_idx_y() as usize * block + thread_idx_x() as usize;
    // SAFETY: both rows hold row_len elements and are disjoint (checked by the host).
    unsafe { copy_row_strided(from, to, start, grid_dim_y() as usize * block, row_len) };
}
