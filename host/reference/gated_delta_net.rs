//! GATED_DELTA_NET reference (spec §2.10), simulating the kernel's warps: for every (s, h, col)
//! 32 lanes × 4 registers hold `S[32r + l][col]`; per token, per-lane fma chains from +0 are
//! combined by the butterfly [`warp_sum`], in exactly the kernel's order:
//! `γ = expf(g)`; `KV = Σ S·k`; `δ = β·fma(−γ, KV, v)`; `S_r = fma(γ, S_r, k_r·δ)`;
//! `out = (Σ S·q)·scale`; then slot `n_t−1−t` of `states` (if < K) receives S.

use super::math::{Mufu, exp, fma, mul, warp_sum};
use crate::error::Result;
use crate::kernels::abi::GDN_HEAD_DIM as D;
use crate::memory::HostMemory;
use crate::tensor::Tensor;

/// The views the GATED_DELTA_NET reference reads and writes (a validated op's; the initial
/// state is given separately): q, k `[D, H_k, n_t, n_s]`; v `[D, H_v, n_t, n_s]`; g, beta
/// `[1, H_v, n_t, n_s]`; out like v; states `[D·D·H_v, n_s, K]`.
#[derive(Clone, Copy, Debug)]
pub struct GdnViews {
    /// Queries.
    pub q: Tensor,
    /// Keys.
    pub k: Tensor,
    /// Values.
    pub v: Tensor,
    /// Gate (log decay) per head and token.
    pub g: Tensor,
    /// Beta per head and token.
    pub beta: Tensor,
    /// Attention output.
    pub out: Tensor,
    /// Snapshot slots of the state.
    pub states: Tensor,
}

/// State rows per lane (lane l holds rows 32·r + l).
pub const ROWS_PER_LANE: usize = D / 32;

/// One warp's registers: `lanes[l][r]` = `S[32·r + l][col]`.
pub type Lanes = [[f32; ROWS_PER_LANE]; 32];

/// The warps of one head's state, `cols[col][l][r]` = `state(32·r + l, col)` (the state's
/// element (i, col) of that head), or the first error `state` returns.
pub fn read_lanes(mut state: impl FnMut(usize, usize) -> Result<f32>) -> Result<Vec<Lanes>> {
    let mut cols = vec![[[0.0f32; ROWS_PER_LANE]; 32]; D];
    for (col, lanes) in cols.iter_mut().enumerate() {
        for (l, lane) in lanes.iter_mut().enumerate() {
            for (r, x) in lane.iter_mut().enumerate() {
                *x = state(32 * r + l, col)?;
            }
        }
    }
    Ok(cols)
}

/// Lane `l`'s part of `Σ_i S[i][col]·x[i]`: `fma` over r = 0 … 3 from a +0 addend.
pub fn lane_dot(lane: &[f32; ROWS_PER_LANE], x: &[f32], l: usize) -> f32 {
    let mut acc = 0.0f32;
    for (r, s) in lane.iter().enumerate() {
        acc = fma(*s, x[32 * r + l], acc);
    }
    acc
}

/// The state update of one token on one column's warp (steps 3–8), `gamma` = expf(g) already
/// taken: `KV = Σ S·k`, `δ = β·fma(−γ, KV, v)`, `S_r = fma(γ, S_r, k_r·δ)`. [`token_step`] is
/// this update followed by the output sum; exact replay (`super::replay`) runs the update alone.
pub fn token_update(lanes: &mut Lanes, k: &[f32], v: f32, gamma: f32, beta: f32) {
    let kv = warp_sum(&std::array::from_fn(|l| lane_dot(&lanes[l], k, l)));
    let delta = mul(beta, fma(-gamma, kv, v));
    for (l, lane) in lanes.iter_mut().enumerate() {
        for (r, s) in lane.iter_mut().enumerate() {
            let p = mul(k[32 * r + l], delta);
            *s = fma(gamma, *s, p);
        }
    }
}

/// One token on one column's warp (steps 3–9), `gamma` = expf(g) already taken: the update
/// ([`token_update`]), then the unscaled attention output `Σ S·q` of the updated state.
pub fn token_step(lanes: &mut Lanes, k: &[f32], q: &[f32], v: f32, gamma: f32, beta: f32) -> f32 {
    token_update(lanes, k, v, gamma, beta);
    warp_sum(&std::array::from_fn(|l| lane_dot(&lanes[l], q, l)))
}

/// CPU reference of GATED_DELTA_NET in the kernel's float-op order (views validated; `scale`
/// the attention scale the op passes its kernel), the initial state read from `state_in`.
pub fn gated_delta_net(op: &GdnViews, state_in: &Tensor, scale: f32, mem: &mut HostMemory, mufu: &mut dyn Mufu) -> Result<()> {
    gated_delta_net_with_state(op, scale, mem, mufu, &|mem, i| mem.read_f32(state_in, i))
}

