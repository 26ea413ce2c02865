//! [replay] GATED_DELTA_NET_REPLAY_VERIFY — the `replay_verify` fusion's kernel: exact replay's
//! GATED_DELTA_NET_REPLAY followed by the verify step's GATED_DELTA_NET_FROM_CACHE, which reads
//! the rows the replay just wrote, in one launch (`docs/rollback.md`, "Replay: one step").
//!
//! Layout (the batched layer step's second phase, [`group_recurrence`]`::<8, 16>`): block (32,
//! [`GDN_WARPS`], 1), grid (H_v, n_s, D / [`BATCH_GDN_BLOCK_COLUMNS`]); warp `threadIdx.y`
//! = w of block (h, s, z) runs the [`BATCH_GDN_WARP_COLUMNS`] = 8 value columns
//! `col0 = 32·z + 8·w` … `col0 + 7` of head h and sequence s, interleaved; lane l holds rows
//! `32·r + l` of each. Dynamic shared memory: [`abi::replay_verify_shared_bytes`]`(T, T_log)`.
//! Per block:
//! 1. `a = accepted[s]` (0 ..= T_log, validated by the host; a violated contract traps).
//! 2. The 8 columns' state (this lane's 4 rows of each), once, with coherent loads: from row
//!    `source_rows[s]` when a > 0 (what GATED_DELTA_NET_REPLAY reads), from row `dest_rows[s]`
//!    when a = 0 (the replay writes nothing, so that row holds what GATED_DELTA_NET_FROM_CACHE
//!    would read).
//! 3. Staging (`cp.async`, one wait and one block barrier for all of it): the verify's T tokens
//!    as the batched layer step stages them ([`issue_token_copies`]: the key head's q and k rows
//!    shared by the block's four warps, each warp's 8 v, g, β), and the log's tokens t < a (the
//!    key head's k row, each warp's 8 v, g, β: [`issue_log_copies`]).
//! 4. a > 0: the replay, tokens t < a — [`columns_token_update`] on each: for each column
//!    GATED_DELTA_NET_REPLAY's [`token_update`](crate::gated_delta_net::token_update) (the 8
//!    columns' KV sums in one 8-value reduce-scatter, each sum
//!    [`warp_sum`](crate::device::warp::warp_sum)'s bits), token t + 1's staged inputs read
//!    before token t's arithmetic — and the state, once, to row `dest_rows[s]`:
//!    GATED_DELTA_NET_REPLAY's store, the same bits.
//! 5. The verify's T tokens from the state in registers: [`group_recurrence`]`::<8, 16>` (token
//!    t's outputs and token t + 1's KV in one 16-value reduce-scatter), each column's operations
//!    those of GATED_DELTA_NET_FROM_CACHE's warp for it from the row `dest_rows[s]` it would have
//!    read (the state just stored, or with a = 0 the row's own bits) — every `out` element the
//!    same bits — with `n_slots` = 0: no state slot (the pair's scratch slot is the value the
//!    fusion eliminates).
//!
//! Every column's operations, operands and order are those of the one-warp-per-column kernel
//! this replaces (GATED_DELTA_NET_REPLAY's loop, then GATED_DELTA_NET's): only independent
//! operations of different columns and tokens interleave, and each reduce-scatter value's sum
//! is the butterfly's (`device/warp.rs`).
//!
//! Why the cache may be read and written by one launch (GATED_DELTA_NET_REPLAY's argument, one
//! row more): element (i, col, h) of row `source_rows[s]` or `dest_rows[s]` is read by exactly
//! one thread (lane i mod 32 of warp (col mod 32) / 8 in block (h, s, col / 32), register
//! i / 32 of column col), once, with a coherent load, before that thread's only store, which is
//! of element (i, col, h) of row `dest_rows[s]`. The host refuses index values under which a
//! row one sequence writes is a row another sequence reads or writes (`dest_rows[s]` ≠
//! `source_rows[s']` and ≠ `dest_rows[s']` for s ≠ s'), so the only thread that reads a byte the
//! kernel writes is the thread that writes it, and it reads first (program order of one thread;
//! the load is not `pure`, so it stays before the store). The log, the verify's q, k, v, g and
//! β and the index views are never written (`cp.async` and `.nc` loads; the host refuses any of
//! them sharing bytes with the cache or with `out`), and `out` elements are written once each,
//! by one lane of their column's warp.

