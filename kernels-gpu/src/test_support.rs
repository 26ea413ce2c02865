//! Kernels for the GPU test suite only (not part of any layer):
//! - [`test_math_probe_f32`] evaluates one of the [`fast_math`](crate::fast_math) functions on a
//!   contiguous range of input bit patterns, for the 2^32-input parity proof against nvcc;
//! - [`test_count_mismatches_u32`] counts positions where two outputs differ (NaN == NaN);
//! - [`test_mufu_eval_f32`] runs single MUFU instructions on given inputs, so the CPU reference
//!   can use the hardware's exact approximation bits instead of a bound.

use crate::abi::{math_probe, mufu_op};
use crate::device::atomic;
use crate::device::math::{ex2_approx, lg2_approx, rcp_approx, rsqrt_approx};
use crate::device::thread::{block_dim_x, block_idx_x, grid_dim_x, thread_idx_x};
use crate::fast_math;

#[inline(always)]
fn grid_stride() -> (usize, usize) {
    let start = (block_idx_x() * block_dim_x() + thread_idx_x()) as usize;
    (start, (grid_dim_x() * block_dim_x()) as usize)
}

/// `out[i] = f(f32::from_bits(first + i))` for `i < n`; `f` selected by `function`
/// ([`math_probe`] ids), `param` is the L2 norm's eps.
///
/// # Safety
/// `out` must hold `n` u32.
#[unsafe(export_name = crate::abi::entry_name!(math_probe))]
pub unsafe extern "ptx-kernel" fn test_math_probe_f32(p: crate::abi::MathProbeParams) {
    let (function, first, n, param, out) = (p.function, p.first, p.n, p.param, p.out as *mut u32);
    let (mut i, stride) = grid_stride();
    while i < n as usize {
        let x = f32::from_bits(first.wrapping_add(i as u32));
        let y = match function {
            math_probe::EXP => fast_math::exp(x),
            math_probe::SILU => fast_math::silu(x),
            math_probe::SIGMOID => fast_math::sigmoid(x),
            math_probe::SOFTPLUS => fast_math::softplus(x),
            math_probe::L2_SCALE => fast_math::l2_scale(x, param),
            _ => f32::from_bits(0xFFFF_FFFF),
        };
        // SAFETY: i < n, forwarded to the caller.
        unsafe { *out.add(i) = y.to_bits() };
        i += stride;
    }
}

/// Adds to `*count` the number of `i < n` where `a[i]` and `b[i]` differ in bits, counting any
/// two NaNs as equal (NaN payloads are not part of the parity target).
///
/// # Safety
/// `a`, `b` must hold `n` u32; `count` must point to one u64 (a u32 could wrap to 0).
#[unsafe(export_name = crate::abi::entry_name!(count_mismatches))]
pub unsafe extern "ptx-kernel" fn test_count_mismatches_u32(p: crate::abi::CountMismatchesParams) {
    let (a, b, n, count) = (p.a as *const u32, p.b as *const u32, p.n, p.count as *mut u64);
    let (mut i, stride) = grid_stride();
    let mut local = 0u64;
    while i < n as usize {
        // SAFETY: i < n, forwarded to the caller.
        let (x, y) = unsafe { (*a.add(i), *b.add(i)) };
        let nan = |v: u32| v & 0x7FFF_FFFF > 0x7F80_0000;
        if x != y && !(nan(x) && nan(y)) {
            local += 1;
        }
        i += stride;
    }
    if local != 0 {
        // SAFETY: count is valid, forwarded to the caller.
        unsafe { atomic::add_u64(count, local) };
    }
}

/// `out[i] = op[i](f32::from_bits(arg[i]))` with `op` one of the [`mufu_op`] ids.
///
/// # Safety
/// `op`, `arg`, `out` must hold `n` u32.
#[unsafe(export_name = crate::abi::entry_name!(mufu_eval))]
pub unsafe extern "ptx-kernel" fn test_mufu_eval_f32(p: crate::abi::MufuEvalParams) {
    let (op, arg, out, n) = (p.op as *const u32, p.arg as *const u32, p.out as *mut u32, p.n);
    let (mut i, stride) = grid_stride();
    while i < n as usize {
        // SAFETY: i < n, forwarded to the caller.
        let (o, x) = unsafe { (*op.add(i), f32::from_bits(*arg.add(i))) };
        let y = match o {
            mufu_op::EX2 => ex2_approx(x),
            mufu_op::LG2 => lg2_approx(x),
            mufu_op::RCP => rcp_approx(x),
            mufu_op::RSQRT => rsqrt_approx(x),
            _ => f32::from_bits(0xFFFF_FFFF),
        };
        // SAFETY: i < n.
        unsafe { *out.add(i) = y.to_bits() };
        i += stride;
    }
}
