//! [replay] GATED_DELTA_NET_REPLAY_VERIFY — the `replay_verify` fusion's kernel: exact replay's
//! GATED_DELTA_NET_REPLAY followed by the verify step's GATED_DELTA_NET_FROM_CACHE, which reads
//! the rows the replay just wrote, in one launch (`docs/rollback.md`, "Replay: one step").
//!
//! Layout: block (32, [`GDN_WARPS`], 1), grid (H_v, n_s, D / (32·G)) with G = 1 or 2 (the
//! host's choice, [`abi::replay_verify_grid_z`]; the kernel reads G from `%nctaid.z`); warp
//! `threadIdx.y` = w of block (h, s, z) runs the 8·G value columns `32·G·z + 8·G·w` … of head h
//! and sequence s as G groups of 8, one after the other (group g: columns
//! `col0 = 32·G·z + 8·G·w + 8·g` … `col0 + 7`, interleaved as in the batched layer step's second
//! phase); lane l holds rows `32·r + l` of each. Dynamic shared memory: [`abi::replay_verify_shared_bytes`]`(T, T_log, G)`. Per block:
//! 1. `a = accepted[s]` (0 ..= T_log, validated by the host; a violated contract traps), loaded
//!    with `source_rows[s]` and `dest_rows[s]` in one round trip.
//! 2. Group 0's state (this lane's 4 rows of each of its 8 columns) with coherent loads: from
//!    row `source_rows[s]` when a > 0 (what GATED_DELTA_NET_REPLAY reads), from row
//!    `dest_rows[s]` when a = 0 (the replay writes nothing, so that row holds what
//!    GATED_DELTA_NET_FROM_CACHE would read); with G = 2 group 1's lines asked into L2.
//! 3. Staging (`cp.async`, one wait and one block barrier for all of it, for both groups): the
//!    verify's T tokens as the batched layer step stages them ([`issue_token_copies`]: the key
//!    head's q and k rows shared by the block's four warps, each warp's 8·G v, g, β), and the
//!    log's tokens t < a (the key head's k row, each warp's 8·G v, g, β: [`issue_log_copies`]).
//! 4. For each group, its state loaded (group 1's now):
//!    - a > 0: the replay, tokens t < a — [`columns_token_update`] on each: for each column
//!      GATED_DELTA_NET_REPLAY's [`token_update`](crate::gated_delta_net::token_update) (the 8
//!      columns' KV sums in one 8-value reduce-scatter, each sum
//!      [`warp_sum`](crate::device::warp::warp_sum)'s bits, δ in the lanes holding it), token
//!      t + 1's staged inputs read before token t's arithmetic — and the state, once, to row
//!      `dest_rows[s]`: GATED_DELTA_NET_REPLAY's store, the same bits;
//!    - the verify's T tokens from the state in registers ([`verify_tokens`]: token t's outputs
//!      and token t + 1's KV in one 16-value reduce-scatter), each column's operations those of
//!      GATED_DELTA_NET_FROM_CACHE's warp for it from the row `dest_rows[s]` it would have read
//!      (the state just stored, or with a = 0 the row's own bits) — every `out` element the same
//!      bits — with no state slot (the pair's scratch slot is the value the fusion eliminates).
//!
//! Every column's operations, operands and order are those of the one-warp-per-column kernel
//! this replaces (GATED_DELTA_NET_REPLAY's loop, then GATED_DELTA_NET's): only independent
//! operations of different columns and tokens interleave, and each reduce-scatter value's sum
//! is the butterfly's (`device/warp.rs`).
//!
//! Why the cache may be read and written by one launch (GATED_DELTA_NET_REPLAY's argument, one
//! row more): element (i, col, h) of row `source_rows[s]` or `dest_rows[s]` is read by exactly
//! one thread (lane i mod 32 of warp (col mod 32·G) / 8·G in block (h, s, col / 32·G), register
//! i / 32 of column col in group (col mod 8·G) / 8), once, with a coherent load, before that
//! thread's only store of it, of element (i, col, h) of row `dest_rows[s]` (a group's loads and
//! stores touch only its own columns; the L2 hint reads nothing back). The host refuses index
//! values under which a row one sequence writes is a row another sequence reads or writes
//! (`dest_rows[s]` ≠ `source_rows[s']` and ≠ `dest_rows[s']` for s ≠ s'), so the only thread
//! that reads a byte the kernel writes is the thread that writes it, and it reads first (program
//! order of one thread; the load is not `pure`, so it stays before the store). The log, the
//! verify's q, k, v, g and β and the index views are never written (`cp.async` and `.nc` loads;
//! the host refuses any of them sharing bytes with the cache or with `out`), and `out` elements
//! are written once each, by one lane of their column's warp.

