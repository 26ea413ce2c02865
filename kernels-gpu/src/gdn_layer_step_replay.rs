//! \[replay\] GDN_LAYER_STEP_REPLAY — a replay layer's whole verify step in one launch,
//! bit-identical to its three fused ops run one after the other: GDN_CONV_CHAIN with the window
//! commit and the log copies in front ([`gdn_conv_chain`](crate::gdn_conv_chain)'s commit tile),
//! the alpha/beta products with the gate path (MUL_MAT_VEC_PAIR_GATE, [`mmvf`](crate::mmvf))
//! and GATED_DELTA_NET_REPLAY_VERIFY (the replay of the previous step's accepted tokens from the
//! committed state, its one commit, and the verify's recurrence,
//! [`gated_delta_net_replay_verify`](crate::gated_delta_net_replay_verify)). Scope: the
//! single-sequence layer step's items over n_s sequences (one, and small batches), n_t and the
//! log's T_log 1–16, d_conv 3–5, D = 128, F32 / BF16 / F16 weights; the host refuses the rest
//! (`host/ops/gdn_layer_step_replay.rs`). Design: `docs/rollback.md`, "Built so far:
//! GDN_LAYER_STEP_REPLAY".
//!
//! # Design: GDN_LAYER_STEP's two phases, with the replay in front of the second's wait
//!
//! The single-sequence layer step's grid, blocks, items and readiness flags
//! ([`gdn_layer_step`](crate::gdn_layer_step), its module docs), with two parts changed:
//! - **Phase 1**, blocks 0, 1, …: items 0 … n_s·C/128 − 1 are the conv chain's tiles *with the
//!   window commit in front* ([`gdn_conv_chain_commit_tile`], its token slots unrolled to 16: each thread commits its
//!   channel's window(a) over the committed row and runs the chain from window(a); only after
//!   the tile is published does it log its tokens' inputs and its v channels' outputs,
//!   [`gdn_conv_chain_commit_logs`]), then the 2·H_v·⌈n_t·n_s/2⌉ mat-vec row items
//!   (the same [`pair_gate_row_halves`]); each published under its own flag
//!   ([`LayerStepItems::of_replay`]: the same numbering as the layer step's).
//! - **Phase 2**, from the grid's last block down: n_s·H_v·4 block items, item i the block
//!   (head, sequence, z) = ((i / 4) mod H_v, i / (4·H_v), i mod 4) of GATED_DELTA_NET_REPLAY_VERIFY
//!   with one column group a warp ([`replay_verify_item`]`::<true>`): the block loads its
//!   columns' committed state and stages the log's accepted tokens — bytes no block of this
//!   launch writes, so at once, while phase 1 runs —, replays them and commits the state, and
//!   only then waits for the items its head reads (`LayerStepItems::item_read_by`: its row
//!   items and its q, k and v tiles, as the layer step's column groups), stages the verify's
//!   tokens and runs the verify. The replay, the heaviest part of a second-phase item after a
//!   step that accepted many tokens, overlaps the first phase instead of following it.
//!
//! # Why the bits are the three ops'
//! Every value is computed by the three kernels' `#[inline(always)]` bodies on the same
//! operands in the same order: a conv item is GDN_CONV_CHAIN's commit entry's block (tile,
//! sequence); a row item is GDN_LAYER_STEP's (the pair-gate's per-column arithmetic); a
//! second-phase item is GATED_DELTA_NET_REPLAY_VERIFY's block (h, s, z) with G = 1, whose
//! operations do not depend on where its verify tokens are staged from (the staging moves bits).
//!
//! # The read-among-written hazards, and why each is race-free
//! - **Conv cache**: a conv item reads its channels' slice of the committed row and writes
//!   window(a) back over it, each float read and then written by one thread
//!   (GDN_CONV_CHAIN's commit argument); slices of different tiles are disjoint, rows of
//!   different sequences are their own (host). No other item touches the conv cache.
//! - **`conv_out` on `qkv`** (element for element) and the logs of this step: as in
//!   GDN_CONV_CHAIN's commit entry (a thread reads its channel's tokens before it writes them,
//!   and its k log after the block barrier that ends the norms).
//! - **ssm cache**: second phase only, GATED_DELTA_NET_REPLAY_VERIFY's argument (each element
//!   read, then written, by one thread; no row one sequence writes is another's); the first
//!   phase does not touch it (host: disjoint from every first-phase access).
//! - **The previous step's log, the accepted counts and the row indices**, which a
//!   second-phase item reads before its wait: no item of the launch writes them (host: disjoint
//!   from every output of the chain, the commit and the products).
//! - **Phase 1 → phase 2** (q/k norms, v, gate, β): each written by one item, staged by a block
//!   only after it observed that item's flag (`wait_items`: poll, acquire, block barrier) — the
//!   host proves the waits cover every writer on the step's bytes, as for the layer step.
//! - **`out`**: written once per element by the warp of its column; the host proves it
//!   disjoint from everything phase 1 reads or writes and from the log and index views.
//! - **Shared memory**: a block's items run one after the other, a block barrier between any
//!   two (`publish_item`'s after a first-phase item, the explicit one after a second-phase
//!   item); within a second-phase item the log's and the verify's stages are disjoint areas.

