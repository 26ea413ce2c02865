//! `.rn.ftz` arithmetic and the MUFU approximations as the CPU reference computes them.

use rgdn::reference::math::{MufuOp, exact_mufu};

/// Subnormals read and written as signed zero.
fn ftz(x: f32) -> f32 {
    if x.is_subnormal() { 0.0f32.copysign(x) } else { x }
}

pub fn add(a: f32, b: f32) -> f32 {
    ftz(ftz(a) + ftz(b))
}
pub fn mul(a: f32, b: f32) -> f32 {
    ftz(ftz(a) * ftz(b))
}
pub fn fma(a: f32, b: f32, c: f32) -> f32 {
    ftz(ftz(a).mul_add(ftz(b), ftz(c)))
}
/// `max.ftz.f32`: the non-NaN operand if exactly one is NaN.
pub fn max(a: f32, b: f32) -> f32 {
    let (a, b) = (ftz(a), ftz(b));
    if a.is_nan() {
        b
    } else if b.is_nan() {
        a
    } else if a == b {
        // max(−0, +0) = +0.
        if a.is_sign_negative() { b } else { a }
    } else if a > b {
        a
    } else {
        b
    }
}
pub fn gt(a: f32, b: f32) -> bool {
    ftz(a) > ftz(b)
}
pub fn ex2_approx(a: f32) -> f32 {
    exact_mufu(MufuOp::Ex2, a)
}
pub fn lg2_approx(a: f32) -> f32 {
    exact_mufu(MufuOp::Lg2, a)
}
pub fn rcp_approx(a: f32) -> f32 {
    exact_mufu(MufuOp::Rcp, a)
}
pub fn rsqrt_approx(a: f32) -> f32 {
    exact_mufu(MufuOp::Rsqrt, a)
}
/// `div.approx.ftz.f32`: MUFU.RCP of `b`, then FMUL.FTZ.
pub fn div_approx(a: f32, b: f32) -> f32 {
    mul(a, rcp_approx(b))
}
