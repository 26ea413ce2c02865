//! MUL_MAT_VEC cases: every weight kind (F32, BF16, F16 with half or f32 accumulation) × 1–8
//! columns at the Qwen3.5 alpha/beta shapes, small rows for every block size ggml's rule picks,
//! strided (padded, offset) views, special values (±0, subnormals, ±Inf, NaN, f16 overflow),
//! values whose products flush or underflow, and refusals.

use crate::error::Error;
use crate::ops::{MulMatVec, Precision};
use crate::suite::{Builder, Case, Expect, Scenario, Tolerance};
use crate::tensor::{DType, Tensor};
use rand::Rng;

pub const GROUP: &str = "MUL_MAT_VEC";

/// Weight type and accumulation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Kind {
    F32,
    Bf16,
    /// F16 weights, default precision: half2 accumulation.
    F16Half,
    /// F16 weights, F32 precision.
    F16F32,
}

impl Kind {
    pub(super) const ALL: [Kind; 4] = [Kind::F32, Kind::Bf16, Kind::F16Half, Kind::F16F32];

    fn dtype(self) -> DType {
        match self {
            Kind::F32 => DType::F32,
            Kind::Bf16 => DType::BF16,
            Kind::F16Half | Kind::F16F32 => DType::F16,
        }
    }

    fn precision(self) -> Precision {
        if self == Kind::F16F32 { Precision::F32 } else { Precision::Default }
    }

    fn label(self) -> &'static str {
        match self {
            Kind::F32 => "f32",
            Kind::Bf16 => "bf16",
            Kind::F16Half => "f16,acc=half",
            Kind::F16F32 => "f16,acc=f32",
        }
    }

    /// A weight value as stored (f32 bits, or f16/bf16 bits), rounded to nearest even.
    fn encode(self, x: f32) -> u32 {
        match self {
            Kind::F32 => x.to_bits(),
            Kind::Bf16 => half::bf16::from_f32(x).to_bits() as u32,
            Kind::F16Half | Kind::F16F32 => half::f16::from_f32(x).to_bits() as u32,
        }
    }
}

/// How the values are drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Data {
    /// Weights in (−1, 1), inputs in (−2, 2).
    Uniform,
    /// Uniform, with about one value in 16 replaced by ±0, a subnormal, a tiny or large value,
    /// plus a few ±Inf, NaN and overflowing values at fixed places (see [`MatVecCase::specials`]).
    Specials,
    /// Magnitudes whose products flush (f32: ~1e-40, subnormal) or underflow f16 (~4e-8):
    /// results are signed zeros and the reduction's sign rules decide them.
    Tiny,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct MatVecCase {
    pub(super) kind: Kind,
    pub(super) e: usize,
    pub(super) rows: usize,
    pub(super) ncols: usize,
    pub(super) data: Data,
    /// Rows of the weight and columns of the input inside wider rows, shifted by two elements
    /// (still pair-aligned); dst columns padded.
    pub(super) padded: bool,
}

impl MatVecCase {
    fn name(&self) -> String {
        self.name_in(GROUP)
    }

    /// The case's name in `group`: `GROUP(type=…,E=…,rows=…,ncols=…[,specials|,tiny][,padded])`.
    pub(super) fn name_in(&self, group: &str) -> String {
        format!(
            "{group}(type={},E={},rows={},ncols={}{}{})",
            self.kind.label(),
            self.e,
            self.rows,
            self.ncols,
            match self.data {
                Data::Uniform => "",
                Data::Specials => ",specials",
                Data::Tiny => ",tiny",
            },
            if self.padded { ",padded" } else { "" }
        )
    }

    /// A weight element: uniform, tiny, or (one in 16 for `Specials`) a special value that keeps
    /// products finite.
    fn weight_value(&self, rng: &mut rand::rngs::StdRng) -> u32 {
        let k = self.kind;
        match self.data {
            Data::Uniform => k.encode(rng.random_range(-1.0..1.0)),
            Data::Tiny if k.dtype() == DType::F16 => k.encode(rng.random_range(-2e-4..2e-4)),
            Data::Tiny => k.encode(rng.random_range(-1e-20..1e-20)),
            Data::Specials if rng.random_range(0..16) == 0 => {
                let sign = if rng.random::<bool>() { -1.0f32 } else { 1.0 };
                match (k.dtype(), rng.random_range(0..4)) {
                    (_, 0) => k.encode(sign * 0.0),
                    // Subnormals of the weight type.
                    (DType::F32, 1) => rng.random_range(1..0x0080_0000) | (sign.to_bits() & 0x8000_0000),
                    (DType::BF16, 1) => rng.random_range(1..0x0080) | (sign.to_bits() >> 16 & 0x8000),
                    (_, 1) => rng.random_range(1..0x0400) | (sign.to_bits() >> 16 & 0x8000),
                    (DType::F16, 2) => k.encode(sign * 6.103_515_6e-5), // smallest normal f16
                    (_, 2) => k.encode(sign * 1e-30),
                    // Large, but with the largest input (200) still below f16's 65504.
                    (DType::F16, _) => k.encode(sign * 256.0),
                    _ => k.encode(sign * 1e30),
                }
            }
            Data::Specials => k.encode(rng.random_range(-1.0..1.0)),
        }
    }

