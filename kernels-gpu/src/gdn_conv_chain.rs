//! GDN_CONV_CHAIN — the conv chain of one GDN layer step in one kernel (the reference PR's
//! `ssm_conv_gdn_fused_f32`), bit-identical to the five unfused kernels it replaces:
//! [`get_rows`](crate::get_rows) of the conv state, [`concat`](crate::concat) with the
//! transposed projection, the snapshot [`cpy`](crate::cpy) rows (CPY / CPY_SNAPSHOTS),
//! [`ssm_conv`](crate::ssm_conv) + SiLU, and [`l2_norm`](crate::l2_norm) of the q and k heads
//! (spec §1.3 C2–C5, W1/W2, V1–V2, N1).
//!
//! # Thread mapping
//! Block of [`GDN_CONV_CHAIN_BLOCK`](crate::abi::GDN_CONV_CHAIN_BLOCK) = 128 threads, grid
//! (C/128, n_s, 1). Block (bx, s) owns channels `c0 = bx·128 … c0+127` of sequence s (its
//! source row `source_row[s]`, its tokens, its rows `rows[i] + s`); thread `tid` owns channel
//! `c0 + tid` for the conv. Phases:
//! 1. **Read everything** (GET_ROWS + CONCAT): the block's slice of the source cache row —
//!    channels c0 … c0+127 are the 128·(d_conv−1) contiguous floats at `c0·(d_conv−1)` — is read
//!    coalesced (thread `tid` reads floats `tid, tid+128, …`) and each float is put at its
//!    CONCAT place in a shared-memory `conv_input` tile `[128 channels][stride]`
//!    (column jj < d_conv−1: old state slot jj). Each thread reads its channel's n_t tokens from
//!    qkv (contiguous across threads per token) into columns d_conv−1+t of its tile row, and its
//!    d_conv weights into registers. Barrier.
//! 2. **Snapshot rows** (CPY / CPY_SNAPSHOTS): for every row i, window(`offsets[i]`) of the
//!    tile goes to the block's slice of cache row `rows[i]`: float `f = cl·(d_conv−1) + jj` of
//!    the slice ← tile[cl][offset + jj] — `cpy::copy_window` for every channel cl, with threads
//!    mapped over the slice's floats instead of over channels so that the stores coalesce. Rows
//!    go in groups of 4 (all shared loads of a group, then its stores); done before the conv so
//!    that the stores drain while it computes.
//! 3. **Conv + SiLU** (SSM_CONV): each thread convolves its channel's row of the tile (old state
//!    from the tile, tokens from its registers) and calls the same [`conv_output`] per token as
//!    `ssm_conv` (fma from +0 over columns t … t+d_conv−1, `+ 0` for the absent bias, SiLU),
//!    four tokens at a time; writes `conv_out` and stages the outputs in shared memory.
//! 4. Barrier; **L2_NORM** of the q/k heads inside the block (blocks of v channels stop before
//!    the barrier): one warp per (token, head), the same [`lane_sum_sq_with`] partials (lane l:
//!    fma over columns l, l+32, … from +0), the same butterfly and scale ([`row_scale`]) and the
//!    same `scale · x` ([`scale_row_with`]) as `l2_norm_f32`, reading the staged outputs.
//!
//! # Aliasing
//! A snapshot row may be the source row *of the same sequence*, and `conv_out` may be `qkv`
//! element for element. Both are safe because every global read of a block happens in phase 1,
//! every global write after the barrier that ends it, and a block reads and writes only its own
//! channels of its own sequence: its slice of the cache rows (floats c0·(d_conv−1) …
//! (c0+128)·(d_conv−1)), its qkv/conv_out channels, and its q/k heads. The host refuses every
//! other overlap (outputs with each other, with the weights, the cache with qkv and conv_out,
//! rows written twice — by two slots or two sequences — and a sequence's source row that another
//! sequence writes: blocks of different sequences run at the same time, so that read would race
//! with the other sequence's write; the unfused GET_ROWS reads every source row first).
//!
//! # Bits
//! Copies move f32 bit patterns through loads and stores only (no arithmetic: NaN payloads and
//! subnormals survive). The arithmetic is the unfused kernels' own `#[inline(always)]` bodies.

use crate::abi::{
    COMMIT_LOG_K, COMMIT_LOG_QKV, COMMIT_LOG_V, GDN_CONV_CHAIN_BLOCK, GDN_CONV_CHAIN_MAX_ROWS, GDN_CONV_CHAIN_MAX_TOKENS,
    GdnConvChainCommitParams, GdnConvChainParams, div_or_zero, gdn_conv_chain_tile_stride, rem_or_zero,
};
use crate::device::grid::allow_dependent_launch;
use crate::device::shared;
use crate::device::thread::{block_idx_x, block_idx_y, sync_threads, thread_idx_x};
use crate::l2_norm::{lane_sum_sq_with, row_scale, scale_row_with};
use crate::ssm_conv::conv_output;

const BLOCK: usize = GDN_CONV_CHAIN_BLOCK as usize;
const WARPS: u32 = GDN_CONV_CHAIN_BLOCK / 32;

/// Shared-window address of f32 number `i` from `base`.
#[inline(always)]
fn at(base: u32, i: usize) -> u32 {
    base + 4 * i as u32
}

/// Rows written per group: the group's shared loads are all issued before its global stores
/// (a generic store may not be overtaken by a later shared load).
const ROW_GROUP: usize = 4;

/// Phase 2: window(offset) of the tile into the block's slice of a cache row.
struct RowWriter {
    cache: *mut f32,
    cache_row: usize,
    slice_off: usize,
    tile: u32,
    /// Tile position (in floats) of slice float k·128 + tid, before adding the window offset.
    tile_at: [usize; 4],
    state_len: usize,
    tid: usize,
}

impl RowWriter {
    /// The block's writer of its slice (channels `c0` …) of any cache row, from the tile at
    /// `tile`: thread tid stores slice floats f = k·128 + tid (channel f / state_len, slot
    /// f % state_len).
    #[inline(always)]
    fn new<const D_CONV: usize>(p: &GdnConvChainParams, c0: usize, tile: u32, stride: usize) -> RowWriter {
        let state_len = D_CONV - 1;
        let tid = thread_idx_x() as usize;
        let mut tile_at = [0usize; 4];
        let mut k = 0;
        while k < state_len {
            tile_at[k] = old_slot::<D_CONV>(k, tid, stride);
            k += 1;
        }
        RowWriter { cache: p.cache as *mut f32, cache_row: p.cache_row as usize, slice_off: c0 * state_len, tile, tile_at, state_len, tid }
    }

    /// Writes one row `(row, offset)`: [`RowWriter::write`]'s loads and stores for one row.
    ///
    /// # Safety
    /// As [`RowWriter::write`].
    #[inline(always)]
    unsafe fn write_one(&self, (row, offset): (usize, usize)) {
        let mut v = [0.0f32; 4];
        let mut k = 0;
        while k < self.state_len {
            // SAFETY: as in `write`.
            v[k] = unsafe { shared::load_f32(at(self.tile, self.tile_at[k] + offset)) };
            k += 1;
        }
        // SAFETY: forwarded to the caller; the slice lies inside the row (channels < C).
        let dst = unsafe { self.cache.add(row * self.cache_row + self.slice_off) };
        let mut k = 0;
        while k < self.state_len {
            unsafe { *dst.add(k * BLOCK + self.tid) = v[k] };
            k += 1;
        }
    }

