//! Hostile views for every op (CPU, runs in CI): huge and zero strides, offsets near 2^64,
//! wrapped "negative" strides, sizes whose products overflow, self-overlapping and aliased
//! outputs, foreign buffer ids, index buffers as outputs, wrong types, misaligned views, hostile
//! scalar parameters. For each generated op:
//!
//! - `validate` never panics (proptest turns a panic into a failure);
//! - when it accepts, every view's exact byte range is representable and inside its existing
//!   buffer, element-aligned; no output has two elements sharing bytes (checked element by
//!   element for small views); each output is an input's very elements or disjoint from it
//!   (or, for an op that declares a [`ReadWrite`] input — GDN_CONV_CHAIN's conv cache, read at
//!   the source row and written at the snapshot rows — made of that input's elements), and
//!   outputs are disjoint from each other;
//! - when it refuses, `reference` refuses too (before touching memory);
//! - small accepted cases run `reference` on the HostMemory without panicking.
//!
//! Adding an op is one entry in [`OPS`]: a function that builds it from a [`Gen`] (hazards on
//! the tape's non-zero choices, e.g. [`Gen::one_in`], so the all-zero tape stays valid).
//! `RGDN_PROPTEST_CASES=N` runs N cases per op (default 512; 2048 with `RGDN_FULL_TESTS=1`); the generator is
//! deterministic unless `RGDN_PROPTEST_SEED=<u64>` picks another seed.

mod common;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use rgdn::memory::{HostMemory, Memory};
use rgdn::ops::concat::ConcatDim0PerRow;
use rgdn::ops::{
    Binary, BinaryKind, ConcatDim0, Cpy, CpySnapshots, GatedDeltaNet, GatedDeltaNetFromCache, GatedDeltaNetReplay,
    GatedDeltaNetReplayVerify, GdnConvChain, GetRows, L2Norm, MulMatVec, MulMatVecPair, MulMatVecPairGate, Op, Precision, Scale,
    SnapshotWrite, SsmConv, Unary, UnaryKind, UnaryMul,
};
use rgdn::reference::math::ExactMufu;
use rgdn::tensor::{BufferId, DType, Layout, Tensor};
use std::cell::RefCell;
use std::collections::HashSet;

/// Builds one op from a generator's choices.
type BuildOp = fn(&mut Gen) -> Box<dyn Op>;

/// For an op that reads a buffer and writes parts of it (GDN_CONV_CHAIN reads the conv cache
/// at an index-known row and writes snapshot rows of it): input `input` may contain outputs
/// `outputs_from..` — each of their elements an element of that input — instead of being
/// disjoint from them. Every other rule still holds for them. // [hostile]
#[derive(Clone, Copy)]
struct ReadWrite {
    input: usize,
    outputs_from: usize,
}

/// Every op of `host/ops/` that implements [`Op`]: name and builder.
const OPS: &[(&str, BuildOp, Option<ReadWrite>)] = &[
    ("CPY", build_cpy, None),
    ("CPY_SNAPSHOTS", build_cpy_snapshots, None),
    ("GET_ROWS", build_get_rows, None),
    ("CONCAT", build_concat, None),
    ("SCALE", build_scale, None),
    ("SSM_CONV", build_ssm_conv, None),
    ("L2_NORM", build_l2_norm, None),
    ("UNARY", build_unary, None),
    ("BINARY", build_binary, None),
    ("MUL_MAT_VEC", build_mul_mat_vec, None),
    ("GATED_DELTA_NET", build_gated_delta_net, None),
    // [hostile] the ops added since: fused chains and the per-row CONCAT launch.
    ("CONCAT_PER_ROW", build_concat_per_row, None),
    ("UNARY_MUL", build_unary_mul, None),
    ("MUL_MAT_VEC_PAIR", build_mul_mat_vec_pair, None),
    // Inputs: conv_cache, source_row, qkv, weight; outputs: conv_out, q_norm, k_norm, rows….
    ("GDN_CONV_CHAIN", build_gdn_conv_chain, Some(ReadWrite { input: 0, outputs_from: 3 })),
    ("MUL_MAT_VEC_PAIR_GATE", build_mul_mat_vec_pair_gate, None),
    // Inputs: q, k, v, g, beta, ssm_cache, source_rows; outputs: out, states (rows of the cache).
    ("GDN_FROM_CACHE", build_gdn_from_cache, Some(ReadWrite { input: 5, outputs_from: 1 })),
    // [replay] Inputs: k, v, g, beta, ssm_cache, source_rows, dest_rows, accepted; output: the
    // cache itself.
    ("GDN_REPLAY", build_gdn_replay, Some(ReadWrite { input: 4, outputs_from: 0 })),
    // [replay] Inputs: the replay's (the cache 5th), then q, k, v, g, beta; outputs: out, the
    // cache itself.
    ("GDN_REPLAY_VERIFY", build_gdn_replay_verify, Some(ReadWrite { input: 4, outputs_from: 1 })),
];

/// Largest element count checked element by element / run through `reference`.
const SMALL_ELEMENTS: usize = 1 << 16;
/// Largest normal allocation of one tensor (anything bigger becomes an out-of-bounds claim).
const MAX_ALLOC: usize = 4 << 20;

/// Draws choices from a proptest-generated tape (0 = the benign choice, so failures shrink
/// towards valid ops) and builds tensors in one [`HostMemory`].
struct Gen<'a> {
    tape: &'a [u64],
    pos: usize,
    /// How hostile this case is (0: benign … 3: most tensors and sizes hostile).
    heat: usize,
    mem: HostMemory,
    made: Vec<Tensor>,
}

fn sat_mul(a: usize, b: usize) -> usize {
    a.saturating_mul(b)
}

fn sat_add(a: usize, b: usize) -> usize {
    a.saturating_add(b)
}

impl<'a> Gen<'a> {
    fn new(tape: &'a [u64]) -> Self {
        let mut g = Gen { tape, pos: 0, heat: 0, mem: HostMemory::new(), made: Vec::new() };
        g.heat = g.below(4) as usize;
        g
    }