use crate::abi::{
    self, BATCH_GDN_WARP_COLUMNS, GDN_HEAD_DIM, GDN_LAYER_STEP_GROUP_COLUMNS, GDN_WARPS, REPLAY_VERIFY_MAX_WARP_COLUMNS,
    REPLAY_VERIFY_MAX_WARP_GROUPS,
};
use crate::device::grid::wait_prerequisite_grids;
use crate::device::math::mul;
use crate::device::memory::{prefetch_l2, store_f32_at, store_f32x4_stride32};
use crate::device::shared;
use crate::device::thread::{
    block_idx_x, block_idx_y, block_idx_z, grid_dim_z, lane_id_here, sync_threads, thread_idx_x, thread_idx_y, thread_idx_y_here,
};
use crate::device::trap;
use crate::device::warp::{shfl_idx, warp_sum_eight_scattered, warp_sum_sixteen_scattered_lane_ordered};
use crate::gated_delta_net::{
    HeadViews, ROWS_PER_LANE, WarpGroups, decay, delta, issue_token_copies, lane_dot, load_lane_coherent, stage_slots, update,
};
use crate::gated_delta_net_replay::{LogSource, LoggedColumns, columns_token_update, replay_indices_broadcast, replay_indices_load};

/// Value columns of one group (one reduce-scatter's worth).
const C: usize = BATCH_GDN_WARP_COLUMNS as usize;

/// Shared bytes of a staged logged token's k row (the block's key head).
const LOG_K_BYTES: u32 = GDN_HEAD_DIM as u32 * 4;
const _: () = assert!(
    LOG_K_BYTES + GDN_WARPS * abi::replay_verify_warp_token_bytes(1) == abi::replay_verify_log_token_bytes(1)
        && 4 * (REPLAY_VERIFY_MAX_WARP_COLUMNS + 2) <= abi::replay_verify_warp_token_bytes(REPLAY_VERIFY_MAX_WARP_GROUPS)
        && abi::replay_verify_warp_token_bytes(1) % 16 == 0
);

/// The verify's staging layout: the batched layer step's for the warp's `columns` (8·G: 2·G
/// groups of the layer step's 4), `warp_token_bytes` a (warp, token)
/// ([`abi::replay_verify_warp_token_bytes`]), room for `n_tokens` tokens.
#[inline(always)]
fn verify_layout(n_tokens: usize, columns: u32, warp_token_bytes: u32) -> WarpGroups {
    WarpGroups { groups: columns / GDN_LAYER_STEP_GROUP_COLUMNS, warp_token_bytes, stage_tokens: n_tokens as u32 }
}

/// Shared bytes of a (warp, token) in either stage for a warp's `columns` (8·G):
/// [`abi::replay_verify_warp_token_bytes`]`(G)`.
#[inline(always)]
fn stage_bytes_of(columns: u32) -> u32 {
    abi::replay_verify_warp_token_bytes(columns / BATCH_GDN_WARP_COLUMNS)
}

/// [replay] Logged token t's two places in the log's staging area at `base` (room for
/// `log_tokens` tokens): its k row at `base + 512·t` (the block's), then warp `warp`'s 8·G v, g,
/// β at `base + 512·log_tokens + W·(warp·log_tokens + t)`, W = `warp_token_bytes` (16-byte
/// aligned when `base` is).
#[inline(always)]
fn log_slots(base: u32, log_tokens: u32, warp_token_bytes: u32, warp: u32, t: u32) -> (u32, u32) {
    (base + t * LOG_K_BYTES, base + LOG_K_BYTES * log_tokens + (warp * log_tokens + t) * warp_token_bytes)
}

