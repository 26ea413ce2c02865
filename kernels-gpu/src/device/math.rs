//! f32 arithmetic exactly as ggml's `-use_fast_math` build executes it (spec §0.1, §3).
//!
//! - [`add`], [`mul`]: `.rn.ftz` — subnormal inputs read as signed zero, subnormal results
//!   flushed to signed zero; the explicit `.rn` forbids ptxas from contracting them into an fma.
//! - [`fma`]: `fma.rn.ftz` — one rounding; used wherever nvcc or ptxas fused `a*b + c`.
//! - [`ex2_approx`], [`lg2_approx`], [`rcp_approx`], [`rsqrt_approx`], [`div_approx`]: the MUFU
//!   approximations fast-math emits for `exp2`/`log2`/`1/x`/`rsqrtf`/`/`. Their bits are not
//!   specified by NVIDIA; they are reproduced by running the same instruction.
//! - [`max`]: `max.ftz` (returns the non-NaN operand); [`gt`]: `setp.gt.ftz` (false for NaN).

use core::arch::asm;

macro_rules! binary_op {
    ($(#[$doc:meta] $name:ident => $instr:literal;)*) => {$(
        #[$doc]
        #[inline(always)]
        pub fn $name(a: f32, b: f32) -> f32 {
            let r: f32;
            // SAFETY: a pure register-to-register float instruction; no memory, no state.
            unsafe {
                asm!(concat!($instr, " {r}, {a}, {b};"),
                     r = out(reg32) r, a = in(reg32) a, b = in(reg32) b,
                     options(pure, nomem, nostack));
            }
            r
        }
    )*};
}

macro_rules! unary_op {
    ($(#[$doc:meta] $name:ident => $instr:literal;)*) => {$(
        #[$doc]
        #[inline(always)]
        pub fn $name(a: f32) -> f32 {
            let r: f32;
            // SAFETY: a pure register-to-register float instruction; no memory, no state.
            unsafe {
                asm!(concat!($instr, " {r}, {a};"),
                     r = out(reg32) r, a = in(reg32) a,
                     options(pure, nomem, nostack));
            }
            r
        }
    )*};
}

binary_op! {
    /// `a + b`, `add.rn.ftz.f32`.
    add => "add.rn.ftz.f32";
    /// `a * b`, `mul.rn.ftz.f32`.
    mul => "mul.rn.ftz.f32";
    /// `fmaxf(a, b)`, `max.ftz.f32`: the non-NaN operand if exactly one is NaN.
    max => "max.ftz.f32";
    /// `a / b` under fast-math: `div.approx.ftz.f32` (SASS: MUFU.RCP of `b`, then FMUL.FTZ).
    div_approx => "div.approx.ftz.f32";
}

unary_op! {
    /// `2^a`, `ex2.approx.ftz.f32` (MUFU.EX2).
    ex2_approx => "ex2.approx.ftz.f32";
    /// `log2(a)`, `lg2.approx.ftz.f32` (MUFU.LG2).
    lg2_approx => "lg2.approx.ftz.f32";
    /// `1 / a`, `rcp.approx.ftz.f32` (MUFU.RCP).
    rcp_approx => "rcp.approx.ftz.f32";
    /// `1 / sqrt(a)`, `rsqrt.approx.ftz.f32` (MUFU.RSQ).
    rsqrt_approx => "rsqrt.approx.ftz.f32";
}

/// `a * b + c` with one rounding, `fma.rn.ftz.f32`.
#[inline(always)]
pub fn fma(a: f32, b: f32, c: f32) -> f32 {
    let r: f32;
    // SAFETY: a pure register-to-register float instruction; no memory, no state.
    unsafe {
        asm!("fma.rn.ftz.f32 {r}, {a}, {b}, {c};",
             r = out(reg32) r, a = in(reg32) a, b = in(reg32) b, c = in(reg32) c,
             options(pure, nomem, nostack));
    }
    r
}

/// `a > b` as fast-math compiles it, `setp.gt.ftz.f32`: false when either operand is NaN.
#[inline(always)]
pub fn gt(a: f32, b: f32) -> bool {
    let r: u32;
    // SAFETY: a pure register-to-register compare and select; no memory, no state.
    unsafe {
        asm!("{{ .reg .pred p; setp.gt.ftz.f32 p, {a}, {b}; selp.u32 {r}, 1, 0, p; }}",
             r = out(reg32) r, a = in(reg32) a, b = in(reg32) b,
             options(pure, nomem, nostack));
    }
    r != 0
}
