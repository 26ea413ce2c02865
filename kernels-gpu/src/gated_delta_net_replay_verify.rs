//! [replay] GATED_DELTA_NET_REPLAY_VERIFY — the `replay_verify` fusion's kernel: exact replay's
//! GATED_DELTA_NET_REPLAY followed by the verify step's GATED_DELTA_NET_FROM_CACHE, which reads
//! the rows the replay just wrote, in one launch (`docs/rollback.md`, "Replay: one step").
//!
//! Layout (the batched layer step's second phase, [`group_recurrence`]`::<8, 16>`): items
//! (h, s, z) — value head h, sequence s, value columns 32·z … 32·z + 31 — H_v · n_s · D /
//! [`BATCH_GDN_BLOCK_COLUMNS`] of them (`n_items`), over a grid of n blocks of (32, [`GDN_WARPS`],
//! 1): block b runs items b, b + n, b + 2n, … ([`item_coordinates`]); in an item, warp
//! `threadIdx.y` = w runs the [`BATCH_GDN_WARP_COLUMNS`] = 8 value columns `col0 = 32·z + 8·w` …
//! `col0 + 7`, interleaved; lane l holds rows `32·r + l` of each. Dynamic shared memory:
//! [`abi::replay_verify_shared_bytes`]`(T, T_log)`, two item buffers. \[speed\] Each item's
//! copies (steps 1–3, [`issue_item`]) are issued into one buffer while the block's previous item
//! computes from the other (steps 4–5, [`run_item`]), one wait and one block barrier between:
//! the state stream and the recurrence overlap, where one item a block ran them one after the
//! other (`results/2026-12-04-h200-tiles/`). Per item:
//! 1. `a = accepted[s]` (0 ..= T_log, validated by the host; a violated contract traps).
//! 2. The item's state (32 columns, 16 KiB contiguous in a cache row), once, through L2
//!    (`cp.async.cg`) into the item's buffer: from row `source_rows[s]` when a > 0 (what
//!    GATED_DELTA_NET_REPLAY reads), from row `dest_rows[s]` when a = 0 (the replay writes
//!    nothing, so that row holds what GATED_DELTA_NET_FROM_CACHE would read); each lane then
//!    takes its 4 rows of its warp's 8 columns from there.
//! 3. Staging (`cp.async` into the same buffer): the verify's T tokens as the batched layer step
//!    stages them ([`issue_token_copies`]: the key head's q and k rows shared by the block's four
//!    warps, each warp's 8 v, g, β), and the log's tokens t < a (the key head's k row, each
//!    warp's 8 v, g, β: [`issue_log_copies`]).
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
//! one item, (h, s, col / 32), once — a copy into its buffer that the block waits for, with a
//! block barrier, before any of the item's arithmetic — and written only by that item's store of
//! element (i, col, h) of row `dest_rows[s]`, by lane i mod 32 of warp (col mod 32) / 8 of the
//! same block, after that barrier. The host refuses index values under which a row one sequence
//! writes is a row another sequence reads or writes (`dest_rows[s]` ≠ `source_rows[s']` and ≠
//! `dest_rows[s']` for s ≠ s'), so no item reads a byte another item writes, whichever blocks
//! run them and in whatever order. The log, the verify's q, k, v, g and β and the index views
//! are never written (`cp.async` and `.nc` loads; the host refuses any of them sharing bytes
//! with the cache or with `out`), and `out` elements are written once each, by one lane of
//! their column's warp.

