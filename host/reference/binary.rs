//! Broadcast ADD / MUL reference (spec §2.8): one `add`/`mul` (`.rn.ftz`) per element.

use super::math::{add, mul};
use crate::memory::HostMemory;
use crate::ops::binary::{Binary, BinaryKind};

/// CPU reference of [`Binary`] in the kernel's float-op order (`op` validated, shape `ne`).
pub fn binary(op: &Binary, ne: [usize; 4], mem: &mut HostMemory) {
    let ne_b = op.b.ne();
    let idx: Vec<_> = op.dst.layout.indices().collect();
    debug_assert_eq!(op.dst.ne(), ne);
    for i in idx {
        let ib = [i[0] % ne_b[0], i[1] % ne_b[1], i[2] % ne_b[2], i[3] % ne_b[3]];
        let (a, b) = (mem.read_f32(&op.a, i), mem.read_f32(&op.b, ib));
        let y = match op.kind {
            BinaryKind::Add => add(a, b),
            BinaryKind::Mul => mul(a, b),
        };
        mem.write_f32(&op.dst, i, y);
    }
}

#[cfg(test)]
mod tests {
    use crate::memory::HostMemory;
    use crate::ops::{Binary, BinaryKind, Op};
    use crate::reference::math::ExactMufu;
    use crate::tensor::DType;

    fn run(kind: BinaryKind, a: &[f32], ne: [usize; 4], b: &[f32], ne_b: [usize; 4]) -> Vec<f32> {
        let mut mem = HostMemory::new();
        let (ta, tb, dst) = (mem.alloc_tensor(DType::F32, ne), mem.alloc_tensor(DType::F32, ne_b), mem.alloc_tensor(DType::F32, ne));
        mem.fill_f32(&ta, a);
        mem.fill_f32(&tb, b);
        Binary { kind, a: ta, b: tb, dst }.reference(&mut mem, &mut ExactMufu).unwrap();
        mem.to_f32_vec(&dst)
    }

    #[test]
    fn b_repeats_over_a_by_modulo() {
        // a [2, 3], b [2, 1]: row h of every token gets bias[h].
        let y = run(BinaryKind::Add, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3, 1, 1], &[10.0, 20.0], [2, 1, 1, 1]);
        assert_eq!(y, vec![11.0, 22.0, 13.0, 24.0, 15.0, 26.0]);
        let y = run(BinaryKind::Mul, &[1.0, 2.0, 3.0, 4.0], [2, 2, 1, 1], &[-1.0, 0.5], [2, 1, 1, 1]);
        assert_eq!(y, vec![-1.0, 1.0, -3.0, 2.0]);
    }

    #[test]
    fn results_flush_to_zero() {
        let tiny = f32::from_bits(0x0080_0000); // smallest normal
        let y = run(BinaryKind::Mul, &[tiny], [1, 1, 1, 1], &[0.5], [1, 1, 1, 1]);
        assert_eq!(y[0].to_bits(), 0);
        let y = run(BinaryKind::Add, &[tiny], [1, 1, 1, 1], &[-f32::from_bits(0x0080_0001)], [1, 1, 1, 1]);
        assert_eq!(y[0].to_bits(), 0x8000_0000);
    }

    #[test]
    fn refuses_shapes_that_do_not_broadcast() {
        let mut mem = HostMemory::new();
        let (a, b, dst) = (
            mem.alloc_tensor(DType::F32, [4, 2, 1, 1]),
            mem.alloc_tensor(DType::F32, [3, 1, 1, 1]),
            mem.alloc_tensor(DType::F32, [4, 2, 1, 1]),
        );
        let op = Binary { kind: BinaryKind::Add, a, b, dst };
        assert!(matches!(op.validate(&mem), Err(crate::Error::Shape { arg: "b", .. })));
        // dst shifted by one element over a: partial overlap.
        let big = mem.alloc_tensor(DType::F32, [9, 1, 1, 1]);
        let (a, dst) = (big.view([8, 1, 1, 1], big.layout.nb, 0), big.view([8, 1, 1, 1], big.layout.nb, 4));
        let b = mem.alloc_tensor(DType::F32, [8, 1, 1, 1]);
        let op = Binary { kind: BinaryKind::Mul, a, b, dst };
        assert!(matches!(op.validate(&mem), Err(crate::Error::Aliasing { a: "dst", b: "a", .. })));
    }
}