    fn next(&mut self) -> u64 {
        let v = self.tape.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        v
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True one time in `n` (never on the benign tape). // [hostile]
    fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == n - 1
    }

    /// A small size in 1..=max.
    fn small(&mut self, max: usize) -> usize {
        1 + self.below(max as u64) as usize
    }

    /// `normal`, or now and then (more often the hotter the case) a hostile size.
    fn size(&mut self, normal: usize) -> usize {
        if self.below(64) >= [0, 1, 3, 10][self.heat] {
            return normal;
        }
        match self.below(5) {
            0 => 0,
            1 => normal.saturating_add(1),
            2 => usize::MAX - self.below(4) as usize,
            3 => 1 << (32 + self.below(31)),
            _ => normal.saturating_sub(1),
        }
    }

    /// Every dimension through [`Gen::size`].
    fn sizes(&mut self, ne: [usize; 4]) -> [usize; 4] {
        [self.size(ne[0]), self.size(ne[1]), self.size(ne[2]), self.size(ne[3])]
    }

    /// A hostile byte quantity: near 2^64, 2^63, a wrapped negative, or a large power of two.
    fn huge(&mut self) -> usize {
        match self.below(4) {
            0 => usize::MAX - 4 * self.below(4) as usize,
            1 => 1 << 63,
            2 => (4 * (1 + self.below(8)) as usize).wrapping_neg(),
            _ => 1 << (32 + self.below(31)),
        }
    }

    /// A contiguous tensor of `dtype` and `ne` in a buffer of its own (or a claim on a small
    /// buffer when it would be too big), now and then made hostile.
    fn tensor(&mut self, dtype: DType, ne: [usize; 4]) -> Tensor {
        let ne = self.sizes(ne);
        let mut t = self.plain(dtype, ne);
        let d = self.below(4) as usize;
        let hostile = self.below(16) < [0, 1, 3, 8][self.heat] as u64;
        match if hostile { 24 + self.below(16) } else { 0 } {
            0..=23 => {}
            // Offsets near 2^64, huge or wrapped-negative strides.
            24 => t.layout.offset = self.huge(),
            25 => t.layout.nb[d] = self.huge(),
            26 => t.layout.offset = t.layout.offset.wrapping_add(self.huge()),
            // Zero strides (a broadcast: fine to read, never to write), with huge sizes too.
            27 => {
                t.layout.nb[d] = 0;
                if t.layout.ne[d] == 1 {
                    t.layout.ne[d] = 2;
                }
            }
            28 => {
                t.layout.nb[d] = 0;
                t.layout.ne[d] = usize::MAX - self.below(2) as usize;
            }
            // Foreign buffers, wrong types, misalignment.
            29 => t.buffer = BufferId(if self.below(2) == 0 { usize::MAX } else { self.mem.n_buffers() + 7 }),
            30 => t.layout.dtype = [DType::F32, DType::F16, DType::BF16, DType::I32][self.below(4) as usize],
            31 => t.layout.offset = t.layout.offset.wrapping_add(1 + self.below(3) as usize),
            32 => t.layout.nb[d] = t.layout.nb[d].wrapping_add(1 + self.below(3) as usize),
            // Aliasing an earlier tensor: the same view, or shifted by some elements.
            33 | 34 if !self.made.is_empty() => {
                let i = self.below(self.made.len() as u64) as usize;
                let other = self.made[i];
                let shift = if self.below(2) == 0 { 0 } else { 4 * self.below(4) as usize };
                t.buffer = other.buffer;
                t.layout.offset = other.layout.offset.wrapping_add(shift);
                if self.below(2) == 0 && other.ne() == ne {
                    t = other;
                }
            }
            // Rows that overlap each other (a stride smaller than the row).
            35 => t.layout.nb[1] = t.layout.nb[0].saturating_mul(self.below(2) as usize),
            // An index buffer as the tensor's buffer.
            36 => {
                let n = Layout::contiguous_bytes(DType::I32, ne).unwrap_or(4).clamp(4, MAX_ALLOC) / 4;
                t.buffer = self.mem.alloc_indices(&vec![0; n]).buffer;
            }
            // Empty, or one element off in some dimension.
            37 => t.layout.ne[d] = 0,
            38 => t.layout.ne[d] = t.layout.ne[d].saturating_add(1),
            _ => t = t.transpose(),
        }
        self.made.push(t);
        t
    }

    fn plain(&mut self, dtype: DType, ne: [usize; 4]) -> Tensor {
        let fits = Layout::contiguous_bytes(dtype, ne).is_some_and(|bytes| bytes <= MAX_ALLOC);
        match fits.then(|| self.mem.try_alloc_tensor(dtype, ne)) {
            Some(Ok(t)) => t,
            _ => {
                // Too big to allocate: claim it on a small buffer (out of bounds, or overflowing).
                let id = self.mem.alloc(64);
                Tensor::new(id, Layout::contiguous(dtype, ne))
            }
        }
    }

    fn f32(&mut self, ne: [usize; 4]) -> Tensor {
        self.tensor(DType::F32, ne)
    }

    /// An output: a fresh tensor, or sometimes (in place) one of `candidates` as it is.
    fn out_or_in_place(&mut self, ne: [usize; 4], candidates: &[Tensor]) -> Tensor {
        if !candidates.is_empty() && self.below(4) == 0 {
            let i = self.below(candidates.len() as u64) as usize;
            return candidates[i];
        }
        self.f32(ne)
    }
}

fn build_cpy(g: &mut Gen) -> Box<dyn Op> {
    let ne = [g.small(6), g.small(4), g.small(3), g.small(2)];
    let src = g.f32(ne);
    let n = ne.iter().product::<usize>();
    let dst_ne = if g.below(2) == 0 { [n, 1, 1, 1] } else { [ne[1], ne[0], ne[2], ne[3]] };
    let dst = g.f32(dst_ne);
    Box::new(Cpy { src, dst })
}

