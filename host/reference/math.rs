//! CPU mirrors of the device math (`kernels-gpu/src/device/math.rs`, `fast_math.rs`).
//!
//! Everything but the MUFU approximations is mirrored bit for bit: `.ftz` reads subnormal
//! inputs as signed zero and flushes subnormal results to signed zero; `fma` is Rust's
//! correctly rounded `mul_add`. The MUFU instructions (`ex2`, `lg2`, `rcp`, `rsqrt` `.approx`)
//! have hardware-defined bits, so they go through a [`Mufu`] provider:
//! - [`ExactMufu`] computes the exact function in f64 and rounds it — within a few ulp of the
//!   hardware (the bound [`MUFU_ULP_BOUND`] is what the GPU suite checks);
//! - [`RecordingMufu`] looks results up in a [`MufuTable`] filled by running the very same
//!   instructions on the GPU, and records the arguments it has not seen — so a reference run
//!   can be made bit-exact end to end (the GPU suite iterates until no argument is missing).

use std::collections::{BTreeSet, HashMap};

/// How far (in ulp) [`ExactMufu`] may be from the hardware's approximations on normal results.
pub const MUFU_ULP_BOUND: u32 = 2;

/// Flush-to-zero: a subnormal becomes a zero of the same sign.
#[inline]
pub fn ftz(x: f32) -> f32 {
    if x.is_subnormal() { f32::from_bits(x.to_bits() & 0x8000_0000) } else { x }
}

/// `add.rn.ftz.f32`.
#[inline]
pub fn add(a: f32, b: f32) -> f32 {
    ftz(ftz(a) + ftz(b))
}

/// `mul.rn.ftz.f32`.
#[inline]
pub fn mul(a: f32, b: f32) -> f32 {
    ftz(ftz(a) * ftz(b))
}

/// `fma.rn.ftz.f32`: one rounding of `a·b + c`.
#[inline]
pub fn fma(a: f32, b: f32, c: f32) -> f32 {
    ftz(ftz(a).mul_add(ftz(b), ftz(c)))
}

/// `max.ftz.f32`: the non-NaN operand when exactly one is NaN; +0 is above −0.
#[inline]
pub fn max(a: f32, b: f32) -> f32 {
    let (a, b) = (ftz(a), ftz(b));
    match (a.is_nan(), b.is_nan()) {
        (true, true) => f32::NAN,
        (true, false) => b,
        (false, true) => a,
        _ if a == b => f32::from_bits(a.to_bits() & b.to_bits()),
        _ => a.max(b),
    }
}

/// `setp.gt.ftz.f32`: false when either operand is NaN.
#[inline]
pub fn gt(a: f32, b: f32) -> bool {
    ftz(a) > ftz(b)
}

/// The MUFU instructions fast-math code runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MufuOp {
    /// `ex2.approx.ftz.f32`.
    Ex2,
    /// `lg2.approx.ftz.f32`.
    Lg2,
    /// `rcp.approx.ftz.f32`.
    Rcp,
    /// `rsqrt.approx.ftz.f32`.
    Rsqrt,
}

impl MufuOp {
    /// Every MUFU instruction.
    pub const ALL: [MufuOp; 4] = [MufuOp::Ex2, MufuOp::Lg2, MufuOp::Rcp, MufuOp::Rsqrt];

    /// The id the GPU's `test_mufu_eval_f32` kernel takes.
    pub fn kernel_id(self) -> u32 {
        use crate::kernels::abi::mufu_op;
        match self {
            MufuOp::Ex2 => mufu_op::EX2,
            MufuOp::Lg2 => mufu_op::LG2,
            MufuOp::Rcp => mufu_op::RCP,
            MufuOp::Rsqrt => mufu_op::RSQRT,
        }
    }
}

/// Source of MUFU results for the reference.
pub trait Mufu {
    /// The result of `op` on `x`.
    fn eval(&mut self, op: MufuOp, x: f32) -> f32;
}