/// [replay] Starts staging logged tokens t < `a` in shared memory at `base` ([`log_slots`]):
/// thread 32·w + lane copies element 32·w + lane of every token's k row, lanes 0 … `columns` − 1
/// of warp w its columns' v (`log.col` + lane), lane `columns` g, the next β — each element the
/// one [`LogSource::load`] reads for its column. The copies land once the thread waited for them.
///
/// # Safety
/// Warp `warp` of the block, `log` at token 0 of the block's (key) head and sequence and at the
/// warp's first column; tokens < `a` ≤ `log_tokens` are validated log elements no thread writes;
/// the area holds `log_tokens` tokens ([`abi::REPLAY_VERIFY_LOG_TOKEN_BYTES`] each) and no
/// thread reads or writes it before the block barrier after this thread's wait.
#[inline(always)]
pub(crate) unsafe fn issue_log_copies(mut log: LogSource, a: u32, log_tokens: u32, warp: u32, base: u32, columns: u32) {
    let lane = log.lane;
    let tid = 32 * warp + lane;
    let mut t = 0u32;
    while t < a {
        let (k_at, mine) = log_slots(base, log_tokens, stage_bytes_of(columns), warp, t);
        // SAFETY: token t < a of the validated log views, element tid < D of its k row, the
        // warp's columns col + lane (lane < columns ≤ 16), its g and β (caller); the slots lie inside the
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

/// [replay] Logged token t's [`LoggedColumns`] for the warp's group `group` from
/// [`issue_log_copies`]'s area: k at rows 32·r + lane, the v of the group's column whose KV this
/// lane holds after the 8-value reduce-scatter (column `lane / 4` of the group: the warp's
/// `8·group + lane / 4`), g, β (after the warp's `columns` v).
///
/// # Safety
/// [`issue_log_copies`] staged tokens > t of this block and warp, the copies waited for and a
/// block barrier since, and nothing wrote the area since.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn staged_log_token(
    base: u32,
    log_tokens: u32,
    warp: u32,
    lane: u32,
    group: u32,
    columns: u32,
    t: u32,
) -> LoggedColumns<C> {
    let (k_at, mine) = log_slots(base, log_tokens, stage_bytes_of(columns), warp, t);
    let mut k = [0.0; ROWS_PER_LANE];
    let mut r = 0;
    while r < ROWS_PER_LANE {
        // SAFETY: a staged slot (caller).
        k[r] = unsafe { shared::load_f32(k_at + 4 * (32 * r as u32 + lane)) };
        r += 1;
    }
    // SAFETY: staged slots (caller); g and β 8-byte aligned (`log_slots`).
    let (v_own, (g, beta)) =
        unsafe { (shared::load_f32(mine + 4 * (C as u32 * group + lane / 4)), shared::load_f32x2(mine + 4 * columns)) };
    LoggedColumns { k, v_own, g, beta }
}

/// [replay] The verify's token loop of the warp's group `group` (8 columns, `col0` the first;
/// GATED_DELTA_NET_FROM_CACHE's warp for each, `n_slots` = 0): [`group_recurrence`](crate::gated_delta_net::group_recurrence)`::<8, 16>`'s operations, operands and order
/// for every column, so every `out` element has its bits — with fewer instructions a token:
/// - token t's outputs and token t + 1's KV share one 16-value reduce-scatter, as there; lanes
///   with bit 4 set put the KV dot products first and the outputs second
///   ([`warp_sum_sixteen_scattered_lane_ordered`]: no selects in its first step). Each lane
///   loads its two dot operands (q of token t, k of token t + 1) from the places its order
///   needs, so no select either;
/// - each column's δ is computed once, in the lanes that hold its KV (lanes 16 + 2j, 17 + 2j for
///   column j), and broadcast, instead of in every lane (the same operation on the same operands);
/// - the last token's loads of "token T" are the same unconditional loads: they read staged
///   bytes of other tokens or warps, or the [`abi::REPLAY_VERIFY_READ_PAST_BYTES`] after the
///   stages, never past the launch's shared memory; what they feed (KV values, and the next
///   token's inputs the loop then drops) is never used.
///
/// # Safety
/// All 32 lanes of the warp call it together; the verify's tokens < `h.n_tokens` (≥ 1) staged
/// with `layout` at `stage` for this warp, a block barrier since, nothing writing the area, and
/// [`abi::replay_verify_shared_bytes`] of shared memory from `stage`; the columns' `out`
/// elements written by this warp only.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn verify_tokens(
    layout: WarpGroups,
    h: &HeadViews,
    mut s: [[f32; ROWS_PER_LANE]; C],
    col0: usize,
    stage: u32,
    warp: u32,
    lane: u32,
    group: u32,
    columns: u32,
) {
    let n_tokens = h.n_tokens as u32;
    // Byte offsets from a token's q row: its k row, and token t + 1's k row.
    const K_ROW: u32 = GDN_HEAD_DIM as u32 * 4;
    const NEXT_K_ROW: u32 = abi::LAYER_STEP_STAGE_QK_BYTES + K_ROW;
    let row = 4 * lane;
    // Lanes with bit 4 set keep the KV values in the reduce-scatter's first step: their first
    // eight dot products are token t + 1's KV, their last eight token t's outputs.
    let (first_at, second_at) = if lane & 16 != 0 { (NEXT_K_ROW + row, row) } else { (row, NEXT_K_ROW + row) };
    // After the reduce-scatter lane l holds value l / 2: column l / 2's output for l < 16, the
    // KV of column (l − 16) / 2 for l ≥ 16 (whose v it loads; lanes < 16 load a v they never use).
    let own_v = 4 * (C as u32 * group + (lane / 2) % C as u32);
    // g and β after the warp's `columns` v.
    let g_beta = 4 * columns;
    // Token 0: its k, its KV in an 8-value reduce-scatter (column j's sum in lanes 4j … 4j + 3),
    // each column's δ in those lanes.
    let (qk, mine) = stage_slots(layout, stage, warp, 0);
    let mut k = [0.0f32; ROWS_PER_LANE];
    let mut r = 0;
    while r < ROWS_PER_LANE {
        // SAFETY (every shared load of this function): staged slots of tokens < n_tokens, or
        // for t = n_tokens the bytes past them inside the launch's shared memory (caller).
        k[r] = unsafe { shared::load_f32(qk + K_ROW + row + 128 * r as u32) };
        r += 1;
    }
    let mut dots = [0.0f32; C];
    let mut j = 0;
    while j < C {
        dots[j] = lane_dot(&s[j], &k);
        j += 1;
    }
    // SAFETY: the whole warp (caller).
    let sums = unsafe { warp_sum_eight_scattered(dots, lane) };
    // SAFETY: as above.
    let (v, (g, beta)) = unsafe { (shared::load_f32(mine + 4 * (C as u32 * group + lane / 4)), shared::load_f32x2(mine + g_beta)) };
    let mut gamma = decay(g);
    let own_delta = delta(sums, gamma, v, beta);
    let mut deltas = [0.0f32; C];
    let mut j = 0;
    while j < C {
        // SAFETY: the whole warp (caller).
        deltas[j] = unsafe { shfl_idx(own_delta, 4 * j as u32) };
        j += 1;
    }
    let mut out_t = h.out_head_row;
    let mut t = 0u32;
    loop {
        // Token t's update, each column with its δ.
        let mut j = 0;
        while j < C {
            update(&mut s[j], &k, gamma, deltas[j]);
            j += 1;
        }
        // Token t's q and token t + 1's inputs (for t + 1 = n_tokens: never used).
        let (qk, _) = stage_slots(layout, stage, warp, t);
        let (_, next) = stage_slots(layout, stage, warp, t + 1);
        let (mut first, mut second, mut next_k) = ([0.0f32; ROWS_PER_LANE], [0.0f32; ROWS_PER_LANE], [0.0f32; ROWS_PER_LANE]);
        let mut r = 0;
        while r < ROWS_PER_LANE {
            let at = qk + 128 * r as u32;
            // SAFETY: as above.
            unsafe {
                first[r] = shared::load_f32(at + first_at);
                second[r] = shared::load_f32(at + second_at);
                next_k[r] = shared::load_f32(at + NEXT_K_ROW + row);
            }
            r += 1;
        }
        // SAFETY: as above.
        let (next_v, (next_g, next_beta)) = unsafe { (shared::load_f32(next + own_v), shared::load_f32x2(next + g_beta)) };
        let mut both = [0.0f32; 2 * C];
        let mut j = 0;
        while j < C {
            both[j] = lane_dot(&s[j], &first);
            both[C + j] = lane_dot(&s[j], &second);
            j += 1;
        }
        // SAFETY: the whole warp, warp-uniform loop (caller).
        let sums = unsafe { warp_sum_sixteen_scattered_lane_ordered(both, lane) };
        if lane % 2 == 0 && lane < 2 * C as u32 {
            // SAFETY: element (col0 + lane / 2, head, t, seq) of `out`, written by this lane only.
            unsafe { store_f32_at(out_t, col0 as u32 + lane / 2, mul(sums, h.scale)) };
        }
        if t + 1 == n_tokens {
            break;
        }
        // Token t + 1's δ in the lanes that hold its KV, broadcast.
        gamma = decay(next_g);
        let own_delta = delta(sums, gamma, next_v, next_beta);
        let mut j = 0;
        while j < C {
            // SAFETY: as above.
            deltas[j] = unsafe { shfl_idx(own_delta, (2 * C + 2 * j) as u32) };
            j += 1;
        }
        k = next_k;
        // One token further in `out`; dereferenced only for the next t < n_tokens.
        out_t = out_t.wrapping_add(h.out_token);
        t += 1;
    }
}

