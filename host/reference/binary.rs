//! Broadcast ADD / MUL reference (spec §2.8): one `add`/`mul` (`.rn.ftz`) per element.

use crate::error::{Error, Result};
use crate::memory::HostMemory;
use crate::tensor::Tensor;

/// CPU reference of ADD / MUL (`f` = [`super::math::add`] or [`super::math::mul`]) in the
/// kernel's float-op order, on a validated op's views: `dst(i) = f(a(i), b(i mod ne_b))`.
pub fn binary(f: fn(f32, f32) -> f32, a: &Tensor, b: &Tensor, dst: &Tensor, mem: &mut HostMemory) -> Result<()> {
    let ne_b = b.ne();
    let idx: Vec<_> = dst.layout.indices().collect();
    // An empty operand broadcasts nothing (i mod 0): refused, not a division panic.
    if !idx.is_empty() && ne_b.contains(&0) {
        return Err(Error::Shape { op: "binary reference", arg: "b", expected: "a non-empty operand to broadcast".into(), got: ne_b });
    }
    for i in idx {
        let ib = [i[0] % ne_b[0], i[1] % ne_b[1], i[2] % ne_b[2], i[3] % ne_b[3]];
        let y = f(mem.read_f32(a, i)?, mem.read_f32(b, ib)?);
        mem.write_f32(dst, i, y)?;
    }
    Ok(())
}