    /// Writes a group of rows `(row, offset)`.
    ///
    /// # Safety
    /// Every row must be a cache row the host validated, every offset ≤ n_t, and the tile
    /// complete (after phase 1's barrier).
    #[inline(always)]
    unsafe fn write(&self, group: [(usize, usize); ROW_GROUP]) {
        let mut v = [[0.0f32; 4]; ROW_GROUP];
        let mut r = 0;
        while r < ROW_GROUP {
            let mut k = 0;
            while k < self.state_len {
                // SAFETY: tile_at[k] + offset ≤ 127·stride + (d_conv − 2) + n_t < 128·stride.
                v[r][k] = unsafe { shared::load_f32(at(self.tile, self.tile_at[k] + group[r].1)) };
                k += 1;
            }
            r += 1;
        }
        let mut r = 0;
        while r < ROW_GROUP {
            // SAFETY: forwarded to the caller; the slice lies inside the row (channels < C).
            let dst = unsafe { self.cache.add(group[r].0 * self.cache_row + self.slice_off) };
            let mut k = 0;
            while k < self.state_len {
                unsafe { *dst.add(k * BLOCK + self.tid) = v[r][k] };
                k += 1;
            }
            r += 1;
        }
    }
}

/// Tokens per conv chunk (phase 3).
const CHUNK: usize = 4;

/// The conv outputs of tokens `t0 … t0+3` from a channel's columns (`cols[col]`: the old state,
/// then the tokens): [`conv_output`] over columns `t … t+d_conv−1` for each token t, exactly as
/// `ssm_conv` computes token t. Independent chains, so they overlap.
#[inline(always)]
fn conv_chunk<const D_CONV: usize>(cols: &[f32; 4 + GDN_CONV_CHAIN_MAX_TOKENS], t0: usize, w: &[f32; D_CONV]) -> [f32; CHUNK] {
    let mut y = [0.0f32; CHUNK];
    let mut i = 0;
    while i < CHUNK {
        let mut window = [0.0f32; D_CONV];
        let mut j = 0;
        while j < D_CONV {
            window[j] = cols[t0 + i + j];
            j += 1;
        }
        y[i] = conv_output::<D_CONV>(&window, w, 0.0, true);
        i += 1;
    }
    y
}

/// What a tile reads from global memory for one sequence — phase 1's loads, issued before any
/// shared store (a generic load may not move above a shared store, so the order is kept by
/// hand): the channel's n_t ≤ `MAX_T` tokens (+0 past n_t) and the block's slice of the source
/// row (slice float k·128 + tid for k < d_conv − 1).
#[derive(Clone, Copy)]
pub(crate) struct TileInputs<const MAX_T: usize> {
    x: [f32; MAX_T],
    old: [f32; 4],
}

/// The d_conv weights of this thread's channel in tile `tile` (the same for every sequence).
///
/// # Safety
/// As [`gdn_conv_chain_tile`] (`tile` < C/128 of a validated op).
#[inline(always)]
pub(crate) unsafe fn tile_weights<const D_CONV: usize>(p: &GdnConvChainParams, tile: usize) -> [f32; D_CONV] {
    let c = tile * BLOCK + thread_idx_x() as usize;
    // SAFETY: channel c < C of the validated weight view, taps < d_conv.
    let w_row = unsafe { (p.weight as *const f32).add(c * p.w_channel as usize) };
    let mut w = [0.0f32; D_CONV];
    let mut j = 0;
    while j < D_CONV {
        w[j] = unsafe { *w_row.add(j) };
        j += 1;
    }
    w
}

/// Sequence `seq`'s conv-cache source row (the index GET_ROWS reads).
///
/// # Safety
/// As [`gdn_conv_chain_tile`] (`seq` < n_s of a validated op).
#[inline(always)]
pub(crate) unsafe fn tile_source_row(p: &GdnConvChainParams, seq: usize) -> usize {
    // SAFETY: the host validated the source index of every sequence < n_s (non-negative, a row
    // of the cache).
    unsafe { *(p.source_row as *const i32).add(seq * p.source_row_seq as usize) as usize }
}

/// Phase 1's global loads of tile `tile` for sequence `seq` ([`TileInputs`]): its tokens from
/// qkv (contiguous across the block's threads for each t; `MAX_T` token slots) and, GET_ROWS of
/// the sequence's source row `src_row` ([`tile_source_row`]), the block's slice of it, coalesced.
///
/// # Safety
/// As [`gdn_conv_chain_tile`] (`tile` < C/128, `seq` < n_s of a validated op, `src_row` its
/// source row, n_t ≤ `MAX_T`).
#[inline(always)]
pub(crate) unsafe fn tile_loads<const D_CONV: usize, const MAX_T: usize>(
    p: &GdnConvChainParams,
    tile: usize,
    seq: usize,
    src_row: usize,
) -> TileInputs<MAX_T> {
    let state_len = D_CONV - 1;
    let n_t = p.n_tokens as usize;
    let tid = thread_idx_x() as usize;
    let c0 = tile * BLOCK;
    // SAFETY (all loads): the host validated the source index of every sequence < n_s, and the
    // views for channels < C, n_t tokens and n_s sequences.
    let qkv = unsafe { (p.qkv as *const f32).add(seq * p.qkv_seq as usize + c0 + tid) };
    let mut x = [0.0f32; MAX_T];
    let mut t = 0;
    while t < MAX_T {
        if t < n_t {
            x[t] = unsafe { *qkv.add(t * p.qkv_token as usize) };
        }
        t += 1;
    }
    let src = unsafe { (p.cache as *const f32).add(src_row * p.cache_row as usize + c0 * state_len) };
    let mut old = [0.0f32; 4];
    let mut k = 0;
    while k < state_len {
        old[k] = unsafe { *src.add(k * BLOCK + tid) };
        k += 1;
    }
    TileInputs { x, old }
}

/// The conv chain of channel tile `tile` (channels `tile·128 … tile·128+127`) of sequence `seq`,
/// run by the calling block: phases 1–4 of the module docs, every loop over the tokens running
/// through `MAX_T` ≥ n_t slots. GDN_CONV_CHAIN runs tile `%ctaid.x` of sequence `%ctaid.y` with
/// 4 slots for n_t ≤ 2, else 16 ([`gdn_conv_chain_block`]); [layer-step]
/// GDN_LAYER_STEP runs tiles as work items of its first phase (same body, 16 slots).
///
/// # Safety
/// See the module docs: the host validated every view and index for C/128 tiles (`tile` one of
/// them) and n_s sequences (`seq` one of them); the block has 128 threads, all of which call
/// this together, and its dynamic shared memory holds at least
/// `gdn_conv_chain_shared_bytes(D_CONV, n_tokens)` that no other code accesses until every
/// thread has returned (a caller running several tiles puts a block barrier between them);
/// n_t ≤ `MAX_T` ≤ 16.
#[inline(always)]
pub(crate) unsafe fn gdn_conv_chain_tile<const D_CONV: usize, const MAX_T: usize>(p: &GdnConvChainParams, tile: usize, seq: usize) {
    // SAFETY: forwarded to the caller.
    unsafe {
        let w = tile_weights::<D_CONV>(p, tile);
        let inputs = tile_loads::<D_CONV, MAX_T>(p, tile, seq, tile_source_row(p, seq));
        tile_compute::<D_CONV, MAX_T>(p, tile, seq, inputs, &w, shared::base());
    }
}

