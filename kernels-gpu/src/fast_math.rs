//! ggml's math functions as its `-use_fast_math` build compiles them (spec §3), composed from
//! the [`device::math`](crate::device::math) primitives. Each sequence was proven bit-exact
//! against nvcc's fast-math compile of ggml's expression over all 2^32 inputs; the GPU suite
//! re-proves it on every run (`math_parity`).

use crate::device::math::{add, div_approx, ex2_approx, fma, gt, lg2_approx, max, mul, rcp_approx, rsqrt_approx};

/// log2(e) as f32, the constant fast-math multiplies by before `ex2` (`expf`).
pub const LOG2_E: f32 = f32::from_bits(0x3FB8_AA3B);
/// −log2(e): `expf(-x)` is compiled as `ex2(x · −log2 e)` (bitwise equal to negating first).
pub const NEG_LOG2_E: f32 = f32::from_bits(0xBFB8_AA3B);
/// ln(2) as f32, the constant fast-math multiplies `lg2` by (`logf`).
pub const LN_2: f32 = f32::from_bits(0x3F31_7218);
/// Softplus returns its input unchanged above this threshold (ggml's `x > 20.0f`).
pub const SOFTPLUS_THRESHOLD: f32 = 20.0;

/// `expf(x)`: `ex2.approx.ftz(x · log2 e)`, no range reduction.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    ex2_approx(mul(x, LOG2_E))
}

/// `x / (1 + expf(-x))`: `e = ex2(x · −log2 e)`, `d = e + 1`, `div.approx(x, d)`.
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    let e = ex2_approx(mul(x, NEG_LOG2_E));
    div_approx(x, add(e, 1.0))
}

/// `1 / (1 + expf(-x))`: `rcp.approx(ex2(x · −log2 e) + 1)`.
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    let e = ex2_approx(mul(x, NEG_LOG2_E));
    rcp_approx(add(e, 1.0))
}

/// `x > 20 ? x : logf(1 + expf(x))` (not `log1pf`): `lg2(ex2(x · log2 e) + 1) · ln 2`.
#[inline(always)]
pub fn softplus(x: f32) -> f32 {
    if gt(x, SOFTPLUS_THRESHOLD) {
        x
    } else {
        let d = add(ex2_approx(mul(x, LOG2_E)), 1.0);
        mul(lg2_approx(d), LN_2)
    }
}

/// The L2 norm's scale `rsqrtf(fmaxf(sum_sq, eps * eps))`.
#[inline(always)]
pub fn l2_scale(sum_sq: f32, eps: f32) -> f32 {
    rsqrt_approx(max(sum_sq, mul(eps, eps)))
}

/// One step of a dot product as nvcc contracts `acc += a * b`.
#[inline(always)]
pub fn dot_step(acc: f32, a: f32, b: f32) -> f32 {
    fma(a, b, acc)
}
