//! GDN_CONV_CHAIN — the fused conv chain of one GDN layer step (the reference PR's
//! `ssm_conv_gdn_fused_f32`): conv-state GET_ROWS, CONCAT, the 1 + R snapshot CPYs,
//! SSM_CONV+SiLU and the L2_NORM of the q and k heads in one kernel, bit-identical to those
//! five unfused ops (spec §1.3 C2–C5, W1/W2, V1–V2, N1).
//!
//! The op struct is the contract between the fusion pass (`host/fusion/`), the kernel
//! (`kernels-gpu/src/gdn_conv_chain.rs`) and its reference.

use super::index_rules::{IndexRules, IndexView, MAX_TOUCHES, RowReaders, Values};
use super::overlap::{Forms, Overlap};
use super::{Op, PlainLaunch, check};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, KernelArg, KernelParams, LaunchDims, ParamBlock, PreparedLaunch};
use crate::kernels::abi;
use crate::memory::{DeviceMemory, HostMemory, KernelAddresses, Memory};
use crate::reference::math::Mufu;
use crate::tensor::{DType, Tensor};

const OP: &str = "GDN_CONV_CHAIN";

/// The parameters of the entry a GDN_CONV_CHAIN launches ([`GdnConvChain::launch`]).
#[derive(Clone, Copy, Debug)]
pub enum ConvChainParams {
    /// `gdn_conv_chain_*`.
    Chain(abi::GdnConvChainParams),
    /// \[replay\] `gdn_conv_chain_commit_*`: the window commit in front.
    Commit(abi::GdnConvChainCommitParams),
}

/// Grid y (sequences) limit of a launch.
const MAX_GRID_Y: usize = 65535;

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

/// The five ops of the conv chain as one, for n_s sequences (llama.cpp's equal split: sequence
/// s owns cell kv_head + s of every rollback group):
/// - `conv_cache` (r_l): F32 ne [(d_conv−1)·C, rows, 1, 1], rows contiguous; sequence s reads
///   row `source_row[s]` as its incoming state and writes row `snapshots[i].row + s` for every i;
/// - `source_row` (s_copy): I32 ne [n_s, 1, 1, 1] in an index buffer;
/// - `qkv` (qkv_mixed): F32 ne [C, n_t, n_s, 1], channels contiguous;
/// - `weight` (ssm_conv1d.weight): F32 ne [d_conv, C, 1, 1], taps contiguous;
/// - `snapshots`: 1 ..= 16 rows to write (sequence 0's; sequence s writes `row + s`), no cache
///   row written twice;
/// - `conv_out`: SiLU(conv) ne [C, n_t, n_s, 1], channels contiguous; may be `qkv` itself,
///   element for element (each thread reads all its channel's inputs before it writes);
/// - `q_norm`, `k_norm`: ne [D, H_k, n_t, n_s], the L2-normalised heads of `conv_out` channels
///   `0 … H_k·D` (q) and `H_k·D … 2·H_k·D` (k), rows contiguous;
/// - `eps`: the L2_NORM epsilon.
///
/// A sequence's source row may be one of *its own* written rows (read before written, by the
/// same block); one that *another* sequence writes is refused ([`Error::Aliasing`]): the
/// sequences' blocks run at the same time, while the unfused GET_ROWS reads every source row
/// before any CPY writes.
///
/// \[replay\] With `commit` ([`ConvCommit`]) the window commit of a replay step runs first, in
/// the same launch: then there is no snapshot row.
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
    /// \[replay\] The window commit in front of the chain, or none (ggml's chain).
    pub commit: Option<ConvCommit>,
}

/// \[replay\] The window commit of a replay step (docs/rollback.md "Replay: one step"), fused in
/// front of the conv chain. Sequence s accepted a = T_log − j of its logged step's T_log tokens,
/// j from its window row `window_rows[s]` = j·n_s + s (the row of window(a) in the unfused
/// graph's table of the T_log + 1 windows, row j·n_s + s ← window(T_log − j)). Its incoming
/// window is window(a) of [its committed window ; its logged inputs 0 … a − 1] (bit moves),
/// written over row `row + s` — the row it reads (`source_row[s]` = `row + s`, checked with the
/// index values) — before the chain reads it. Unfused: GET_ROWS of the committed rows, CONCAT
/// with the log, CPY_SNAPSHOTS of the T_log + 1 windows, GET_ROWS of window row s over row
/// `row + s`; then the chain from those rows.
/// - `log_qkv`: F32 ne [C, T_log, n_s, 1], channels contiguous, 1 ≤ T_log ≤ 16: the logged step's
///   conv inputs (disjoint from the cache and from every output);
/// - `window_rows`: I32 ne [n_s, 1, 1, 1] in an index buffer;
/// - `row`: sequence 0's committed row (sequence s commits to and reads `row + s`);
/// - `log_out`: where the step's own conv inputs (`qkv`) are logged, F32 ne [C, n_t, n_s, 1],
///   channels contiguous, disjoint from everything else; or none;
/// - `log_k`, `log_v`: where the step's normalised k heads (`k_norm`'s values, ne
///   [D, H_k, n_t, n_s]) and v heads (the SiLU outputs of channels 2·H_k·D … C, ne
///   [D, H_v, n_t, n_s], H_v = (C − 2·H_k·D) / D) are logged, rows contiguous, disjoint from
///   everything else; or none.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ConvCommit {
    pub log_qkv: Tensor,
    pub window_rows: Tensor,
    pub row: usize,
    pub log_out: Option<Tensor>,
    pub log_k: Option<Tensor>,
    pub log_v: Option<Tensor>,
}

