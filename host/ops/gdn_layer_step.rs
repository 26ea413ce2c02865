//! GDN_LAYER_STEP — one GDN layer verify step in one launch: the fused conv chain
//! ([`GdnConvChain`]), the alpha/beta products with the gate path ([`MulMatVecPairGate`]) and
//! GATED_DELTA_NET reading its state from the ssm cache ([`GatedDeltaNetFromCache`]), bit-identical
//! to those three ops run one after the other (hence to the unfused chain, which each of them
//! equals). Kernel: `kernels-gpu/src/gdn_layer_step.rs` (its docs: the two phases, the
//! readiness flags between them, whose block writes what, the read-among-written hazards); reference: the three ops'
//! references in graph order.
//!
//! The op struct is the contract between the `layer_step` fusion (`host/fusion/layer_step.rs`),
//! the kernel and its reference.

use super::gated_delta_net::GdnShape;
use super::gated_delta_net::{FromCacheIndexRules, FromCacheTable};
use super::gdn_conv_chain::ChainShape;
use super::gdn_conv_chain::{ChainIndexRules, ChainTable};
use super::index_rules::IndexRules;
use super::mmvf::MatVecShape;
use super::{GatedDeltaNetFromCache, GdnConvChain, MulMatVecPairGate, Op, check, knob};
use crate::bytes::{Bound, ByteSet};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, KernelArg, KernelParams, LaunchDims, ParamBlock, PreparedLaunch};
use crate::kernels::abi;
use crate::memory::{DeviceMemory, HostMemory, KernelAddresses, Memory};
use crate::reference::math::Mufu;
use crate::tensor::{BufferId, Tensor};
use std::collections::HashSet;
use std::sync::Mutex;

const OP: &str = "GDN_LAYER_STEP";

/// [seq-batch] (speed) Column groups a warp runs as one recurrence when several sequences run on
/// the single-sequence entries ([`StepShape::split`]; `RGDN_BATCH_SEQ_GROUPS` = 1 / 2 overrides
/// it for measurements).
pub const SEQ_ITEMS_GROUPS_PER_WARP: u32 = 2;
/// [seq-batch] (speed) Which steps of several sequences run on the single-sequence entries
/// ([`seq_items_pay`]): (most sequences, most tokens) pairs, a step taking them when some pair
/// bounds both its n_s and its n_t.
pub const SEQ_ITEMS_SHAPES: [(usize, usize); 3] = [(4, usize::MAX), (8, 4), (16, 2)];

/// [seq-batch] Whether a step of `n_seqs` ≥ 2 sequences of `n_tokens` tokens runs faster on the
/// single-sequence entries (two column groups a warp, [`SEQ_ITEMS_GROUPS_PER_WARP`], four blocks
/// a multiprocessor) than on the batched ones (when its items fit the flags,
/// [`StepShape::split`]): up to 4 sequences at every n_t, 8 up to 4 tokens, 16 up to 2
/// ([`SEQ_ITEMS_SHAPES`]). Measured on the H200, µs per layer step, same calls
/// (`results/2026-12-03-h200-seq-pairs/`): n_s = 8, T = 2 / 4 18.79 / 33.66 against 23.93 /
/// 35.02 on the batched entries, n_s = 16, T = 2 41.92 against 43.29, T = 1 24.34 against
/// 30.98 (another arm run); n_s = 16, T = 4 does not fit the flags. With three blocks a
/// multiprocessor the rule was narrower (n_s = 8, T = 4 37.34 against 34.37).
pub fn seq_items_pay(n_seqs: usize, n_tokens: usize) -> bool {
    SEQ_ITEMS_SHAPES.iter().any(|&(seqs, tokens)| n_seqs <= seqs && n_tokens <= tokens)
}

/// [seq-batch] (speed) Fewest sequences a batched step splits into four chunks rather than two,
/// at n_t ≥ [`FOUR_CHUNKS_MIN_TOKENS`] ([`StepShape::batch_split`]): the second phase starts
/// sooner. Same calls on the H200: n_s = 64, T = 4 / 8 227.55 / 398.73 µs against 229.71 / 407.46
/// with two (`results/2026-12-03-h200-seq-pairs/`), T = 4 227.15 / 226.62 against 231.15 in
/// session 14 (`results/2026-12-03-h200-conv-items/`); but T = 1 105.22 against 100.04, and
/// n_s = 16 slower at T = 1.
pub const FOUR_CHUNKS_MIN_SEQS: usize = 64;
/// [seq-batch] (speed) Fewest tokens for four chunks ([`FOUR_CHUNKS_MIN_SEQS`]).
pub const FOUR_CHUNKS_MIN_TOKENS: usize = 4;

/// [seq-batch] (speed) Most token columns n_s·n_t a batched step runs with one-row mat-vec items
/// ([`StepShape::batch_split`]).
pub const ONE_ROW_ITEMS_MAX_COLUMNS: usize = 4;
/// [seq-batch] (speed) Most sequences a batched step runs with conv items of one sequence each
/// ([`StepShape::batch_split`]); above, items of 4 side by side.
pub const ONE_SEQ_CONV_ITEMS_MAX_SEQS: usize = 8;
/// [seq-batch] (speed) Most tokens a step of 3 to [`ONE_SEQ_CONV_ITEMS_MAX_SEQS`] sequences runs
/// with conv items of one sequence each (measured up to 4; at n_s = 4, T = 8 / 16 they were
/// slower, [`StepShape::batch_split`]).
pub const ONE_SEQ_CONV_ITEMS_MAX_TOKENS: usize = 4;

/// The three fused ops of one GDN layer step, as one launch.
///
/// Valid when each part is valid on its own (its own errors, as that op reports them) and:
/// - **scope**: 1 ..= [`abi::GDN_LAYER_STEP_MAX_SEQS`] = 256 sequences (one, and small batches:
///   the single-sequence entries; more: the batched ones — [`StepShape::split`], "Several
///   sequences" in the kernel docs), n_t ≤ [`abi::GDN_LAYER_STEP_MAX_TOKENS`] = 16 tokens each
///   (the conv chain's token limit), D = 128 for the conv chain's heads (GATED_DELTA_NET's),
///   d_conv 3–5 (the chain's); on the batched entries also ssm-cache rows at 16-byte aligned
///   addresses (their second phase copies each item's state in 16-byte pieces) — else
///   [`Error::Unsupported`];
/// - **links** (the values the kernel passes from its first phase to its second): the GDN's q
///   and k are the chain's `q_norm` and `k_norm`; its v is the v channels of the chain's
///   `conv_out` (channels 2·H_k·D … 2·H_k·D + H_v·D as [D, H_v, n_t, n_s]); its g and β are
///   the pair-gate's `gate` and `beta` as [1, H_v, n_t, n_s]; the products' input columns are
///   the n_t·n_s tokens (sequence-major) and their rows the H_v value heads — else
///   [`Error::Invalid`];
/// - **disjointness** (blocks of the first phase run the chain and the products at the same
///   time; the second phase reads their outputs once their items are published): every output of the products is
///   disjoint from every tensor of the chain and vice versa (the conv cache taken whole), the
///   GDN's `out` and `states` from every tensor of the chain and of the products, and the ssm
///   cache and its index from every output of the chain and the products — else
///   [`Error::Aliasing`]. (Each part's own overlaps — conv_out on qkv, a snapshot row on the
///   source row, a state slot on the row read — stay admitted as each part admits them.)
/// - **readiness** (the kernel's second phase reads a head's token inputs once the first-phase
///   items it waits for — on the single-sequence entries `abi::LayerStepItems::item_read_by`
///   for the head's sequence; on the batched ones every first-phase item of its chunk,
///   `abi::LayerStepSchedule` — are published): every item that writes a byte those reads touch
///   is among them, proved on this step's bytes (`readiness_gap`, `batch_readiness_gap`: each
///   item's writes as the kernel docs' ownership says, each head's reads as GATED_DELTA_NET's
///   views say) — else [`Error::Invalid`] naming the sequence, the head and the item.
#[derive(Clone, Debug)]
pub struct GdnLayerStep {
    pub chain: GdnConvChain,
    pub gate: MulMatVecPairGate,
    pub gdn: GatedDeltaNetFromCache,
}

/// The sizes a valid [`GdnLayerStep`] runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepShape {
    pub chain: ChainShape,
    pub products: MatVecShape,
    pub gdn: GdnShape,
    /// [seq-batch] How the batched entries split the work (all zero for one sequence).
    pub batch: abi::LayerStepBatchParams,
}

/// What one GDN_LAYER_STEP launch runs ([`GdnLayerStep::launch`]): the grid is the caller's
/// (on the GPU every co-resident block; no bit depends on it).
#[derive(Clone, Copy, Debug)]
pub struct LayerStepLaunch {
    /// The kernel entry (`abi::ENTRIES`).
    pub entry: &'static str,
    /// Dynamic shared memory of a block, bytes.
    pub shared_bytes: u32,
    /// The entry's parameters.
    pub params: abi::GdnLayerStepParams,
    /// Work items of the first phase (on the batched entries: of the whole schedule).
    pub first_phase_items: u32,
    /// Column-group items of the second phase (0 on the batched entries: they are in the schedule).
    pub second_phase_items: u32,
}

impl StepShape {
    /// [seq-batch] Whether the batched entries run the step over their schedule (n_s ≥ 2, unless
    /// the single-sequence entries run every sequence's own items: [`StepShape::split`]).
    pub fn scheduled(&self) -> bool {
        self.batch.chunk_seqs > 0
    }

    /// [seq-batch] How a step of `n_seqs` sequences of `n_tokens` tokens runs, where
    /// `own_items` is its first-phase item count on the single-sequence entries (n_s·C/128 +
    /// 2·H_v·⌈n_t·n_s/2⌉): one sequence, and a small batch whose items fit the readiness state's
    /// [`abi::GRID_SYNC_FLAGS`] flags ([`seq_items_pay`]), on the single-sequence entries — the
    /// single-sequence items over every sequence, each with its own flag, and each sequence's
    /// column groups waiting for its own items only (`abi::LayerStepItems`; the batch's
    /// parameters carry only n_s) —; more on the batched entries' schedule
    /// ([`StepShape::batch_split`]). `RGDN_BATCH_SEQ_ITEMS` = 0 / 1 turns the single-sequence
    /// entries off / on at n_s ≥ 2 wherever the flags allow ([test] knob, read once per process;
    /// no bit depends on it).
    pub fn split(n_seqs: usize, n_tokens: usize, own_items: usize) -> abi::LayerStepBatchParams {
        static KNOB: std::sync::OnceLock<Option<bool>> = std::sync::OnceLock::new();
        static GROUPS: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
        let groups = *GROUPS.get_or_init(|| knob("RGDN_BATCH_SEQ_GROUPS", 1, 2));
        let knob = *KNOB.get_or_init(|| knob("RGDN_BATCH_SEQ_ITEMS", 0, 1).map(|k| k == 1));
        let fits = own_items <= abi::GRID_SYNC_FLAGS;
        if n_seqs <= 1 || (fits && knob.unwrap_or(seq_items_pay(n_seqs, n_tokens))) {
            // One sequence: one group a warp (its H_v·32 groups fit the grid's warps); several:
            // two ([`SEQ_ITEMS_GROUPS_PER_WARP`]).
            let groups_per_warp = if n_seqs <= 1 { 1 } else { groups.unwrap_or(SEQ_ITEMS_GROUPS_PER_WARP) };
            // n_s ≤ GDN_LAYER_STEP_MAX_SEQS (checked before): fits u32.
            abi::LayerStepBatchParams { n_seqs: n_seqs as u32, groups_per_warp, ..abi::LayerStepBatchParams::default() }
        } else {
            StepShape::batch_split(n_seqs, n_tokens)
        }
    }

    /// [seq-batch] The batched entries' schedule (see [`abi::LayerStepSchedule`]).
    pub fn schedule(&self) -> abi::LayerStepSchedule {
        abi::LayerStepSchedule {
            n_seqs: self.batch.n_seqs,
            n_tokens: self.gdn.n_tokens as u32,
            n_heads: self.gdn.n_heads as u32,
            n_chain_tiles: (self.chain.n_channels / abi::GDN_CONV_CHAIN_BLOCK as usize) as u32,
            chunk_seqs: self.batch.chunk_seqs,
            tile_seqs: self.batch.tile_seqs,
            groups_per_warp: self.batch.groups_per_warp,
            one_row_items: self.batch.one_row_items != 0,
        }
    }