/// GDN_CONV_CHAIN's block (tile `%ctaid.x`, sequence `%ctaid.y`) with `MAX_T` token slots:
/// the `_t4` entries and the plain one (any n_t ≤ 16), which the host picks by n_t
/// (`abi::gdn_conv_chain_entry`: `_t4` for n_t ≤ 2, where it measured faster). [speed] At 16
/// slots whatever n_t, a short step's block spent most of its issue on the empty slots'
/// addresses and predicates (H100 ncu, n_s = 64, T = 1: 548 instructions a warp, most of them
/// integer and predicate work, 0.84 issued a scheduler). Every entry computes the same values
/// with the same operations; only the unrolled bound differs, and a one-row step's row is
/// stored once instead of four times (`tile_row_alone`), so the bits do not.
///
/// # Safety
/// As [`gdn_conv_chain_tile`] for this block, with n_t ≤ `MAX_T`.
#[inline(always)]
unsafe fn gdn_conv_chain_block<const D_CONV: usize, const MAX_T: usize>(p: &GdnConvChainParams) {
    // SAFETY: forwarded from the contract above.
    unsafe { gdn_conv_chain_tile::<D_CONV, MAX_T>(p, block_idx_x() as usize, block_idx_y() as usize) }
}

/// [seq-batch] Tile `tile` of sequences `first_seq … first_seq + n_seqs − 1`, side by side: in
/// rounds of up to `round_seqs` sequences, each sequence its own tile and staging rows in the
/// shared memory at `area`, every phase run for all of the round's sequences before the next
/// phase (a block barrier between rounds). Each sequence's values are exactly
/// [`gdn_conv_chain_tile`]'s: the same copies and the same `#[inline(always)]` bodies for its
/// snapshot rows, its conv and its L2 norms; only the order of independent work changes, and no
/// float operation combines two sequences. Phase 1's reads are `cp.async` copies into the tiles
/// (bit moves, no registers held), so that one memory round trip serves the round's sequences
/// instead of one a sequence (each sequence's source row from `source_row`, the batched layer
/// step's table in shared memory). [speed] A conv item's phases are short chains of dependent
/// instructions (0.2–0.5 µs each on the H200 under per-phase timestamps, ≈ 2 µs a sequence
/// one after the other): side by side, their latencies overlap across sequences, and the L2 norms
/// of a round share out across the block's four warps.
///
/// Every global read of a round happens before the barrier that ends its copies, every global
/// write after it, as in one sequence's tile; across sequences the host proves every read row
/// and token disjoint from the other sequences' writes (so the order between rounds is free).
///
/// # Safety
/// As [`gdn_conv_chain_tile`] for every one of the sequences (`n_seqs` ≥ 1), with the shared
/// memory at `area` instead of the dynamic shared memory's start: it holds `round_seqs` ≥ 1
/// times `gdn_conv_chain_shared_bytes(D_CONV, n_tokens)` bytes that no other code accesses
/// (no copy in flight into it either) between the block barrier before this call and its
/// return; `source_row(s)` is [`tile_source_row`]`(p, s)` for each of the sequences. The
/// calling thread's older `cp.async` groups complete here too (`cp.async.wait_all`).
#[inline(always)]
pub(crate) unsafe fn gdn_conv_chain_tiles_side_by_side<const D_CONV: usize>(
    p: &GdnConvChainParams,
    tile: usize,
    first_seq: usize,
    n_seqs: usize,
    area: u32,
    round_seqs: usize,
    source_row: impl Fn(usize) -> usize,
) {
    let n_t = p.n_tokens as usize;
    let tid = thread_idx_x() as usize;
    let c0 = tile * BLOCK;
    let stride = gdn_conv_chain_tile_stride(D_CONV, n_t);
    let tile_floats = BLOCK * stride;
    let qk = holds_qk(p, c0);
    // SAFETY (the whole body): forwarded to the caller — every sequence below first_seq + n_seqs
    // is one of the op's, the whole block runs the same (block-uniform) loops, and every shared
    // access stays inside the round's tiles (g·128·stride floats from `area`) and staging rows
    // (g·n_t·128 floats after them), g ≤ round_seqs.
    unsafe {
        let w = tile_weights::<D_CONV>(p, tile);
        let mut done = 0;
        while done < n_seqs {
            let g = if n_seqs - done < round_seqs { n_seqs - done } else { round_seqs };
            if done > 0 {
                // The previous round's shared reads end before this round's copies land.
                sync_threads();
            }
            // ---- Phase 1: GET_ROWS + CONCAT of every sequence of the round, as copies. ----
            let mut i = 0;
            while i < g {
                let seq = first_seq + done + i;
                tile_copies::<D_CONV>(p, tile, seq, source_row(seq), at(area, i * tile_floats), stride);
                i += 1;
            }
            // This thread's copies have landed; after the barrier, every thread's.
            shared::wait_async_copies();
            sync_threads();
            // ---- Phases 2 and 3: each sequence's snapshot rows, then its conv + SiLU. ----
            let staging = at(area, g * tile_floats);
            let mut i = 0;
            while i < g {
                let seq = first_seq + done + i;
                let tile_i = at(area, i * tile_floats);
                tile_rows::<D_CONV>(p, c0, seq, tile_i, stride);
                // The channel's columns: the old state, then its tokens (+0 past n_t), from its
                // tile row.
                let my_row = at(tile_i, tid * stride);
                let mut cols = [0.0f32; 4 + GDN_CONV_CHAIN_MAX_TOKENS];
                let mut j = 0;
                while j < D_CONV - 1 + GDN_CONV_CHAIN_MAX_TOKENS {
                    if j < D_CONV - 1 + n_t {
                        cols[j] = shared::load_f32(at(my_row, j));
                    }
                    j += 1;
                }
                tile_conv::<D_CONV>(p, c0 + tid, seq, &cols, &w, at(staging, i * n_t * BLOCK));
                i += 1;
            }
            // ---- Phase 4: the L2 norms of the round's q/k heads (staging row r = i·n_t + t). ----
            if qk {
                // SAFETY: block-uniform condition; every thread of a q/k block reaches it.
                sync_threads();
                let base_seq = first_seq + done;
                let seq_token = |r: u32| ((base_seq + div_or_zero(r, n_t as u32) as usize), rem_or_zero(r, n_t as u32) as usize);
                tile_norms(p, c0, g * n_t, staging, seq_token);
            }
            done += g;
        }
    }
}