use crate::abi::{self, BATCH_GDN_BLOCK_COLUMNS, BATCH_GDN_WARP_COLUMNS, GDN_HEAD_DIM, GDN_WARPS};
use crate::device::memory::store_f32x4_stride32;
use crate::device::shared;
use crate::device::thread::{block_idx_x, block_idx_y, block_idx_z, sync_threads, thread_idx_x, thread_idx_y};
use crate::device::trap;
use crate::gated_delta_net::{HeadViews, ROWS_PER_LANE, WarpGroups, group_recurrence, issue_token_copies, load_lane_coherent};
use crate::gated_delta_net_replay::{LogSource, LoggedColumns, columns_token_update, index_at};

/// Value columns one warp runs.
const C: usize = BATCH_GDN_WARP_COLUMNS as usize;

/// Shared bytes of a staged logged token's k row (the block's key head).
const LOG_K_BYTES: u32 = GDN_HEAD_DIM as u32 * 4;
/// Shared bytes per (warp, logged token): the warp's 8 v, then g and β (+32, +36).
const LOG_WARP_TOKEN_BYTES: u32 = abi::layer_step_stage_warp_token_bytes(abi::BATCH_MAX_GROUPS_PER_WARP);
const _: () = assert!(LOG_K_BYTES + GDN_WARPS * LOG_WARP_TOKEN_BYTES == abi::REPLAY_VERIFY_LOG_TOKEN_BYTES);
const _: () = assert!(4 * (C as u32 + 2) <= LOG_WARP_TOKEN_BYTES && LOG_WARP_TOKEN_BYTES % 16 == 0);

/// The verify's staging layout: the batched layer step's, two groups (8 columns) a warp, room for
/// `n_tokens` tokens.
#[inline(always)]
fn verify_layout(n_tokens: usize) -> WarpGroups {
    WarpGroups::batch(abi::BATCH_MAX_GROUPS_PER_WARP, n_tokens as u32)
}

/// [replay] Logged token t's two places in the log's staging area at `base` (room for
/// `log_tokens` tokens): its k row at `base + 512·t` (the block's), then warp `warp`'s 8 v, g, β
/// at `base + 512·log_tokens + 64·(warp·log_tokens + t)` (16-byte aligned when `base` is).
#[inline(always)]
fn log_slots(base: u32, log_tokens: u32, warp: u32, t: u32) -> (u32, u32) {
    (base + t * LOG_K_BYTES, base + LOG_K_BYTES * log_tokens + (warp * log_tokens + t) * LOG_WARP_TOKEN_BYTES)
}

/// [replay] Starts staging logged tokens t < `a` in shared memory at `base` ([`log_slots`]):
/// thread 32·w + lane copies element 32·w + lane of every token's k row, lanes 0 … 7 of warp w
/// its columns' v (`log.col` + lane), lane 8 g, lane 9 β — each element the one
/// [`LogSource::load`] reads for its column. The copies land once the thread waited for them.
///
/// # Safety
/// Warp `warp` of the block, `log` at token 0 of the block's (key) head and sequence and at the
/// warp's first column; tokens < `a` ≤ `log_tokens` are validated log elements no thread writes;
/// the area holds `log_tokens` tokens ([`abi::REPLAY_VERIFY_LOG_TOKEN_BYTES`] each) and no
/// thread reads or writes it before the block barrier after this thread's wait.
#[inline(always)]
pub(crate) unsafe fn issue_log_copies(mut log: LogSource, a: u32, log_tokens: u32, warp: u32, base: u32) {
    let lane = log.lane;
    let tid = 32 * warp + lane;
    let columns = C as u32;
    let mut t = 0u32;
    while t < a {
        let (k_at, mine) = log_slots(base, log_tokens, warp, t);
        // SAFETY: token t < a of the validated log views, element tid < D of its k row, the
        // warp's columns col + lane (lane < 8), its g and β (caller); the slots lie inside the
        // area (t < log_tokens, warp < 4), each written by this thread only.
        unsafe {
            shared::copy_async_4(k_at + 4 * tid, log.k.add(tid as usize) as *const u32);
            // [speed] One copy for the three (as `issue_token_copies`): v at `mine + 4·lane`, g
            // at `mine + 4·columns`, β 4 bytes after.
            if lane < columns + 2 {
                let from = if lane < columns {
                    log.v.add((log.col + lane) as usize)
                } else if lane == columns {
                    log.g
                } else {
                    log.beta
                };
                shared::copy_async_4(mine + 4 * lane, from as *const u32);
            }
        }
        log.advance();
        t += 1;
    }
}