fn build_cpy_snapshots(g: &mut Gen) -> Box<dyn Op> {
    let (d_conv, n_t, c, n_s, n_slots) = (g.small(5) + 1, g.small(4), g.small(5), g.small(2), g.small(4));
    let (group_stride, first_row) = (n_s + g.below(2) as usize, g.below(3) as usize);
    // Hostile parameters too (first_row = usize::MAX: the H200 regression).
    let (d_conv, n_slots, group_stride, first_row) = (g.size(d_conv), g.size(n_slots), g.size(group_stride), g.size(first_row));
    let state = d_conv.saturating_sub(1);
    let conv_input = g.f32([sat_add(state, n_t), c, n_s, 1]);
    let rows = sat_add(sat_mul(n_slots.min(20), group_stride.min(8)), first_row.min(8) + n_s);
    let cache = g.f32([sat_mul(state, c), rows, 1, 1]);
    Box::new(CpySnapshots { conv_input, cache, d_conv, first_row, group_stride, n_slots })
}

fn build_get_rows(g: &mut Gen) -> Box<dyn Op> {
    let (len, n_src, n) = (g.small(8), g.small(5), g.small(4));
    let src = g.f32([len, n_src, 1, 1]);
    let values: Vec<i32> = (0..n)
        .map(|_| match g.below(16) {
            12 => -1,
            13 => n_src as i32,
            14 => i32::MAX,
            15 => i32::MIN,
            _ => g.below(n_src as u64) as i32,
        })
        .collect();
    let rows = if g.below(8) == 7 { g.tensor(DType::I32, [n, 1, 1, 1]) } else { g.mem.alloc_indices(&values) };
    g.made.push(rows);
    let dst = g.f32([len, n, 1, 1]);
    Box::new(GetRows { src, rows, dst })
}

fn build_concat(g: &mut Gen) -> Box<dyn Op> {
    let (na, nb, n1, n2) = (g.small(4), g.small(4), g.small(5), g.small(2));
    let a = g.f32([na, n1, n2, 1]);
    // b as the layer builds it: the transpose of a [n1, nb, n2] projection.
    let b = if g.below(2) == 0 { g.f32([n1, nb, n2, 1]).transpose() } else { g.f32([nb, n1, n2, 1]) };
    let dst = g.f32([sat_add(na, nb), n1, n2, 1]);
    Box::new(ConcatDim0 { a, b, dst })
}

fn build_scale(g: &mut Gen) -> Box<dyn Op> {
    let ne = [g.small(8), g.small(3), g.small(2), 1];
    let src = g.f32(ne);
    let dst = g.out_or_in_place(ne, &[src]);
    Box::new(Scale { src, dst, scale: 0.5, bias: 1.0 })
}

fn build_ssm_conv(g: &mut Gen) -> Box<dyn Op> {
    let d_conv = [3, 4, 5, 9, 15][g.below(5) as usize];
    let (c, n_t, n_s) = (g.small(6), g.small(4), g.small(2));
    let weight = g.f32([d_conv, c, 1, 1]);
    let conv_input = g.f32([sat_add(d_conv - 1, n_t), c, n_s, 1]);
    let bias = (g.below(2) == 0).then(|| g.f32([c, 1, 1, 1]));
    let dst = g.f32([c, n_t, n_s, 1]);
    Box::new(SsmConv { conv_input, weight, bias, dst, apply_silu: g.below(2) == 0 })
}

fn build_l2_norm(g: &mut Gen) -> Box<dyn Op> {
    let ne = [g.small(40), g.small(3), g.small(2), g.small(2)];
    let src = g.f32(ne);
    let dst = g.out_or_in_place(ne, &[src]);
    let eps = [1e-6, 0.0, f32::NAN, -1.0][(g.below(8) as usize).saturating_sub(4).min(3)];
    Box::new(L2Norm { src, dst, eps })
}

fn build_unary(g: &mut Gen) -> Box<dyn Op> {
    let kind = UnaryKind::ALL[g.below(4) as usize];
    let ne = [g.small(8), g.small(3), g.small(2), 1];
    let src = g.f32(ne);
    let dst = g.out_or_in_place(ne, &[src]);
    Box::new(Unary { kind, src, dst })
}

fn build_binary(g: &mut Gen) -> Box<dyn Op> {
    let kind = if g.below(2) == 0 { BinaryKind::Add } else { BinaryKind::Mul };
    let ne = [g.small(8), g.small(3), g.small(2), g.small(2)];
    let a = g.f32(ne);
    let ne_b = ne.map(|n| if g.below(2) == 0 { n } else { 1 });
    let b = g.f32(ne_b);
    let dst = g.out_or_in_place(ne, &[a, b]);
    Box::new(Binary { kind, a, b, dst })
}

fn build_mul_mat_vec(g: &mut Gen) -> Box<dyn Op> {
    let dtype = [DType::F32, DType::F16, DType::BF16][g.below(3) as usize];
    let (e, rows, ncols) = (2 * g.small(40), g.small(6), g.small(9));
    let weight = g.tensor(dtype, [e, rows, 1, 1]);
    let input = g.f32([e, ncols, 1, 1]);
    let dst = g.f32([rows, ncols, 1, 1]);
    let precision = if g.below(2) == 0 { Precision::Default } else { Precision::F32 };
    Box::new(MulMatVec { weight, input, dst, precision })
}

fn build_gated_delta_net(g: &mut Gen) -> Box<dyn Op> {
    const D: usize = 128;
    let (hk, hv, n_t, n_s, slots) = (1, g.small(2), g.small(3), g.small(2), g.small(3));
    let q = g.f32([D, hk, n_t, n_s]);
    let k = g.f32([D, hk, n_t, n_s]);
    let v = g.f32([D, hv, n_t, n_s]);
    let gate = g.f32([1, hv, n_t, n_s]);
    let beta = g.f32([1, hv, n_t, n_s]);
    let state_in = g.f32([D, D, hv, n_s]);
    let out = g.f32([D, hv, n_t, n_s]);
    let row = sat_mul(D * D, hv);
    let states = if g.below(2) == 0 {
        g.f32([row, n_s, slots, 1])
    } else {
        // Rows of a cache, from row 1 on (the layer's slot views start at kv_head·row).
        let cache = g.f32([row, sat_add(1, sat_mul(n_s, slots)), 1, 1]);
        let rb = sat_mul(4, row);
        Tensor::new(
            cache.buffer,
            Layout {
                offset: sat_add(cache.layout.offset, rb),
                ne: [row, n_s, slots, 1],
                nb: [4, rb, sat_mul(rb, n_s), sat_mul(sat_mul(rb, n_s), slots)],
                dtype: DType::F32,
            },
        )
    };
    Box::new(GatedDeltaNet { q, k, v, g: gate, beta, state_in, out, states })
}

