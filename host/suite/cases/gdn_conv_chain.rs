//! GDN_CONV_CHAIN cases: n_t 1 … 16, R ∈ {0, 2, 3, 7, 15} (R + 1 rows written by the clamped
//! rule: slot j → row j·M + kv_head with window(max(0, n_t − j))), short drafts (n_t < 1 + R),
//! the read row among the written rows and not, conv_out aliasing qkv and not, d_conv 3/4/5,
//! head dims 32/64/128, Qwen3.5 9B/27B sizes, padded strides, special values; refusals; \[replay\]
//! the window commit in front ([`CommitSetup`]), n_t 1 … 16 over one to three sequences.
//!
//! Every match case has a twin in [`VS_UNFUSED`]: the fused op and the unfused chain it replaces
//! (GET_ROWS, CONCAT, CPY or CPY_SNAPSHOTS, SSM_CONV+SiLU, L2_NORM ×2 — as
//! `graph::layer::unfused_ops` builds them) run from the same memory, and conv_out, q_norm, k_norm and
//! the whole conv cache must come out byte for byte identical — and so must every other buffer
//! (inputs, guard bytes, padding) but the unfused chain's own intermediates.

use crate::Error;
use crate::ops::{ConcatDim0, ConvCommit, Cpy, CpySnapshots, GdnConvChain, GetRows, L2Norm, Op, SnapshotWrite, SsmConv};
use crate::suite::inputs::Values;
use crate::suite::{Builder, Case, Equivalence, Expect, Scenario, Tolerance};
use crate::tensor::{DType, Tensor};

pub const GROUP: &str = "GDN_CONV_CHAIN";
/// The fused op against the unfused chain on the GPU (both runs), bitwise.
pub const VS_UNFUSED: &str = "GDN_CONV_CHAIN_VS_UNFUSED";
/// Qwen3.5's `rms_norm_eps`.
const EPS: f32 = 1e-6;
/// Bound against the exact-math reference (SiLU then L2: a few MUFU ulp, amplified by the norm).
const EXACT_MATH_TOLERANCE: Tolerance = Tolerance::AbsRel { abs: 2e-5, rel: 1e-4 };

/// Sizes of one layer's conv chain and of the step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ChainSetup {
    pub d_conv: usize,
    pub head_dim: usize,
    pub n_k_heads: usize,
    pub n_v_heads: usize,
    pub n_t: usize,
    /// Rollback snapshots R: rows j·M + kv_head for j = 0 … R are written.
    pub n_rollback: usize,
    /// Cells per group, M.
    pub cells: usize,
    pub kv_head: usize,
    /// The row read (`s_copy` = rs_idx·M + src_cell).
    pub source_row: usize,
    /// conv_out is qkv itself (element for element).
    pub alias_out: bool,
    /// Extra elements after every cache row, projection row and q/k head (non-contiguous views).
    pub pad: usize,
    pub specials: bool,
}

/// A small shape (q, k and v heads of `head_dim`), reading `src_cell`'s row `rs_idx` groups back.
const fn shape(d_conv: usize, head_dim: usize, heads: [usize; 2], cells: usize, kv_head: usize) -> ChainSetup {
    ChainSetup {
        d_conv,
        head_dim,
        n_k_heads: heads[0],
        n_v_heads: heads[1],
        n_t: 1,
        n_rollback: 0,
        cells,
        kv_head,
        source_row: 0,
        alias_out: false,
        pad: 0,
        specials: false,
    }
}

