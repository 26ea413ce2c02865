//! SSM_CONV reference (spec §2.5): per (s, t, c), `fma` over the taps from the oldest column
//! starting at +0, then `+ bias` (+0 when absent), then SiLU.

use super::math::{Mufu, add, fma, silu};
use crate::memory::HostMemory;
use crate::ops::ssm_conv::{ConvShape, SsmConv};

pub fn ssm_conv(op: &SsmConv, shape: &ConvShape, mem: &mut HostMemory, mufu: &mut dyn Mufu) {
    let ConvShape { d_conv, n_channels, n_tokens, n_seqs } = *shape;
    for s in 0..n_seqs {
        for c in 0..n_channels {
            let bias = op.bias.map_or(0.0, |b| mem.read_f32(&b, [c, 0, 0, 0]));
            for t in 0..n_tokens {
                let mut acc = 0.0f32;
                for j in 0..d_conv {
                    let x = mem.read_f32(&op.conv_input, [t + j, c, s, 0]);
                    let w = mem.read_f32(&op.weight, [j, c, 0, 0]);
                    acc = fma(x, w, acc);
                }
                let u = add(acc, bias);
                let y = if op.apply_silu { silu(u, mufu) } else { u };
                mem.write_f32(&op.dst, [c, t, s, 0], y);
            }
        }
    }
}