/// The block (`head`, `seq`, `block_z`), warp `warp`, lane `lane` of the launch (see the module
/// docs).
///
/// # Safety
/// Launched with block (32, [`GDN_WARPS`], 1), grid (H_v, n_s, [`abi::replay_verify_grid_z`]`(G)`),
/// G in 1 ..= [`REPLAY_VERIFY_MAX_WARP_GROUPS`], and
/// [`abi::replay_verify_shared_bytes`]`(verify.n_tokens, replay.n_tokens, G)` bytes of dynamic
/// shared memory, on parameters the host validated: the replay's as GATED_DELTA_NET_REPLAY's
/// launch contract states them (log views for tokens < `replay.n_tokens`, rows of the cache,
/// counts in 0 ..= `replay.n_tokens`, the row rule), the verify's views as GATED_DELTA_NET's
/// (heads < H_v, key heads < `verify.n_key_heads`, 1 ≤ `verify.n_tokens` tokens, sequences
/// < n_s; `verify.states` the cache's row 0 with `verify.states_seq` = 0, so that the head's slot
/// pointer HeadViews computes lies in that row — it is never dereferenced), both token counts
/// ≤ [`abi::REPLAY_VERIFY_MAX_TOKENS`], and the module docs' aliasing rules. All 128 threads of
/// the block call it together.
#[inline(always)]
unsafe fn run(p: &abi::GatedDeltaNetReplayVerifyParams, head: u32, seq: u32, block_z: u32, warp: u32, lane: u32) {
    // G, the groups a warp runs, from the grid: D / (32·G) blocks along z.
    // [speed] Compared with the two grids the host launches rather than divided out (an integer
    // division is a few dozen instructions a warp).
    let grid_z = grid_dim_z();
    let groups = if grid_z == abi::replay_verify_grid_z(1) {
        1
    } else if grid_z == abi::replay_verify_grid_z(REPLAY_VERIFY_MAX_WARP_GROUPS) {
        REPLAY_VERIFY_MAX_WARP_GROUPS
    } else {
        // Not a grid the host launches (`abi::replay_verify_grid_z`): the launch aborts.
        trap()
    };
    // SAFETY: forwarded from the contract above, G checked against the grid; nothing to wait for.
    unsafe { replay_verify_item::<false>(p, head, seq, block_z, warp, lane, groups, || {}) }
}