// ---- [hostile] the ops added since ----

fn build_concat_per_row(g: &mut Gen) -> Box<dyn Op> {
    let ConcatParts { a, b, dst } = concat_parts(g);
    Box::new(ConcatDim0PerRow(ConcatDim0 { a, b, dst }))
}

struct ConcatParts {
    a: Tensor,
    b: Tensor,
    dst: Tensor,
}

/// CONCAT's operands, plus its own hazards: dst overlapping a or b in part, a dst whose rows
/// overlap (stride below the row), more planes than grid y takes.
fn concat_parts(g: &mut Gen) -> ConcatParts {
    let (na, nb, n1, n2) = (g.small(4), g.small(4), g.small(5), g.small(2));
    let n2 = if g.one_in(32) { 65536 } else { n2 };
    let a = g.f32([na, n1, n2, 1]);
    let b = if g.below(2) == 0 { g.f32([n1, nb, n2, 1]).transpose() } else { g.f32([nb, n1, n2, 1]) };
    let mut dst = g.f32([sat_add(na, nb), n1, n2, 1]);
    match g.below(16) {
        // dst's own rows overlapping (row stride = na·4 < (na + nb)·4).
        15 => dst.layout.nb[1] = 4 * na,
        // a inside dst (a's rows are dst's first columns): a partial overlap.
        14 => return ConcatParts { a: Tensor::new(dst.buffer, Layout { ne: [na, n1, n2, 1], ..dst.layout }), b, dst },
        _ => {}
    }
    ConcatParts { a, b, dst }
}

fn build_unary_mul(g: &mut Gen) -> Box<dyn Op> {
    let kind = if g.one_in(8) { UnaryKind::ALL[g.below(4) as usize] } else { UnaryKind::Softplus };
    let ne = [g.small(8), g.small(3), g.small(2), 1];
    let src = g.f32(ne);
    // mul: src's shape, a leading block (MUL's modulo broadcast), or a block that is not
    // leading ([1, ne1, …]: refused).
    let mul_ne = match g.below(8) {
        1 => [ne[0], 1, 1, 1],
        2 => [1, 1, 1, 1],
        3 => [ne[0], ne[1], 1, 1],
        4 => [1, ne[1], ne[2], 1],
        _ => ne,
    };
    let mul = g.f32(mul_ne);
    let dst = match g.below(8) {
        1 => src,
        2 => mul,
        // Partially over src: the same buffer one element on (in bounds when src is a view
        // of a longer allocation, else out of bounds: refused either way).
        3 => {
            let n = ne.iter().product::<usize>();
            let big = g.f32([n + 1, 1, 1, 1]);
            let (lo, hi) = (Tensor::new(big.buffer, Layout { offset: big.layout.offset, ..Layout::contiguous(DType::F32, ne) }), big);
            let hi = Tensor::new(hi.buffer, Layout { offset: hi.layout.offset.wrapping_add(4), ..Layout::contiguous(DType::F32, ne) });
            return Box::new(UnaryMul { kind, src: lo, mul, dst: hi });
        }
        // In place over src while mul is a block of src (refused unless mul is src itself:
        // other threads would read mul where dst is written).
        4 => {
            let mul = Tensor::new(src.buffer, Layout { offset: src.layout.offset, ..Layout::contiguous(DType::F32, mul_ne) });
            return Box::new(UnaryMul { kind, src, mul, dst: src });
        }
        // dst over mul one element on.
        5 => Tensor::new(mul.buffer, Layout { offset: mul.layout.offset.wrapping_add(4), ..Layout::contiguous(DType::F32, ne) }),
        _ => g.f32(ne),
    };
    Box::new(UnaryMul { kind, src, mul, dst })
}

fn build_mul_mat_vec_pair(g: &mut Gen) -> Box<dyn Op> {
    const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];
    let dtype = DTYPES[g.below(3) as usize];
    // ncols up to 9 (9: refused by the pair's own column rule); now and then an odd E.
    let (e, rows, ncols) = (2 * g.small(40) - usize::from(g.one_in(16)), g.small(6), g.small(9));
    let precision = |g: &mut Gen| if g.below(2) == 0 { Precision::Default } else { Precision::F32 };
    let input = g.f32([e, ncols, 1, 1]);
    let w0 = g.tensor(dtype, [e, rows, 1, 1]);
    let d0 = g.f32([rows, ncols, 1, 1]);
    let p0 = precision(g);
    // The second product: mostly the pair's rules, sometimes another input, type or shape.
    let input1 = match g.below(16) {
        15 => g.f32([e, ncols, 1, 1]),
        14 => Tensor::new(input.buffer, Layout { offset: input.layout.offset.wrapping_add(8), ..input.layout }),
        _ => input,
    };
    let dtype1 = if g.one_in(16) { DTYPES[g.below(3) as usize] } else { dtype };
    let rows1 = if g.one_in(16) { rows + 1 } else { rows };
    let w1 = g.tensor(dtype1, [e, rows1, 1, 1]);
    let p1 = if g.one_in(4) { precision(g) } else { p0 };
    let d1 = match g.below(16) {
        // The dsts on one another: the same view, or shifted by one element.
        15 => d0,
        14 => Tensor::new(d0.buffer, Layout { offset: d0.layout.offset.wrapping_add(4), ..d0.layout }),
        // A dst over the other product's weight (refused as an overlap or as out of bounds).
        13 => Tensor::new(w0.buffer, Layout { offset: w0.layout.offset, ..Layout::contiguous(DType::F32, [rows1, ncols, 1, 1]) }),
        _ => g.f32([rows1, ncols, 1, 1]),
    };
    let (d0, w1) = if g.one_in(16) {
        // The first dst over the second weight.
        let w1 = g.tensor(DType::F32, [e, rows1, 1, 1]);
        (Tensor::new(w1.buffer, Layout { offset: w1.layout.offset, ..d0.layout }), w1)
    } else {
        (d0, w1)
    };
    Box::new(MulMatVecPair {
        first: MulMatVec { weight: w0, input, dst: d0, precision: p0 },
        second: MulMatVec { weight: w1, input: input1, dst: d1, precision: p1 },
    })
}