use crate::abi::{
    GDN_CONV_CHAIN_MAX_TOKENS, GDN_LAYER_STEP_COLS, GDN_LAYER_STEP_WARPS, GdnLayerStepReplayParams, LayerStepItems,
    REPLAY_STEP_ITEMS_PER_HEAD,
};
use crate::device::grid::{arrive, close_launch, grid_target, publish_item, wait_items};
use crate::device::shared;
use crate::device::thread::{block_idx_x, grid_dim_x, sync_threads, thread_idx_x};
use crate::device::trap;
use crate::gated_delta_net_replay_verify::replay_verify_item;
use crate::gdn_conv_chain::{gdn_conv_chain_commit_logs, gdn_conv_chain_commit_tile};
use crate::mmvf::{Accumulation, Bf16, F16F32, F16Half, F32, pair_gate_row_halves};

/// # Safety
/// The host validated the three parts (each as its own op would), their links and
/// disjointness and the readiness waits; the grid is resident at once (cooperative launch) with
/// block (128, 1, 1); the dynamic shared memory is
/// `gdn_layer_step_replay_shared_bytes(D_CONV, n_t, T_log)`; `p.sync_state` is the launch's own
/// readiness state with `done` = `arrived`; the first-phase items are at most
/// `GRID_SYNC_FLAGS`; 2·⌈n_t/2⌉ + 3 ≤ 32; the first-phase items plus gridDim.x and the
/// second-phase items plus gridDim.x fit in u32.
#[inline(always)]
unsafe fn gdn_layer_step_replay<A: Accumulation, const D_CONV: usize>(p: &GdnLayerStepReplayParams) {
    let (block, grid) = (block_idx_x(), grid_dim_x());
    let tid = thread_idx_x();
    let (warp, lane) = (tid / 32, tid % 32);
    let items = LayerStepItems::of_replay(p);
    let state = p.sync_state as usize as *mut u64;
    // The launch's target, in the first warp only (the one that publishes, waits and closes).
    // SAFETY: the launch's own readiness state (host), read before this block's arrival.
    let target = if warp == 0 { unsafe { grid_target(state, grid) } } else { 0 };
    // ---- Phase 1: the commit-and-chain tiles, then the mat-vec rows; each item published. ----
    let (tiles, first_phase) = (items.tile_items(), items.first_phase_items());
    let mut item = block;
    while item < tiles {
        let (seq, tile) = items.tile_item(item, trap);
        // [speed] The token slots unrolled to 16 whatever n_t (the commit entries pick 4, 8 or
        // 16): inside this item loop the three bodies' loop-invariant values all stayed live
        // (254 registers at d_conv = 4 against 164 with one body, ptxas 13.5).
        // SAFETY: tile < C / 128 and seq < n_s (host), n_t ≤ 16; all 128 threads call it; the
        // shared memory holds the chain's layout for (D_CONV, n_t).
        // [speed] The step's logs deferred past the publication: nothing in this launch reads
        // them, and the publication waits for every store before it.
        let x = unsafe { gdn_conv_chain_commit_tile::<D_CONV, GDN_CONV_CHAIN_MAX_TOKENS, true>(&p.chain, tile as usize, seq as usize) };
        // SAFETY: `item` is block-uniform, after every write the second phase reads; item <
        // GRID_SYNC_FLAGS (host), published once. Its block barrier leaves the shared memory as
        // the tile left it.
        unsafe { publish_item(state, item, target) };
        // SAFETY: this thread ran the tile with these tokens, and nothing wrote the block's
        // shared memory since; the logs are read by no item of this launch (host: disjoint from
        // every verify input).
        unsafe { gdn_conv_chain_commit_logs::<D_CONV, GDN_CONV_CHAIN_MAX_TOKENS>(&p.chain, tile as usize, seq as usize, x) };
        // SAFETY: every thread of the block (block-uniform loop): the next item's shared writes
        // start after every thread read its staged outputs.
        unsafe { sync_threads() };
        item += grid;
    }
    let columns = items.n_seqs as usize * p.n_tokens as usize;
    while item < first_phase {
        let (pair, rem) = items.row_item(item - tiles, trap);
        // SAFETY: row rem / 2 < H_v of product rem mod 2, first column 2·pair < n_t·n_s (host);
        // all 128 threads call it.
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
    // ---- Phase 2: GATED_DELTA_NET_REPLAY_VERIFY's blocks, from the grid's last block down. ----
    let per_seq = p.n_heads * REPLAY_STEP_ITEMS_PER_HEAD;
    let block_items = items.n_seqs * per_seq;
    let mut item = grid - 1 - block;
    while item < block_items {
        // H_v ≥ 1 here (an item exists); a violated contract aborts the launch.
        let (Some(seq), Some(in_seq)) = (item.checked_div(per_seq), item.checked_rem(per_seq)) else { trap() };
        let (head, z) = (in_seq / REPLAY_STEP_ITEMS_PER_HEAD, in_seq % REPLAY_STEP_ITEMS_PER_HEAD);
        // The host proved these waits cover every writer of the head's verify inputs.
        let read = items.item_read_by(seq, head, lane, trap);
        // SAFETY: every thread of the block (the item is block-uniform); each awaited item <
        // the first-phase items, published by its block, and this block published and arrived.
        let ready = || unsafe { wait_items(state, read, target) };
        // SAFETY: block (head, seq, z) of the validated replay-verify with one group a warp
        // (z < 4 = replay_verify_grid_z(1)), every thread of the block here; once `ready`
        // returned its verify inputs are written and visible and nothing writes them any more
        // (module docs); the replay's log, counts and rows are written by no item (host); the
        // shared memory is this item's (a barrier after the previous item).
        unsafe { replay_verify_item::<true>(&p.rv, head, seq, z, warp, lane, 1, ready) };
        item += grid;
        if item < block_items {
            // SAFETY: every thread of the block (block-uniform loop): the next item's copies
            // start only after every warp finished reading this item's stages.
            unsafe { sync_threads() };
        }
    }
    if block == 0 {
        // SAFETY: block 0 after its arrival; every block arrives (co-resident grid).
        unsafe { close_launch(state, target) };
    }
}

const _: () = assert!(GDN_LAYER_STEP_WARPS == 4, "a second-phase item is GATED_DELTA_NET_REPLAY_VERIFY's block of four warps");

/// [test] An entry's body on the host, by its entry name (`tests/kernel_emulation.rs`).
#[cfg(not(target_arch = "nvptx64"))]
pub type EmulatedEntry = (&'static str, unsafe fn(&GdnLayerStepReplayParams));

macro_rules! gdn_layer_step_replay_entries {
    ($table:ident; $($name:ident = $acc:ty, $kind:tt, $d:tt;)*) => {
        $(
        /// \[replay\] Entry point; see the module docs.
        ///
        /// # Safety
        /// See the module docs: the host validates every part, link, overlap and wait, and
        /// launches a co-resident (cooperative) grid.
        #[cfg(target_arch = "nvptx64")]
        #[unsafe(export_name = crate::abi::entry_name!(gdn_layer_step_replay, $kind, $d))]
        pub unsafe extern "ptx-kernel" fn $name(p: GdnLayerStepReplayParams) {
            // SAFETY: forwarded from the launch contract above.
            unsafe { gdn_layer_step_replay::<$acc, $d>(&p) }
        }
        )*
        /// [test] These entries' bodies on the host ([`EmulatedEntry`]).
        #[cfg(not(target_arch = "nvptx64"))]
        pub const $table: &[EmulatedEntry] = &[$(
            (crate::abi::entry_name!(gdn_layer_step_replay, $kind, $d), {
                /// # Safety
                /// The entry's contract (above), on an emulated launch.
                unsafe fn body(p: &GdnLayerStepReplayParams) {
                    // SAFETY: forwarded from the contract above.
                    unsafe { gdn_layer_step_replay::<$acc, $d>(p) }
                }
                body
            }),
        )*];
    };
}

gdn_layer_step_replay_entries! {
    ENTRIES_EMULATED;
    gdn_layer_step_replay_f32_d3 = F32, f32, 3;
    gdn_layer_step_replay_f32_d4 = F32, f32, 4;
    gdn_layer_step_replay_f32_d5 = F32, f32, 5;
    gdn_layer_step_replay_bf16_d3 = Bf16, bf16, 3;
    gdn_layer_step_replay_bf16_d4 = Bf16, bf16, 4;
    gdn_layer_step_replay_bf16_d5 = Bf16, bf16, 5;
    gdn_layer_step_replay_f16_d3 = F16Half, f16, 3;
    gdn_layer_step_replay_f16_d4 = F16Half, f16, 4;
    gdn_layer_step_replay_f16_d5 = F16Half, f16, 5;
    gdn_layer_step_replay_f16_f32acc_d3 = F16F32, f16_f32acc, 3;
    gdn_layer_step_replay_f16_f32acc_d4 = F16F32, f16_f32acc, 4;
    gdn_layer_step_replay_f16_f32acc_d5 = F16F32, f16_f32acc, 5;
}