/// The exact function, rounded once to f32, with `.ftz` on input and output.
pub fn exact_mufu(op: MufuOp, x: f32) -> f32 {
    let x = ftz(x);
    let xd = x as f64;
    let y = match op {
        MufuOp::Ex2 => xd.exp2(),
        MufuOp::Lg2 => {
            if x == 0.0 {
                f64::NEG_INFINITY
            } else {
                xd.log2()
            }
        }
        MufuOp::Rcp => 1.0 / xd,
        MufuOp::Rsqrt => {
            if x == 0.0 {
                // rsqrt(±0) = ±Inf
                if x.is_sign_negative() { f64::NEG_INFINITY } else { f64::INFINITY }
            } else {
                1.0 / xd.sqrt()
            }
        }
    };
    ftz(y as f32)
}

/// [`exact_mufu`] as a provider.
#[derive(Clone, Copy, Debug, Default)]
pub struct ExactMufu;

impl Mufu for ExactMufu {
    fn eval(&mut self, op: MufuOp, x: f32) -> f32 {
        exact_mufu(op, x)
    }
}

/// Hardware MUFU results by (instruction, input bits).
#[derive(Clone, Debug, Default)]
pub struct MufuTable {
    map: HashMap<(MufuOp, u32), u32>,
}

impl MufuTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `op` maps input bits `x` to output bits `y`.
    pub fn insert(&mut self, op: MufuOp, x: u32, y: u32) {
        self.map.insert((op, x), y);
    }

    /// The recorded result of `op` on `x`, if any.
    pub fn get(&self, op: MufuOp, x: f32) -> Option<f32> {
        self.map.get(&(op, x.to_bits())).map(|b| f32::from_bits(*b))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Every entry, for checking [`MUFU_ULP_BOUND`] against [`exact_mufu`].
    pub fn entries(&self) -> impl Iterator<Item = (MufuOp, f32, f32)> + '_ {
        self.map.iter().map(|((op, x), y)| (*op, f32::from_bits(*x), f32::from_bits(*y)))
    }
}

/// Answers from a [`MufuTable`]; for arguments not in it, answers [`exact_mufu`] and records
/// the argument in `missing`.
pub struct RecordingMufu<'a> {
    /// The hardware results.
    pub table: &'a MufuTable,
    /// Arguments the table lacked (answered exactly instead).
    pub missing: BTreeSet<(MufuOp, u32)>,
}

impl<'a> RecordingMufu<'a> {
    /// A recorder over `table`.
    pub fn new(table: &'a MufuTable) -> Self {
        RecordingMufu { table, missing: BTreeSet::new() }
    }
}

impl Mufu for RecordingMufu<'_> {
    fn eval(&mut self, op: MufuOp, x: f32) -> f32 {
        match self.table.get(op, x) {
            Some(y) => y,
            None => {
                self.missing.insert((op, x.to_bits()));
                exact_mufu(op, x)
            }
        }
    }
}

/// Distance in units in the last place between two finite floats of the same sign (large for
/// different signs; 0 when both are NaN or bitwise equal).
pub fn ulp_distance(a: f32, b: f32) -> u64 {
    if a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()) || a == b {
        return 0;
    }
    let key = |x: f32| {
        let b = x.to_bits() as i64;
        if b & 0x8000_0000 != 0 { -(b & 0x7FFF_FFFF) } else { b }
    };
    (key(a) - key(b)).unsigned_abs()
}

// ---- ggml's fast-math functions (mirrors of kernels-gpu/src/fast_math.rs) ----

/// log2(e) as ggml's fast-math code rounds it.
pub const LOG2_E: f32 = f32::from_bits(0x3FB8_AA3B);
/// −log2(e).
pub const NEG_LOG2_E: f32 = f32::from_bits(0xBFB8_AA3B);
/// ln(2).
pub const LN_2: f32 = f32::from_bits(0x3F31_7218);
/// Softplus returns `x` itself above this.
pub const SOFTPLUS_THRESHOLD: f32 = 20.0;

/// `expf`: `ex2(x · log2 e)`.
pub fn exp(x: f32, m: &mut dyn Mufu) -> f32 {
    m.eval(MufuOp::Ex2, mul(x, LOG2_E))
}

/// `x / (1 + expf(-x))`; `div.approx.ftz(x, d)` is `x · rcp.approx.ftz(d)` bit for bit.
pub fn silu(x: f32, m: &mut dyn Mufu) -> f32 {
    let e = m.eval(MufuOp::Ex2, mul(x, NEG_LOG2_E));
    let d = add(e, 1.0);
    mul(x, m.eval(MufuOp::Rcp, d))
}

