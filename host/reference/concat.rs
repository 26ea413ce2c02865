//! CONCAT (dim 0) reference (spec §2.2): dst(i0, i1, i2) = a(i0, i1, i2) for i0 < na, else
//! b(i0 − na, i1, i2), moved as bits.

use crate::error::Result;
use crate::memory::HostMemory;
use crate::tensor::Tensor;

/// The sizes a valid CONCAT (`ops::ConcatDim0`) runs with: `a` is [na, n1, n2], `b` [nb, n1, n2], `dst` [na + nb, n1, n2].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConcatShape {
    /// Columns of `a`.
    pub na: usize,
    /// Columns of `b`.
    pub nb: usize,
    /// Size of dimension 1 (all three).
    pub n1: usize,
    /// Size of dimension 2 (all three).
    pub n2: usize,
}

/// CPU reference of CONCAT along dimension 0 on a validated op's views.
pub fn concat_dim0(a: &Tensor, b: &Tensor, dst: &Tensor, shape: &ConcatShape, mem: &mut HostMemory) -> Result<()> {
    let ConcatShape { na, nb, n1, n2 } = *shape;
    for i2 in 0..n2 {
        for i1 in 0..n1 {
            for i0 in 0..na + nb {
                let v = if i0 < na { mem.read_u32(a, [i0, i1, i2, 0])? } else { mem.read_u32(b, [i0 - na, i1, i2, 0])? };
                mem.write_u32(dst, [i0, i1, i2, 0], v)?;
            }
        }
    }
    Ok(())
}