fn build_gdn_conv_chain(g: &mut Gen) -> Box<dyn Op> {
    let d_conv: usize = if g.one_in(32) { [2, 6, 0][g.below(3) as usize] } else { [4, 3, 5][g.below(3) as usize] };
    // C: 128 or 256 channels (hostile sizes through `size`: 0, 129, 255, near 2^64, 2^32+…).
    let c = 128 * g.small(2);
    let c = g.size(c);
    let head_dim = if g.one_in(32) { [0, 16, 96, 256, usize::MAX][g.below(5) as usize] } else { [32, 64, 128][g.below(3) as usize] };
    let max_heads = (c / 2 / head_dim.max(1)).max(1);
    let n_k_heads = match g.below(32) {
        31 => 0,
        30 => max_heads + 1,
        29 => usize::MAX / 2,
        _ => g.small(max_heads.min(4)),
    };
    let n_t = if g.one_in(32) { 17 } else { g.small(16) };
    let n_rows = if g.one_in(8) { 17 + g.below(4) as usize } else { g.small(20) };
    let state_len = d_conv.saturating_sub(1);
    let weight = g.f32([d_conv, c, 1, 1]);
    // qkv, sometimes a view of a longer buffer (so that a conv_out one token on stays in bounds).
    let long = g.one_in(4);
    let qkv_full = g.f32([c, if long { n_t + 1 } else { n_t }, 1, 1]);
    let qkv = if long { Tensor::new(qkv_full.buffer, Layout { ne: [c, n_t, 1, 1], ..qkv_full.layout }) } else { qkv_full };
    let conv_cache = g.f32([sat_mul(state_len, c), n_rows, 1, 1]);
    // The source row: an index buffer of one value (sometimes out of range or negative), a
    // data tensor, or an index view of two values.
    let value = match g.below(64) {
        63 => -1,
        62 => n_rows as i32,
        61 => i32::MAX,
        60 => i32::MIN,
        _ => g.below(n_rows as u64) as i32,
    };
    let source_row = match g.below(64) {
        63 => g.tensor(DType::I32, [1, 1, 1, 1]),
        62 => g.mem.alloc_indices(&[value, 0]),
        61 => {
            let t = g.mem.alloc_indices(&[0, value]);
            Tensor::new(t.buffer, Layout { offset: 4, ..Layout::contiguous(DType::I32, [1, 1, 1, 1]) })
        }
        _ => g.mem.alloc_indices(&[value]),
    };
    g.made.push(source_row);
    // 0 ..= 17 rows: mostly distinct and in range with offsets ≤ n_t; hazards: a duplicate,
    // the row count, usize::MAX, an offset past n_t (or usize::MAX).
    let count = match g.below(64) {
        63 => 0,
        62 => 17,
        _ => g.small(n_rows.min(16)),
    };
    let mut rows: Vec<usize> = (0..n_rows).collect();
    for i in (1..rows.len()).rev() {
        rows.swap(i, g.below(i as u64 + 1) as usize);
    }
    let mut snapshots: Vec<SnapshotWrite> =
        (0..count).map(|i| SnapshotWrite { row: rows.get(i).copied().unwrap_or(i), offset: g.below(n_t as u64 + 1) as usize }).collect();
    if !snapshots.is_empty() && g.one_in(8) {
        let i = g.below(snapshots.len() as u64) as usize;
        match g.below(5) {
            0 => snapshots[i].row = snapshots[g.below(snapshots.len() as u64) as usize].row,
            1 => snapshots[i].row = n_rows,
            2 => snapshots[i].row = usize::MAX,
            3 => snapshots[i].offset = n_t + 1,
            _ => snapshots[i].offset = usize::MAX,
        }
    }
    let conv_out = match g.below(16) {
        // In place over qkv (allowed), or over qkv one token on (a partial overlap).
        1..=4 => qkv,
        15 => Tensor::new(qkv.buffer, Layout { offset: qkv.layout.offset.wrapping_add(qkv.layout.nb[1]), ..qkv.layout }),
        _ => g.f32([c, n_t, 1, 1]),
    };
    let norm_ne = [head_dim, n_k_heads, n_t, 1];
    let norm = |g: &mut Gen| match g.below(48) {
        // Over the conv cache: at its start, or at a row.
        15 => Tensor::new(conv_cache.buffer, Layout { offset: conv_cache.layout.offset, ..Layout::contiguous(DType::F32, norm_ne) }),
        14 => {
            let row = g.below(n_rows as u64) as usize;
            let offset = conv_cache.layout.offset.wrapping_add(row.wrapping_mul(conv_cache.layout.nb[1]));
            Tensor::new(conv_cache.buffer, Layout { offset, ..Layout::contiguous(DType::F32, norm_ne) })
        }
        // Over qkv, or over conv_out.
        13 => Tensor::new(qkv.buffer, Layout { offset: qkv.layout.offset, ..Layout::contiguous(DType::F32, norm_ne) }),
        12 => Tensor::new(conv_out.buffer, Layout { offset: conv_out.layout.offset, ..Layout::contiguous(DType::F32, norm_ne) }),
        _ => g.f32(norm_ne),
    };
    let q_norm = norm(g);
    let k_norm = if g.one_in(32) { q_norm } else { norm(g) };
    let eps = [1e-6, 0.0, f32::NAN, -1.0, f32::INFINITY][(g.below(32) as usize).saturating_sub(27).min(4)];
    Box::new(GdnConvChain {
        conv_cache,
        source_row,
        qkv,
        weight,
        snapshots,
        conv_out,
        q_norm,
        k_norm,
        head_dim,
        n_k_heads,
        eps,
        commit: None,
    })
}

