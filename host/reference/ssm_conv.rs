//! SSM_CONV reference (spec §2.5): per (s, t, c), `fma` over the taps from the oldest column
//! starting at +0, then `+ bias` (+0 when absent), then SiLU.

use super::math::{Mufu, add, fma, silu};
use crate::error::Result;
use crate::memory::HostMemory;
use crate::tensor::Tensor;

/// One output (kernel's `conv_output`): `fma` over the taps from the oldest column starting at
/// +0, then `+ bias`, then SiLU if asked. Shared with the fused conv chain's reference.
pub fn conv_output(window: &[f32], weight: &[f32], bias: f32, apply_silu: bool, mufu: &mut dyn Mufu) -> f32 {
    let mut acc = 0.0f32;
    for (x, w) in window.iter().zip(weight) {
        acc = fma(*x, *w, acc);
    }
    let u = add(acc, bias);
    if apply_silu { silu(u, mufu) } else { u }
}

/// CPU reference of SSM_CONV in the kernel's float-op order, on a validated op's views:
/// `weight` [d_conv, C], `conv_input` [d_conv − 1 + n_t, C, n_s], `dst` [C, n_t, n_s].
pub fn ssm_conv(
    conv_input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    dst: &Tensor,
    apply_silu: bool,
    mem: &mut HostMemory,
    mufu: &mut dyn Mufu,
) -> Result<()> {
    let [d_conv, n_channels, ..] = weight.ne();
    let [_, n_tokens, n_seqs, _] = dst.ne();
    for s in 0..n_seqs {
        for c in 0..n_channels {
            let bias = bias.map_or(Ok(0.0), |b| mem.read_f32(b, [c, 0, 0, 0]))?;
            let weight: Vec<f32> = (0..d_conv).map(|j| mem.read_f32(weight, [j, c, 0, 0])).collect::<Result<_>>()?;
            for t in 0..n_tokens {
                let window: Vec<f32> = (0..d_conv).map(|j| mem.read_f32(conv_input, [t + j, c, s, 0])).collect::<Result<_>>()?;
                let y = conv_output(&window, &weight, bias, apply_silu, mufu);
                mem.write_f32(dst, [c, t, s, 0], y)?;
            }
        }
    }
    Ok(())
}
