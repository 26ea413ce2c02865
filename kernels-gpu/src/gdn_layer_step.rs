//! GDN_LAYER_STEP — one GDN layer verify step in one launch, bit-identical to the unfused
//! chain: the conv chain ([`gdn_conv_chain`](crate::gdn_conv_chain): conv-state read, CONCAT,
//! the 1 + R snapshot rows, SSM_CONV + SiLU, the q/k L2_NORMs), the alpha/beta products with the
//! gate path ([`mmvf`](crate::mmvf), MUL_MAT_VEC_PAIR_GATE: SIGMOID; ADD, SOFTPLUS, MUL) and
//! GATED_DELTA_NET reading its state from the ssm-cache row and writing its state slots into
//! the cache rows ([`gated_delta_net`](crate::gated_delta_net), GATED_DELTA_NET_FROM_CACHE).
//! Scope: one sequence — or [seq-batch] a few, each with its own items ("Several sequences"
//! below) —, n_t 1–16, d_conv 3–5, D = 128, F32 / BF16 / F16 weights (both F16 precisions); the
//! host refuses everything else.
//!
//! # Design: two phases, per-item readiness flags, persistent blocks
//!
//! Block of [`GDN_LAYER_STEP_BLOCK`] = 128 threads — the conv chain's channel tile and
//! GATED_DELTA_NET's 32 × 4 block — and a grid of G blocks that are all resident at once (a
//! cooperative launch: the host takes G ≤ SMs × the occupancy the driver reports, and the
//! driver refuses a cooperative grid that does not fit; the host takes every block that fits).
//! Block b runs the first-phase items b, b + G, b + 2G, … (a block barrier after each: the items
//! share the dynamic shared memory), publishing each; in the second phase warp w of block
//! G − 1 − b runs the column groups 4·b + w, 4·b + w + 4·G, … — counted from the grid's last
//! block, so that a block runs both items and groups only when the two together need more
//! blocks than the grid has (9B at T = 1: 128 items on blocks 0 …, 1024 groups on 256 blocks
//! from the top; at three blocks per multiprocessor of the H200's 132 none runs both).
//!
//! **Phase 1** (everything GATED_DELTA_NET reads, none of it reading another item's output):
//! - items 0 … C/128 − 1: the conv-chain tiles, each GDN_CONV_CHAIN's block body verbatim
//!   ([`gdn_conv_chain_tile`]): tile k reads its channels' slice of the source row and their
//!   tokens, writes its slice of every snapshot row, its channels of `conv_out`, and the
//!   L2-normalised q/k heads inside the tile (D = 128: tile kh holds q head kh, tile H_k + kh k
//!   head kh, tile 2·H_k + h v head h). First, so that when the items outnumber the grid
//!   (n_t > 8) the second round runs row items, not the tiles every head waits for;
//! - then 2·H_v·⌈n_t/2⌉ mat-vec row items. Row item i is (column pair i / (2·H_v),
//!   row (i mod 2·H_v) / 2, product i mod 2 — 0: alpha with the gate epilogue, 1: beta_raw
//!   with SIGMOID) for the [`abi::GDN_LAYER_STEP_COLS`](crate::abi::GDN_LAYER_STEP_COLS) = 2
//!   columns of its pair. A `mul_mat_vec_pair_*` block of ggml's block size bs (≤ 256 for E)
//!   computes a row; here 128 threads run its bs *virtual* threads (thread t runs virtual
//!   threads t and t + 128, each with the pair's own per-thread loop — t + 128's chunk staged
//!   in shared memory by `cp.async` while t's loads into registers, one memory round trip per
//!   chunk: `thread_partials_halves`), and the reduction is
//!   the pair's, warp butterfly by warp butterfly in ggml's order ([`pair_gate_row_halves`],
//!   [`block_reduce_halves`](crate::mmvf::block_reduce_halves)). A column's loop, butterflies
//!   and block sum do not depend on the other columns of its block (ggml's own split of n_t > 8
//!   into launches relies on it), so each product element is computed once, by one block, with
//!   the unfused kernel's exact operations; the gate path runs on the register the element's
//!   writer thread stores (the pair-gate's epilogue, the unfused unary and binary bodies).
//!   Two columns per item (not n_t) spread the rows over the idle blocks and keep the
//!   registers for three blocks per multiprocessor (four columns measured slower at T = 1 and
//!   16, NOTES.md).
//!
//! Before phase 1 every warp with a column group asks L2 for its first column group's initial state
//! ([`prefetch_group_state`]; the ssm cache is not touched by phase 1), so the state reads
//! of phase 2 meet L2.
//!
//! **Readiness** (`device/grid.rs`): after each item, its block releases the item's flag
//! ([`publish_item`]: block barrier, then a release store of the launch's target); a phase-2 warp, once
//! it loaded its group's initial state, waits for exactly the items its head reads
//! ([`LayerStepItems::item_read_by`]: the 2·⌈n_t/2⌉ row items of its row — its g and β for every token — and
//! the conv tiles of its q, k and v heads), one lane of the block's first warp per flag
//! ([`wait_items`]: poll, acquire load, block barrier; the block's four warps run four groups
//! of one head) — every write of those items is then visible to every coherent load of the
//! block. No block waits before it published all its items and arrived, and every block is
//! resident, so every awaited flag is stored. A head's recurrences start as soon as its
//! 2·⌈n_t/2⌉ + 3 items are done, not when the slowest item of the grid is — what lets a head
//! of a wide step (n_t > 8: more items than blocks) start before the last items run; at n_t ≤ 8
//! on the H200 the flags measured within noise of the one grid barrier they replaced
//! (`results/2026-12-01-h200-flags/`: the items' memory round trips, not the synchronisation,
//! are the critical path). Each block's
//! arrival and block 0's wait for all of them at its end ([`arrive`], [`close_launch`]) only
//! keep the state ready for the next launch.
//!
//! **Phase 2**: H_v·32 column groups (head i / 32, columns 4·(i mod 32) … + 3 — GATED_DELTA_NET's
//! block z), one per warp, the group's four columns interleaved in the warp ([`run_group_at`]):
//! for each column the body of GATED_DELTA_NET_FROM_CACHE's warp — the same state registers,
//! loads, `token_step` operations in the same order and the same stores — with the token inputs
//! (q, k, v, g, β) — written in phase 1, by other blocks — staged in shared memory once the
//! block's wait returned: every token at once, by `cp.async` (weak loads after the acquire),
//! the head's q and k shared by the block's four warps. Token t + 1's KV dot products join
//! token t's output sums in one eight-value reduce-scatter
//! ([`warp_sum_eight_scattered`](crate::device::warp::warp_sum_eight_scattered): each value's
//! butterfly tree, 13 shuffles instead of 40 per token). One group per warp instead of one column per warp: the four recurrences' latencies
//! overlap, and 4·G warps run all 1024 groups of 9B at once (GATED_DELTA_NET's grid would need
//! 4096 warps, ~4 rounds of the co-resident grid).
//! Each column's operations and their order are GATED_DELTA_NET's; only which warp runs a
//! column, and what it interleaves them with, differ.
//!
//! # Whose block writes what
//! Every element is written by exactly one thread of one item, the same thread that writes it
//! in the unfused kernel's block: a snapshot-row element, a `conv_out` element and an L2 output
//! by the conv tile owning its channel (q/k heads lie inside one tile: D divides 128); alpha /
//! beta_raw / gate / beta element (r, j) by thread j mod 2 of the item of row r and column pair
//! j / 2; `out` (lane 4j for the group's column j, which holds its sum) and the state slots
//! (the lane owning row i) by the warp running the column's group.
//!
//! # The read-among-written hazards, and why each is race-free
//! - **Conv cache** (a snapshot row may be the source row): a tile reads its slice of the
//!   source row in its phase 1 and writes its slices of the snapshot rows after its block
//!   barrier; slices of different tiles are disjoint (channels c0 … c0+127 are the floats
//!   c0·(d_conv−1) … (c0+128)·(d_conv−1) of a row). No other item touches the conv cache.
//! - **`conv_out` on `qkv`** (element for element): a thread reads its channel's tokens before
//!   it writes that channel's outputs; other tiles touch other channels; the mat-vec rows do
//!   not read qkv; GATED_DELTA_NET reads the v channels of a head's tile only after that
//!   tile's flag.
//! - **ssm cache** (a written state slot may be the row read): in phase 2 only, each state
//!   element is read and written by the one lane owning it, read first (GATED_DELTA_NET_FROM_
//!   CACHE's argument, unchanged); phase 1 does not touch the ssm cache (host: disjoint).
//! - **Phase 1 → phase 2 values** (q/k norms, v, gate, β): each written by one item, read by a
//!   warp only after its block observed that item's flag, staged by weak `cp.async` loads
//!   issued after the acquire (the acquire
//!   fence also invalidates the multiprocessor's L1, so no line cached before it — qkv under
//!   `conv_out`, or a line shared with a neighbouring head that was not ready then — is read);
//!   nothing writes them in phase 2. A warp reads exactly the elements of its items: q/k of
//!   its key head (the chain's q_norm/k_norm, host link), v of its head (conv_out's v
//!   channels, host link), g and β of its row. The waits are
//!   [`LayerStepItems`](crate::abi::LayerStepItems) (abi.rs, compiled into the host too), and
//!   the host proves them on the step's own bytes before every launch (memoized per step:
//!   `readiness_gap` in `host/ops/gdn_layer_step.rs`): every item whose writes — as "Whose
//!   block writes what" says — meet a byte a head's column groups read is among the items that
//!   head waits for. The GPU sweep cannot show a missing wait for a row item (in its small
//!   shapes the rows finish before the tiles a head also waits for); the proof refuses one by
//!   name, and CI plants wrong waits against it. The state prefetch before phase 1 is a hint
//!   (no value is read back).
//! - **Phase 2 beside phase 1** (a head's recurrences run while other items still do): the host
//!   proves the phase-2 outputs (`out`, the state slots) disjoint from everything phase 1 reads
//!   or writes, and the ssm cache and its index disjoint from every phase-1 output, so no
//!   phase-2 access meets a phase-1 access of another item.
//! - **Across phase-1 items**: the host proves every output of the conv chain disjoint from
//!   every input and output of the products and vice versa, and the phase-2 outputs (`out`, the
//!   state slots) disjoint from everything phase 1 reads or writes; the `.nc` loads (weights,
//!   `cur`, dt_bias, ssm_a, the index buffers) are of bytes no thread writes during the launch.
//!
//! # Several sequences
//! **Each sequence's own items** (these entries, [seq-batch] small batches: the host's
//! `StepShape::split`): the launch runs the single-sequence items over every sequence — the conv
//! tiles of every sequence, then the row items over the n_t·n_s token columns in pairs (a pair
//! holds two columns of one sequence, or at an odd n_t the last of one and the first of the
//! next: each column's operations are its own whichever column shares its item), each with its
//! own flag ([`LayerStepItems`]: n_s·C/128 + 2·H_v·⌈n_t·n_s/2⌉ ≤ `GRID_SYNC_FLAGS`) — and then
//! n_s·H_v·32 column groups, sequence-major, each waiting for its own sequence's tiles and the
//! row items of its own columns only. Every item and group is the single-sequence body on the
//! sequence's own tokens, columns and cache rows, so a sequence's bits are the ones it gets
//! alone, and the host proves the waits per sequence (every item a candidate writer of every
//! read). A warp with several groups asks L2 for its next group's state before it runs the
//! current one. The `gdn_layer_step_seqs_*` entries (the same body, `PAIRS`) run two groups a
//! warp as one eight-column recurrence (the batched step's), halving the second phase's
//! rounds; the single-sequence entries' code is left as it was (one group a warp).
//!
//! **The batched entries** (`gdn_layer_step_batch_*`, larger batches): n_s ≥ 2 sequences run as
//! one persistent launch over a schedule of items ([`LayerStepSchedule`]: the sequences in
//! chunks, each chunk's conv items (one channel tile of `tile_seqs` sequences, side by side, each
//! sequence its own source and snapshot rows) and mat-vec items (4 heads × 2 products × 4 of the
//! n_t·n_s token columns, or at the smallest steps the single-sequence step's row items: one row
//! of one product × 2 columns) before its second-phase items (4 warps × 4·GP columns of one
//! (sequence, head)); one readiness counter per chunk). A second-phase item takes its initial
//! state from a `cp.async` copy into shared memory, issued one item ahead, and its token inputs
//! likewise once the block has acquired the chunk; see [`gdn_layer_step_batch`] ("Buffers") and
//! `docs/batching.md`. Every column's operations are GATED_DELTA_NET_FROM_CACHE's, so a
//! sequence's bits do not depend on the batch.
//!
//! # Bits
//! Every float operation is one of the unfused kernels' `#[inline(always)]` bodies on the same
//! operands in the same order (conv chain: GDN_CONV_CHAIN's; products: `thread_partials_of` /
//! the pair's butterflies; gate path: the unary and binary `apply`; GDN: `token_step`'s
//! operations (`decay`, `lane_dot`, `delta`, `update`), the columns interleaved, and each warp
//! sum the butterfly's tree of additions — `warp_sum_eight_scattered` adds the same operands
//! pairwise, own value first, as the butterfly's lane for the values it keeps; every lane of
//! the butterfly ends with the same bits because each addition is commutative, spec §2.0).
//! Only independent operations are reordered (token t + 1's KV beside token t's output: both
//! read the state after token t). Copies move bit patterns.