    /// [seq-batch] The work split of a batched step over `n_seqs` sequences: two chunks of ⌈n_s / 2⌉
    /// sequences, at least 2 (so the first chunk's second phase overlaps the second chunk's
    /// first), four from [`FOUR_CHUNKS_MIN_SEQS`] sequences of [`FOUR_CHUNKS_MIN_TOKENS`] tokens on,
    /// conv items of up to 4 sequences (one at small n_s, below), two column groups per
    /// warp — one eight-column recurrence — from 4 sequences on (one below: the suite's n_s = 2 and 3 keep the
    /// one-group body covered). Measured on the H200 with the schedule walk of baad1ea
    /// (`results/2026-12-02-h200-walk/2-knobs.txt`): at n_s = 16, T = 4 chunks of 8 took 68.94 µs
    /// against 75.50 for ⌈n_s / 4⌉; at n_s = 64 chunks of 32 took 112.56 / 242.43 µs at T = 1 / 4
    /// against 119.89 / 244.29; at n_s = 4 two groups per warp took 17.62 / 28.13 µs at
    /// T = 1 / 4 against 19.06 / 29.49 for one.
    /// Small batches (`results/2026-12-03-h200-one-row/`, same calls): conv items of one sequence
    /// up to [`ONE_SEQ_CONV_ITEMS_MAX_SEQS`] sequences (n_s = 8, T = 1 / 4: 20.86 / 36.21 µs
    /// against 23.79 / 40.50 with 4 side by side; n_s = 2, T = 4 17.42 against 18.46; n_s = 4
    /// level), at n_s = 2 at every n_t, above it only up to [`ONE_SEQ_CONV_ITEMS_MAX_TOKENS`]
    /// tokens (the landed step took 38.18 / 61.92 µs at n_s = 4, T = 8 / 16 with them, against
    /// 35.23 / 58.74 for its parent with two side by side, another call), and mat-vec items of
    /// one row ([`abi::BatchItem::Row`]) up to [`ONE_ROW_ITEMS_MAX_COLUMNS`] token columns
    /// n_s·n_t (with one-sequence conv items: n_s = 2, T = 1 12.45 against 13.95; n_s = 4, T = 1
    /// 16.13 against 16.61; but slower from 8 columns on: n_s = 2, T = 4 17.98 against 17.42,
    /// n_s = 8, T = 1 22.29 against 20.86).
    /// Each may be overridden
    /// for measurements by `RGDN_BATCH_CHUNK`, `RGDN_BATCH_TILE_SEQS`, `RGDN_BATCH_GROUPS`,
    /// `RGDN_BATCH_ONE_ROW` (0 or 1) ([test] knobs, read once per process; no bit depends on
    /// them).
    pub fn batch_split(n_seqs: usize, n_tokens: usize) -> abi::LayerStepBatchParams {
        static KNOBS: std::sync::OnceLock<[Option<u32>; 4]> = std::sync::OnceLock::new();
        let [chunk, tile, groups, one_row] = *KNOBS.get_or_init(|| {
            [
                knob("RGDN_BATCH_CHUNK", 1, abi::GDN_LAYER_STEP_MAX_SEQS as u32),
                knob("RGDN_BATCH_TILE_SEQS", 1, abi::BATCH_MAX_TILE_SEQS),
                knob("RGDN_BATCH_GROUPS", 1, abi::BATCH_MAX_GROUPS_PER_WARP),
                knob("RGDN_BATCH_ONE_ROW", 0, 1),
            ]
        });
        let n = n_seqs as u32;
        let chunks = if n_seqs >= FOUR_CHUNKS_MIN_SEQS && n_tokens >= FOUR_CHUNKS_MIN_TOKENS { 4 } else { 2 };
        let chunk_seqs = chunk.unwrap_or(n.div_ceil(chunks).max(2)).clamp(1, n.max(1));
        // At least ⌈n / BATCH_MAX_CHUNKS⌉ sequences a chunk: one counter each.
        let chunk_seqs = chunk_seqs.max(n.div_ceil(abi::BATCH_MAX_CHUNKS as u32));
        abi::LayerStepBatchParams {
            n_seqs: n,
            chunk_seqs,
            tile_seqs: tile.unwrap_or(if one_seq_conv_items(n_seqs, n_tokens) { 1 } else { 4 }).min(chunk_seqs),
            groups_per_warp: groups.unwrap_or(if n >= 4 { 2 } else { 1 }),
            one_row_items: one_row.unwrap_or(u32::from(n_seqs.saturating_mul(n_tokens) <= ONE_ROW_ITEMS_MAX_COLUMNS)),
            _pad: 0,
        }
    }

    /// Work items of the kernel's first phase (2·H_v mat-vec rows × ⌈n_t/2⌉ column pairs + C/128
    /// conv tiles, one block each) and of its second (H_v·32 GATED_DELTA_NET column groups, one warp each), checked to
    /// fit u32.
    fn items(&self) -> Result<(u32, u32)> {
        if self.scheduled() {
            return self.batch_items();
        }
        let (h_v, n_s) = (self.gdn.n_heads, self.gdn.n_seqs);
        let first = own_items(&self.chain, &self.gdn)?;
        let second = check::product(OP, "v", "work items n_s·H_v·32", &[n_s, h_v, abi::GDN_LAYER_STEP_GROUPS_PER_HEAD as usize])?;
        if first > abi::GRID_SYNC_FLAGS {
            return Err(Error::Unsupported {
                op: OP,
                what: format!(
                    "{first} first-phase work items (n_s·C/128 + 2·H_v·⌈n_t·n_s/2⌉; the readiness state has {} flags)",
                    abi::GRID_SYNC_FLAGS
                ),
            });
        }
        Ok((check::fits_u32(OP, "first-phase work items", first)?, check::fits_u32(OP, "second-phase work items", second)?))
    }

    /// [seq-batch] (all work items of the schedule, 0), every count the kernel derives checked to fit
    /// u32 first (the schedule's arithmetic is u32): items per chunk and their sum.
    fn batch_items(&self) -> Result<(u32, u32)> {
        let (n_s, n_t, h_v) = (self.gdn.n_seqs, self.gdn.n_tokens, self.gdn.n_heads);
        let tiles = self.chain.n_channels / abi::GDN_CONV_CHAIN_BLOCK as usize;
        // The largest chunk's items bound every chunk's; the whole launch bounds the sum.
        let per_seq_second = check::product(OP, "v", "second-phase items per sequence H_v·32", &[h_v, 32])?;
        let columns = check::product(OP, "weight", "token columns n_t·n_s", &[n_t, n_s])?;
        let schedule = self.schedule();
        let rows = check::product(
            OP,
            "weight",
            "mat-vec items",
            &[
                columns.div_ceil(schedule.row_cols() as usize),
                if schedule.one_row_items { 2 * h_v } else { h_v.div_ceil(abi::BATCH_ROW_HEADS as usize) },
            ],
        )?;
        let conv = check::product(OP, "conv_weight", "conv items", &[n_s, tiles])?;
        let second = check::product(OP, "v", "second-phase items", &[n_s, per_seq_second])?;
        let total = check::sum(OP, "v", "work items of the launch", &[conv, rows, second])?;
        check::fits_u32(OP, "work items of the launch", total)?;
        if schedule.n_chunks() as usize > abi::BATCH_MAX_CHUNKS {
            return Err(Error::Unsupported {
                op: OP,
                what: format!("{} sequence chunks (the readiness state has {} counters)", schedule.n_chunks(), abi::BATCH_MAX_CHUNKS),
            });
        }
        Ok((schedule.total_items(), 0))
    }
}

/// First-phase items of the single-sequence entries over every sequence: n_s·C/128 conv tiles
/// + 2·H_v·⌈n_t·n_s/2⌉ row items (`abi::LayerStepItems`), checked.
pub(crate) fn own_items(chain: &ChainShape, gdn: &GdnShape) -> Result<usize> {
    let tiles =
        check::product(OP, "conv_weight", "conv tiles n_s·C/128", &[gdn.n_seqs, chain.n_channels / abi::GDN_CONV_CHAIN_BLOCK as usize])?;
    let columns = check::product(OP, "weight", "token columns n_t·n_s", &[gdn.n_tokens, gdn.n_seqs])?;
    let rows = check::product(OP, "weight", "row items 2·H_v·⌈n_t·n_s/2⌉", &[2, gdn.n_heads, columns.div_ceil(abi::GDN_LAYER_STEP_COLS)])?;
    check::sum(OP, "weight", "work items n_s·C/128 + 2·H_v·⌈n_t·n_s/2⌉", &[rows, tiles])
}

/// [seq-batch] Whether the default split gives a step of `n_seqs` sequences of `n_tokens` tokens
/// conv items of one sequence each ([`StepShape::batch_split`]).
fn one_seq_conv_items(n_seqs: usize, n_tokens: usize) -> bool {
    n_seqs <= ONE_SEQ_CONV_ITEMS_MAX_SEQS && (n_seqs <= 2 || n_tokens <= ONE_SEQ_CONV_ITEMS_MAX_TOKENS)
}

/// [test] `split` when the entries run it for a step of `n_seqs` sequences with `own_items`
/// first-phase items on the single-sequence entries: on those (`chunk_seqs` = 0) one or two
/// column groups a warp (one at n_s = 1) with the items within the readiness flags; on the
/// batched ones (n_s ≥ 2) chunks of 1 … n_s sequences, conv items of 1 … min(chunk,
/// `BATCH_MAX_TILE_SEQS`) sequences, 1 … `BATCH_MAX_GROUPS_PER_WARP` groups a warp and a 0/1
/// one-row flag — every value the knobs of [`StepShape::split`] may give. Else
/// [`Error::Unsupported`].
fn checked_split(split: abi::LayerStepBatchParams, n_seqs: usize, own_items: usize) -> Result<abi::LayerStepBatchParams> {
    let abi::LayerStepBatchParams { n_seqs: n, chunk_seqs, tile_seqs, groups_per_warp, one_row_items, _pad } = split;
    let ok = n as usize == n_seqs
        && _pad == 0
        && if chunk_seqs == 0 {
            tile_seqs == 0
                && one_row_items == 0
                && own_items <= abi::GRID_SYNC_FLAGS
                && (groups_per_warp == 1 || (groups_per_warp == 2 && n_seqs >= 2))
        } else {
            n_seqs >= 2
                && chunk_seqs <= n
                && (1..=chunk_seqs.min(abi::BATCH_MAX_TILE_SEQS)).contains(&tile_seqs)
                && (1..=abi::BATCH_MAX_GROUPS_PER_WARP).contains(&groups_per_warp)
                && one_row_items <= 1
        };
    if ok { Ok(split) } else { Err(Error::Unsupported { op: OP, what: format!("work split {split:?} for {n_seqs} sequences") }) }
}

/// True when `a` and `b` address the same elements: same buffer, type, offset and sizes, and
/// the same stride in every dimension of size > 1 (a stride of a size-1 dimension is never
/// used).
fn same_elements(a: &Tensor, b: &Tensor) -> bool {
    let (la, lb) = (&a.layout, &b.layout);
    a.buffer == b.buffer
        && la.dtype == lb.dtype
        && la.offset == lb.offset
        && la.ne == lb.ne
        && (0..4).all(|d| la.ne[d] <= 1 || la.nb[d] == lb.nb[d])
}

fn link(ok: bool, what: &str) -> Result<()> {
    if ok { Ok(()) } else { Err(Error::Invalid { op: OP, what: format!("the parts are not linked as one layer step: {what}") }) }
}

impl GdnLayerStep {
    /// Validates the op (see the struct docs) and returns its sizes, with the work split the
    /// host chooses ([`StepShape::split`]).
    pub fn check(&self, mem: &dyn Memory) -> Result<StepShape> {
        self.check_with(mem, None)
    }

