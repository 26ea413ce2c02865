//! Unary reference (spec §2.7): one element at a time through the fast-math mirrors.

use super::math::{Mufu, exp, mul, sigmoid, silu, softplus};
use crate::memory::HostMemory;
use crate::ops::unary::{Unary, UnaryKind, UnaryMul};

/// One element of the unary op `kind`, as the kernel computes it.
pub fn apply(kind: UnaryKind, x: f32, mufu: &mut dyn Mufu) -> f32 {
    match kind {
        UnaryKind::Sigmoid => sigmoid(x, mufu),
        UnaryKind::Softplus => softplus(x, mufu),
        UnaryKind::Silu => silu(x, mufu),
        UnaryKind::Exp => exp(x, mufu),
    }
}

/// CPU reference of [`Unary`] (`op` validated).
pub fn unary(op: &Unary, mem: &mut HostMemory, mufu: &mut dyn Mufu) {
    let idx: Vec<_> = op.src.layout.indices().collect();
    for i in idx {
        let y = apply(op.kind, mem.read_f32(&op.src, i), mufu);
        mem.write_f32(&op.dst, i, y);
    }
}

/// \[speed\] Fused UNARY→MUL: per element `apply(kind, src)` then `mul` (`.rn.ftz`) with the
/// second operand read as MUL reads it (index modulo its shape) — exactly the reference of the
/// unfused pair, element by element.
pub fn unary_mul(op: &UnaryMul, mem: &mut HostMemory, mufu: &mut dyn Mufu) {
    let ne_m = op.mul.ne();
    let idx: Vec<_> = op.src.layout.indices().collect();
    for i in idx {
        let im = [i[0] % ne_m[0], i[1] % ne_m[1], i[2] % ne_m[2], i[3] % ne_m[3]];
        let y = mul(apply(op.kind, mem.read_f32(&op.src, i), mufu), mem.read_f32(&op.mul, im));
        mem.write_f32(&op.dst, i, y);
    }
}

#[cfg(test)]
mod tests {
    use crate::memory::HostMemory;
    use crate::ops::{Op, Unary, UnaryKind};
    use crate::reference::math::{ExactMufu, LOG2_E, MufuOp, MufuTable, RecordingMufu, mul};
    use crate::tensor::DType;

    fn run(kind: UnaryKind, x: &[f32]) -> Vec<f32> {
        let mut mem = HostMemory::new();
        let (src, dst) = (mem.alloc_tensor(DType::F32, [x.len(), 1, 1, 1]), mem.alloc_tensor(DType::F32, [x.len(), 1, 1, 1]));
        mem.fill_f32(&src, x);
        Unary { kind, src, dst }.reference(&mut mem, &mut ExactMufu).unwrap();
        mem.to_f32_vec(&dst)
    }

    #[test]
    fn functions_at_known_points() {
        assert_eq!(run(UnaryKind::Sigmoid, &[0.0, f32::INFINITY, f32::NEG_INFINITY]), vec![0.5, 1.0, 0.0]);
        assert_eq!(run(UnaryKind::Exp, &[0.0, f32::NEG_INFINITY]), vec![1.0, 0.0]);
        let y = run(UnaryKind::Silu, &[0.0, 10.0]);
        assert_eq!(y[0], 0.0);
        assert!((y[1] - 9.999_546).abs() < 1e-5);
    }

    #[test]
    fn softplus_passes_x_through_only_above_20() {
        let above = f32::from_bits(0x41A0_0001);
        let y = run(UnaryKind::Softplus, &[above, 20.0, f32::NAN]);
        assert_eq!(y[0], above);
        // At exactly 20 the log form runs: log(1 + e^20) ≈ 20 + 2e-9, which rounds to 20.
        assert!((y[1] - 20.0).abs() < 4e-6);
        assert!(y[2].is_nan());
    }