impl ChainSetup {
    /// The five sweep shapes: d_conv 3/4/5, head dims 32–128, the read row among the written
    /// rows (A, C, E) and not (B, D). `rs_idx` picks the group the read row is in (≤ R).
    pub fn sweep_shape(i: usize, n_t: usize, n_rollback: usize) -> ChainSetup {
        let rs = |max: usize| max.min(n_rollback);
        let s = match i {
            // A: live row of kv_head is read and rewritten (slot 0).
            0 => ChainSetup { source_row: 1, ..shape(4, 128, [2, 2], 2, 1) },
            // B: another cell's row is read; written rows are j·2 + 0.
            1 => ChainSetup { source_row: 1, ..shape(3, 64, [2, 2], 2, 0) },
            // C: one cell, a rollback read rs_idx ≤ 2 groups back (a written slot).
            2 => ChainSetup { source_row: rs(2), ..shape(5, 32, [4, 4], 1, 0) },
            // D: three cells, the read row is cell 0 of group rs_idx, written rows are cell 2's.
            3 => ChainSetup { source_row: 3 * rs(1), ..shape(4, 64, [2, 4], 3, 2) },
            // E: D = 128 with one k head, a rollback read of kv_head's own row.
            _ => ChainSetup { source_row: 2 * rs(1) + 1, ..shape(3, 128, [1, 2], 2, 1) },
        };
        ChainSetup { n_t, n_rollback, alias_out: (n_t + n_rollback) % 2 == 1, ..s }
    }

    /// Qwen3.5 sizes (D = 128, H_k = 16, d_conv 4), one cell.
    pub fn qwen(n_v_heads: usize, n_t: usize, n_rollback: usize, alias_out: bool) -> ChainSetup {
        ChainSetup { n_t, n_rollback, alias_out, ..shape(4, 128, [16, n_v_heads], 1, 0) }
    }

    pub fn channels(&self) -> usize {
        (2 * self.n_k_heads + self.n_v_heads) * self.head_dim
    }

    fn state_len(&self) -> usize {
        self.d_conv - 1
    }

    /// Rows written: slot j → (row j·M + kv_head, offset max(0, n_t − j)), j = 0 … R.
    pub fn snapshots(&self) -> Vec<SnapshotWrite> {
        (0..=self.n_rollback).map(|j| SnapshotWrite { row: j * self.cells + self.kv_head, offset: self.n_t.saturating_sub(j) }).collect()
    }

    pub fn name(&self, group: &str) -> String {
        format!(
            "{group}(d_conv={},D={},H_k={},H_v={},n_t={},R={},M={},kv_head={},src={}{}{}{})",
            self.d_conv,
            self.head_dim,
            self.n_k_heads,
            self.n_v_heads,
            self.n_t,
            self.n_rollback,
            self.cells,
            self.kv_head,
            self.source_row,
            if self.alias_out { ",out=qkv" } else { "" },
            if self.pad > 0 { format!(",pad={}", self.pad) } else { String::new() },
            if self.specials { ",specials" } else { "" },
        )
    }

    /// The fused op on freshly built tensors.
    pub fn build(&self, b: &mut Builder) -> GdnConvChain {
        let (c, n_t, d, h_k, pad) = (self.channels(), self.n_t, self.head_dim, self.n_k_heads, self.pad);
        let values = if self.specials { Values::WithSpecials { scale: 1.0, every: 97 } } else { Values::Uniform(1.0) };
        let rows = self.cells * (1 + self.n_rollback);
        let conv_cache = b.tensor_padded(DType::F32, [self.state_len() * c, rows, 1, 1], [pad, 0, 0, 0], values);
        let source_row = b.mem.alloc_indices(&[self.source_row as i32]);
        let qkv = b.tensor_padded(DType::F32, [c, n_t, 1, 1], [pad, 0, 0, 0], values);
        let weight = b.input([self.d_conv, c, 1, 1], Values::Uniform(0.5));
        let conv_out = if self.alias_out { qkv } else { b.tensor_padded(DType::F32, [c, n_t, 1, 1], [pad, 0, 0, 0], Values::AnyBits) };
        let mut norm = || b.tensor_padded(DType::F32, [d, h_k, n_t, 1], [pad, 0, 0, 0], Values::AnyBits);
        let (q_norm, k_norm) = (norm(), norm());
        GdnConvChain {
            conv_cache,
            source_row,
            qkv,
            weight,
            snapshots: self.snapshots(),
            conv_out,
            q_norm,
            k_norm,
            head_dim: d,
            n_k_heads: h_k,
            eps: EPS,
            commit: None,
        }
    }