/// Byte offsets of every element of a small view.
fn element_offsets(t: &Tensor) -> Vec<usize> {
    t.layout.indices().map(|i| t.layout.checked_byte_offset(i).expect("an accepted view's offsets fit")).collect()
}

fn fail(op: &dyn Op, what: String) -> TestCaseError {
    TestCaseError::fail(format!("{} accepted {op:?}, but {what}", op.name()))
}

/// Whether output `o` (number `i`) may lie inside input `j` (see [`ReadWrite`]).
fn read_write(rw: Option<ReadWrite>, i: usize, j: usize) -> bool {
    rw.is_some_and(|rw| rw.input == j && i >= rw.outputs_from)
}

/// What acceptance must guarantee.
fn check_accepted(op: &dyn Op, mem: &HostMemory, rw: Option<ReadWrite>) -> Result<(), TestCaseError> {
    let (inputs, outputs) = (op.inputs(), op.outputs());
    for t in inputs.iter().chain(&outputs) {
        let range = match t.layout.checked_byte_range() {
            Ok(Some(r)) => r,
            other => return Err(fail(op, format!("{t:?} has byte range {other:?}"))),
        };
        let Some(len) = mem.buffer_len(t.buffer) else { return Err(fail(op, format!("{t:?} names a missing buffer"))) };
        if range.end > len {
            return Err(fail(op, format!("{t:?} spans {range:?} of a {len}-byte buffer")));
        }
        let size = t.dtype().size();
        if range.start % size != 0 || t.layout.nb.iter().any(|nb| nb % size != 0) {
            return Err(fail(op, format!("{t:?} is not element-aligned")));
        }
        if t.layout.checked_n_elements().is_none() {
            return Err(fail(op, format!("{t:?} has an unrepresentable element count")));
        }
    }
    for (i, o) in outputs.iter().enumerate() {
        if mem.is_index_buffer(o.buffer) {
            return Err(fail(op, format!("output {o:?} is in an index buffer")));
        }
        if o.layout.n_elements() <= SMALL_ELEMENTS {
            let mut offsets = element_offsets(o);
            offsets.sort_unstable();
            if let Some(w) = offsets.windows(2).find(|w| w[1] - w[0] < o.dtype().size()) {
                return Err(fail(op, format!("output {o:?} has two elements at bytes {} and {}", w[0], w[1])));
            }
            for (j, t) in inputs.iter().enumerate() {
                if o.same_elements(t) || t.buffer != o.buffer || t.layout.n_elements() > SMALL_ELEMENTS {
                    continue;
                }
                if read_write(rw, i, j) {
                    // Written in place: every element of o is an element of t (same type).
                    let elements: HashSet<usize> = element_offsets(t).into_iter().collect();
                    if o.dtype() != t.dtype() || offsets.iter().any(|b| !elements.contains(b)) {
                        return Err(fail(op, format!("output {o:?} is not made of elements of input {t:?}")));
                    }
                    continue;
                }
                let written: HashSet<usize> = offsets.iter().flat_map(|&b| b..b + o.dtype().size()).collect();
                let size = t.dtype().size();
                if let Some(b) = element_offsets(t).into_iter().find(|&b| (b..b + size).any(|x| written.contains(&x))) {
                    return Err(fail(op, format!("output {o:?} writes byte {b} of input {t:?}")));
                }
            }
        }
        for (j, t) in inputs.iter().enumerate() {
            if read_write(rw, i, j) {
                // In another buffer: nothing shared (GDN_FROM_CACHE's states may be anywhere).
                if o.buffer != t.buffer {
                    continue;
                }
                let (ro, rt) = (o.layout.byte_range(), t.layout.byte_range());
                if o.buffer != t.buffer || !matches!((ro, rt), (Some(ro), Some(rt)) if rt.start <= ro.start && ro.end <= rt.end) {
                    return Err(fail(op, format!("output {o:?} is not inside input {t:?}")));
                }
                continue;
            }
            if !o.same_elements(t) && o.overlaps(t) {
                return Err(fail(op, format!("output {o:?} partially overlaps input {t:?}")));
            }
        }
        for p in &outputs[i + 1..] {
            if o.overlaps(p) {
                return Err(fail(op, format!("outputs {o:?} and {p:?} overlap")));
            }
        }
    }
    Ok(())
}

/// Cases per outcome: accepted and run through the reference, accepted (too big to run),
/// refused.
#[derive(Debug, Default)]
struct Tally {
    ran: usize,
    accepted: usize,
    refused: usize,
}

/// What graph passes and the planner ask of any op, validated or not (issue 13): the views
/// it reads, may write and always writes, and their byte spans — never a panic, and bounded.
fn accesses_never_panic(op: &dyn Op) {
    let views = [op.inputs(), op.outputs(), op.must_write()];
    for t in views.iter().flatten() {
        let _ = rgdn::graph::Access::of(t);
    }
}

fn run_one(build: BuildOp, rw: Option<ReadWrite>, tape: &[u64], tally: &RefCell<Tally>) -> Result<(), TestCaseError> {
    let mut g = Gen::new(tape);
    let op = build(&mut g);
    accesses_never_panic(op.as_ref());
    let mut mem = g.mem;
    match op.validate(&mem) {
        Ok(()) => {
            check_accepted(op.as_ref(), &mem, rw)?;
            let work: usize = op.inputs().iter().chain(&op.outputs()).map(|t| t.layout.n_elements()).fold(0, usize::saturating_add);
            if work <= 4 * SMALL_ELEMENTS {
                check_declared_writes(op.as_ref(), &mem)?;
                op.reference(&mut mem, &mut ExactMufu).map_err(|e| fail(op.as_ref(), format!("its reference refused: {e}")))?;
                tally.borrow_mut().ran += 1;
            } else {
                tally.borrow_mut().accepted += 1;
            }
        }
        Err(e) => {
            tally.borrow_mut().refused += 1;
            let before = mem.clone();
            match op.reference(&mut mem, &mut ExactMufu) {
                Ok(()) => return Err(TestCaseError::fail(format!("{} refused {op:?} ({e}) but its reference ran", op.name()))),
                Err(_) => {
                    let changed = (0..mem.n_buffers()).any(|b| mem.bytes(BufferId(b)) != before.bytes(BufferId(b)));
                    prop_assert!(!changed, "{}: a refused reference wrote memory", op.name());
                }
            }
        }
    }
    Ok(())
}