/// `1 / (1 + expf(-x))`.
pub fn sigmoid(x: f32, m: &mut dyn Mufu) -> f32 {
    let e = m.eval(MufuOp::Ex2, mul(x, NEG_LOG2_E));
    m.eval(MufuOp::Rcp, add(e, 1.0))
}

/// `x > 20 ? x : logf(1 + expf(x))`.
pub fn softplus(x: f32, m: &mut dyn Mufu) -> f32 {
    if gt(x, SOFTPLUS_THRESHOLD) {
        x
    } else {
        let d = add(m.eval(MufuOp::Ex2, mul(x, LOG2_E)), 1.0);
        mul(m.eval(MufuOp::Lg2, d), LN_2)
    }
}

/// `rsqrtf(fmaxf(sum_sq, eps * eps))`.
pub fn l2_scale(sum_sq: f32, eps: f32, m: &mut dyn Mufu) -> f32 {
    m.eval(MufuOp::Rsqrt, max(sum_sq, mul(eps, eps)))
}

/// ggml's `warp_reduce_sum` over 32 lane values: butterfly with xor offsets 16, 8, 4, 2, 1,
/// own value first. All lanes end equal; this returns lane 0's.
pub fn warp_sum(lanes: &[f32; 32]) -> f32 {
    let mut v = *lanes;
    let mut offset = 16;
    while offset > 0 {
        let prev = v;
        for (i, x) in v.iter_mut().enumerate() {
            *x = add(prev[i], prev[i ^ offset]);
        }
        offset >>= 1;
    }
    v[0]
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUB: f32 = f32::from_bits(0x0000_0100); // a positive subnormal
    const NEG_SUB: f32 = f32::from_bits(0x8000_0100);

    #[test]
    fn ftz_flushes_subnormal_inputs_and_results_keeping_the_sign() {
        assert_eq!(ftz(SUB).to_bits(), 0);
        assert_eq!(ftz(NEG_SUB).to_bits(), 0x8000_0000);
        assert_eq!(add(SUB, 1.0), 1.0);
        // 2^-70 · 2^-70 = 2^-140 is subnormal: flushed to +0; a negative one to −0.
        let tiny = f32::from_bits(0x1C80_0000); // 2^-70
        assert_eq!(mul(tiny, tiny).to_bits(), 0);
        assert_eq!(mul(-tiny, tiny).to_bits(), 0x8000_0000);
        // Without ftz the same product is not zero.
        assert_ne!((tiny * tiny).to_bits(), 0);
    }

    #[test]
    fn fma_rounds_once() {
        // a·b = 1 − 2^-46 exactly (a = 1 + 2^-23, b = 1 − 2^-23): rounded first it is 1.0, and
        // 1.0 − 1.0 = 0; fused, the tiny remainder survives.
        let a = f32::from_bits(0x3F80_0001);
        let b = f32::from_bits(0x3F7F_FFFE);
        assert_eq!(add(mul(a, b), -1.0), 0.0);
        assert_eq!(fma(a, b, -1.0), -(2.0f32).powi(-46));
    }

    #[test]
    fn fma_from_plus_zero_turns_negative_zero_products_positive() {
        assert_eq!(fma(-0.0, 1.0, 0.0).to_bits(), 0);
        assert_eq!(add(-0.0, 0.0).to_bits(), 0);
        assert_eq!(add(-0.0, -0.0).to_bits(), 0x8000_0000);
    }

    #[test]
    fn max_prefers_numbers_over_nan() {
        assert_eq!(max(f32::NAN, 2.0), 2.0);
        assert_eq!(max(3.0, f32::NAN), 3.0);
        assert!(max(f32::NAN, f32::NAN).is_nan());
        assert_eq!(max(-0.0, 0.0).to_bits(), 0);
        assert_eq!(max(SUB, -1.0).to_bits(), 0);
    }

    #[test]
    fn gt_is_false_for_nan() {
        assert!(gt(21.0, 20.0));
        assert!(!gt(20.0, 20.0));
        assert!(!gt(f32::NAN, 20.0));
    }

    #[test]
    fn exact_mufu_special_values() {
        assert_eq!(exact_mufu(MufuOp::Ex2, f32::NEG_INFINITY).to_bits(), 0);
        assert_eq!(exact_mufu(MufuOp::Ex2, 3.0), 8.0);
        assert_eq!(exact_mufu(MufuOp::Ex2, SUB), 1.0);
        assert_eq!(exact_mufu(MufuOp::Ex2, -200.0).to_bits(), 0); // 2^-200 flushed
        assert_eq!(exact_mufu(MufuOp::Lg2, 0.0), f32::NEG_INFINITY);
        assert_eq!(exact_mufu(MufuOp::Lg2, SUB), f32::NEG_INFINITY);
        assert!(exact_mufu(MufuOp::Lg2, -1.0).is_nan());
        assert_eq!(exact_mufu(MufuOp::Rcp, -0.0), f32::NEG_INFINITY);
        assert_eq!(exact_mufu(MufuOp::Rcp, 4.0), 0.25);
        assert_eq!(exact_mufu(MufuOp::Rsqrt, 0.0), f32::INFINITY);
        assert_eq!(exact_mufu(MufuOp::Rsqrt, 16.0), 0.25);
        assert!(exact_mufu(MufuOp::Rsqrt, -4.0).is_nan());
    }

    #[test]
    fn fast_math_functions_at_known_points() {
        let m = &mut ExactMufu;
        assert_eq!(silu(0.0, m), 0.0);
        assert!((silu(1.0, m) - 0.731_058_6).abs() < 1e-6);
        assert_eq!(sigmoid(0.0, m), 0.5);
        assert_eq!(softplus(25.0, m), 25.0);
        assert!((softplus(0.0, m) - std::f32::consts::LN_2).abs() < 1e-6);
        assert!(softplus(f32::NAN, m).is_nan());
        assert_eq!(exp(0.0, m), 1.0);
        // eps² = 1e-12 floors the sum: rsqrt(1e-12) = 1e6 (within rounding).
        assert!((l2_scale(0.0, 1e-6, m) - 1e6).abs() < 1.0);
        assert_eq!(mul(1e-6, 1e-6).to_bits(), 0x2B8C_BCCC);
    }

    #[test]
    fn recording_mufu_answers_from_the_table_and_records_the_rest() {
        let mut table = MufuTable::new();
        table.insert(MufuOp::Ex2, 1.0f32.to_bits(), 0x4000_0001); // a deliberately "wrong" 2^1
        let mut r = RecordingMufu::new(&table);
        assert_eq!(r.eval(MufuOp::Ex2, 1.0).to_bits(), 0x4000_0001);
        assert_eq!(r.eval(MufuOp::Ex2, 2.0), 4.0);
        assert_eq!(r.missing.into_iter().collect::<Vec<_>>(), vec![(MufuOp::Ex2, 2.0f32.to_bits())]);
    }

    #[test]
    fn warp_sum_is_the_butterfly_tree() {
        let mut lanes = [0.0f32; 32];
        for (i, l) in lanes.iter_mut().enumerate() {
            *l = i as f32;
        }
        assert_eq!(warp_sum(&lanes), 496.0);
        // Order matters: 1e8 + 1 − 1e8 in the butterfly's pairing. Lane 0 pairs with 16 first.
        let mut lanes = [0.0f32; 32];
        lanes[0] = 1e8;
        lanes[16] = 1.0;
        lanes[1] = -1e8;
        // S16: lane0 = 1e8+1 = 1e8 (rounded), lane1 = -1e8; S1: 1e8 + -1e8 = 0.
        assert_eq!(warp_sum(&lanes), 0.0);
    }

    #[test]
    fn ulp_distance_counts_representable_steps() {
        assert_eq!(ulp_distance(1.0, f32::from_bits(0x3F80_0002)), 2);
        assert_eq!(ulp_distance(-0.0, 0.0), 0);
        assert_eq!(ulp_distance(f32::NAN, f32::NAN), 0);
        assert_eq!(ulp_distance(-f32::from_bits(1), f32::from_bits(1)), 2);
    }
}