/// [gdn-from-cache] GATED_DELTA_NET_FROM_CACHE: sequence s's initial state is row
/// `source_rows[s]` of `ssm_cache`, every selected row read into a temporary FIRST (GET_ROWS'
/// copy, bits unchanged), then the GATED_DELTA_NET reference runs on it — GET_ROWS +
/// GATED_DELTA_NET by construction, whatever the kernel then writes over the cache.
pub fn gated_delta_net_from_cache(
    op: &GdnViews,
    ssm_cache: &Tensor,
    source_rows: &[i32],
    scale: f32,
    mem: &mut HostMemory,
    mufu: &mut dyn Mufu,
) -> Result<()> {
    let row_len = D * D * op.v.ne()[1];
    // GET_ROWS: dst row s = cache row source_rows[s], as u32 bit patterns.
    let gathered: Vec<Vec<u32>> = source_rows
        .iter()
        .map(|&r| (0..row_len).map(|e| mem.read_u32(ssm_cache, [e, r as usize, 0, 0])).collect())
        .collect::<Result<_>>()?;
    gated_delta_net_with_state(op, scale, mem, mufu, &|_, [i, col, h, s]| Ok(f32::from_bits(gathered[s][(h * D + col) * D + i])))
}

/// The GATED_DELTA_NET reference with element (i, col, h, s) of the initial state given by
/// `state_in` (its first error is returned).
pub fn gated_delta_net_with_state(
    op: &GdnViews,
    scale: f32,
    mem: &mut HostMemory,
    mufu: &mut dyn Mufu,
    state_in: &dyn Fn(&HostMemory, [usize; 4]) -> Result<f32>,
) -> Result<()> {
    let [_, n_key_heads, n_tokens, n_seqs] = op.q.ne();
    let n_heads = op.v.ne()[1];
    let n_slots = op.states.ne()[2];
    for s in 0..n_seqs {
        for h in 0..n_heads {
            let kh = h % n_key_heads;
            // cols[col] is the warp of value column col.
            let mut cols = read_lanes(|i, col| state_in(mem, [i, col, h, s]))?;
            for t in 0..n_tokens {
                let k: Vec<f32> = (0..D).map(|i| mem.read_f32(&op.k, [i, kh, t, s])).collect::<Result<_>>()?;
                let q: Vec<f32> = (0..D).map(|i| mem.read_f32(&op.q, [i, kh, t, s])).collect::<Result<_>>()?;
                let beta = mem.read_f32(&op.beta, [0, h, t, s])?;
                // Every lane computes the same ex2 of the same argument: one evaluation.
                let gamma = exp(mem.read_f32(&op.g, [0, h, t, s])?, mufu);
                for (col, lanes) in cols.iter_mut().enumerate() {
                    let v = mem.read_f32(&op.v, [col, h, t, s])?;
                    let a = token_step(lanes, &k, &q, v, gamma, beta);
                    mem.write_f32(&op.out, [col, h, t, s], mul(a, scale))?;
                }
                let slot = n_tokens - 1 - t;
                if slot < n_slots {
                    for (col, lanes) in cols.iter().enumerate() {
                        for (l, lane) in lanes.iter().enumerate() {
                            for (r, x) in lane.iter().enumerate() {
                                mem.write_f32(&op.states, [(h * D + col) * D + 32 * r + l, s, slot, 0], *x)?;
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const P23: f32 = 1.0 / (1u32 << 23) as f32; // 2^-23
    const P22: f32 = 2.0 * P23;

    fn one_hot(i: usize, x: f32) -> Vec<f32> {
        let mut e = vec![0.0; D];
        e[i] = x;
        e
    }

    /// A warp whose only non-zero register is S[row][col] = x (lane row mod 32, register
    /// row / 32).
    fn lanes_with(row: usize, x: f32) -> Lanes {
        let mut lanes = [[0.0; ROWS_PER_LANE]; 32];
        lanes[row % 32][row / 32] = x;
        lanes
    }

    #[test]
    fn the_v_correction_is_one_fma() {
        // γ·KV = (1 + 2^-23)(1 − 2^-23) = 1 − 2^-46: rounded first it is 1.0 and v − 1 = 0;
        // fused, u = 2^-46 survives and lands in S[1] through k[1]·δ.
        let mut lanes = lanes_with(0, 1.0 - P23);
        let (mut k, q) = (one_hot(0, 1.0), one_hot(1, 1.0));
        k[1] = 1.0;
        let a = token_step(&mut lanes, &k, &q, 1.0, 1.0 + P23, 1.0);
        assert_eq!(a, 2f32.powi(-46));
        assert_eq!(lanes[1][0], 2f32.powi(-46));
        assert_eq!(lanes[0][0], 1.0); // γ·S + 2^-46 = 1 − 2^-46 + 2^-46, one rounding
    }

    #[test]
    fn k_delta_is_rounded_before_the_fused_decay() {
        // S = −(1 + 2^-22), k = 1 + 2^-23, γ = 1, β = 1, v = −2^-22:
        // KV = −(1 + 3·2^-23) (rounded), u = v − KV = 1 + 2^-23 = δ,
        // k·δ = 1 + 2^-22 + 2^-46 rounds to 1 + 2^-22, and fma(γ, S, that) = +0 exactly.
        // Fusing k·δ instead (fma(k, δ, γ·S)) would leave 2^-46.
        let mut lanes = lanes_with(0, -(1.0 + P22));
        let a = token_step(&mut lanes, &one_hot(0, 1.0 + P23), &one_hot(0, 1.0), -P22, 1.0, 1.0);
        assert_eq!(lanes[0][0].to_bits(), 0);
        assert_eq!(a.to_bits(), 0);
    }
}