    /// The unfused chain of the same step on the same tensors, as `graph::layer::unfused_ops` builds
    /// it (its intermediates in new buffers).
    pub fn unfused(&self, b: &mut Builder, op: &GdnConvChain) -> Vec<Box<dyn Op>> {
        let (c, n_t, s, d, h_k) = (self.channels(), self.n_t, self.state_len(), self.head_dim, self.n_k_heads);
        let conv_states = b.output([s * c, 1, 1, 1]);
        let conv_input = b.output([s + n_t, c, 1, 1]);
        let states = conv_states.reshape([s, c, 1, 1]).expect("a contiguous output");
        let mut ops: Vec<Box<dyn Op>> = vec![
            Box::new(GetRows { src: op.conv_cache, rows: op.source_row, dst: conv_states }),
            Box::new(ConcatDim0 { a: states, b: op.qkv.transpose(), dst: conv_input }),
        ];
        if self.n_rollback == 0 {
            let nb = conv_input.layout.nb;
            let window = conv_input.view([s, c, 1, 1], [4, nb[1], nb[2], nb[3]], 4 * n_t);
            let cnb = op.conv_cache.layout.nb;
            let dst = op.conv_cache.view([s * c, 1, 1, 1], [cnb[0], cnb[1], cnb[1], cnb[1]], self.kv_head * cnb[1]);
            ops.push(Box::new(Cpy { src: window, dst }));
        } else {
            ops.push(Box::new(CpySnapshots {
                conv_input,
                cache: op.conv_cache,
                d_conv: self.d_conv,
                first_row: self.kv_head,
                group_stride: self.cells,
                n_slots: self.n_rollback + 1,
            }));
        }
        ops.push(Box::new(SsmConv { conv_input, weight: op.weight, bias: None, dst: op.conv_out, apply_silu: true }));
        let nb = op.conv_out.layout.nb;
        for (which, dst) in [(0, op.q_norm), (1, op.k_norm)] {
            let src = op.conv_out.view([d, h_k, n_t, 1], [4, 4 * d, nb[1], nb[2]], 4 * which * h_k * d);
            ops.push(Box::new(L2Norm { src, dst, eps: EPS }));
        }
        ops
    }

    /// Fused vs unfused from the same memory: conv_out, q_norm, k_norm and the whole cache
    /// element by element, then every buffer but the unfused intermediates byte for byte.
    pub fn equivalence(&self, mut b: Builder) -> Equivalence {
        let op = self.build(&mut b);
        let unfused = self.unfused(&mut b, &op);
        let compare = [op.conv_out, op.q_norm, op.k_norm, op.conv_cache].map(|t| (t, t)).to_vec();
        Equivalence::new(b.mem, vec![Box::new(op)], unfused, compare)
    }

    fn match_case(self) -> Case {
        Case::seeded(GROUP, self.name(GROUP), move |mut b| {
            let op = self.build(&mut b);
            Ok(b.finish(vec![Box::new(op)], EXACT_MATH_TOLERANCE, false))
        })
    }

    fn vs_unfused_case(self) -> Case {
        Case::seeded(VS_UNFUSED, self.name(VS_UNFUSED), move |b| Ok(Expect::Equivalent(self.equivalence(b))))
    }
}

/// \[replay\] A GDN_CONV_CHAIN with a window commit in front (`ConvCommit`): n_s sequences on
/// cells [`CommitSetup::ROW`] … of a [`CommitSetup::CHANNELS`]-channel cache of 2·n_s + 4 rows
/// (H_k = 2, D = 32), a log of `log_t` tokens, a verify of `n_t`, sequence s having accepted
/// (shift + s) mod (log_t + 1) of the logged tokens; every log written.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CommitSetup {
    pub n_s: usize,
    pub log_t: usize,
    pub n_t: usize,
    pub d_conv: usize,
    pub shift: usize,
}

impl CommitSetup {
    /// The conv cache's channels.
    pub const CHANNELS: usize = 256;
    /// The first row the sequences commit (rows 0, 1 and the ones after theirs are other cells).
    pub const ROW: usize = 2;

    /// Each sequence's accepted count.
    pub fn accepted(&self) -> Vec<usize> {
        (0..self.n_s).map(|s| (self.shift + s) % (self.log_t + 1)).collect()
    }