/// [replay] Logged token t's [`LoggedColumns`] for warp `warp` from [`issue_log_copies`]'s area:
/// k at rows 32·r + lane, the 8 columns' v, g, β.
///
/// # Safety
/// [`issue_log_copies`] staged tokens > t of this block and warp, the copies waited for and a
/// block barrier since, and nothing wrote the area since.
#[inline(always)]
pub(crate) unsafe fn staged_log_token(base: u32, log_tokens: u32, warp: u32, lane: u32, t: u32) -> LoggedColumns<C> {
    let (k_at, mine) = log_slots(base, log_tokens, warp, t);
    let mut x = LoggedColumns { k: [0.0; ROWS_PER_LANE], v: [0.0; C], g: 0.0, beta: 0.0 };
    let mut r = 0;
    while r < ROWS_PER_LANE {
        // SAFETY: a staged slot (caller).
        x.k[r] = unsafe { shared::load_f32(k_at + 4 * (32 * r as u32 + lane)) };
        r += 1;
    }
    // SAFETY: staged slots (caller), 16-byte aligned (`log_slots`).
    let (lo, hi, (g, beta)) = unsafe { (shared::load_f32x4(mine), shared::load_f32x4(mine + 16), shared::load_f32x2(mine + 32)) };
    let mut j = 0;
    while j < 4 {
        (x.v[j], x.v[4 + j]) = (lo[j], hi[j]);
        j += 1;
    }
    (x.g, x.beta) = (g, beta);
    x
}

