//! MUL_MAT_VEC_PAIR cases: the alpha/beta pair of a GDN layer (two mul_mat_vec_f of one input,
//! one launch) for 1–16 columns × F32, F16 (half accumulation), BF16 at the Qwen3.5-9B shape
//! (E = 4096, H_v = 32), F16 with f32 accumulation, the 4B/27B shapes, every reduction path
//! (one warp, partial chunks), special values, strided views; one column over
//! `MUL_MAT_VEC_PAIR_MAX_COLS` (16 tokens × 256 sequences) and mismatched
//! products are refusals. Every case compares both products bit for bit with the unfused
//! mul_mat_vec_f reference, which the unfused kernels match on the GPU.
//!
//! [wide-pair] Over 8 columns ggml runs each product as several launches of ≤ 8 columns; the pair
//! takes the product whole. [`VS_SPLIT`] twins run the pair and ggml's split launches
//! ([`split_launches`]) from the same memory on the GPU, every byte compared.

use super::mmvf::{Data, Kind, MatVecCase, plain};
use crate::error::Error;
use crate::kernels::abi;
use crate::ops::{MulMatVec, Op};
use crate::ops::{MulMatVecPair, Precision};
use crate::suite::{Builder, Case, Equivalence, Expect, Scenario, Tolerance};
use crate::tensor::{DType, Tensor};

pub const GROUP: &str = "MUL_MAT_VEC_PAIR";
/// [wide-pair] The pair over 9–16 columns against ggml's split launches, bitwise on the GPU.
pub const VS_SPLIT: &str = "MUL_MAT_VEC_PAIR_VS_SPLIT";

/// ggml's launches for the pair's products (`MMVF_MAX_BATCH_SIZE` = 8): per product (alpha,
/// then beta, as the graph builder orders them), one unfused MUL_MAT_VEC per column slice of at
/// most 8 of the input and the dst — views moved on by whole columns, so any view the pair
/// takes is sliced as ggml's `ggml_view` slices it.
pub fn split_launches(op: &MulMatVecPair) -> Vec<Box<dyn Op>> {
    let slice = |t: &Tensor, first: usize, cols: usize| t.view([t.ne()[0], cols, 1, 1], t.layout.nb, first * t.layout.nb[1]);
    let ncols = op.first.input.ne()[1];
    let mut ops: Vec<Box<dyn Op>> = Vec::new();
    for product in [&op.first, &op.second] {
        for first in (0..ncols).step_by(abi::MUL_MAT_VEC_MAX_COLS) {
            let cols = abi::MUL_MAT_VEC_MAX_COLS.min(ncols - first);
            let part = MulMatVec { input: slice(&product.input, first, cols), dst: slice(&product.dst, first, cols), ..product.clone() };
            ops.push(Box::new(part));
        }
    }
    ops
}

/// The pair drawn as `p` describes against [`split_launches`].
fn vs_split_case(p: MatVecCase) -> Case {
    Case::seeded(VS_SPLIT, p.name_in(VS_SPLIT), move |mut b| {
        let first = p.product(&mut b, None);
        let second = p.product(&mut b, Some(first.input));
        let op = MulMatVecPair { first, second };
        let split = split_launches(&op);
        let compare = op.outputs().into_iter().map(|t| (t, t)).collect();
        Ok(Expect::Equivalent(Equivalence::new(b.mem, vec![Box::new(op)], split, compare)))
    })
}

/// Both products drawn as `p` describes (own weights, one shared input, own dsts).
fn pair_case(p: MatVecCase) -> Case {
    Case::seeded(GROUP, p.name_in(GROUP), move |mut b| {
        let first = p.product(&mut b, None);
        let second = p.product(&mut b, Some(first.input));
        let op = MulMatVecPair { first, second };
        // No MUFU op: the exact-math reference is the reference.
        Ok(b.finish(vec![Box::new(op)], Tolerance::BitExact, false))
    })
}