    /// An input element, drawn like [`Self::weight_value`].
    fn input_value(&self, rng: &mut rand::rngs::StdRng) -> f32 {
        match self.data {
            Data::Uniform => rng.random_range(-2.0..2.0),
            Data::Tiny if self.kind.dtype() == DType::F16 => rng.random_range(-2e-4..2e-4),
            Data::Tiny => rng.random_range(-1e-20..1e-20),
            Data::Specials if rng.random_range(0..16) == 0 => {
                let sign = if rng.random::<bool>() { -1.0f32 } else { 1.0 };
                sign * match rng.random_range(0..5) {
                    0 => 0.0,
                    1 => f32::from_bits(rng.random_range(1..0x0080_0000)), // f32 subnormal
                    2 => 1e-30,                                            // products flush
                    3 => 1e-6,                                             // an f16 subnormal
                    _ => 200.0,
                }
            }
            Data::Specials => rng.random_range(-2.0..2.0),
        }
    }

    /// Fixed specials for `Specials`: weight row 1 holds +Inf, row 2 a NaN, row 3 the type's
    /// largest finite value (its products overflow for F32/BF16, and in the half path); when
    /// there are other columns to stay finite, input column 0 holds −Inf and 7e4 (beyond f16's
    /// range: +Inf in the half path, finite in f32). `input` None: the weight's only.
    fn specials(&self, b: &mut Builder, weight: &Tensor, input: Option<&Tensor>) {
        let k = self.kind;
        let (inf, nan, max) = match k.dtype() {
            DType::F32 => (0x7F80_0000, special_nan(b), f32::MAX.to_bits()),
            DType::BF16 => (0x7F80, 0x7FC1, 0x7F7F),
            _ => (0x7C00, 0x7E01, 0x7BFF),
        };
        for (r, bits) in [(1, inf), (2, nan), (3, max)] {
            if r < self.rows {
                let e = (7 * r) % self.e;
                match k.dtype() {
                    DType::F32 => b.mem.write_u32(weight, [e, r, 0, 0], bits).expect("a view of the case's own buffers"),
                    _ => b.mem.write_u16(weight, [e, r, 0, 0], bits as u16).expect("a view of the case's own buffers"),
                }
            }
        }
        if let Some(input) = input
            && self.ncols > 1
        {
            b.mem.write_f32(input, [1 % self.e, 0, 0, 0], 7e4).expect("a view of the case's own buffers");
            b.mem.write_f32(input, [5 % self.e, 0, 0, 0], f32::NEG_INFINITY).expect("a view of the case's own buffers");
        }
    }

    /// A product drawn as the case describes: its weight, the input (drawn here when `input`
    /// is None, else the given one, already drawn) and a poisoned dst.
    pub(super) fn product(&self, b: &mut Builder, input: Option<Tensor>) -> MulMatVec {
        let p = self;
        let (shift, row_pad) = if p.padded { (2, [4, 0, 0, 0]) } else { (0, [0; 4]) };
        let dtype = p.kind.dtype();
        let weight = strided(b, dtype, [p.e, p.rows, 1, 1], row_pad, shift);
        for i in weight.layout.indices().collect::<Vec<_>>() {
            let bits = p.weight_value(&mut b.rng);
            match dtype {
                DType::F32 => b.mem.write_u32(&weight, i, bits).expect("a view of the case's own buffers"),
                _ => b.mem.write_u16(&weight, i, bits as u16).expect("a view of the case's own buffers"),
            }
        }
        let (input, fresh) = match input {
            Some(t) => (t, false),
            None => {
                let t = strided(b, DType::F32, [p.e, p.ncols, 1, 1], row_pad, shift);
                for i in t.layout.indices().collect::<Vec<_>>() {
                    let v = p.input_value(&mut b.rng);
                    b.mem.write_f32(&t, i, v).expect("a view of the case's own buffers");
                }
                (t, true)
            }
        };
        if p.data == Data::Specials {
            p.specials(b, &weight, fresh.then_some(&input));
        }
        let dst = b.tensor_padded(
            DType::F32,
            [p.rows, p.ncols, 1, 1],
            if p.padded { [3, 0, 0, 0] } else { [0; 4] },
            crate::suite::inputs::Values::AnyBits,
        );
        MulMatVec { weight, input, dst, precision: p.kind.precision() }
    }