impl ConvCommit {
    /// The logs the launch writes, with their names.
    fn logs(&self) -> impl Iterator<Item = (&'static str, Tensor)> {
        [("log_out", self.log_out), ("log_k", self.log_k), ("log_v", self.log_v)].into_iter().filter_map(|(n, t)| t.map(|t| (n, t)))
    }
}

impl GdnConvChain {
    /// \[replay\] The v heads of `conv_out` (channels 2·H_k·D … C) as ne [D, H_v, n_t, n_s], or
    /// none when the remaining channels are not whole heads of D.
    pub fn v_heads(&self) -> Option<Tensor> {
        let [c, n_t, n_s, _] = self.conv_out.ne();
        let d = self.head_dim;
        let qk = self.n_k_heads.checked_mul(2)?.checked_mul(d)?;
        let rest = c.checked_sub(qk)?;
        if d == 0 || rest == 0 || !rest.is_multiple_of(d) {
            return None;
        }
        let nb = self.conv_out.layout.nb;
        Some(self.conv_out.view([d, rest / d, n_t, n_s], [4, d.checked_mul(4)?, nb[1], nb[2]], qk.checked_mul(4)?))
    }
}

/// The sizes a valid [`GdnConvChain`] runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainShape {
    pub d_conv: usize,
    /// Conv channels C (a multiple of 128).
    pub n_channels: usize,
    pub n_tokens: usize,
    /// n_s: sequences.
    pub n_seqs: usize,
    /// Rows of the conv cache.
    pub n_cache_rows: usize,
}

