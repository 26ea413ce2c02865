//! GDN_CONV_CHAIN — the fused conv chain of one GDN layer step (the reference PR's
//! `ssm_conv_gdn_fused_f32`): conv-state GET_ROWS, CONCAT, the 1 + R snapshot CPYs,
//! SSM_CONV+SiLU and the L2_NORM of the q and k heads in one kernel, bit-identical to those
//! five unfused ops (spec §1.3 C2–C5, W1/W2, V1–V2, N1).
//!
//! The op struct is the contract between the fusion pass (`host/fusion/`), the kernel
//! (`kernels-gpu/src/gdn_conv_chain.rs`) and its reference.

use super::{Op, check};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, KernelArg, KernelParams, LaunchDims, ParamBlock};
use crate::kernels::abi;
use crate::memory::{DeviceMemory, HostMemory, Memory};
use crate::reference::math::Mufu;
use crate::tensor::{DType, Tensor};

const OP: &str = "GDN_CONV_CHAIN";

/// One conv-state row the fused kernel writes: cache row `row` receives `window(offset)` — the
/// d_conv−1 columns `offset … offset+d_conv−2` of `[old state | tokens]` for every channel, in
/// the cache's channel-major layout (spec §1.3 W2: slot j of the clamped rule has
/// `offset = max(0, n_t − j)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SnapshotWrite {
    pub row: usize,
    /// Window start, 0 ≤ offset ≤ n_t.
    pub offset: usize,
}

/// The five ops of the conv chain as one:
/// - `conv_cache` (r_l): F32 ne [(d_conv−1)·C, rows, 1, 1], rows contiguous; row
///   `source_row[0]` is read as the incoming state, every `snapshots[i].row` is written;
/// - `source_row` (s_copy): I32 ne [1, 1, 1, 1] in an index buffer;
/// - `qkv` (qkv_mixed): F32 ne [C, n_t, 1, 1], channels contiguous;
/// - `weight` (ssm_conv1d.weight): F32 ne [d_conv, C, 1, 1], taps contiguous;
/// - `snapshots`: 1 ..= 16 rows to write, each at most once;
/// - `conv_out`: SiLU(conv) ne [C, n_t, 1, 1], channels contiguous; may be `qkv` itself,
///   element for element (each thread reads all its channel's inputs before it writes);
/// - `q_norm`, `k_norm`: ne [D, H_k, n_t, 1], the L2-normalised heads of `conv_out` channels
///   `0 … H_k·D` (q) and `H_k·D … 2·H_k·D` (k), rows contiguous;
/// - `eps`: the L2_NORM epsilon.
#[derive(Clone, Debug)]
pub struct GdnConvChain {
    pub conv_cache: Tensor,
    pub source_row: Tensor,
    pub qkv: Tensor,
    pub weight: Tensor,
    pub snapshots: Vec<SnapshotWrite>,
    pub conv_out: Tensor,
    pub q_norm: Tensor,
    pub k_norm: Tensor,
    pub head_dim: usize,
    pub n_k_heads: usize,
    pub eps: f32,
}

/// The sizes a valid [`GdnConvChain`] runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainShape {
    pub d_conv: usize,
    /// Conv channels C (a multiple of 128).
    pub n_channels: usize,
    pub n_tokens: usize,
    /// Rows of the conv cache.
    pub n_cache_rows: usize,
    /// The row the incoming state is read from (the value of `source_row`).
    pub source_row: usize,
    /// conv_out is qkv itself (element for element): one token block only (see [`ChainMapping`]).
    pub in_place: bool,
}

/// How the launch spreads the tokens (NOTES.md, GDN_CONV_CHAIN speed). Token group g (128
/// threads, one channel each: `threadIdx.y` of a block (128, `groups_per_block`)) convolves and
/// L2-normalises tokens g·`tokens_per_group` …; a block holds `groups_per_block` consecutive
/// groups, grid (C/128, `token_blocks`). Each snapshot row is written by exactly one group
/// ([`row_owners`]). Every output element is computed by the same bodies from the same inputs
/// whatever the mapping: only who computes it changes.
///
/// Several token blocks per channel group are safe because no block reads what another writes:
/// only block 0 reads the index and the conv state (blocks ≥ 1 start at token
/// `groups_per_block·tokens_per_group ≥ d_conv − 1`, so their conv windows hold tokens only),
/// every row whose window touches the old state or that is the source row itself belongs to
/// block 0's groups, and every block reads all tokens of qkv — so `conv_out = qkv` (in place)
/// falls back to one token block (all groups in one block, which reads everything before its
/// one barrier, as before).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainMapping {
    pub tokens_per_group: usize,
    pub groups_per_block: usize,
    pub token_blocks: usize,
}

