//! GET_ROWS reference (spec §2.1): `dst row i = src row rows[i]`, moved as bits.

use crate::memory::HostMemory;
use crate::ops::get_rows::{GetRows, RowsShape};

/// CPU reference of [`GetRows`] (`op` validated).
pub fn get_rows(op: &GetRows, shape: &RowsShape, mem: &mut HostMemory) {
    for i in 0..shape.n_rows {
        // `check` proved 0 ≤ index < n_src_rows.
        let r = mem.read_u32(&op.rows, [i, 0, 0, 0]) as i32 as usize;
        for i0 in 0..shape.row_len {
            let v = mem.read_u32(&op.src, [i0, r, 0, 0]);
            mem.write_u32(&op.dst, [i0, i, 0, 0], v);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::memory::HostMemory;
    use crate::ops::{GetRows, Op};
    use crate::reference::math::ExactMufu;
    use crate::tensor::DType;

    #[test]
    fn rows_are_gathered_in_index_order_with_repeats() {
        let mut mem = HostMemory::new();
        let src = mem.alloc_tensor(DType::F32, [2, 3, 1, 1]);
        mem.fill_f32(&src, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let rows = mem.alloc_indices(&[2, 0, 2]);
        let dst = mem.alloc_tensor(DType::F32, [2, 3, 1, 1]);
        GetRows { src, rows, dst }.reference(&mut mem, &mut ExactMufu).unwrap();
        assert_eq!(mem.to_f32_vec(&dst), vec![5.0, 6.0, 1.0, 2.0, 5.0, 6.0]);
    }

    #[test]
    fn every_bit_pattern_is_copied_unchanged() {
        let mut mem = HostMemory::new();
        // A NaN with a payload, a signalling NaN, −0, the smallest subnormal: all kept as is.
        let bits = [0x7FC0_1234u32, 0xFF80_0001, 0x8000_0000, 0x0000_0001];
        let src = mem.alloc_tensor(DType::F32, [4, 1, 1, 1]);
        for (i, b) in bits.iter().enumerate() {
            mem.write_u32(&src, [i, 0, 0, 0], *b);
        }
        let rows = mem.alloc_indices(&[0]);
        let dst = mem.alloc_tensor(DType::F32, [4, 1, 1, 1]);
        GetRows { src, rows, dst }.reference(&mut mem, &mut ExactMufu).unwrap();
        let got: Vec<u32> = (0..4).map(|i| mem.read_u32(&dst, [i, 0, 0, 0])).collect();
        assert_eq!(got, bits);
    }

    #[test]
    fn strided_rows_and_a_strided_index_view_are_followed() {
        let mut mem = HostMemory::new();
        // Rows of 2 inside rows of 3 (padding holds 9s); indices every other entry of [1, 7, 0, 7].
        let buf = mem.alloc_tensor(DType::F32, [3, 2, 1, 1]);
        mem.fill_f32(&buf, &[1.0, 2.0, 9.0, 3.0, 4.0, 9.0]);
        let src = buf.view([2, 2, 1, 1], [4, 12, 24, 24], 0);
        let all = mem.alloc_indices(&[1, 7, 0, 7]);
        let rows = all.view([2, 1, 1, 1], [8, 16, 16, 16], 0);
        let dst = mem.alloc_tensor(DType::F32, [2, 2, 1, 1]);
        GetRows { src, rows, dst }.reference(&mut mem, &mut ExactMufu).unwrap();
        assert_eq!(mem.to_f32_vec(&dst), vec![3.0, 4.0, 1.0, 2.0]);
    }
}