use crate::abi::{self, GDN_HEAD_DIM, GDN_WARPS, BATCH_GDN_BLOCK_COLUMNS, BATCH_GDN_WARP_COLUMNS};
use crate::device::memory::store_f32x4_stride32;
use crate::device::shared;
use crate::device::thread::{block_idx_x, grid_dim_x, sync_threads, thread_idx_x, thread_idx_y};
use crate::device::warp::sync_warp;
use crate::device::trap;
use crate::gated_delta_net::{HeadViews, ROWS_PER_LANE, WarpGroups, group_recurrence, issue_token_copies, state_columns};
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
            if lane < columns {
                shared::copy_async_4(mine + 4 * lane, log.v.add((log.col + lane) as usize) as *const u32);
            } else if lane == columns {
                shared::copy_async_4(mine + 4 * columns, log.g as *const u32);
            } else if lane == columns + 1 {
                shared::copy_async_4(mine + 4 * columns + 4, log.beta as *const u32);
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

/// [speed] One item of the launch — value head `head`, sequence `seq`, value columns
/// 32·`group` … + 31 — with what its copies read: the accepted count `a` and the sequence's
/// destination row.
#[derive(Clone, Copy)]
struct Item {
    head: u32,
    seq: u32,
    group: u32,
    a: u32,
    dest: usize,
}

/// Item `index`'s head, sequence and column group: groups fastest, then heads, then sequences.
#[inline(always)]
fn item_coordinates(index: u32, n_heads: u32) -> (u32, u32, u32) {
    const GROUPS: u32 = GDN_HEAD_DIM as u32 / BATCH_GDN_BLOCK_COLUMNS;
    let (group, rest) = (index % GROUPS, index / GROUPS);
    // The host validated H_v ≥ 1; `checked_rem` keeps core's divide-by-zero panic path out of
    // the PTX.
    let Some(head) = rest.checked_rem(n_heads) else { trap() };
    (head, rest / n_heads, group)
}

/// The verify's views for (head, seq), with no state slot: with `n_slots` a constant 0 the
/// recurrence's slot stores are compiled out.
///
/// # Safety
/// head < H_v, seq < n_s of the validated verify views.
#[inline(always)]
unsafe fn verify_views(p: &abi::GatedDeltaNetReplayVerifyParams, head: u32, seq: u32) -> HeadViews {
    // SAFETY: forwarded from the caller.
    let h = unsafe { HeadViews::at(&p.verify, head, seq) };
    HeadViews { n_slots: 0, ..h }
}

/// [speed] Starts every copy item `index` needs into the item buffer at `buffer`
/// ([`abi::replay_verify_buffer_bytes`]), into this thread's next committed copy group (the
/// caller commits), and returns the item:
/// 1. `a = accepted[s]` (0 ..= T_log, validated by the host; a violated contract traps).
/// 2. The item's state — 32 columns of D floats, 16 KiB contiguous in a cache row — from row
///    `source_rows[s]` when a > 0 (what GATED_DELTA_NET_REPLAY reads), from row `dest_rows[s]`
///    when a = 0 (the replay writes nothing, so that row holds what GATED_DELTA_NET_FROM_CACHE
///    would read): thread t copies the 16-byte chunks t, t + 128, … (`cp.async.cg`, through L2:
///    the bytes the one-column kernels' coherent loads read).
/// 3. The verify's T tokens as the batched layer step stages them ([`issue_token_copies`]: the
///    key head's q and k rows shared by the block's four warps, each warp's 8 v, g, β), then the
///    log's tokens t < a ([`issue_log_copies`]).
///
/// # Safety
/// All 128 threads call it (thread 32·`warp` + `lane`) with `index` < `p.n_items` on the launch
/// contract's parameters; nothing reads or writes the buffer until the copies are waited for and
/// a block barrier passed, and nothing writes the item's state bytes before it reads them (module
/// docs: only its own stores, after the wait).
#[inline(always)]
unsafe fn issue_item(p: &abi::GatedDeltaNetReplayVerifyParams, index: u32, warp: u32, lane: u32, region: u32, stage: u32) -> Item {
    let r = &p.replay;
    let (head, seq, group) = item_coordinates(index, p.n_heads);
    // SAFETY: seq < n_s: an element of the validated index view, never written.
    let a = unsafe { index_at(r.accepted, r.accepted_stride, seq as usize) };
    if a > r.n_tokens {
        // The host validated a ≤ T_log; a violated contract aborts the launch (every thread of
        // the block: a is the item's).
        trap();
    }
    // SAFETY: seq < n_s: elements of the validated index views, each a row of the cache, never
    // written; the cast of a non-negative i32 is lossless.
    let (source, dest) = unsafe {
        (index_at(r.source_rows, r.source_rows_stride, seq as usize) as usize, index_at(r.dest_rows, r.dest_rows_stride, seq as usize) as usize)
    };
    // 2. The warp's 8 columns of the state: column 32·group + 8·warp … of head `head` starts at
    // element (h·D + 32·group + 8·warp)·D of the row; 4 KiB, contiguous.
    let row = if a > 0 { source } else { dest };
    let col0 = group * BATCH_GDN_BLOCK_COLUMNS + warp * BATCH_GDN_WARP_COLUMNS;
    let first = row * r.cache_row as usize + (head as usize * GDN_HEAD_DIM + col0 as usize) * GDN_HEAD_DIM;
    let from = (r.cache as usize as *const u8).wrapping_add(4 * first);
    let mut chunk = lane;
    while chunk < abi::REPLAY_VERIFY_WARP_STATE_BYTES / 16 {
        // SAFETY: chunk < the warp's 8 columns × D floats / 4, inside the validated cache row,
        // 16-byte aligned (host: the cache's rows at 16-byte aligned addresses); the shared chunk
        // lies inside the warp's region.
        unsafe { shared::copy_async_16(region + 16 * chunk, from.wrapping_add(16 * chunk as usize)) };
        chunk += 32;
    }
    // 3. The token inputs.
    // SAFETY: head < H_v, seq < n_s (index < n_items).
    let h = unsafe { verify_views(p, head, seq) };
    let (n_tokens, log_tokens) = (h.n_tokens, r.n_tokens);
    // SAFETY: warp `warp` of the block at its first column, tokens < n_tokens ≤ the stage's room
    // (the buffer's layout), inputs validated and written by nobody; nothing touches the stage
    // before the caller's wait and barrier.
    unsafe { issue_token_copies(verify_layout(n_tokens), h.token_source(lane as usize, col0 as usize), n_tokens, warp, stage) };
    // The host validated n_key_heads ≥ 1.
    let Some(key_head) = head.checked_rem(r.n_key_heads) else { trap() };
    let (head, seq, key_head) = (head as usize, seq as usize, key_head as usize);
    let log = LogSource {
        k: r.k.at(key_head, seq),
        v: r.v.at(head, seq),
        g: r.g.at(head, seq),
        beta: r.beta.at(head, seq),
        lane,
        col: col0,
        k_token: r.k.token as usize,
        v_token: r.v.token as usize,
        g_token: r.g.token as usize,
        beta_token: r.beta.token as usize,
    };
    // SAFETY: as above for the log: tokens < a ≤ T_log, the log's stage after the verify's with
    // room for T_log tokens.
    unsafe { issue_log_copies(log, a, log_tokens, warp, stage + abi::batch_token_stage_bytes(n_tokens as usize)) };
    Item { head: head as u32, seq: seq as u32, group, a, dest }
}

/// [speed] Item `it`'s arithmetic, warp `warp`'s 8 columns, from its buffer at `buffer`:
/// 4. a > 0: the replay, tokens t < a — [`columns_token_update`] on each: for each column
///    GATED_DELTA_NET_REPLAY's [`token_update`](crate::gated_delta_net::token_update) (the 8
///    columns' KV sums in one 8-value reduce-scatter, each sum
///    [`warp_sum`](crate::device::warp::warp_sum)'s bits), token t + 1's staged inputs read
///    before token t's arithmetic — and the state, once, to row `dest_rows[s]`:
///    GATED_DELTA_NET_REPLAY's store, the same bits.
/// 5. The verify's T tokens from the state in registers: [`group_recurrence`]`::<8, 16>` (token
///    t's outputs and token t + 1's KV in one 16-value reduce-scatter), each column's operations
///    those of GATED_DELTA_NET_FROM_CACHE's warp for it from the row `dest_rows[s]` it would have
///    read (the state just stored, or with a = 0 the row's own bits) — every `out` element the
///    same bits — with `n_slots` = 0: no state slot (the pair's scratch slot is the value the
///    fusion eliminates).
///
/// # Safety
/// All 32 lanes of warp `warp` call it together; `it` from [`issue_item`] into `buffer`, its
/// copies waited for and a block barrier passed since; nothing writes the buffer until every warp
/// returned from this call (the next block barrier).
#[inline(always)]
unsafe fn run_item(p: &abi::GatedDeltaNetReplayVerifyParams, it: Item, mut s: [[f32; ROWS_PER_LANE]; C], warp: u32, lane: u32, stage: u32) {
    let r = &p.replay;
    // SAFETY: the item's head and sequence (from `issue_item`).
    let h = unsafe { verify_views(p, it.head, it.seq) };
    let (n_tokens, log_tokens) = (h.n_tokens, r.n_tokens);
    let col0 = (it.group * BATCH_GDN_BLOCK_COLUMNS + warp * BATCH_GDN_WARP_COLUMNS) as usize;
    let log_stage = stage + abi::batch_token_stage_bytes(n_tokens);
    let a = it.a;
    if a > 0 {
        // 4. The replay (token t + 1's staged inputs read before token t's arithmetic, the last
        // token peeled off), then GATED_DELTA_NET_REPLAY's store.
        // SAFETY (every `staged_log_token`): token t < a, staged (caller).
        let mut cur = unsafe { staged_log_token(log_stage, log_tokens, warp, lane, 0) };
        let mut t = 1;
        while t < a {
            // SAFETY: as above.
            let next = unsafe { staged_log_token(log_stage, log_tokens, warp, lane, t) };
            // SAFETY: every lane of the warp runs the same trip count (a is the item's) with no
            // early exit.
            unsafe { columns_token_update(&mut s, &cur, lane) };
            cur = next;
            t += 1;
        }
        // SAFETY: as above.
        unsafe { columns_token_update(&mut s, &cur, lane) };
        // Column col0 + j's elements in a row's head block start at (h·D + col0 + j)·D.
        let column0 = (it.head as usize * GDN_HEAD_DIM + col0) * GDN_HEAD_DIM;
        let dest_row = (r.cache as usize as *mut f32).wrapping_add(it.dest * r.cache_row as usize);
        let mut j = 0;
        while j < C {
            // SAFETY: this lane's elements (i, col0 + j, head) of row `dest` (index
            // `column0 + j·D + lane + 32·r`), inside the validated cache view, written by this
            // thread only (module docs).
            unsafe { store_f32x4_stride32(dest_row, (column0 + j * GDN_HEAD_DIM + lane as usize) as u32, &s[j]) };
            j += 1;
        }
    }
    // 5. The verify: the batched layer step's recurrence of the warp's 8 columns from the state
    // in registers, each token's `out` elements, no state slot (`n_slots` = 0).
    // SAFETY: the verify's tokens < n_tokens (≥ 1) staged with the layout for this warp (caller);
    // the columns' `out` elements written by this warp only; the whole warp is here.
    unsafe { group_recurrence::<C, { 2 * C }>(verify_layout(n_tokens as usize), &h, s, col0, stage, warp, lane, 0) };
}

/// Entry point; see the module docs. Block b runs items b, b + n, … (n = the grid): each item's
/// copies were issued while the previous item computed ([`issue_item`] into the other buffer),
/// so a block waits for memory once, at its first item.
///
/// # Safety
/// Launched with block (32, [`GDN_WARPS`], 1), grid (n, 1, 1) with 1 ≤ n, and
/// [`abi::replay_verify_shared_bytes`]`(verify.n_tokens, replay.n_tokens)` bytes of dynamic
/// shared memory (16-byte aligned), on parameters the host validated: the replay's as
/// GATED_DELTA_NET_REPLAY's launch contract states them (log views for tokens < `replay.n_tokens`,
/// rows of the cache at 16-byte aligned addresses, counts in 0 ..= `replay.n_tokens`, the row
/// rule), the verify's views as GATED_DELTA_NET's (heads < H_v = `n_heads`, key heads <
/// `verify.n_key_heads`, 1 ≤ `verify.n_tokens` tokens, sequences < n_s; `verify.states` the
/// cache's row 0 with `verify.states_seq` = 0, so that the head's slot pointer HeadViews computes
/// lies in that row — it is never dereferenced), `n_items` = H_v · n_s · D / 32, both token
/// counts ≤ [`abi::REPLAY_VERIFY_MAX_TOKENS`], and the module docs' aliasing rules.
#[unsafe(export_name = crate::abi::entry_name!(gated_delta_net_replay_verify))]
pub unsafe extern "ptx-kernel" fn gated_delta_net_replay_verify_f32_d128(p: abi::GatedDeltaNetReplayVerifyParams) {
    let (warp, lane) = (thread_idx_y(), thread_idx_x());
    let stage_bytes = abi::replay_verify_stage_bytes(p.verify.n_tokens as usize, p.replay.n_tokens as usize);
    let base = shared::base();
    // The warp's state region, then the two token stages.
    let region = base + warp * abi::REPLAY_VERIFY_WARP_STATE_BYTES;
    let stage_of = |buffer: u32| base + abi::REPLAY_VERIFY_STATE_BYTES + buffer * stage_bytes;
    let mut index = block_idx_x();
    if index >= p.n_items {
        // The host's grid has no such block; the whole block leaves together.
        return;
    }
    // SAFETY: index < n_items, every thread of the block, nothing in shared memory so far.
    let mut current = unsafe { issue_item(&p, index, warp, lane, region, stage_of(0)) };
    shared::commit_async_copies();
    let mut buffer = 0u32;
    loop {
        // This thread's copies of the current item have landed (the only group in flight) ...
        shared::wait_async_groups::<0>();
        // ... and every thread's, after the barrier; every warp also finished the previous item
        // here, so the other token stage is free for the next item's copies.
        // SAFETY: every thread of the block (the loop's trip count is the block's).
        unsafe { sync_threads() };
        // The warp's columns into registers; once every lane has them, the region is free.
        // SAFETY: the warp's region holds the item's columns (copies landed, barrier above).
        let s = unsafe { state_columns::<C>(region, 0, lane) };
        // SAFETY: the whole warp is here (no early exit).
        unsafe { sync_warp() };
        // index < n_items ≤ u32::MAX and the grid ≤ n_items: no overflow into a valid index.
        let next = index.checked_add(grid_dim_x()).filter(|&n| n < p.n_items);
        let upcoming = match next {
            Some(n) => {
                // SAFETY: n < n_items, every thread of the block; the warp's region is free (every
                // lane read it, sync_warp above) and the other stage too (the barrier above);
                // nothing reads either before the next iteration's barrier.
                let it = unsafe { issue_item(&p, n, warp, lane, region, stage_of(1 - buffer)) };
                shared::commit_async_copies();
                Some(it)
            }
            None => None,
        };
        // SAFETY: the current item's token copies landed and are visible (wait and barrier
        // above); nothing writes its stage before the next barrier, which every warp reaches
        // after this call.
        unsafe { run_item(&p, current, s, warp, lane, stage_of(buffer)) };
        match (next, upcoming) {
            (Some(n), Some(it)) => (index, current, buffer) = (n, it, 1 - buffer),
            _ => break,
        }
    }
}

const _: () = assert!(ROWS_PER_LANE == 4, "store_f32x4_stride32 stores four rows a lane");
