//! SCALE reference (spec §2.4): `dst = fma(scale, src, bias)`, one `.ftz` rounding per element.

use super::math::fma;
use crate::memory::HostMemory;
use crate::ops::scale::Scale;

/// CPU reference of [`Scale`] in the kernel's float-op order (`op` validated).
pub fn scale(op: &Scale, mem: &mut HostMemory) {
    // In place is fine: element i is read before it is written, as in the kernel.
    for i in op.src.layout.indices() {
        let x = mem.read_f32(&op.src, i);
        mem.write_f32(&op.dst, i, fma(op.scale, x, op.bias));
    }
}

#[cfg(test)]
mod tests {
    use crate::memory::HostMemory;
    use crate::ops::{Op, Scale};
    use crate::reference::math::ExactMufu;
    use crate::tensor::DType;

    fn run(xs: &[f32], scale: f32, bias: f32) -> Vec<u32> {
        let mut mem = HostMemory::new();
        let t = mem.alloc_tensor(DType::F32, [xs.len(), 1, 1, 1]);
        mem.fill_f32(&t, xs);
        Scale { src: t, dst: t, scale, bias }.reference(&mut mem, &mut ExactMufu).unwrap();
        mem.to_f32_vec(&t).iter().map(|v| v.to_bits()).collect()
    }

    #[test]
    fn zeroing_gives_plus_zero_for_finite_and_nan_for_inf_and_nan() {
        let sub = f32::from_bits(0x8000_0001);
        let y = run(&[-5.0, -0.0, sub, f32::MAX, f32::INFINITY, f32::NEG_INFINITY, f32::NAN], 0.0, 0.0);
        // 0·x is ±0 and −0 + (+0) = +0; 0·Inf is NaN.
        assert_eq!(&y[..4], &[0, 0, 0, 0]);
        assert!(y[4..].iter().all(|b| f32::from_bits(*b).is_nan()), "{y:x?}");
    }

    #[test]
    fn scale_and_bias_round_once() {
        assert_eq!(run(&[3.0, -1.5], 2.0, 1.0), vec![7.0f32.to_bits(), (-2.0f32).to_bits()]);
        // (1 + 2^-23)(1 − 2^-23) − 1 = −2^-46 with one rounding (a rounded product gives 0).
        let (a, b) = (f32::from_bits(0x3F80_0001), f32::from_bits(0x3F7F_FFFE));
        assert_eq!(run(&[b], a, -1.0), vec![(-(2.0f32).powi(-46)).to_bits()]);
    }

    #[test]
    fn subnormal_inputs_and_results_flush_to_zero() {
        // 1e-30 · 1e-10 = 1e-40 is subnormal: flushed to +0. A subnormal input reads as ±0.
        assert_eq!(run(&[1e-10], 1e-30, 0.0), vec![0]);
        assert_eq!(run(&[f32::from_bits(0x0000_0400)], 1e30, 1.0), vec![1.0f32.to_bits()]);
    }
}
