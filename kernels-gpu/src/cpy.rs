//! One-row copy + batched snapshot rows: CPY f32 → f32 and CPY_SNAPSHOTS.
//!
//! **CPY** — ggml's scalar `cpy_flt` (spec §2.3): the f-th element of `src` in logical (`ne`)
//! order goes to the f-th element of `dst` in logical order, for any two 4-D views with the same
//! element count (in the layer: a conv-state `window(o)` view into a cache-row view `dst(slot)`).
//! Thread mapping: block of [`CPY_BLOCK`](crate::abi::CPY_BLOCK) threads, grid ⌈n/64⌉; thread
//! with flat index `f = blockIdx.x·64 + tid` decomposes f into 4-D indices on both sides and
//! copies one element.
//!
//! **CPY_SNAPSHOTS** — all 1 + R conv-state snapshot rows of a ubatch in one launch (what the
//! layer otherwise does with one CPY per slot, spec §1.3 W1/W2). For slot j and sequence s,
//! cache row `j·group_stride + first_row + s` receives `window(max(0, n_t − j))` (the clamped
//! rule, spec README decision 1): element (jj, c) of the window, `conv_input(o + jj, c, s)`,
//! lands at offset `c·(d_conv−1) + jj` of the row. Thread mapping: block of
//! [`CPY_SNAPSHOTS_BLOCK`](crate::abi::CPY_SNAPSHOTS_BLOCK) threads, grid (x = channel block,
//! y = j·n_s + s); the thread of channel c copies that channel's d_conv−1 values.
//!
//! Layouts (element strides, checked by the host): CPY addresses both views by their own four
//! strides; CPY_SNAPSHOTS reads `conv_input` (col, c, s) at `col + c·in_channel + s·in_seq`
//! and writes cache row r at `r·cache_row`, both with contiguous elements.
//!
//! Values move as u32 bit patterns with no float instruction: exact for every pattern.
//!
//! Aliasing: the destination must not overlap the source, and no two destination elements
//! (CPY_SNAPSHOTS: no two (slot, sequence) pairs) may share an address; the host refuses it.

use crate::device::thread::{block_idx_x, block_idx_y, thread_idx_x};
use core::num::NonZeroU32;

/// ggml's decomposition of flat index `f` into the logical index (i0, i1, i2, i3) of a tensor
/// with sizes `ne0, ne1, ne2` (the last size is implied by the element count). The sizes are
/// `NonZero` so that the divisions need no zero check (and no panic path).
#[inline(always)]
pub fn unravel(f: u32, [ne0, ne1, ne2]: [NonZeroU32; 3]) -> [usize; 4] {
    let (i0, rest) = (f % ne0, f / ne0);
    let (i1, rest) = (rest % ne1, rest / ne1);
    let (i2, i3) = (rest % ne2, rest / ne2);
    [i0 as usize, i1 as usize, i2 as usize, i3 as usize]
}

/// The three leading sizes of a view as divisors.
///
/// # Safety
/// Every size must be ≥ 1 (the host refuses empty views).
#[inline(always)]
unsafe fn sizes(ne0: u32, ne1: u32, ne2: u32) -> [NonZeroU32; 3] {
    // SAFETY: forwarded to the caller.
    unsafe { [NonZeroU32::new_unchecked(ne0), NonZeroU32::new_unchecked(ne1), NonZeroU32::new_unchecked(ne2)] }
}

/// Element offset of logical index `i` in a view with element strides `s`.
#[inline(always)]
pub fn offset(i: [usize; 4], s: [usize; 4]) -> usize {
    i[0] * s[0] + i[1] * s[1] + i[2] * s[2] + i[3] * s[3]
}

