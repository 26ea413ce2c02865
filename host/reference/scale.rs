//! SCALE reference (spec §2.4): `dst = fma(scale, src, bias)`, one `.ftz` rounding per element.

use super::math::fma;
use crate::error::Result;
use crate::memory::HostMemory;
use crate::tensor::Tensor;

/// CPU reference of SCALE in the kernel's float-op order, on a validated op's views.
pub fn scale(src: &Tensor, dst: &Tensor, scale: f32, bias: f32, mem: &mut HostMemory) -> Result<()> {
    // In place is fine: element i is read before it is written, as in the kernel.
    for i in src.layout.indices() {
        let x = mem.read_f32(src, i)?;
        mem.write_f32(dst, i, fma(scale, x, bias))?;
    }
    Ok(())
}
