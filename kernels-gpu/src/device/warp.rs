//! Warp-level collectives.

use super::math;
use core::arch::asm;

/// `shfl.sync.bfly.b32` with a full mask and clamp 31: returns `v` of lane `lane ^ lane_mask`.
///
/// # Safety
/// All 32 lanes of the warp must execute this call together (full mask): none may have exited
/// or be on another branch.
#[inline(always)]
pub unsafe fn shfl_xor(v: f32, lane_mask: u32) -> f32 {
    let r: f32;
    // SAFETY: forwarded to the caller (the whole warp is converged here). No memory is touched.
    unsafe {
        asm!(
            "shfl.sync.bfly.b32 {r}, {v}, {m}, 0x1f, 0xffffffff;",
            r = out(reg32) r,
            v = in(reg32) v,
            m = in(reg32) lane_mask,
            options(nomem, nostack)
        );
    }
    r
}

/// ggml's `warp_reduce_sum` (width 32): for offsets 16, 8, 4, 2, 1 every lane computes
/// `x = x + shfl_xor(x, offset)` with `add.rn.ftz`, own value first. Each step adds a
/// commutative pair, so all lanes end with the same bits (spec §2.0).
///
/// # Safety
/// All 32 lanes of the warp must call it together.
#[inline(always)]
pub unsafe fn warp_sum(mut x: f32) -> f32 {
    let mut offset = 16;
    while offset > 0 {
        // SAFETY: forwarded to the caller.
        x = math::add(x, unsafe { shfl_xor(x, offset) });
        offset >>= 1;
    }
    x
}

/// [`warp_sum`] of N independent values, interleaved step by step: for each value the same
/// `x + shfl_xor(x, offset)` sequence (offsets 16 … 1, own value first), so each result has
/// exactly [`warp_sum`]'s bits; the N butterflies' latencies overlap.
///
/// # Safety
/// All 32 lanes of the warp must call it together.
#[inline(always)]
pub unsafe fn warp_sum_each<const N: usize>(mut x: [f32; N]) -> [f32; N] {
    let mut offset = 16;
    while offset > 0 {
        let mut shuffled = [0.0f32; N];
        let mut j = 0;
        while j < N {
            // SAFETY: forwarded to the caller.
            shuffled[j] = unsafe { shfl_xor(x[j], offset) };
            j += 1;
        }
        let mut j = 0;
        while j < N {
            x[j] = math::add(x[j], shuffled[j]);
            j += 1;
        }
        offset >>= 1;
    }
    x
}