/// The launch knobs: tokens per block (`RGDN_CONV_CHAIN_TOKENS_PER_BLOCK`), tokens per thread
/// group (`RGDN_CONV_CHAIN_TOKENS_PER_GROUP`) and the speculative state-row load
/// (`RGDN_CONV_CHAIN_ROW_HINT=0` turns it off). `tokens_per_block = tokens_per_group = 16`
/// without the hint is the original launch (grid (C/128, 1, 1) × 128 threads).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainKnobs {
    pub tokens_per_block: usize,
    pub tokens_per_group: usize,
    pub row_hint: bool,
}

impl ChainKnobs {
    /// The default: one conv chunk per thread and at most one L2 item per warp (D = 128) with 4
    /// tokens per group, one group per block (T = 8 → 2 token blocks, T = 16 → 4), the hint on.
    pub const DEFAULT: ChainKnobs = ChainKnobs { tokens_per_block: 4, tokens_per_group: 4, row_hint: true };
    /// The launch before the token split (one block of 128 threads per channel group).
    pub const ORIGINAL: ChainKnobs = ChainKnobs { tokens_per_block: 16, tokens_per_group: 16, row_hint: false };

    /// [`ChainKnobs::DEFAULT`] overridden by the environment (read once per process).
    pub fn from_env() -> ChainKnobs {
        static KNOBS: std::sync::OnceLock<ChainKnobs> = std::sync::OnceLock::new();
        *KNOBS.get_or_init(|| {
            let num = |name: &str| std::env::var(name).ok().and_then(|v| v.trim().parse::<usize>().ok()).filter(|k| *k >= 1);
            let d = ChainKnobs::DEFAULT;
            ChainKnobs {
                tokens_per_block: num("RGDN_CONV_CHAIN_TOKENS_PER_BLOCK").unwrap_or(d.tokens_per_block),
                tokens_per_group: num("RGDN_CONV_CHAIN_TOKENS_PER_GROUP").unwrap_or(d.tokens_per_group),
                row_hint: std::env::var("RGDN_CONV_CHAIN_ROW_HINT").map(|v| v.trim() != "0").unwrap_or(d.row_hint),
            }
        })
    }
}

impl ChainMapping {
    /// The mapping for `n_t` tokens (validated: 1 ..= 16) under `knobs`; one token block when
    /// conv_out is qkv (`in_place`) or when the first block would not cover d_conv − 1 tokens.
    pub fn new(n_t: usize, state_len: usize, in_place: bool, knobs: ChainKnobs) -> ChainMapping {
        let max_groups = abi::GDN_CONV_CHAIN_MAX_GROUPS;
        let tg = knobs.tokens_per_group.clamp(1, n_t.max(1));
        let ng = n_t.div_ceil(tg);
        let gpb = (knobs.tokens_per_block.max(tg) / tg).clamp(1, max_groups).min(ng);
        if gpb < ng && !in_place && gpb * tg >= state_len {
            return ChainMapping { tokens_per_group: tg, groups_per_block: gpb, token_blocks: ng.div_ceil(gpb) };
        }
        // One token block holding every group (at most 4 groups of 128 threads).
        let tg = if ng > max_groups { n_t.div_ceil(max_groups) } else { tg };
        ChainMapping { tokens_per_group: tg, groups_per_block: n_t.div_ceil(tg), token_blocks: 1 }
    }

    /// Token groups in all.
    pub fn groups(&self, n_t: usize) -> usize {
        n_t.div_ceil(self.tokens_per_group)
    }
}

