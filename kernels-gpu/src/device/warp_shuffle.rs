//! The warp shuffle primitives (`shfl.sync`, `bar.warp.sync`): the inline PTX of
//! [`warp`](super::warp)'s collectives, in a file of their own so that the collectives are plain
//! Rust over them.

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

/// [seq-batch] `bar.warp.sync` with a full mask: every lane of the warp waits here until all 32
/// arrived; orders the warp's memory accesses before the barrier against those after it (PTX:
/// "threads within warp that wish to communicate via memory can store to memory, execute
/// bar.warp.sync, and then safely read values stored by other threads in warp"). Not
/// `readonly`: the compiler keeps shared accesses on their side of it.
///
/// # Safety
/// All 32 lanes of the warp must execute this call together (full mask).
#[inline(always)]
pub unsafe fn sync_warp() {
    // SAFETY: forwarded to the caller (the whole warp arrives).
    unsafe {
        asm!("bar.warp.sync 0xffffffff;", options(nostack, preserves_flags));
    }
}

/// [layer-step] `shfl.sync.idx.b32` with a full mask: returns `v` of lane `src_lane`.
///
/// # Safety
/// As [`shfl_xor`]; `src_lane` < 32.
#[inline(always)]
pub unsafe fn shfl_idx(v: f32, src_lane: u32) -> f32 {
    let r: f32;
    // SAFETY: forwarded to the caller (the whole warp is converged here). No memory is touched.
    unsafe {
        asm!(
            "shfl.sync.idx.b32 {r}, {v}, {s}, 0x1f, 0xffffffff;",
            r = out(reg32) r,
            v = in(reg32) v,
            s = in(reg32) src_lane,
            options(nomem, nostack)
        );
    }
    r
}
