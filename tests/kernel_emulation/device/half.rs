//! f16 conversions and the packed f16 fma, as the CPU reference computes them (IEEE binary16
//! with subnormals, one rounding: `rgdn::reference::mmvf`).

use rgdn::reference::mmvf::{f16_to_f32 as to_f32, f32_to_f16_rn as to_f16, fma_f16};

pub fn f32_to_f16_rn(x: f32) -> u16 {
    to_f16(x)
}
pub fn f16_to_f32(h: u16) -> f32 {
    to_f32(h)
}
pub fn pack_f16x2(lo: u16, hi: u16) -> u32 {
    (lo as u32) | ((hi as u32) << 16)
}
pub fn fma_f16x2(a: u32, b: u32, c: u32) -> u32 {
    let lo = fma_f16(a as u16, b as u16, c as u16);
    let hi = fma_f16((a >> 16) as u16, (b >> 16) as u16, (c >> 16) as u16);
    pack_f16x2(lo, hi)
}