/// [seq-batch] Phase 1 of tile `tile` of sequence `seq` as `cp.async` copies into the tile at
/// `tile_at` (the same places [`tile_compute`]'s CONCAT stores to): its tokens from qkv into
/// columns d_conv − 1 + t of the thread's tile row, and GET_ROWS of the source row `src_row`,
/// the block's slice of it, coalesced. Bit moves only.
///
/// # Safety
/// As [`tile_loads`]; the tile (128·`stride` floats at `tile_at`) is this call's until the
/// copies have landed (`cp.async.wait_all`) and a block barrier.
#[inline(always)]
unsafe fn tile_copies<const D_CONV: usize>(p: &GdnConvChainParams, tile: usize, seq: usize, src_row: usize, tile_at: u32, stride: usize) {
    let state_len = D_CONV - 1;
    let n_t = p.n_tokens as usize;
    let tid = thread_idx_x() as usize;
    let c0 = tile * BLOCK;
    let my_row = at(tile_at, tid * stride);
    // SAFETY (all copies): the host validated the source index of every sequence < n_s, and the
    // views for channels < C, n_t tokens and n_s sequences; the shared places lie inside the
    // tile (as in `tile_compute`).
    let qkv = unsafe { (p.qkv as *const u32).add(seq * p.qkv_seq as usize + c0 + tid) };
    let mut t = 0;
    while t < GDN_CONV_CHAIN_MAX_TOKENS {
        if t < n_t {
            unsafe { shared::copy_async_4(at(my_row, state_len + t), qkv.add(t * p.qkv_token as usize)) };
        }
        t += 1;
    }
    let src = unsafe { (p.cache as *const u32).add(src_row * p.cache_row as usize + c0 * state_len) };
    let mut k = 0;
    while k < state_len {
        unsafe { shared::copy_async_4(at(tile_at, old_slot::<D_CONV>(k, tid, stride)), src.add(k * BLOCK + tid)) };
        k += 1;
    }
}

/// Whether the tile from channel `c0` holds q/k channels (the first 2·H_k·D), whose heads get
/// the L2 norms; a tile of v channels only skips phase 4.
#[inline(always)]
fn holds_qk(p: &GdnConvChainParams, c0: usize) -> bool {
    c0 < 2 * p.n_k_heads as usize * p.head_dim as usize
}

/// The tile position (in floats) of the block's slice float k·128 + tid of a cache row: channel
/// f / (d_conv − 1), slot f % (d_conv − 1) (CONCAT's place for it, and the snapshot rows' source).
#[inline(always)]
fn old_slot<const D_CONV: usize>(k: usize, tid: usize, stride: usize) -> usize {
    let f = k * BLOCK + tid;
    (f / (D_CONV - 1)) * stride + f % (D_CONV - 1)
}

/// Phases 1 (the shared-memory part) to 4 of tile `tile` of sequence `seq`, from its loaded
/// [`TileInputs`] and this thread's channel weights, in the shared memory at `tile_base`.
///
/// # Safety
/// As [`gdn_conv_chain_tile`]; `inputs` are [`tile_loads`]`(p, tile, seq)` and `w`
/// [`tile_weights`]`(p, tile)`; no thread of the block reads or writes the shared area between
/// the block barrier before this call and its return; n_t ≤ `MAX_T`.
#[inline(always)]
unsafe fn tile_compute<const D_CONV: usize, const MAX_T: usize>(
    p: &GdnConvChainParams,
    tile: usize,
    seq: usize,
    inputs: TileInputs<MAX_T>,
    w: &[f32; D_CONV],
    tile_base: u32,
) {
    const { assert!(MAX_T <= GDN_CONV_CHAIN_MAX_TOKENS, "the columns hold up to 16 tokens") };
    const { assert!(D_CONV >= 2 && D_CONV <= 5, "the state arrays hold up to 4 columns") };
    let state_len = D_CONV - 1;
    let n_t = p.n_tokens as usize;
    let tid = thread_idx_x() as usize;
    let c0 = tile * BLOCK;
    let stride = gdn_conv_chain_tile_stride(D_CONV, n_t);
    let tile = tile_base;
    let staged = at(tile, BLOCK * stride);
    let my_row = at(tile, tid * stride);
    let TileInputs { x, old } = inputs;
    // SAFETY (all accesses below): shared accesses stay inside the tile (128·stride floats) and
    // the staging area (n_t·128 floats) the launch allocated; the global ones are the callees'.

    // ---- Phase 1 (end): CONCAT into the tile: slice float f = cl·state_len + jj → tile[cl][jj];
    // token t of this thread's channel → tile[tid][state_len + t]. ----
    let mut k = 0;
    while k < state_len {
        unsafe { shared::store_f32(at(tile, old_slot::<D_CONV>(k, tid, stride)), old[k]) };
        k += 1;
    }
    let mut t = 0;
    while t < MAX_T {
        if t < n_t {
            unsafe { shared::store_f32(at(my_row, state_len + t), x[t]) };
        }
        t += 1;
    }
    // SAFETY: every thread of the block reaches this barrier (no early exit above).
    unsafe { sync_threads() };

    // ---- Phase 2: the snapshot rows (first, so that the stores drain while the conv computes). ----
    // SAFETY: the tile is complete (barrier above). [speed] A step of one row (decode, R = 0)
    // writes it alone in the short-step arms of GDN_CONV_CHAIN (`tile_rows` writes groups of
    // four, repeating it); the 16-slot body keeps the layer step's proven machine code.
    unsafe {
        if MAX_T < GDN_CONV_CHAIN_MAX_TOKENS && p.n_rows == 1 {
            tile_row_alone::<D_CONV>(p, c0, seq, tile, stride)
        } else {
            tile_rows::<D_CONV>(p, c0, seq, tile, stride)
        }
    };

    // ---- Phase 3: SSM_CONV + SiLU of this thread's tile row. The row's columns come from
    // registers (the old state from the tile, the tokens still held from phase 1). ----
    let mut cols = [0.0f32; 4 + GDN_CONV_CHAIN_MAX_TOKENS];
    let mut j = 0;
    while j < state_len {
        cols[j] = unsafe { shared::load_f32(at(my_row, j)) };
        j += 1;
    }
    // Columns past MAX_T stay +0 (n_t ≤ MAX_T).
    let mut t = 0;
    while t < MAX_T {
        cols[state_len + t] = x[t];
        t += 1;
    }
    // SAFETY: channel c0 + tid < C, sequence seq < n_s; `staged` holds n_t·128 floats.
    unsafe { tile_conv::<D_CONV>(p, c0 + tid, seq, &cols, w, staged) };

    // ---- Phase 4: L2_NORM of the q/k heads of this block. ----
    if !holds_qk(p, c0) {
        return; // v channels only (block-uniform: the whole block leaves, no barrier follows).
    }
    // SAFETY: block-uniform condition above; every thread of a q/k block reaches the barrier,
    // after which the staged outputs are complete.
    unsafe {
        sync_threads();
        tile_norms(p, c0, n_t, staged, |r| (seq, r as usize));
    }
}