/// \[overlap\] The programmatically launched form
/// ([`abi::GATED_DELTA_NET_REPLAY_VERIFY_OVERLAP_ENTRY`]): it may start while the stream's
/// previous grids still run, so each block runs the replay and its commit (the accepted count,
/// the index views, the log and the cache rows: what the host's overlap pass proved no grid
/// beside it touches), then waits for those grids ([`wait_prerequisite_grids`]: complete, their
/// writes visible), then stages and runs the verify — [`replay_verify_item`]'s waiting schedule,
/// one column group a warp; every operation and operand the standalone launch's.
///
/// # Safety
/// As [`run`] with one column group a warp (grid z [`abi::replay_verify_grid_z`]`(1)`, checked),
/// and launched programmatically only where the host's overlap rule holds (`fusion::overlap`).
#[inline(always)]
unsafe fn run_overlapped(p: &abi::GatedDeltaNetReplayVerifyParams, head: u32, seq: u32, block_z: u32, warp: u32, lane: u32) {
    if grid_dim_z() != abi::replay_verify_grid_z(1) {
        // Not the grid the host launches for this entry: the launch aborts.
        trap();
    }
    let ready = || {
        // SAFETY: a wait only.
        unsafe { wait_prerequisite_grids() }
    };
    // SAFETY: forwarded from the contract above; `ready` is called by every thread of the block
    // (the item's contract), and once it returns the grids before this one are complete and
    // their writes visible to this thread's weak and `cp.async` loads, and no grid of the stream
    // runs any more that could write the verify's inputs.
    unsafe { replay_verify_item::<true>(p, head, seq, block_z, warp, lane, 1, ready) }
}