    fn case(self) -> Case {
        let name = self.name();
        Case::seeded(GROUP, name, move |mut b| {
            let op = self.product(&mut b, None);
            // No MUFU op: the exact-math reference is the reference.
            Ok(b.finish(vec![Box::new(op)], Tolerance::BitExact, false))
        })
    }
}

/// A NaN with a random payload (f32 bits).
fn special_nan(b: &mut Builder) -> u32 {
    0x7F80_0001 | (b.rng.random::<u32>() & 0x003F_FFFF)
}

/// A tensor of `ne` inside rows padded by `pad`, starting `shift` elements into its padded row
/// (poison everywhere until the caller writes the view).
fn strided(b: &mut Builder, dtype: DType, ne: [usize; 4], pad: [usize; 4], shift: usize) -> Tensor {
    let t = b.tensor_padded(dtype, ne, pad, crate::suite::inputs::Values::AnyBits);
    t.view(ne, t.layout.nb, shift * dtype.size())
}

/// A case the op must refuse with the error `predicate` accepts.
fn refusal(name: &str, build: fn(&mut Builder) -> MulMatVec, predicate: fn(&Error) -> bool, expected: &'static str) -> Case {
    let name = format!("{GROUP}(refuse:{name})");
    Case::seeded(GROUP, name, move |mut b| {
        let op = build(&mut b);
        let scenario = Scenario { mem: b.mem, ops: vec![Box::new(op)], tolerance: Tolerance::BitExact, exact_nan_payloads: false };
        Ok(Expect::Refusal { scenario, predicate, expected })
    })
}

/// A plain F32 op of E × rows × ncols for the refusal cases to spoil.
pub(super) fn plain(b: &mut Builder, dtype: DType, e: usize, rows: usize, ncols: usize) -> MulMatVec {
    let values = crate::suite::inputs::Values::Uniform(1.0);
    let weight = b.tensor_padded(dtype, [e, rows, 1, 1], [0; 4], values);
    let input = b.input([e, ncols, 1, 1], values);
    let dst = b.output([rows, ncols, 1, 1]);
    MulMatVec { weight, input, dst, precision: Precision::Default }
}