    pub fn name(&self) -> String {
        let CommitSetup { n_s, log_t, n_t, d_conv, shift } = *self;
        format!("{GROUP}(commit,n_s={n_s},T_log={log_t},n_t={n_t},d_conv={d_conv},shift={shift})")
    }

    /// The fused op on freshly built tensors.
    pub fn build(&self, b: &mut Builder) -> GdnConvChain {
        let CommitSetup { n_s, log_t, n_t, d_conv, .. } = *self;
        let (c, state_len, kv_head) = (Self::CHANNELS, d_conv - 1, Self::ROW);
        let (d, h_k) = (32, 2);
        let rand = Values::Uniform(1.0);
        let conv_cache = b.tensor_padded(DType::F32, [state_len * c, 2 * n_s + 4, 1, 1], [0; 4], rand);
        let source_row = b.mem.alloc_indices(&(0..n_s).map(|s| (kv_head + s) as i32).collect::<Vec<_>>());
        let window_rows =
            b.mem.alloc_indices(&self.accepted().iter().enumerate().map(|(s, &a)| ((log_t - a) * n_s + s) as i32).collect::<Vec<_>>());
        let log_qkv = b.tensor_padded(DType::F32, [c, log_t, n_s, 1], [0; 4], rand);
        let qkv = b.tensor_padded(DType::F32, [c, n_t, n_s, 1], [0; 4], rand);
        let weight = b.tensor_padded(DType::F32, [d_conv, c, 1, 1], [0; 4], rand);
        let (conv_out, q_norm, k_norm, log_out) =
            (b.output([c, n_t, n_s, 1]), b.output([d, h_k, n_t, n_s]), b.output([d, h_k, n_t, n_s]), b.output([c, n_t, n_s, 1]));
        let (log_k, log_v) = (b.output([d, h_k, n_t, n_s]), b.output([d, (c - 2 * h_k * d) / d, n_t, n_s]));
        let commit = ConvCommit { log_qkv, window_rows, row: kv_head, log_out: Some(log_out), log_k: Some(log_k), log_v: Some(log_v) };
        GdnConvChain {
            conv_cache,
            source_row,
            qkv,
            weight,
            snapshots: vec![],
            conv_out,
            q_norm,
            k_norm,
            head_dim: d,
            n_k_heads: h_k,
            eps: EPS,
            commit: Some(commit),
        }
    }

    /// The fused op against its reference (`tests/gdn_conv_chain.rs` holds the reference to the
    /// unfused commit and chain, bit for bit).
    fn match_case(self) -> Case {
        Case::seeded(GROUP, self.name(), move |mut b| {
            let op = self.build(&mut b);
            Ok(b.finish(vec![Box::new(op)], EXACT_MATH_TOLERANCE, false))
        })
    }
}

/// \[replay\] The commit cases: n_t over 1 … 16 (every count of token slots the kernel unrolls,
/// and their edges), d_conv 3 / 4 / 5, one to three sequences, accepted counts from 0 to T_log.
fn commit_setups() -> Vec<CommitSetup> {
    #[rustfmt::skip]
    let table: [(usize, usize, usize, usize); 10] = [
        (1, 1, 1, 4), (2, 3, 3, 3), (1, 4, 4, 4), (2, 4, 5, 4), (3, 8, 7, 5),
        (2, 8, 8, 4), (2, 16, 9, 4), (3, 12, 12, 3), (3, 16, 16, 4), (2, 2, 15, 5),
    ];
    table
        .iter()
        .flat_map(|&(n_s, log_t, n_t, d_conv)| {
            [0, log_t / 2 + 1].into_iter().map(move |shift| CommitSetup { n_s, log_t, n_t, d_conv, shift })
        })
        .collect()
}

/// A refusal: the setup's op, edited, must fail validation with an error `predicate` accepts.
struct Refusal {
    name: &'static str,
    setup: ChainSetup,
    edit: fn(&mut GdnConvChain, &mut Builder),
    predicate: fn(&Error) -> bool,
    expected: &'static str,
}

