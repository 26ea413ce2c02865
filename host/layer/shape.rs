//! The GDN layer's sizes (spec §1.1, §4) and one verify step's cache bookkeeping (§1.2).

use crate::error::{Error, Result};
use crate::kernels::abi;
use crate::tensor::{checked_product, checked_sum};

const OP: &str = "GDN_LAYER";

/// Sizes of one Gated-DeltaNet layer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GdnShape {
    /// Hidden size E (`n_embd`): the length of the alpha/beta mat-vec rows.
    pub n_embd: usize,
    /// Linear key heads H_k (`ssm_n_group`).
    pub n_k_heads: usize,
    /// Linear value heads H_v (`ssm_dt_rank`).
    pub n_v_heads: usize,
    /// Head dimension D of k and v (`ssm_d_state`).
    pub head_dim: usize,
    /// Conv kernel width K_c (`ssm_d_conv`).
    pub d_conv: usize,
    /// L2-norm epsilon (`rms_norm_eps`).
    pub eps: f32,
}

impl GdnShape {
    /// Qwen3.5-4B: E 2560, H_k 16, H_v 32, D 128, K_c 4 (spec §4).
    pub const QWEN35_4B: GdnShape = GdnShape { n_embd: 2560, n_k_heads: 16, n_v_heads: 32, head_dim: 128, d_conv: 4, eps: 1e-6 };
    /// Qwen3.5-9B: E 4096, H_k 16, H_v 32, D 128, K_c 4.
    pub const QWEN35_9B: GdnShape = GdnShape { n_embd: 4096, n_k_heads: 16, n_v_heads: 32, head_dim: 128, d_conv: 4, eps: 1e-6 };
    /// Qwen3.5-27B: E 5120, H_k 16, H_v 48, D 128, K_c 4.
    pub const QWEN35_27B: GdnShape = GdnShape { n_embd: 5120, n_k_heads: 16, n_v_heads: 48, head_dim: 128, d_conv: 4, eps: 1e-6 };

