//! CONCAT (dim 0) reference (spec §2.2): dst(i0, i1, i2) = a(i0, i1, i2) for i0 < na, else
//! b(i0 − na, i1, i2), moved as bits.

use crate::memory::HostMemory;
use crate::ops::concat::{ConcatDim0, ConcatShape};

/// CPU reference of [`ConcatDim0`] (`op` validated).
pub fn concat_dim0(op: &ConcatDim0, shape: &ConcatShape, mem: &mut HostMemory) {
    let ConcatShape { na, nb, n1, n2 } = *shape;
    for i2 in 0..n2 {
        for i1 in 0..n1 {
            for i0 in 0..na + nb {
                let v = if i0 < na { mem.read_u32(&op.a, [i0, i1, i2, 0]) } else { mem.read_u32(&op.b, [i0 - na, i1, i2, 0]) };
                mem.write_u32(&op.dst, [i0, i1, i2, 0], v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::memory::HostMemory;
    use crate::ops::{ConcatDim0, Op};
    use crate::reference::math::ExactMufu;
    use crate::tensor::DType;

    #[test]
    fn conv_state_then_transposed_tokens_per_channel() {
        let mut mem = HostMemory::new();
        // conv state (d_conv − 1 = 2 columns) of C = 3 channels: channel c holds [10c, 10c + 1].
        let a = mem.alloc_tensor(DType::F32, [2, 3, 1, 1]);
        mem.fill_f32(&a, &[0.0, 1.0, 10.0, 11.0, 20.0, 21.0]);
        // Projection row-major [t][c] for n_t = 2: token t of channel c is 100 + 10t + c.
        let proj = mem.alloc_tensor(DType::F32, [3, 2, 1, 1]);
        mem.fill_f32(&proj, &[100.0, 101.0, 102.0, 110.0, 111.0, 112.0]);
        let dst = mem.alloc_tensor(DType::F32, [4, 3, 1, 1]);
        ConcatDim0 { a, b: proj.transpose(), dst }.reference(&mut mem, &mut ExactMufu).unwrap();
        #[rustfmt::skip]
        let want = vec![
            0.0, 1.0, 100.0, 110.0,
            10.0, 11.0, 101.0, 111.0,
            20.0, 21.0, 102.0, 112.0,
        ];
        assert_eq!(mem.to_f32_vec(&dst), want);
    }

    #[test]
    fn padded_views_and_nan_payloads() {
        let mut mem = HostMemory::new();
        // a: 1 column of 2 rows with stride 2 (padding 9); b: 1 column; dst rows padded to 3.
        let abuf = mem.alloc_tensor(DType::F32, [2, 2, 1, 1]);
        mem.fill_f32(&abuf, &[1.0, 9.0, 2.0, 9.0]);
        let a = abuf.view([1, 2, 1, 1], [4, 8, 16, 16], 0);
        let b = mem.alloc_tensor(DType::F32, [1, 2, 1, 1]);
        mem.write_u32(&b, [0, 0, 0, 0], 0x7FC0_0ABC);
        mem.write_u32(&b, [0, 1, 0, 0], 0x8000_0001);
        let dbuf = mem.alloc_tensor(DType::F32, [3, 2, 1, 1]);
        mem.fill_f32(&dbuf, &[7.0; 6]);
        let dst = dbuf.view([2, 2, 1, 1], [4, 12, 24, 24], 0);
        ConcatDim0 { a, b, dst }.reference(&mut mem, &mut ExactMufu).unwrap();
        let all: Vec<u32> = mem.to_f32_vec(&dbuf).iter().map(|v| v.to_bits()).collect();
        let want = [1.0f32.to_bits(), 0x7FC0_0ABC, 7.0f32.to_bits(), 2.0f32.to_bits(), 0x8000_0001, 7.0f32.to_bits()];
        assert_eq!(all, want);
    }
}
