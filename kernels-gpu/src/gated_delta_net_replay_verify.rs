//! [replay] GATED_DELTA_NET_REPLAY_VERIFY — the `replay_verify` fusion's kernel: exact replay's
//! GATED_DELTA_NET_REPLAY followed by the verify step's GATED_DELTA_NET_FROM_CACHE, which reads
//! the rows the replay just wrote, in one launch (`docs/rollback.md`, "Replay: one step").
//!
//! Per value head h, sequence s and value column col (GATED_DELTA_NET's grid and warp layout:
//! block (32, [`GDN_WARPS`], 1), grid (H_v, n_s, D / 4), warp `threadIdx.y` of block z owns
//! column `4·z + threadIdx.y`, lane l rows `32·r + l`):
//! 1. The L2 hint for the verify's tokens, as GATED_DELTA_NET issues it (hints only).
//! 2. `a = accepted[s]` (0 ..= T_log, validated by the host).
//! 3. The column's state, once, with coherent loads: from row `source_rows[s]` when a > 0 (what
//!    GATED_DELTA_NET_REPLAY reads), from row `dest_rows[s]` when a = 0 (the replay writes
//!    nothing, so that row holds what GATED_DELTA_NET_FROM_CACHE would read).
//! 4. a > 0: GATED_DELTA_NET_REPLAY's loop over the logged tokens t < a — [`token_update`] on
//!    each, the same `#[inline(always)]` bodies in the same order — and the state, once, to
//!    row `dest_rows[s]`: GATED_DELTA_NET_REPLAY's store, the same bits.
//! 5. The verify's T tokens from the state in registers: GATED_DELTA_NET's token loop
//!    ([`token_step`] on each), as GATED_DELTA_NET_FROM_CACHE runs it from the row
//!    `dest_rows[s]` it would have read (the state just stored, or with a = 0 the row's own
//!    bits) — every `out` element the same bits — and no state slot: the pair's scratch slot
//!    is the value the fusion eliminates.
//!
//! The two loops are GATED_DELTA_NET_REPLAY's and GATED_DELTA_NET's skeletons written again
//! around the shared bodies rather than factored out of those kernels: factoring them out
//! renumbered registers and changed instruction selection in the existing entries' PTX (tried),
//! and those entries must stay byte for byte what was measured.
//!
//! Why the cache may be read and written by one launch (GATED_DELTA_NET_REPLAY's argument, one
//! row more): element (i, col, h) of row `source_rows[s]` or `dest_rows[s]` is read by exactly
//! one thread (lane i mod 32 of the warp of column col in block (h, s, col / 4), register
//! i / 32), once, with a coherent load, before that thread's only store, which is of element
//! (i, col, h) of row `dest_rows[s]`. The host refuses index values under which a row one
//! sequence writes is a row another sequence reads or writes (`dest_rows[s]` ≠ `source_rows[s']`
//! and ≠ `dest_rows[s']` for s ≠ s'), so the only thread that reads a byte the kernel writes is
//! the thread that writes it, and it reads first (program order of one thread; the load is not
//! `pure`, so it stays before the store). The log, the verify's q, k, v, g and β and the index
//! views are never written (`.nc` loads; the host refuses any of them sharing bytes with the
//! cache or with `out`), and `out` elements are written once each, by lane 0 of their column's
//! warp.

use crate::abi::{self, GDN_HEAD_DIM, GDN_WARPS};
use crate::device::math::mul;
use crate::device::memory::{store_f32_at, store_f32x4_stride32};
use crate::device::thread::{block_idx_x, block_idx_y, block_idx_z, thread_idx_x, thread_idx_y};
use crate::device::trap;
use crate::gated_delta_net::{
    HeadViews, L2_PREFETCH_TOKENS, ROWS_PER_LANE, decay, load_lane_coherent, prefetch_tokens, token_step, token_update,
};
use crate::gated_delta_net_replay::{LogSource, index_at};

