//! Unary cases: each function on the alpha/beta shapes ([H_v, n_t]), larger vectors, in place,
//! special values, and the softplus threshold.

use crate::ops::{Unary, UnaryKind};
use crate::suite::inputs::Values;
use crate::suite::{Case, Tolerance};

pub const GROUP: &str = "UNARY";

/// The bound against exact math for each function (the bitwise check is the exactness proof).
fn tolerance(kind: UnaryKind) -> Tolerance {
    match kind {
        // ex2 ≤ 2 ulp; for sigmoid/silu the rcp (≤ 1 ulp) and the +1 / ·x roundings compose
        // across binades: 8 ulp bounds them.
        UnaryKind::Exp => Tolerance::Ulps(4),
        UnaryKind::Sigmoid | UnaryKind::Silu => Tolerance::Ulps(8),
        // lg2.approx has an *absolute* error bound (2^-22) near 1, where softplus of a very
        // negative x takes its log: the result's error is absolute there (≤ 2^-22·ln 2 plus the
        // ex2 error carried through), relative elsewhere.
        UnaryKind::Softplus => Tolerance::AbsRel { abs: 4e-7, rel: 1e-6 },
    }
}

pub fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for kind in UnaryKind::ALL {
        for (ne, values, in_place, label) in [
            ([32, 1, 1, 1], Values::Uniform(8.0), false, "H_v=32,n_t=1"),
            ([48, 16, 1, 1], Values::Uniform(8.0), false, "H_v=48,n_t=16"),
            ([1000, 3, 1, 1], Values::Uniform(30.0), false, "n=3000,wide"),
            ([256, 4, 1, 1], Values::WithSpecials { scale: 30.0, every: 20 }, false, "specials"),
            ([32, 8, 1, 1], Values::Uniform(4.0), true, "in_place"),
        ] {
            let name = format!("{GROUP}({},{label})", kind.name());
            out.push(Case::seeded(GROUP, name, move |mut b| {
                let src = b.input(ne, values);
                let dst = if in_place { src } else { b.output(ne) };
                if kind == UnaryKind::Softplus {
                    // Straddle the x > 20 threshold exactly.
                    for (k, x) in [20.0f32, f32::from_bits(0x41A0_0001), f32::from_bits(0x419F_FFFF), -20.0].into_iter().enumerate() {
                        b.mem.write_f32(&src, [k, 0, 0, 0], x).expect("a view of the case's own buffers");
                    }
                }
                Ok(b.finish(vec![Box::new(Unary { kind, src, dst })], tolerance(kind), false))
            }));
        }
    }
    out.extend(unary_mul_cases());
    out
}

// ---- [speed] fused SOFTPLUS·MUL ----

pub const UNARY_MUL_GROUP: &str = "UNARY_MUL";

/// Fused SOFTPLUS·MUL: the gate path at n_t = 1 (H_v = 32 and 48) and with `a` broadcast over
/// n_t = 4 / 16, larger vectors, specials in x, in place over either input, and chains that run
/// the unfused SOFTPLUS + MUL next to the
/// fused kernel on the same inputs (each output bitwise against its reference, and the two
/// references are equal bit for bit — `reference::unary` tests — so fused = unfused on the GPU).
fn unary_mul_cases() -> Vec<Case> {
    use crate::ops::{Binary, BinaryKind, UnaryMul};
    // softplus's bound (see `tolerance`) scaled by |m| < 16, plus the product's rounding.
    let tol = Tolerance::AbsRel { abs: 8e-6, rel: 2e-6 };
    #[derive(Clone, Copy, PartialEq)]
    enum Dst {
        New,
        OverSrc,
        OverMul,
        NextToUnfused,
    }
    let mut out = Vec::new();
    // (x shape, mul shape, x values, destination, label); a mul shape smaller than x's is MUL's
    // broadcast of a leading block (the gate's `a` [H_v] over n_t tokens).
    for (ne, ne_m, x_values, dst, label) in [
        ([32, 1, 1, 1], [32, 1, 1, 1], Values::Uniform(8.0), Dst::New, "gate_n_t=1,H_v=32"),
        ([48, 1, 1, 1], [48, 1, 1, 1], Values::Uniform(8.0), Dst::New, "gate_n_t=1,H_v=48"),
        ([32, 4, 1, 1], [32, 1, 1, 1], Values::Uniform(8.0), Dst::New, "gate_broadcast,H_v=32,n_t=4"),
        ([48, 16, 1, 1], [48, 1, 1, 1], Values::Uniform(8.0), Dst::New, "gate_broadcast,H_v=48,n_t=16"),
        ([1000, 3, 1, 1], [1000, 3, 1, 1], Values::Uniform(30.0), Dst::New, "n=3000,wide"),
        ([256, 4, 1, 1], [256, 4, 1, 1], Values::WithSpecials { scale: 30.0, every: 20 }, Dst::New, "specials"),
        ([32, 8, 1, 1], [32, 8, 1, 1], Values::Uniform(8.0), Dst::OverSrc, "in_place_src"),
        ([32, 8, 1, 1], [32, 1, 1, 1], Values::Uniform(8.0), Dst::OverSrc, "in_place_src,broadcast"),
        ([32, 8, 1, 1], [32, 8, 1, 1], Values::Uniform(8.0), Dst::OverMul, "in_place_mul"),
        ([300, 2, 1, 1], [300, 2, 1, 1], Values::WithSpecials { scale: 30.0, every: 10 }, Dst::NextToUnfused, "next_to_unfused"),
        ([40, 5, 3, 1], [40, 5, 1, 1], Values::WithSpecials { scale: 30.0, every: 10 }, Dst::NextToUnfused, "next_to_unfused,broadcast"),
    ] {
        let name = format!("{UNARY_MUL_GROUP}(SOFTPLUS,{label})");
        out.push(Case::seeded(UNARY_MUL_GROUP, name, move |mut b| {
            let x = b.input(ne, x_values);
            // The gate's `a` = −exp(A_log) in the model; any sign here.
            let m = b.input(ne_m, Values::Uniform(16.0));
            // Straddle softplus's x > 20 threshold exactly.
            for (k, v) in [20.0f32, f32::from_bits(0x41A0_0001), f32::from_bits(0x419F_FFFF), -20.0].into_iter().enumerate() {
                b.mem.write_f32(&x, [k, 0, 0, 0], v).expect("a view of the case's own buffers");
            }
            let mut ops: Vec<Box<dyn crate::ops::Op>> = Vec::new();
            let y = match dst {
                Dst::New | Dst::NextToUnfused => b.output(ne),
                Dst::OverSrc => x,
                Dst::OverMul => m,
            };
            if dst == Dst::NextToUnfused {
                let (tmp, unfused) = (b.output(ne), b.output(ne));
                ops.push(Box::new(Unary { kind: UnaryKind::Softplus, src: x, dst: tmp }));
                ops.push(Box::new(Binary { kind: BinaryKind::Mul, a: tmp, b: m, dst: unfused }));
            }
            ops.push(Box::new(UnaryMul { kind: UnaryKind::Softplus, src: x, mul: m, dst: y }));
            Ok(b.finish(ops, tol, false))
        }));
    }
    out
}