/// The token group writing each snapshot row: rows whose window touches the old state
/// (offset < d_conv − 1) and the source row itself go to block 0's groups (the only block that
/// reads the state), the others to any group; each to the least loaded (ties: the last group,
/// away from block 0's dependent index → state load).
pub fn row_owners(snapshots: &[SnapshotWrite], source_row: usize, state_len: usize, n_t: usize, m: &ChainMapping) -> Vec<usize> {
    let ng = m.groups(n_t);
    let first_block = m.groups_per_block.min(ng);
    let mut load = vec![0usize; ng];
    let mut owners = vec![0usize; snapshots.len()];
    for constrained_pass in [true, false] {
        for (i, s) in snapshots.iter().enumerate() {
            let constrained = s.offset < state_len || s.row == source_row;
            if constrained != constrained_pass {
                continue;
            }
            let allowed = if constrained { first_block } else { ng };
            let g = (0..allowed).rev().min_by_key(|&g| load[g]).expect("at least one group");
            owners[i] = g;
            load[g] += 1;
        }
    }
    owners
}

impl GdnConvChain {
    /// Validates the op and returns its sizes. Supported: d_conv 3/4/5, 1 ..= 16 tokens of one
    /// sequence, C a multiple of 128, D ∈ {32, 64, 128}, 2·H_k·D ≤ C (the remaining channels are
    /// v heads, convolved but not normalised), 1 ..= 16 distinct rows with offsets ≤ n_t.
    ///
    /// Aliasing: a snapshot row may be the source row; `conv_out` may be `qkv` element for
    /// element (else disjoint). Everything else the kernel writes — conv_out, q_norm, k_norm, the
    /// cache — must be disjoint from each other and from every input, except that the cache
    /// is also the source of the state.
    pub fn check(&self, mem: &dyn Memory) -> Result<ChainShape> {
        // Weight first: it fixes d_conv and C.
        check::tensor(OP, "weight", &self.weight, DType::F32, mem)?;
        let [d_conv, n_channels, ..] = self.weight.ne();
        check::shape(OP, "weight", &self.weight, [d_conv, n_channels, 1, 1])?;
        check::rows_contiguous(OP, "weight", &self.weight)?;
        if abi::gdn_conv_chain_entry(d_conv).is_none() {
            return Err(Error::Unsupported {
                op: OP,
                what: format!("d_conv = {d_conv} (kernels exist for {:?})", abi::GDN_CONV_CHAIN_WIDTHS),
            });
        }
        let block = abi::GDN_CONV_CHAIN_BLOCK as usize;
        if !n_channels.is_multiple_of(block) {
            return Err(Error::Unsupported { op: OP, what: format!("C = {n_channels} channels (a multiple of {block})") });
        }
        let state_len = d_conv - 1;

        check::tensor(OP, "qkv", &self.qkv, DType::F32, mem)?;
        let n_tokens = self.qkv.ne()[1];
        check::shape(OP, "qkv", &self.qkv, [n_channels, n_tokens, 1, 1])?;
        check::rows_contiguous(OP, "qkv", &self.qkv)?;
        if n_tokens > abi::GDN_CONV_CHAIN_MAX_TOKENS {
            return Err(Error::Unsupported {
                op: OP,
                what: format!("n_t = {n_tokens} tokens (at most {})", abi::GDN_CONV_CHAIN_MAX_TOKENS),
            });
        }

        check::output(OP, "conv_cache", &self.conv_cache, DType::F32, mem)?;
        let n_cache_rows = self.conv_cache.ne()[1];
        check::shape(OP, "conv_cache", &self.conv_cache, [state_len * n_channels, n_cache_rows, 1, 1])?;
        check::rows_contiguous(OP, "conv_cache", &self.conv_cache)?;
        check::distinct_elements(OP, "conv_cache", &self.conv_cache)?;

        check::tensor(OP, "source_row", &self.source_row, DType::I32, mem)?;
        check::shape(OP, "source_row", &self.source_row, [1, 1, 1, 1])?;
        let values = mem.index_values(&self.source_row).ok_or_else(|| Error::Invalid {
            op: OP,
            what: format!("`source_row` (buffer {}) is not an index buffer: its value must be known to the host", self.source_row.buffer.0),
        })?;
        let index = values[0];
        if index < 0 || index as usize >= n_cache_rows {
            return Err(Error::IndexOutOfRange { op: OP, arg: "source_row", position: 0, index: index as i64, rows: n_cache_rows });
        }

        let n_rows = self.snapshots.len();
        if n_rows == 0 {
            return Err(Error::Invalid { op: OP, what: "no conv-state row to write (at least the live row)".into() });
        }
        if n_rows > abi::GDN_CONV_CHAIN_MAX_ROWS {
            return Err(Error::Unsupported {
                op: OP,
                what: format!("{n_rows} conv-state rows to write (at most {})", abi::GDN_CONV_CHAIN_MAX_ROWS),
            });
        }
        for (position, s) in self.snapshots.iter().enumerate() {
            if s.row >= n_cache_rows {
                return Err(Error::IndexOutOfRange {
                    op: OP,
                    arg: "snapshots",
                    position,
                    index: i64::try_from(s.row).unwrap_or(i64::MAX),
                    rows: n_cache_rows,
                });
            }
            if s.offset > n_tokens {
                return Err(Error::Invalid {
                    op: OP,
                    what: format!("snapshots[{position}]: window offset {} past the {n_tokens} tokens", s.offset),
                });
            }
            if self.snapshots[..position].iter().any(|o| o.row == s.row) {
                return Err(Error::Aliasing { op: OP, a: "snapshots", b: "snapshots", why: "one cache row written twice" });
            }
        }

        let (d, h_k) = (self.head_dim, self.n_k_heads);
        if !abi::GDN_CONV_CHAIN_HEAD_DIMS.contains(&d) {
            return Err(Error::Unsupported { op: OP, what: format!("head_dim = {d} (built for {:?})", abi::GDN_CONV_CHAIN_HEAD_DIMS) });
        }
        if h_k == 0 || h_k.checked_mul(2 * d).is_none_or(|qk| qk > n_channels) {
            return Err(Error::Invalid {
                op: OP, what: format!("{h_k} q and {h_k} k heads of {d} need 1 ≤ 2·H_k·D ≤ C = {n_channels}")
            });
        }
        if !self.eps.is_finite() || self.eps < 0.0 {
            return Err(Error::Invalid { op: OP, what: format!("eps = {} (must be finite and ≥ 0)", self.eps) });
        }

        check::output(OP, "conv_out", &self.conv_out, DType::F32, mem)?;
        check::shape(OP, "conv_out", &self.conv_out, [n_channels, n_tokens, 1, 1])?;
        check::rows_contiguous(OP, "conv_out", &self.conv_out)?;
        check::distinct_elements(OP, "conv_out", &self.conv_out)?;
        for (arg, t) in [("q_norm", &self.q_norm), ("k_norm", &self.k_norm)] {
            check::output(OP, arg, t, DType::F32, mem)?;
            check::shape(OP, arg, t, [d, h_k, n_tokens, 1])?;
            check::rows_contiguous(OP, arg, t)?;
            check::distinct_elements(OP, arg, t)?;
        }

        // conv_out may be qkv itself (each thread reads its channel's tokens before it writes).
        check::same_or_disjoint(OP, "conv_out", &self.conv_out, "qkv", &self.qkv)?;
        let outputs = [("conv_out", &self.conv_out), ("q_norm", &self.q_norm), ("k_norm", &self.k_norm)];
        for (i, (a, ta)) in outputs.iter().enumerate() {
            for (b, tb) in &outputs[i + 1..] {
                check::disjoint(OP, a, ta, b, tb)?;
            }
            check::disjoint(OP, a, ta, "conv_cache", &self.conv_cache)?;
            check::disjoint(OP, a, ta, "weight", &self.weight)?;
        }
        check::disjoint(OP, "q_norm", &self.q_norm, "qkv", &self.qkv)?;
        check::disjoint(OP, "k_norm", &self.k_norm, "qkv", &self.qkv)?;
        check::disjoint(OP, "conv_cache", &self.conv_cache, "qkv", &self.qkv)?;
        check::disjoint(OP, "conv_cache", &self.conv_cache, "weight", &self.weight)?;

        check::fits_u32(OP, "conv-cache rows", n_cache_rows)?;
        check::fits_u32(OP, "channel blocks", n_channels / block)?;
        // [hostile] the kernel takes H_k as u32 and C / 128 blocks as grid x (≤ 2^31 − 1).
        check::fits_u32(OP, "k heads", h_k)?;
        if n_channels / block > i32::MAX as usize {
            return Err(Error::Unsupported { op: OP, what: format!("C = {n_channels} channels (grid x holds at most 2^31 − 1 blocks)") });
        }
        let in_place = self.conv_out.overlaps(&self.qkv);
        Ok(ChainShape { d_conv, n_channels, n_tokens, n_cache_rows, source_row: index as usize, in_place })
    }