/// One column (see the module docs) for block (`head`, `seq`, `group`), warp `warp`, lane
/// `lane`.
///
/// # Safety
/// Launched with block (32, [`GDN_WARPS`], 1) and grid (H_v, n_s, D / [`GDN_WARPS`]) on
/// parameters the host validated: the replay's as GATED_DELTA_NET_REPLAY's launch contract
/// states them (log views for tokens < `replay.n_tokens`, rows of the cache, counts in
/// 0 ..= `replay.n_tokens`, the row rule), the verify's views as GATED_DELTA_NET's (heads < H_v,
/// key heads < `verify.n_key_heads`, 1 ≤ `verify.n_tokens` tokens, sequences < n_s;
/// `verify.states` the cache's row 0 with `verify.states_seq` = 0, so that the head's slot
/// pointer HeadViews computes lies in that row — it is never dereferenced), and the module
/// docs' aliasing rules.
#[inline(always)]
unsafe fn run(p: &abi::GatedDeltaNetReplayVerifyParams, head: u32, seq: u32, group: u32, warp: u32, lane: u32) {
    let (r, col, lane_usize) = (&p.replay, (group * GDN_WARPS + warp) as usize, lane as usize);
    // SAFETY: head < H_v, seq < n_s of the validated verify views (launch contract).
    let h = unsafe { HeadViews::at(&p.verify, head, seq) };
    let (head, seq) = (head as usize, seq as usize);
    // 1. [speed] GATED_DELTA_NET's L2 hint for the verify's tokens (warp 0 of the blocks with
    // z = 0), issued before the replay so that it overlaps it. Hints only.
    let mut src = h.token_source(lane_usize, col);
    if group == 0 && warp == 0 {
        // SAFETY: `src` is at token 0 of the validated views (hints only).
        unsafe { prefetch_tokens(&src, lane_usize, h.n_tokens.min(L2_PREFETCH_TOKENS)) };
    }
    // 2. The accepted count.
    // SAFETY: seq < n_s: an element of the validated index view, never written.
    let a = unsafe { index_at(r.accepted, r.accepted_stride, seq) };
    if a > r.n_tokens {
        // The host validated a ≤ T_log; a violated contract aborts the launch.
        trap();
    }
    // The host validated n_key_heads ≥ 1; `checked_rem` keeps core's divide-by-zero panic path
    // out of the PTX.
    let Some(key_head) = (head as u32).checked_rem(r.n_key_heads) else { trap() };
    let key_head = key_head as usize;
    // SAFETY: seq < n_s: elements of the validated index views, each a row of the cache, never
    // written; the cast of a non-negative i32 is lossless.
    let (source, dest) =
        unsafe { (index_at(r.source_rows, r.source_rows_stride, seq) as usize, index_at(r.dest_rows, r.dest_rows_stride, seq) as usize) };
    let cache = r.cache as usize as *mut f32;
    // This column's elements in a row's head block: (h·D + col)·D + i.
    let column = (head * GDN_HEAD_DIM + col) * GDN_HEAD_DIM;
    let row_stride = r.cache_row as usize;
    // 3. The state, once: the row the replay reads, or with a = 0 the row the verify reads.
    let read = if a > 0 { source } else { dest };
    // SAFETY: this lane's elements (i, col, head) of row `read`, inside the validated cache
    // view; read before this thread's only store, and no other thread writes them (module docs).
    let mut s = unsafe { load_lane_coherent(cache.wrapping_add(read * row_stride + column), lane_usize) };
    if a > 0 {
        // 4. The replay: GATED_DELTA_NET_REPLAY's loop (token t + 1's log loaded before token
        // t's arithmetic, the last token peeled off), then its store.
        let mut log = LogSource {
            k: r.k.at(key_head, seq),
            v: r.v.at(head, seq),
            g: r.g.at(head, seq),
            beta: r.beta.at(head, seq),
            lane,
            col: col as u32,
            k_token: r.k.token as usize,
            v_token: r.v.token as usize,
            g_token: r.g.token as usize,
            beta_token: r.beta.token as usize,
        };
        // SAFETY (loads): token t < a ≤ T_log of the validated log views, written by nobody.
        let mut cur = unsafe { log.load() };
        let mut t = 1;
        while t < a {
            log.advance();
            // SAFETY: token t < a ≤ T_log of the validated log views, written by nobody.
            let next = unsafe { log.load() };
            // SAFETY: every lane of the warp runs the same trip count (a is the warp's) with no
            // early exit.
            unsafe { token_update(&mut s, &cur.k, cur.v, decay(cur.g), cur.beta) };
            cur = next;
            t += 1;
        }
        // SAFETY: as above.
        unsafe { token_update(&mut s, &cur.k, cur.v, decay(cur.g), cur.beta) };
        // SAFETY: this lane's elements (i, col, head) of row `dest` (index `column + lane + 32·r`),
        // inside the validated cache view, written by this thread only (module docs).
        unsafe { store_f32x4_stride32(cache.wrapping_add(dest * row_stride), (column + lane_usize) as u32, &s) };
    }
    // 5. The verify: GATED_DELTA_NET's token loop (token t + 1's inputs loaded before token t's
    // arithmetic, the last token peeled off), each token's `out` element, no state slot.
    let (n_tokens, scale, out_token) = (h.n_tokens, h.scale, h.out_token);
    let mut out_t = h.out_head_row;
    let mut finish = |a: f32| {
        if lane == 0 {
            // SAFETY: element (col, head, t, seq) of `out`, written by this warp's lane 0 only.
            unsafe { store_f32_at(out_t, col as u32, mul(a, scale)) };
        }
        // One token further in `out`; dereferenced only for the next t < n_tokens.
        out_t = out_t.wrapping_add(out_token);
    };
    // SAFETY (loads): token 0 < n_tokens (≥ 1, validated) of the validated input views, written
    // by nobody.
    let mut cur = unsafe { src.load() };
    let mut t = 0;
    while t + 1 < n_tokens {
        src.advance();
        // SAFETY: token t + 1 < n_tokens of the validated input views, written by nobody.
        let next = unsafe { src.load() };
        // SAFETY: every lane of the warp runs the same trip count with no early exit.
        finish(unsafe { token_step(&mut s, &cur.k, &cur.q, cur.v, cur.g, cur.beta) });
        cur = next;
        t += 1;
    }
    // SAFETY: as above.
    finish(unsafe { token_step(&mut s, &cur.k, &cur.q, cur.v, cur.g, cur.beta) });
}

/// Entry point; see the module docs.
///
/// # Safety
/// As [`run`]: launched with block (32, [`GDN_WARPS`], 1) and grid (H_v, n_s, D / [`GDN_WARPS`])
/// on parameters the host validated.
#[unsafe(export_name = crate::abi::entry_name!(gated_delta_net_replay_verify))]
pub unsafe extern "ptx-kernel" fn gated_delta_net_replay_verify_f32_d128(p: abi::GatedDeltaNetReplayVerifyParams) {
    // SAFETY: forwarded from the launch contract (the indices are the launch's own).
    unsafe { run(&p, block_idx_x(), block_idx_y(), block_idx_z(), thread_idx_y(), thread_idx_x()) }
}

const _: () = assert!(ROWS_PER_LANE == 4, "store_f32x4_stride32 stores four rows a lane");
