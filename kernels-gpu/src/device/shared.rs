//! Dynamic shared memory: one `extern .shared` array per module, sized at launch.
//!
//! Addresses are 32-bit offsets in the shared window (what `ld.shared`/`st.shared` take), so
//! accesses compile to shared loads/stores instead of generic ones.

use core::arch::{asm, global_asm};

global_asm!(".extern .shared .align 16 .b8 rgdn_dynamic_smem[];");

/// Shared-window address of the first byte of the block's dynamic shared memory.
#[inline(always)]
pub fn base() -> u32 {
    let r: u32;
    // SAFETY: takes the address of the module's shared array; reads no memory.
    unsafe {
        asm!("mov.u32 {r}, rgdn_dynamic_smem;", r = out(reg32) r, options(pure, nomem, nostack));
    }
    r
}

/// Stores `v` at shared address `addr`.
///
/// # Safety
/// `addr` must be 4-byte aligned and lie inside the dynamic shared memory the launch requested.
#[inline(always)]
pub unsafe fn store_f32(addr: u32, v: f32) {
    // SAFETY: forwarded to the caller (address inside the launch's shared allocation).
    unsafe {
        asm!("st.shared.f32 [{a}], {v};", a = in(reg32) addr, v = in(reg32) v,
             options(nostack));
    }
}

/// [seq-batch] Stores the u32 `v` at shared address `addr`.
///
/// # Safety
/// As [`store_f32`].
#[inline(always)]
pub unsafe fn store_u32(addr: u32, v: u32) {
    // SAFETY: forwarded to the caller (address inside the launch's shared allocation).
    unsafe {
        asm!("st.shared.b32 [{a}], {v};", a = in(reg32) addr, v = in(reg32) v,
             options(nostack));
    }
}

/// Loads the f32 at shared address `addr`.
///
/// # Safety
/// As [`store_f32`]; the value must have been written by a thread ordered before this one
/// (same thread, or a barrier in between).
#[inline(always)]
pub unsafe fn load_f32(addr: u32) -> f32 {
    let r: f32;
    // SAFETY: forwarded to the caller.
    unsafe {
        asm!("ld.shared.f32 {r}, [{a}];", r = out(reg32) r, a = in(reg32) addr,
             options(nostack, readonly));
    }
    r
}

/// [layer-step] Loads the u32 at shared address `addr`.
///
/// # Safety
/// As [`load_f32`].
#[inline(always)]
pub unsafe fn load_u32(addr: u32) -> u32 {
    let r: u32;
    // SAFETY: forwarded to the caller.
    unsafe {
        asm!("ld.shared.b32 {r}, [{a}];", r = out(reg32) r, a = in(reg32) addr,
             options(nostack, readonly));
    }
    r
}

/// [layer-step] Loads the two f32 at shared address `addr` (one `ld.shared.v2.f32`).
///
/// # Safety
/// As [`load_f32`], with `addr` 8-byte aligned.
#[inline(always)]
pub unsafe fn load_f32x2(addr: u32) -> (f32, f32) {
    let (x, y): (f32, f32);
    // SAFETY: forwarded to the caller.
    unsafe {
        asm!("ld.shared.v2.f32 {{{x}, {y}}}, [{a}];", x = out(reg32) x, y = out(reg32) y, a = in(reg32) addr,
             options(nostack, readonly));
    }
    (x, y)
}

/// [replay] Loads the four f32 at shared address `addr` (one `ld.shared.v4.f32`).
///
/// # Safety
/// As [`load_f32`], with `addr` 16-byte aligned.
#[inline(always)]
pub unsafe fn load_f32x4(addr: u32) -> [f32; 4] {
    let (x, y, z, w): (f32, f32, f32, f32);
    // SAFETY: forwarded to the caller.
    unsafe {
        asm!("ld.shared.v4.f32 {{{x}, {y}, {z}, {w}}}, [{a}];", x = out(reg32) x, y = out(reg32) y, z = out(reg32) z, w = out(reg32) w,
             a = in(reg32) addr, options(nostack, readonly));
    }
    [x, y, z, w]
}