/// Phases 1 (the shared-memory part) to 4 of tile `tile` of sequence `seq`, from this thread's
/// tokens `x`, its channel weights and `store_old`, which stores the calling thread's part of the
/// tile's old-state columns (before the barrier that completes the tile), in the shared memory
/// at `tile_base`.
///
/// # Safety
/// As [`tile_compute`], with `x` this thread's n_t ≤ `MAX_T` tokens (+0 past n_t); `store_old`
/// writes only the tile's old-state columns, every one of them by one thread of the block.
///
/// \[replay\] The commit entries' copy of [`tile_compute`]'s phases (the same statements in the
/// same order): one body for both changed the SASS of the layer-step entries that embed
/// `tile_compute` (`scripts/same-sass.sh`), so the proven entries keep theirs.
#[inline(always)]
unsafe fn tile_compute_with<const D_CONV: usize, const MAX_T: usize>(
    p: &GdnConvChainParams,
    tile: usize,
    seq: usize,
    x: [f32; MAX_T],
    w: &[f32; D_CONV],
    tile_base: u32,
    store_old: impl FnOnce(u32, u32, usize),
    log_conv: impl FnOnce(u32),
    k_log: impl Fn(usize, usize, usize) -> Option<*mut f32>,
) {
    const { assert!(MAX_T <= GDN_CONV_CHAIN_MAX_TOKENS, "the columns hold up to 16 tokens") };
    const { assert!(D_CONV >= 2 && D_CONV <= 5, "the state arrays hold up to 4 columns") };
    let state_len = D_CONV - 1;
    let n_t = p.n_tokens as usize;
    let tid = thread_idx_x() as usize;
    let c0 = tile * BLOCK;
    let stride = gdn_conv_chain_tile_stride(D_CONV, n_t);
    let tile = tile_base;
    let staged = at(tile, BLOCK * stride);
    let my_row = at(tile, tid * stride);
    // SAFETY (all accesses below): shared accesses stay inside the tile (128·stride floats) and
    // the staging area (n_t·128 floats) the launch allocated; the global ones are the callees'.

    // ---- Phase 1 (end): CONCAT into the tile: the old-state columns (`store_old`: the tile,
    // this thread's row, the stride); token t of this thread's channel → tile[tid][state_len + t]. ----
    store_old(tile, my_row, stride);
    let mut t = 0;
    while t < MAX_T {
        if t < n_t {
            unsafe { shared::store_f32(at(my_row, state_len + t), x[t]) };
        }
        t += 1;
    }
    // SAFETY: every thread of the block reaches this barrier (no early exit above).
    unsafe { sync_threads() };

    // ---- Phase 2: the snapshot rows (first, so that the stores drain while the conv computes). ----
    // SAFETY: the tile is complete (barrier above).
    unsafe { tile_rows::<D_CONV>(p, c0, seq, tile, stride) };

    // ---- Phase 3: SSM_CONV + SiLU of this thread's tile row. The row's columns come from
    // registers (the old state from the tile, the tokens still held from phase 1). ----
    let mut cols = [0.0f32; 4 + GDN_CONV_CHAIN_MAX_TOKENS];
    let mut j = 0;
    while j < state_len {
        cols[j] = unsafe { shared::load_f32(at(my_row, j)) };
        j += 1;
    }
    // Columns past MAX_T stay +0 (n_t ≤ MAX_T).
    let mut t = 0;
    while t < MAX_T {
        cols[state_len + t] = x[t];
        t += 1;
    }
    // SAFETY: channel c0 + tid < C, sequence seq < n_s; `staged` holds n_t·128 floats.
    unsafe { tile_conv::<D_CONV>(p, c0 + tid, seq, &cols, w, staged) };
    // [replay] This thread's staged outputs (its own stores) to the v log.
    log_conv(staged);

    // ---- Phase 4: L2_NORM of the q/k heads of this block. ----
    if !holds_qk(p, c0) {
        return; // v channels only (block-uniform: the whole block leaves, no barrier follows).
    }
    // SAFETY: block-uniform condition above; every thread of a q/k block reaches the barrier,
    // after which the staged outputs are complete. [replay] Each k head's row goes to the k log
    // as the norm computes it (`k_log`: the same value, a second store).
    unsafe {
        sync_threads();
        tile_norms_copying_k(p, c0, n_t, staged, |r| (seq, r as usize), k_log);
    }
}

/// \[replay\] The conv chain of tile `tile` of sequence `seq` with the window commit in front
/// ([`GdnConvChainCommitParams`], docs/rollback.md): this thread's channel c of the committed
/// window (row `source_row[seq]`, read per channel) and of the logged inputs gives window(a) —
/// column a + j of [committed window ; logged inputs 0 … a − 1] for j < d_conv − 1, bit moves
/// only — which goes back over the row (the commit), into the tile as the old state, and (as
/// `logs` says) the step's tokens to the log; then the chain exactly as [`gdn_conv_chain_tile`]
/// ([`tile_compute_with`]: the same barrier, rows, conv and norms), its v channels' outputs
/// copied to their log after the conv and its k heads' norms stored to theirs as they are
/// computed (bit moves). Each float of the committed row is
/// read and written by one thread, the read first; the host refuses a committed row that another
/// sequence reads or writes.
///
/// # Safety
/// As [`gdn_conv_chain_tile`] for `p.chain` (with no snapshot row), and the host validated the
/// commit: `window_rows[s]` = j·n_s + s with j ≤ T_log = `log_tokens` ≤ 16 for every sequence,
/// the log views for C channels, T_log tokens and n_s sequences (`log_out`: n_t tokens), every
/// sequence's source row its own (no other sequence's source row) and disjoint from the logs;
/// the step's n_t ≤ `MAX_T` (the token slots each loop runs through).
///
/// \[replay-step\] With `DEFER_LOGS` the step's own logs (its tokens, its v channels' outputs)
/// are not stored here: the tile returns its tokens, and [`gdn_conv_chain_commit_logs`] stores
/// both logs later — after the layer step published the tile, since nothing in that launch reads
/// them (the next step does) and a publication waits for every store before it. The k heads'
/// copy (`COMMIT_LOG_K`) stays here. Returns this thread's tokens (+0 past n_t).
#[inline(always)]
pub(crate) unsafe fn gdn_conv_chain_commit_tile<const D_CONV: usize, const MAX_T: usize, const DEFER_LOGS: bool>(
    p: &GdnConvChainCommitParams,
    tile: usize,
    seq: usize,
) -> [f32; MAX_T] {
    let chain = &p.chain;
    let state_len = D_CONV - 1;
    let n_t = chain.n_tokens as usize;
    let tid = thread_idx_x() as usize;
    let c0 = tile * BLOCK;
    let channel = c0 + tid;
    let stride = gdn_conv_chain_tile_stride(D_CONV, n_t);
    // SAFETY (the whole body): forwarded to the caller (the views and indices above).
    unsafe {
        let w = tile_weights::<D_CONV>(chain, tile);
        let src_row = tile_source_row(chain, seq);
        // a = T_log − j, j the window's row group (validated: w = j·n_s + s, j ≤ T_log).
        let window_row = *(p.window_rows as *const i32).add(seq * p.window_rows_seq as usize) as u32;
        let accepted = p.log_tokens - div_or_zero(window_row - seq as u32, chain.n_seqs);
        let qkv = (chain.qkv as *const f32).add(seq * chain.qkv_seq as usize + channel);
        let mut x = [0.0f32; MAX_T];
        let mut t = 0;
        while t < MAX_T {
            if t < n_t {
                x[t] = *qkv.add(t * chain.qkv_token as usize);
            }
            t += 1;
        }
        let row = (chain.cache as *mut f32).add(src_row * chain.cache_row as usize + channel * state_len);
        let mut old = [0.0f32; 4];
        let mut k = 0;
        while k < state_len {
            old[k] = *row.add(k);
            k += 1;
        }
        // window(a): column i = a + j of [old ; log], the log's column i − (d_conv − 1) < a.
        let log = (p.log_qkv as *const f32).add(seq * p.log_seq as usize + channel);
        let mut window = [0.0f32; 4];
        let mut j = 0;
        while j < state_len {
            let i = accepted as usize + j;
            if i >= state_len {
                window[j] = *log.add((i - state_len) * p.log_token as usize);
            } else {
                // A literal index per candidate (a runtime index would put `old` in local memory).
                let mut k = 0;
                while k < state_len {
                    if i == k {
                        window[j] = old[k];
                    }
                    k += 1;
                }
            }
            j += 1;
        }
        // The commit.
        let mut k = 0;
        while k < state_len {
            *row.add(k) = window[k];
            k += 1;
        }
        if !DEFER_LOGS && p.logs & COMMIT_LOG_QKV != 0 {
            let log_out = (p.log_out as *mut f32).add(seq * p.log_out_seq as usize + channel);
            let mut t = 0;
            while t < MAX_T {
                if t < n_t {
                    *log_out.add(t * p.log_out_token as usize) = x[t];
                }
                t += 1;
            }
        }
        // This channel's old-state columns of the tile: its own row.
        let store_old = |_tile: u32, my_row: u32, _stride: usize| {
            let mut k = 0;
            while k < D_CONV - 1 {
                shared::store_f32(at(my_row, k), window[k]);
                k += 1;
            }
        };
        // The v log: channel c ≥ 2·H_k·D is element (c − 2·H_k·D) % D of v head (c − 2·H_k·D) / D.
        let (d, qk) = (chain.head_dim as usize, 2 * chain.n_k_heads as usize * chain.head_dim as usize);
        let log_conv = |staged: u32| {
            if !DEFER_LOGS && p.logs & COMMIT_LOG_V != 0 && channel >= qk {
                let (h, i) = (div_or_zero((channel - qk) as u32, d as u32) as usize, rem_or_zero((channel - qk) as u32, d as u32) as usize);
                let dst = (p.log_v as *mut f32).add(i + h * p.log_v_head as usize + seq * p.log_v_seq as usize);
                let mut t = 0;
                while t < MAX_T {
                    if t < n_t {
                        *dst.add(t * p.log_v_token as usize) = shared::load_f32(at(staged, t * BLOCK + tid));
                    }
                    t += 1;
                }
            }
        };
        // The k log: k head h's row of token t, sequence seq (its element i at + i, as k_norm's):
        // [speed] stored beside k_norm's as the norm computes it, rather than read back from
        // k_norm after a block barrier (a global round trip before the tile's publication).
        let k_log = |h: usize, t: usize, seq: usize| {
            (p.logs & COMMIT_LOG_K != 0).then(|| {
                (p.log_k as *mut f32).wrapping_add(h * p.log_k_head as usize + t * p.log_k_token as usize + seq * p.log_k_seq as usize)
            })
        };
        tile_compute_with::<D_CONV, MAX_T>(chain, tile, seq, x, &w, shared::base(), store_old, log_conv, k_log);
        x
    }
}

