//! GDN_LAYER_STEP — one GDN layer verify step in one launch, bit-identical to the unfused
//! chain: the conv chain ([`gdn_conv_chain`](crate::gdn_conv_chain): conv-state read, CONCAT,
//! the 1 + R snapshot rows, SSM_CONV + SiLU, the q/k L2_NORMs), the alpha/beta products with the
//! gate path ([`mmvf`](crate::mmvf), MUL_MAT_VEC_PAIR_GATE: SIGMOID; ADD, SOFTPLUS, MUL) and
//! GATED_DELTA_NET reading its state from the ssm-cache row and writing its state slots into
//! the cache rows ([`gated_delta_net`](crate::gated_delta_net), GATED_DELTA_NET_FROM_CACHE).
//! Scope: one sequence, n_t 1–8, d_conv 3–5, D = 128, F32 / BF16 / F16 weights (both F16
//! precisions); the host refuses everything else.
//!
//! # Design: two phases, one grid barrier, persistent blocks
//!
//! Block of [`GDN_LAYER_STEP_BLOCK`] = 128 threads — the conv chain's channel tile and
//! GATED_DELTA_NET's 32 × 4 block — and a grid of G blocks that are all resident at once (a
//! cooperative launch: the host takes G ≤ SMs × the occupancy the driver reports, and the
//! driver refuses a cooperative grid that does not fit). Block b runs the first-phase items
//! b, b + G, b + 2G, … (a block barrier before each: the items share the dynamic shared
//! memory); in the second phase its warp w runs the column groups 4·b + w, 4·b + w + 4·G, ….
//!
//! **Phase 1** (everything GATED_DELTA_NET reads, none of it reading another item's output):
//! - items 0 … 2·H_v·⌈n_t/2⌉ − 1: the mat-vec row items. Item i is (column pair i / (2·H_v),
//!   row (i mod 2·H_v) / 2, product i mod 2 — 0: alpha with the gate epilogue, 1: beta_raw
//!   with SIGMOID) for the [`abi::GDN_LAYER_STEP_COLS`](crate::abi::GDN_LAYER_STEP_COLS) = 2
//!   columns of its pair. A `mul_mat_vec_pair_*` block of ggml's block size bs (≤ 256 for E)
//!   computes a row; here 128 threads run its bs *virtual* threads (thread t runs virtual
//!   threads t and t + 128, each with the pair's own per-thread loop), and the reduction is
//!   the pair's, warp butterfly by warp butterfly in ggml's order ([`pair_gate_row_halves`],
//!   [`block_reduce_halves`](crate::mmvf::block_reduce_halves)). A column's loop, butterflies
//!   and block sum do not depend on the other columns of its block (ggml's own split of n_t > 8
//!   into launches relies on it), so each product element is computed once, by one block, with
//!   the unfused kernel's exact operations; the gate path runs on the register the element's
//!   writer thread stores (the pair-gate's epilogue, the unfused unary and binary bodies).
//!   Two columns per item (not n_t) spread the rows over the idle blocks and keep the
//!   registers for three blocks per multiprocessor;
//! - then C/128 conv-chain tiles, each GDN_CONV_CHAIN's block body verbatim
//!   ([`gdn_conv_chain_tile`]): tile k reads its channels' slice of the source row and their
//!   tokens, writes its slice of every snapshot row, its channels of `conv_out`, and the
//!   L2-normalised q/k heads inside the tile.
//!
//! Before phase 1 every warp asks L2 for its first column group's initial state
//! ([`prefetch_group_state`]; the ssm cache is not touched by phase 1), so the state reads
//! after the barrier meet L2.
//!
//! **Grid barrier** ([`grid_barrier`], `device/grid.rs`): each block a release reduction on one
//! counter, an acquire poll until the launch's target — every write of phase 1 is visible to
//! every coherent load of phase 2.
//!
//! **Phase 2**: H_v·32 column groups (head i / 32, columns 4·(i mod 32) … + 3 — GATED_DELTA_NET's
//! block z), one per warp, the group's four columns interleaved in the warp ([`run_group_at`]):
//! for each column the body of GATED_DELTA_NET_FROM_CACHE's warp — the same state registers,
//! loads, `token_step` operations in the same order and the same stores — with the token inputs
//! (q, k, v, g, β) read by coherent loads ([`coherent_f32`](crate::device::load::coherent_f32):
//! they were written in phase 1, by other blocks) instead of `ld.global.nc`, four tokens' inputs
//! at a time. One group per warp instead of one column per warp: the four recurrences' latencies
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
//! j / 2; `out` (lane 0) and the state slots (the lane owning row i) by the warp running the
//! column's group.
//!
//! # The read-among-written hazards, and why each is race-free
//! - **Conv cache** (a snapshot row may be the source row): a tile reads its slice of the
//!   source row in its phase 1 and writes its slices of the snapshot rows after its block
//!   barrier; slices of different tiles are disjoint (channels c0 … c0+127 are the floats
//!   c0·(d_conv−1) … (c0+128)·(d_conv−1) of a row). No other item touches the conv cache.
//! - **`conv_out` on `qkv`** (element for element): a thread reads its channel's tokens before
//!   it writes that channel's outputs; other tiles touch other channels; the mat-vec rows do
//!   not read qkv; GATED_DELTA_NET reads the v channels of `conv_out` only after the grid
//!   barrier.
//! - **ssm cache** (a written state slot may be the row read): in phase 2 only, each state
//!   element is read and written by the one lane owning it, read first (GATED_DELTA_NET_FROM_
//!   CACHE's argument, unchanged); phase 1 does not touch the ssm cache (host: disjoint).
//! - **Phase 1 → phase 2 values** (q/k norms, v, gate, β): written before the grid barrier,
//!   read after it with coherent loads (the barrier's acquire fence also invalidates the
//!   multiprocessor's L1, so no line a block cached before it — qkv under `conv_out` — is
//!   read); nothing writes them in phase 2. The state prefetch before phase 1 is a hint
//!   (no value is read back).
//! - **Across phase-1 items**: the host proves every output of the conv chain disjoint from
//!   every input and output of the products and vice versa, and the phase-2 outputs (`out`, the
//!   state slots) disjoint from everything phase 1 reads or writes; the `.nc` loads (weights,
//!   `cur`, dt_bias, ssm_a, the index buffers) are of bytes no thread writes during the launch.
//!
//! # Several sequences (not built yet)
//! Nothing here is per-launch but the grid barrier: n_s sequences would add n_s × the chain
//! tiles (each sequence its own source row and snapshot rows: the chain's parameters per
//! sequence), the mat-vec rows' columns are already the n_t·n_s tokens, and phase 2's items
//! would run over (sequence, head, group) — GATED_DELTA_NET's per-column body takes the
//! sequence. The one barrier still separates every read from every write.
//!
//! # Bits
//! Every float operation is one of the unfused kernels' `#[inline(always)]` bodies on the same
//! operands in the same order (conv chain: GDN_CONV_CHAIN's; products: `thread_partials_of` /
//! the pair's butterflies; gate path: the unary and binary `apply`; GDN: `token_step`'s
//! operations through `token_step_group`, the columns interleaved, and the warp sums through
//! `warp_sum_each`, each value's butterfly unchanged). Copies move bit patterns.

