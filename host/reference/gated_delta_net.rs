//! GATED_DELTA_NET reference (spec §2.10), simulating the kernel's warps: for every (s, h, col)
//! 32 lanes × 4 registers hold S[32r + l][col]; per token, per-lane fma chains from +0 are
//! combined by the butterfly [`warp_sum`], in exactly the kernel's order:
//! `γ = expf(g)`; `KV = Σ S·k`; `δ = β·fma(−γ, KV, v)`; `S_r = fma(γ, S_r, k_r·δ)`;
//! `out = (Σ S·q)·scale`; then slot `n_t−1−t` of `states` (if < K) receives S.

use super::math::{Mufu, exp, fma, mul, warp_sum};
use crate::kernels::abi::GDN_HEAD_DIM as D;
use crate::memory::HostMemory;
use crate::ops::gated_delta_net::{GatedDeltaNet, GdnShape, attention_scale};

/// State rows per lane (lane l holds rows 32·r + l).
pub const ROWS_PER_LANE: usize = D / 32;

/// One warp's registers: `lanes[l][r]` = S[32·r + l][col].
pub type Lanes = [[f32; ROWS_PER_LANE]; 32];

/// Lane `l`'s part of `Σ_i S[i][col]·x[i]`: `fma` over r = 0 … 3 from a +0 addend.
pub fn lane_dot(lane: &[f32; ROWS_PER_LANE], x: &[f32], l: usize) -> f32 {
    let mut acc = 0.0f32;
    for (r, s) in lane.iter().enumerate() {
        acc = fma(*s, x[32 * r + l], acc);
    }
    acc
}

/// One token on one column's warp (steps 3–9), `gamma` = expf(g) already taken. Returns the
/// unscaled attention output of the updated state.
pub fn token_step(lanes: &mut Lanes, k: &[f32], q: &[f32], v: f32, gamma: f32, beta: f32) -> f32 {
    let kv = warp_sum(&std::array::from_fn(|l| lane_dot(&lanes[l], k, l)));
    let delta = mul(beta, fma(-gamma, kv, v));
    for (l, lane) in lanes.iter_mut().enumerate() {
        for (r, s) in lane.iter_mut().enumerate() {
            let p = mul(k[32 * r + l], delta);
            *s = fma(gamma, *s, p);
        }
    }
    warp_sum(&std::array::from_fn(|l| lane_dot(&lanes[l], q, l)))
}

pub fn gated_delta_net(op: &GatedDeltaNet, shape: &GdnShape, mem: &mut HostMemory, mufu: &mut dyn Mufu) {
    let GdnShape { n_key_heads, n_heads, n_tokens, n_seqs, n_slots } = *shape;
    let scale = attention_scale();
    for s in 0..n_seqs {
        for h in 0..n_heads {
            let kh = h % n_key_heads;
            // cols[col] is the warp of value column col.
            let mut cols: Vec<Lanes> = (0..D)
                .map(|col| std::array::from_fn(|l| std::array::from_fn(|r| mem.read_f32(&op.state_in, [32 * r + l, col, h, s]))))
                .collect();
            for t in 0..n_tokens {
                let k: Vec<f32> = (0..D).map(|i| mem.read_f32(&op.k, [i, kh, t, s])).collect();
                let q: Vec<f32> = (0..D).map(|i| mem.read_f32(&op.q, [i, kh, t, s])).collect();
                let beta = mem.read_f32(&op.beta, [0, h, t, s]);
                // Every lane computes the same ex2 of the same argument: one evaluation.
                let gamma = exp(mem.read_f32(&op.g, [0, h, t, s]), mufu);
                for (col, lanes) in cols.iter_mut().enumerate() {
                    let v = mem.read_f32(&op.v, [col, h, t, s]);
                    let a = token_step(lanes, &k, &q, v, gamma, beta);
                    mem.write_f32(&op.out, [col, h, t, s], mul(a, scale));
                }
                let slot = n_tokens - 1 - t;
                if slot < n_slots {
                    for (col, lanes) in cols.iter().enumerate() {
                        for (l, lane) in lanes.iter().enumerate() {
                            for (r, x) in lane.iter().enumerate() {
                                mem.write_f32(&op.states, [(h * D + col) * D + 32 * r + l, s, slot, 0], *x);
                            }
                        }
                    }
                }
            }
        }
    }
}