/// A case the op must refuse with the error `predicate` accepts.
fn refusal(name: &str, build: fn(&mut Builder) -> MulMatVecPair, predicate: fn(&Error) -> bool, expected: &'static str) -> Case {
    let name = format!("{GROUP}(refuse:{name})");
    Case::seeded(GROUP, name, move |mut b| {
        let op = build(&mut b);
        let scenario = Scenario { mem: b.mem, ops: vec![Box::new(op)], tolerance: Tolerance::BitExact, exact_nan_payloads: false };
        Ok(Expect::Refusal { scenario, predicate, expected })
    })
}

/// [seq-batch] One column more than the pair takes (16 tokens × 256 sequences + 1).
pub(super) const TOO_MANY_COLS: usize = abi::MUL_MAT_VEC_PAIR_MAX_COLS + 1;

/// The refusal of [`TOO_MANY_COLS`] columns, naming the count and the limit.
pub(super) fn too_many_cols(e: &Error) -> bool {
    matches!(e, Error::Unsupported { what, .. } if what.contains(&format!("{TOO_MANY_COLS} input columns")) && what.contains("MUL_MAT_VEC_PAIR_MAX_COLS"))
}

/// A plain pair of `dtype` products, E × rows × ncols, sharing one input.
fn plain_pair(b: &mut Builder, dtype: DType, e: usize, rows: usize, ncols: usize) -> MulMatVecPair {
    let first = plain(b, dtype, e, rows, ncols);
    let mut second = plain(b, dtype, e, rows, ncols);
    second.input = first.input;
    MulMatVecPair { first, second }
}