    /// The presets by name, as the CLI and bench accept them.
    pub const PRESETS: [(&'static str, GdnShape); 3] =
        [("qwen3.5-4b", Self::QWEN35_4B), ("qwen3.5-9b", Self::QWEN35_9B), ("qwen3.5-27b", Self::QWEN35_27B)];

    /// A preset by name (`qwen3.5-9b`, or just `9b`).
    pub fn preset(name: &str) -> Option<GdnShape> {
        let name = name.to_ascii_lowercase();
        Self::PRESETS.iter().find(|(n, _)| *n == name || n.ends_with(&format!("-{name}"))).map(|(_, s)| *s)
    }

    /// Conv channels C = 2·H_k·D + H_v·D (q, k, v concatenated); saturates for a shape that
    /// [`GdnShape::validate`] refuses ([`GdnShape::try_channels`] is the checked form).
    pub fn channels(&self) -> usize {
        self.try_channels().unwrap_or(usize::MAX)
    }

    /// Floats in one conv-state row, (K_c − 1)·C (`n_embd_r`); saturating like
    /// [`GdnShape::channels`].
    pub fn conv_row(&self) -> usize {
        self.try_conv_row().unwrap_or(usize::MAX)
    }

    /// Floats in one ssm-state row, D·D·H_v (`n_embd_s`); saturating like
    /// [`GdnShape::channels`].
    pub fn ssm_row(&self) -> usize {
        self.try_ssm_row().unwrap_or(usize::MAX)
    }

    /// C, or [`Error::Overflow`].
    pub fn try_channels(&self) -> Result<usize> {
        let heads = checked_product(&[2, self.n_k_heads]).and_then(|k| checked_sum(&[k, self.n_v_heads]));
        heads.and_then(|h| checked_product(&[h, self.head_dim])).ok_or_else(|| overflow("n_v_heads", "channels (2·H_k + H_v)·D"))
    }

    /// (K_c − 1)·C, or [`Error::Overflow`] (K_c ≥ 1 assumed: 0 gives 0).
    pub fn try_conv_row(&self) -> Result<usize> {
        checked_product(&[self.d_conv.saturating_sub(1), self.try_channels()?])
            .ok_or_else(|| overflow("d_conv", "conv-state row (K_c − 1)·C"))
    }

    /// D·D·H_v, or [`Error::Overflow`].
    pub fn try_ssm_row(&self) -> Result<usize> {
        checked_product(&[self.head_dim, self.head_dim, self.n_v_heads]).ok_or_else(|| overflow("n_v_heads", "ssm-state row D·D·H_v"))
    }

    /// Every size the kernels support, or a typed error naming the one that is not.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: String| Err(Error::Unsupported { op: OP, what });
        if self.head_dim != 128 {
            return bad(format!("head_dim = {} (GATED_DELTA_NET is built for 128)", self.head_dim));
        }
        if !abi::SSM_CONV_WIDTHS.contains(&self.d_conv) {
            return bad(format!("d_conv = {} (SSM_CONV has {:?})", self.d_conv, abi::SSM_CONV_WIDTHS));
        }
        if self.n_k_heads == 0 || self.n_v_heads == 0 {
            return bad("zero heads".into());
        }
        if self.n_embd == 0 || !self.n_embd.is_multiple_of(2) {
            return bad(format!("n_embd = {} (the mat-vecs read rows in pairs)", self.n_embd));
        }
        self.validate_sizes()
    }

    /// What every layer graph needs of a shape, whatever its kernels: a positive, finite eps
    /// (the L2 norms' epsilon; 0 would make an all-zero head NaN) and every size the layer
    /// derives representable (bytes of the largest rows and weights included; the step's
    /// cache sizes are checked by the allocation). [`GdnShape::validate`] adds the kernel
    /// limits; the graph builder without the GDN tail adds its own.
    pub fn validate_sizes(&self) -> Result<()> {
        if !self.eps.is_finite() || self.eps <= 0.0 {
            return Err(Error::Invalid { op: OP, what: format!("eps = {} (must be finite and > 0)", self.eps) });
        }
        for (arg, what, factors) in [
            ("n_v_heads", "ssm-state row bytes D·D·H_v·4", vec![self.try_ssm_row()?, 4]),
            ("d_conv", "conv-state row bytes (K_c − 1)·C·4", vec![self.try_conv_row()?, 4]),
            ("n_embd", "mat-vec weight bytes E·H_v·4", vec![self.n_embd, self.n_v_heads, 4]),
            ("n_embd", "conv weight bytes K_c·C·4", vec![self.d_conv, self.try_channels()?, 4]),
        ] {
            checked_product(&factors).ok_or_else(|| overflow(arg, what))?;
        }
        Ok(())
    }
}

fn overflow(arg: &'static str, what: &str) -> Error {
    Error::Overflow { op: OP, arg, what: what.into() }
}

/// Largest rollback depth R (snapshots) a step may keep; K = R + 1 slots.
pub const MAX_ROLLBACK: usize = 16;
/// Largest verify batch the chain is built for.
pub const MAX_TOKENS: usize = 16;
/// Largest token count of a layer graph without the GDN tail (the conv chain and projections
/// alone: fusion-matcher graphs go past the tail's 16 tokens). It bounds what the builder
/// makes: ⌈n_t/8⌉ mat-vec launches per projection, 128 at most.
pub const MAX_GRAPH_TOKENS: usize = 1024;

/// Largest number of sequences one step verifies (n_s): the batched layer step's
/// ([`abi::GDN_LAYER_STEP_MAX_SEQS`]).
pub const MAX_SEQS: usize = abi::GDN_LAYER_STEP_MAX_SEQS;

/// The sequences of a step after the first (spec §1.2–1.4, llama.cpp's equal split for
/// recurrent layers): sequence s (1 ≤ s < n_s) writes cell `kv_head + s` (its conv rows and ssm
/// rows `slot·M + kv_head + s`) and reads its own source row `s_copy(s) = rs_idx(s)·M + src0(s)`.
/// Empty for a single-sequence step. Sequence 0 is described by [`Step`]'s own fields.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sequences {
    len: usize,
    /// (src0, rs_idx) of sequences 1 … len.
    sources: [(usize, usize); MAX_SEQS - 1],
}

impl Sequences {
    /// No further sequence: a single-sequence step.
    pub const NONE: Sequences = Sequences { len: 0, sources: [(0, 0); MAX_SEQS - 1] };

    /// The further sequences reading `(src_cell, rollback_depth)` each, in order; more than
    /// [`MAX_SEQS`] − 1 is an [`Error::Unsupported`].
    pub fn of(sources: &[(usize, usize)]) -> Result<Sequences> {
        if sources.len() > MAX_SEQS - 1 {
            return Err(Error::Unsupported { op: OP, what: format!("{} sequences (at most {MAX_SEQS})", sources.len() + 1) });
        }
        let mut out = Sequences::NONE;
        out.sources[..sources.len()].copy_from_slice(sources);
        out.len = sources.len();
        Ok(out)
    }

