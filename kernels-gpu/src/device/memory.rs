//! [speed] Global-memory loads through the non-coherent (read-only) path.
//!
//! `ld.global.nc` (SASS `LDG.E.CONSTANT`) tells the hardware and ptxas that the word is not
//! written by any thread while the kernel runs, so ptxas may issue it early — ahead of the
//! kernel's own stores — and the load may be served by the read-only cache. It moves the same
//! 32 bits as a plain load: using it changes timing, never a result.
//!
//! A pointer handed to a kernel is a generic address; `cvta.to.global` turns it into the global
//! address `ld.global` wants (on sm_90 an identity, folded away by ptxas).

use core::arch::asm;

/// Loads the 32-bit word at `p` with `ld.global.nc.b32`.
///
/// # Safety
/// `p` must be a valid, aligned pointer into global memory, and no thread of the grid (nor any
/// concurrent work) may write that word while the kernel runs.
#[inline(always)]
pub unsafe fn load_nc_u32(p: *const u32) -> u32 {
    let r: u32;
    // SAFETY: forwarded to the caller: readable global memory that nobody writes meanwhile, so
    // the load may be reordered with the kernel's own stores (`readonly`, `pure`).
    unsafe {
        asm!(
            "{{ .reg .b64 ga; cvta.to.global.u64 ga, {p}; ld.global.nc.b32 {r}, [ga]; }}",
            r = out(reg32) r,
            p = in(reg64) p as u64,
            options(pure, readonly, nostack)
        );
    }
    r
}

/// Loads the f32 at `p` with `ld.global.nc` (its bit pattern, unchanged).
///
/// # Safety
/// As [`load_nc_u32`].
#[inline(always)]
pub unsafe fn load_nc_f32(p: *const f32) -> f32 {
    // SAFETY: forwarded to the caller.
    f32::from_bits(unsafe { load_nc_u32(p.cast()) })
}

/// `prefetch.global.L2`: asks the memory system to bring the line holding `p` into L2. A hint:
/// no register is written, nothing is ordered, a result never depends on it.
///
/// # Safety
/// `p` must point into global memory the kernel may read (a hint to a mapped address).
#[inline(always)]
pub unsafe fn prefetch_l2<T>(p: *const T) {
    // SAFETY: forwarded to the caller; a prefetch reads no register back and writes nothing.
    unsafe {
        asm!(
            "{{ .reg .b64 ga; cvta.to.global.u64 ga, {p}; prefetch.global.L2 [ga]; }}",
            p = in(reg64) p as u64,
            options(readonly, nostack, preserves_flags)
        );
    }
}

/// `base[index]` with `ld.global.nc`, the address formed inside the instruction sequence
/// (`mad.wide.u32 index, 4, base`): a warp-uniform `base` then stays in a uniform register and
/// only the 32-bit `index` occupies a per-thread register between loads.
///
/// # Safety
/// As [`load_nc_u32`] for the element `base + index`.
#[inline(always)]
pub unsafe fn load_nc_f32_at(base: *const f32, index: u32) -> f32 {
    let r: f32;
    // SAFETY: forwarded to the caller (see `load_nc_u32`).
    unsafe {
        asm!(
            "{{ .reg .b64 ga; cvta.to.global.u64 ga, {b}; mad.wide.u32 ga, {i}, 4, ga; ld.global.nc.f32 {r}, [ga]; }}",
            r = out(reg32) r,
            b = in(reg64) base as u64,
            i = in(reg32) index,
            options(pure, readonly, nostack)
        );
    }
    r
}

/// `[base[index], base[index + 32], base[index + 64], base[index + 96]]` with `ld.global.nc`
/// (one address, three immediate offsets of 128 bytes) — a lane's four entries of a 128-float
/// row when `index` is the lane. As [`load_nc_f32_at`], `base` may stay uniform.
///
/// # Safety
/// As [`load_nc_u32`] for the four elements.
#[inline(always)]
pub unsafe fn load_nc_f32x4_stride32(base: *const f32, index: u32) -> [f32; 4] {
    let (a, b, c, d): (f32, f32, f32, f32);
    // SAFETY: forwarded to the caller (see `load_nc_u32`).
    unsafe {
        asm!(
            "{{ .reg .b64 ga; cvta.to.global.u64 ga, {base}; mad.wide.u32 ga, {i}, 4, ga;",
            "ld.global.nc.f32 {a}, [ga]; ld.global.nc.f32 {b}, [ga+128];",
            "ld.global.nc.f32 {c}, [ga+256]; ld.global.nc.f32 {d}, [ga+384]; }}",
            a = out(reg32) a,
            b = out(reg32) b,
            c = out(reg32) c,
            d = out(reg32) d,
            base = in(reg64) base as u64,
            i = in(reg32) index,
            options(pure, readonly, nostack)
        );
    }
    [a, b, c, d]
}

