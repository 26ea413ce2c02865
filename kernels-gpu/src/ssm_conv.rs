//! SSM_CONV (+ optional bias, + optional fused SiLU) — ggml's `ssm_conv_f32`, short-sequence
//! kernel (spec §2.5).
//!
//! Thread mapping: block of [`SSM_CONV_BLOCK`](crate::abi::SSM_CONV_BLOCK) threads, grid
//! (x = sequence, y = channel block). Thread `tid` of block (s, by) owns channel
//! `c = by·128 + tid` of sequence `s` and walks the tokens in order, keeping the `D_CONV`
//! columns `t … t+D_CONV−1` of its channel in a register window.
//!
//! Layouts (element strides, checked by the host):
//! - `conv_input` (col, c, s) at `col + c·in_channel + s·in_seq` — columns contiguous;
//! - `weight` (j, c) at `j + c·w_channel` — tap 0 multiplies the oldest column;
//! - `bias` (optional, null when absent) at `c`;
//! - `dst` (c, t, s) at `c + t·dst_token + s·dst_seq`.
//!
//! Aliasing: `dst` must not overlap `conv_input` (a later token re-reads columns an earlier
//! token's output would have overwritten); the host refuses overlapping views.

use crate::abi::SsmConvParams;
use crate::device::math::{add, fma};
use crate::device::thread::{block_idx_x, block_idx_y, thread_idx_x};
use crate::fast_math::silu;

/// The output of one (channel, token): `fma` over the taps from the oldest column, starting
/// from a +0 addend, then `+ bias` (+0 when there is none — the add always happens, turning
/// −0 into +0), then SiLU if requested. Shared with the fused conv-chain kernel.
#[inline(always)]
pub fn conv_output<const D_CONV: usize>(window: &[f32; D_CONV], weight: &[f32; D_CONV], bias: f32, apply_silu: bool) -> f32 {
    let mut acc = 0.0f32;
    let mut j = 0;
    while j < D_CONV {
        acc = fma(window[j], weight[j], acc);
        j += 1;
    }
    let u = add(acc, bias);
    if apply_silu { silu(u) } else { u }
}

/// # Safety
/// Pointers and strides must describe live device memory for `n_channels` channels,
/// `n_tokens + D_CONV − 1` columns and `gridDim.x` sequences, `dst` not overlapping the inputs.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn ssm_conv<const D_CONV: usize, const SILU: bool>(
    conv_input: *const f32,
    in_channel: usize,
    in_seq: usize,
    weight: *const f32,
    w_channel: usize,
    bias: *const f32,
    dst: *mut f32,
    dst_token: usize,
    dst_seq: usize,
    n_channels: u32,
    n_tokens: u32,
) {
    let seq = block_idx_x() as usize;
    let c = block_idx_y() * crate::abi::SSM_CONV_BLOCK + thread_idx_x();
    if c >= n_channels {
        return;
    }
    let c = c as usize;
    // SAFETY (all accesses below): the host checked that every (col, c, s), (j, c) and
    // (c, t, s) index inside these bounds lies inside its view's buffer.
    let x = unsafe { conv_input.add(c * in_channel + seq * in_seq) };
    let w_row = unsafe { weight.add(c * w_channel) };
    let mut w = [0.0f32; D_CONV];
    let mut window = [0.0f32; D_CONV];
    let mut j = 0;
    while j < D_CONV {
        w[j] = unsafe { *w_row.add(j) };
        if j + 1 < D_CONV {
            window[j] = unsafe { *x.add(j) };
        }
        j += 1;
    }
    let b = if bias.is_null() { 0.0 } else { unsafe { *bias.add(c) } };
    let out = unsafe { dst.add(c + seq * dst_seq) };
    let mut t = 0usize;
    while t < n_tokens as usize {
        window[D_CONV - 1] = unsafe { *x.add(t + D_CONV - 1) };
        unsafe { *out.add(t * dst_token) = conv_output::<D_CONV>(&window, &w, b, SILU) };
        let mut j = 0;
        while j + 1 < D_CONV {
            window[j] = window[j + 1];
            j += 1;
        }
        t += 1;
    }
}

macro_rules! ssm_conv_entries {
    ($($name:ident = $key:ident ($d:tt, $silu:literal);)*) => {$(
        /// Entry point; see [`conv_output`] and the module docs.
        ///
        /// # Safety
        /// See the module docs: the host validates every view before launching.
        #[cfg(target_arch = "nvptx64")]
        #[unsafe(export_name = crate::abi::entry_name!($key, $d))]
        pub unsafe extern "ptx-kernel" fn $name(p: SsmConvParams) {
            // SAFETY: forwarded from the launch contract above.
            unsafe {
                ssm_conv::<$d, $silu>(p.conv_input as *const f32, p.in_channel as usize, p.in_seq as usize,
                                      p.weight as *const f32, p.w_channel as usize, p.bias as *const f32,
                                      p.dst as *mut f32, p.dst_token as usize, p.dst_seq as usize,
                                      p.n_channels, p.n_tokens)
            }
        }
    )*};
}

ssm_conv_entries! {
    ssm_conv_f32_d3 = ssm_conv(3, false);
    ssm_conv_f32_d4 = ssm_conv(4, false);
    ssm_conv_f32_d5 = ssm_conv(5, false);
    ssm_conv_f32_d9 = ssm_conv(9, false);
    ssm_conv_f32_d15 = ssm_conv(15, false);
    ssm_conv_f32_d3_silu = ssm_conv_silu(3, true);
    ssm_conv_f32_d4_silu = ssm_conv_silu(4, true);
    ssm_conv_f32_d5_silu = ssm_conv_silu(5, true);
    ssm_conv_f32_d9_silu = ssm_conv_silu(9, true);
    ssm_conv_f32_d15_silu = ssm_conv_silu(15, true);
}
