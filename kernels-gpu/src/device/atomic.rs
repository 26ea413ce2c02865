//! Global-memory atomics.

use core::arch::asm;

/// `red.global.add.u64`: adds `v` to `*p` atomically, returns nothing.
///
/// # Safety
/// `p` must point to a live, 8-byte aligned u64 in global memory.
#[inline(always)]
pub unsafe fn add_u64(p: *mut u64, v: u64) {
    // SAFETY: forwarded to the caller (valid global address).
    unsafe {
        asm!("red.global.add.u64 [{p}], {v};", p = in(reg64) p, v = in(reg64) v,
             options(nostack));
    }
}
