//! MUL_MAT_VEC reference (spec §2.9), in the kernel's order: for each row r and column j, thread
//! tid of a `block_size`-thread block accumulates pairs p = tid, tid + block_size, … < E/2 from +0
//! (f32: `fma(x0, y0)`, `fma(x1, y1)`; half2: one f16 fma per lane on the input rounded to f16,
//! then `low + high`); the partials are reduced by the warp butterfly and, for blocks of more
//! than one warp, by a second butterfly over the 32-float buffer (warp sums, then +0s).
//!
//! f16 arithmetic is IEEE binary16 with subnormals (no ftz): [`f32_to_f16_rn`] mirrors
//! `cvt.rn.f16.f32`, [`fma_f16`] one lane of `fma.rn.f16x2`.

use super::math::{add, fma, warp_sum};
use crate::error::Result;
use crate::kernels::abi::mul_mat_vec_kind;
use crate::memory::HostMemory;
use crate::tensor::{DType, Tensor};

/// The sizes and launch choices of a valid MUL_MAT_VEC (`ops::MulMatVec`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatVecShape {
    /// E, the row length (even).
    pub row_len: usize,
    /// Weight rows = dst rows (H_v for the projections); one block each.
    pub rows: usize,
    /// Input (and dst) columns, 1 ≤ ncols ≤ 8 (≤ 16 for MUL_MAT_VEC_PAIR's products).
    pub ncols: usize,
    /// [`mul_mat_vec_kind`] of the weight type and precision.
    pub kind: u32,
    /// ggml's block size for E ([`crate::kernels::abi::mul_mat_vec_block_size`]).
    pub block_size: u32,
}

/// f16 bits → f32 (exact; `cvt.f32.f16`).
pub fn f16_to_f32(h: u16) -> f32 {
    half::f16::from_bits(h).to_f32()
}

/// f64 → f16 bits, rounded once to nearest even: subnormals kept, ±Inf at and above 65520
/// (the tie above the largest finite 65504), NaN → quiet NaN of the same sign.
pub fn f64_to_f16_rn(x: f64) -> u16 {
    let sign = if x.is_sign_negative() { 0x8000 } else { 0 };
    let a = x.abs();
    if a.is_nan() {
        return sign | 0x7E00;
    }
    if a >= 65520.0 {
        return sign | 0x7C00;
    }
    // Scaling by a power of two is exact in f64, so each branch rounds exactly once.
    if a < 2f64.powi(-14) {
        // Subnormal range: multiples of 2^-24. A result of 1024 is the smallest normal, whose
        // encoding is that same integer.
        return sign | (a * 2f64.powi(24)).round_ties_even() as u16;
    }
    let e = ((a.to_bits() >> 52) as i32) - 1023; // a is a normal f64 in [2^-14, 65520)
    let m = (a * 2f64.powi(10 - e)).round_ties_even() as u32; // 1024 ..= 2048
    // m = 2048 carries into the exponent field, as it should.
    sign | ((((e + 15) as u32) << 10) + (m - 1024)) as u16
}

/// f32 → f16 bits, `cvt.rn.f16.f32` (round to nearest even, no ftz).
pub fn f32_to_f16_rn(x: f32) -> u16 {
    f64_to_f16_rn(x as f64)
}

/// One lane of `fma.rn.f16x2`: `a·b + c` on f16 bits with a single rounding, no ftz.
///
/// The product of two f16 (11-bit significands) is exact in f64. The sum `p + c` is exact in f64
/// unless the operands are more than 53 bits apart; it is then made *round-to-odd* (an inexact
/// sum whose last bit is even is moved one f64 step toward the lost remainder), and rounding a
/// round-to-odd value with ≥ 2 extra bits to f16 equals rounding the exact value once. (For f16
/// operands an inexact sum is in fact never near an f16 rounding boundary, but the correction
/// costs nothing and does not depend on that argument.)
pub fn fma_f16(a: u16, b: u16, c: u16) -> u16 {
    let (a, b, c) = (f16_to_f32(a) as f64, f16_to_f32(b) as f64, f16_to_f32(c) as f64);
    let p = a * b;
    let s = p + c;
    if !s.is_finite() {
        return f64_to_f16_rn(s);
    }
    // Two-sum: p + c = s + err exactly.
    let b_virtual = s - p;
    let err = (p - (s - b_virtual)) + (c - b_virtual);
    let s = if err != 0.0 && s.to_bits() & 1 == 0 {
        // s ≠ 0 here (a zero sum is exact); step its magnitude up or down toward err.
        let away = (err > 0.0) == (s > 0.0);
        f64::from_bits(if away { s.to_bits() + 1 } else { s.to_bits() - 1 })
    } else {
        s
    };
    f64_to_f16_rn(s)
}

