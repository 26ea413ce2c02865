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
