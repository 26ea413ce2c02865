//! [pair-gate] MUL_MAT_VEC_PAIR_GATE cases: the alpha/beta pair with the gate path as its
//! epilogue, 1–16 columns × F32, F16 (half and f32 accumulation), BF16 at the Qwen3.5-9B shape
//! (E = 4096, H_v = 32), the 4B/27B shapes, one-warp blocks, padded views, special values in the
//! weights, the input, dt_bias and ssm_a, alpha + dt_bias straddling softplus' threshold; one
//! column over the pair's 16 × 256, overlapping outputs and wrong shapes are refusals. (Over 8 columns the pair itself
//! is checked against ggml's split launches: `MUL_MAT_VEC_PAIR_VS_SPLIT`.)
//!
//! Every match case with contiguous views (the unfused SIGMOID/SOFTPLUS need them) has a twin in
//! [`VS_UNFUSED`]: the fused op and the unfused chain it replaces
//! (MUL_MAT_VEC_PAIR, SIGMOID, ADD, then SOFTPLUS + MUL, or at n_t = 1 ggml's fused SOFTPLUS·MUL)
//! run from the same memory, and alpha, beta_raw, beta and gate must come out byte for byte
//! identical.

use super::mmvf::{Data, Kind, MatVecCase, plain};
use super::mmvf_pair::{TOO_MANY_COLS, too_many_cols};
use crate::error::Error;
use crate::memory::HostMemory;
use crate::ops::{Binary, BinaryKind, MulMatVecPair, MulMatVecPairGate, Op, Unary, UnaryKind, UnaryMul};
use crate::reference::math::ExactMufu;
use crate::suite::inputs::Values;
use crate::suite::{Builder, Case, Equivalence, Expect, Scenario, Tolerance};
use crate::tensor::{DType, Tensor};

pub const GROUP: &str = "MUL_MAT_VEC_PAIR_GATE";
/// The fused op against the unfused ops on the GPU (both runs), bitwise.
pub const VS_UNFUSED: &str = "MUL_MAT_VEC_PAIR_GATE_VS_UNFUSED";

/// Bound against the exact-math reference: softplus' (see the UNARY cases) scaled by |ssm_a| < 16
/// plus the product's rounding; sigmoid's 8 ulp lie inside it. alpha and beta_raw have no MUFU op
/// (their exact-math values are the GPU's bits; the bitwise replay checks everything).
const TOLERANCE: Tolerance = Tolerance::AbsRel { abs: 8e-6, rel: 2e-6 };

/// How dt_bias and ssm_a are drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Epi {
    /// dt_bias in (−4, 4), ssm_a in (−16, 16).
    Uniform,
    /// Uniform plus ±0, subnormals, ±Inf and NaN at fixed rows of dt_bias and ssm_a.
    Specials,
    /// dt_bias[r] chosen so that alpha + dt_bias lands on or next to 20 (softplus' threshold)
    /// for column 0 (alpha computed by the pair's reference while building).
    Threshold,
}

#[derive(Clone, Copy, Debug)]
struct GateCase {
    mv: MatVecCase,
    epi: Epi,
}

impl GateCase {
    fn name(&self, group: &str) -> String {
        let base = self.mv.name_in(group);
        match self.epi {
            Epi::Uniform => base,
            Epi::Specials => format!("{},epi=specials)", &base[..base.len() - 1]),
            Epi::Threshold => format!("{},epi=threshold)", &base[..base.len() - 1]),
        }
    }