    /// Their `(src_cell, rollback_depth)`, in order.
    pub fn sources(&self) -> &[(usize, usize)] {
        &self.sources[..self.len]
    }

    /// How many further sequences there are.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the step has one sequence only.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl std::fmt::Debug for Sequences {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.sources()).finish()
    }
}

impl Default for Sequences {
    fn default() -> Self {
        Sequences::NONE
    }
}

/// One verify step against the recurrent cache (spec §1.2): n_s sequences of n_t tokens each
/// (equal split), which cells they read, where they write, how many snapshots the cache keeps.
/// Sequence s writes cell `kv_head + s`; sequence 0 reads `src_cell` at `rollback_depth`, the
/// others what [`Sequences`] says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// Tokens verified in this step per sequence, n_t (1 ..= 16).
    pub n_tokens: usize,
    /// Rollback snapshots R (0 ..= 16); the caches hold 1 + R groups of `cells` rows.
    pub n_rollback: usize,
    /// Cells per group, M (`mem_size`).
    pub cells: usize,
    /// The cell the first sequence writes (`kv_head`); sequence s writes `kv_head + s`.
    pub kv_head: usize,
    /// The cell the first sequence reads (`src0`, normally `kv_head`).
    pub src_cell: usize,
    /// The first sequence's pending rollback depth `rs_idx` (0 ..= R): read the state from
    /// that many tokens back.
    pub rollback_depth: usize,
    /// A cell whose state must start empty (`rs_z`): zeroed in place before the reads.
    pub zero_cell: Option<usize>,
    /// The sequences after the first ([`Sequences::NONE`]: one sequence).
    pub more_seqs: Sequences,
}

impl Step {
    /// The simplest step: one cell, reading and writing cell 0, nothing pending.
    pub fn new(n_tokens: usize, n_rollback: usize) -> Self {
        Step { n_tokens, n_rollback, cells: 1, kv_head: 0, src_cell: 0, rollback_depth: 0, zero_cell: None, more_seqs: Sequences::NONE }
    }

    /// This step with further sequences reading `(src_cell, rollback_depth)` each (sequence
    /// s ≥ 1 writes cell `kv_head + s`); too many is an [`Error::Unsupported`].
    pub fn with_sequences(self, sources: &[(usize, usize)]) -> Result<Step> {
        Ok(Step { more_seqs: Sequences::of(sources)?, ..self })
    }

    /// Sequences n_s (1 ..= [`MAX_SEQS`]).
    pub fn n_seqs(&self) -> usize {
        1 + self.more_seqs.len()
    }

    /// `(src_cell, rollback_depth)` of sequence `s` (< n_s).
    pub fn source(&self, s: usize) -> Option<(usize, usize)> {
        if s == 0 { Some((self.src_cell, self.rollback_depth)) } else { self.more_seqs.sources().get(s - 1).copied() }
    }

    /// Token columns of the step, n_t·n_s (saturating; exact for a validated step).
    pub fn columns(&self) -> usize {
        self.n_tokens.saturating_mul(self.n_seqs())
    }

    /// `s_copy(s)` of every sequence, in order (saturating; exact for a validated step).
    pub fn source_rows(&self) -> Vec<usize> {
        (0..self.n_seqs())
            .filter_map(|s| self.source(s))
            .map(|(cell, depth)| depth.saturating_mul(self.cells).saturating_add(cell))
            .collect()
    }

    /// [`Step::source_rows`] as the I32 values of the index tensor (in range for a validated
    /// step: cache rows ≤ 2^31 − 1).
    pub fn source_rows_i32(&self) -> Vec<i32> {
        self.source_rows().into_iter().map(|r| i32::try_from(r).unwrap_or(i32::MAX)).collect()
    }

    /// [seq-batch] Whether some sequence reads a cache row that another sequence of the step writes,
    /// when each sequence writes the rows `j·M + kv_head + s` of the first `written_groups`
    /// groups (the conv cache: all 1 + R; the ssm cache: the min(n_t, 1 + R) newest). The unfused
    /// chain reads every source row before it writes; the fused ops run the sequences at the
    /// same time and refuse such a step. llama.cpp's steps never have one: a sequence reads a
    /// row of its own cell.
    pub fn reads_another_sequences_row(&self, written_groups: usize) -> bool {
        let cells = self.cells.max(1);
        self.source_rows().iter().enumerate().any(|(s, &row)| {
            let (group, cell) = (row / cells, row % cells);
            group < written_groups && cell >= self.kv_head && cell - self.kv_head < self.n_seqs() && cell - self.kv_head != s
        })
    }