pub fn cases() -> Vec<Case> {
    let base = MatVecCase { kind: Kind::F32, e: 4096, rows: 32, ncols: 1, data: Data::Uniform, padded: false };
    // Qwen3.5 4B, 9B and 27B alpha/beta projections: E × H_v.
    let qwen = [(2560, 32), (4096, 32), (5120, 48)];
    let mut out = Vec::new();
    // Every kind × 1–8 columns, the three model shapes in rotation.
    for (k, kind) in Kind::ALL.into_iter().enumerate() {
        for ncols in 1..=8 {
            let (e, rows) = qwen[(k + ncols) % 3];
            out.push(MatVecCase { kind, e, rows, ncols, ..base });
        }
    }
    // Every block size ggml's rule picks (E = 2, 64 → 32; 100 → 64; 130 → 96; 200 → 128;
    // 300 → 160; 380 → 192; 400 → 224; 1000 → 256), pair counts that are not a multiple of the
    // block, a single row, many rows.
    for (kind, e, rows, ncols) in [
        (Kind::F32, 2, 3, 1),
        (Kind::F16Half, 64, 5, 2),
        (Kind::Bf16, 100, 7, 3),
        (Kind::F16F32, 130, 4, 8),
        (Kind::F32, 200, 6, 5),
        (Kind::F16Half, 300, 3, 4),
        (Kind::Bf16, 380, 5, 6),
        (Kind::F16Half, 400, 2, 7),
        (Kind::F32, 1000, 9, 3),
        (Kind::F16Half, 1000, 9, 3),
        (Kind::Bf16, 64, 33, 8),
        (Kind::F16Half, 4098, 1, 2),
        (Kind::F32, 5122, 2, 1),
    ] {
        out.push(MatVecCase { kind, e, rows, ncols, ..base });
    }
    for kind in Kind::ALL {
        // Special values at a model shape and with a 96-thread block.
        out.push(MatVecCase { kind, ncols: 3, data: Data::Specials, ..base });
        out.push(MatVecCase { kind, e: 130, rows: 5, ncols: 2, data: Data::Specials, ..base });
        // Flushing / underflowing products: a one-warp block (−0 survives) and a 256-thread one.
        out.push(MatVecCase { kind, e: 64, rows: 4, ncols: 2, data: Data::Tiny, ..base });
        out.push(MatVecCase { kind, e: 2560, ncols: 1, data: Data::Tiny, ..base });
        // Strided views at the 27B shape.
        out.push(MatVecCase { kind, e: 5120, rows: 48, ncols: 4, padded: true, ..base });
    }
    out.push(MatVecCase { kind: Kind::F16Half, e: 200, rows: 3, ncols: 8, padded: true, data: Data::Specials });
    let mut cases: Vec<Case> = out.into_iter().map(MatVecCase::case).collect();

    cases.push(refusal(
        "ncols=9",
        |b| plain(b, DType::F32, 64, 4, 9),
        |e| matches!(e, Error::Unsupported { op: GROUP, .. }),
        "Unsupported (9 columns)",
    ));
    cases.push(refusal(
        "odd_E=129",
        |b| plain(b, DType::F16, 129, 4, 1),
        |e| matches!(e, Error::Unsupported { op: GROUP, .. }),
        "Unsupported (odd E)",
    ));
    cases.push(refusal(
        "input_column_stride_odd",
        |b| {
            let op = plain(b, DType::F32, 64, 4, 2);
            let input = b.tensor_padded(DType::F32, [64, 2, 1, 1], [1, 0, 0, 0], crate::suite::inputs::Values::Uniform(1.0));
            MulMatVec { input, ..op }
        },
        |e| matches!(e, Error::Stride { op: GROUP, arg: "input", .. }),
        "Stride (input columns not pair-aligned)",
    ));
    cases.push(refusal(
        "dst_overlaps_input",
        |b| {
            let op = plain(b, DType::BF16, 64, 4, 2);
            let dst = op.input.view([4, 2, 1, 1], [4, 16, 32, 32], 0);
            MulMatVec { dst, ..op }
        },
        |e| matches!(e, Error::Aliasing { op: GROUP, a: "dst", b: "input", .. }),
        "Aliasing (dst, input)",
    ));
    cases.push(refusal(
        "weight_i32",
        |b| plain(b, DType::I32, 64, 4, 1),
        |e| matches!(e, Error::DType { op: GROUP, arg: "weight", .. }),
        "DType (weight)",
    ));
    cases
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specials_cover_inf_nan_and_f16_overflow() {
        // The fixed specials land where the names promise, for every kind.
        for kind in Kind::ALL {
            let p = MatVecCase { kind, e: 130, rows: 5, ncols: 2, data: Data::Specials, padded: false };
            let Ok(Expect::Match(s)) = p.case().build() else { panic!("a match case") };
            let mut mem = s.mem.clone();
            s.ops[0].reference(&mut mem, &mut crate::reference::math::ExactMufu).unwrap();
            let dst = s.ops[0].outputs()[0];
            // Column 0 holds −Inf (and 7e4): every row's column-0 sum is non-finite.
            assert!((0..5).all(|r| !mem.read_f32(&dst, [r, 0, 0, 0]).unwrap().is_finite()), "{kind:?}");
            // Column 1 is finite in row 0 and NaN in row 2 (NaN weight).
            assert!(mem.read_f32(&dst, [0, 1, 0, 0]).unwrap().is_finite(), "{kind:?}");
            assert!(mem.read_f32(&dst, [2, 1, 0, 0]).unwrap().is_nan(), "{kind:?}");
        }
    }

    #[test]
    fn tiny_values_give_signed_zeros() {
        // F32 tiny products flush: every result is a signed zero.
        let p = MatVecCase { kind: Kind::F32, e: 64, rows: 4, ncols: 2, data: Data::Tiny, padded: false };
        let Ok(Expect::Match(s)) = p.case().build() else { panic!("a match case") };
        let mut mem = s.mem.clone();
        s.ops[0].reference(&mut mem, &mut crate::reference::math::ExactMufu).unwrap();
        let dst = s.ops[0].outputs()[0];
        let out: Vec<f32> = dst.layout.indices().map(|i| mem.read_f32(&dst, i).unwrap()).collect();
        assert!(out.iter().all(|x| *x == 0.0), "{out:?}");
    }
}