use crate::abi::{
    BATCH_CONV_SOURCE_ROWS_OFFSET, BATCH_PARAMS_BYTES, BATCH_ROW_REDUCE_BYTES, BATCH_SOURCE_ROWS_OFFSET, BATCH_STATE_BYTES_PER_GROUP,
    BATCH_TARGET_OFFSET, BATCH_WALK_OFFSET, BatchCursor, BatchItem, GDN_CONV_CHAIN_MAX_TOKENS, GDN_LAYER_STEP_BLOCK, GDN_LAYER_STEP_COLS,
    GDN_LAYER_STEP_GROUPS_PER_HEAD, GDN_LAYER_STEP_WARPS, GdnLayerStepParams, LayerStepItems, LayerStepSchedule, ScheduleWalk,
    batch_conv_round_seqs, batch_rows_offset, batch_scratch_offset, batch_second_stage_offset, div_ceil_or_zero,
};
use crate::device::grid::{arrive, close_batch_launch, close_launch, grid_target, publish_count, publish_item, wait_count, wait_items};
use crate::device::shared;
use crate::device::thread::{block_idx_x, grid_dim_x, sync_threads, thread_idx_x};
use crate::device::trap;
use crate::gated_delta_net::{
    BatchGroups, GroupAt, WarpGroups, cache_source_row, issue_batch_state_copies, issue_batch_token_copies, prefetch_group_state,
    run_batch_groups, run_group_at, run_group_pair_at,
};
use crate::gdn_conv_chain::{gdn_conv_chain_tile, gdn_conv_chain_tiles_side_by_side, tile_source_row};
use crate::mmvf::{Accumulation, Bf16, F16F32, F16Half, F32, pair_gate_row_halves, pair_gate_tile};
use core::ptr::addr_of_mut;