    /// The kernel's parameter block for a validated op.
    fn params(&self, shape: &ChainShape, m: &ChainMapping, knobs: ChainKnobs, mem: &DeviceMemory) -> abi::GdnConvChainParams {
        let [_, cache_row, ..] = check::elem_strides(&self.conv_cache);
        let [_, qkv_token, ..] = check::elem_strides(&self.qkv);
        let [_, w_channel, ..] = check::elem_strides(&self.weight);
        let [_, conv_out_token, ..] = check::elem_strides(&self.conv_out);
        let [_, q_head, q_token, _] = check::elem_strides(&self.q_norm);
        let [_, k_head, k_token, _] = check::elem_strides(&self.k_norm);
        let (rows, offsets) = self.row_tables(shape, m);
        abi::GdnConvChainParams {
            cache: mem.device_ptr(&self.conv_cache),
            source_row: mem.device_ptr(&self.source_row),
            qkv: mem.device_ptr(&self.qkv),
            weight: mem.device_ptr(&self.weight),
            conv_out: mem.device_ptr(&self.conv_out),
            q_norm: mem.device_ptr(&self.q_norm),
            k_norm: mem.device_ptr(&self.k_norm),
            cache_row,
            qkv_token,
            w_channel,
            conv_out_token,
            q_head,
            q_token,
            k_head,
            k_token,
            n_tokens: shape.n_tokens as u32,
            head_dim: self.head_dim as u32,
            n_k_heads: self.n_k_heads as u32,
            eps: self.eps,
            n_rows: self.snapshots.len() as u32,
            tokens_per_group: m.tokens_per_group as u32,
            // Validated: source_row < n_cache_rows ≤ u32::MAX (u32::MAX itself is never a row).
            source_hint: if knobs.row_hint { shape.source_row as u32 } else { u32::MAX },
            _pad: 0,
            rows,
            offsets,
        }
    }

