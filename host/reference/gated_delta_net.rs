//! GATED_DELTA_NET reference (spec §2.10), simulating the kernel's warps: for every (s, h, col)
//! 32 lanes × 4 registers hold `S[32r + l][col]`; per token, per-lane fma chains from +0 are
//! combined by the butterfly [`warp_sum`], in exactly the kernel's order:
//! `γ = expf(g)`; `KV = Σ S·k`; `δ = β·fma(−γ, KV, v)`; `S_r = fma(γ, S_r, k_r·δ)`;
//! `out = (Σ S·q)·scale`; then slot `n_t−1−t` of `states` (if < K) receives S.

use super::math::{Mufu, exp, fma, mul, warp_sum};
use crate::kernels::abi::GDN_HEAD_DIM as D;
use crate::memory::HostMemory;
use crate::ops::gated_delta_net::{GatedDeltaNet, GdnShape, attention_scale};

/// State rows per lane (lane l holds rows 32·r + l).
pub const ROWS_PER_LANE: usize = D / 32;

/// One warp's registers: `lanes[l][r]` = `S[32·r + l][col]`.
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

/// CPU reference of [`GatedDeltaNet`] in the kernel's float-op order (`op` validated).
pub fn gated_delta_net(op: &GatedDeltaNet, shape: &GdnShape, mem: &mut HostMemory, mufu: &mut dyn Mufu) {
    let state_in = op.state_in;
    gated_delta_net_with_state(op, shape, mem, mufu, &|mem, i| mem.read_f32(&state_in, i));
}

/// [gdn-from-cache] GATED_DELTA_NET_FROM_CACHE: sequence s's initial state is row
/// `source_rows[s]` of `ssm_cache`, every selected row read into a temporary FIRST (GET_ROWS'
/// copy, bits unchanged), then the GATED_DELTA_NET reference runs on it — GET_ROWS +
/// GATED_DELTA_NET by construction, whatever the kernel then writes over the cache.
pub fn gated_delta_net_from_cache(
    op: &crate::ops::gated_delta_net::GatedDeltaNetFromCache,
    shape: &GdnShape,
    source_rows: &[i32],
    mem: &mut HostMemory,
    mufu: &mut dyn Mufu,
) {
    let row_len = D * D * shape.n_heads;
    // GET_ROWS: dst row s = cache row source_rows[s], as u32 bit patterns.
    let gathered: Vec<Vec<u32>> =
        source_rows.iter().map(|&r| (0..row_len).map(|e| mem.read_u32(&op.ssm_cache, [e, r as usize, 0, 0])).collect()).collect();
    let views = op.as_gated_delta_net();
    gated_delta_net_with_state(&views, shape, mem, mufu, &|_, [i, col, h, s]| f32::from_bits(gathered[s][(h * D + col) * D + i]));
}