/// What an op declares it writes is what its reference writes (the fusion pass's legality
/// check rests on these declarations): run from two memories that differ only in the bytes it
/// may write but does not read, every byte it always writes comes out the same in both (it
/// was written), and no byte outside what it may write changes.
fn check_declared_writes(op: &dyn Op, mem: &HostMemory) -> Result<(), TestCaseError> {
    use rgdn::graph::{Bound, ByteSet};
    let may = ByteSet::of_all(&op.outputs(), Bound::Over);
    let must = ByteSet::of_all(&op.must_write(), Bound::Under);
    let reads = ByteSet::of_all(&op.inputs(), Bound::Over);
    let (mut a, mut b) = (mem.clone(), mem.clone());
    for (buffer, run) in may.minus(&reads).runs() {
        let len = a.bytes(buffer).len();
        let run = run.start.min(len)..run.end.min(len);
        for (i, x) in a.bytes_mut(buffer)[run.clone()].iter_mut().enumerate() {
            *x = (i % 251) as u8;
        }
        for (i, x) in b.bytes_mut(buffer)[run].iter_mut().enumerate() {
            *x = !((i % 251) as u8);
        }
    }
    let (a0, b0) = (a.clone(), b.clone());
    op.reference(&mut a, &mut ExactMufu).map_err(|e| fail(op, format!("its reference refused: {e}")))?;
    op.reference(&mut b, &mut ExactMufu).map_err(|e| fail(op, format!("its reference refused: {e}")))?;
    // Per byte: bit 0 may be written, bit 1 is always written, bit 2 is read.
    let mut flags: Vec<Vec<u8>> = (0..mem.n_buffers()).map(|b| vec![0u8; mem.bytes(BufferId(b)).len()]).collect();
    for (bit, set) in [(1u8, &may), (2, &must), (4, &reads)] {
        for (buffer, run) in set.runs() {
            let Some(f) = flags.get_mut(buffer.0) else { continue };
            let len = f.len();
            for x in &mut f[run.start.min(len)..run.end.min(len)] {
                *x |= bit;
            }
        }
    }
    for id in (0..mem.n_buffers()).map(BufferId) {
        for (i, &f) in flags[id.0].iter().enumerate() {
            if f & 1 == 0 && (a.bytes(id)[i] != a0.bytes(id)[i] || b.bytes(id)[i] != b0.bytes(id)[i]) {
                return Err(fail(op, format!("its reference wrote byte {i} of buffer {}, outside what it may write", id.0)));
            }
            if f & 2 != 0 && f & 4 == 0 && a.bytes(id)[i] != b.bytes(id)[i] {
                return Err(fail(op, format!("byte {i} of buffer {} is declared always written but kept what it held", id.0)));
            }
        }
    }
    Ok(())
}