/// `base[index] = x` (`st.global.f32`), the address formed as in [`load_nc_f32_at`] so that a
/// warp-uniform `base` stays in a uniform register.
///
/// # Safety
/// `base + index` must be a valid, aligned f32 of global memory that no other thread accesses
/// while the kernel runs.
#[inline(always)]
pub unsafe fn store_f32_at(base: *mut f32, index: u32, x: f32) {
    // SAFETY: forwarded to the caller.
    unsafe {
        asm!(
            "{{ .reg .b64 ga; cvta.to.global.u64 ga, {b}; mad.wide.u32 ga, {i}, 4, ga; st.global.f32 [ga], {x}; }}",
            b = in(reg64) base as u64,
            i = in(reg32) index,
            x = in(reg32) x,
            options(nostack, preserves_flags)
        );
    }
}

/// `base[index + 32·r] = x[r]` for r = 0 … 3 (`st.global.f32`, one address and immediate
/// offsets of 128 bytes) — a lane's four entries of a 128-float row when `index` is the lane.
///
/// # Safety
/// As [`store_f32_at`] for the four elements.
#[inline(always)]
pub unsafe fn store_f32x4_stride32(base: *mut f32, index: u32, x: &[f32; 4]) {
    // SAFETY: forwarded to the caller.
    unsafe {
        asm!(
            "{{ .reg .b64 ga; cvta.to.global.u64 ga, {base}; mad.wide.u32 ga, {i}, 4, ga;",
            "st.global.f32 [ga], {a}; st.global.f32 [ga+128], {b};",
            "st.global.f32 [ga+256], {c}; st.global.f32 [ga+384], {d}; }}",
            base = in(reg64) base as u64,
            i = in(reg32) index,
            a = in(reg32) x[0],
            b = in(reg32) x[1],
            c = in(reg32) x[2],
            d = in(reg32) x[3],
            options(nostack, preserves_flags)
        );
    }
}

/// `base[index]` with `ld.global.nc.b32`, address `base + 4·index` (see [`load_nc_f32_at`]).
///
/// # Safety
/// As [`load_nc_u32`] for the element `base + index`.
#[inline(always)]
pub unsafe fn load_nc_u32_at(base: *const u32, index: u32) -> u32 {
    let r: u32;
    // SAFETY: forwarded to the caller (see `load_nc_u32`).
    unsafe {
        asm!(
            "{{ .reg .b64 ga; cvta.to.global.u64 ga, {b}; mad.wide.u32 ga, {i}, 4, ga; ld.global.nc.b32 {r}, [ga]; }}",
            r = out(reg32) r,
            b = in(reg64) base as u64,
            i = in(reg32) index,
            options(pure, readonly, nostack)
        );
    }
    r
}

/// `base[index]` with a plain (coherent) `ld.global.b32`, for data the kernel may also write
/// (an in-place element read before its own thread writes it). Ordered with the kernel's
/// stores like any memory read.
///
/// # Safety
/// `base + index` must be a valid, aligned u32 of global memory.
#[inline(always)]
pub unsafe fn load_u32_at(base: *const u32, index: u32) -> u32 {
    let r: u32;
    // SAFETY: forwarded to the caller.
    unsafe {
        asm!(
            "{{ .reg .b64 ga; cvta.to.global.u64 ga, {b}; mad.wide.u32 ga, {i}, 4, ga; ld.global.b32 {r}, [ga]; }}",
            r = out(reg32) r,
            b = in(reg64) base as u64,
            i = in(reg32) index,
            options(readonly, nostack, preserves_flags)
        );
    }
    r
}

/// `base[index] = x` (`st.global.b32`, address `base + 4·index`).
///
/// # Safety
/// As [`store_f32_at`].
#[inline(always)]
pub unsafe fn store_u32_at(base: *mut u32, index: u32, x: u32) {
    // SAFETY: forwarded to the caller.
    unsafe {
        asm!(
            "{{ .reg .b64 ga; cvta.to.global.u64 ga, {b}; mad.wide.u32 ga, {i}, 4, ga; st.global.b32 [ga], {x}; }}",
            b = in(reg64) base as u64,
            i = in(reg32) index,
            x = in(reg32) x,
            options(nostack, preserves_flags)
        );
    }
}

/// `prefetch.global.L1`: asks for the line holding `p` in this SM's L1. A hint, as
/// [`prefetch_l2`].
///
/// # Safety
/// As [`prefetch_l2`].
#[inline(always)]
pub unsafe fn prefetch_l1<T>(p: *const T) {
    // SAFETY: forwarded to the caller; a prefetch reads no register back and writes nothing.
    unsafe {
        asm!(
            "{{ .reg .b64 ga; cvta.to.global.u64 ga, {p}; prefetch.global.L1 [ga]; }}",
            p = in(reg64) p as u64,
            options(readonly, nostack, preserves_flags)
        );
    }
}

/// `*p = x` (`st.global.b32`).
///
/// # Safety
/// `p` must be a valid, aligned u32 of global memory that no other thread accesses while the
/// kernel runs.
#[inline(always)]
pub unsafe fn store_u32(p: *mut u32, x: u32) {
    // SAFETY: forwarded to the caller.
    unsafe {
        asm!(
            "{{ .reg .b64 ga; cvta.to.global.u64 ga, {p}; st.global.b32 [ga], {x}; }}",
            p = in(reg64) p as u64,
            x = in(reg32) x,
            options(nostack, preserves_flags)
        );
    }
}