/// \[replay\] Block (`head`, `seq`, `block_z`) of GATED_DELTA_NET_REPLAY_VERIFY with `groups`
/// column groups a warp (the module docs' steps), run by the 128 threads of a block: the
/// standalone launch's (`WAIT` = false: the verify's tokens staged with the log's) and, with
/// `WAIT` = true and one group a warp, a second-phase item of GDN_LAYER_STEP_REPLAY
/// (`gdn_layer_step_replay.rs`), whose verify inputs other blocks of the launch write: the
/// replay runs and commits first (its log and rows are written by no block of the launch), then
/// `ready` (the readiness wait: its acquire and block barrier), then the verify's tokens are
/// staged and the verify runs. Only where the verify's tokens are staged differs; every
/// operation and operand is the same.
///
/// # Safety
/// As [`run`] for this block and `groups` (1 ..= [`REPLAY_VERIFY_MAX_WARP_GROUPS`], `block_z` <
/// [`abi::replay_verify_grid_z`]`(groups)`), with `WAIT` = true only for `groups` = 1; every
/// thread of the block calls it together; with `WAIT` = true `ready` is called once by every
/// thread of the block and, when it returns, every verify input of the block is written and
/// visible to the block's weak and `cp.async` loads, and nothing writes it during the item; the
/// block's shared memory is this item's alone from the call (no earlier item reads it).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn replay_verify_item<const WAIT: bool>(
    p: &abi::GatedDeltaNetReplayVerifyParams,
    head: u32,
    seq: u32,
    block_z: u32,
    warp: u32,
    lane: u32,
    groups: u32,
    mut ready: impl FnMut(),
) {
    if WAIT && groups != 1 {
        // A layer-step item runs one group a warp (host: `REPLAY_STEP_ITEMS_PER_HEAD`).
        trap();
    }
    let r = &p.replay;
    let columns = BATCH_GDN_WARP_COLUMNS * groups;
    // The warp's first column; group g's are the 8 from `warp_col0 + 8·g`.
    let warp_col0 = ((block_z * GDN_WARPS + warp) * columns) as usize;
    let lane_usize = lane as usize;
    // SAFETY: head < H_v, seq < n_s of the validated verify views (launch contract).
    let h = unsafe { HeadViews::at(&p.verify, head, seq) };
    let (head, seq) = (head as usize, seq as usize);
    // 1. The accepted count and both rows, in one round trip: the rows do not depend on a, so
    // their loads are issued before a is examined ([speed]: a second dependent round trip before
    // the state loads held ≈ 5 % of the stall samples at n_s = 64, T = 4).
    // SAFETY: this lane's own; seq < n_s: elements of the validated index views, each a count or
    // a row of the cache, never written.
    let indices = unsafe { replay_indices_load(r, seq, lane) };
    let (n_tokens, log_tokens) = (h.n_tokens, r.n_tokens);
    let layout = verify_layout(n_tokens, columns, stage_bytes_of(columns));
    let stage = shared::base();
    let log_stage = stage + n_tokens as u32 * abi::replay_verify_token_bytes(groups);
    if !WAIT {
        // [speed] The verify's token inputs need no index: their copies are issued while the
        // indices are in flight (the broadcast below waits for them; the state's loads need them).
        // SAFETY: warp `warp` of the block at its first column, tokens < n_tokens ≤ the stage's
        // room (the launch's shared bytes), inputs validated and written by nobody; nothing
        // touches the area before the barrier after the log's copies below.
        unsafe { issue_token_copies(layout, h.token_source(lane_usize, warp_col0), n_tokens, warp, stage) };
    }
    // SAFETY: the whole warp (caller), each lane with its own load; the cast of a non-negative
    // i32 is lossless.
    let (a, source, dest) = unsafe { replay_indices_broadcast(indices) };
    let (source, dest) = (source as usize, dest as usize);
    if a > r.n_tokens {
        // The host validated a ≤ T_log; a violated contract aborts the launch (every thread of
        // the block: a is the block's).
        trap();
    }
    // The host validated n_key_heads ≥ 1; `checked_rem` keeps core's divide-by-zero panic path
    // out of the PTX.
    let Some(key_head) = (head as u32).checked_rem(r.n_key_heads) else { trap() };
    let key_head = key_head as usize;
    let cache = r.cache as usize as *mut f32;
    let row_stride = r.cache_row as usize;
    // The row the replay reads, or with a = 0 the row the verify reads; column col's elements in
    // a row's head block start at (h·D + col)·D.
    let read_row = cache.wrapping_add((if a > 0 { source } else { dest }) * row_stride);
    let column_at = |col: usize| (head * GDN_HEAD_DIM + col) * GDN_HEAD_DIM;
    // This lane's elements of a group's 8 columns from the row.
    let load_group = |col0: usize| {
        let read = read_row.wrapping_add(column_at(col0));
        let mut s = [[0.0f32; ROWS_PER_LANE]; C];
        let mut j = 0;
        while j < C {
            // SAFETY: this lane's elements (i, col0 + j, head) of the row, inside the validated
            // cache view; read before this thread's only store of them, and no other thread
            // writes them (module docs).
            s[j] = unsafe { load_lane_coherent(read.wrapping_add(j * GDN_HEAD_DIM), lane_usize) };
            j += 1;
        }
        s
    };
    // 2. Group 0's state; the later groups' 4 KiB each (8 whole columns, contiguous) asked into
    // L2, a 128-byte line a lane, so that their loads after group 0's work meet L2.
    let mut s = load_group(warp_col0);
    let mut g = 1;
    while g < groups as usize {
        // SAFETY: a hint inside the validated cache view (line `lane` of the group's 4 KiB).
        unsafe { prefetch_l2(read_row.wrapping_add(column_at(warp_col0 + C * g) + 32 * lane_usize)) };
        g += 1;
    }
    // 3. [speed] The log's tokens t < a in shared memory beside the verify's (issued above), the
    // state loads above in flight meanwhile.
    let log = LogSource {
        k: r.k.at(key_head, seq),
        v: r.v.at(head, seq),
        g: r.g.at(head, seq),
        beta: r.beta.at(head, seq),
        lane,
        col: warp_col0 as u32,
        k_token: r.k.token as usize,
        v_token: r.v.token as usize,
        g_token: r.g.token as usize,
        beta_token: r.beta.token as usize,
    };
    // SAFETY: as above for the log: tokens < a ≤ T_log, the area after the verify's with room
    // for T_log tokens (the launch's shared bytes).
    unsafe { issue_log_copies(log, a, log_tokens, warp, log_stage, columns) };
    shared::wait_async_copies();
    // SAFETY: every thread of the block is here (a is the block's, no early exit); after it
    // each thread's copies are visible to the whole block.
    unsafe { sync_threads() };
    let dest_row = cache.wrapping_add(dest * row_stride);
    // 4. Each group in turn.
    let mut group = 0u32;
    loop {
        // [speed] The lane and the warp read again in each group (the launch's own indices): the
        // shared offsets derived from them are recomputed here rather than kept in registers
        // across the loop (80 registers, no spills).
        // (A layer-step item's block is one-dimensional: its warp and lane are the caller's.)
        let (lane, warp) = if WAIT { (lane, warp) } else { (lane_id_here(), thread_idx_y_here()) };
        let lane_usize = lane as usize;
        let col0 = warp_col0 + C * group as usize;
        if a > 0 {
            // 4a. The replay (token t + 1's staged inputs read before token t's arithmetic, the
            // last token peeled off), then GATED_DELTA_NET_REPLAY's store.
            // SAFETY (every `staged_log_token`): token t < a, staged above.
            let mut cur = unsafe { staged_log_token(log_stage, log_tokens, warp, lane, group, columns, 0) };
            let mut t = 1;
            while t < a {
                // SAFETY: as above.
                let next = unsafe { staged_log_token(log_stage, log_tokens, warp, lane, group, columns, t) };
                // SAFETY: every lane of the warp runs the same trip count (a is the block's)
                // with no early exit.
                unsafe { columns_token_update(&mut s, &cur, lane) };
                cur = next;
                t += 1;
            }
            // SAFETY: as above.
            unsafe { columns_token_update(&mut s, &cur, lane) };
            let column0 = column_at(col0);
            let mut j = 0;
            while j < C {
                // SAFETY: this lane's elements (i, col0 + j, head) of row `dest` (index
                // `column0 + j·D + lane + 32·r`), inside the validated cache view, written by
                // this thread only (module docs).
                unsafe { store_f32x4_stride32(dest_row, (column0 + j * GDN_HEAD_DIM + lane_usize) as u32, &s[j]) };
                j += 1;
            }
        }
        if WAIT {
            // [replay-step] The verify's inputs are other blocks' first-phase outputs: the
            // readiness wait (its acquire and block barrier), then their staging (weak `cp.async`
            // loads after the acquire) into the verify's area, which no thread has touched.
            ready();
            // SAFETY: as for the standalone staging above, once `ready` returned (caller: the
            // inputs written and visible, written by nobody during the item); one group a warp.
            unsafe { issue_token_copies(layout, h.token_source(lane_usize, warp_col0), n_tokens, warp, stage) };
            shared::wait_async_copies();
            // SAFETY: every thread of the block (no early exit); after it each thread's copies
            // are visible to the whole block.
            unsafe { sync_threads() };
        }
        // 4b. The verify: the group's recurrence from the state in registers, each token's
        // `out` elements, no state slot.
        // SAFETY: the verify's tokens < n_tokens (≥ 1) staged with `layout` for this warp
        // (barrier above); the columns' `out` elements written by this warp only; the whole
        // warp is here.
        unsafe { verify_tokens(layout, &h, s, col0, stage, warp, lane, group, columns) };
        group += 1;
        if group == groups {
            break;
        }
        s = load_group(warp_col0 + C * group as usize);
    }
}