/// \[replay-step\] The logs [`gdn_conv_chain_commit_tile`]`::<_, _, true>` left: this thread's
/// tokens `x` to the qkv log (`COMMIT_LOG_QKV`) and, for a v channel, its staged conv outputs to
/// the v log (`COMMIT_LOG_V`) — the same values to the same places as the tile without
/// deferral stores them, read from the same registers and this thread's own staged slots. (The
/// statements repeat the tile's in-place stores: one helper for both changed the standalone
/// commit entries' machine code, `scripts/same-sass.sh`, so the proven entries keep theirs.)
///
/// # Safety
/// As [`gdn_conv_chain_commit_tile`] for the same tile and sequence, called by the thread that
/// ran it with its returned tokens, before anything wrote the block's shared memory since (the
/// staged outputs are still in place); the logs are read by nothing before the launch ends.
#[inline(always)]
pub(crate) unsafe fn gdn_conv_chain_commit_logs<const D_CONV: usize, const MAX_T: usize>(
    p: &GdnConvChainCommitParams,
    tile: usize,
    seq: usize,
    x: [f32; MAX_T],
) {
    let chain = &p.chain;
    let n_t = chain.n_tokens as usize;
    let tid = thread_idx_x() as usize;
    let channel = tile * BLOCK + tid;
    // SAFETY (the whole body): forwarded to the caller (the validated log views).
    unsafe {
        if p.logs & COMMIT_LOG_QKV != 0 {
            let log_out = (p.log_out as *mut f32).add(seq * p.log_out_seq as usize + channel);
            let mut t = 0;
            while t < MAX_T {
                if t < n_t {
                    *log_out.add(t * p.log_out_token as usize) = x[t];
                }
                t += 1;
            }
        }
        // The staged outputs where `tile_compute_with` put them (the tile at the shared base).
        let staged = at(shared::base(), BLOCK * gdn_conv_chain_tile_stride(D_CONV, n_t));
        let (d, qk) = (chain.head_dim as usize, 2 * chain.n_k_heads as usize * chain.head_dim as usize);
        if p.logs & COMMIT_LOG_V != 0 && channel >= qk {
            let (h, i) = (div_or_zero((channel - qk) as u32, d as u32) as usize, rem_or_zero((channel - qk) as u32, d as u32) as usize);
            let dst = (p.log_v as *mut f32).add(i + h * p.log_v_head as usize + seq * p.log_v_seq as usize);
            let mut t = 0;
            while t < MAX_T {
                if t < n_t {
                    *dst.add(t * p.log_v_token as usize) = shared::load_f32(at(staged, t * BLOCK + tid));
                }
                t += 1;
            }
        }
    }
}

/// Phase 2: for every row i, window(`offsets[i]`) of the tile at `tile` goes to the block's slice
/// of cache row `rows[i] + seq` (sequence `seq`'s cell of every rollback group).
///
/// # Safety
/// As [`gdn_conv_chain_tile`] (`seq` < n_s, `c0` = 128·tile of a validated op); the tile
/// (128·`stride` floats) is complete and visible to every thread (after a block barrier).
#[inline(always)]
unsafe fn tile_rows<const D_CONV: usize>(p: &GdnConvChainParams, c0: usize, seq: usize, tile: u32, stride: usize) {
    let rows = RowWriter::new::<D_CONV>(p, c0, tile, stride);
    // Literal indices into the parameter tables (a runtime index would copy the parameter block
    // to local memory); `tests/ptx.rs` checks that these entries use no local memory. In a group
    // that reaches past n_rows, the missing rows repeat row 0 — the same values to the same
    // addresses by the same thread, so the cache ends identical — to keep the group branch-free.
    let n_rows = p.n_rows as usize;
    macro_rules! row {
        ($i:literal) => {
            if $i < n_rows {
                (p.rows[$i] as usize + seq, p.offsets[$i] as usize)
            } else {
                (p.rows[0] as usize + seq, p.offsets[0] as usize)
            }
        };
    }
    macro_rules! write_rows {
        ($($first:literal: [$($i:literal)*])*) => {$(
            if $first < n_rows {
                // SAFETY: every (row, offset) is rows[i] + seq, offsets[i] for some i < n_rows: a
                // validated row and an offset ≤ n_t; the tile is complete (caller).
                unsafe { rows.write([$(row!($i)),*]) };
            }
        )*};
    }
    write_rows!(0: [0 1 2 3] 4: [4 5 6 7] 8: [8 9 10 11] 12: [12 13 14 15]);
    const _: () = assert!(GDN_CONV_CHAIN_MAX_ROWS == 16 && ROW_GROUP == 4, "write_rows! lists 4 groups of 4 rows");
}