/// Weight element bits (f32 bits, or f16/bf16 bits in the low half).
fn weight_bits(mem: &HostMemory, weight: &Tensor, e: usize, r: usize) -> Result<u32> {
    match weight.dtype() {
        DType::F32 => mem.read_u32(weight, [e, r, 0, 0]),
        _ => mem.read_u16(weight, [e, r, 0, 0]).map(u32::from),
    }
}

/// Thread `tid`'s partial dot product of weight row `w` (element bits) with column `y`.
fn thread_partial(kind: u32, w: &[u32], y: &[f32], tid: usize, threads: usize) -> f32 {
    let pairs = (tid..w.len() / 2).step_by(threads);
    if kind == mul_mat_vec_kind::F16_HALF {
        // half2 accumulator (+0, +0): the low lane sums even elements, the high lane odd ones.
        let (mut lo, mut hi) = (0u16, 0u16);
        for p in pairs {
            lo = fma_f16(w[2 * p] as u16, f32_to_f16_rn(y[2 * p]), lo);
            hi = fma_f16(w[2 * p + 1] as u16, f32_to_f16_rn(y[2 * p + 1]), hi);
        }
        return add(f16_to_f32(lo), f16_to_f32(hi));
    }
    let to_f32 = |bits: u32| match kind {
        mul_mat_vec_kind::F32 => f32::from_bits(bits),
        mul_mat_vec_kind::BF16 => f32::from_bits(bits << 16),
        _ => f16_to_f32(bits as u16),
    };
    let mut acc = 0.0f32;
    for p in pairs {
        acc = fma(to_f32(w[2 * p]), y[2 * p], acc);
        acc = fma(to_f32(w[2 * p + 1]), y[2 * p + 1], acc);
    }
    acc
}

/// ggml's mmvf reduction of one column's per-thread partials (`partials.len()` = block size, a
/// multiple of 32): the warp butterfly; with more than one warp, a second butterfly over the
/// 32-float buffer holding the warp sums followed by the +0s of its zeroing.
pub fn block_reduce(partials: &[f32]) -> f32 {
    let warp = |w: usize| warp_sum(partials[32 * w..32 * w + 32].try_into().expect("32 lanes per warp"));
    if partials.len() == 32 {
        return warp(0);
    }
    let mut buf = [0.0f32; 32];
    for (w, slot) in buf.iter_mut().enumerate().take(partials.len() / 32) {
        *slot = warp(w);
    }
    warp_sum(&buf)
}

/// CPU reference of MUL_MAT_VEC in the kernel's float-op order, on a validated op's views.
pub fn mul_mat_vec(weight: &Tensor, input: &Tensor, dst: &Tensor, shape: &MatVecShape, mem: &mut HostMemory) -> Result<()> {
    let MatVecShape { row_len, rows, ncols, kind, block_size } = *shape;
    let threads = block_size as usize;
    let columns: Vec<Vec<f32>> =
        (0..ncols).map(|j| (0..row_len).map(|e| mem.read_f32(input, [e, j, 0, 0])).collect()).collect::<Result<_>>()?;
    for r in 0..rows {
        let w: Vec<u32> = (0..row_len).map(|e| weight_bits(mem, weight, e, r)).collect::<Result<_>>()?;
        for (j, y) in columns.iter().enumerate() {
            let partials: Vec<f32> = (0..threads).map(|tid| thread_partial(kind, &w, y, tid, threads)).collect();
            mem.write_f32(dst, [r, j, 0, 0], block_reduce(&partials))?;
        }
    }
    Ok(())
}