    #[test]
    fn exp_uses_the_hardware_ex2_of_the_rounded_product() {
        // The reference asks its MUFU provider for ex2(x · log2 e) (one rounded mul first).
        let x = 1.5f32;
        let mut table = MufuTable::new();
        table.insert(MufuOp::Ex2, mul(x, LOG2_E).to_bits(), 0x4080_0001);
        let mut mem = HostMemory::new();
        let (src, dst) = (mem.alloc_tensor(DType::F32, [1, 1, 1, 1]), mem.alloc_tensor(DType::F32, [1, 1, 1, 1]));
        mem.fill_f32(&src, &[x]);
        let mut rec = RecordingMufu::new(&table);
        Unary { kind: UnaryKind::Exp, src, dst }.reference(&mut mem, &mut rec).unwrap();
        assert!(rec.missing.is_empty());
        assert_eq!(mem.read_f32(&dst, [0, 0, 0, 0]).to_bits(), 0x4080_0001);
    }

    #[test]
    fn refuses_non_contiguous_views() {
        let mut mem = HostMemory::new();
        let t = mem.alloc_tensor(DType::F32, [4, 4, 1, 1]);
        let op = Unary { kind: UnaryKind::Exp, src: t.transpose(), dst: t.transpose() };
        assert!(matches!(op.validate(&mem), Err(crate::Error::Stride { arg: "src", .. })));
    }

    /// A deterministic stand-in for the hardware: the exact result with its last bit flipped
    /// for some arguments (so the comparison does not lean on exact math).
    struct SkewedMufu;
    impl crate::reference::math::Mufu for SkewedMufu {
        fn eval(&mut self, op: MufuOp, x: f32) -> f32 {
            let y = crate::reference::math::exact_mufu(op, x);
            if y.is_finite() && x.to_bits().count_ones().is_multiple_of(3) { f32::from_bits(y.to_bits() ^ 1) } else { y }
        }
    }

    /// [speed] The fused SOFTPLUS·MUL reference equals SOFTPLUS then MUL bit for bit, for both a
    /// deterministic skewed MUFU and exact math, over random values, the x > 20 threshold,
    /// subnormals, zeros, infinities and NaN, on both operands.
    #[test]
    fn softplus_mul_equals_softplus_then_mul_bitwise() {
        use crate::ops::{Binary, BinaryKind, UnaryMul};
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x5EED);
        let specials = [
            0.0f32,
            -0.0,
            20.0,
            f32::from_bits(0x41A0_0001),
            f32::from_bits(0x419F_FFFF),
            -20.0,
            -100.0,
            f32::from_bits(1),
            f32::from_bits(0x8000_0001),
            f32::MIN_POSITIVE,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1e30,
            -1e-30,
        ];
        let n = 4096;
        let mut xs: Vec<f32> = (0..n).map(|_| rng.random_range(-30.0f32..30.0)).collect();
        let mut ms: Vec<f32> = (0..n).map(|_| -rng.random_range(0.0f32..16.0)).collect();
        for (k, &v) in specials.iter().enumerate() {
            for j in 0..specials.len() {
                xs[k * specials.len() + j] = v;
                ms[k * specials.len() + j] = specials[j];
            }
        }
        let ne = [64, n / 64, 1, 1];
        // `mul` of the same shape (ggml's fusion) and as a leading block MUL broadcasts
        // ([64] over [64, 64]: the gate's `a` over n_t tokens).
        for ne_m in [ne, [64, 1, 1, 1]] {
            for mufu in [&mut SkewedMufu as &mut dyn crate::reference::math::Mufu, &mut ExactMufu] {
                let mut mem = HostMemory::new();
                let (x, m, tmp, unfused, fused) = (
                    mem.alloc_tensor(DType::F32, ne),
                    mem.alloc_tensor(DType::F32, ne_m),
                    mem.alloc_tensor(DType::F32, ne),
                    mem.alloc_tensor(DType::F32, ne),
                    mem.alloc_tensor(DType::F32, ne),
                );
                mem.fill_f32(&x, &xs);
                mem.fill_f32(&m, &ms[..ne_m.iter().product::<usize>()]);
                Unary { kind: UnaryKind::Softplus, src: x, dst: tmp }.reference(&mut mem, mufu).unwrap();
                Binary { kind: BinaryKind::Mul, a: tmp, b: m, dst: unfused }.reference(&mut mem, mufu).unwrap();
                UnaryMul { kind: UnaryKind::Softplus, src: x, mul: m, dst: fused }.reference(&mut mem, mufu).unwrap();
                assert_eq!(mem.bytes(unfused.buffer), mem.bytes(fused.buffer));
            }
        }
    }
}