    /// The kernel's row tables: the rows sorted by owning token group ([`row_owners`]),
    /// `offsets[i] = offset | owner << 8`; unused entries 0 (row 0, window 0: valid loads).
    pub fn row_tables(
        &self,
        shape: &ChainShape,
        m: &ChainMapping,
    ) -> ([u32; abi::GDN_CONV_CHAIN_MAX_ROWS], [u32; abi::GDN_CONV_CHAIN_MAX_ROWS]) {
        let owners = row_owners(&self.snapshots, shape.source_row, shape.d_conv - 1, shape.n_tokens, m);
        let mut order: Vec<usize> = (0..self.snapshots.len()).collect();
        order.sort_by_key(|&i| (owners[i], i));
        let (mut rows, mut offsets) = ([0u32; abi::GDN_CONV_CHAIN_MAX_ROWS], [0u32; abi::GDN_CONV_CHAIN_MAX_ROWS]);
        for (k, &i) in order.iter().enumerate() {
            let s = self.snapshots[i];
            // Validated: row < n_cache_rows ≤ u32::MAX, offset ≤ n_t ≤ 16 < 256, owner < 16.
            rows[k] = s.row as u32;
            offsets[k] = s.offset as u32 | (owners[i] as u32) << abi::GDN_CONV_CHAIN_OWNER_SHIFT;
        }
        (rows, offsets)
    }

    /// The launch under explicit knobs (the suite runs several; [`Op::launch`] uses
    /// [`ChainKnobs::from_env`]).
    pub fn launch_with(&self, gpu: &Gpu, mem: &DeviceMemory, knobs: ChainKnobs) -> Result<()> {
        self.launch_impl(gpu, mem, knobs, false)
    }