/// # Safety
/// See the module docs: the host validated the three parts (each as its own op would), their
/// links and disjointness; the grid is resident at once (cooperative launch) with block
/// (128, 1, 1), the dynamic shared memory is `gdn_layer_step_shared_bytes(D_CONV, n_tokens)`,
/// `p.sync_state` is the launch's own readiness state with `done` = `arrived`, the first-phase
/// items are at most `GRID_SYNC_FLAGS`, 2·⌈n_t/2⌉ + 3 ≤ 32, and the first-phase items plus
/// gridDim.x and H_v·32 plus 4·gridDim.x fit in u32.
#[inline(always)]
unsafe fn gdn_layer_step<A: Accumulation, const D_CONV: usize, const PAIRS: bool>(p: &GdnLayerStepParams) {
    let (block, grid) = (block_idx_x(), grid_dim_x());
    let tid = thread_idx_x();
    let (warp, lane) = (tid / 32, tid % 32);
    let items = LayerStepItems::of(p);
    // Phase 2's work: n_s·H_v·32 column groups (sequence-major), one per warp, from the grid's
    // last block down (block G − 1 − b's warp w runs groups 4·b + w, 4·b + w + 4·G, …), so that
    // the blocks running first-phase items (0, 1, …) run groups only when the grid has too few
    // blocks.
    let seq_groups = p.n_heads * GDN_LAYER_STEP_GROUPS_PER_HEAD;
    // [seq-batch] Two groups a warp (one eight-column recurrence): the `gdn_layer_step_seqs_*`
    // entries (several sequences); one in the single-sequence entries, whose code this leaves
    // as it was.
    let per_warp = if PAIRS { 2 } else { 1 };
    let warp_items = items.n_seqs * seq_groups / per_warp;
    let (first_group, warps) = ((grid - 1 - block) * GDN_LAYER_STEP_WARPS + warp, grid * GDN_LAYER_STEP_WARPS);
    let group_at = |item: u32| {
        // A group exists only with H_v ≥ 1; a violated contract aborts the launch.
        let (Some(seq), Some(in_seq)) = (item.checked_div(seq_groups), item.checked_rem(seq_groups)) else { trap() };
        GroupAt { head: in_seq / GDN_LAYER_STEP_GROUPS_PER_HEAD, seq, group: in_seq % GDN_LAYER_STEP_GROUPS_PER_HEAD, warp, lane }
    };
    let (source_rows, source_rows_stride) = (p.gdn.source_rows as usize as *const i32, p.gdn.source_rows_stride as usize);
    let state = p.sync_state as usize as *mut u64;
    // The launch's target, in the first warp only: the one that publishes, waits and arrives
    // (one load per block; a grid whose every warp loaded the line queued ~1600 requests on it).
    // SAFETY: the launch's own readiness state (host), read before this block's arrival.
    let target = if warp == 0 { unsafe { grid_target(state, grid) } } else { 0 };
    // [speed] Ask L2 for this warp's first column group's initial state now: phase 1 does not
    // touch the ssm cache, so the lines arrive while it runs (hints only).
    // The L2 prefetch of warp item `w`'s groups' initial states (hints only).
    let prefetch = |w: u32| {
        // SAFETY: a column group of the validated grid (host); hints only.
        unsafe { prefetch_group_state(&p.gdn.gdn, source_rows, source_rows_stride, group_at(w * per_warp)) };
        if PAIRS {
            // SAFETY: as above, the pair's second group.
            unsafe { prefetch_group_state(&p.gdn.gdn, source_rows, source_rows_stride, group_at(w * per_warp + 1)) };
        }
    };
    if first_group < warp_items {
        prefetch(first_group);
    }
    // ---- Phase 1: the conv-chain tiles, then the mat-vec rows; each item published. ----
    // [speed] Tiles first: when the items outnumber the grid (n_t > 8, or [seq-batch] several
    // sequences), the second round runs row items, not the tiles every head waits for. Row
    // items: (column pair, row, product), the product fastest, over the n_t·n_s columns
    // ([seq-batch] sequence-major: at an odd n_t a pair may hold two sequences' columns, so
    // n_t = 1 needs half the row items of one pair per sequence).
    let (tiles, first_phase) = (items.tile_items(), items.first_phase_items());
    // Two loops, tiles then rows (items b, b + G, … in increasing order either way), so that
    // neither kind's loop-invariant addresses stay live through the other's.
    let mut item = block;
    while item < tiles {
        // C/128 ≥ 1 here (a tile item exists).
        let (seq, tile) = items.tile_item(item, trap);
        // SAFETY: tile < C / 128 and seq < n_s (host); all 128 threads call it; the shared
        // memory is the chain's layout for (D_CONV, n_t).
        unsafe { gdn_conv_chain_tile::<D_CONV, GDN_CONV_CHAIN_MAX_TOKENS>(&p.chain, tile as usize, seq as usize) };
        // SAFETY: `item` is block-uniform, so every thread is here, after its last write of the
        // item; item < GRID_SYNC_FLAGS (host), published once (items are b, b + G, …). The
        // block barrier inside also ends the item's shared-memory accesses.
        unsafe { publish_item(state, item, target) };
        item += grid;
    }
    // The products' columns: n_t of each sequence.
    let columns = items.n_seqs as usize * p.n_tokens as usize;
    while item < first_phase {
        // H_v ≥ 1 here (a row item exists); a violated contract aborts the launch.
        let (pair, rem) = items.row_item(item - tiles, trap);
        // SAFETY: row rem / 2 < H_v of product rem mod 2, first column 2·pair < n_t·n_s (host:
        // both products valid for n_t·n_s columns); all 128 threads call it.
        unsafe {
            pair_gate_row_halves::<A>(
                &p.gate,
                rem % 2,
                (rem / 2) as usize,
                pair as usize * GDN_LAYER_STEP_COLS,
                columns,
                p.pair_block,
                shared::base(),
            )
        };
        // SAFETY: as for the tiles above.
        unsafe { publish_item(state, item, target) };
        item += grid;
    }
    // SAFETY: every thread of the block, once, after its last publication.
    unsafe { arrive(state) };
    // ---- Phase 2: GATED_DELTA_NET's column groups, one warp each (or [seq-batch] two, as one
    // eight-column recurrence: `pairs`), each waiting only for the items it reads. ----
    let mut item = first_group;
    while item < warp_items {
        let at = group_at(item * per_warp);
        // [speed] [seq-batch] This warp's next groups' initial state asked of L2 now (hints
        // only): with more groups than warps, their loads then meet L2 too.
        if item + warps < warp_items {
            prefetch(item + warps);
        }
        // The host proved these waits cover every writer of the group's reads (LayerStepItems).
        let read = items.item_read_by(at.seq, at.head, lane, trap);
        // SAFETY: head < H_v, seq < n_s of the ones the host validated, group < D/4, every lane
        // of the warp here (the loop is warp-uniform); once `wait_items` returned, every token
        // input of the group was written by its items (module docs, "Readiness") and is
        // visible, and nothing writes them in phase 2 (host: disjoint from `out` and the
        // states); each group is this warp's alone.
        // SAFETY: every thread of the block: the loop is block-uniform (n_s·H_v·32 / `per_warp`
        // warp items, a multiple of 4: the block's four warps run the same number, each round
        // 4·`per_warp` groups of one sequence's head — 32 groups a head —, so `read` is the same
        // in every warp); each item < the first-phase items (row rem < 2·H_v, tiles < C/128:
        // host links), published by its block, and this block published and arrived above.
        let ready = || unsafe { wait_items(state, read, target) };
        if PAIRS {
            // SAFETY: as for one group below, for groups at.group (even) and at.group + 1; the
            // stage holds the pair layout for n_t tokens (abi asserts it fits the entry's
            // shared memory at every n_t).
            unsafe { run_group_pair_at(&p.gdn.gdn, source_rows, source_rows_stride, at, shared::base(), ready) };
        } else {
            // SAFETY: see above.
            unsafe { run_group_at(&p.gdn.gdn, source_rows, source_rows_stride, at, shared::base(), ready) };
        }
        item += warps;
    }
    if block == 0 {
        // SAFETY: block 0 after its arrival; every block arrives (co-resident grid).
        unsafe { close_launch(state, target) };
    }
}