    /// The fused op drawn as the case describes: the pair as the MUL_MAT_VEC_PAIR cases draw it,
    /// dt_bias and ssm_a, poisoned beta and gate (padded columns with `padded`).
    fn build(&self, b: &mut Builder) -> MulMatVecPairGate {
        let p = self.mv;
        let first = p.product(b, None);
        let second = p.product(b, Some(first.input));
        let pair = MulMatVecPair { first, second };
        let dt_bias = b.input([p.rows, 1, 1, 1], Values::Uniform(4.0));
        let ssm_a = b.input([p.rows, 1, 1, 1], Values::Uniform(16.0));
        let col_pad = if p.padded { [5, 0, 0, 0] } else { [0; 4] };
        let beta = b.tensor_padded(DType::F32, [p.rows, p.ncols, 1, 1], col_pad, Values::AnyBits);
        let gate = b.tensor_padded(DType::F32, [p.rows, p.ncols, 1, 1], col_pad, Values::AnyBits);
        match self.epi {
            Epi::Uniform => {}
            Epi::Specials => {
                let specials =
                    [0.0f32, -0.0, f32::from_bits(0x0000_0001), f32::from_bits(0x8040_0000), f32::INFINITY, f32::NEG_INFINITY, f32::NAN];
                for (k, v) in specials.into_iter().enumerate() {
                    if k < p.rows {
                        b.mem.write_f32(&dt_bias, [k, 0, 0, 0], v).expect("a view of the case's own buffers");
                    }
                    let r = p.rows - 1 - k.min(p.rows - 1);
                    b.mem.write_f32(&ssm_a, [r, 0, 0, 0], v).expect("a view of the case's own buffers");
                }
            }
            Epi::Threshold => {
                // alpha as the pair will compute it (the reference is the kernel's bits).
                let mut probe = b.mem.clone();
                pair.reference(&mut probe, &mut ExactMufu).expect("the drawn pair is valid");
                for r in 0..p.rows {
                    let alpha = probe.read_f32(&pair.first.dst, [r, 0, 0, 0]).expect("a view of the case's own buffers");
                    // Row r aims at 20 + (r mod 3 − 1)·2^-19: just below, at, and just above the
                    // threshold (the add's rounding decides which side it lands on).
                    let target = 20.0f32 + ((r % 3) as f32 - 1.0) * 2f32.powi(-19);
                    b.mem.write_f32(&dt_bias, [r, 0, 0, 0], target - alpha).expect("a view of the case's own buffers");
                }
            }
        }
        MulMatVecPairGate { pair, dt_bias, ssm_a, beta, gate }
    }

    fn match_case(self) -> Case {
        Case::seeded(GROUP, self.name(GROUP), move |mut b| {
            let op = self.build(&mut b);
            Ok(b.finish(vec![Box::new(op)], TOLERANCE, false))
        })
    }

    fn vs_unfused_case(self) -> Case {
        Case::seeded(VS_UNFUSED, self.name(VS_UNFUSED), move |mut b| {
            let op = self.build(&mut b);
            let unfused = unfused_ops(&op, &mut b, self.mv.ncols == 1);
            let compare = op.outputs().into_iter().map(|t| (t, t)).collect();
            Ok(Expect::Equivalent(Equivalence::new(b.mem, vec![Box::new(op)], unfused, compare)))
        })
    }
}

/// The unfused chain `op` replaces, writing the same four outputs (its intermediates
/// alpha + dt_bias and softplus in fresh buffers): MUL_MAT_VEC_PAIR, SIGMOID(beta_raw), ADD(alpha,
/// dt_bias), then SOFTPLUS·MUL fused (`fused_softplus_mul`, ggml at n_t = 1) or SOFTPLUS, MUL.
pub fn unfused_ops(op: &MulMatVecPairGate, b: &mut Builder, fused_softplus_mul: bool) -> Vec<Box<dyn Op>> {
    let (alpha, beta_raw) = (op.pair.first.dst, op.pair.second.dst);
    let biased = b.output(alpha.ne());
    let mut ops: Vec<Box<dyn Op>> = vec![
        Box::new(op.pair.clone()),
        Box::new(Unary { kind: UnaryKind::Sigmoid, src: beta_raw, dst: op.beta }),
        Box::new(Binary { kind: BinaryKind::Add, a: alpha, b: op.dt_bias, dst: biased }),
    ];
    if fused_softplus_mul {
        ops.push(Box::new(UnaryMul { kind: UnaryKind::Softplus, src: biased, mul: op.ssm_a, dst: op.gate }));
    } else {
        let softplus = b.output(alpha.ne());
        ops.push(Box::new(Unary { kind: UnaryKind::Softplus, src: biased, dst: softplus }));
        ops.push(Box::new(Binary { kind: BinaryKind::Mul, a: softplus, b: op.ssm_a, dst: op.gate }));
    }
    ops
}

/// A plain fused op (F32 products of E × rows × ncols) for the refusals to spoil.
fn plain_gate(b: &mut Builder, dtype: DType, e: usize, rows: usize, ncols: usize) -> MulMatVecPairGate {
    let first = plain(b, dtype, e, rows, ncols);
    let mut second = plain(b, dtype, e, rows, ncols);
    second.input = first.input;
    MulMatVecPairGate {
        pair: MulMatVecPair { first, second },
        dt_bias: b.input([rows, 1, 1, 1], Values::Uniform(1.0)),
        ssm_a: b.input([rows, 1, 1, 1], Values::Uniform(1.0)),
        beta: b.output([rows, ncols, 1, 1]),
        gate: b.output([rows, ncols, 1, 1]),
    }
}