    /// `stale_hint`: hint a wrong (valid) row, so that the kernel's check of the hint fails and
    /// it reloads the state from the index's row (the path a stale hint would take).
    fn launch_impl(&self, gpu: &Gpu, mem: &DeviceMemory, knobs: ChainKnobs, stale_hint: bool) -> Result<()> {
        let shape = self.check(mem)?;
        let entry = abi::gdn_conv_chain_entry(shape.d_conv).expect("checked: d_conv has an entry");
        let m = ChainMapping::new(shape.n_tokens, shape.d_conv - 1, shape.in_place, knobs);
        let mut params = self.params(&shape, &m, knobs, mem);
        if stale_hint {
            // Another row of the cache (or the only one: then the hint is right after all).
            params.source_hint = ((shape.source_row + 1) % shape.n_cache_rows) as u32;
        }
        let blocks = (shape.n_channels / abi::GDN_CONV_CHAIN_BLOCK as usize) as u32;
        // At most 16 token blocks and 4 groups of 128 threads (ChainMapping::new).
        let dims = LaunchDims::new((blocks, m.token_blocks as u32, 1), (abi::GDN_CONV_CHAIN_BLOCK, m.groups_per_block as u32, 1))
            .with_shared_bytes(abi::gdn_conv_chain_shared_bytes(shape.d_conv, shape.n_tokens));
        let args = [KernelArg::Params(ParamBlock::of(&params)?)];
        // SAFETY: `check` proved that the source index (whose device copy holds the host-known
        // value, which is also the speculative hint) and every snapshot row lie in the cache, the
        // rows are distinct, offsets ≤ n_t, every view covers C = blocks·128 channels, n_t tokens,
        // d_conv taps and 2·H_k heads of D ∈ {32, 64, 128}; that the outputs are disjoint from
        // each other and from the inputs except conv_out = qkv element for element (then one
        // token block: each block reads before its barrier, writes after) and the cache rows
        // block 0 reads before its barrier (every row another block writes is neither the source
        // row nor read by it: `ChainMapping`, `row_owners`); the shared memory is what the kernel
        // lays out for (d_conv, n_t); and the single parameter is the entry's parameter struct.
        unsafe { gpu.launch(entry, dims, &args) }
    }

    /// Row `row` of the conv cache as a [(d_conv−1)·C, 1, 1, 1] view.
    fn cache_row(&self, row: usize) -> Tensor {
        let nb = self.conv_cache.layout.nb;
        self.conv_cache.view([self.conv_cache.ne()[0], 1, 1, 1], [nb[0], nb[1], nb[1], nb[1]], row * nb[1])
    }
}

// SAFETY: `#[repr(C)]`, `Copy`, fifteen u64 then eight 4-byte scalars and two [u32; 16] tables:
// 280 bytes, every field at its natural alignment with no gap and no tail padding (size is a
// multiple of 8), alignment 8; it is exactly the type the `gdn_conv_chain_f32_d*` entries take.
unsafe impl KernelParams for abi::GdnConvChainParams {}

impl Op for GdnConvChain {
    fn name(&self) -> &'static str {
        OP
    }

    fn validate(&self, mem: &dyn Memory) -> Result<()> {
        self.check(mem).map(|_| ())
    }

    fn launch(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<()> {
        self.launch_with(gpu, mem, ChainKnobs::from_env())
    }

    fn reference(&self, mem: &mut HostMemory, mufu: &mut dyn Mufu) -> Result<()> {
        let shape = self.check(mem)?;
        crate::reference::gdn_conv_chain::gdn_conv_chain(self, &shape, mem, mufu);
        Ok(())
    }

    fn inputs(&self) -> Vec<Tensor> {
        // The cache is read at a row known only through the index: the whole cache.
        vec![self.conv_cache, self.source_row, self.qkv, self.weight]
    }

    fn outputs(&self) -> Vec<Tensor> {
        let mut out = vec![self.conv_out, self.q_norm, self.k_norm];
        out.extend(self.snapshots.iter().map(|s| self.cache_row(s.row)));
        out
    }
}

/// [`GdnConvChain`] launched under explicit [`ChainKnobs`] (the GPU suite's cases for the launch
/// mappings); `stale_hint` makes the speculative state-row load miss. Validation, reference,
/// inputs and outputs are the op's own.
#[derive(Clone, Debug)]
pub struct GdnConvChainWith {
    pub op: GdnConvChain,
    pub knobs: ChainKnobs,
    pub stale_hint: bool,
}

impl Op for GdnConvChainWith {
    fn name(&self) -> &'static str {
        OP
    }

    fn validate(&self, mem: &dyn Memory) -> Result<()> {
        self.op.validate(mem)
    }

    fn launch(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<()> {
        self.op.launch_impl(gpu, mem, self.knobs, self.stale_hint)
    }

    fn reference(&self, mem: &mut HostMemory, mufu: &mut dyn Mufu) -> Result<()> {
        self.op.reference(mem, mufu)
    }

    fn inputs(&self) -> Vec<Tensor> {
        self.op.inputs()
    }

    fn outputs(&self) -> Vec<Tensor> {
        self.op.outputs()
    }
}