/// The GATED_DELTA_NET reference with element (i, col, h, s) of the initial state given by
/// `state_in` (`op.state_in` is not read).
pub fn gated_delta_net_with_state(
    op: &GatedDeltaNet,
    shape: &GdnShape,
    mem: &mut HostMemory,
    mufu: &mut dyn Mufu,
    state_in: &dyn Fn(&HostMemory, [usize; 4]) -> f32,
) {
    let GdnShape { n_key_heads, n_heads, n_tokens, n_seqs, n_slots } = *shape;
    let scale = attention_scale();
    for s in 0..n_seqs {
        for h in 0..n_heads {
            let kh = h % n_key_heads;
            // cols[col] is the warp of value column col.
            let mut cols: Vec<Lanes> =
                (0..D).map(|col| std::array::from_fn(|l| std::array::from_fn(|r| state_in(mem, [32 * r + l, col, h, s])))).collect();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::Op;
    use crate::ops::gated_delta_net::{SENTINEL, contiguous_op};
    use crate::reference::math::{ExactMufu, MufuOp};

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

    fn fill(mem: &mut HostMemory, t: &crate::tensor::Tensor, f: impl Fn([usize; 4]) -> f32) {
        let idx: Vec<_> = t.layout.indices().collect();
        for i in idx {
            mem.write_f32(t, i, f(i));
        }
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

    #[test]
    fn lane_l_holds_rows_32r_plus_l_summed_by_the_butterfly() {
        // S[0] = 1e8 and S[32] = 1 share lane 0 (1e8 + 1 rounds to 1e8), S[1] = −1e8 is lane 1:
        // KV = 0. (Rows 4l + r would put S[0] and S[1] together and give KV = 1; a plain
        // sequential sum would give 1 too.) With k = 1, γ = β = 1, v = 5: δ = 5 − KV, which
        // lands in S[2] = 0 + δ.
        let mut mem = HostMemory::new();
        let op = contiguous_op(&mut mem, 1, 1, 1, 1, 1);
        fill(&mut mem, &op.state_in, |i| match i[0] {
            0 => 1e8,
            32 => 1.0,
            1 => -1e8,
            _ => 0.0,
        });
        fill(&mut mem, &op.k, |_| 1.0);
        fill(&mut mem, &op.beta, |_| 1.0);
        fill(&mut mem, &op.v, |_| 5.0);
        op.reference(&mut mem, &mut ExactMufu).unwrap();
        assert_eq!(mem.read_f32(&op.states, [40 * D + 2, 0, 0, 0]), 5.0);
    }

    #[test]
    fn one_token_from_a_zero_state() {
        // S = 0, k = e_0, q = 2·e_0, g = 0 (γ = ex2(0) = 1), β = 0.5, v[col] = col:
        // δ = v/2, S[0][col] = col/2 and every other entry +0, out[col] = col·scale.
        let mut mem = HostMemory::new();
        let op = contiguous_op(&mut mem, 1, 1, 1, 1, 1);
        fill(&mut mem, &op.k, |i| if i[0] == 0 { 1.0 } else { 0.0 });
        fill(&mut mem, &op.q, |i| if i[0] == 0 { 2.0 } else { 0.0 });
        fill(&mut mem, &op.beta, |_| 0.5);
        fill(&mut mem, &op.v, |i| i[0] as f32);
        op.reference(&mut mem, &mut ExactMufu).unwrap();
        let scale = attention_scale();
        for col in 0..D {
            assert_eq!(mem.read_f32(&op.out, [col, 0, 0, 0]), col as f32 * scale);
            for i in 0..D {
                let want = if i == 0 { col as f32 / 2.0 } else { 0.0 };
                assert_eq!(mem.read_u32(&op.states, [col * D + i, 0, 0, 0]), want.to_bits(), "S[{i}][{col}]");
            }
        }
    }

    /// γ = β = 1 and k = e_0 make S[0][col] ← v exactly; v = t + 1 at token t.
    fn counting_tokens(mem: &mut HostMemory, op: &GatedDeltaNet) {
        fill(mem, &op.k, |i| if i[0] == 0 { 1.0 } else { 0.0 });
        fill(mem, &op.q, |i| if i[0] == 0 { 1.0 } else { 0.0 });
        fill(mem, &op.beta, |_| 1.0);
        fill(mem, &op.v, |i| (i[2] + 1) as f32);
    }

    #[test]
    fn slot_k_holds_the_state_after_token_n_t_minus_1_minus_k_and_later_slots_stay() {
        // n_t = 3, K = 5: slots 0, 1, 2 get the states after tokens 2, 1, 0 (S[0] = 3, 2, 1);
        // slots 3 and 4 keep the sentinel.
        let mut mem = HostMemory::new();
        let op = contiguous_op(&mut mem, 1, 1, 3, 1, 5);
        counting_tokens(&mut mem, &op);
        op.reference(&mut mem, &mut ExactMufu).unwrap();
        for col in [0, 77, D - 1] {
            for slot in 0..5 {
                let got = mem.read_u32(&op.states, [col * D, 0, slot, 0]);
                let want = if slot < 3 { ((3 - slot) as f32).to_bits() } else { SENTINEL };
                assert_eq!(got, want, "slot {slot}, col {col}");
            }
            for t in 0..3 {
                assert_eq!(mem.read_f32(&op.out, [col, 0, t, 0]), (t + 1) as f32 * attention_scale());
            }
        }
        // K < n_t: only the newest K states are kept.
        let op = contiguous_op(&mut mem, 1, 1, 3, 1, 2);
        counting_tokens(&mut mem, &op);
        op.reference(&mut mem, &mut ExactMufu).unwrap();
        assert_eq!(mem.read_f32(&op.states, [5 * D, 0, 0, 0]), 3.0);
        assert_eq!(mem.read_f32(&op.states, [5 * D, 0, 1, 0]), 2.0);
    }

    #[test]
    fn cache_slots_are_rows_m_apart_and_other_rows_stay() {
        // Two sequences, M = 3 cells per group, kv_head = 1, K = 2, n_t = 1: only slot 0 is
        // written, at rows 1 and 2; rows 0, 3, 4, 5 keep their bytes.
        let mut mem = HostMemory::new();
        let mut op = contiguous_op(&mut mem, 1, 1, 1, 2, 2);
        let row = D * D;
        let cache = mem.alloc_tensor(crate::tensor::DType::F32, [row, 6, 1, 1]);
        mem.bytes_mut(cache.buffer).chunks_exact_mut(4).for_each(|w| w.copy_from_slice(&SENTINEL.to_le_bytes()));
        op.states = cache.view([row, 2, 2, 1], [4, 4 * row, 12 * row, 24 * row], 4 * row);
        counting_tokens(&mut mem, &op);
        op.reference(&mut mem, &mut ExactMufu).unwrap();
        for r in 0..6 {
            let got = mem.read_u32(&cache, [3 * D, r, 0, 0]); // S[0][3]
            assert_eq!(got, if r == 1 || r == 2 { 1f32.to_bits() } else { SENTINEL }, "row {r}");
        }
    }

    #[test]
    fn value_head_h_uses_key_head_h_mod_h_k() {
        // H_k = 2, H_v = 3: key head kh has k = q = e_kh, so head 2 (key head 0) writes S[0]
        // and head 1 writes S[1].
        let mut mem = HostMemory::new();
        let op = contiguous_op(&mut mem, 2, 3, 1, 1, 1);
        fill(&mut mem, &op.k, |i| if i[0] == i[1] { 1.0 } else { 0.0 });
        fill(&mut mem, &op.q, |i| if i[0] == i[1] { 1.0 } else { 0.0 });
        fill(&mut mem, &op.beta, |_| 1.0);
        fill(&mut mem, &op.v, |i| (i[1] + 1) as f32);
        op.reference(&mut mem, &mut ExactMufu).unwrap();
        let s = |h: usize, i: usize| mem.read_f32(&op.states, [(h * D + 9) * D + i, 0, 0, 0]);
        assert_eq!((s(0, 0), s(0, 1)), (1.0, 0.0));
        assert_eq!((s(1, 0), s(1, 1)), (0.0, 2.0));
        assert_eq!((s(2, 0), s(2, 1)), (3.0, 0.0));
    }

    #[test]
    fn a_gate_of_minus_infinity_forgets_the_state() {
        // γ = ex2(−Inf) = 0: KV = 3 is multiplied by −0, δ = v = 2, S ← 0·S + k·δ.
        let mut mem = HostMemory::new();
        let op = contiguous_op(&mut mem, 1, 1, 1, 1, 1);
        fill(&mut mem, &op.state_in, |_| 3.0);
        fill(&mut mem, &op.k, |i| if i[0] == 0 { 1.0 } else { 0.0 });
        fill(&mut mem, &op.q, |i| if i[0] == 0 { 1.0 } else { 0.0 });
        fill(&mut mem, &op.g, |_| f32::NEG_INFINITY);
        fill(&mut mem, &op.beta, |_| 1.0);
        fill(&mut mem, &op.v, |_| 2.0);
        op.reference(&mut mem, &mut ExactMufu).unwrap();
        assert_eq!(mem.read_f32(&op.states, [0, 0, 0, 0]), 2.0);
        assert_eq!(mem.read_u32(&op.states, [1, 0, 0, 0]), 0);
        assert_eq!(mem.read_f32(&op.out, [0, 0, 0, 0]), 2.0 * attention_scale());
    }

    #[test]
    fn subnormal_state_and_queries_are_flushed() {
        // γ = 1 (g = 0), β = 1, v = 0, k = 0: a subnormal S leaves as +0 (fma.ftz), and a
        // subnormal q makes the output +0 even against S = 1.
        let sub = f32::from_bits(0x8000_0400);
        let mut mem = HostMemory::new();
        let op = contiguous_op(&mut mem, 1, 1, 1, 1, 1);
        fill(&mut mem, &op.state_in, |i| if i[1] == 0 { sub } else { 1.0 });
        fill(&mut mem, &op.q, |_| -sub);
        fill(&mut mem, &op.beta, |_| 1.0);
        op.reference(&mut mem, &mut ExactMufu).unwrap();
        assert_eq!(mem.read_u32(&op.states, [0, 0, 0, 0]), 0);
        assert_eq!(mem.read_u32(&op.states, [D + 5, 0, 0, 0]), 1f32.to_bits());
        assert_eq!(mem.read_u32(&op.out, [1, 0, 0, 0]), 0);
    }

    #[test]
    fn ex2_is_taken_once_per_head_and_token_of_g_times_log2e() {
        // The MUFU argument is mul.ftz(g, log2 e); record what the reference asks for.
        struct Recorder(Vec<(MufuOp, u32)>);
        impl Mufu for Recorder {
            fn eval(&mut self, op: MufuOp, x: f32) -> f32 {
                self.0.push((op, x.to_bits()));
                1.0
            }
        }
        let mut mem = HostMemory::new();
        let op = contiguous_op(&mut mem, 1, 2, 3, 1, 1);
        fill(&mut mem, &op.g, |i| -0.5 * (1 + i[1] + 2 * i[2]) as f32);
        let mut rec = Recorder(Vec::new());
        op.reference(&mut mem, &mut rec).unwrap();
        let mut want: Vec<_> = (0..2)
            .flat_map(|h| (0..3).map(move |t| (MufuOp::Ex2, (-0.5 * (1 + h + 2 * t) as f32 * f32::from_bits(0x3FB8_AA3B)).to_bits())))
            .collect();
        want.sort();
        rec.0.sort();
        assert_eq!(rec.0, want);
    }
}