use crate::abi::{GDN_LAYER_STEP_COLS, GDN_LAYER_STEP_GROUPS_PER_HEAD, GDN_LAYER_STEP_WARPS, GdnLayerStepParams};
use crate::device::grid::{grid_barrier, grid_target};
use crate::device::thread::{block_idx_x, grid_dim_x, sync_threads, thread_idx_x};
use crate::device::trap;
use crate::gated_delta_net::{GroupAt, prefetch_group_state, run_group_at};
use crate::gdn_conv_chain::gdn_conv_chain_tile;
use crate::mmvf::{Accumulation, Bf16, F16F32, F16Half, F32, pair_gate_row_halves};

/// # Safety
/// See the module docs: the host validated the three parts (each as its own op would), their
/// links and disjointness; the grid is resident at once (cooperative launch) with block
/// (128, 1, 1), the dynamic shared memory is `gdn_layer_step_shared_bytes(D_CONV, n_tokens)`,
/// `p.barrier` is the launch's own barrier state with `done` = `arrived`, and the first-phase
/// items plus gridDim.x and H_v·32 plus 4·gridDim.x fit in u32.
#[inline(always)]
unsafe fn gdn_layer_step<A: Accumulation, const D_CONV: usize>(p: &GdnLayerStepParams) {
    let (block, grid) = (block_idx_x(), grid_dim_x());
    let tid = thread_idx_x();
    let (warp, lane) = (tid / 32, tid % 32);
    // Phase 2's work: H_v·32 column groups, one per warp, warps `block·4 + warp` of the grid.
    let gdn_items = p.n_heads * GDN_LAYER_STEP_GROUPS_PER_HEAD;
    let (first_group, warps) = (block * GDN_LAYER_STEP_WARPS + warp, grid * GDN_LAYER_STEP_WARPS);
    let group_at = |item: u32| GroupAt {
        head: item / GDN_LAYER_STEP_GROUPS_PER_HEAD,
        seq: 0,
        group: item % GDN_LAYER_STEP_GROUPS_PER_HEAD,
        lane,
    };
    let (source_rows, source_rows_stride) = (p.gdn.source_rows as usize as *const i32, p.gdn.source_rows_stride as usize);
    let barrier = p.barrier as usize as *mut u64;
    // SAFETY: the launch's own barrier state (host), read before this block's arrival.
    let target = unsafe { grid_target(barrier, grid) };
    // [speed] Ask L2 for this warp's first column group's initial state now: phase 1 does not
    // touch the ssm cache, so the lines arrive while it runs (hints only).
    if first_group < gdn_items {
        // SAFETY: a column group of the validated grid (host); hints only.
        unsafe { prefetch_group_state(&p.gdn.gdn, source_rows, source_rows_stride, group_at(first_group)) };
    }
    // ---- Phase 1: the mat-vec rows, then the conv-chain tiles. ----
    // Row items: (column group, row, product), the product fastest.
    let row_items = 2 * p.n_heads;
    let pair_items = row_items * p.n_tokens.div_ceil(GDN_LAYER_STEP_COLS as u32);
    let items = pair_items + p.n_chain_tiles;
    let mut item = block;
    while item < items {
        // SAFETY: `item` is block-uniform, so every thread reaches the barrier; the previous
        // item's shared-memory accesses end here.
        unsafe { sync_threads() };
        if item < pair_items {
            // row_items ≥ 2 here (item < pair_items); `checked_*` keeps core's divide-by-zero
            // panic path out of the PTX, and a violated contract aborts the launch.
            let (Some(group), Some(rem)) = (item.checked_div(row_items), item.checked_rem(row_items)) else { trap() };
            // SAFETY: row rem / 2 < H_v of product rem mod 2, first column 2·group < n_t (host:
            // both products valid for n_t columns); all 128 threads call it.
            unsafe {
                pair_gate_row_halves::<A>(
                    &p.gate,
                    rem % 2,
                    (rem / 2) as usize,
                    group as usize * GDN_LAYER_STEP_COLS,
                    p.n_tokens as usize,
                    p.pair_block,
                )
            };
        } else {
            // SAFETY: tile < C / 128 (host); all 128 threads call it; the shared memory is the
            // chain's layout for (D_CONV, n_t).
            unsafe { gdn_conv_chain_tile::<D_CONV>(&p.chain, (item - pair_items) as usize) };
        }
        item += grid;
    }
    // ---- Every phase-1 write before every phase-2 read. ----
    // SAFETY: every thread of every block calls it once (no early exit above); the grid is
    // co-resident and `barrier` is this launch's (host).
    unsafe { grid_barrier(barrier, target, block) };
    // ---- Phase 2: GATED_DELTA_NET's column groups, one warp each. ----
    let mut item = first_group;
    while item < gdn_items {
        // SAFETY: head < H_v, sequence 0 of the one the host validated, group < D/4, every lane
        // of the warp here (the loop is warp-uniform); the token inputs were written before the
        // grid barrier and nothing writes them in phase 2 (host: disjoint from `out` and the
        // states); each group is this warp's alone.
        unsafe { run_group_at(&p.gdn.gdn, source_rows, source_rows_stride, group_at(item)) };
        item += warps;
    }
}

macro_rules! gdn_layer_step_entries {
    ($($name:ident = $acc:ty, $kind:tt, $d:tt;)*) => {$(
        /// Entry point; see the module docs.
        ///
        /// # Safety
        /// See the module docs: the host validates every part, link and overlap, and launches a
        /// co-resident (cooperative) grid.
        #[unsafe(export_name = crate::abi::entry_name!(gdn_layer_step, $kind, $d))]
        pub unsafe extern "ptx-kernel" fn $name(p: GdnLayerStepParams) {
            // SAFETY: forwarded from the launch contract above.
            unsafe { gdn_layer_step::<$acc, $d>(&p) }
        }
    )*};
}

gdn_layer_step_entries! {
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
