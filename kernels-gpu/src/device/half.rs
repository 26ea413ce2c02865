//! f16 / bf16 conversions and packed half arithmetic (mul_mat_vec_f's weight types).
//!
//! Halves travel as their raw bits (`u16`, or `u32` for a packed pair with the low half in the
//! low 16 bits, as CUDA's `half2` lays them out).

use core::arch::asm;

/// f32 → f16, `cvt.rn.f16.f32`: round to nearest even, f16 subnormals kept, overflow to ±Inf.
#[inline(always)]
pub fn f32_to_f16_rn(x: f32) -> u16 {
    let r: u16;
    // SAFETY: a pure register conversion; no memory, no state.
    unsafe {
        asm!("cvt.rn.f16.f32 {r}, {x};", r = out(reg16) r, x = in(reg32) x,
             options(pure, nomem, nostack));
    }
    r
}

/// f16 → f32, `cvt.f32.f16`: exact (every f16, subnormals included, is an f32).
#[inline(always)]
pub fn f16_to_f32(h: u16) -> f32 {
    let r: f32;
    // SAFETY: a pure register conversion; no memory, no state.
    unsafe {
        asm!("cvt.f32.f16 {r}, {h};", r = out(reg32) r, h = in(reg16) h,
             options(pure, nomem, nostack));
    }
    r
}

/// Packs two f16 bit patterns into a `half2` register (`lo` in bits 0..16).
#[inline(always)]
pub fn pack_f16x2(lo: u16, hi: u16) -> u32 {
    (lo as u32) | ((hi as u32) << 16)
}

/// `a * b + c` on both halves of a packed pair with one rounding each, `fma.rn.f16x2`
/// (no ftz: f16 subnormals are kept). ggml writes `mul` then `add`; ptxas fuses them to HFMA2.
#[inline(always)]
pub fn fma_f16x2(a: u32, b: u32, c: u32) -> u32 {
    let r: u32;
    // SAFETY: a pure register-to-register instruction; no memory, no state.
    unsafe {
        asm!("fma.rn.f16x2 {r}, {a}, {b}, {c};",
             r = out(reg32) r, a = in(reg32) a, b = in(reg32) b, c = in(reg32) c,
             options(pure, nomem, nostack));
    }
    r
}