/// [seq-batch] GDN_LAYER_STEP over n_s ≥ 2 sequences (see "Several sequences" in the module docs):
/// block b runs the schedule's items b, b + G, b + 2G, … ([`LayerStepSchedule`]).
///
/// **Buffers.** A second-phase item takes state buffer and token stage `buffer`, the next one
/// `1 − buffer`: the item's copies land and the block meets (one barrier per item), then the
/// next item's copies start into the other pair — whose last user, the previous second-phase
/// item, every warp finished before that barrier — and the item computes. Copies into an
/// item's own pair issued at the item itself (no prefetch: the first item, or one after a
/// first-phase item) meet only the item before the previous one, which also ended before the
/// previous item's barrier. Stage 0 is the scratch area: a first-phase item after a
/// second-phase one waits for a block barrier, and copies are issued early only for a
/// second-phase item that comes next. An item's token copies start only
/// after its chunk's acquire and a block barrier — at the item (`wait_count`) or, once the block
/// acquired the chunk, early at the previous item. A first-phase item's area (a mat-vec item's
/// reduction buffer and operand rings, a one-row item's reduction buffer and staging, or a conv
/// item's tiles, one per sequence of a round; `batch_rows_offset`) spans state buffer 1, the
/// scratch area and the second token stage: all idle during a first-phase item (no prefetch
/// targets them then; the only copy that may fly, a block's first second-phase state, lands in
/// state buffer 0), and the items
/// before and after it end with a block barrier (`publish_count`, or the one after a
/// second-phase item followed by a first-phase one).
///
/// # Safety
/// As [`gdn_layer_step`], for the schedule `p.batch` describes (host: chunk counters ≤
/// `BATCH_MAX_CHUNKS`, every item index with the grid added fits u32, the dynamic shared memory
/// is `gdn_layer_step_batch_shared_bytes(D_CONV, n_t, groups_per_warp)`, n_s ≤
/// `GDN_LAYER_STEP_MAX_SEQS`, the ssm cache rows 16-byte aligned with `in_col` = D, `in_head` =
/// D·D).
#[inline(always)]
unsafe fn gdn_layer_step_batch<A: Accumulation, const D_CONV: usize>(params: &GdnLayerStepParams) {
    let (block, grid) = (block_idx_x(), grid_dim_x());
    let tid = thread_idx_x();
    // [speed] The parameters in shared memory, read through a generic pointer: the item loop's
    // stores may alias them as far as the compiler knows, so it re-reads what an item needs
    // instead of hoisting every kind's parameter-derived addresses out of the loop — which kept
    // them all live across all items (250 registers, or spills at the 168 three blocks per
    // multiprocessor allow; 150–160 this way). A shared load per use, the same values. The
    // schedule's walk (its divisors prepared once) lies beside them, read the same way.
    let p = shared::generic(shared::base()) as *mut GdnLayerStepParams;
    let walk = shared::generic(shared::base() + BATCH_WALK_OFFSET) as *mut ScheduleWalk;
    // [speed] Every sequence's source rows (ssm cache and conv cache), read once per block into
    // two tables: a second-phase item's state copy, and a conv item's loads of each of its
    // sequences, then start from a shared load instead of waiting for a global one first.
    let source_row_table = shared::base() + BATCH_SOURCE_ROWS_OFFSET;
    let conv_source_row_table = shared::base() + BATCH_CONV_SOURCE_ROWS_OFFSET;
    // SAFETY: the first 1024 bytes of the dynamic shared memory hold the copy and the walk (host:
    // `gdn_layer_step_batch_shared_bytes`; abi.rs asserts both fit, 8-byte aligned — the area is
    // 16-byte aligned at least); each part written by one thread.
    // [speed] One lane per warp copies a part, and another computes the walk: the parameter
    // loads' round trips overlap instead of queuing behind one thread (≈ 1.2 µs of a block's
    // start on the H200, measured with per-item timestamps).
    // Every field is named below, once: this pattern (no `..`, nothing read) stops the build if
    // a field is added to the parameters without a lane to copy it.
    let GdnLayerStepParams { chain: _, gate: _, gdn: _, sync_state: _, pair_block: _, n_heads: _, n_chain_tiles: _, n_tokens: _, batch: _ } =
        params;
    unsafe {
        match tid {
            0 => addr_of_mut!((*p).chain).write(params.chain),
            32 => addr_of_mut!((*p).gate).write(params.gate),
            64 => addr_of_mut!((*p).gdn).write(params.gdn),
            96 => {
                addr_of_mut!((*p).sync_state).write(params.sync_state);
                addr_of_mut!((*p).pair_block).write(params.pair_block);
                addr_of_mut!((*p).n_heads).write(params.n_heads);
                addr_of_mut!((*p).n_chain_tiles).write(params.n_chain_tiles);
                addr_of_mut!((*p).n_tokens).write(params.n_tokens);
                addr_of_mut!((*p).batch).write(params.batch);
            }
            97 => walk.write(ScheduleWalk::of(LayerStepSchedule::of(params))),
            _ => {}
        }
    }
    let mut seq = tid;
    while seq < params.batch.n_seqs {
        // SAFETY: seq < n_s ≤ GDN_LAYER_STEP_MAX_SEQS (host): validated indices of the caches,
        // never written, and slots of the tables.
        unsafe {
            let row = cache_source_row(params.gdn.source_rows as usize as *const i32, params.gdn.source_rows_stride as usize, seq as usize);
            shared::store_u32(source_row_table + 4 * seq, row);
            shared::store_u32(conv_source_row_table + 4 * seq, tile_source_row(&params.chain, seq as usize) as u32);
        }
        seq += GDN_LAYER_STEP_BLOCK;
    }
    // SAFETY: every thread of the block, before any read of the copy or the table.
    unsafe { sync_threads() };
    // SAFETY: written above, never written again during the launch.
    let (p, walk): (&GdnLayerStepParams, &ScheduleWalk) = unsafe { (&*p, &*walk) };
    // SAFETY: seq < n_s (schedule), its slot written above.
    let source_row = |seq: u32| unsafe { shared::load_u32(source_row_table + 4 * seq) as usize };
    // SAFETY: as above.
    let conv_source_row = |seq: usize| unsafe { shared::load_u32(conv_source_row_table + 4 * seq as u32) as usize };
    let (warp, lane) = (tid / 32, tid % 32);
    let groups = WarpGroups::batch(p.batch.groups_per_warp, p.n_tokens);
    let state = p.sync_state as usize as *mut u64;
    // [speed] The launch's target, needed only by block 0's thread 0 at the end: read now (before
    // this block's arrival) and kept in shared memory, not in a register through every item.
    let target_slot = shared::base() + BATCH_TARGET_OFFSET;
    if block == 0 && tid == 0 {
        // SAFETY: the launch's own readiness state (host), read before this block's arrival; the
        // slot lies in the parameters' copy after the walk (abi.rs asserts it fits), written
        // only here and read only by this thread.
        unsafe {
            let target = grid_target(state, grid);
            shared::store_u32(target_slot, target as u32);
            shared::store_u32(target_slot + 4, (target >> 32) as u32);
        }
    }
    let base = shared::base() + BATCH_PARAMS_BYTES;
    let state_bytes = p.batch.groups_per_warp * BATCH_STATE_BYTES_PER_GROUP;
    let scratch = base + batch_scratch_offset(p.batch.groups_per_warp);
    // A mat-vec item's area: its reduction buffer, then its operand rings (16-byte aligned).
    let rows_area = base + batch_rows_offset(p.batch.groups_per_warp);
    // The two token stages: the scratch area (which the first-phase items also use) and the
    // second stage after it.
    let second_stage = base + batch_second_stage_offset(D_CONV, p.n_tokens as usize, p.batch.groups_per_warp);
    let stage_of = |buffer: u32| if buffer == 0 { scratch } else { second_stage };
    let groups_at = |seq: u32, head: u32, first_group: u32| BatchGroups { head, seq, first_group, groups, warp, lane };
    // [speed] Second-phase items alternate between two state buffers and two token stages: the
    // current item's, and the next one's, whose copies fly while the current item computes.
    // `buffer` is the current (or next, between items) second-phase item's; `prefetched` and
    // `staged` say whether its state and token copies were already issued (by the previous
    // second-phase item of this block, or before the first phase).
    let mut buffer = 0u32;
    let mut prefetched = false;
    let mut staged = false;
    // [speed] The chunk whose first-phase items this block has observed all done (`wait_count`'s
    // acquire, then a block barrier): its items' token inputs are visible to every thread of the
    // block from then on, so a later item of it neither polls nor waits to start its copies.
    let mut acquired = u32::MAX;
    let mut at = walk.advance(BatchCursor { segment: 0, offset: 0 }, block);
    // [speed] The state of this block's first second-phase item, asked for now when the block
    // starts on one: the first phase does not touch the ssm cache, so the copy lands while the
    // block looks on. A block that starts with the launch's leading first-phase items — P1(0),
    // then P1(1) with two chunks or more: blocks below `lead` — asks for nothing early: its
    // first items are what every second-phase item waits for, and issuing a state copy first
    // (≈ 1 µs) delayed them; its second-phase items copy their own state at the item (same
    // call, `results/2026-12-03-h200-one-row/`: 0.5–1 µs less at n_s = 2–8, 1.6 at n_s = 16,
    // T = 4, level or better at n_s = 64).
    let lead = walk.segment_len(0) + if walk.n_chunks() > 1 { walk.segment_len(1) } else { 0 };
    let mut first = if block < lead { None } else { at };
    while let Some(cursor) = first {
        if let (BatchItem::Groups { seq, head, first_group }, _) = walk.item(cursor) {
            // SAFETY: the item inside the validated launch; buffer 0 is free.
            unsafe { issue_batch_state_copies(&p.gdn.gdn, source_row(seq), groups_at(seq, head, first_group), tid, base) };
            shared::commit_async_copies();
            prefetched = true;
            break;
        }
        first = walk.advance(cursor, grid);
    }
    // [speed] Each item decoded once: the next one's decoding (for its prefetch) is carried over.
    let mut current = match at {
        Some(cursor) => Some(walk.item(cursor)),
        None => None,
    };
    while let (Some(cursor), Some((item, chunk))) = (at, current) {
        let next = walk.advance(cursor, grid);
        let next_item = match next {
            Some(n) => Some(walk.item(n)),
            None => None,
        };
        match item {
            BatchItem::Tiles { tile, first_seq, n_seqs } => {
                // [speed] The item's sequences side by side, as many at a time as the
                // first-phase area holds.
                let round_seqs = batch_conv_round_seqs(D_CONV, p.n_tokens as usize, p.batch.groups_per_warp);
                // SAFETY: tile < C/128 and the sequences < n_s (schedule); all 128 threads; the
                // area (from the second state buffer on, as a mat-vec item's) holds `round_seqs`
                // conv tiles (abi) and is idle during a first-phase item — the item before it
                // ended with a block barrier, and the only copy that can be in flight, the first
                // second-phase item's state, lands in the first state buffer (and completes here
                // too, harmlessly). `conv_source_row` is the table of `tile_source_row` (above).
                unsafe {
                    gdn_conv_chain_tiles_side_by_side::<D_CONV>(
                        &p.chain,
                        tile as usize,
                        first_seq as usize,
                        n_seqs as usize,
                        rows_area,
                        round_seqs as usize,
                        conv_source_row,
                    )
                };
                // SAFETY: block-uniform item: every thread is here after its last write of it.
                unsafe { publish_count(state, chunk) };
            }
            BatchItem::Rows { first_head, n_heads, first_col, n_cols } => {
                // SAFETY: heads and columns inside the validated products (schedule); all 128
                // threads; the item's area (the reduction buffer, then the rings: from the second
                // state buffer on, `batch_rows_offset`) is idle during a first-phase item — the
                // item before it ended with a block barrier, and the only copy that can be in
                // flight, the first second-phase item's state, lands in the first state buffer.
                unsafe {
                    pair_gate_tile::<A, 4>(
                        &p.gate,
                        first_head,
                        n_heads,
                        first_col,
                        n_cols,
                        p.pair_block,
                        rows_area,
                        rows_area + BATCH_ROW_REDUCE_BYTES,
                    )
                };
                // SAFETY: as above.
                unsafe { publish_count(state, chunk) };
            }
            BatchItem::Row { product, head, first_col, n_cols } => {
                // SAFETY: row `head` < H_v of product `product` < 2 and columns first_col … +
                // n_cols − 1 inside the validated products (schedule: n_cols ≥ 1); all 128
                // threads; the area (reduction buffer and staging, within the mat-vec item's:
                // abi asserts it) is idle during a first-phase item, as for `Rows` above.
                unsafe {
                    pair_gate_row_halves::<A>(
                        &p.gate,
                        product,
                        head as usize,
                        first_col as usize,
                        (first_col + n_cols) as usize,
                        p.pair_block,
                        rows_area,
                    )
                };
                // SAFETY: as above.
                unsafe { publish_count(state, chunk) };
            }
            BatchItem::Groups { seq, head, first_group } => {
                let (here, stage) = (base + buffer * state_bytes, stage_of(buffer));
                if !prefetched {
                    // SAFETY: the item inside the validated launch; the buffer is free
                    // ("Buffers" above).
                    unsafe { issue_batch_state_copies(&p.gdn.gdn, source_row(seq), groups_at(seq, head, first_group), tid, here) };
                }
                if !staged {
                    if chunk != acquired {
                        // SAFETY: every thread of the block; the chunk's first-phase items all
                        // come before this item in the schedule, and its counter counts exactly
                        // them.
                        unsafe { wait_count(state, chunk, walk.first_items(chunk) as u64) };
                        acquired = chunk;
                    }
                    // SAFETY: after the chunk's acquire and a block barrier (in `wait_count`,
                    // now or for an earlier item of the chunk): every token input of the item is
                    // written and visible; the stage is free ("Buffers" above).
                    unsafe { issue_batch_token_copies(&p.gdn.gdn, groups_at(seq, head, first_group), stage) };
                }
                shared::commit_async_copies();
                // This thread's copies of the item (state and token inputs) have landed ...
                shared::wait_async_groups::<0>();
                // ... and every thread's, after the barrier; every warp also finished the previous
                // second-phase item here, so its buffer and stage are free for the next item's
                // copies.
                // SAFETY: every thread of the block (block-uniform item).
                unsafe { sync_threads() };
                // [speed] The next item's state, and its token inputs when its chunk is acquired,
                // if this block's next item is a second-phase one: the copies fly while this item
                // computes.
                let (other_here, other_stage) = (base + (1 - buffer) * state_bytes, stage_of(1 - buffer));
                (prefetched, staged) = (false, false);
                if let Some((BatchItem::Groups { seq: s2, head: h2, first_group: g2 }, next_chunk)) = next_item {
                    // SAFETY: the item inside the validated launch; the other buffer is free (the
                    // barrier above).
                    unsafe { issue_batch_state_copies(&p.gdn.gdn, source_row(s2), groups_at(s2, h2, g2), tid, other_here) };
                    prefetched = true;
                    if next_chunk == acquired {
                        // SAFETY: the chunk's acquire and a block barrier came before (as above);
                        // the other stage is free (the barrier above).
                        unsafe { issue_batch_token_copies(&p.gdn.gdn, groups_at(s2, h2, g2), other_stage) };
                        staged = true;
                    }
                    shared::commit_async_copies();
                }
                // SAFETY: the item's state and inputs are staged and visible (barrier above);
                // nothing writes them before the next second-phase item's barrier, which every
                // warp reaches only after this call.
                unsafe { run_batch_groups(&p.gdn.gdn, groups_at(seq, head, first_group), here, stage) };
                match next_item {
                    Some((BatchItem::Groups { .. }, _)) => {}
                    // A first-phase item next writes the scratch area (this item's stage when
                    // `buffer` is 0): the block meets first.
                    // SAFETY: every thread of the block (block-uniform item).
                    Some(_) => unsafe { sync_threads() },
                    None => {}
                }
                buffer = 1 - buffer;
            }
        }
        at = next;
        current = next_item;
    }
    // No copy of this block is in flight any more (a prefetch is only issued for a next item,
    // which waits for it).
    // SAFETY: every thread of the block, once, after its last item.
    unsafe { arrive(state) };
    if block == 0 {
        // Thread 0 stored it at the start (the others pass a value `close_batch_launch` ignores).
        // SAFETY: this thread's own stores above, nothing else writes the slot.
        let target =
            if tid == 0 { unsafe { shared::load_u32(target_slot) as u64 | (shared::load_u32(target_slot + 4) as u64) << 32 } } else { 0 };
        // SAFETY: block 0 after its arrival; every block arrives (co-resident grid).
        unsafe { close_batch_launch(state, target, walk.n_chunks()) };
    }
}