impl GdnConvChain {
    /// Validates the op and returns its sizes. Supported: d_conv 3/4/5, 1 ..= 16 tokens of each
    /// of n_s sequences, C a multiple of 128, D ∈ {32, 64, 128}, 2·H_k·D ≤ C (the remaining
    /// channels are v heads, convolved but not normalised), 1 ..= 16 rows with offsets ≤ n_t,
    /// no cache row written twice (by two slots or two sequences), no source row of one
    /// sequence written by another.
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
        if abi::gdn_conv_chain_entries(d_conv).is_none() {
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
        let [_, n_tokens, n_seqs, _] = self.qkv.ne();
        check::shape(OP, "qkv", &self.qkv, [n_channels, n_tokens, n_seqs, 1])?;
        if n_seqs == 0 || n_seqs > MAX_GRID_Y {
            return Err(Error::Unsupported { op: OP, what: format!("n_s = {n_seqs} sequences (1 ..= {MAX_GRID_Y}: grid y)") });
        }
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
        check::shape(OP, "source_row", &self.source_row, [n_seqs, 1, 1, 1])?;

        let n_rows = self.snapshots.len();
        if n_rows == 0 && self.commit.is_none() {
            return Err(Error::Invalid { op: OP, what: "no conv-state row to write (at least the live row)".into() });
        }
        if n_rows > 0 && self.commit.is_some() {
            return Err(Error::Unsupported {
                op: OP,
                what: format!("{n_rows} snapshot rows with a window commit (a replay step writes none)"),
            });
        }
        if n_rows > abi::GDN_CONV_CHAIN_MAX_ROWS {
            return Err(Error::Unsupported {
                op: OP,
                what: format!("{n_rows} conv-state rows to write (at most {})", abi::GDN_CONV_CHAIN_MAX_ROWS),
            });
        }
        for (position, s) in self.snapshots.iter().enumerate() {
            // Sequence n_s − 1 writes row + n_s − 1: the last row must exist.
            if s.row.checked_add(n_seqs - 1).is_none_or(|last| last >= n_cache_rows) {
                return Err(Error::IndexOutOfRange {
                    op: OP,
                    arg: "snapshots",
                    position,
                    index: i64::try_from(s.row.saturating_add(n_seqs - 1)).unwrap_or(i64::MAX),
                    rows: n_cache_rows,
                });
            }
            if s.offset > n_tokens {
                return Err(Error::Invalid {
                    op: OP,
                    what: format!("snapshots[{position}]: window offset {} past the {n_tokens} tokens", s.offset),
                });
            }
            // Rows row … row + n_s − 1 of two slots must not meet.
            if self.snapshots[..position].iter().any(|o| o.row.abs_diff(s.row) < n_seqs) {
                return Err(Error::Aliasing { op: OP, a: "snapshots", b: "snapshots", why: "one cache row written twice" });
            }
        }
        // The index values: in range, and [seq-batch] none a row that another sequence writes.
        self.check_source_rows(mem)?;

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
        check::shape(OP, "conv_out", &self.conv_out, [n_channels, n_tokens, n_seqs, 1])?;
        check::rows_contiguous(OP, "conv_out", &self.conv_out)?;
        check::distinct_elements(OP, "conv_out", &self.conv_out)?;
        for (arg, t) in [("q_norm", &self.q_norm), ("k_norm", &self.k_norm)] {
            check::output(OP, arg, t, DType::F32, mem)?;
            check::shape(OP, arg, t, [d, h_k, n_tokens, n_seqs])?;
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

        if let Some(commit) = &self.commit {
            self.check_commit(commit, n_channels, n_tokens, n_seqs, n_cache_rows, mem)?;
        }
        check::fits_u32(OP, "conv-cache rows", n_cache_rows)?;
        check::fits_u32(OP, "channel blocks", n_channels / block)?;
        // [hostile] the kernel takes H_k as u32 and C / 128 blocks as grid x (≤ 2^31 − 1).
        check::fits_u32(OP, "k heads", h_k)?;
        if n_channels / block > i32::MAX as usize {
            return Err(Error::Unsupported { op: OP, what: format!("C = {n_channels} channels (grid x holds at most 2^31 − 1 blocks)") });
        }
        Ok(ChainShape { d_conv, n_channels, n_tokens, n_seqs, n_cache_rows })
    }

    /// \[replay\] The commit's views (`check` has validated the chain's).
    fn check_commit(&self, commit: &ConvCommit, c: usize, n_t: usize, n_s: usize, n_cache_rows: usize, mem: &dyn Memory) -> Result<()> {
        check::tensor(OP, "log_qkv", &commit.log_qkv, DType::F32, mem)?;
        let log_tokens = commit.log_qkv.ne()[1];
        check::shape(OP, "log_qkv", &commit.log_qkv, [c, log_tokens, n_s, 1])?;
        check::rows_contiguous(OP, "log_qkv", &commit.log_qkv)?;
        if log_tokens == 0 || log_tokens > abi::GDN_CONV_CHAIN_MAX_TOKENS {
            return Err(Error::Unsupported {
                op: OP,
                what: format!("a log of {log_tokens} tokens (1 ..= {})", abi::GDN_CONV_CHAIN_MAX_TOKENS),
            });
        }
        check::tensor(OP, "window_rows", &commit.window_rows, DType::I32, mem)?;
        check::shape(OP, "window_rows", &commit.window_rows, [n_s, 1, 1, 1])?;
        if commit.row.checked_add(n_s - 1).is_none_or(|last| last >= n_cache_rows) {
            return Err(Error::IndexOutOfRange {
                op: OP,
                arg: "commit.row",
                position: 0,
                index: i64::try_from(commit.row.saturating_add(n_s - 1)).unwrap_or(i64::MAX),
                rows: n_cache_rows,
            });
        }
        // The log the step reads: off the cache and every output (the launch writes those while
        // other blocks read it).
        check::disjoint(OP, "log_qkv", &commit.log_qkv, "conv_cache", &self.conv_cache)?;
        for (arg, t) in [("conv_out", &self.conv_out), ("q_norm", &self.q_norm), ("k_norm", &self.k_norm)] {
            check::disjoint(OP, "log_qkv", &commit.log_qkv, arg, t)?;
        }
        let v_heads = self.v_heads().map(|v| v.ne());
        let logs: Vec<(&'static str, Tensor)> = commit.logs().collect();
        for (i, &(name, log)) in logs.iter().enumerate() {
            let ne = match name {
                "log_out" => [c, n_t, n_s, 1],
                "log_k" => self.k_norm.ne(),
                _ => v_heads
                    .ok_or(Error::Invalid { op: OP, what: "a v log, but the channels past 2·H_k·D are not whole heads of D".into() })?,
            };
            check::output(OP, name, &log, DType::F32, mem)?;
            check::shape(OP, name, &log, ne)?;
            check::rows_contiguous(OP, name, &log)?;
            check::distinct_elements(OP, name, &log)?;
            for &(other, t) in &logs[i + 1..] {
                check::disjoint(OP, name, &log, other, &t)?;
            }
            let log_out = &log;
            for (arg, t) in [
                ("qkv", &self.qkv),
                ("log_qkv", &commit.log_qkv),
                ("conv_cache", &self.conv_cache),
                ("weight", &self.weight),
                ("conv_out", &self.conv_out),
                ("q_norm", &self.q_norm),
                ("k_norm", &self.k_norm),
                ("source_row", &self.source_row),
                ("window_rows", &commit.window_rows),
            ] {
                check::disjoint(OP, name, log_out, arg, t)?;
            }
        }
        Ok(())
    }

    /// \[replay\] The commit's index rules on the values: sequence s reads the row it commits
    /// (`source_row[s]` = `row + s`, so no sequence reads or writes another's), and its window
    /// row is j·n_s + s with j ≤ T_log (its own window in the unfused graph's table). Returns
    /// each sequence's accepted count a = T_log − j.
    pub(crate) fn check_commit_rows(&self, commit: &ConvCommit, source_rows: &[usize], mem: &dyn Memory) -> Result<Vec<usize>> {
        let n_s = self.n_seqs();
        let log_tokens = commit.log_qkv.ne()[1];
        for (s, &row) in source_rows.iter().enumerate() {
            if commit.row.checked_add(s) != Some(row) {
                return Err(source_row_not_the_committed_row());
            }
        }
        let values = mem.index_values(&commit.window_rows).ok_or_else(|| window_rows_not_an_index_buffer(&commit.window_rows))?;
        if values.len() != n_s {
            return Err(Error::Invalid { op: OP, what: format!("{} window rows for {n_s} sequences", values.len()) });
        }
        let table_rows = (log_tokens + 1).saturating_mul(n_s);
        let mut accepted = Vec::with_capacity(n_s);
        for (s, &index) in values.iter().enumerate() {
            let row = window_row(s, index, table_rows, n_s)?;
            accepted.push(log_tokens - row / n_s);
        }
        Ok(accepted)
    }

    /// The rules that depend on the index values, as the full validation states them: every
    /// sequence's source row in 0..n_cache_rows, and [seq-batch] none a row that another
    /// sequence writes (the sequences' blocks run at the same time; the unfused GET_ROWS reads
    /// every source row before any CPY writes). The snapshot rows must have been checked
    /// (`check`). A plan runs the same rules prepared once ([`ChainIndexRules`]), which
    /// `tests/plan.rs` holds to this verdict.
    pub(crate) fn check_source_rows(&self, mem: &dyn Memory) -> Result<Vec<usize>> {
        let (n_cache_rows, n_seqs) = (self.conv_cache.ne()[1], self.n_seqs());
        let values = mem.index_values(&self.source_row).ok_or_else(|| source_row_not_an_index_buffer(&self.source_row))?;
        if values.len() != n_seqs {
            return Err(Error::Invalid { op: OP, what: format!("{} source rows for {n_seqs} sequences", values.len()) });
        }
        for (position, &index) in values.iter().enumerate() {
            if index < 0 || index as usize >= n_cache_rows {
                return Err(source_row_out_of_range(position, index, n_cache_rows));
            }
        }
        for (s, &index) in values.iter().enumerate() {
            let index = index as usize;
            if self.snapshots.iter().any(|w| index >= w.row && index - w.row < n_seqs && index - w.row != s) {
                return Err(source_row_written_by_another());
            }
        }
        let rows: Vec<usize> = values.into_iter().map(|v| v as usize).collect();
        if let Some(commit) = &self.commit {
            self.check_commit_rows(commit, &rows, mem)?;
        }
        Ok(rows)
    }

    /// What the op launches once `mem` validated it ([`Self::check`]): its entry (with the
    /// window commit in front for a replay layer), shape and parameters over `addresses`.
    pub fn launch(&self, mem: &dyn Memory, addresses: &dyn KernelAddresses) -> Result<PlainLaunch<ConvChainParams>> {
        self.launch_overlapped(mem, addresses, Overlap::NONE)
    }

    /// \[overlap\] [`Self::launch`] in form `overlap`: with `lets_next_start` the commit entries'
    /// twins that let the stream's next grid start once every block began (the same body; a
    /// chain without a commit has none); the chain never starts early. Another form is
    /// [`Error::Unsupported`].
    pub fn launch_overlapped(
        &self,
        mem: &dyn Memory,
        addresses: &dyn KernelAddresses,
        overlap: Overlap,
    ) -> Result<PlainLaunch<ConvChainParams>> {
        if !self.overlap_forms().allow(overlap) {
            return Err(super::overlap::unsupported(OP, overlap));
        }
        let shape = self.check(mem)?;
        let params = self.params(&shape, addresses);
        let blocks = (shape.n_channels / abi::GDN_CONV_CHAIN_BLOCK as usize) as u32;
        let dims = LaunchDims::new((blocks, shape.n_seqs as u32, 1), (abi::GDN_CONV_CHAIN_BLOCK, 1, 1))
            .with_shared_bytes(abi::gdn_conv_chain_shared_bytes(shape.d_conv, shape.n_tokens));
        let (entry, params) = match self.commit_params(params, addresses) {
            None => (abi::gdn_conv_chain_entry(shape.d_conv, shape.n_tokens), ConvChainParams::Chain(params)),
            Some(with_commit) if overlap.lets_next_start => {
                (abi::gdn_conv_chain_commit_overlap_entry(shape.d_conv), ConvChainParams::Commit(with_commit))
            }
            Some(with_commit) => (abi::gdn_conv_chain_commit_entry(shape.d_conv), ConvChainParams::Commit(with_commit)),
        };
        // `check` accepts only the d_conv values with entries; a typed error all the same (a
        // public entry point never panics).
        let entry = entry.ok_or_else(|| Error::Unsupported { op: OP, what: format!("d_conv = {} (no kernel entry)", shape.d_conv) })?;
        Ok(PlainLaunch { entry, dims, params })
    }

    /// \[replay\] The commit entries' parameters: the chain's `params` and the window commit's
    /// views over `addresses` (None without a commit), for a validated op.
    pub(crate) fn commit_params(
        &self,
        params: abi::GdnConvChainParams,
        addresses: &dyn KernelAddresses,
    ) -> Option<abi::GdnConvChainCommitParams> {
        let commit = self.commit.as_ref()?;
        let [window_rows_seq, ..] = check::elem_strides(&commit.window_rows);
        let [_, log_token, log_seq, _] = check::elem_strides(&commit.log_qkv);
        let [_, log_out_token, log_out_seq, _] = commit.log_out.map_or([0; 4], |t| check::elem_strides(&t));
        let [_, log_k_head, log_k_token, log_k_seq] = commit.log_k.map_or([0; 4], |t| check::elem_strides(&t));
        let [_, log_v_head, log_v_token, log_v_seq] = commit.log_v.map_or([0; 4], |t| check::elem_strides(&t));
        Some(abi::GdnConvChainCommitParams {
            chain: params,
            window_rows: addresses.address(&commit.window_rows),
            log_qkv: addresses.address(&commit.log_qkv),
            log_out: commit.log_out.map_or(0, |t| addresses.address(&t)),
            window_rows_seq,
            log_token,
            log_seq,
            log_out_token,
            log_out_seq,
            log_k: commit.log_k.map_or(0, |t| addresses.address(&t)),
            log_k_head,
            log_k_token,
            log_k_seq,
            log_v: commit.log_v.map_or(0, |t| addresses.address(&t)),
            log_v_head,
            log_v_token,
            log_v_seq,
            // Validated: 1 ..= 16.
            log_tokens: commit.log_qkv.ne()[1] as u32,
            logs: [(commit.log_out, abi::COMMIT_LOG_QKV), (commit.log_k, abi::COMMIT_LOG_K), (commit.log_v, abi::COMMIT_LOG_V)]
                .iter()
                .filter(|(t, _)| t.is_some())
                .fold(0, |bits, (_, bit)| bits | bit),
        })
    }

    /// The kernel's parameter block for a validated op.
    pub(crate) fn params(&self, shape: &ChainShape, mem: &dyn KernelAddresses) -> abi::GdnConvChainParams {
        let [_, cache_row, ..] = check::elem_strides(&self.conv_cache);
        let [source_row_seq, ..] = check::elem_strides(&self.source_row);
        let [_, qkv_token, qkv_seq, _] = check::elem_strides(&self.qkv);
        let [_, w_channel, ..] = check::elem_strides(&self.weight);
        let [_, conv_out_token, conv_out_seq, _] = check::elem_strides(&self.conv_out);
        let [_, q_head, q_token, q_seq] = check::elem_strides(&self.q_norm);
        let [_, k_head, k_token, k_seq] = check::elem_strides(&self.k_norm);
        let (mut rows, mut offsets) = ([0u32; abi::GDN_CONV_CHAIN_MAX_ROWS], [0u32; abi::GDN_CONV_CHAIN_MAX_ROWS]);
        for (i, s) in self.snapshots.iter().enumerate() {
            // Validated: row < n_cache_rows ≤ u32::MAX, offset ≤ n_t ≤ 16.
            rows[i] = s.row as u32;
            offsets[i] = s.offset as u32;
        }
        abi::GdnConvChainParams {
            cache: mem.address(&self.conv_cache),
            source_row: mem.address(&self.source_row),
            qkv: mem.address(&self.qkv),
            weight: mem.address(&self.weight),
            conv_out: mem.address(&self.conv_out),
            q_norm: mem.address(&self.q_norm),
            k_norm: mem.address(&self.k_norm),
            cache_row,
            qkv_token,
            w_channel,
            conv_out_token,
            q_head,
            q_token,
            k_head,
            k_token,
            source_row_seq,
            qkv_seq,
            conv_out_seq,
            q_seq,
            k_seq,
            n_tokens: shape.n_tokens as u32,
            head_dim: self.head_dim as u32,
            n_k_heads: self.n_k_heads as u32,
            eps: self.eps,
            n_rows: self.snapshots.len() as u32,
            n_seqs: shape.n_seqs as u32,
            rows,
            offsets,
        }
    }

    /// Row `row` of the conv cache as a [(d_conv−1)·C, 1, 1, 1] view. Never panics: on an
    /// unvalidated op whose `row · nb[1]` does not fit, the offset saturates (the view then
    /// reaches the end of the address space and overlaps conservatively).
    pub fn cache_row(&self, row: usize) -> Tensor {
        self.cache_rows(row, 1)
    }

    /// The rows `row … row + n_s − 1` a snapshot at `row` writes (one per sequence) as a
    /// [(d_conv−1)·C, n_s, 1, 1] view; saturating like [`GdnConvChain::cache_row`].
    pub fn cache_rows(&self, row: usize, n_seqs: usize) -> Tensor {
        let nb = self.conv_cache.layout.nb;
        self.conv_cache.view([self.conv_cache.ne()[0], n_seqs.max(1), 1, 1], [nb[0], nb[1], nb[1], nb[1]], row.saturating_mul(nb[1]))
    }

    /// n_s as the views say (the qkv's sequences; at least 1).
    pub fn n_seqs(&self) -> usize {
        self.qkv.ne()[2].max(1)
    }
}

// The index rules' errors, one constructor each, so the per-call and the prepared rules
// cannot word them differently.
fn source_row_not_an_index_buffer(source_row: &Tensor) -> Error {
    Error::Invalid {
        op: OP,
        what: format!("`source_row` (buffer {}) is not an index buffer: its value must be known to the host", source_row.buffer.0),
    }
}

fn source_row_out_of_range(position: usize, index: i32, n_cache_rows: usize) -> Error {
    Error::IndexOutOfRange { op: OP, arg: "source_row", position, index: index as i64, rows: n_cache_rows }
}

// [replay] The commit's rules.
fn source_row_not_the_committed_row() -> Error {
    Error::Aliasing {
        op: OP,
        a: "source_row",
        b: "commit.row",
        why: "a sequence must read the conv row its window commit writes (row + s)",
    }
}

fn window_rows_not_an_index_buffer(window_rows: &Tensor) -> Error {
    Error::Invalid {
        op: OP,
        what: format!("`window_rows` (buffer {}) is not an index buffer: its value must be known to the host", window_rows.buffer.0),
    }
}

/// Sequence `s`'s window row: `index` in range (< `table_rows`) and sequence s's (row j·n_s + s),
/// else the error.
#[inline]
fn window_row(s: usize, index: i32, table_rows: usize, n_s: usize) -> Result<usize> {
    let row = usize::try_from(index).ok().filter(|&r| r < table_rows).ok_or(Error::IndexOutOfRange {
        op: OP,
        arg: "window_rows",
        position: s,
        index: index as i64,
        rows: table_rows,
    })?;
    if row % n_s != s {
        return Err(Error::Aliasing {
            op: OP,
            a: "window_rows",
            b: "conv_cache",
            why: "a sequence's window row is another sequence's window (row j·n_s + s is sequence s's)",
        });
    }
    Ok(row)
}

fn source_row_written_by_another() -> Error {
    Error::Aliasing {
        op: OP,
        a: "source_row",
        b: "snapshots",
        why: "a sequence reads a conv-cache row that another sequence of the step writes",
    }
}

/// [host-cost] GDN_CONV_CHAIN's index rules prepared for a plan: which sequence may read each
/// conv-cache row the step writes (a [`RowReaders`] table: row `w.row + s` of snapshot `w` by
/// sequence `s` alone), so a step reads each value once and makes two comparisons and one load
/// — where [`GdnConvChain::check_source_rows`] copies the values out and scans every snapshot
/// for each. Views the table does not cover (never a real step's) keep the per-call rules.
#[derive(Clone, Debug)]
pub(crate) enum ChainIndexRules {
    Table(ChainTable),
    /// [replay] A replay layer's chain with its window commit.
    Commit(Box<CommitTable>),
    PerCall(Box<GdnConvChain>),
}

/// [replay] [host-cost] The rules of a chain with a window commit, prepared: the source rows
/// read in place against the rows the commit writes (row + s), the window rows against the
/// table (in range, sequence s's own) — `check_source_rows` and `check_commit_rows` without
/// copying the values out.
#[derive(Clone, Debug)]
pub(crate) struct CommitTable {
    source: IndexView,
    window: IndexView,
    n_cache_rows: usize,
    /// The commit's first row (`ConvCommit::row`).
    row: usize,
    /// Rows of the window table: (T_log + 1)·n_s.
    table_rows: usize,
    n_seqs: usize,
}

#[derive(Clone, Debug)]
pub(crate) struct ChainTable {
    pub index: IndexView,
    n_cache_rows: usize,
    readers: RowReaders,
}

impl ChainIndexRules {
    pub fn new(op: &GdnConvChain) -> ChainIndexRules {
        let prepared = match op.commit {
            None => Self::table(op).map(ChainIndexRules::Table),
            Some(_) => Self::commit_table(op).map(|t| ChainIndexRules::Commit(Box::new(t))),
        };
        prepared.unwrap_or_else(|| ChainIndexRules::PerCall(Box::new(op.clone())))
    }

    /// [replay] The commit's table; `None` (per-call rules) for views no real step has: index
    /// views that are not plain I32 vectors of n_s values (the per-call count rules, which
    /// validation states first), or snapshot rows beside the commit (which validation refuses).
    fn commit_table(op: &GdnConvChain) -> Option<CommitTable> {
        let commit = op.commit.as_ref()?;
        let n_seqs = op.n_seqs();
        let (source, window) = (IndexView::new(&op.source_row)?, IndexView::new(&commit.window_rows)?);
        if op.source_row.ne()[0] != n_seqs || commit.window_rows.ne()[0] != n_seqs || !op.snapshots.is_empty() {
            return None;
        }
        let table_rows = (commit.log_qkv.ne()[1] + 1).saturating_mul(n_seqs);
        Some(CommitTable { source, window, n_cache_rows: op.conv_cache.ne()[1], row: commit.row, table_rows, n_seqs })
    }

    fn table(op: &GdnConvChain) -> Option<ChainTable> {
        let (n_cache_rows, n_seqs) = (op.conv_cache.ne()[1], op.n_seqs());
        let index = IndexView::new(&op.source_row)?;
        // `check_source_rows`' count rule, decided by the views: validation refused a view of
        // another length (its shape check comes first), so only the per-call rules state it.
        if op.source_row.ne()[0] != n_seqs {
            return None;
        }
        let touches = op.snapshots.len().checked_mul(n_seqs).filter(|&n| n <= MAX_TOUCHES)?;
        let mut rows = Vec::with_capacity(touches);
        for w in &op.snapshots {
            // Rows w.row … w.row + n_s − 1, row w.row + s written by sequence s; only rows of
            // the cache can be read (the range rule comes first).
            for s in 0..n_seqs {
                match w.row.checked_add(s) {
                    Some(row) if row < n_cache_rows => rows.push((row, Some(s))),
                    _ => break,
                }
            }
        }
        let readers = RowReaders::from_touches(&rows)?;
        Some(ChainTable { index, n_cache_rows, readers })
    }
}

impl ChainTable {
    /// The first rule (in range) on one value: the error, if it breaks it.
    #[inline]
    pub fn range(&self, position: usize, index: i32) -> Result<usize> {
        match usize::try_from(index) {
            Ok(row) if row < self.n_cache_rows => Ok(row),
            _ => Err(source_row_out_of_range(position, index, self.n_cache_rows)),
        }
    }

    /// The second rule on one value in range: sequence `position` may read `row`.
    #[inline]
    pub fn may_read(&self, position: usize, row: usize) -> bool {
        self.readers.may_read(row, position)
    }

    pub fn written_by_another(&self) -> Error {
        source_row_written_by_another()
    }

    pub fn not_an_index_buffer(&self) -> Error {
        source_row_not_an_index_buffer(&self.index.tensor)
    }

    /// Both rules, in `check_source_rows`' order (every value in range, then no row another
    /// sequence writes), over values already read.
    pub fn check_values(&self, values: &Values) -> Result<()> {
        values.range_then_readers(|p, v| self.range(p, v), |p, row| self.may_read(p, row), source_row_written_by_another)
    }
}

impl CommitTable {
    /// `check_source_rows`' rules in its order: every source row in range, each sequence's the
    /// row its commit writes, then each window row in range and the sequence's own.
    fn check(&self, mem: &dyn Memory) -> Result<()> {
        let source = self.source.read(mem).ok_or_else(|| source_row_not_an_index_buffer(&self.source.tensor))?;
        let n_cache_rows = self.n_cache_rows;
        source.try_for_each(|position, index| match usize::try_from(index) {
            Ok(row) if row < n_cache_rows => Ok(()),
            _ => Err(source_row_out_of_range(position, index, n_cache_rows)),
        })?;
        let mut foreign = false;
        // In range (checked above): the cast is lossless.
        source.try_for_each(|s, index| {
            foreign |= self.row.checked_add(s) != Some(index as usize);
            Ok(())
        })?;
        if foreign {
            return Err(source_row_not_the_committed_row());
        }
        let window = self.window.read(mem).ok_or_else(|| window_rows_not_an_index_buffer(&self.window.tensor))?;
        window.try_for_each(|s, index| window_row(s, index, self.table_rows, self.n_seqs).map(|_| ()))
    }
}

impl IndexRules for ChainIndexRules {
    fn check(&self, mem: &dyn Memory) -> Result<()> {
        match self {
            ChainIndexRules::Table(t) => t.check_values(&t.index.read(mem).ok_or_else(|| t.not_an_index_buffer())?),
            ChainIndexRules::Commit(t) => t.check(mem),
            ChainIndexRules::PerCall(op) => op.check_source_rows(mem).map(|_| ()),
        }
    }
}

// SAFETY: `#[repr(C)]`, `Copy`, twenty u64 then six 4-byte scalars and two [u32; 16] tables:
// 312 bytes, every field at its natural alignment with no gap and no tail padding (size is a
// multiple of 8), alignment 8; it is exactly the type the `gdn_conv_chain_f32_d*` entries take.
unsafe impl KernelParams for abi::GdnConvChainParams {}

// SAFETY: `#[repr(C)]`, `Copy`: the 312-byte GdnConvChainParams, then sixteen u64 and two u32 —
// 448 bytes, every field at its natural alignment with no gap and no tail padding (`param_struct!`
// asserts the sum), alignment 8; exactly the type the `gdn_conv_chain_commit_f32_d*` entries take.
unsafe impl KernelParams for abi::GdnConvChainCommitParams {}

impl Op for GdnConvChain {
    fn name(&self) -> &'static str {
        OP
    }

    fn validate(&self, mem: &dyn Memory) -> Result<()> {
        self.check(mem).map(|_| ())
    }

    fn check_indices(&self, mem: &dyn Memory) -> Result<()> {
        self.check_source_rows(mem).map(|_| ())
    }

    /// The same rules prepared once (`ChainIndexRules`: a table of the rows each sequence may
    /// read, made from the snapshot rows).
    fn index_rules(&self) -> Box<dyn IndexRules> {
        Box::new(ChainIndexRules::new(self))
    }

    fn prepare(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<PreparedLaunch> {
        self.prepare_overlapped(gpu, mem, Overlap::NONE)
    }

    /// \[overlap\] With a commit, the entry that lets the next grid start early.
    fn overlap_forms(&self) -> Forms {
        Forms { lets_next_start: self.commit.is_some(), early: None }
    }

    fn prepare_overlapped(&self, gpu: &Gpu, mem: &DeviceMemory, overlap: Overlap) -> Result<PreparedLaunch> {
        let PlainLaunch { entry, dims, params } = self.launch_overlapped(mem, mem, overlap)?;
        let args = match params {
            ConvChainParams::Chain(p) => [KernelArg::Params(ParamBlock::of(&p)?)],
            ConvChainParams::Commit(p) => [KernelArg::Params(ParamBlock::of(&p)?)],
        };
        // SAFETY: `check` proved that every sequence's source index (whose device copy holds the
        // host-known value) and every snapshot row of every sequence lie in the cache, the rows
        // are distinct, no sequence reads a row another sequence writes, offsets ≤ n_t,
        // every view covers C = blocks·128 channels, n_t tokens, d_conv taps and 2·H_k heads of
        // D ∈ {32, 64, 128}; that the outputs are disjoint from each other and from the inputs
        // except conv_out = qkv element for element (each thread reads before it writes) and the
        // cache rows the kernel reads before its barrier; the shared memory is what the kernel
        // lays out for (d_conv, n_t); and the single parameter is the entry's parameter struct.
        // [replay] With a commit: every window row is j·n_s + s (j ≤ T_log), every sequence reads
        // the row it commits (so no other sequence's), each commit float read then written by
        // one thread, the logs cover C channels × their tokens × n_s and are off every other view
        // the launch writes. [overlap] The entry that lets the next grid start runs the same body
        // after a scheduling hint; this launch itself is plain.
        unsafe { gpu.prepare(entry, dims, &args) }
    }

    fn reference(&self, mem: &mut HostMemory, mufu: &mut dyn Mufu) -> Result<()> {
        self.check(mem)?;
        // Validated: an index buffer of n_s rows in 0..n_cache_rows.
        let source_rows: Vec<usize> = mem
            .index_values(&self.source_row)
            .ok_or_else(|| Error::Invalid { op: OP, what: "`source_row` is not an index buffer".into() })?
            .into_iter()
            .map(|r| r as usize)
            .collect();
        let views = crate::reference::gdn_conv_chain::ChainViews {
            conv_cache: self.conv_cache,
            qkv: self.qkv,
            weight: self.weight,
            conv_out: self.conv_out,
            q_norm: self.q_norm,
            k_norm: self.k_norm,
            head_dim: self.head_dim,
            n_k_heads: self.n_k_heads,
            eps: self.eps,
        };
        if let Some(commit) = &self.commit {
            // The commit, then the log of this step's inputs (read before conv_out, which may be
            // qkv, is written), then the chain from the committed rows.
            let accepted = self.check_commit_rows(commit, &source_rows, mem)?;
            crate::reference::gdn_conv_chain::commit_windows(&self.conv_cache, &commit.log_qkv, &source_rows, &accepted, mem)?;
            if let Some(log_out) = commit.log_out {
                crate::reference::cpy::cpy(&self.qkv, &log_out, mem)?;
            }
        }
        let snapshots: Vec<(usize, usize)> = self.snapshots.iter().map(|s| (s.row, s.offset)).collect();
        crate::reference::gdn_conv_chain::gdn_conv_chain(&views, &source_rows, &snapshots, mem, mufu)?;
        // [replay] The k and v logs: copies of the values just written.
        if let Some(commit) = &self.commit {
            for (src, dst) in [(Some(self.k_norm), commit.log_k), (self.v_heads(), commit.log_v)] {
                if let (Some(src), Some(dst)) = (src, dst) {
                    crate::reference::cpy::cpy(&src, &dst, mem)?;
                }
            }
        }
        Ok(())
    }

    fn inputs(&self) -> Vec<Tensor> {
        // The cache is read at a row known only through the index: the whole cache.
        let mut inputs = vec![self.conv_cache, self.source_row, self.qkv, self.weight];
        if let Some(commit) = &self.commit {
            inputs.extend([commit.log_qkv, commit.window_rows]);
        }
        inputs
    }

    fn outputs(&self) -> Vec<Tensor> {
        let mut out = vec![self.conv_out, self.q_norm, self.k_norm];
        let n_seqs = self.n_seqs();
        out.extend(self.snapshots.iter().map(|s| self.cache_rows(s.row, n_seqs)));
        if let Some(commit) = &self.commit {
            out.push(self.cache_rows(commit.row, n_seqs));
            out.extend(commit.logs().map(|(_, t)| t));
        }
        out
    }

    fn must_write(&self) -> Vec<Tensor> {
        self.outputs()
    }
}