/// A case the op must refuse with the error `predicate` accepts.
fn refusal(name: &str, build: fn(&mut Builder) -> MulMatVecPairGate, predicate: fn(&Error) -> bool, expected: &'static str) -> Case {
    let name = format!("{GROUP}(refuse:{name})");
    Case::seeded(GROUP, name, move |mut b| {
        let op = build(&mut b);
        let scenario = Scenario { mem: b.mem, ops: vec![Box::new(op)], tolerance: Tolerance::BitExact, exact_nan_payloads: false };
        Ok(Expect::Refusal { scenario, predicate, expected })
    })
}

/// The match setups (each also run as a twin against the unfused ops).
fn setups() -> Vec<GateCase> {
    let base = MatVecCase { kind: Kind::F32, e: 4096, rows: 32, ncols: 1, data: Data::Uniform, padded: false };
    let g = |mv: MatVecCase| GateCase { mv, epi: Epi::Uniform };
    let mut out = Vec::new();
    // The 9B alpha/beta shape: the three weight types llama.cpp meets × 1–8 columns.
    for kind in [Kind::F32, Kind::F16Half, Kind::Bf16] {
        for ncols in 1..=8 {
            out.push(g(MatVecCase { kind, ncols, ..base }));
        }
    }
    for ncols in [1, 2, 4, 8] {
        out.push(g(MatVecCase { kind: Kind::F16F32, ncols, ..base }));
    }
    // [wide-pair] 9–16 columns (the layer step's n_t 9–16), the three types; F16 at F32 precision,
    // specials in the products and the epilogue, a strided view.
    for kind in [Kind::F32, Kind::F16Half, Kind::Bf16] {
        for ncols in [9, 12, 16] {
            out.push(g(MatVecCase { kind, ncols, ..base }));
        }
    }
    out.push(g(MatVecCase { kind: Kind::F16F32, ncols: 13, ..base }));
    out.push(GateCase { mv: MatVecCase { kind: Kind::Bf16, ncols: 11, data: Data::Specials, ..base }, epi: Epi::Specials });
    out.push(GateCase { mv: MatVecCase { kind: Kind::F32, e: 64, rows: 12, ncols: 10, ..base }, epi: Epi::Threshold });
    out.push(g(MatVecCase { kind: Kind::Bf16, e: 5120, rows: 48, ncols: 14, padded: true, ..base }));
    // 4B and 27B shapes, one-warp blocks (E 64: alpha small, softplus' log branch), long rows.
    for (kind, e, rows, ncols) in [
        (Kind::F32, 2560, 16, 1),
        (Kind::Bf16, 5120, 48, 7),
        (Kind::F16Half, 5120, 48, 4),
        (Kind::F32, 64, 3, 2),
        (Kind::F16Half, 130, 5, 3),
        (Kind::F16F32, 1000, 9, 8),
    ] {
        out.push(g(MatVecCase { kind, e, rows, ncols, ..base }));
    }
    // Tiny products: alpha ≈ ±0, so gate = softplus(dt_bias)·ssm_a through the log branch.
    out.push(g(MatVecCase { kind: Kind::F32, e: 64, rows: 4, ncols: 2, data: Data::Tiny, ..base }));
    out.push(g(MatVecCase { kind: Kind::F16Half, e: 2560, rows: 16, ncols: 4, data: Data::Tiny, ..base }));
    // Special values in the products (±0, subnormals, ±Inf, NaN, overflow) and in dt_bias/ssm_a.
    for kind in Kind::ALL {
        out.push(GateCase { mv: MatVecCase { kind, ncols: 3, data: Data::Specials, ..base }, epi: Epi::Specials });
    }
    out.push(GateCase { mv: MatVecCase { kind: Kind::F32, e: 64, rows: 16, ncols: 1, ..base }, epi: Epi::Specials });
    // alpha + dt_bias at softplus' threshold.
    out.push(GateCase { mv: MatVecCase { kind: Kind::F32, ncols: 1, ..base }, epi: Epi::Threshold });
    out.push(GateCase { mv: MatVecCase { kind: Kind::Bf16, e: 64, rows: 12, ncols: 4, ..base }, epi: Epi::Threshold });
    // Padded views (pair and epilogue outputs with strided columns).
    out.push(g(MatVecCase { kind: Kind::Bf16, e: 5120, rows: 48, ncols: 4, padded: true, ..base }));
    out.push(GateCase {
        mv: MatVecCase { kind: Kind::F16Half, e: 200, rows: 3, ncols: 8, padded: true, data: Data::Specials },
        epi: Epi::Specials,
    });
    out
}