/// [test] An entry's body on the host, by its entry name (`tests/kernel_emulation.rs` runs the
/// kernels' own source on the CPU): the same generic body the `extern "ptx-kernel"` entry calls.
#[cfg(not(target_arch = "nvptx64"))]
pub type EmulatedEntry = (&'static str, unsafe fn(&GdnLayerStepParams));

macro_rules! gdn_layer_step_batch_entries {
    ($table:ident; $($name:ident = $acc:ty, $kind:tt, $d:tt;)*) => {
        $(
        /// [seq-batch] Entry point; see the module docs.
        ///
        /// # Safety
        /// See the module docs: the host validates every part, link, overlap and the schedule,
        /// and launches a co-resident (cooperative) grid.
        #[cfg(target_arch = "nvptx64")]
        #[unsafe(export_name = crate::abi::entry_name!(gdn_layer_step_batch, $kind, $d))]
        pub unsafe extern "ptx-kernel" fn $name(p: GdnLayerStepParams) {
            // SAFETY: forwarded from the launch contract above.
            unsafe { gdn_layer_step_batch::<$acc, $d>(&p) }
        }
        )*
        /// [test] These entries' bodies on the host ([`EmulatedEntry`]).
        #[cfg(not(target_arch = "nvptx64"))]
        pub const $table: &[EmulatedEntry] = &[$(
            (crate::abi::entry_name!(gdn_layer_step_batch, $kind, $d), {
                /// # Safety
                /// The entry's contract (above), on an emulated launch.
                unsafe fn body(p: &GdnLayerStepParams) {
                    // SAFETY: forwarded from the contract above.
                    unsafe { gdn_layer_step_batch::<$acc, $d>(p) }
                }
                body
            }),
        )*];
    };
}

gdn_layer_step_batch_entries! {
    BATCH_ENTRIES_EMULATED;
    gdn_layer_step_batch_f32_d3 = F32, f32, 3;
    gdn_layer_step_batch_f32_d4 = F32, f32, 4;
    gdn_layer_step_batch_f32_d5 = F32, f32, 5;
    gdn_layer_step_batch_bf16_d3 = Bf16, bf16, 3;
    gdn_layer_step_batch_bf16_d4 = Bf16, bf16, 4;
    gdn_layer_step_batch_bf16_d5 = Bf16, bf16, 5;
    gdn_layer_step_batch_f16_d3 = F16Half, f16, 3;
    gdn_layer_step_batch_f16_d4 = F16Half, f16, 4;
    gdn_layer_step_batch_f16_d5 = F16Half, f16, 5;
    gdn_layer_step_batch_f16_f32acc_d3 = F16F32, f16_f32acc, 3;
    gdn_layer_step_batch_f16_f32acc_d4 = F16F32, f16_f32acc, 4;
    gdn_layer_step_batch_f16_f32acc_d5 = F16F32, f16_f32acc, 5;
}

/// The single-sequence step's entries (`PAIRS` = false: one column group a warp) and [seq-batch]
/// the `seqs` entries of a small batch on the single-sequence items (true: two column groups a
/// warp, module docs "Several sequences"): the same body.
macro_rules! gdn_layer_step_entries {
    ($table:ident, $prefix:ident, $pairs:literal; $($name:ident = $acc:ty, $kind:tt, $d:tt;)*) => {
        $(
        /// Entry point; see the module docs.
        ///
        /// # Safety
        /// See the module docs: the host validates every part, link and overlap, and launches a
        /// co-resident (cooperative) grid.
        #[cfg(target_arch = "nvptx64")]
        #[unsafe(export_name = crate::abi::entry_name!($prefix, $kind, $d))]
        pub unsafe extern "ptx-kernel" fn $name(p: GdnLayerStepParams) {
            // SAFETY: forwarded from the launch contract above.
            unsafe { gdn_layer_step::<$acc, $d, $pairs>(&p) }
        }
        )*
        /// [test] These entries' bodies on the host ([`EmulatedEntry`]).
        #[cfg(not(target_arch = "nvptx64"))]
        pub const $table: &[EmulatedEntry] = &[$(
            (crate::abi::entry_name!($prefix, $kind, $d), {
                /// # Safety
                /// The entry's contract (above), on an emulated launch.
                unsafe fn body(p: &GdnLayerStepParams) {
                    // SAFETY: forwarded from the contract above.
                    unsafe { gdn_layer_step::<$acc, $d, $pairs>(p) }
                }
                body
            }),
        )*];
    };
}

gdn_layer_step_entries! {
    SEQS_ENTRIES_EMULATED, gdn_layer_step_seqs, true;
    gdn_layer_step_seqs_f32_d3 = F32, f32, 3;
    gdn_layer_step_seqs_f32_d4 = F32, f32, 4;
    gdn_layer_step_seqs_f32_d5 = F32, f32, 5;
    gdn_layer_step_seqs_bf16_d3 = Bf16, bf16, 3;
    gdn_layer_step_seqs_bf16_d4 = Bf16, bf16, 4;
    gdn_layer_step_seqs_bf16_d5 = Bf16, bf16, 5;
    gdn_layer_step_seqs_f16_d3 = F16Half, f16, 3;
    gdn_layer_step_seqs_f16_d4 = F16Half, f16, 4;
    gdn_layer_step_seqs_f16_d5 = F16Half, f16, 5;
    gdn_layer_step_seqs_f16_f32acc_d3 = F16F32, f16_f32acc, 3;
    gdn_layer_step_seqs_f16_f32acc_d4 = F16F32, f16_f32acc, 4;
    gdn_layer_step_seqs_f16_f32acc_d5 = F16F32, f16_f32acc, 5;
}

gdn_layer_step_entries! {
    ENTRIES_EMULATED, gdn_layer_step, false;
    gdn_layer_step_f32_d3 = F32, f32, 3;
    gdn_layer_step_f32_d4 = F32, f32, 4;
    gdn_layer_step_f32_d5 = F32, f32, 5;
    gdn_layer_step_bf16_d3 = Bf16, bf16, 3;
    gdn_layer_step_bf16_d4 = Bf16, bf16, 4;
    gdn_layer_step_bf16_d5 = Bf16, bf16, 5;
    gdn_layer_step_f16_d3 = F16Half, f16, 3;
    gdn_layer_step_f16_d4 = F16Half, f16, 4;
    gdn_layer_step_f16_d5 = F16Half, f16, 5;
    gdn_layer_step_f16_f32acc_d3 = F16F32, f16_f32acc, 3;
    gdn_layer_step_f16_f32acc_d4 = F16F32, f16_f32acc, 4;
    gdn_layer_step_f16_f32acc_d5 = F16F32, f16_f32acc, 5;
}