pub fn cases() -> Vec<Case> {
    let base = MatVecCase { kind: Kind::F32, e: 4096, rows: 32, ncols: 1, data: Data::Uniform, padded: false };
    let mut out = Vec::new();
    // The 9B alpha/beta shape: the three weight types llama.cpp meets × 1–8 columns.
    for kind in [Kind::F32, Kind::F16Half, Kind::Bf16] {
        for ncols in 1..=8 {
            out.push(MatVecCase { kind, ncols, ..base });
        }
    }
    // F16 weights at F32 precision.
    for ncols in [1, 2, 4, 8] {
        out.push(MatVecCase { kind: Kind::F16F32, ncols, ..base });
    }
    // [wide-pair] 9–16 columns (ggml: two launches per product), the three types; F16 at F32
    // precision, another block size, specials and strided views at a few widths.
    let wide = wide_setups(base);
    out.extend(wide.iter().copied());
    // The 4B (E 2560: 5 pairs per thread, one partial chunk) and 27B (E 5120: a full chunk and
    // a partial one) shapes. (E 2560 with 16 rows: every grid shape but the 9B one's differs
    // from it, so tools/twins/ncu-mmvf.sh can tell the 9B launches by their grid.)
    for (kind, e, rows, ncols) in [
        (Kind::F32, 2560, 16, 1),
        (Kind::F32, 5120, 48, 3),
        (Kind::F32, 5120, 48, 8),
        (Kind::F16Half, 2560, 16, 2),
        (Kind::F16Half, 5120, 48, 5),
        (Kind::Bf16, 2560, 16, 4),
        (Kind::Bf16, 5120, 48, 7),
        (Kind::F16F32, 5120, 48, 6),
    ] {
        out.push(MatVecCase { kind, e, rows, ncols, ..base });
    }
    // Other block sizes: one warp (E 64, no shared-memory step), 96 threads (E 130), 256 threads
    // with threads that have no pair (E 1000) and a long row (E 40960: several chunks).
    for (kind, e, rows, ncols) in [
        (Kind::F32, 64, 3, 2),
        (Kind::F16Half, 130, 5, 3),
        (Kind::Bf16, 1000, 9, 8),
        (Kind::F32, 40960, 4, 2),
        (Kind::F16Half, 40960, 2, 1),
    ] {
        out.push(MatVecCase { kind, e, rows, ncols, ..base });
    }
    // Special values (±0, subnormals, ±Inf, NaN, f16 overflow) and flushing products.
    for kind in Kind::ALL {
        out.push(MatVecCase { kind, ncols: 3, data: Data::Specials, ..base });
    }
    out.push(MatVecCase { kind: Kind::F32, e: 64, rows: 4, ncols: 2, data: Data::Tiny, ..base });
    out.push(MatVecCase { kind: Kind::F16Half, e: 2560, rows: 16, ncols: 4, data: Data::Tiny, ..base });
    // Strided (padded, offset) views.
    out.push(MatVecCase { kind: Kind::Bf16, e: 5120, rows: 48, ncols: 4, padded: true, ..base });
    out.push(MatVecCase { kind: Kind::F16Half, e: 200, rows: 3, ncols: 8, padded: true, data: Data::Specials });
    let mut cases: Vec<Case> = out.into_iter().map(pair_case).collect();
    cases.extend(wide.into_iter().map(vs_split_case));

    // [seq-batch] One column beyond the pair's 16 × 256 (MUL_MAT_VEC_PAIR_MAX_COLS), for each weight type.
    cases.push(refusal(
        "type=f32,ncols=4097",
        |b| plain_pair(b, DType::F32, 64, 32, TOO_MANY_COLS),
        |e| matches!(e, Error::Unsupported { op: GROUP, .. }) && too_many_cols(e),
        "Unsupported (4097 columns)",
    ));
    cases.push(refusal(
        "type=f16,ncols=4097",
        |b| plain_pair(b, DType::F16, 64, 32, TOO_MANY_COLS),
        |e| matches!(e, Error::Unsupported { op: GROUP, .. }) && too_many_cols(e),
        "Unsupported (4097 columns)",
    ));
    cases.push(refusal(
        "type=bf16,ncols=4097",
        |b| plain_pair(b, DType::BF16, 64, 32, TOO_MANY_COLS),
        |e| matches!(e, Error::Unsupported { op: GROUP, .. }) && too_many_cols(e),
        "Unsupported (4097 columns)",
    ));
    // A wide pair keeps the unfused op's per-column rules: input columns off the element pairs.
    cases.push(refusal(
        "ncols=12,input_columns_not_pair_aligned",
        |b| {
            let mut p = plain_pair(b, DType::F32, 64, 4, 12);
            let wide = b.input([65, 12, 1, 1], crate::suite::inputs::Values::Uniform(1.0));
            p.first.input = wide.view([64, 12, 1, 1], wide.layout.nb, 0);
            p.second.input = p.first.input;
            p
        },
        |e| matches!(e, Error::Stride { op: GROUP, arg: "first.input", .. }),
        "Stride (first.input)",
    ));
    cases.push(refusal(
        "different_inputs",
        |b| {
            let mut p = plain_pair(b, DType::F32, 64, 4, 2);
            p.second.input = b.input([64, 2, 1, 1], crate::suite::inputs::Values::Uniform(1.0));
            p
        },
        |e| matches!(e, Error::Invalid { op: GROUP, .. }),
        "Invalid (the products read different inputs)",
    ));
    cases.push(refusal(
        "weight_types_differ",
        |b| {
            let mut p = plain_pair(b, DType::F32, 64, 4, 2);
            p.second.weight = b.tensor_padded(DType::BF16, [64, 4, 1, 1], [0; 4], crate::suite::inputs::Values::Uniform(1.0));
            p
        },
        |e| matches!(e, Error::DType { op: GROUP, arg: "second.weight", .. }),
        "DType (second.weight)",
    ));
    cases.push(refusal(
        "precisions_differ",
        |b| {
            let mut p = plain_pair(b, DType::F16, 64, 4, 2);
            p.second.precision = Precision::F32;
            p
        },
        |e| matches!(e, Error::Invalid { op: GROUP, .. }),
        "Invalid (precisions differ)",
    ));
    cases.push(refusal(
        "dsts_overlap",
        |b| {
            let mut p = plain_pair(b, DType::F32, 64, 4, 2);
            p.second.dst = p.first.dst;
            p
        },
        |e| matches!(e, Error::Aliasing { op: GROUP, a: "first.dst", b: "second.dst", .. }),
        "Aliasing (first.dst, second.dst)",
    ));
    cases.push(refusal(
        "dst_overlaps_other_weight",
        |b| {
            let mut p = plain_pair(b, DType::F32, 64, 4, 2);
            p.first.dst = p.second.weight.view([4, 2, 1, 1], [4, 16, 32, 32], 0);
            p
        },
        |e| matches!(e, Error::Aliasing { op: GROUP, a: "first.dst", b: "second.weight", .. }),
        "Aliasing (first.dst, second.weight)",
    ));
    cases
}