pub fn cases() -> Vec<Case> {
    let setups = setups();
    let mut cases: Vec<Case> = setups.iter().map(|s| s.match_case()).collect();
    for (t, dtype) in [("f32", DType::F32), ("f16", DType::F16), ("bf16", DType::BF16)] {
        // [seq-batch] One column beyond the pair's 16 × 256.
        let name = format!("type={t},ncols={TOO_MANY_COLS}");
        let build: fn(&mut Builder) -> MulMatVecPairGate = match dtype {
            DType::F32 => |b| plain_gate(b, DType::F32, 64, 32, TOO_MANY_COLS),
            DType::F16 => |b| plain_gate(b, DType::F16, 64, 32, TOO_MANY_COLS),
            _ => |b| plain_gate(b, DType::BF16, 64, 32, TOO_MANY_COLS),
        };
        cases.push(refusal(
            &name,
            build,
            |e| matches!(e, Error::Unsupported { op: GROUP, .. }) && too_many_cols(e),
            "Unsupported (4097 columns)",
        ));
    }
    cases.push(refusal(
        "beta_over_beta_raw",
        |b| {
            let mut op = plain_gate(b, DType::F32, 64, 4, 2);
            op.beta = op.pair.second.dst;
            op
        },
        |e| matches!(e, Error::Aliasing { op: GROUP, a: "beta_raw", b: "beta", .. }),
        "Aliasing (beta_raw, beta)",
    ));
    cases.push(refusal(
        "gate_over_alpha",
        |b| {
            let mut op = plain_gate(b, DType::F32, 64, 4, 2);
            op.gate = op.pair.first.dst;
            op
        },
        |e| matches!(e, Error::Aliasing { op: GROUP, a: "alpha", b: "gate", .. }),
        "Aliasing (alpha, gate)",
    ));
    cases.push(refusal(
        "gate_over_beta_one_element",
        |b| {
            let mut op = plain_gate(b, DType::F32, 64, 4, 2);
            // gate's last element is beta's first.
            let buf = b.output([4 * 2 * 2 - 1, 1, 1, 1]);
            op.gate = buf.view([4, 2, 1, 1], [4, 16, 32, 32], 0);
            op.beta = buf.view([4, 2, 1, 1], [4, 16, 32, 32], 4 * 7);
            op
        },
        |e| matches!(e, Error::Aliasing { op: GROUP, a: "beta", b: "gate", .. }),
        "Aliasing (beta, gate)",
    ));
    cases.push(refusal(
        "gate_over_dt_bias",
        |b| {
            let mut op = plain_gate(b, DType::F32, 64, 4, 1);
            op.gate = op.dt_bias;
            op
        },
        |e| matches!(e, Error::Aliasing { op: GROUP, a: "gate", b: "dt_bias", .. }),
        "Aliasing (gate, dt_bias)",
    ));
    cases.push(refusal(
        "beta_over_input",
        |b| {
            let mut op = plain_gate(b, DType::F32, 64, 4, 2);
            op.beta = op.pair.first.input.view([4, 2, 1, 1], [4, 16, 32, 32], 0);
            op
        },
        |e| matches!(e, Error::Aliasing { op: GROUP, a: "beta", b: "input", .. }),
        "Aliasing (beta, input)",
    ));
    cases.push(refusal(
        "alpha_over_ssm_a",
        |b| {
            let mut op = plain_gate(b, DType::F32, 64, 4, 1);
            op.pair.first.dst = op.ssm_a;
            op
        },
        |e| matches!(e, Error::Aliasing { op: GROUP, a: "alpha", b: "ssm_a", .. }),
        "Aliasing (alpha, ssm_a)",
    ));
    cases.push(refusal(
        "dt_bias_wrong_shape",
        |b| {
            let mut op = plain_gate(b, DType::F32, 64, 4, 2);
            op.dt_bias = b.input([5, 1, 1, 1], Values::Uniform(1.0));
            op
        },
        |e| matches!(e, Error::Shape { op: GROUP, arg: "dt_bias", .. }),
        "Shape (dt_bias)",
    ));
    cases.push(refusal(
        "ssm_a_per_column",
        |b| {
            let mut op = plain_gate(b, DType::F32, 64, 4, 2);
            op.ssm_a = b.input([4, 2, 1, 1], Values::Uniform(1.0));
            op
        },
        |e| matches!(e, Error::Shape { op: GROUP, arg: "ssm_a", .. }),
        "Shape (ssm_a)",
    ));
    cases.push(refusal(
        "gate_wrong_columns",
        |b| {
            let mut op = plain_gate(b, DType::F32, 64, 4, 2);
            op.gate = b.output([4, 3, 1, 1]);
            op
        },
        |e| matches!(e, Error::Shape { op: GROUP, arg: "gate", .. }),
        "Shape (gate)",
    ));
    cases.push(refusal(
        "beta_f16",
        |b| {
            let mut op = plain_gate(b, DType::F32, 64, 4, 2);
            op.beta = b.tensor_padded(DType::F16, [4, 2, 1, 1], [0; 4], Values::AnyBits);
            op
        },
        |e| matches!(e, Error::DType { op: GROUP, arg: "beta", .. }),
        "DType (beta)",
    ));
    cases.push(refusal(
        "dt_bias_strided",
        |b| {
            let mut op = plain_gate(b, DType::F32, 64, 4, 2);
            let t = b.input([8, 1, 1, 1], Values::Uniform(1.0));
            op.dt_bias = t.view([4, 1, 1, 1], [8, 32, 32, 32], 0);
            op
        },
        |e| matches!(e, Error::Stride { op: GROUP, arg: "dt_bias", .. }),
        "Stride (dt_bias)",
    ));
    cases.push(refusal(
        "pair_dsts_overlap",
        |b| {
            let mut op = plain_gate(b, DType::F32, 64, 4, 2);
            op.pair.second.dst = op.pair.first.dst;
            op
        },
        |e| matches!(e, Error::Aliasing { op: GROUP, a: "first.dst", b: "second.dst", .. }),
        "Aliasing (first.dst, second.dst), as the pair's",
    ));
    // Twins for every setup whose views the unfused SIGMOID and SOFTPLUS take (contiguous).
    cases.extend(setups.iter().filter(|s| !s.mv.padded).map(|s| s.vs_unfused_case()));
    cases
}