/// The views MUL_MAT_VEC_PAIR_GATE's epilogue reads and writes (a validated op's).
#[derive(Clone, Copy, Debug)]
pub struct GateViews {
    /// The first product (alpha), `[H_v, ncols]`.
    pub alpha: Tensor,
    /// The second product (beta before its sigmoid), `[H_v, ncols]`.
    pub beta_raw: Tensor,
    /// `[H_v]`, added to alpha.
    pub dt_bias: Tensor,
    /// `[H_v]`, the softplus's factor.
    pub ssm_a: Tensor,
    /// SIGMOID(beta_raw).
    pub beta: Tensor,
    /// SOFTPLUS(alpha + dt_bias) · ssm_a.
    pub gate: Tensor,
}

/// [pair-gate] MUL_MAT_VEC_PAIR_GATE's epilogue on the products the pair reference wrote: per
/// element (r, j), in graph order, SIGMOID(beta_raw) → beta, ADD(alpha, dt_bias\[r\]) →
/// SOFTPLUS → MUL(·, ssm_a\[r\]) → gate — the very element functions the unfused references
/// ([`super::unary::unary`], [`super::binary::binary`], [`super::unary::unary_mul`]) apply, with
/// their operand order and broadcast indexing.
pub fn pair_gate_epilogue(views: &GateViews, shape: &MatVecShape, mem: &mut HostMemory, mufu: &mut dyn super::math::Mufu) -> Result<()> {
    use super::math::{mul, sigmoid, softplus};
    let GateViews { alpha, beta_raw, dt_bias, ssm_a, beta, gate } = views;
    for j in 0..shape.ncols {
        for r in 0..shape.rows {
            let i = [r, j, 0, 0];
            let y = sigmoid(mem.read_f32(beta_raw, i)?, mufu);
            mem.write_f32(beta, i, y)?;
        }
    }
    for j in 0..shape.ncols {
        for r in 0..shape.rows {
            let (i, ib) = ([r, j, 0, 0], [r, 0, 0, 0]);
            let biased = add(mem.read_f32(alpha, i)?, mem.read_f32(dt_bias, ib)?);
            let softplus = softplus(biased, mufu);
            mem.write_f32(gate, i, mul(softplus, mem.read_f32(ssm_a, ib)?))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const F16_ONE: u16 = 0x3C00;
    const F16_INF: u16 = 0x7C00;
    const F16_MAX: u16 = 0x7BFF; // 65504

    fn is_f16_nan(h: u16) -> bool {
        h & 0x7C00 == 0x7C00 && h & 0x03FF != 0
    }

    #[test]
    fn fma_f16_rounds_once() {
        assert_eq!(fma_f16(F16_ONE, F16_ONE, F16_ONE), 0x4000); // 1·1 + 1 = 2
        // (1 + 2^-10)² − (1 + 2^-9) = 2^-20 exactly (an f16 subnormal, kept). Rounding the
        // product first (to 1 + 2^-9) would give 0.
        assert_eq!(fma_f16(0x3C01, 0x3C01, 0xBC02), 0x0010);
    }

    #[test]
    fn fma_f16_does_not_double_round_through_f32() {
        // a·b = 129·2^-10 · 127·2^-15 = (2^14 − 1)·2^-25 = 2^-11 − 2^-25, c = 1 + 2^-10:
        // the exact sum lies 2^-25 below the tie 1 + 3·2^-11, so it rounds down to c. Rounded to
        // f32 first it would land on the tie, which rounds to the even 1 + 2^-9.
        let (a, b, c) = (0x3008, 0x1BF0, 0x3C01);
        assert_eq!((f16_to_f32(a), f16_to_f32(b)), (129.0 / 1024.0, 127.0 / 32768.0));
        assert_eq!(fma_f16(a, b, c), 0x3C01);
        let exact = f16_to_f32(a) as f64 * f16_to_f32(b) as f64 + f16_to_f32(c) as f64;
        assert_eq!(half::f16::from_f32(exact as f32).to_bits(), 0x3C02);
    }

    #[test]
    fn fma_f16_keeps_subnormals_and_rounds_ties_to_even() {
        let tiny = 0x0001; // 2^-24, the smallest subnormal
        assert_eq!(fma_f16(tiny, 0x3800, 0), 0x0000); // 2^-25: tie between 0 and 2^-24 → 0
        assert_eq!(fma_f16(tiny, 0x3E00, 0), 0x0002); // 1.5·2^-24: tie → 2·2^-24
        assert_eq!(fma_f16(tiny, 0xB800, 0), 0x8000); // −2^-25 → −0 (sign of the exact result)
        assert_eq!(fma_f16(0x0400, 0x3800, 0), 0x0200); // 2^-14 · 0.5 = 2^-15, subnormal
        // 1023·2^-24 · (1 + 2^-10) rounds up to 1024·2^-24, the smallest normal.
        assert_eq!(fma_f16(0x03FF, 0x3C01, 0), 0x0400);
        // 2048 + 1: f16 spacing is 2 there, the tie goes to the even 2048.
        assert_eq!(fma_f16(F16_ONE, F16_ONE, 0x6800), 0x6800);
        assert_eq!(fma_f16(F16_ONE, 0x4200, 0x6800), 0x6802); // 2048 + 3 → 2052 (even)
    }

    #[test]
    fn fma_f16_overflows_to_infinity_and_makes_nans() {
        assert_eq!(fma_f16(F16_MAX, 0x4000, 0), F16_INF); // 65504 · 2
        assert_eq!(fma_f16(F16_MAX, F16_ONE, 0x4C00), F16_INF); // 65504 + 16 = 65520: tie → Inf
        assert_eq!(fma_f16(F16_MAX, F16_ONE, 0x4B80), F16_MAX); // 65504 + 15 → 65504
        assert_eq!(fma_f16(F16_MAX | 0x8000, 0x4000, 0), F16_INF | 0x8000);
        assert!(is_f16_nan(fma_f16(F16_INF, 0, 0))); // Inf · 0
        assert!(is_f16_nan(fma_f16(F16_INF, F16_ONE, F16_INF | 0x8000))); // Inf − Inf
        assert!(is_f16_nan(fma_f16(0x7E00, F16_ONE, F16_ONE)));
        assert_eq!(fma_f16(F16_INF, F16_ONE, F16_ONE), F16_INF);
    }

    #[test]
    fn fma_f16_with_operands_far_apart() {
        // 1024 + 2^-48 and 2^-24 + 2^-48 are not exact in f64 (≥ 58 bits apart); the tiny
        // product is far below half an f16 step, so c comes back.
        assert_eq!(fma_f16(0x0001, 0x0001, 0x6400), 0x6400);
        assert_eq!(fma_f16(0x0001, 0x0001, 0x0001), 0x0001);
        assert_eq!(fma_f16(0x8001, 0x0001, 0x6400), 0x6400);
        // 2^15 · 2^15 overflows whatever is added.
        assert_eq!(fma_f16(0x7800, 0x7800, 0x0001), F16_INF);
        // Signed zeros: −0 + −0 = −0, −0 + +0 = +0.
        assert_eq!(fma_f16(0x8000, F16_ONE, 0x8000), 0x8000);
        assert_eq!(fma_f16(0x8000, F16_ONE, 0x0000), 0x0000);
    }

    /// An independent `fma_f16` for finite operands: every f16 is an integer multiple of 2^-24,
    /// so a·b + c is an exact integer multiple of 2^-48 (|·| < 2^81, fits i128), rounded to f16
    /// with integer round-half-even.
    fn fma_f16_exact(a: u16, b: u16, c: u16) -> u16 {
        // (sign, m, e) with |value| = m·2^e.
        let decode = |h: u16| {
            let (exp, mant) = ((h >> 10 & 0x1F) as i32, (h & 0x3FF) as i128);
            let (m, e) = if exp == 0 { (mant, -24) } else { (mant + 1024, exp - 25) };
            (h & 0x8000 != 0, m, e)
        };
        let ((sa, ma, ea), (sb, mb, eb), (sc, mc, ec)) = (decode(a), decode(b), decode(c));
        let signed = |neg: bool, v: i128| if neg { -v } else { v };
        let p = signed(sa != sb, (ma * mb) << (ea + eb + 48));
        let s = p + signed(sc, mc << (ec + 48));
        if s == 0 {
            // An exact zero is −0 only for (−0) + (−0).
            let product_neg = sa != sb;
            return if p == 0 && mc == 0 && product_neg && sc { 0x8000 } else { 0 };
        }
        let sign = if s < 0 { 0x8000 } else { 0 };
        let v = s.unsigned_abs();
        // The f16 step at |s|: 2^-24 below 2^-14, else 2^(exponent − 10); in units of 2^-48.
        let exponent = 127 - v.leading_zeros() as i32 - 48;
        let shift = (exponent.max(-14) - 10 + 48) as u32;
        let (q, rem, half) = (v >> shift, v & ((1u128 << shift) - 1), 1u128 << (shift - 1));
        let m = if rem > half || (rem == half && q & 1 == 1) { q + 1 } else { q };
        let bits = if exponent < -14 { m } else { (((exponent + 15) as u128) << 10) + (m - 1024) };
        sign | bits.min(0x7C00) as u16
    }

    #[test]
    fn fma_f16_agrees_with_exact_integer_arithmetic() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x00f1_6f3a);
        // Finite operands; mantissas with few bits set make exact sums land on ties often.
        let draw = |rng: &mut rand::rngs::StdRng| loop {
            let h: u16 = rng.random();
            let h = if rng.random::<bool>() { h & 0xFFC3 } else { h };
            if h & 0x7C00 != 0x7C00 {
                break h;
            }
        };
        for _ in 0..300_000 {
            let (a, b, c) = (draw(&mut rng), draw(&mut rng), draw(&mut rng));
            // Half of the time, move c to about the product's exponent, where ties, carries and
            // cancellation happen.
            let product_exp = (a >> 10 & 0x1F) as i32 + (b >> 10 & 0x1F) as i32 - 15;
            let c = if rng.random::<bool>() { (c & 0x83FF) | ((product_exp.clamp(0, 30) as u16) << 10) } else { c };
            assert_eq!(fma_f16(a, b, c), fma_f16_exact(a, b, c), "fma({a:#06x}, {b:#06x}, {c:#06x})");
        }
        // The hand-picked cases above, through the independent implementation too.
        for (a, b, c) in
            [(0x3008, 0x1BF0, 0x3C01), (0x0001, 0x3800, 0), (0x0001, 0x3E00, 0), (0x03FF, 0x3C01, 0), (F16_MAX, F16_ONE, 0x4C00)]
        {
            assert_eq!(fma_f16(a, b, c), fma_f16_exact(a, b, c));
        }
    }

    #[test]
    fn f32_to_f16_agrees_with_the_half_crate() {
        // half's f32 → f16 is round-to-nearest-even too (F16C or software); compare on a spread
        // of bit patterns covering every exponent, both signs and all mantissa bits.
        let mut bits = 0u32;
        loop {
            let x = f32::from_bits(bits);
            let (ours, theirs) = (f32_to_f16_rn(x), half::f16::from_f32(x).to_bits());
            if x.is_nan() {
                assert!(is_f16_nan(ours) && is_f16_nan(theirs), "{bits:#010x}");
            } else {
                assert_eq!(ours, theirs, "f32 {x:e} ({bits:#010x})");
            }
            match bits.checked_add(4093) {
                Some(b) => bits = b,
                None => break,
            }
        }
        // Exact boundaries: 65519.996 rounds down, 65520 is the tie that overflows.
        assert_eq!(f32_to_f16_rn(65519.996), F16_MAX);
        assert_eq!(f32_to_f16_rn(65520.0), F16_INF);
        assert_eq!(f32_to_f16_rn(-70000.0), F16_INF | 0x8000);
        assert_eq!(f32_to_f16_rn(2f32.powi(-25)), 0); // tie → even 0
        assert_eq!(f32_to_f16_rn(f32::from_bits(1)), 0);
        assert_eq!(f32_to_f16_rn(-f32::from_bits(1)), 0x8000);
    }
}
