//! Unary reference (spec §2.7): one element at a time through the fast-math mirrors.

use super::math::{Mufu, mul};
use crate::error::{Error, Result};
use crate::memory::HostMemory;
use crate::tensor::Tensor;

/// One element of a unary function as the kernel computes it: [`super::math::sigmoid`],
/// [`super::math::softplus`], [`super::math::silu`] or [`super::math::exp`].
pub type UnaryFn = fn(f32, &mut dyn Mufu) -> f32;

/// CPU reference of UNARY (`f` per element) on a validated op's views.
pub fn unary(f: UnaryFn, src: &Tensor, dst: &Tensor, mem: &mut HostMemory, mufu: &mut dyn Mufu) -> Result<()> {
    let idx: Vec<_> = src.layout.indices().collect();
    for i in idx {
        let y = f(mem.read_f32(src, i)?, mufu);
        mem.write_f32(dst, i, y)?;
    }
    Ok(())
}

/// \[speed\] Fused UNARY→MUL: per element `f(src)` then `mul` (`.rn.ftz`) with the
/// second operand read as MUL reads it (index modulo its shape) — exactly the reference of the
/// unfused pair, element by element.
pub fn unary_mul(f: UnaryFn, src: &Tensor, mul_by: &Tensor, dst: &Tensor, mem: &mut HostMemory, mufu: &mut dyn Mufu) -> Result<()> {
    let ne_m = mul_by.ne();
    let idx: Vec<_> = src.layout.indices().collect();
    // An empty operand broadcasts nothing (i mod 0): refused, not a division panic.
    if !idx.is_empty() && ne_m.contains(&0) {
        return Err(Error::Shape {
            op: "unary_mul reference",
            arg: "mul_by",
            expected: "a non-empty operand to broadcast".into(),
            got: ne_m,
        });
    }
    for i in idx {
        let im = [i[0] % ne_m[0], i[1] % ne_m[1], i[2] % ne_m[2], i[3] % ne_m[3]];
        let y = mul(f(mem.read_f32(src, i)?, mufu), mem.read_f32(mul_by, im)?);
        mem.write_f32(dst, i, y)?;
    }
    Ok(())
}