/// The words of each of an op's outputs, in logical order.
pub type OutputWords = Vec<Vec<u32>>;

/// The fused op and its unfused chain on `mem` (references, exact MUFU): the four outputs' bytes
/// after each (for the CPU tests).
pub fn run_both(mem: &HostMemory, op: &MulMatVecPairGate, unfused: &[Box<dyn Op>]) -> crate::Result<(OutputWords, OutputWords)> {
    let read = |m: &HostMemory, t: &Tensor| t.layout.indices().map(|i| m.read_u32(t, i)).collect::<crate::Result<Vec<u32>>>();
    let mut fused = mem.clone();
    op.reference(&mut fused, &mut ExactMufu)?;
    let mut chain = mem.clone();
    for o in unfused {
        o.reference(&mut chain, &mut ExactMufu)?;
    }
    let outs = op.outputs();
    Ok((
        outs.iter().map(|t| read(&fused, t)).collect::<crate::Result<_>>()?,
        outs.iter().map(|t| read(&chain, t)).collect::<crate::Result<_>>()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_column_count_and_type_has_a_case_and_a_twin() {
        let cases = cases();
        for label in ["type=f32", "type=f16,acc=half", "type=bf16"] {
            for ncols in (1..=8).chain([9, 12, 16]) {
                for group in [GROUP, VS_UNFUSED] {
                    let name = format!("{group}({label},E=4096,rows=32,ncols={ncols})");
                    assert!(cases.iter().any(|c| c.name == name), "missing {name}");
                }
            }
        }
        let twins = cases.iter().filter(|c| c.group == VS_UNFUSED).count();
        let matches = cases.iter().filter(|c| c.group == GROUP && !c.name.contains("refuse:") && !c.name.contains("padded")).count();
        assert_eq!(twins, matches);
        assert!(twins >= 40, "{twins} twins");
    }

    #[test]
    fn every_case_passes_on_the_cpu() {
        crate::suite::assert_cpu_passes(cases());
    }
}