/// The block (`head`, `seq`, `group`), warp `warp`, lane `lane` of the launch (see the module
/// docs).
///
/// # Safety
/// Launched with block (32, [`GDN_WARPS`], 1), grid (H_v, n_s, D / [`BATCH_GDN_BLOCK_COLUMNS`])
/// and [`abi::replay_verify_shared_bytes`]`(verify.n_tokens, replay.n_tokens)` bytes of dynamic
/// shared memory, on parameters the host validated: the replay's as GATED_DELTA_NET_REPLAY's
/// launch contract states them (log views for tokens < `replay.n_tokens`, rows of the cache,
/// counts in 0 ..= `replay.n_tokens`, the row rule), the verify's views as GATED_DELTA_NET's
/// (heads < H_v, key heads < `verify.n_key_heads`, 1 ≤ `verify.n_tokens` tokens, sequences
/// < n_s; `verify.states` the cache's row 0 with `verify.states_seq` = 0, so that the head's slot
/// pointer HeadViews computes lies in that row — it is never dereferenced), both token counts
/// ≤ [`abi::REPLAY_VERIFY_MAX_TOKENS`], and the module docs' aliasing rules. All 128 threads of
/// the block call it together.
#[inline(always)]
unsafe fn run(p: &abi::GatedDeltaNetReplayVerifyParams, head: u32, seq: u32, group: u32, warp: u32, lane: u32) {
    let r = &p.replay;
    let col0 = (group * BATCH_GDN_BLOCK_COLUMNS + warp * BATCH_GDN_WARP_COLUMNS) as usize;
    let lane_usize = lane as usize;
    // SAFETY: head < H_v, seq < n_s of the validated verify views (launch contract).
    let h = unsafe { HeadViews::at(&p.verify, head, seq) };
    // No state slot: with `n_slots` a constant 0 the recurrence's slot stores are compiled out.
    let h = HeadViews { n_slots: 0, ..h };
    let (head, seq) = (head as usize, seq as usize);
    // 1. The accepted count.
    // SAFETY: seq < n_s: an element of the validated index view, never written.
    let a = unsafe { index_at(r.accepted, r.accepted_stride, seq) };
    if a > r.n_tokens {
        // The host validated a ≤ T_log; a violated contract aborts the launch (every thread of
        // the block: a is the block's).
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
    let row_stride = r.cache_row as usize;
    // Column col0 + j's elements in a row's head block start at (h·D + col0 + j)·D.
    let column0 = (head * GDN_HEAD_DIM + col0) * GDN_HEAD_DIM;
    // 2. The state, once: the row the replay reads, or with a = 0 the row the verify reads.
    let read = cache.wrapping_add((if a > 0 { source } else { dest }) * row_stride + column0);
    let mut s = [[0.0f32; ROWS_PER_LANE]; C];
    let mut j = 0;
    while j < C {
        // SAFETY: this lane's elements (i, col0 + j, head) of the row, inside the validated cache
        // view; read before this thread's only store, and no other thread writes them (module
        // docs).
        s[j] = unsafe { load_lane_coherent(read.wrapping_add(j * GDN_HEAD_DIM), lane_usize) };
        j += 1;
    }
    // 3. [speed] Every token input of the block in shared memory at once, the state loads above
    // in flight meanwhile: the verify's tokens first, then the log's tokens t < a.
    let (n_tokens, log_tokens) = (h.n_tokens, r.n_tokens);
    let layout = verify_layout(n_tokens);
    let stage = shared::base();
    let log_stage = stage + abi::batch_token_stage_bytes(n_tokens);
    // SAFETY: warp `warp` of the block at its first column, tokens < n_tokens ≤ the stage's room
    // (the launch's shared bytes), inputs validated and written by nobody; nothing touches the
    // area before the barrier below.
    unsafe { issue_token_copies(layout, h.token_source(lane_usize, col0), n_tokens, warp, stage) };
    let log = LogSource {
        k: r.k.at(key_head, seq),
        v: r.v.at(head, seq),
        g: r.g.at(head, seq),
        beta: r.beta.at(head, seq),
        lane,
        col: col0 as u32,
        k_token: r.k.token as usize,
        v_token: r.v.token as usize,
        g_token: r.g.token as usize,
        beta_token: r.beta.token as usize,
    };
    // SAFETY: as above for the log: tokens < a ≤ T_log, the area after the verify's with room
    // for T_log tokens (the launch's shared bytes).
    unsafe { issue_log_copies(log, a, log_tokens, warp, log_stage) };
    shared::wait_async_copies();
    // SAFETY: every thread of the block is here (a is the block's, no early exit); after it
    // each thread's copies are visible to the whole block.
    unsafe { sync_threads() };
    if a > 0 {
        // 4. The replay (token t + 1's staged inputs read before token t's arithmetic, the last
        // token peeled off), then GATED_DELTA_NET_REPLAY's store.
        // SAFETY (every `staged_log_token`): token t < a, staged above.
        let mut cur = unsafe { staged_log_token(log_stage, log_tokens, warp, lane, 0) };
        let mut t = 1;
        while t < a {
            // SAFETY: as above.
            let next = unsafe { staged_log_token(log_stage, log_tokens, warp, lane, t) };
            // SAFETY: every lane of the warp runs the same trip count (a is the block's) with no
            // early exit.
            unsafe { columns_token_update(&mut s, &cur, lane) };
            cur = next;
            t += 1;
        }
        // SAFETY: as above.
        unsafe { columns_token_update(&mut s, &cur, lane) };
        let dest_row = cache.wrapping_add(dest * row_stride);
        let mut j = 0;
        while j < C {
            // SAFETY: this lane's elements (i, col0 + j, head) of row `dest` (index
            // `column0 + j·D + lane + 32·r`), inside the validated cache view, written by this
            // thread only (module docs).
            unsafe { store_f32x4_stride32(dest_row, (column0 + j * GDN_HEAD_DIM + lane_usize) as u32, &s[j]) };
            j += 1;
        }
    }
    // 5. The verify: the batched layer step's recurrence of the warp's 8 columns from the state
    // in registers, each token's `out` elements, no state slot (`n_slots` = 0).
    // SAFETY: the verify's tokens < n_tokens (≥ 1) staged with `layout` for this warp (barrier
    // above); the columns' `out` elements written by this warp only; the whole warp is here.
    unsafe { group_recurrence::<C, { 2 * C }>(layout, &h, s, col0, stage, warp, lane, 0) };
}

/// Entry point; see the module docs.
///
/// # Safety
/// As [`run`]: launched with block (32, [`GDN_WARPS`], 1), grid (H_v, n_s, D /
/// [`BATCH_GDN_BLOCK_COLUMNS`]) and [`abi::replay_verify_shared_bytes`] of dynamic shared
/// memory, on parameters the host validated.
#[cfg(target_arch = "nvptx64")]
#[unsafe(export_name = crate::abi::entry_name!(gated_delta_net_replay_verify))]
pub unsafe extern "ptx-kernel" fn gated_delta_net_replay_verify_f32_d128(p: abi::GatedDeltaNetReplayVerifyParams) {
    // SAFETY: forwarded from the launch contract (the indices are the launch's own).
    unsafe { run(&p, block_idx_x(), block_idx_y(), block_idx_z(), thread_idx_y(), thread_idx_x()) }
}

/// [test] The entry's body for a host emulation of the launch (`tests/kernel_emulation.rs`: the
/// same source over a host `device` module); the same indices as the entry point.
///
/// # Safety
/// As the entry point, on the emulation's threads.
#[cfg(not(target_arch = "nvptx64"))]
pub unsafe fn gated_delta_net_replay_verify_emulated(p: &abi::GatedDeltaNetReplayVerifyParams) {
    // SAFETY: forwarded to the caller.
    unsafe { run(p, block_idx_x(), block_idx_y(), block_idx_z(), thread_idx_y(), thread_idx_x()) }
}

const _: () = assert!(ROWS_PER_LANE == 4, "store_f32x4_stride32 stores four rows a lane");
