//! Global-memory atomics.

use core::arch::asm;

/// `atom.global.add.u32`: adds `v` to `*p`, returns nothing.
///
/// # Safety
/// `p` must point to a live, 4-byte aligned u32 in global memory.
#[inline(always)]
pub unsafe fn add_u32(p: *mut u32, v: u32) {
    // SAFETY: forwarded to the caller (valid global address).
    unsafe {
        asm!("red.global.add.u32 [{p}], {v};", p = in(reg64) p, v = in(reg32) v,
             options(nostack));
    }
}
