//! CPU references against small hand-computed cases (run in CI, no GPU needed).

mod common;

use common::{assert_bits, f32_tensor};
use rgdn::memory::HostMemory;
use rgdn::ops::{L2Norm, Op, SsmConv};
use rgdn::reference::math::{ExactMufu, warp_sum};

fn conv(mem: &mut HostMemory, cols: &[f32], w: &[f32], bias: Option<f32>, silu: bool) -> Vec<f32> {
    let d = w.len();
    let n_t = cols.len() + 1 - d;
    let conv_input = f32_tensor(mem, [cols.len(), 1, 1, 1], cols);
    let weight = f32_tensor(mem, [d, 1, 1, 1], w);
    let bias = bias.map(|b| f32_tensor(mem, [1, 1, 1, 1], &[b]));
    let dst = f32_tensor(mem, [1, n_t, 1, 1], &vec![f32::NAN; n_t]);
    SsmConv { conv_input, weight, bias, dst, apply_silu: silu }.reference(mem, &mut ExactMufu).unwrap();
    mem.to_f32_vec(&dst).unwrap()
}

#[test]
fn ssm_conv_taps_run_from_the_oldest_column() {
    let mut mem = HostMemory::new();
    // t=0: 1·0.5 + 2·0.25 + 3·2 + 1 = 8; t=1: 2·0.5 + 3·0.25 + 4·2 + 1 = 10.75
    let y = conv(&mut mem, &[1.0, 2.0, 3.0, 4.0], &[0.5, 0.25, 2.0], Some(1.0), false);
    assert_eq!(y, vec![8.0, 10.75]);
}

#[test]
fn ssm_conv_silu_matches_the_formula() {
    let mut mem = HostMemory::new();
    let y = conv(&mut mem, &[1.0, 2.0, 3.0, 4.0], &[0.5, 0.25, 2.0], Some(1.0), true);
    for (got, u) in y.iter().zip([8.0f64, 10.75]) {
        let want = u / (1.0 + (-u).exp());
        assert!((*got as f64 - want).abs() < 4.0 * f32::EPSILON as f64 * want, "{got} vs {want}");
    }
}

#[test]
fn ssm_conv_without_bias_still_adds_plus_zero() {
    let mut mem = HostMemory::new();
    // Every product is −0 (−0·1, 0·−1): fma from +0 gives +0, and + 0 keeps it +0.
    let y = conv(&mut mem, &[-0.0, 0.0, -0.0], &[1.0, -1.0, 1.0], None, false);
    assert_bits(y[0], 0.0);
}

#[test]
fn ssm_conv_flushes_subnormal_products() {
    let mut mem = HostMemory::new();
    // 1e-30 · 1e-10 = 1e-40 is subnormal: flushed, so only 2·3 = 6 survives.
    let y = conv(&mut mem, &[1e-30, 2.0, 0.0], &[1e-10, 3.0, 5.0], None, false);
    assert_bits(y[0], 6.0);
    // A subnormal input is read as zero even against a huge weight.
    let sub = f32::from_bits(0x0000_4000);
    let y = conv(&mut mem, &[sub, 1.0, 0.0], &[1e30, 1.0, 1.0], None, false);
    assert_bits(y[0], 1.0);
}

#[test]
fn ssm_conv_fma_chain_rounds_once_per_tap() {
    let mut mem = HostMemory::new();
    // Tap 0 gives −1; tap 1 adds (1 + 2^-23)(1 − 2^-23) = 1 − 2^-46 in one rounding, so
    // −2^-46 survives (a rounded product would be 1.0 and the sum 0).
    let a = f32::from_bits(0x3F80_0001);
    let b = f32::from_bits(0x3F7F_FFFE);
    let y = conv(&mut mem, &[1.0, a, 0.0], &[-1.0, b, 0.0], None, false);
    assert_bits(y[0], -(2.0f32).powi(-46));
}

fn l2(mem: &mut HostMemory, cols: &[f32], eps: f32) -> Vec<f32> {
    let src = f32_tensor(mem, [cols.len(), 1, 1, 1], cols);
    let dst = f32_tensor(mem, [cols.len(), 1, 1, 1], &vec![f32::NAN; cols.len()]);
    L2Norm { src, dst, eps }.reference(mem, &mut ExactMufu).unwrap();
    mem.to_f32_vec(&dst).unwrap()
}

#[test]
fn l2_norm_scales_to_unit_length() {
    let mut mem = HostMemory::new();
    assert_eq!(l2(&mut mem, &[3.0, 4.0], 1e-6), vec![0.6, 0.8]);
}

#[test]
fn l2_norm_floors_the_sum_at_eps_squared() {
    let mut mem = HostMemory::new();
    let y = l2(&mut mem, &[0.0, -0.0, 0.0], 1e-6);
    assert_bits(y[0], 0.0);
    assert_bits(y[1], -0.0);
    // Σx² = 1e-14 < eps² = 1e-12: the scale is rsqrt(eps²) = 1e6, not 1e7.
    let y = l2(&mut mem, &[1e-7], 1e-6);
    assert!((y[0] - 0.1).abs() < 1e-7, "{}", y[0]);
}

#[test]
fn l2_norm_sums_lanes_in_butterfly_order() {
    let mut mem = HostMemory::new();
    // Column 0 = 4096 (x² = 2^24) and 32 ones (columns 1..=32). Lane 0 holds 4096² + 1 → 2^24
    // (tie to even), lanes 1..31 hold 1. Butterfly: 2^24+1 → 2^24, +2, +4, +8, +16 = 2^24 + 30,
    // not the true 2^24 + 32.
    let mut cols = vec![1.0f32; 33];
    cols[0] = 4096.0;
    let mut lanes = [1.0f32; 32];
    lanes[0] = 16_777_216.0;
    assert_eq!(warp_sum(&lanes), 16_777_246.0);
    let y = l2(&mut mem, &cols, 1e-6);
    let scale = (1.0 / 16_777_246.0f64.sqrt()) as f32;
    assert_bits(y[0], scale * 4096.0);
    assert_bits(y[32], scale);
}