/// Entry point; see the module docs.
///
/// # Safety
/// As [`run`]: launched with block (32, [`GDN_WARPS`], 1), grid (H_v, n_s,
/// [`abi::replay_verify_grid_z`]`(G)`) and [`abi::replay_verify_shared_bytes`]`(T, T_log, G)` of
/// dynamic shared memory, on parameters the host validated.
#[cfg(target_arch = "nvptx64")]
#[unsafe(export_name = crate::abi::entry_name!(gated_delta_net_replay_verify))]
pub unsafe extern "ptx-kernel" fn gated_delta_net_replay_verify_f32_d128(p: abi::GatedDeltaNetReplayVerifyParams) {
    // SAFETY: forwarded from the launch contract (the indices are the launch's own).
    unsafe { run(&p, block_idx_x(), block_idx_y(), block_idx_z(), thread_idx_y(), thread_idx_x()) }
}

/// \[overlap\] The programmatically launched entry: [`run_overlapped`].
///
/// # Safety
/// As [`run_overlapped`]: launched with block (32, [`GDN_WARPS`], 1), grid (H_v, n_s,
/// [`abi::replay_verify_grid_z`]`(1)`) and [`abi::replay_verify_shared_bytes`]`(T, T_log, 1)` of
/// dynamic shared memory, on parameters the host validated.
#[cfg(target_arch = "nvptx64")]
#[unsafe(export_name = crate::abi::entry_name!(gated_delta_net_replay_verify_overlap))]
pub unsafe extern "ptx-kernel" fn gated_delta_net_replay_verify_f32_d128_overlap(p: abi::GatedDeltaNetReplayVerifyParams) {
    // SAFETY: forwarded from the launch contract (the indices are the launch's own).
    unsafe { run_overlapped(&p, block_idx_x(), block_idx_y(), block_idx_z(), thread_idx_y(), thread_idx_x()) }
}

/// [test] The overlap entry's body for a host emulation of the launch.
///
/// # Safety
/// As the overlap entry point, on the emulation's threads.
#[cfg(not(target_arch = "nvptx64"))]
pub unsafe fn gated_delta_net_replay_verify_overlap_emulated(p: &abi::GatedDeltaNetReplayVerifyParams) {
    // SAFETY: forwarded to the caller.
    unsafe { run_overlapped(p, block_idx_x(), block_idx_y(), block_idx_z(), thread_idx_y(), thread_idx_x()) }
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
const _: () = assert!(REPLAY_VERIFY_MAX_WARP_GROUPS == 2, "`run` tells G from the grid for G = 1 and 2 only");