/// [layer-step] Starts copying the 4 bytes at global address `src` to shared address `dst`
/// (`cp.async.ca.shared.global`, sm_80+): a load whose data goes to shared memory instead of a
/// register, so a thread can have a whole chunk in flight without the registers to hold it.
/// The bytes are in shared memory, visible to this thread, once it ran [`wait_async_copies`];
/// to other threads after that and a barrier. The read is an ordinary (weak) global load
/// through L1, ordered after this thread's earlier fences like any load it issues later.
///
/// # Safety
/// `src` must point to 4 readable, 4-byte aligned bytes of global memory that no thread writes
/// until the copy completed; `dst` must be 4-byte aligned inside the launch's dynamic shared
/// memory, and nothing may read or write it until this thread waited for the copy.
#[inline(always)]
pub unsafe fn copy_async_4(dst: u32, src: *const u32) {
    // SAFETY: forwarded to the caller.
    unsafe {
        asm!(
            "{{ .reg .b64 ga; cvta.to.global.u64 ga, {p}; cp.async.ca.shared.global [{d}], [ga], 4; }}",
            d = in(reg32) dst,
            p = in(reg64) src as u64,
            options(nostack, preserves_flags)
        );
    }
}

/// [layer-step] [`copy_async_4`] for the 8 bytes at `src` (both addresses 8-byte aligned).
///
/// # Safety
/// As [`copy_async_4`], for 8 bytes at 8-byte aligned addresses.
#[inline(always)]
pub unsafe fn copy_async_8(dst: u32, src: *const u64) {
    // SAFETY: forwarded to the caller.
    unsafe {
        asm!(
            "{{ .reg .b64 ga; cvta.to.global.u64 ga, {p}; cp.async.ca.shared.global [{d}], [ga], 8; }}",
            d = in(reg32) dst,
            p = in(reg64) src as u64,
            options(nostack, preserves_flags)
        );
    }
}

/// [layer-step] Waits until every [`copy_async_4`] / [`copy_async_8`] this thread started has
/// landed in shared memory (`cp.async.wait_all`): afterwards the thread's own copies are
/// visible to it. Not `readonly`: the compiler keeps later shared loads after it.
///
#[inline(always)]
pub fn wait_async_copies() {
    // SAFETY: waits for this thread's own copies; touches no other state.
    unsafe {
        asm!("cp.async.wait_all;", options(nostack, preserves_flags));
    }
}

/// [seq-batch] Starts copying the 16 bytes at global address `src` to shared address `dst`
/// (`cp.async.cg.shared.global`, sm_80+: through L2 only, bypassing L1 — for data read once).
/// Part of this thread's next [`commit_async_copies`] group; complete and visible to this thread
/// after [`wait_async_groups`] leaves that group behind (to other threads after that and a
/// barrier). The read is an ordinary (weak) global load.
///
/// # Safety
/// `src` must point to 16 readable, 16-byte aligned bytes of global memory that no thread
/// writes until the copy completed; `dst` must be 16-byte aligned inside the launch's dynamic
/// shared memory, and nothing may read or write it until this thread waited for the copy.
#[inline(always)]
pub unsafe fn copy_async_16(dst: u32, src: *const u8) {
    // SAFETY: forwarded to the caller.
    unsafe {
        asm!(
            "{{ .reg .b64 ga; cvta.to.global.u64 ga, {p}; cp.async.cg.shared.global [{d}], [ga], 16; }}",
            d = in(reg32) dst,
            p = in(reg64) src as u64,
            options(nostack, preserves_flags)
        );
    }
}

/// [seq-batch] Closes this thread's pending `cp.async` copies into one group
/// (`cp.async.commit_group`).
#[inline(always)]
pub fn commit_async_copies() {
    // SAFETY: groups this thread's own copies; touches no other state.
    unsafe {
        asm!("cp.async.commit_group;", options(nostack, preserves_flags));
    }
}

/// [seq-batch] Waits until at most `N` of this thread's committed copy groups — the newest — are
/// still in flight (`cp.async.wait_group N`): every older group has landed and is visible to
/// this thread. Not `readonly`: the compiler keeps later shared loads after it.
#[inline(always)]
pub fn wait_async_groups<const N: u32>() {
    // SAFETY: waits for this thread's own copies; touches no other state.
    unsafe {
        asm!("cp.async.wait_group {n};", n = const N, options(nostack, preserves_flags));
    }
}

/// [seq-batch] The generic address of shared-window address `addr` (`cvta.shared.u64`): a pointer
/// through which ordinary loads and stores reach the block's shared memory.
#[inline(always)]
pub fn generic(addr: u32) -> *mut u8 {
    let r: u64;
    // SAFETY: converts an address; touches no memory.
    unsafe {
        asm!(
            "{{ .reg .b64 s; cvt.u64.u32 s, {a}; cvta.shared.u64 {r}, s; }}",
            a = in(reg32) addr,
            r = out(reg64) r,
            options(pure, nomem, nostack)
        );
    }
    r as *mut u8
}