/// Phase 2 of a step of one row (n_rows = 1: decode, R = 0): window(`offsets[0]`) of the tile
/// to the block's slice of cache row `rows[0] + seq`, as [`tile_rows`] writes it (which writes
/// it four times, as a group of four that repeats it: the same values to the same places).
///
/// # Safety
/// As [`tile_rows`], with n_rows = 1.
#[inline(always)]
unsafe fn tile_row_alone<const D_CONV: usize>(p: &GdnConvChainParams, c0: usize, seq: usize, tile: u32, stride: usize) {
    // SAFETY: row 0 < n_rows is a validated row and offsets[0] ≤ n_t; the tile is complete
    // (caller).
    unsafe { RowWriter::new::<D_CONV>(p, c0, tile, stride).write_one((p.rows[0] as usize + seq, p.offsets[0] as usize)) };
}

/// Phase 3: SSM_CONV + SiLU of channel `c` of sequence `seq`, token by token as `ssm_conv` walks
/// a conv_input row, from the channel's columns `cols` (the old state, then the tokens, +0 past
/// n_t). Tokens run in chunks of 4, each chunk computed whole (columns past n_t hold +0, their
/// outputs are dropped) so that four conv/SiLU chains overlap; each output goes to `conv_out`
/// and to the staging row of its token (`staged` + t·128 + c % 128, for the L2 norms).
///
/// # Safety
/// As [`gdn_conv_chain_tile`] (channel `c` < C, `seq` < n_s of a validated op); `staged` holds
/// n_t·128 floats no other thread writes at its places.
#[inline(always)]
unsafe fn tile_conv<const D_CONV: usize>(
    p: &GdnConvChainParams,
    c: usize,
    seq: usize,
    cols: &[f32; 4 + GDN_CONV_CHAIN_MAX_TOKENS],
    w: &[f32; D_CONV],
    staged: u32,
) {
    let n_t = p.n_tokens as usize;
    let tid = thread_idx_x() as usize;
    // SAFETY: the validated conv_out view for channels < C, n_t tokens and n_s sequences.
    let out = unsafe { (p.conv_out as *mut f32).add(seq * p.conv_out_seq as usize + c) };
    // Literal chunk starts (a runtime index into `cols` would put it in local memory).
    macro_rules! conv_chunks {
        ($($t0:literal)*) => {$(
            if $t0 < n_t {
                let y = conv_chunk::<D_CONV>(cols, $t0, w);
                let mut i = 0;
                while i < CHUNK {
                    let t = $t0 + i;
                    if t < n_t {
                        // SAFETY: t < n_t: inside conv_out and the staging area.
                        unsafe {
                            *out.add(t * p.conv_out_token as usize) = y[i];
                            shared::store_f32(at(staged, t * BLOCK + tid), y[i]);
                        }
                    }
                    i += 1;
                }
            }
        )*};
    }
    conv_chunks!(0 4 8 12);
    const _: () = assert!(GDN_CONV_CHAIN_MAX_TOKENS == 16 && CHUNK == 4, "conv_chunks! lists 4 chunks of 4 tokens");
}

/// Phase 4: L2_NORM of the block's q/k heads over `rows` staged rows (staging row r at
/// `staging` + r·128 floats holds the conv outputs of sequence and token `seq_token(r)`): one warp
/// per (row, head), the same [`lane_sum_sq_with`] partials, butterfly and scale ([`row_scale`])
/// and `scale · x` ([`scale_row_with`]) as `l2_norm_f32`.
///
/// # Safety
/// As [`gdn_conv_chain_tile`] for every sequence `seq_token` names (`c0` = 128·tile of a
/// validated op, inside the q/k channels); every thread of the block calls it, after a block
/// barrier that follows every write of the staged rows.
#[inline(always)]
unsafe fn tile_norms(p: &GdnConvChainParams, c0: usize, rows: usize, staging: u32, seq_token: impl Fn(u32) -> (usize, usize)) {
    // SAFETY: forwarded to the caller; no copy.
    unsafe { tile_norms_copying_k(p, c0, rows, staging, seq_token, |_, _, _| None) }
}

/// [`tile_norms`], and \[replay\] each k head's row also stored where `k_copy`(k head, token,
/// sequence) points (None: nowhere): the same value to a second place, as it is computed.
///
/// # Safety
/// As [`tile_norms`]; every row `k_copy` returns holds D floats that this call may write and
/// no thread of the launch reads or writes.
#[inline(always)]
unsafe fn tile_norms_copying_k(
    p: &GdnConvChainParams,
    c0: usize,
    rows: usize,
    staging: u32,
    seq_token: impl Fn(u32) -> (usize, usize),
    k_copy: impl Fn(usize, usize, usize) -> Option<*mut f32>,
) {
    let tid = thread_idx_x() as usize;
    let (d, h_k) = (p.head_dim as usize, p.n_k_heads as usize);
    // D is a power of two dividing 128 (checked by the host): shifts instead of divisions.
    let d_log2 = p.head_dim.trailing_zeros();
    let heads_log2 = BLOCK.trailing_zeros().wrapping_sub(d_log2);
    let (lane, warp) = (tid as u32 % 32, tid as u32 / 32);
    let items = (rows << heads_log2) as u32;
    let d32 = d as u32;
    // Item → (staged row address, head of the block's first head + hl, token, sequence).
    let row_of = |item: u32| {
        let (r, hl) = (item >> heads_log2, (item as usize) & ((1 << heads_log2) - 1));
        let (seq, t) = seq_token(r);
        (at(staging, r as usize * BLOCK + hl * d), (c0 >> d_log2) + hl, t, seq)
    };
    // Heads 0 … H_k are q, H_k … 2·H_k are k; a block may end in v heads, whose rows are not
    // stored (their scale is computed and dropped, keeping the warp's collectives uniform).
    let store = |head: usize, t: usize, seq: usize, scale: f32, src: u32| {
        if head < 2 * h_k {
            let (dst, h, head_stride, token_stride, seq_stride) = if head < h_k {
                (p.q_norm, head, p.q_head, p.q_token, p.q_seq)
            } else {
                (p.k_norm, head - h_k, p.k_head, p.k_token, p.k_seq)
            };
            // SAFETY: a q/k head h < H_k, token t < n_t, sequence < n_s: inside the validated view.
            let dst = unsafe { (dst as *mut f32).add(h * head_stride as usize + t * token_stride as usize + seq * seq_stride as usize) };
            let copy = if head < h_k { None } else { k_copy(h, t, seq) };
            let load = |col: u32| unsafe { shared::load_f32(at(src, col as usize)) };
            scale_row_with(
                scale,
                load,
                |col, v| unsafe {
                    *dst.add(col as usize) = v;
                    // SAFETY: col < D of a row the caller gave for this k head, token, sequence.
                    if let Some(copy) = copy {
                        *copy.add(col as usize) = v;
                    }
                },
                lane,
                d32,
            );
        }
    };
    // Warp w takes items w, w+4, …, two at a time (two independent butterflies overlap). `item`
    // is warp-uniform, so all 32 lanes run the collectives in `row_scale` together.
    let mut item = warp;
    while item < items {
        let (src_a, head_a, t_a, seq_a) = row_of(item);
        let load_a = |col: u32| unsafe { shared::load_f32(at(src_a, col as usize)) };
        if item + WARPS < items {
            let (src_b, head_b, t_b, seq_b) = row_of(item + WARPS);
            let load_b = |col: u32| unsafe { shared::load_f32(at(src_b, col as usize)) };
            let (part_a, part_b) = (lane_sum_sq_with(load_a, lane, d32), lane_sum_sq_with(load_b, lane, d32));
            // SAFETY: the whole warp is converged here.
            let (scale_a, scale_b) = unsafe { (row_scale(part_a, p.eps), row_scale(part_b, p.eps)) };
            store(head_a, t_a, seq_a, scale_a, src_a);
            store(head_b, t_b, seq_b, scale_b, src_b);
        } else {
            // SAFETY: the whole warp is converged here.
            let scale_a = unsafe { row_scale(lane_sum_sq_with(load_a, lane, d32), p.eps) };
            store(head_a, t_a, seq_a, scale_a, src_a);
        }
        item += 2 * WARPS;
    }
}