/// # Safety
/// See the module docs: the host validated that both views hold `n` elements inside their
/// buffers, that `dst` addresses each element once, and that the views are disjoint.
#[unsafe(export_name = crate::abi::entry_name!(cpy))]
pub unsafe extern "ptx-kernel" fn cpy_f32_f32(p: crate::abi::CpyParams) {
    let (src, dst, n) = (p.src as *const u32, p.dst as *mut u32, p.n);
    let ([src_ne0, src_ne1, src_ne2], [dst_ne0, dst_ne1, dst_ne2]) = (p.src_ne, p.dst_ne);
    let (s, d) = (p.src_stride.map(|s| s as usize), p.dst_stride.map(|s| s as usize));
    // n ≤ i32::MAX and the grid is ⌈n/64⌉ blocks, so f cannot wrap.
    let f = block_idx_x() * crate::abi::CPY_BLOCK + thread_idx_x();
    if f >= n {
        return;
    }
    // SAFETY: the host refused empty views, so every size is ≥ 1.
    let (src_ne, dst_ne) = unsafe { (sizes(src_ne0, src_ne1, src_ne2), sizes(dst_ne0, dst_ne1, dst_ne2)) };
    let from = offset(unravel(f, src_ne), s);
    let to = offset(unravel(f, dst_ne), d);
    // SAFETY: f < n, so both logical indices are inside their views (checked by the host).
    unsafe { *dst.add(to) = *src.add(from) };
}

/// The window offset snapshot slot `slot` receives: `max(0, n_t − slot)` (the clamped rule: the
/// state `slot` tokens back, or the incoming state when the ubatch is shorter than that).
#[inline(always)]
pub fn window_offset(n_tokens: u32, slot: u32) -> u32 {
    n_tokens.saturating_sub(slot)
}

/// Copies `state_len` values of one channel: `row[jj] = cols[o + jj]`. Shared with the fused
/// conv-chain kernel (its snapshot writes).
///
/// # Safety
/// `cols` must hold `o + state_len` u32 and `row` `state_len` u32, not overlapping.
#[inline(always)]
pub unsafe fn copy_window(cols: *const u32, o: usize, row: *mut u32, state_len: usize) {
    let mut jj = 0;
    while jj < state_len {
        // SAFETY: jj < state_len, forwarded to the caller.
        unsafe { *row.add(jj) = *cols.add(o + jj) };
        jj += 1;
    }
}

/// # Safety
/// See the module docs: the host validated `conv_input` for (state_len + n_tokens, n_channels,
/// n_seqs), that every row `j·group_stride + first_row + s` (j < gridDim.y / n_seqs) lies in the
/// cache, that those rows are distinct, and that the cache is disjoint from `conv_input`.
#[unsafe(export_name = crate::abi::entry_name!(cpy_snapshots))]
pub unsafe extern "ptx-kernel" fn cpy_snapshots_f32(p: crate::abi::CpySnapshotsParams) {
    let (conv_input, cache) = (p.conv_input as *const u32, p.cache as *mut u32);
    let (in_channel, in_seq, cache_row) = (p.in_channel as usize, p.in_seq as usize, p.cache_row as usize);
    let (first_row, group_stride) = (p.first_row as usize, p.group_stride as usize);
    let (state_len, n_channels, n_tokens, n_seqs) = (p.state_len, p.n_channels, p.n_tokens, p.n_seqs);
    let c = block_idx_x() * crate::abi::CPY_SNAPSHOTS_BLOCK + thread_idx_x();
    if c >= n_channels {
        return;
    }
    // SAFETY: the host refused an empty conv_input, so n_seqs ≥ 1.
    let n_seqs = unsafe { NonZeroU32::new_unchecked(n_seqs) };
    let (slot, seq) = (block_idx_y() / n_seqs, block_idx_y() % n_seqs);
    let o = window_offset(n_tokens, slot) as usize;
    let (c, seq, state_len) = (c as usize, seq as usize, state_len as usize);
    let row = slot as usize * group_stride + first_row + seq;
    // SAFETY: c < n_channels, seq < n_seqs and o + state_len ≤ n_tokens + state_len columns, all
    // inside conv_input; `row` is a validated cache row, distinct for every (slot, seq), and the
    // channel's slice c·state_len … (c+1)·state_len lies inside it.
    unsafe {
        let cols = conv_input.add(c * in_channel + seq * in_seq);
        copy_window(cols, o, cache.add(row * cache_row + c * state_len), state_len);
    }
}