    /// Rows of each cache tensor: M·(1 + R) (saturating; exact for a validated step).
    pub fn cache_rows(&self) -> usize {
        self.try_cache_rows().unwrap_or(usize::MAX)
    }

    /// M·(1 + R), or [`Error::Overflow`].
    pub fn try_cache_rows(&self) -> Result<usize> {
        checked_sum(&[1, self.n_rollback])
            .and_then(|k| checked_product(&[self.cells, k]))
            .ok_or_else(|| overflow("cells", "cache rows M·(1 + R)"))
    }

    /// Snapshot slots K = R + 1 (GATED_DELTA_NET's K; 1 when R = 0); saturating.
    pub fn slots(&self) -> usize {
        self.n_rollback.saturating_add(1)
    }

    /// The cache row the first sequence reads: `s_copy = rs_idx·M + src0` (saturating; exact for a
    /// validated step).
    pub fn source_row(&self) -> usize {
        self.rollback_depth.saturating_mul(self.cells).saturating_add(self.src_cell)
    }

    /// Refuses (typed) a step inconsistent with its caches.
    pub fn validate(&self) -> Result<()> {
        self.validate_with_max_tokens(MAX_TOKENS)
    }

    /// [`Step::validate`] with another token limit (a graph without the GDN tail takes up to
    /// [`MAX_GRAPH_TOKENS`]).
    pub fn validate_with_max_tokens(&self, max_tokens: usize) -> Result<()> {
        let bad = |what: String| Err(Error::Invalid { op: OP, what });
        if self.n_tokens == 0 || self.n_tokens > max_tokens {
            return Err(Error::Unsupported { op: OP, what: format!("n_tokens = {} (1 ..= {max_tokens})", self.n_tokens) });
        }
        if self.n_rollback > MAX_ROLLBACK {
            return Err(Error::Unsupported { op: OP, what: format!("{} rollback snapshots (at most {MAX_ROLLBACK})", self.n_rollback) });
        }
        if self.cells == 0 || self.kv_head >= self.cells || self.src_cell >= self.cells {
            return bad(format!(
                "cells = {}, kv_head = {}, src_cell = {}: cells must be ≥ 1 and both cells inside",
                self.cells, self.kv_head, self.src_cell
            ));
        }
        if self.rollback_depth > self.n_rollback {
            return bad(format!("rollback depth {} exceeds the {} snapshots kept", self.rollback_depth, self.n_rollback));
        }
        // Sequence s writes cell kv_head + s: all n_s written cells inside the group.
        let n_s = self.n_seqs();
        if self.kv_head.checked_add(n_s).is_none_or(|end| end > self.cells) {
            return bad(format!(
                "{n_s} sequences write cells {} … {} (only {} cells)",
                self.kv_head,
                self.kv_head.saturating_add(n_s - 1),
                self.cells
            ));
        }
        for (i, &(src, depth)) in self.more_seqs.sources().iter().enumerate() {
            if src >= self.cells {
                return bad(format!("sequence {} reads cell {src} (only {} cells)", i + 1, self.cells));
            }
            if depth > self.n_rollback {
                return bad(format!("sequence {}'s rollback depth {depth} exceeds the {} snapshots kept", i + 1, self.n_rollback));
            }
        }
        if self.columns() > MAX_GRAPH_TOKENS {
            return Err(Error::Unsupported {
                op: OP,
                what: format!("{} token columns n_t·n_s = {}·{n_s} (at most {MAX_GRAPH_TOKENS})", self.columns(), self.n_tokens),
            });
        }
        if self.zero_cell.is_some_and(|z| z >= self.cells) {
            return bad(format!("zero_cell {:?} outside the {} cells", self.zero_cell, self.cells));
        }
        // [validation] the cache rows must exist, and s_copy is an I32 row index.
        let rows = self.try_cache_rows()?;
        if rows > i32::MAX as usize {
            return Err(Error::Unsupported { op: OP, what: format!("{rows} cache rows (s_copy is an I32 row index: at most 2^31 − 1)") });
        }
        Ok(())
    }
}