macro_rules! gdn_conv_chain_entries {
    ($table:ident; $($name:ident = $kind:ident, $d:tt, $max_t:expr;)*) => {
        $(
        /// Entry point; see the module docs and [`gdn_conv_chain_block`] (its token slots).
        ///
        /// # Safety
        /// See the module docs: the host validates every view, index and row before launching,
        /// and picks the entry whose token slots hold n_t.
        #[cfg(target_arch = "nvptx64")]
        #[unsafe(export_name = crate::abi::entry_name!($kind, $d))]
        pub unsafe extern "ptx-kernel" fn $name(p: GdnConvChainParams) {
            // SAFETY: forwarded from the launch contract above.
            unsafe { gdn_conv_chain_block::<$d, { $max_t }>(&p) }
        }
        )*
        /// [test] These entries' bodies on the host (`tests/kernel_emulation.rs`: the same source
        /// over a host `device` module), by entry name.
        #[cfg(not(target_arch = "nvptx64"))]
        pub const $table: &[(&str, unsafe fn(&GdnConvChainParams))] = &[$(
            (crate::abi::entry_name!($kind, $d), {
                /// # Safety
                /// The entry's contract (above), on an emulated launch.
                unsafe fn body(p: &GdnConvChainParams) {
                    // SAFETY: forwarded from the contract above.
                    unsafe { gdn_conv_chain_block::<$d, { $max_t }>(p) }
                }
                body
            }),
        )*];
    };
}

gdn_conv_chain_entries! {
    ENTRIES_EMULATED;
    gdn_conv_chain_f32_d3 = gdn_conv_chain, 3, GDN_CONV_CHAIN_MAX_TOKENS;
    gdn_conv_chain_f32_d4 = gdn_conv_chain, 4, GDN_CONV_CHAIN_MAX_TOKENS;
    gdn_conv_chain_f32_d5 = gdn_conv_chain, 5, GDN_CONV_CHAIN_MAX_TOKENS;
    gdn_conv_chain_f32_d3_t4 = gdn_conv_chain_t4, 3, 4;
    gdn_conv_chain_f32_d4_t4 = gdn_conv_chain_t4, 4, 4;
    gdn_conv_chain_f32_d5_t4 = gdn_conv_chain_t4, 5, 4;
}

/// \[replay\] The commit entries' body: block (tile, seq) with the token slots a thread runs
/// through unrolled to 4, 8 or 16 — the fewest that hold n_t (validated ≤ 16), so a short step
/// does not test 16 slots in every loop. Each arm is the same statements; only the unrolled
/// bound differs.
///
/// # Safety
/// As [`gdn_conv_chain_commit_tile`] for this block, whatever n_t ≤ 16.
#[inline(always)]
unsafe fn gdn_conv_chain_commit_block<const D_CONV: usize>(p: &GdnConvChainCommitParams) {
    let (tile, seq) = (block_idx_x() as usize, block_idx_y() as usize);
    let n_t = p.chain.n_tokens;
    // SAFETY (each call): forwarded from the contract above; n_t ≤ MAX_T.
    unsafe {
        if n_t <= 4 {
            {
                gdn_conv_chain_commit_tile::<D_CONV, 4, false>(p, tile, seq);
            }
        } else if n_t <= 8 {
            {
                gdn_conv_chain_commit_tile::<D_CONV, 8, false>(p, tile, seq);
            }
        } else {
            {
                gdn_conv_chain_commit_tile::<D_CONV, GDN_CONV_CHAIN_MAX_TOKENS, false>(p, tile, seq);
            }
        }
    }
}

macro_rules! gdn_conv_chain_commit_entries {
    ($table:ident; $($name:ident, $overlap_name:ident = $d:tt;)*) => {
        $(
        /// \[replay\] Entry point with the window commit in front; see
        /// [`gdn_conv_chain_commit_tile`].
        ///
        /// # Safety
        /// See the module docs: the host validates every view, index and row before launching.
        #[cfg(target_arch = "nvptx64")]
        #[unsafe(export_name = crate::abi::entry_name!(gdn_conv_chain_commit, $d))]
        pub unsafe extern "ptx-kernel" fn $name(p: GdnConvChainCommitParams) {
            // SAFETY: forwarded from the launch contract above.
            unsafe { gdn_conv_chain_commit_block::<$d>(&p) }
        }

        /// \[overlap\] The same entry letting the stream's next grid start once every block of
        /// this one has begun ([`allow_dependent_launch`] first, then the same body): the next
        /// grid is launched programmatically and waits for this one before it touches anything
        /// this one touches (the host's overlap pass, `fusion::overlap`).
        ///
        /// # Safety
        /// As the entry above, and the overlap pass's rule for the grid after it.
        #[cfg(target_arch = "nvptx64")]
        #[unsafe(export_name = crate::abi::entry_name!(gdn_conv_chain_commit_overlap, $d))]
        pub unsafe extern "ptx-kernel" fn $overlap_name(p: GdnConvChainCommitParams) {
            // SAFETY: forwarded from the launch contract above.
            unsafe {
                allow_dependent_launch();
                gdn_conv_chain_commit_block::<$d>(&p)
            }
        }
        )*
        /// [test] These entries' bodies on the host, by entry name (the overlap entries' hint is
        /// a no-op there).
        #[cfg(not(target_arch = "nvptx64"))]
        pub const $table: &[(&str, unsafe fn(&GdnConvChainCommitParams))] = &[$(
            (crate::abi::entry_name!(gdn_conv_chain_commit, $d), {
                /// # Safety
                /// The entry's contract (above), on an emulated launch.
                unsafe fn body(p: &GdnConvChainCommitParams) {
                    // SAFETY: forwarded from the contract above.
                    unsafe { gdn_conv_chain_commit_block::<$d>(p) }
                }
                body
            }),
            (crate::abi::entry_name!(gdn_conv_chain_commit_overlap, $d), {
                /// # Safety
                /// The entry's contract (above), on an emulated launch.
                unsafe fn body(p: &GdnConvChainCommitParams) {
                    // SAFETY: forwarded from the contract above.
                    unsafe {
                        allow_dependent_launch();
                        gdn_conv_chain_commit_block::<$d>(p)
                    }
                }
                body
            }),
        )*];
    };
}

gdn_conv_chain_commit_entries! {
    COMMIT_ENTRIES_EMULATED;
    gdn_conv_chain_commit_f32_d3, gdn_conv_chain_commit_f32_d3_overlap = 3;
    gdn_conv_chain_commit_f32_d4, gdn_conv_chain_commit_f32_d4_overlap = 4;
    gdn_conv_chain_commit_f32_d5, gdn_conv_chain_commit_f32_d5_overlap = 5;
}
