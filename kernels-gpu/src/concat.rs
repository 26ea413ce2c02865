//! CONCAT along dimension 0 — ggml's `concat_f32_non_cont` (spec §2.2): `dst = [a | b]` per
//! (i1, i2), building `conv_input` from the gathered conv state (`a`) and the transposed
//! projection view (`b`).
//!
//! Thread mapping: block of [`CONCAT_BLOCK`](crate::abi::CONCAT_BLOCK) threads, grid
//! (x = i1, y = i2); thread `tid` loops `i0 = tid, tid + 256, … < na + nb` and copies element
//! (i0, i1, i2) of `dst` from `a(i0, i1, i2)` when `i0 < na`, else from `b(i0 − na, i1, i2)`.
//!
//! Layouts: every operand is addressed by its own element strides (any strides: in the layer
//! `b` is the transposed projection, strides [C, 1, C·n_t]).
//!
//! Values move as u32 bit patterns with no float instruction (ggml dispatches on the type size
//! and copies 32-bit integers): exact for every pattern.
//!
//! Aliasing: `dst` must not overlap `a` or `b`, and no two `dst` elements may share an address;
//! the host refuses such views.

use crate::device::memory::{load_nc_u32, store_u32};
use crate::device::thread::{block_idx_x, block_idx_y, thread_idx_x};

/// Copies row (i1, i2) of the concatenation: `i0 = start, start + step, … < na + nb`. Shared
/// with the fused conv-chain kernel.
///
/// # Safety
/// `a_row` must address `na` elements with stride `a0`, `b_row` `nb` elements with stride `b0`,
/// `dst_row` `na + nb` distinct elements with stride `d0`, none overlapping another.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn concat_row(
    a_row: *const u32,
    a0: usize,
    b_row: *const u32,
    b0: usize,
    dst_row: *mut u32,
    d0: usize,
    na: usize,
    nb: usize,
    start: usize,
    step: usize,
) {
    let mut i0 = start;
    while i0 < na + nb {
        // SAFETY: i0 < na reads a, otherwise i0 − na < nb reads b; i0 < na + nb for dst.
        unsafe {
            let x = if i0 < na { *a_row.add(i0 * a0) } else { *b_row.add((i0 - na) * b0) };
            *dst_row.add(i0 * d0) = x;
        }
        i0 += step;
    }
}

/// # Safety
/// See the module docs: the host validated all three views for grid (n1, n2), `na` and `nb`.
#[unsafe(export_name = crate::abi::entry_name!(concat_dim0))]
pub unsafe extern "ptx-kernel" fn concat_dim0_f32(p: crate::abi::ConcatDim0Params) {
    let (a, b, dst) = (p.a as *const u32, p.b as *const u32, p.dst as *mut u32);
    let [a0, a1, a2] = p.a_stride.map(|s| s as usize);
    let [b0, b1, b2] = p.b_stride.map(|s| s as usize);
    let [d0, d1, d2] = p.dst_stride.map(|s| s as usize);
    let (na, nb) = (p.na as usize, p.nb as usize);
    let (i1, i2) = (block_idx_x() as usize, block_idx_y() as usize);
    // SAFETY: (i1, i2) is inside the grid (n1, n2) the host validated every view for.
    unsafe {
        let (a_row, b_row, dst_row) = (a.add(i1 * a1 + i2 * a2), b.add(i1 * b1 + i2 * b2), dst.add(i1 * d1 + i2 * d2));
        concat_row(a_row, a0, b_row, b0, dst_row, d0, na, nb, thread_idx_x() as usize, crate::abi::CONCAT_BLOCK as usize);
    }
}

/// [speed] CONCAT dim 0 as one flat kernel: one thread per element of the destination,
/// `idx = (i2·n1 + i1)·(na + nb) + i0`, copied as u32 from `a(i0, i1, i2)` when `i0 < na`, else
/// from `b(i0 − na, i1, i2)`, each operand addressed by its own element strides. ggml runs a flat
/// kernel like this when both sources are contiguous (the layer at n_t = 1); with strides it
/// also replaces the per-row kernel's 8192 mostly idle blocks at n_t > 1. Exact for every bit
/// pattern.
///
/// # Safety
/// Launched with ⌈total / [`CONCAT_FLAT_BLOCK`](crate::abi::CONCAT_FLAT_BLOCK)⌉ blocks of that
/// size; the host validated the three views for (na, nb, n1, n2 = total / ((na + nb)·n1)),
/// na, nb, n1 ≥ 1, that `dst` addresses every element once and overlaps neither source.
#[unsafe(export_name = crate::abi::entry_name!(concat_flat))]
pub unsafe extern "ptx-kernel" fn concat_flat_f32(p: crate::abi::ConcatFlatParams) {
    let idx = block_idx_x() * crate::abi::CONCAT_FLAT_BLOCK + thread_idx_x();
    if idx >= p.total {
        return;
    }
    // The host validated na + nb ≥ 2 and n1 ≥ 1; `checked_div` keeps core's divide-by-zero
    // panic path out of the PTX, and a violated contract aborts the launch.
    let ne0 = p.na + p.nb;
    let Some(row) = idx.checked_div(ne0) else { crate::device::trap() };
    let Some(i2) = row.checked_div(p.n1) else { crate::device::trap() };
    let i0 = idx - row * ne0;
    let i1 = row - i2 * p.n1;
    let at = |s: [u64; 3], i0: u32| i0 as u64 * s[0] + i1 as u64 * s[1] + i2 as u64 * s[2];
    let (a, b, dst) = (p.a as *const u32, p.b as *const u32, p.dst as *mut u32);
    // SAFETY: (i0, i1, i2) is an element of dst and, for i0 < na, of a, else (i0 − na, i1, i2)
    // of b, all validated views; the sources are never written (dst overlaps neither) and each
    // dst element belongs to one thread.
    unsafe {
        let x = if i0 < p.na {
            load_nc_u32(a.wrapping_add(at(p.a_stride, i0) as usize))
        } else {
            load_nc_u32(b.wrapping_add(at(p.b_stride, i0 - p.na) as usize))
        };
        store_u32(dst.wrapping_add(at(p.dst_stride, i0) as usize), x);
    }
}