fn cases() -> u32 {
    let default = if common::full_tests() { 2048 } else { 512 };
    std::env::var("RGDN_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[test]
fn hostile_views_never_get_past_validation() {
    let seed: Option<u64> = std::env::var("RGDN_PROPTEST_SEED").ok().and_then(|v| v.parse().ok());
    for &(name, build, rw) in OPS {
        let config = Config { cases: cases(), failure_persistence: None, ..Config::default() };
        let rng = match seed {
            Some(seed) => TestRng::from_seed(RngAlgorithm::ChaCha, &[seed.to_le_bytes(), [0; 8], [0; 8], [0; 8]].concat()),
            None => TestRng::deterministic_rng(RngAlgorithm::ChaCha),
        };
        let mut runner = TestRunner::new_with_rng(config, rng);
        let tape = proptest::collection::vec(any::<u64>(), 256);
        let tally = RefCell::new(Tally::default());
        if let Err(e) = runner.run(&tape, |tape| run_one(build, rw, &tape, &tally)) {
            panic!("{name}: {e}");
        }
        let t = tally.into_inner();
        println!(
            "{name:<16} {} cases: {} accepted and run on the CPU reference, {} accepted (large), {} refused",
            cases(),
            t.ran,
            t.accepted,
            t.refused
        );
        // The generator must reach both sides of validation, or the properties say little.
        assert!(t.ran > 0 && t.refused > 0, "{name}: {t:?}");
    }
}

/// The generator does reach acceptance for every op (else the properties above say little).
#[test]
fn the_benign_tape_builds_valid_ops() {
    for &(name, build, _) in OPS {
        let tape = [0u64; 64];
        let mut g = Gen::new(&tape);
        let op = build(&mut g);
        op.validate(&g.mem).unwrap_or_else(|e| panic!("{name}: the benign op is refused: {e}"));
    }
}

/// The pair with the gate epilogue: the pair's hazards, plus the per-head vectors and the two
/// epilogue outputs (wrong shapes, on the products, on the input).
fn build_mul_mat_vec_pair_gate(g: &mut Gen) -> Box<dyn Op> {
    let pair = build_mul_mat_vec_pair(g);
    let pair = pair.as_ref().downcast_ref::<MulMatVecPair>().expect("the pair builder builds a pair").clone();
    let [rows, ncols, ..] = pair.first.dst.ne();
    let vector = |g: &mut Gen| if g.one_in(16) { g.f32([sat_add(rows, 1), 1, 1, 1]) } else { g.f32([rows, 1, 1, 1]) };
    let (dt_bias, ssm_a) = (vector(g), vector(g));
    let beta = match g.below(16) {
        15 => pair.second.dst,
        14 => Tensor::new(
            pair.first.input.buffer,
            Layout { offset: pair.first.input.layout.offset, ..Layout::contiguous(DType::F32, [rows, ncols, 1, 1]) },
        ),
        13 => g.f32([rows, sat_add(ncols, 1), 1, 1]),
        _ => g.f32([rows, ncols, 1, 1]),
    };
    let gate = match g.below(16) {
        15 => beta,
        14 => pair.first.dst,
        13 => dt_bias,
        _ => g.f32([rows, ncols, 1, 1]),
    };
    Box::new(MulMatVecPairGate { pair, dt_bias, ssm_a, beta, gate })
}

/// GATED_DELTA_NET reading its state from a cache row: hostile indices, and state slots that
/// are rows of the same cache (the supported overlap), shifted rows, or separate.
fn build_gdn_from_cache(g: &mut Gen) -> Box<dyn Op> {
    const D: usize = 128;
    let (hk, hv, n_t, n_s, slots) = (1, g.small(2), g.small(3), g.small(2), g.small(3));
    let row = sat_mul(D * D, hv);
    let n_rows = sat_add(g.small(4), sat_mul(slots, n_s));
    let q = g.f32([D, hk, n_t, n_s]);
    let k = g.f32([D, hk, n_t, n_s]);
    let v = g.f32([D, hv, n_t, n_s]);
    let gate = g.f32([1, hv, n_t, n_s]);
    let beta = g.f32([1, hv, n_t, n_s]);
    let ssm_cache = g.f32([row, n_rows, 1, 1]);
    let values: Vec<i32> = (0..n_s)
        .map(|_| match g.below(32) {
            31 => -1,
            30 => n_rows as i32,
            29 => i32::MAX,
            _ => g.below(n_rows as u64) as i32,
        })
        .collect();
    let source_rows = if g.one_in(16) { g.tensor(DType::I32, [n_s, 1, 1, 1]) } else { g.mem.alloc_indices(&values) };
    g.made.push(source_rows);
    let out = g.f32([D, hv, n_t, n_s]);
    let rb = sat_mul(4, row);
    let (slot_stride, whole) = (sat_mul(rb, n_s), sat_mul(sat_mul(rb, n_s), slots));
    let states = match g.below(8) {
        // Slot k of sequence s in row k·n_s + s of the cache (the layer's layout with M = n_s).
        0..=3 => Tensor::new(
            ssm_cache.buffer,
            Layout { offset: ssm_cache.layout.offset, ne: [row, n_s, slots, 1], nb: [4, rb, slot_stride, whole], dtype: DType::F32 },
        ),
        // Shifted by one element, or by half a row: refused.
        4 => Tensor::new(
            ssm_cache.buffer,
            Layout {
                offset: sat_add(ssm_cache.layout.offset, 4),
                ne: [row, n_s, slots, 1],
                nb: [4, rb, slot_stride, whole],
                dtype: DType::F32,
            },
        ),
        5 => Tensor::new(
            ssm_cache.buffer,
            Layout {
                offset: sat_add(ssm_cache.layout.offset, rb / 2),
                ne: [row, n_s, slots, 1],
                nb: [4, rb, slot_stride, whole],
                dtype: DType::F32,
            },
        ),
        _ => g.f32([row, n_s, slots, 1]),
    };
    Box::new(GatedDeltaNetFromCache { q, k, v, g: gate, beta, ssm_cache, source_rows, out, states })
}

/// \[replay\] GATED_DELTA_NET_REPLAY: hostile row indices and counts (out of range, negative,
/// i32::MAX, rows another sequence reads or writes), index views the host cannot read.
fn build_gdn_replay(g: &mut Gen) -> Box<dyn Op> {
    Box::new(gdn_replay(g))
}

fn gdn_replay(g: &mut Gen) -> GatedDeltaNetReplay {
    const D: usize = 128;
    let (hk, hv, n_t, n_s) = (1, g.small(2), g.small(3), g.small(3));
    let row = sat_mul(D * D, hv);
    let n_rows = sat_add(g.small(4), sat_mul(2, n_s));
    let k = g.f32([D, hk, n_t, n_s]);
    let v = g.f32([D, hv, n_t, n_s]);
    let gate = g.f32([1, hv, n_t, n_s]);
    let beta = g.f32([1, hv, n_t, n_s]);
    let ssm_cache = g.f32([row, n_rows, 1, 1]);
    let index = |g: &mut Gen, bound: usize, normal: &dyn Fn(usize) -> i32| -> Tensor {
        let values: Vec<i32> = (0..n_s)
            .map(|s| match g.below(32) {
                31 => -1,
                30 => bound as i32,
                29 => i32::MAX,
                28 => g.below(bound as u64) as i32,
                _ => normal(s),
            })
            .collect();
        let t = if g.one_in(16) { g.tensor(DType::I32, [n_s, 1, 1, 1]) } else { g.mem.alloc_indices(&values) };
        g.made.push(t);
        t
    };
    let source_rows = index(g, n_rows, &|s| s as i32);
    let distinct = g.one_in(2);
    let dest_rows = index(g, n_rows, &|s| if distinct { (n_s + s) as i32 } else { s as i32 });
    let accepted = index(g, n_t + 1, &|s| (s % (n_t + 1)) as i32);
    GatedDeltaNetReplay { k, v, g: gate, beta, ssm_cache, source_rows, dest_rows, accepted }
}

/// \[replay\] GATED_DELTA_NET_REPLAY_VERIFY: the replay's hostile rows and counts, then a verify
/// of its own length over the same heads and sequences (hostile views as any op's).
fn build_gdn_replay_verify(g: &mut Gen) -> Box<dyn Op> {
    const D: usize = 128;
    let replay = gdn_replay(g);
    let ([_, hk, ..], [_, hv, _, n_s]) = (replay.k.ne(), replay.v.ne());
    let n_t = g.small(3);
    let q = g.f32([D, hk, n_t, n_s]);
    let k = g.f32([D, hk, n_t, n_s]);
    let v = g.f32([D, hv, n_t, n_s]);
    let gate = g.f32([1, hv, n_t, n_s]);
    let beta = g.f32([1, hv, n_t, n_s]);
    let out = g.f32([D, hv, n_t, n_s]);
    Box::new(GatedDeltaNetReplayVerify { replay, q, k, v, g: gate, beta, out })
}
