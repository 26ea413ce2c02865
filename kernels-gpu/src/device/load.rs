//! Read-only global loads through the non-coherent path (`ld.global.nc`, SASS
//! `LDG.E.*.CONSTANT`), the loads nvcc emits for ggml's `const T * __restrict__` operands.
//!
//! The address is a generic pointer (what the host passes); each load converts it to the global
//! window with `cvta.to.global` (a no-op move for cudaMalloc memory, which ptxas folds away).
//! Every function is `pure, readonly`: the compiler may merge or drop repeated loads of the same
//! address, which is exactly the contract of `.nc`: the memory must not change while the kernel
//! runs.

use core::arch::asm;

/// Two adjacent f32 at `p`, one 8-byte `ld.global.nc.v2.f32`.
///
/// # Safety
/// `p` must point to 8 readable bytes of global memory, 8-byte aligned, that no thread of the
/// grid writes while the kernel runs.
#[inline(always)]
pub unsafe fn nc_f32x2(p: *const f32) -> (f32, f32) {
    let (x, y): (f32, f32);
    // SAFETY: forwarded to the caller (aligned, readable, read-only for the kernel's lifetime).
    unsafe {
        asm!(
            "{{ .reg .b64 %g; cvta.to.global.u64 %g, {p}; ld.global.nc.v2.f32 {{{x}, {y}}}, [%g]; }}",
            p = in(reg64) p,
            x = out(reg32) x,
            y = out(reg32) y,
            options(pure, readonly, nostack)
        );
    }
    (x, y)
}

/// The 4 bytes at `p` (e.g. a `half2` / `bf16x2`), one `ld.global.nc.b32`.
///
/// # Safety
/// `p` must point to 4 readable bytes of global memory, 4-byte aligned, that no thread of the
/// grid writes while the kernel runs.
#[inline(always)]
pub unsafe fn nc_u32(p: *const u32) -> u32 {
    let r: u32;
    // SAFETY: forwarded to the caller (aligned, readable, read-only for the kernel's lifetime).
    unsafe {
        asm!(
            "{{ .reg .b64 %g; cvta.to.global.u64 %g, {p}; ld.global.nc.b32 {r}, [%g]; }}",
            p = in(reg64) p,
            r = out(reg32) r,
            options(pure, readonly, nostack)
        );
    }
    r
}

/// [gdn-from-cache] The f32 at `p` with a plain, coherent `ld.global.f32` (its bit pattern,
/// unchanged): for data that the kernel itself writes later (the same thread's own element), so
/// the non-coherent path must not be used. Not `pure`: the compiler keeps it in program order
/// with the thread's later stores (which are `asm` blocks that may write memory).
///
/// # Safety
/// `p` must point to 4 readable bytes of global memory, 4-byte aligned; no *other* thread may
/// write them while the kernel runs (this thread may, after the load).
#[inline(always)]
pub unsafe fn coherent_f32(p: *const f32) -> f32 {
    let r: f32;
    // SAFETY: forwarded to the caller (aligned, readable, written by no other thread).
    unsafe {
        asm!(
            "{{ .reg .b64 %g; cvta.to.global.u64 %g, {p}; ld.global.f32 {r}, [%g]; }}",
            p = in(reg64) p,
            r = out(reg32) r,
            options(readonly, nostack)
        );
    }
    r
}
