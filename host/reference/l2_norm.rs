//! L2_NORM reference (spec §2.6): lane l accumulates `fma(x, x, acc)` over columns l, l+32, …
//! from +0; the 32 partials are combined by the warp butterfly; `scale = rsqrt(max(Σ, eps²))`;
//! `y = scale · x`.

use super::math::{Mufu, fma, l2_scale, mul, warp_sum};
use crate::error::Result;
use crate::memory::HostMemory;
use crate::tensor::Tensor;

/// One normalised row (kernel's `lane_sum_sq` + `row_scale` + `scale_row`): lane l accumulates
/// columns l, l+32, … from +0, the warp butterfly sums the lanes, `scale = rsqrt(max(Σ, eps²))`,
/// `y = scale · x`. Shared with the fused conv chain's reference.
pub fn l2_normalize(row: &[f32], eps: f32, mufu: &mut dyn Mufu) -> Vec<f32> {
    let mut lanes = [0.0f32; 32];
    for (col, x) in row.iter().enumerate() {
        lanes[col % 32] = fma(*x, *x, lanes[col % 32]);
    }
    let scale = l2_scale(warp_sum(&lanes), eps, mufu);
    row.iter().map(|x| mul(scale, *x)).collect()
}

/// CPU reference of L2_NORM in the kernel's float-op order, on a validated op's views (shape `ne`).
pub fn l2_norm(src: &Tensor, dst: &Tensor, eps: f32, ne: [usize; 4], mem: &mut HostMemory, mufu: &mut dyn Mufu) -> Result<()> {
    for i3 in 0..ne[3] {
        for i2 in 0..ne[2] {
            for i1 in 0..ne[1] {
                let row: Vec<f32> = (0..ne[0]).map(|i0| mem.read_f32(src, [i0, i1, i2, i3])).collect::<Result<_>>()?;
                for (col, y) in l2_normalize(&row, eps, mufu).into_iter().enumerate() {
                    mem.write_f32(dst, [col, i1, i2, i3], y)?;
                }
            }
        }
    }
    Ok(())
}