impl Refusal {
    fn case(self) -> Case {
        let name = format!("{GROUP}(refused:{},{}", self.name, &self.setup.name("")[1..]);
        Case::seeded(GROUP, name, move |mut b| {
            let mut op = self.setup.build(&mut b);
            (self.edit)(&mut op, &mut b);
            let scenario = Scenario { mem: b.mem, ops: vec![Box::new(op)], tolerance: Tolerance::BitExact, exact_nan_payloads: true };
            Ok(Expect::Refusal { scenario, predicate: self.predicate, expected: self.expected })
        })
    }
}

fn refusals() -> Vec<Refusal> {
    let base = ChainSetup::sweep_shape(0, 4, 3);
    vec![
        Refusal {
            name: "17_rows",
            setup: ChainSetup { n_rollback: 16, ..base },
            edit: |_, _| {},
            predicate: |e| matches!(e, Error::Unsupported { op: GROUP, .. }),
            expected: "Unsupported: 17 rows to write",
        },
        Refusal {
            name: "n_t_17",
            setup: ChainSetup { n_t: 17, ..base },
            edit: |_, _| {},
            predicate: |e| matches!(e, Error::Unsupported { op: GROUP, .. }),
            expected: "Unsupported: 17 tokens",
        },
        Refusal {
            name: "duplicate_row",
            setup: base,
            edit: |op, _| op.snapshots[2].row = op.snapshots[0].row,
            predicate: |e| matches!(e, Error::Aliasing { op: GROUP, a: "snapshots", b: "snapshots", .. }),
            expected: "Aliasing: one row written twice",
        },
        Refusal {
            name: "d_conv_9",
            setup: base,
            edit: |op, b| {
                let c = op.weight.ne()[1];
                op.weight = b.input([9, c, 1, 1], Values::Uniform(0.5));
                op.conv_cache = b.tensor_padded(DType::F32, [8 * c, op.conv_cache.ne()[1], 1, 1], [0; 4], Values::Uniform(1.0));
            },
            predicate: |e| matches!(e, Error::Unsupported { op: GROUP, .. }),
            expected: "Unsupported: d_conv = 9",
        },
        Refusal {
            name: "bad_index",
            setup: base,
            edit: |op, b| op.source_row = b.mem.alloc_indices(&[op.conv_cache.ne()[1] as i32]),
            predicate: |e| matches!(e, Error::IndexOutOfRange { op: GROUP, arg: "source_row", .. }),
            expected: "IndexOutOfRange: source row past the cache",
        },
        Refusal {
            name: "negative_index",
            setup: base,
            edit: |op, b| op.source_row = b.mem.alloc_indices(&[-1]),
            predicate: |e| matches!(e, Error::IndexOutOfRange { op: GROUP, arg: "source_row", index: -1, .. }),
            expected: "IndexOutOfRange: source row −1",
        },
        Refusal {
            name: "row_past_cache",
            setup: base,
            edit: |op, _| op.snapshots[1].row = op.conv_cache.ne()[1],
            predicate: |e| matches!(e, Error::IndexOutOfRange { op: GROUP, arg: "snapshots", position: 1, .. }),
            expected: "IndexOutOfRange: snapshot row past the cache",
        },
        Refusal {
            name: "offset_past_n_t",
            setup: base,
            edit: |op, _| op.snapshots[0].offset = 5,
            predicate: |e| matches!(e, Error::Invalid { op: GROUP, .. }),
            expected: "Invalid: window offset past n_t",
        },
        Refusal {
            name: "head_dim_16",
            setup: base,
            edit: |op, b| {
                op.head_dim = 16;
                op.q_norm = b.output([16, op.n_k_heads, 4, 1]);
                op.k_norm = b.output([16, op.n_k_heads, 4, 1]);
            },
            predicate: |e| matches!(e, Error::Unsupported { op: GROUP, .. }),
            expected: "Unsupported: head_dim = 16",
        },
        Refusal {
            name: "conv_out_shifted_over_qkv",
            setup: base,
            edit: |op, _| op.conv_out = op.qkv.view(op.qkv.ne(), op.qkv.layout.nb, 4),
            predicate: |e| matches!(e, Error::Aliasing { op: GROUP, a: "conv_out", b: "qkv", .. }),
            expected: "Aliasing: conv_out partly over qkv",
        },
        Refusal {
            name: "k_norm_in_cache",
            setup: base,
            edit: |op, _| op.k_norm = Tensor::new(op.conv_cache.buffer, op.k_norm.layout.view(op.k_norm.ne(), op.k_norm.layout.nb, 0)),
            predicate: |e| matches!(e, Error::Aliasing { op: GROUP, a: "k_norm", b: "conv_cache", .. }),
            expected: "Aliasing: k_norm over the cache",
        },
    ]
}