    /// [`Self::check`] with the work split `split` instead of the host's choice (None: the
    /// host's), checked to be one the entries run ([`checked_split`]) and proved as the host's
    /// is (readiness included).
    fn check_with(&self, mem: &dyn Memory, split: Option<abi::LayerStepBatchParams>) -> Result<StepShape> {
        let (chain, gate, gdn) = (&self.chain, &self.gate, &self.gdn);
        // Scope first, with this op's reasons.
        let n_t = chain.qkv.ne()[1];
        if n_t > abi::GDN_LAYER_STEP_MAX_TOKENS {
            return Err(Error::Unsupported {
                op: OP,
                what: format!("n_t = {n_t} tokens (at most {}: GDN_LAYER_STEP_MAX_TOKENS)", abi::GDN_LAYER_STEP_MAX_TOKENS),
            });
        }
        if chain.head_dim != abi::GDN_HEAD_DIM {
            return Err(Error::Unsupported {
                op: OP,
                what: format!("head_dim = {} (GATED_DELTA_NET's D = {})", chain.head_dim, abi::GDN_HEAD_DIM),
            });
        }
        // [replay] The layer step's items are ggml's chain: a window commit is GDN_CONV_CHAIN's alone.
        if chain.commit.is_some() {
            return Err(Error::Unsupported { op: OP, what: "a conv chain with a window commit (GDN_CONV_CHAIN runs it)".into() });
        }
        // Each part on its own.
        let chain_shape = chain.check(mem)?;
        let products = gate.check(mem)?;
        let gdn_shape = gdn.check(mem)?;
        let n_s = gdn_shape.n_seqs;
        if n_s == 0 || n_s > abi::GDN_LAYER_STEP_MAX_SEQS {
            return Err(Error::Unsupported {
                op: OP,
                what: format!("{n_s} sequences (1 to {}: GDN_LAYER_STEP_MAX_SEQS)", abi::GDN_LAYER_STEP_MAX_SEQS),
            });
        }
        if abi::gdn_layer_step_entry(products.kind, chain_shape.d_conv).is_none() {
            return Err(Error::Unsupported {
                op: OP,
                what: format!("mat-vec kind {} with d_conv = {} has no entry", products.kind, chain_shape.d_conv),
            });
        }

        // Links.
        link(gdn_shape.n_tokens == n_t && chain_shape.n_seqs == n_s, "the token or sequence counts of the parts differ")?;
        link(products.ncols == n_t * n_s, "the products' columns are not the n_t·n_s tokens")?;
        link(products.rows == gdn_shape.n_heads, "the products' rows are not the GDN's value heads")?;
        link(
            2 * chain.n_k_heads + gdn_shape.n_heads <= chain_shape.n_channels / abi::GDN_HEAD_DIM,
            "the conv output has no v channels for every value head",
        )?;
        if let Some(what) = self.broken_link() {
            link(false, what)?;
        }

        // Disjointness across the parts (the kernel runs them in other blocks at once).
        let (first, second) = (&gate.pair.first, &gate.pair.second);
        let chain_reads: [(&'static str, &Tensor); 4] =
            [("conv_cache", &chain.conv_cache), ("source_row", &chain.source_row), ("qkv", &chain.qkv), ("conv_weight", &chain.weight)];
        let chain_writes: [(&'static str, &Tensor); 4] =
            [("conv_out", &chain.conv_out), ("q_norm", &chain.q_norm), ("k_norm", &chain.k_norm), ("conv_cache", &chain.conv_cache)];
        let pair_reads: [(&'static str, &Tensor); 5] = [
            ("alpha_weight", &first.weight),
            ("beta_weight", &second.weight),
            ("cur", &first.input),
            ("dt_bias", &gate.dt_bias),
            ("ssm_a", &gate.ssm_a),
        ];
        let pair_writes: [(&'static str, &Tensor); 4] =
            [("alpha", &first.dst), ("beta_raw", &second.dst), ("beta", &gate.beta), ("gate", &gate.gate)];
        for (a, ta) in pair_writes {
            for (b, tb) in chain_reads.iter().chain(&chain_writes) {
                check::disjoint(OP, a, ta, b, tb)?;
            }
        }
        for (a, ta) in chain_writes {
            for (b, tb) in pair_reads {
                check::disjoint(OP, a, ta, b, tb)?;
            }
        }
        let first_phase = chain_reads.iter().chain(&chain_writes).chain(&pair_reads).chain(&pair_writes);
        for (a, ta) in [("out", &gdn.out), ("states", &gdn.states)] {
            for (b, tb) in first_phase.clone() {
                check::disjoint(OP, a, ta, b, tb)?;
            }
        }
        for (a, ta) in [("ssm_cache", &gdn.ssm_cache), ("ssm_source_rows", &gdn.source_rows)] {
            for (b, tb) in chain_writes.iter().chain(&pair_writes) {
                check::disjoint(OP, a, ta, b, tb)?;
            }
        }
        let own = own_items(&chain_shape, &gdn_shape)?;
        let batch = match split {
            None => StepShape::split(n_s, gdn_shape.n_tokens, own),
            Some(split) => checked_split(split, n_s, own)?,
        };
        let shape = StepShape { chain: chain_shape, products, gdn: gdn_shape, batch };
        shape.items()?;
        if shape.scheduled() {
            Self::check_batch(&shape, gdn, mem)?;
        }

        // Readiness: the kernel's waits cover every first-phase writer of what its second phase
        // reads, proved on this step's bytes.
        if shape.gdn.n_heads == 0 || shape.gdn.n_key_heads == 0 {
            return Err(Error::Invalid { op: OP, what: "no value heads or no key heads".into() });
        }
        if shape.scheduled() {
            if let Some((seq, head, item)) = self.proved(&shape, || self.batch_readiness_gap(&shape)) {
                return Err(Error::Invalid {
                    op: OP,
                    what: format!(
                        "sequence {seq}'s value head {head} reads bytes that first-phase item {item:?} writes, and that item is not \
                         among the items its chunk counts (abi::LayerStepSchedule)"
                    ),
                });
            }
            return Ok(shape);
        }
        if let Some((seq, head, item)) = self.kernel_readiness_gap(&shape) {
            let items = self.step_items(&shape);
            return Err(Error::Invalid {
                op: OP,
                what: format!(
                    "sequence {seq}'s value head {head}'s column groups read bytes that first-phase item {item} ({}) writes, and \
                     the kernel's readiness waits (abi::LayerStepItems::item_read_by) do not include it",
                    items
                        .first_phase_item(item, checked_before_the_proof)
                        .map_or_else(|| "past the last item".into(), |k| format!("{k:?}"))
                ),
            });
        }
        Ok(shape)
    }

    /// The kernel's work items for a checked `shape`: what the kernel derives from its
    /// parameters (`abi::LayerStepItems::of`; [`Self::params`] fills those fields from here, and
    /// the parts' own params fill the two key-head counts from the same values).
    fn step_items(&self, shape: &StepShape) -> abi::LayerStepItems {
        // Validated: H_v, H_k, C/128 and n_t fit u32 (the work items and the GDN's check do).
        abi::LayerStepItems {
            n_heads: shape.gdn.n_heads as u32,
            n_key_heads: shape.gdn.n_key_heads as u32,
            chain_key_heads: self.chain.n_k_heads as u32,
            n_chain_tiles: (shape.chain.n_channels / abi::GDN_CONV_CHAIN_BLOCK as usize) as u32,
            n_tokens: shape.chain.n_tokens as u32,
            // n_s ≤ GDN_LAYER_STEP_MAX_SEQS (checked).
            n_seqs: shape.gdn.n_seqs as u32,
        }
    }

    /// The bytes first-phase item `item` writes — the kernel docs' "Whose block writes what":
    /// conv tile k of sequence s its 128 channels of the sequence's `conv_out` (every token) and
    /// of its every snapshot row, and the q or k head inside it (D = 128 = the tile width); a
    /// row item the (row, column) elements of its product's two outputs (alpha and gate, or
    /// beta_raw and beta) for the columns of its pair below n_t·n_s. A view whose sub-box
    /// overflows counts whole.
    fn item_writes(&self, shape: &StepShape, item: abi::LayerStepItem) -> ByteSet {
        let gate = &self.gate;
        // The products' columns, n_t of each sequence (checked: the products' own columns).
        let columns = shape.products.ncols;
        match item {
            abi::LayerStepItem::Tile { seq, tile } => self.tile_writes(shape, tile as usize, seq as usize),
            abi::LayerStepItem::Row { pair, row, product } => {
                let mut bytes = ByteSet::new();
                let (row, first_col) = (row as usize, pair as usize * abi::GDN_LAYER_STEP_COLS);
                let cols = abi::GDN_LAYER_STEP_COLS.min(columns.saturating_sub(first_col));
                let outputs = if product == 0 { [&gate.pair.first.dst, &gate.gate] } else { [&gate.pair.second.dst, &gate.beta] };
                for t in outputs {
                    bytes.union_with(&sub_box(t, [row, first_col, 0, 0], [1, cols, 1, 1]));
                }
                bytes
            }
        }
    }

    /// The bytes conv tile `k` of sequence `seq` writes: its 128 channels of `conv_out` (every
    /// token) and of every snapshot row (row + seq), and the q or k head inside it (D = 128 = the
    /// tile width). A view whose sub-box overflows counts whole.
    fn tile_writes(&self, shape: &StepShape, k: usize, seq: usize) -> ByteSet {
        let chain = &self.chain;
        let n_t = shape.chain.n_tokens;
        let mut bytes = ByteSet::new();
        let (width, h_k) = (abi::GDN_CONV_CHAIN_BLOCK as usize, chain.n_k_heads);
        bytes.union_with(&sub_box(&chain.conv_out, [k * width, 0, seq, 0], [width, n_t, 1, 1]));
        let taps = shape.chain.d_conv - 1;
        for s in &chain.snapshots {
            bytes.union_with(&sub_box(&chain.conv_cache, [k * width * taps, s.row.saturating_add(seq), 0, 0], [width * taps, 1, 1, 1]));
        }
        let d = chain.head_dim;
        if k < h_k {
            bytes.union_with(&sub_box(&chain.q_norm, [0, k, 0, seq], [d, 1, n_t, 1]));
        } else if k < 2 * h_k {
            bytes.union_with(&sub_box(&chain.k_norm, [0, k - h_k, 0, seq], [d, 1, n_t, 1]));
        }
        bytes
    }

    /// [seq-batch] The bytes a batched first-phase item writes: a conv item its tile of each of its
    /// sequences ([`Self::tile_writes`]); a mat-vec item the (head, column) elements of both
    /// products' outputs (alpha and gate, beta_raw and beta) for its heads and columns; a one-row
    /// item its product's two outputs (alpha and gate, or beta_raw and beta) at its row and columns.
    fn batch_item_writes(&self, shape: &StepShape, item: abi::BatchItem) -> ByteSet {
        let gate = &self.gate;
        let mut bytes = ByteSet::new();
        match item {
            abi::BatchItem::Tiles { tile, first_seq, n_seqs } => {
                for seq in first_seq..first_seq + n_seqs {
                    bytes.union_with(&self.tile_writes(shape, tile as usize, seq as usize));
                }
            }
            abi::BatchItem::Rows { first_head, n_heads, first_col, n_cols } => {
                let (h0, nh, c0, nc) = (first_head as usize, n_heads as usize, first_col as usize, n_cols as usize);
                for t in [&gate.pair.first.dst, &gate.gate, &gate.pair.second.dst, &gate.beta] {
                    bytes.union_with(&sub_box(t, [h0, c0, 0, 0], [nh, nc, 1, 1]));
                }
            }
            abi::BatchItem::Row { product, head, first_col, n_cols } => {
                let outputs = if product == 0 { [&gate.pair.first.dst, &gate.gate] } else { [&gate.pair.second.dst, &gate.beta] };
                for t in outputs {
                    bytes.union_with(&sub_box(t, [head as usize, first_col as usize, 0, 0], [1, n_cols as usize, 1, 1]));
                }
            }
            // Second-phase items write `out` and the state slots only (disjoint from every
            // first-phase byte: `check`).
            abi::BatchItem::Groups { .. } => {}
        }
        bytes
    }

    /// The bytes value head `head` of sequence `seq`'s column groups read once their wait
    /// returned (the GDN's own views, as its reference reads them): q and k of its key head
    /// (`head` mod H_k), v (every column), g and β of the head, every token of the sequence.
    fn head_reads(&self, shape: &StepShape, head: usize, seq: usize) -> ByteSet {
        let (gdn, d, n_t) = (&self.gdn, abi::GDN_HEAD_DIM, shape.gdn.n_tokens);
        let key_head = head % shape.gdn.n_key_heads;
        let mut bytes = sub_box(&gdn.q, [0, key_head, 0, seq], [d, 1, n_t, 1]);
        bytes.union_with(&sub_box(&gdn.k, [0, key_head, 0, seq], [d, 1, n_t, 1]));
        bytes.union_with(&sub_box(&gdn.v, [0, head, 0, seq], [d, 1, n_t, 1]));
        bytes.union_with(&sub_box(&gdn.g, [0, head, 0, seq], [1, 1, n_t, 1]));
        bytes.union_with(&sub_box(&gdn.beta, [0, head, 0, seq], [1, 1, n_t, 1]));
        bytes
    }

    /// [seq-batch] The batched readiness proof: the first (sequence, value head, first-phase item)
    /// where the item writes a byte that the head's column groups of that sequence read
    /// ([`Self::batch_item_writes`], [`Self::head_reads`]) and the item is not one of the
    /// sequence's chunk — the items whose count its second-phase items wait for
    /// (`abi::LayerStepSchedule`: every first-phase item of a chunk adds to that chunk's
    /// counter, and the waiters wait for the chunk's whole count); None when every writer of
    /// every read is in the reader's chunk.
    fn batch_readiness_gap(&self, shape: &StepShape) -> Option<(u32, u32, abi::BatchItem)> {
        let schedule = shape.schedule();
        // Every written run with its item and chunk, sorted by (buffer, start).
        let mut writes: Vec<(BufferId, usize, usize, u32, abi::BatchItem)> = Vec::new();
        let mut segment = 0;
        while segment < schedule.n_segments() {
            if let (false, chunk) = schedule.segment(segment) {
                for offset in 0..schedule.segment_len(segment) {
                    let (item, c) = schedule.item(abi::BatchCursor { segment, offset });
                    debug_assert_eq!(c, chunk);
                    writes.extend(self.batch_item_writes(shape, item).runs().map(|(b, r)| (b, r.start, r.end, chunk, item)));
                }
            }
            segment += 1;
        }
        writes.sort_unstable_by_key(|w| (w.0, w.1, w.2));
        let longest = writes.iter().map(|w| w.2 - w.1).max().unwrap_or(0);
        for seq in 0..schedule.n_seqs {
            let chunk = seq / schedule.chunk_seqs;
            for head in 0..schedule.n_heads {
                for (buffer, read) in self.head_reads(shape, head as usize, seq as usize).runs() {
                    let from = writes.partition_point(|w| (w.0, w.1) < (buffer, read.start.saturating_sub(longest)));
                    for w in writes[from..].iter().take_while(|w| w.0 == buffer && w.1 < read.end) {
                        if w.2 > read.start && w.3 != chunk {
                            return Some((seq, head, w.4));
                        }
                    }
                }
            }
        }
        None
    }

    /// [seq-batch] The checks only the batched entries need: the ssm cache's rows at 16-byte aligned
    /// device addresses (each second-phase item's state is copied in 16-byte pieces) and the
    /// cache's GATED_DELTA_NET_FROM_CACHE layout (D floats a column, D·D a head).
    fn check_batch(shape: &StepShape, gdn: &GatedDeltaNetFromCache, mem: &dyn Memory) -> Result<()> {
        let cache = &gdn.ssm_cache;
        let aligned =
            mem.base_alignment(cache.buffer) >= 16 && cache.layout.offset.is_multiple_of(16) && cache.layout.nb[1].is_multiple_of(16);
        if !aligned {
            return Err(Error::Unsupported {
                op: OP,
                what: "several sequences with ssm-cache rows not 16-byte aligned (the batched step copies states in 16-byte pieces)".into(),
            });
        }
        shape.batch_items().map(|_| ())
    }

    /// [`Self::readiness_gap`] with the kernel's waits (`abi::LayerStepItems::item_read_by`),
    /// run once per distinct step: a proof depends only on the views below and the sizes (not
    /// on memory contents), and takes
    /// ≈ 1.3 ms at 9B, n_t = 16 (≈ 6 µs for the rest of `check`, which runs before every
    /// launch), so proved steps are remembered (at most [`PROVED_STEPS`], then forgotten).
    pub(crate) fn kernel_readiness_gap(&self, shape: &StepShape) -> Option<(u32, u32, u32)> {
        let items = self.step_items(shape);
        self.proved(shape, || self.readiness_gap(shape, &|seq, head, lane| items.item_read_by(seq, head, lane, checked_before_the_proof)))
    }

    /// Runs a readiness proof once per distinct step: `prove` (None: no gap) unless this step —
    /// its views, snapshot rows, sizes and [seq-batch] schedule — was proved before; a proof
    /// depends on nothing else (not on memory contents). Proved steps are remembered (at most
    /// [`PROVED_STEPS`], then forgotten).
    fn proved<T>(&self, shape: &StepShape, prove: impl FnOnce() -> Option<T>) -> Option<T> {
        let (chain, gate, gdn) = (&self.chain, &self.gate, &self.gdn);
        let key = ProofKey {
            views: [
                chain.conv_out,
                chain.conv_cache,
                chain.q_norm,
                chain.k_norm,
                gate.pair.first.dst,
                gate.pair.second.dst,
                gate.gate,
                gate.beta,
                gdn.q,
                gdn.k,
                gdn.v,
                gdn.g,
                gdn.beta,
            ],
            snapshots: chain.snapshots.clone(),
            sizes: [
                chain.n_k_heads,
                chain.head_dim,
                shape.chain.d_conv,
                shape.chain.n_channels,
                shape.chain.n_tokens,
                shape.gdn.n_heads,
                shape.gdn.n_key_heads,
                shape.gdn.n_seqs,
            ],
            batch: shape.batch,
        };
        static PROVED: Mutex<Option<HashSet<ProofKey>>> = Mutex::new(None);
        // A poisoned memo only costs the proof again.
        if PROVED.lock().ok().is_some_and(|m| m.as_ref().is_some_and(|m| m.contains(&key))) {
            return None;
        }
        let gap = prove();
        if gap.is_none()
            && let Ok(mut m) = PROVED.lock()
        {
            let m = m.get_or_insert_with(HashSet::new);
            if m.len() >= PROVED_STEPS {
                m.clear();
            }
            m.insert(key);
        }
        gap
    }

    /// The readiness proof: the first (sequence, value head, first-phase item) where the item
    /// writes a byte the sequence's head's column groups read ([`Self::item_writes`],
    /// [`Self::head_reads`]) and `waits` — (sequence, head, lane) → awaited item of the head's
    /// waiting warp, the kernel's `abi::LayerStepItems::item_read_by` — names it in no lane; None
    /// when the waits cover every writer. Every item of every sequence is a candidate writer of
    /// every read. The kernel's phase 2 reads nothing else that phase 1 writes (the disjointness
    /// above: `out`, the states and the ssm cache meet no phase-1 output).
    fn readiness_gap(&self, shape: &StepShape, waits: &dyn Fn(u32, u32, u32) -> Option<u32>) -> Option<(u32, u32, u32)> {
        let items = self.step_items(shape);
        // Every written run with its item, sorted by (buffer, start).
        let mut writes: Vec<(BufferId, usize, usize, u32)> = Vec::new();
        for item in 0..items.first_phase_items() {
            let Some(kind) = items.first_phase_item(item, checked_before_the_proof) else { break };
            writes.extend(self.item_writes(shape, kind).runs().map(|(b, r)| (b, r.start, r.end, item)));
        }
        writes.sort_unstable();
        let longest = writes.iter().map(|w| w.2 - w.1).max().unwrap_or(0);
        for seq in 0..items.n_seqs {
            for head in 0..items.n_heads {
                // One warp's lanes wait, one item each (`wait_items`).
                let awaited: Vec<u32> = (0..32).filter_map(|lane| waits(seq, head, lane)).collect();
                for (buffer, read) in self.head_reads(shape, head as usize, seq as usize).runs() {
                    // Runs that may reach `read`: from the first that starts `longest` before it.
                    let from = writes.partition_point(|w| (w.0, w.1) < (buffer, read.start.saturating_sub(longest)));
                    for w in writes[from..].iter().take_while(|w| w.0 == buffer && w.1 < read.end) {
                        if w.2 > read.start && !awaited.contains(&w.3) {
                            return Some((seq, head, w.3));
                        }
                    }
                }
            }
        }
        None
    }

    /// The first link of the struct docs the views break (None when the GDN reads exactly the
    /// chain's and the pair-gate's outputs): structure only, no memory needed — what the
    /// `layer_step` matcher asks too.
    pub fn broken_link(&self) -> Option<&'static str> {
        let (chain, gate, gdn) = (&self.chain, &self.gate, &self.gdn);
        let (d, h_k, h_v, n_t, n_s) = (chain.head_dim, chain.n_k_heads, gdn.v.ne()[1], chain.qkv.ne()[1], chain.n_seqs());
        if !same_elements(&gdn.q, &chain.q_norm) {
            return Some("GATED_DELTA_NET's q is not the chain's q_norm");
        }
        if !same_elements(&gdn.k, &chain.k_norm) {
            return Some("GATED_DELTA_NET's k is not the chain's k_norm");
        }
        let nb = chain.conv_out.layout.nb;
        let v_offset = [4, 2, h_k, d].iter().try_fold(1usize, |a, &b| a.checked_mul(b));
        let row = d.checked_mul(4);
        let v = match (v_offset, row) {
            (Some(off), Some(row)) => chain.conv_out.checked_view([d, h_v, n_t, n_s], [4, row, nb[1], nb[2]], off),
            _ => None,
        };
        if !v.is_some_and(|v| same_elements(&gdn.v, &v)) {
            return Some("GATED_DELTA_NET's v is not the v channels of the chain's conv_out");
        }
        let as_heads = |t: &Tensor| t.reshape([1, h_v, n_t, n_s]);
        if !as_heads(&gate.gate).is_some_and(|g| same_elements(&gdn.g, &g)) {
            return Some("GATED_DELTA_NET's g is not the pair-gate's gate");
        }
        if !as_heads(&gate.beta).is_some_and(|b| same_elements(&gdn.beta, &b)) {
            return Some("GATED_DELTA_NET's beta is not the pair-gate's beta");
        }
        None
    }

    /// What the step launches (entry, shared memory, parameters over `addresses`, work items) for
    /// the host's work split, once `mem` validated it ([`Self::check`]); `sync_state` is the
    /// address of the launch's readiness state (`device/grid.rs`). [`Op::prepare`] launches
    /// this on a co-resident grid; the kernel emulation runs the same entry's source on the CPU.
    pub fn launch(&self, mem: &dyn Memory, addresses: &dyn KernelAddresses, sync_state: u64) -> Result<LayerStepLaunch> {
        self.launch_of(&self.check(mem)?, addresses, sync_state)
    }

    /// [test] [`Self::launch`] with the work split `split` (`abi::LayerStepBatchParams`: on the
    /// single-sequence entries `chunk_seqs` = 0 and one or two groups a warp; on the batched
    /// ones the schedule), validated and proved as the host's own split is — what the knobs of
    /// [`StepShape::split`] choose, without reading them: the kernel emulation runs every kind.
    pub fn launch_with_split(
        &self,
        mem: &dyn Memory,
        addresses: &dyn KernelAddresses,
        sync_state: u64,
        split: abi::LayerStepBatchParams,
    ) -> Result<LayerStepLaunch> {
        self.launch_of(&self.check_with(mem, Some(split))?, addresses, sync_state)
    }

    fn launch_of(&self, shape: &StepShape, addresses: &dyn KernelAddresses, sync_state: u64) -> Result<LayerStepLaunch> {
        let (kind, d_conv, n_t) = (shape.products.kind, shape.chain.d_conv, shape.chain.n_tokens);
        let (entry, shared_bytes) = if shape.scheduled() {
            (
                abi::gdn_layer_step_batch_entry(kind, d_conv),
                abi::gdn_layer_step_batch_shared_bytes(d_conv, n_t, shape.batch.groups_per_warp),
            )
        } else {
            // [seq-batch] Two column groups a warp: the `gdn_layer_step_seqs_*` entries (the same
            // body and shared memory; the single-sequence entries keep one group a warp).
            let entry = if shape.batch.groups_per_warp == 2 {
                abi::gdn_layer_step_seqs_entry(kind, d_conv)
            } else {
                abi::gdn_layer_step_entry(kind, d_conv)
            };
            (entry, abi::gdn_layer_step_shared_bytes(d_conv, n_t))
        };
        let entry =
            entry.ok_or_else(|| Error::Unsupported { op: OP, what: format!("mat-vec kind {kind} with d_conv = {d_conv} has no entry") })?;
        let (first_phase_items, second_phase_items) = shape.items()?;
        Ok(LayerStepLaunch {
            entry,
            shared_bytes,
            params: self.params(shape, addresses, sync_state),
            first_phase_items,
            second_phase_items,
        })
    }

    /// The kernel's parameters for a validated op.
    fn params(&self, shape: &StepShape, mem: &dyn KernelAddresses, sync_state: u64) -> abi::GdnLayerStepParams {
        let items = self.step_items(shape);
        abi::GdnLayerStepParams {
            chain: self.chain.params(&shape.chain, mem),
            gate: self.gate.params(mem, &shape.products),
            gdn: self.gdn.params(&shape.gdn, mem),
            sync_state,
            pair_block: shape.products.block_size,
            // The kernel's work items are the ones the readiness proof ran on.
            n_heads: items.n_heads,
            n_chain_tiles: items.n_chain_tiles,
            n_tokens: items.n_tokens,
            batch: shape.batch,
        }
    }
}

// SAFETY: `#[repr(C)]`, `Copy`: the 312-byte GdnConvChainParams, the 144-byte
// MulMatVecPairGateParams and the 280-byte GatedDeltaNetFromCacheParams (each alignment 8 with no
// padding), one u64, four u32 and the 24-byte LayerStepBatchParams: 784 bytes, alignment 8, no
// padding (`param_struct!` asserts it); it is exactly the type the `gdn_layer_step_*` and
// `gdn_layer_step_batch_*` entries take.
unsafe impl KernelParams for abi::GdnLayerStepParams {}

/// The elements `first` … `first + ne − 1` of `t` (its strides), or all of `t` when that
/// sub-box's offset overflows.
fn sub_box(t: &Tensor, first: [usize; 4], ne: [usize; 4]) -> ByteSet {
    let nb = t.layout.nb;
    let offset = (0..4).try_fold(0usize, |acc, d| acc.checked_add(first[d].checked_mul(nb[d])?));
    match offset.and_then(|o| t.checked_view(ne, nb, o)) {
        Some(view) => ByteSet::of(&view, Bound::Over),
        None => ByteSet::of(t, Bound::Over),
    }
}

/// Most proved layer steps [`GdnLayerStep::kernel_readiness_gap`] remembers.
const PROVED_STEPS: usize = 1024;

/// Everything a readiness proof depends on: the views it reads bytes of, the snapshot rows and
/// the sizes.
#[derive(PartialEq, Eq, Hash)]
struct ProofKey {
    views: [Tensor; 13],
    snapshots: Vec<super::gdn_conv_chain::SnapshotWrite>,
    sizes: [usize; 8],
    batch: abi::LayerStepBatchParams,
}

/// [host-cost] GDN_LAYER_STEP's index rules prepared for a plan: the conv chain's, then the
/// GDN's ([`GdnConvChain::check_source_rows`]' and GATED_DELTA_NET_FROM_CACHE's, in `check`'s
/// order) — in one pass over the values when both parts read one index view (the layer's
/// `s_copy`, as the fusion builds the step), so a step reads each value once.
#[derive(Clone, Debug)]
pub(crate) struct LayerStepIndexRules {
    chain: ChainIndexRules,
    gdn: FromCacheIndexRules,
}

impl LayerStepIndexRules {
    pub fn new(op: &GdnLayerStep) -> LayerStepIndexRules {
        LayerStepIndexRules { chain: ChainIndexRules::new(&op.chain), gdn: FromCacheIndexRules::new(&op.gdn) }
    }
}

impl IndexRules for LayerStepIndexRules {
    fn check(&self, mem: &dyn Memory) -> Result<()> {
        if let (ChainIndexRules::Table(chain), FromCacheIndexRules::Table(gdn)) = (&self.chain, &self.gdn)
            && chain.index.same_values(&gdn.index)
        {
            return one_pass(chain, gdn, mem);
        }
        self.chain.check(mem)?;
        self.gdn.check(mem)
    }
}

/// Both parts' rules over one index read once, with the errors of running the chain's rules
/// and then the GDN's: the chain's first value out of range, else a row another sequence
/// writes, else the GDN's first value out of range, else a slot on another sequence's row.
fn one_pass(chain: &ChainTable, gdn: &FromCacheTable, mem: &dyn Memory) -> Result<()> {
    // One view: the GDN's read would fail exactly as the chain's does, and the chain reports first.
    let values = chain.index.read(mem).ok_or_else(|| chain.not_an_index_buffer())?;
    let (mut chain_others, mut gdn_range, mut gdn_others) = (false, None, false);
    values.try_for_each(|p, v| {
        let row = chain.range(p, v)?;
        chain_others |= !chain.may_read(p, row);
        // Past the GDN's first value out of range, its slots no longer decide anything.
        if gdn_range.is_none() {
            match gdn.range(p, v) {
                Ok(row) => gdn_others |= !gdn.may_read(p, row),
                Err(e) => gdn_range = Some(e),
            }
        }
        Ok(())
    })?;
    if chain_others {
        return Err(chain.written_by_another());
    }
    if let Some(e) = gdn_range {
        return Err(e);
    }
    if gdn_others { Err(gdn.slot_over_another_row()) } else { Ok(()) }
}

/// What `abi::LayerStepItems` calls when a step has no value or key heads: `check` refuses
/// those before any call.
fn checked_before_the_proof() -> ! {
    unreachable!("GDN_LAYER_STEP: value and key heads ≥ 1 are checked before the readiness proof")
}

/// [test] The most blocks a GDN_LAYER_STEP grid takes: every co-resident block, or at most k
/// when the knob `RGDN_LAYER_STEP_MAX_GRID=k` (k ≥ 1, read once per process) says so. A small
/// grid runs the paths a large one takes only at full size: several item rounds, blocks that run
/// both items and column groups, several groups per warp — so the sweep's small shapes cover
/// them too (`scripts/device-final.sh suite` runs the sweep at k = 1, 3, 7, 24). No bit depends
/// on the grid: the items and groups are the same, only which block runs them changes.
pub(crate) fn max_grid() -> u32 {
    static KNOB: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    let cap = KNOB.get_or_init(|| knob("RGDN_LAYER_STEP_MAX_GRID", 1, u32::MAX));
    cap.unwrap_or(u32::MAX)
}

/// [speed] How many rounds of one block a multiprocessor a step's work may fill and still get a
/// grid fitted to it ([`fitted_grid`]).
pub(crate) const FIT_MAX_ROUNDS: u32 = 2;

/// [speed] The grid of a layer-step kind's launch from `co_resident` (the blocks resident at
/// once): the blocks its work fills ([`work_blocks`]) when that is at most [`FIT_MAX_ROUNDS`]
/// rounds of the `multiprocessors`, else every co-resident block. Measured on the H100 (132
/// multiprocessors; `results/2026-12-06-grid-fit/`), the replay step at n_s = 1, µs a layer step:
/// - T = 1 needs 256 blocks (264 in whole rounds): 6.01 against 6.49 with all 528; T = 2 the
///   same 264: 6.87 against 6.98;
/// - T = 4 needs 320 (396 in whole rounds): 7.94 at 320 and 7.98 at 396 against 7.78 at 528;
///   T = 6 needs 384 (396): 9.55 against 9.25.
///
/// So the idle blocks cost at the smallest steps and pay from three rounds of work on. What the
/// idle blocks buy there is not known: every block past the work only starts, reads the launch's
/// state and arrives. The threshold is those measurements, not a model. The H200 has not measured
/// it. The items and units are the same at any grid, so no bit depends on it ([`max_grid`]).
pub(crate) fn fitted_grid(co_resident: u32, (first, second, second_per_block): (u32, u32, u32), multiprocessors: u32) -> u32 {
    let work = work_blocks(first, second, second_per_block, multiprocessors);
    if work <= FIT_MAX_ROUNDS.saturating_mul(multiprocessors.max(1)) { co_resident.min(work) } else { co_resident }
}

/// [speed] The blocks a step's work fills when every block runs one kind of work — its `first`
/// first-phase items one a block, then its `second` second-phase units `second_per_block` a block
/// (≥ 1 block; `second_per_block` 0 counts as 1) — rounded up to whole rounds of the device's
/// `multiprocessors` (1 at least), so that the second phase, counted from the grid's last block,
/// takes the last round.
pub(crate) fn work_blocks(first: u32, second: u32, second_per_block: u32, multiprocessors: u32) -> u32 {
    let sms = multiprocessors.max(1);
    let work = first.saturating_add(second.div_ceil(second_per_block.max(1))).max(1);
    work.div_ceil(sms).saturating_mul(sms)
}

/// The persistent grid of a layer-step kind's cooperative launch (GDN_LAYER_STEP,
/// GDN_LAYER_STEP_REPLAY): as many blocks of `GDN_LAYER_STEP_BLOCK` threads as are resident at
/// once for `entry` with `shared` bytes ([`max_grid`] at most), so that the first-phase items and
/// the second-phase units share blocks only when together they need more than the grid; fewer
/// where a small step's work leaves most of them idle ([`fitted_grid`]). Refused by name when the
/// entry fits no multiprocessor, or when a work index plus the grid (the first phase's `first`
/// items, the second phase's `second` units handed out `second_per_block` a block) would overflow
/// u32.
pub(crate) fn persistent_grid(
    gpu: &Gpu,
    op: &'static str,
    entry: &'static str,
    shared: u32,
    (first, second, second_per_block): (u32, u32, u32),
) -> Result<LaunchDims> {
    let co_resident = gpu.co_resident_blocks(entry, abi::GDN_LAYER_STEP_BLOCK, shared)?;
    if co_resident == 0 {
        return Err(Error::Unsupported { op, what: format!("{entry} with {shared} bytes of shared memory fits no multiprocessor") });
    }
    let grid = fitted_grid(co_resident, (first, second, second_per_block), gpu.multiprocessors()?).min(max_grid());
    let units = grid.checked_mul(second_per_block);
    if first.checked_add(grid).is_none() || units.and_then(|u| second.checked_add(u)).is_none() {
        return Err(Error::Unsupported { op, what: "work items + grid overflow u32".into() });
    }
    Ok(LaunchDims::new((grid, 1, 1), (abi::GDN_LAYER_STEP_BLOCK, 1, 1)).with_shared_bytes(shared))
}

impl Op for GdnLayerStep {
    fn name(&self) -> &'static str {
        OP
    }

    fn validate(&self, mem: &dyn Memory) -> Result<()> {
        self.check(mem).map(|_| ())
    }

    /// The parts' index rules: no rule of the step's own (links, disjointness, readiness)
    /// reads an index value.
    fn check_indices(&self, mem: &dyn Memory) -> Result<()> {
        self.chain.check_indices(mem)?;
        self.gdn.check_indices(mem)
    }

    /// The same rules prepared once (`LayerStepIndexRules`: both parts' tables, one pass over
    /// one shared index).
    fn index_rules(&self) -> Box<dyn IndexRules> {
        Box::new(LayerStepIndexRules::new(self))
    }

    fn prepare(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<PreparedLaunch> {
        let LayerStepLaunch { entry, shared_bytes: shared, params, first_phase_items: first, second_phase_items: second } =
            self.launch(mem, mem, gpu.grid_sync())?;
        // Persistent blocks: block b runs the first-phase items b, b + G, … and block G − 1 − b's
        // warp w the column groups 4·b + w, 4·b + w + 4·G, ….
        let dims = persistent_grid(gpu, OP, entry, shared, (first, second, abi::GDN_LAYER_STEP_WARPS))?;
        let args = [KernelArg::Params(ParamBlock::of(&params)?)];
        // SAFETY: `check` proved each part valid for the views its kernel body reads and writes
        // (as its own launch would: the chain for C/128 tiles of n_s sequences, the products for
        // H_v rows and n_t·n_s columns of ggml's block size, the GDN for H_v heads × 32 column
        // groups of n_s sequences), the links that make the second phase read exactly the first
        // phase's outputs, the disjointness the kernel's docs rely on, and [seq-batch] the
        // schedule's chunk counters (≤ BATCH_MAX_CHUNKS), item counts (u32) and the ssm cache's
        // 16-byte row alignment; the grid is at most the
        // device's co-resident block count for this entry, block and shared memory, and the
        // launch is cooperative (the driver refuses a grid that cannot be resident at once), so
        // no wait for an item's flag (or [seq-batch] a chunk's count) can wait on an unscheduled
        // block; the first-phase items fit the readiness state's flags (`items`) and one warp's
        // lanes (2·⌈n_t/2⌉ + 3 ≤ 32: abi);
        // the state is this Gpu's, whose one stream runs launches in order (each leaves `done` =
        // `arrived` for the next); every work index fits u32 with the grid added; the shared
        // memory is the entry's layout; `params` is the entry's parameter struct.
        unsafe { gpu.prepare_cooperative(entry, dims, &args) }
    }

    fn reference(&self, mem: &mut HostMemory, mufu: &mut dyn Mufu) -> Result<()> {
        // Everything validated before anything is written.
        self.check(mem)?;
        // The three parts' references in graph order: equal to them (and to the unfused chain)
        // by construction.
        self.chain.reference(mem, mufu)?;
        self.gate.reference(mem, mufu)?;
        self.gdn.reference(mem, mufu)
    }

    /// Every input of the parts from outside the step: the GDN's q, k, v, g and β are the
    /// step's own outputs (read after it wrote them), not inputs.
    fn inputs(&self) -> Vec<Tensor> {
        let mut v = self.chain.inputs();
        v.extend(self.gate.inputs());
        v.extend([self.gdn.ssm_cache, self.gdn.source_rows]);
        v
    }

    fn outputs(&self) -> Vec<Tensor> {
        let mut v = self.chain.outputs();
        v.extend(self.gate.outputs());
        v.extend(self.gdn.outputs());
        v
    }

    fn must_write(&self) -> Vec<Tensor> {
        let mut v = self.chain.must_write();
        v.extend(self.gate.must_write());
        v.extend(self.gdn.must_write());
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fusion::{Options, fuse, sweep};
    use crate::graph::layer::{Built, LayerLayout, LayerSpec, Outputs, StackSpec};
    use crate::layer::{GdnShape, Step};
    use crate::ops::Precision;
    use crate::reference::math::ExactMufu;
    use crate::tensor::DType;

    /// C = (2·1 + 2)·128 = 512: four conv tiles, two value heads.
    const SMALL: GdnShape = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 128, d_conv: 4, eps: 1e-6 };

    fn spec(shape: GdnShape, step: Step, weights: DType, precision: Precision, layout: LayerLayout) -> StackSpec {
        StackSpec { layers: vec![LayerSpec { weights, precision, layout, ..LayerSpec::new(shape, step) }], outputs: Outputs::Products }
    }

    /// A built one-layer graph and the layer step the fusion pass makes of it.
    fn built(spec: &StackSpec) -> (Built, GdnLayerStep) {
        let b = sweep::build(spec, 5, sweep::Planning::FusionAware).unwrap();
        let (nodes, report) = fuse(b.fresh_nodes().unwrap(), &b.live_out(), Options::ALL);
        let op = nodes.iter().find_map(|n| n.get::<GdnLayerStep>()).cloned().unwrap_or_else(|| panic!("no layer step:\n{report}"));
        (b, op)
    }

    fn base() -> (Built, GdnLayerStep) {
        built(&spec(SMALL, Step::new(4, 3), DType::F32, Precision::Default, LayerLayout::Ggml))
    }

    /// The grid's work bound: every first-phase item a block, the second phase's units rounded
    /// up to whole blocks, the sum to whole rounds of the multiprocessors; never 0 blocks, never
    /// a wrapped sum. The grid is fitted to it only up to two rounds of work.
    #[test]
    fn the_grid_is_fitted_to_small_work_only() {
        // 9B at n_s = 1 on 132 multiprocessors: 64 tiles + 64 row items at T = 1, then 1024
        // column groups four a block (GDN_LAYER_STEP: 384 → 396) or 128 replay-verify blocks one a
        // block (GDN_LAYER_STEP_REPLAY: 256 → 264); at T = 4 the replay step's 192 + 128 → 396.
        assert_eq!(work_blocks(128, 1024, abi::GDN_LAYER_STEP_WARPS, 132), 396);
        assert_eq!(work_blocks(128, 128, 1, 132), 264);
        assert_eq!(work_blocks(192, 128, 1, 132), 396);
        assert_eq!(work_blocks(3, 5, 4, 1), 5);
        assert_eq!(work_blocks(3, 5, 4, 4), 8);
        assert_eq!(work_blocks(0, 0, 4, 132), 132);
        assert_eq!(work_blocks(7, 0, 0, 0), 7);
        assert_eq!(work_blocks(u32::MAX, 9, 1, 132), u32::MAX);
        // The replay step (528 co-resident blocks) fitted at T = 1 and 2, not from T = 3 on; the
        // layer step (396) never at 9B's n_s = 1.
        assert_eq!(fitted_grid(528, (128, 128, 1), 132), 264);
        assert_eq!(fitted_grid(528, (192, 128, 1), 132), 528);
        assert_eq!(fitted_grid(396, (128, 1024, abi::GDN_LAYER_STEP_WARPS), 132), 396);
        // Small steps on small grids: never above the co-resident blocks.
        assert_eq!(fitted_grid(3, (2, 1, 1), 132), 3);
        assert_eq!(fitted_grid(528, (1, 1, 1), 1), 2);
        assert_eq!(fitted_grid(528, (1, 1, 1), 0), 2);
        assert_eq!(fitted_grid(528, (2, 1, 1), 1), 528);
        // Over a range of steps and devices: never above the co-resident blocks, and a grid
        // fitted below them still gives every first-phase item and every second-phase block a
        // block of its own (no block runs both phases, the property the full grid has).
        for co_resident in [1, 3, 132, 264, 396, 528, 1056] {
            for sms in [1, 7, 132] {
                for (first, second, per_block) in [(1, 0, 4), (2, 9, 4), (64, 64, 1), (128, 1024, 4), (192, 128, 1), (4096, 8192, 4)] {
                    let grid = fitted_grid(co_resident, (first, second, per_block), sms);
                    assert!(grid >= 1 && grid <= co_resident, "{grid} blocks of {co_resident}");
                    if grid < co_resident {
                        assert!(grid >= first + second.div_ceil(per_block), "{grid} blocks for {first} + {second}/{per_block}");
                    }
                }
            }
        }
    }

    #[test]
    fn params_have_no_padding_and_entries_are_named() {
        assert_eq!(std::mem::size_of::<abi::GdnLayerStepParams>(), 312 + 144 + 280 + 8 + 4 * 4 + 24);
        assert_eq!(std::mem::align_of::<abi::GdnLayerStepParams>(), 8);
        assert!(std::mem::size_of::<abi::GdnLayerStepParams>() <= crate::gpu::PARAM_BLOCK_BYTES);
        use abi::mul_mat_vec_kind::*;
        assert_eq!(abi::gdn_layer_step_entry(F32, 4), Some("gdn_layer_step_f32_d4"));
        assert_eq!(abi::gdn_layer_step_entry(F16_F32, 3), Some("gdn_layer_step_f16_f32acc_d3"));
        assert_eq!(abi::gdn_layer_step_entry(BF16, 5), Some("gdn_layer_step_bf16_d5"));
        assert_eq!(abi::gdn_layer_step_entry(F16_HALF, 2), None);
        assert_eq!(abi::gdn_layer_step_entry(9, 4), None);
        // Every part's shared memory fits: the chain's tile, the mat-vec rows' reduction buffer
        // and staging area, the second phase's staged token inputs.
        for (d_conv, n_t) in [(3, 1), (4, 8), (5, 16)] {
            let bytes = abi::gdn_layer_step_shared_bytes(d_conv, n_t);
            assert!(bytes >= abi::gdn_conv_chain_shared_bytes(d_conv, n_t));
            assert!(bytes >= abi::MUL_MAT_VEC_SHARED_BYTES + abi::GDN_LAYER_STEP_ROW_STAGE_BYTES);
            assert!(bytes >= abi::GDN_LAYER_STEP_TOKEN_STAGE_BYTES);
            // Under the 48 KiB a launch gets without opting in.
            assert!(bytes <= 48 * 1024);
        }
    }

    /// The kernel assumes 128-thread blocks: every entry's PTX says so (`.maxntid`), with the
    /// occupancy bound ptxas allocates registers for.
    #[test]
    fn every_entry_carries_its_launch_bounds() {
        let ptx = crate::kernels::PTX;
        for kind in 0..4 {
            for d_conv in abi::GDN_CONV_CHAIN_WIDTHS {
                for entry in [abi::gdn_layer_step_entry(kind, d_conv).unwrap(), abi::gdn_layer_step_seqs_entry(kind, d_conv).unwrap()] {
                    let start = ptx.find(&format!(".entry {entry}(")).unwrap_or_else(|| panic!("{entry} missing"));
                    let header = &ptx[start..start + ptx[start..].find('{').unwrap()];
                    let seqs = entry.starts_with("gdn_layer_step_seqs_");
                    let blocks = if d_conv == 5 {
                        2
                    } else if seqs {
                        4
                    } else {
                        3
                    };
                    assert!(
                        header.contains(".maxntid 128, 1, 1") && header.contains(&format!(".minnctapersm {blocks}")),
                        "{entry}: {header}"
                    );
                }
            }
        }
        assert!(abi::PTX_LAUNCH_BOUNDS.contains(&("gdn_layer_step_", abi::GDN_LAYER_STEP_BLOCK, 3)));
        assert!(abi::PTX_LAUNCH_BOUNDS.contains(&("gdn_layer_step_seqs_", abi::GDN_LAYER_STEP_BLOCK, 4)));
    }

    /// The fused graph (one GDN_LAYER_STEP, plus a fresh cell's SCALEs) equals the unfused
    /// chain on the CPU, every output and both caches, for every weight kind, both layouts, the
    /// read row among the written rows and not, a fresh cell, n_t 1–16.
    #[test]
    fn the_fused_step_equals_the_unfused_chain_on_the_cpu() {
        let other_cell = Step { cells: 3, kv_head: 2, src_cell: 1, zero_cell: Some(1), ..Step::new(3, 2) };
        let cases = [
            (SMALL, Step::new(1, 0), DType::F32, Precision::Default, LayerLayout::Ggml),
            (SMALL, Step::new(4, 3), DType::BF16, Precision::Default, LayerLayout::PrAliasing),
            (SMALL, Step::new(8, 15), DType::F16, Precision::Default, LayerLayout::Ggml),
            (SMALL, Step::new(5, 2), DType::F16, Precision::F32, LayerLayout::PrAliasing),
            (
                GdnShape { d_conv: 3, n_k_heads: 2, n_v_heads: 4, n_embd: 96, ..SMALL },
                other_cell,
                DType::F32,
                Precision::Default,
                LayerLayout::Ggml,
            ),
            (GdnShape { d_conv: 5, ..SMALL }, Step::new(2, 7), DType::BF16, Precision::Default, LayerLayout::Ggml),
            // [wide-pair] n_t 9–16: ggml's products split into ≤ 8-column launches, the pair whole.
            (SMALL, Step::new(9, 3), DType::F32, Precision::Default, LayerLayout::Ggml),
            (SMALL, Step::new(16, 15), DType::BF16, Precision::Default, LayerLayout::Ggml),
            (SMALL, Step::new(12, 7), DType::F16, Precision::F32, LayerLayout::PrAliasing),
            (GdnShape { d_conv: 5, ..SMALL }, Step::new(13, 2), DType::F16, Precision::Default, LayerLayout::PrAliasing),
            (
                GdnShape { d_conv: 3, n_k_heads: 2, n_v_heads: 4, n_embd: 96, ..SMALL },
                Step { n_tokens: 11, ..other_cell },
                DType::BF16,
                Precision::Default,
                LayerLayout::Ggml,
            ),
        ];
        for (i, (shape, step, weights, precision, layout)) in cases.into_iter().enumerate() {
            let spec = spec(shape, step, weights, precision, layout);
            let r = sweep::off_on_cpu(&spec, i as u64, &mut ExactMufu).unwrap();
            assert_eq!(r.report.fired("layer_step"), 1, "case {i}: {}", r.report);
            assert!(r.identical(), "case {i}: {:?}", r.mismatches);
            let b = sweep::build(&spec, i as u64, sweep::Planning::FusionAware).unwrap();
            let (_, on, _) = sweep::compile_off_on(&b, Options::ALL).unwrap();
            let names: Vec<&str> = on.iter().map(|n| n.op.name()).collect();
            assert!(names.iter().all(|n| [OP, "SCALE", "STAGE"].contains(n)) && names.contains(&OP), "case {i}: {names:?}");
        }
    }

    /// [seq-batch] Steps of several sequences: the fused graph (one GDN_LAYER_STEP over every
    /// sequence) equals the unfused chain on the CPU, every output and both caches — sequences
    /// reading their own cells (some at a rollback depth), two sequences sharing a source row
    /// nobody writes, both layouts, every weight kind, n_t 1–16, n_s 2–5, small chunks (several
    /// chunks a launch); both launches (each sequence's own items, the batched schedule).
    #[test]
    fn several_sequences_fuse_into_one_batched_step_equal_to_the_unfused_chain() {
        // Cells 0 … 5; the sequences write cells kv_head + s. (src cell, rollback depth) per
        // sequence after the first.
        let own = |n_t: usize, r: usize, n_s: usize| {
            let more: Vec<(usize, usize)> = (1..n_s).map(|s| (s, s % (r + 1))).collect();
            Step { cells: 6, ..Step::new(n_t, r) }.with_sequences(&more).unwrap()
        };
        // Sequences 1 and 2 both read cell 5, which no sequence writes.
        let shared = Step { cells: 6, kv_head: 1, src_cell: 1, ..Step::new(3, 2) }.with_sequences(&[(5, 1), (5, 1)]).unwrap();
        let cases = [
            (SMALL, own(1, 0, 2), DType::F32, Precision::Default, LayerLayout::Ggml),
            (SMALL, own(4, 3, 3), DType::BF16, Precision::Default, LayerLayout::PrAliasing),
            (SMALL, shared, DType::F16, Precision::Default, LayerLayout::Ggml),
            (SMALL, own(16, 15, 2), DType::F16, Precision::F32, LayerLayout::Ggml),
            (
                GdnShape { d_conv: 3, n_k_heads: 2, n_v_heads: 6, n_embd: 96, ..SMALL },
                own(5, 2, 5),
                DType::F32,
                Precision::Default,
                LayerLayout::PrAliasing,
            ),
            (GdnShape { d_conv: 5, ..SMALL }, own(9, 4, 4), DType::BF16, Precision::Default, LayerLayout::Ggml),
        ];
        let mut launches = [0usize; 2];
        for (i, (shape, step, weights, precision, layout)) in cases.into_iter().enumerate() {
            let spec = spec(shape, step, weights, precision, layout);
            let r = sweep::off_on_cpu(&spec, 40 + i as u64, &mut ExactMufu).unwrap();
            assert_eq!(r.report.fired("layer_step"), 1, "case {i}: {}", r.report);
            assert!(r.identical(), "case {i}: {:?}", r.mismatches);
            let b = sweep::build(&spec, i as u64, sweep::Planning::FusionAware).unwrap();
            let (_, on, _) = sweep::compile_off_on(&b, Options::ALL).unwrap();
            let step_op = on.iter().find_map(|n| n.get::<GdnLayerStep>()).expect("a layer step");
            let shape = step_op.check(&b.mem).unwrap();
            assert!(shape.gdn.n_seqs == step.n_seqs() && shape.batch.n_seqs as usize == step.n_seqs(), "case {i}");
            launches[usize::from(shape.scheduled())] += 1;
        }
        assert!(launches.iter().all(|&n| n > 0), "{launches:?}");
    }

    /// [test] `launch_with_split` takes exactly the splits the entries run — the host's own gives
    /// `launch`'s entry and parameters byte for byte — and refuses every other by name: a
    /// batched schedule or two groups a warp for one sequence, another n_s, a chunk past n_s,
    /// conv items past the chunk, a third group a warp, a one-row flag of 2, padding.
    #[test]
    fn a_forced_work_split_is_checked_and_launches_as_the_hosts_own() {
        struct At(u64);
        impl KernelAddresses for At {
            fn address(&self, t: &Tensor) -> u64 {
                self.0 + 256 * t.buffer.0 as u64 + t.layout.offset as u64
            }
        }
        let bytes = |p: &abi::GdnLayerStepParams| ParamBlock::of(p).unwrap().bytes().to_vec();
        let unsupported = |r: Result<LayerStepLaunch>| matches!(r, Err(Error::Unsupported { op: OP, what }) if what.contains("work split"));
        // One sequence: its own split is the single-sequence entries with one group a warp.
        let (b, op) = base();
        let own = op.launch(&b.mem, &At(1 << 20), 64).unwrap();
        let split = abi::LayerStepBatchParams { n_seqs: 1, groups_per_warp: 1, ..abi::LayerStepBatchParams::default() };
        let forced = op.launch_with_split(&b.mem, &At(1 << 20), 64, split).unwrap();
        assert_eq!((own.entry, own.shared_bytes, bytes(&own.params)), (forced.entry, forced.shared_bytes, bytes(&forced.params)));
        assert_eq!(own.entry, "gdn_layer_step_f32_d4");
        for bad in [
            abi::LayerStepBatchParams { groups_per_warp: 2, ..split },
            abi::LayerStepBatchParams { n_seqs: 2, ..split },
            abi::LayerStepBatchParams { chunk_seqs: 1, tile_seqs: 1, ..split },
            abi::LayerStepBatchParams { tile_seqs: 1, ..split },
            abi::LayerStepBatchParams { _pad: 1, ..split },
        ] {
            assert!(unsupported(op.launch_with_split(&b.mem, &At(0), 64, bad)), "{bad:?}");
        }
        // Three sequences: both kinds run; the batched schedule's limits hold.
        let step = Step { cells: 6, ..Step::new(4, 3) }.with_sequences(&[(1, 1), (2, 2)]).unwrap();
        let (b, op) = built(&spec(SMALL, step, DType::F32, Precision::Default, LayerLayout::Ggml));
        let batched = abi::LayerStepBatchParams { n_seqs: 3, chunk_seqs: 2, tile_seqs: 2, groups_per_warp: 2, one_row_items: 1, _pad: 0 };
        let launch = op.launch_with_split(&b.mem, &At(0), 64, batched).unwrap();
        assert_eq!((launch.entry, launch.params.batch), ("gdn_layer_step_batch_f32_d4", batched));
        let seqs = abi::LayerStepBatchParams { n_seqs: 3, groups_per_warp: 2, ..abi::LayerStepBatchParams::default() };
        assert_eq!(op.launch_with_split(&b.mem, &At(0), 64, seqs).unwrap().entry, "gdn_layer_step_seqs_f32_d4");
        for bad in [
            abi::LayerStepBatchParams { chunk_seqs: 4, ..batched },
            abi::LayerStepBatchParams { tile_seqs: 3, ..batched },
            abi::LayerStepBatchParams { groups_per_warp: 3, ..batched },
            abi::LayerStepBatchParams { one_row_items: 2, ..batched },
            abi::LayerStepBatchParams { groups_per_warp: 0, ..seqs },
        ] {
            assert!(unsupported(op.launch_with_split(&b.mem, &At(0), 64, bad)), "{bad:?}");
        }
    }

    /// [seq-batch] The launch each batch size and token count gets by default at 9B (C/128 = 64,
    /// H_v = 32): the single-sequence entries where they were measured faster and their items fit
    /// the 4096 flags, the batched schedule elsewhere; one sequence always the single-sequence
    /// entries. (The defaults only: a process with the knob `RGDN_BATCH_SEQ_ITEMS` set says so
    /// and checks nothing.)
    #[test]
    fn small_batches_run_on_the_single_sequence_entries_where_measured_faster() {
        if std::env::var_os("RGDN_BATCH_SEQ_ITEMS").is_some() {
            eprintln!("RGDN_BATCH_SEQ_ITEMS is set: the defaults are not what this process runs; not checked");
            return;
        }
        let own = |n_s: usize, n_t: usize| 64 * n_s + 2 * 32 * (n_s * n_t).div_ceil(2);
        let runs_own = |n_s: usize, n_t: usize| StepShape::split(n_s, n_t, own(n_s, n_t)).chunk_seqs == 0;
        for (n_s, n_t, expected) in [
            (1, 16, true),
            (2, 1, true),
            (2, 16, true),
            (4, 8, true),
            // 4·64 + 64·32 = 2304 items: within the 4096 flags since session 18 (2048 before).
            (4, 15, true),
            (4, 16, true),
            (5, 2, true),
            (8, 1, true),
            (8, 2, true),
            (5, 3, true),
            (8, 4, true),
            (8, 5, false),
            (9, 3, false),
            (16, 1, true),
            (12, 1, true),
            // 16·64 + 64·16 = 2048 items (every flag of the 2048 before session 18).
            (16, 2, true),
            (16, 3, false),
            (17, 1, false),
            (64, 4, false),
        ] {
            assert_eq!(runs_own(n_s, n_t), expected, "n_s = {n_s}, n_t = {n_t}");
            let split = StepShape::split(n_s, n_t, own(n_s, n_t));
            assert_eq!(split.n_seqs as usize, n_s);
            // Several sequences on the single-sequence entries: two groups a warp.
            if expected && n_s >= 2 && std::env::var_os("RGDN_BATCH_SEQ_GROUPS").is_none() {
                assert_eq!(split.groups_per_warp, SEQ_ITEMS_GROUPS_PER_WARP, "n_s = {n_s}, n_t = {n_t}");
            }
        }
    }

    /// [seq-batch] Batched steps split into two chunks, four from 64 sequences of 4 tokens on (the
    /// measured rule, [`FOUR_CHUNKS_MIN_SEQS`]).
    #[test]
    fn batched_steps_take_four_chunks_only_where_measured_faster() {
        if std::env::var_os("RGDN_BATCH_CHUNK").is_some() {
            eprintln!("RGDN_BATCH_CHUNK is set: the defaults are not what this process runs; not checked");
            return;
        }
        for (n_s, n_t, chunk_seqs) in
            [(16, 4, 8), (32, 8, 16), (64, 1, 32), (64, 2, 32), (64, 4, 16), (64, 16, 16), (256, 4, 64), (65, 4, 17)]
        {
            assert_eq!(StepShape::batch_split(n_s, n_t).chunk_seqs, chunk_seqs, "n_s = {n_s}, n_t = {n_t}");
        }
    }

    /// [seq-batch] Both kinds of mat-vec item (4-head items and one-row items), on batched steps of
    /// several shapes and splits: every first-phase output byte is written by exactly one item
    /// of the schedule (none twice, none missing), and the readiness proof finds every writer
    /// of a head's reads in its chunk.
    #[test]
    fn batched_first_phase_items_write_every_output_byte_once_in_both_kinds() {
        let own = |n_t: usize, n_s: usize| {
            let more: Vec<(usize, usize)> = (1..n_s).map(|s| (s, 0)).collect();
            Step { cells: 8, ..Step::new(n_t, n_t - 1) }.with_sequences(&more).unwrap()
        };
        let odd_heads = GdnShape { d_conv: 3, n_k_heads: 2, n_v_heads: 6, n_embd: 96, ..SMALL };
        let mut kinds_seen = [0usize; 2];
        for (shape, n_t, n_s) in [(SMALL, 1, 2), (SMALL, 3, 3), (odd_heads, 5, 5), (odd_heads, 1, 7), (SMALL, 16, 4)] {
            let (b, op) = built(&spec(shape, own(n_t, n_s), DType::F32, Precision::Default, LayerLayout::Ggml));
            let mut checked = op.check(&b.mem).unwrap();
            // The batched entries' schedule, whichever launch the defaults give this step.
            checked.batch = StepShape::batch_split(n_s, n_t);
            for (one_row_items, chunk_seqs) in [(0, 1), (0, 2), (1, 1), (1, 2), (1, n_s as u32)] {
                let mut step = checked;
                step.batch.one_row_items = one_row_items;
                step.batch.chunk_seqs = chunk_seqs;
                step.batch.tile_seqs = step.batch.tile_seqs.min(chunk_seqs);
                let schedule = step.schedule();
                let (mut union, mut total) = (ByteSet::new(), 0usize);
                let mut segment = 0;
                while segment < schedule.n_segments() {
                    if let (false, _) = schedule.segment(segment) {
                        for offset in 0..schedule.segment_len(segment) {
                            let (item, _) = schedule.item(abi::BatchCursor { segment, offset });
                            kinds_seen[one_row_items as usize] +=
                                usize::from(matches!(item, abi::BatchItem::Row { .. }) == (one_row_items == 1));
                            let w = op.batch_item_writes(&step, item);
                            assert!(!w.is_empty(), "{item:?} writes nothing ({step:?})");
                            total += w.len();
                            union.union_with(&w);
                        }
                    }
                    segment += 1;
                }
                assert_eq!(union.len(), total, "a byte written twice: {step:?}");
                assert_eq!(union, first_phase_outputs(&op, &step, n_s), "{step:?}");
                assert_eq!(op.batch_readiness_gap(&step), None, "{step:?}");
            }
        }
        assert!(kinds_seen.iter().all(|&n| n > 0), "{kinds_seen:?}");
    }

    /// [seq-batch] A sequence reading a row another sequence writes (conv and ssm caches): the fused
    /// ops refuse it by name on the memory, so the layer stays unfused (and equal).
    #[test]
    fn a_sequence_reading_another_sequences_row_stays_unfused() {
        // Sequence 1 reads cell 0, which sequence 0 writes (group 0: both caches).
        let step = Step { cells: 3, ..Step::new(4, 3) }.with_sequences(&[(0, 0)]).unwrap();
        assert!(step.reads_another_sequences_row(1));
        let spec = spec(SMALL, step, DType::F32, Precision::Default, LayerLayout::Ggml);
        let r = sweep::off_on_cpu(&spec, 7, &mut ExactMufu).unwrap();
        assert_eq!(r.report.fired("layer_step") + r.report.fired("conv_chain") + r.report.fired("state_read"), 0, "{}", r.report);
        assert!(r.identical(), "{:?}", r.mismatches);
        let text = r.report.to_string();
        assert!(text.contains("another sequence"), "{text}");
    }

    #[test]
    fn a_valid_step_passes_and_declares_its_effects() {
        let (b, op) = base();
        let shape = op.check(&b.mem).unwrap();
        assert_eq!((shape.chain.n_tokens, shape.products.ncols, shape.gdn.n_heads, shape.gdn.n_seqs), (4, 4, 2, 1));
        // 2 products × 2 rows × ⌈4/2⌉ column pairs + 4 tiles; 2 heads × 32 column groups.
        assert_eq!(shape.items().unwrap(), (2 * 2 * 2 + 512 / 128, 2 * 32));
        // The GDN's q, k, v, g and β are the step's own outputs, not inputs.
        let inputs = op.inputs();
        for t in [op.gdn.q, op.gdn.k, op.gdn.g, op.gdn.beta] {
            assert!(!inputs.contains(&t));
        }
        assert!(inputs.contains(&op.gdn.ssm_cache) && inputs.contains(&op.chain.qkv) && inputs.contains(&op.gate.pair.first.input));
        let outputs = op.outputs();
        for t in [op.chain.conv_out, op.chain.q_norm, op.gate.gate, op.gate.beta, op.gdn.out, op.gdn.states] {
            assert!(outputs.contains(&t));
        }
        assert_eq!(op.must_write().len(), op.chain.must_write().len() + op.gate.must_write().len() + op.gdn.must_write().len());
        assert_eq!(op.name(), OP);
        let mut mem = b.mem.clone();
        op.reference(&mut mem, &mut ExactMufu).unwrap();
    }

    #[test]
    fn refuses_steps_out_of_scope() {
        let (mut b, op) = base();
        // Seventeen tokens: over GDN_LAYER_STEP_MAX_TOKENS (the scope check comes first,
        // before the parts' own, with this op's reason naming the limit).
        let mut o = op.clone();
        o.chain.qkv = b.mem.alloc_tensor(DType::F32, [512, 17, 1, 1]);
        assert!(
            matches!(o.validate(&b.mem), Err(Error::Unsupported { op: OP, ref what }) if what.contains("at most 16")),
            "{:?}",
            o.validate(&b.mem)
        );
        // Nine tokens is in scope: the qkv alone of nine columns is then the chain's link error
        // (the other parts still have the base step's four), not a scope refusal.
        let mut o = op.clone();
        o.chain.qkv = b.mem.alloc_tensor(DType::F32, [512, 9, 1, 1]);
        assert!(!matches!(o.validate(&b.mem), Err(Error::Unsupported { op: OP, .. })), "{:?}", o.validate(&b.mem));
        // A conv chain of head dim 64.
        let mut o = op.clone();
        o.chain.head_dim = 64;
        assert!(matches!(o.validate(&b.mem), Err(Error::Unsupported { op: OP, .. })));
        // A part's own error is that part's.
        let mut o = op.clone();
        o.chain.eps = f32::NAN;
        assert!(matches!(o.validate(&b.mem), Err(Error::Invalid { op: "GDN_CONV_CHAIN", .. })));
        // Nothing is written when validation fails.
        let before = b.mem.clone();
        assert!(o.reference(&mut b.mem, &mut ExactMufu).is_err());
        assert!(b.mem.bytes(b.arena) == before.bytes(b.arena));
    }

    #[test]
    fn refuses_parts_that_are_not_linked() {
        let (mut b, op) = base();
        let is_link = |r: &Result<()>| matches!(r, Err(Error::Invalid { op: OP, what }) if what.contains("not linked"));
        type Edit = fn(&mut GdnLayerStep, &mut HostMemory);
        let edits: [(&str, Edit); 6] = [
            ("q", |o, m| o.gdn.q = m.alloc_tensor(DType::F32, o.gdn.q.ne())),
            ("k from q_norm", |o, _| o.gdn.k = o.chain.q_norm),
            ("v from the k channels", |o, _| {
                // One head earlier: channels 128 … 384 of conv_out (still a valid view for the GDN).
                let nb = o.chain.conv_out.layout.nb;
                o.gdn.v = o.chain.conv_out.view(o.gdn.v.ne(), [4, 4 * 128, nb[1], nb[2]], 4 * 128);
            }),
            ("g", |o, m| o.gdn.g = m.alloc_tensor(DType::F32, o.gdn.g.ne())),
            ("beta from the gate", |o, _| o.gdn.beta = o.gdn.g),
            ("g from beta", |o, _| o.gdn.g = o.gdn.beta),
        ];
        for (what, edit) in edits {
            let mut o = op.clone();
            edit(&mut o, &mut b.mem);
            let r = o.validate(&b.mem);
            assert!(is_link(&r), "{what}: {r:?}");
            assert!(o.broken_link().is_some(), "{what}");
        }
        assert_eq!(op.broken_link(), None);
    }

    #[test]
    fn refuses_parts_that_share_bytes_across_phases() {
        let (mut b, op) = base();
        // The alpha product written over the conv weight (each part alone is valid).
        let mut o = op.clone();
        let shared = b.mem.alloc_tensor(DType::F32, [4 * 512 + 64, 1, 1, 1]);
        o.chain.weight = shared.view(o.chain.weight.ne(), o.chain.weight.layout.nb, 0);
        o.gate.pair.first.dst = shared.view(o.gate.pair.first.dst.ne(), o.gate.pair.first.dst.layout.nb, 4 * (4 * 512 - 1));
        assert!(o.gate.check(&b.mem).is_ok() && o.chain.check(&b.mem).is_ok());
        assert!(
            matches!(o.validate(&b.mem), Err(Error::Aliasing { op: OP, a: "alpha", b: "conv_weight", .. })),
            "{:?}",
            o.validate(&b.mem)
        );
        // The attention output written over the products' input `cur`.
        let mut o = op.clone();
        let (cur, out) = (o.gate.pair.first.input, o.gdn.out);
        let n_cur = 64 * 4;
        let shared = b.mem.alloc_tensor(DType::F32, [n_cur + 128 * 2 * 4, 1, 1, 1]);
        let cur = shared.view(cur.ne(), cur.layout.nb, 0);
        o.gate.pair.first.input = cur;
        o.gate.pair.second.input = cur;
        o.gdn.out = shared.view(out.ne(), out.layout.nb, 4 * (n_cur - 1));
        assert!(matches!(o.validate(&b.mem), Err(Error::Aliasing { op: OP, a: "out", b: "cur", .. })), "{:?}", o.validate(&b.mem));
        // The conv chain's q norm written over the products' dt_bias.
        let mut o = op.clone();
        let shared = b.mem.alloc_tensor(DType::F32, [128 * 4 + 2, 1, 1, 1]);
        o.gate.dt_bias = shared.view(o.gate.dt_bias.ne(), o.gate.dt_bias.layout.nb, 0);
        o.chain.q_norm = shared.view(o.chain.q_norm.ne(), o.chain.q_norm.layout.nb, 4);
        o.gdn.q = o.chain.q_norm;
        assert!(matches!(o.validate(&b.mem), Err(Error::Aliasing { op: OP, a: "q_norm", b: "dt_bias", .. })), "{:?}", o.validate(&b.mem));
    }

    /// The kernel's own waits for `op` (what `check` proves them with).
    fn kernel_waits(op: &GdnLayerStep, shape: &StepShape) -> impl Fn(u32, u32, u32) -> Option<u32> {
        let items = op.step_items(shape);
        move |seq, head, lane| items.item_read_by(seq, head, lane, checked_before_the_proof)
    }

    /// `op` checked, run as every sequence's own items on the single-sequence entries whatever
    /// the defaults or the knob choose for its n_s (the flags fit: asserted).
    fn own_items_shape(op: &GdnLayerStep, mem: &dyn Memory) -> StepShape {
        let mut shape = op.check(mem).unwrap();
        shape.batch = abi::LayerStepBatchParams { n_seqs: shape.gdn.n_seqs as u32, ..Default::default() };
        assert!(shape.items().is_ok(), "{shape:?}");
        shape
    }

    /// Layer steps of every preset and a few small shapes (H_k < H_v, one key head, several),
    /// n_t 1 … 16 with 1 + R = n_t and R = 0, both layouts; and [seq-batch] steps of 2 to 5
    /// sequences (own cells, some at a rollback depth; two sharing a source row).
    fn steps_to_prove() -> Vec<(Built, GdnLayerStep)> {
        let small_many_keys = GdnShape { n_embd: 64, n_k_heads: 2, n_v_heads: 6, head_dim: 128, d_conv: 3, eps: 1e-6 };
        let mut out = Vec::new();
        for (shape, tokens) in [
            (SMALL, &[1usize, 2, 3, 4, 7, 8, 9, 16][..]),
            (small_many_keys, &[1, 5, 16]),
            (GdnShape::QWEN35_4B, &[1, 4]),
            (GdnShape::QWEN35_9B, &[1, 4, 8, 16]),
            (GdnShape::QWEN35_27B, &[3, 16]),
        ] {
            for &n_t in tokens {
                for (rollback, layout) in [(n_t - 1, LayerLayout::Ggml), (0, LayerLayout::PrAliasing)] {
                    out.push(built(&spec(shape, Step::new(n_t, rollback), DType::F32, Precision::Default, layout)));
                }
            }
        }
        let seqs = |n_t: usize, r: usize, n_s: usize| {
            let more: Vec<(usize, usize)> = (1..n_s).map(|s| (s, s % (r + 1))).collect();
            Step { cells: 6, ..Step::new(n_t, r) }.with_sequences(&more).unwrap()
        };
        let shared = Step { cells: 6, kv_head: 1, src_cell: 1, ..Step::new(3, 2) }.with_sequences(&[(5, 1), (5, 1)]).unwrap();
        for (shape, step, layout) in [
            (SMALL, seqs(1, 0, 2), LayerLayout::Ggml),
            (SMALL, seqs(4, 3, 3), LayerLayout::PrAliasing),
            (SMALL, shared, LayerLayout::Ggml),
            (small_many_keys, seqs(5, 2, 5), LayerLayout::Ggml),
            (SMALL, seqs(16, 15, 4), LayerLayout::PrAliasing),
            (GdnShape::QWEN35_9B, seqs(4, 3, 4), LayerLayout::Ggml),
        ] {
            out.push(built(&spec(shape, step, DType::F32, Precision::Default, layout)));
        }
        out
    }

    #[test]
    fn the_readiness_waits_cover_every_writer_of_what_phase_two_reads() {
        for (b, op) in steps_to_prove() {
            let shape = own_items_shape(&op, &b.mem);
            assert_eq!(op.readiness_gap(&shape, &kernel_waits(&op, &shape)), None, "{shape:?}");
            // Not vacuous: with no waits at all, every head has an unawaited writer.
            assert!(op.readiness_gap(&shape, &|_, _, _| None).is_some(), "{shape:?}");
        }
    }

    /// Planted schedules, each a plausible slip in `abi::LayerStepItems::item_read_by`: the
    /// proof must find a gap for each on some step (CI's standing plant for the waits, which
    /// the GPU sweep's small shapes cannot catch: there the row items finish before the tiles a
    /// head also waits for).
    #[test]
    fn the_readiness_proof_catches_planted_waits() {
        type Plant = fn(&abi::LayerStepItems, u32, u32, u32) -> Option<u32>;
        fn kernel(i: &abi::LayerStepItems, s: u32, h: u32, l: u32) -> Option<u32> {
            i.item_read_by(s, h, l, checked_before_the_proof)
        }
        let plants: [(&str, Plant); 12] =
            [
                ("the last row lane dropped", |i, s, h, l| if l + 1 == i.waited_row_items(s) { None } else { kernel(i, s, h, l) }),
                ("the q tile dropped", |i, s, h, l| if l == i.waited_row_items(s) { None } else { kernel(i, s, h, l) }),
                ("the k tile dropped", |i, s, h, l| if l == i.waited_row_items(s) + 1 { None } else { kernel(i, s, h, l) }),
                ("the v tile dropped", |i, s, h, l| if l == i.waited_row_items(s) + 2 { None } else { kernel(i, s, h, l) }),
                ("the key head by division", |i, s, h, l| match l.checked_sub(i.waited_row_items(s)) {
                    Some(0) => Some(h / (i.n_heads / i.n_key_heads)),
                    Some(1) => Some(i.chain_key_heads + h / (i.n_heads / i.n_key_heads)),
                    _ => kernel(i, s, h, l),
                }),
                ("the neighbour head's row items", |i, s, h, l| {
                    if l < i.waited_row_items(s) { kernel(i, s, (h + 1) % i.n_heads, l) } else { kernel(i, s, h, l) }
                }),
                ("every column pair's rows from pair 0", |i, s, h, l| {
                    if l < i.waited_row_items(s) { kernel(i, s, h, l % 2) } else { kernel(i, s, h, l) }
                }),
                ("the tiles counted from 1", |i, s, h, l| {
                    if l < i.waited_row_items(s) { kernel(i, s, h, l).map(|x| x - 1) } else { kernel(i, s, h, l) }
                }),
                // [seq-batch] Plants only a step of several sequences can show.
                ("sequence 0's items for every sequence", |i, _, h, l| kernel(i, 0, h, l)),
                (
                    "the sequence's tiles of sequence 0",
                    |i, s, h, l| if l < i.waited_row_items(s) { kernel(i, s, h, l) } else { kernel(i, 0, h, l) },
                ),
                ("the row items counted per sequence without the tiles of the others", |i, s, h, l| {
                    if l < i.waited_row_items(s) {
                        kernel(i, s, h, l).map(|x| x - (i.n_seqs - 1) * i.n_chain_tiles)
                    } else {
                        kernel(i, s, h, l)
                    }
                }),
                ("a sequence's column pairs from s·⌈n_t/2⌉ (pairs of one sequence each)", |i, s, h, l| {
                    if l < i.waited_row_items(s) {
                        Some(i.tile_items() + (s * i.n_tokens.div_ceil(2) + l / 2) * i.row_items_per_pair() + 2 * h + l % 2)
                    } else {
                        kernel(i, s, h, l)
                    }
                }),
            ];
        let steps = steps_to_prove();
        for (name, plant) in plants {
            let caught = steps.iter().filter(|(b, op)| {
                let shape = own_items_shape(op, &b.mem);
                let items = op.step_items(&shape);
                op.readiness_gap(&shape, &|s, h, l| plant(&items, s, h, l)).is_some()
            });
            assert!(caught.count() > 0, "the readiness proof missed the plant: {name}");
        }
    }

    /// Every byte the first phase of `op` must write for `n_seqs` sequences: the chain's and the
    /// products' outputs, and each sequence's snapshot rows (row + s) of the conv cache.
    fn first_phase_outputs(op: &GdnLayerStep, shape: &StepShape, n_seqs: usize) -> ByteSet {
        let (chain, gate) = (&op.chain, &op.gate);
        let taps_c = (shape.chain.d_conv - 1) * shape.chain.n_channels;
        let mut outputs = ByteSet::of_all(
            [&chain.conv_out, &chain.q_norm, &chain.k_norm, &gate.pair.first.dst, &gate.pair.second.dst, &gate.gate, &gate.beta],
            Bound::Over,
        );
        for seq in 0..n_seqs {
            for s in &chain.snapshots {
                outputs.union_with(&sub_box(&chain.conv_cache, [0, s.row + seq, 0, 0], [taps_c, 1, 1, 1]));
            }
        }
        outputs
    }

    #[test]
    fn every_first_phase_output_byte_has_exactly_one_writing_item() {
        for (b, op) in steps_to_prove() {
            let shape = own_items_shape(&op, &b.mem);
            let items = op.step_items(&shape);
            let (mut union, mut total) = (ByteSet::new(), 0usize);
            for item in 0..items.first_phase_items() {
                let w = op.item_writes(&shape, items.first_phase_item(item, checked_before_the_proof).unwrap());
                assert!(!w.is_empty(), "item {item} writes nothing ({shape:?})");
                total += w.len();
                union.union_with(&w);
            }
            // Disjoint: no byte counted twice; complete: exactly the parts' first-phase outputs.
            assert_eq!(union.len(), total, "{shape:?}");
            assert_eq!(union, first_phase_outputs(&op, &shape, shape.gdn.n_seqs), "{shape:?}");
        }
    }

    #[test]
    fn a_step_whose_waits_leave_a_gap_is_refused_by_name() {
        // check() runs the proof with the kernel's waits (covered above); the refusal it would
        // give names the head and the item.
        let (b, op) = base();
        let shape = op.check(&b.mem).unwrap();
        let gap = op.readiness_gap(&shape, &|s, h, l| if l == 0 { None } else { kernel_waits(&op, &shape)(s, h, l) });
        assert_eq!(gap, Some((0, 0, shape.chain.n_channels as u32 / 128)));
    }
}