/// [wide-pair] The 9–16-column setups (each also a [`VS_SPLIT`] twin).
pub(super) fn wide_setups(base: MatVecCase) -> Vec<MatVecCase> {
    let mut out = Vec::new();
    for kind in [Kind::F32, Kind::F16Half, Kind::Bf16] {
        for ncols in 9..=16 {
            out.push(MatVecCase { kind, ncols, ..base });
        }
    }
    for ncols in [12, 16] {
        out.push(MatVecCase { kind: Kind::F16F32, ncols, ..base });
    }
    out.push(MatVecCase { kind: Kind::Bf16, e: 1000, rows: 9, ncols: 13, ..base });
    out.push(MatVecCase { kind: Kind::F32, e: 64, rows: 3, ncols: 10, ..base });
    for kind in Kind::ALL {
        out.push(MatVecCase { kind, ncols: 11, data: Data::Specials, ..base });
    }
    out.push(MatVecCase { kind: Kind::Bf16, e: 5120, rows: 48, ncols: 12, padded: true, ..base });
    out.push(MatVecCase { kind: Kind::F16Half, e: 200, rows: 3, ncols: 16, padded: true, data: Data::Specials });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::Op;

    #[test]
    fn cases_cover_one_to_sixteen_columns_of_each_type_and_refuse_one_more() {
        let cases = cases();
        assert!(cases.len() >= 45, "{} cases", cases.len());
        for label in ["type=f32", "type=f16,acc=half", "type=bf16"] {
            for ncols in 1..=16 {
                let name = format!("{GROUP}({label},E=4096,rows=32,ncols={ncols})");
                assert!(cases.iter().any(|c| c.name == name), "missing {name}");
            }
            for ncols in 9..=16 {
                let name = format!("{VS_SPLIT}({label},E=4096,rows=32,ncols={ncols})");
                assert!(cases.iter().any(|c| c.name == name), "missing {name}");
            }
        }
        for t in ["f32", "f16", "bf16"] {
            let name = format!("{GROUP}(refuse:type={t},ncols={TOO_MANY_COLS})");
            let case = cases.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("missing {name}"));
            assert!(matches!(case.build(), Ok(Expect::Refusal { .. })));
        }
    }

    #[test]
    fn both_products_share_the_input_and_differ_in_weights() {
        let c = pair_case(MatVecCase { kind: Kind::Bf16, e: 130, rows: 5, ncols: 2, data: Data::Specials, padded: false });
        let Ok(Expect::Match(s)) = c.build() else { panic!("a match case") };
        let op = s.ops[0].as_ref().downcast_ref::<MulMatVecPair>().expect("a pair");
        assert_eq!(op.first.input, op.second.input);
        assert_ne!(op.first.weight.buffer, op.second.weight.buffer);
        op.validate(&s.mem).unwrap();
    }

    #[test]
    fn every_case_passes_on_the_cpu() {
        crate::suite::assert_cpu_passes(cases());
    }

    #[test]
    fn the_split_launches_are_ggmls() {
        let mut b = Builder::new(3);
        for (ncols, widths) in [(9, vec![8, 1]), (13, vec![8, 5]), (16, vec![8, 8]), (5, vec![5])] {
            let p = plain_pair(&mut b, DType::F32, 64, 4, ncols);
            let ops = split_launches(&p);
            let mvs: Vec<&MulMatVec> = ops.iter().map(|o| o.as_ref().downcast_ref::<MulMatVec>().unwrap()).collect();
            let mut want = widths.clone();
            want.extend(&widths);
            assert_eq!(mvs.iter().map(|m| m.input.ne()[1]).collect::<Vec<_>>(), want);
            // Every launch is a valid unfused MUL_MAT_VEC.
            for m in &mvs {
                m.validate(&b.mem).unwrap();
            }
            assert_eq!(mvs[widths.len()].weight, p.second.weight);
        }
    }
}