/// The match cases: (n_t, R, sweep shape, conv_out = qkv) covering n_t 1 … 16, every R, short
/// drafts, both read-row placements and both conv_out placements; then Qwen3.5 sizes, padded
/// views and special values.
fn match_setups() -> Vec<ChainSetup> {
    #[rustfmt::skip]
    let table: [(usize, usize, usize, bool); 18] = [
        (1, 0, 0, false), (1, 15, 1, true), (2, 3, 2, false), (3, 7, 3, true), (4, 3, 0, false),
        (5, 2, 4, true), (6, 15, 0, false), (7, 7, 1, false), (8, 7, 2, true), (9, 0, 3, false),
        (10, 2, 4, false), (11, 3, 1, true), (12, 15, 2, false), (13, 7, 3, false), (14, 0, 4, true),
        (15, 15, 0, true), (16, 15, 1, false), (16, 3, 4, false),
    ];
    let mut setups: Vec<ChainSetup> =
        table.iter().map(|&(n_t, r, s, alias_out)| ChainSetup { alias_out, ..ChainSetup::sweep_shape(s, n_t, r) }).collect();
    setups.extend([
        // Qwen3.5-9B (C = 8192): decode, MTP K=3 (T=4, 4 rows), DFlash 7 (T=8, 8 rows), full.
        ChainSetup::qwen(32, 1, 0, false),
        ChainSetup::qwen(32, 4, 3, true),
        ChainSetup::qwen(32, 8, 7, false),
        ChainSetup::qwen(32, 16, 15, true),
        // Qwen3.5-27B (C = 10240).
        ChainSetup::qwen(48, 8, 7, true),
        // Padded views: cache rows, projection rows and q/k heads with gaps.
        ChainSetup { pad: 40, ..ChainSetup::sweep_shape(3, 6, 3) },
        ChainSetup { pad: 8, alias_out: true, ..ChainSetup::sweep_shape(2, 9, 15) },
        // Blocks that hold q and k heads, or k and v heads (2·H_k·D not a multiple of 128).
        ChainSetup { n_t: 5, n_rollback: 2, ..shape(4, 32, [1, 2], 1, 0) },
        ChainSetup { n_t: 3, n_rollback: 3, alias_out: true, source_row: 1, ..shape(3, 32, [3, 2], 2, 1) },
        ChainSetup { n_t: 16, n_rollback: 7, ..shape(5, 64, [1, 2], 1, 0) },
        // Special values (±0, subnormals, ±Inf, NaN, extremes) in the state and the tokens.
        ChainSetup { specials: true, ..ChainSetup::sweep_shape(0, 4, 3) },
        ChainSetup { specials: true, ..ChainSetup::sweep_shape(1, 8, 7) },
    ]);
    setups
}

pub fn cases() -> Vec<Case> {
    let setups = match_setups();
    let mut cases: Vec<Case> = setups.iter().map(|s| s.match_case()).collect();
    cases.extend(refusals().into_iter().map(Refusal::case));
    cases.extend(setups.iter().map(|s| s.vs_unfused_case()));
    cases.extend(commit_setups().into_iter().map(CommitSetup::match_case));
    cases
}

#[cfg(test)]
mod tests {
    use super::*;

    /// \[replay\] The commit cases build, validate and pass against their reference on the CPU,
    /// and cover every count of token slots the commit entries unroll (4, 8, 16) with its edges.
    #[test]
    fn the_commit_cases_pass_on_the_cpu_and_cover_the_token_slots() {
        let setups = commit_setups();
        for n_t in [1, 4, 5, 8, 9, 16] {
            assert!(setups.iter().any(|s| s.n_t == n_t), "no commit case with n_t = {n_t}");
        }
        crate::suite::assert_cpu_passes(setups.into_iter().map(CommitSetup::match_case).collect());
    }
}
