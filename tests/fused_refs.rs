//! The new fused ops' CPU references equal the unfused references they replace, bit for bit, on
//! random inputs salted with special values (NaN with payloads, ±Inf, ±0, subnormals, extremes):
//! MUL_MAT_VEC_PAIR_GATE against MUL_MAT_VEC_PAIR + SIGMOID + ADD + SOFTPLUS (+ MUL, or ggml's
//! fused SOFTPLUS·MUL); GATED_DELTA_NET_FROM_CACHE against GET_ROWS + GATED_DELTA_NET.

use rand::Rng;
use rgdn::ops::{MulMatVec, MulMatVecPair, MulMatVecPairGate, Precision};
use rgdn::suite::Builder;
use rgdn::suite::cases::mmvf_pair_gate::{run_both, unfused_ops};
use rgdn::suite::inputs::Values;
use rgdn::tensor::DType;

/// A random MUL_MAT_VEC_PAIR_GATE: weight type and precision, E, rows, columns drawn from `b`;
/// weights, input, dt_bias and ssm_a salted with specials one value in `every`.
fn random_gate(b: &mut Builder, every: u32) -> MulMatVecPairGate {
    let (dtype, precision) = match b.rng.random_range(0..4) {
        0 => (DType::F32, Precision::Default),
        1 => (DType::BF16, Precision::Default),
        2 => (DType::F16, Precision::Default),
        _ => (DType::F16, Precision::F32),
    };
    let e = 2 * b.rng.random_range(1..300);
    let rows = b.rng.random_range(1..40);
    let ncols = b.rng.random_range(1..=8);
    let salted = |scale| Values::WithSpecials { scale, every };
    let input = b.tensor_padded(DType::F32, [e, ncols, 1, 1], [0; 4], salted(2.0));
    let product = |b: &mut Builder| MulMatVec {
        // F16/BF16 weights: the salted f32 words split into halves — arbitrary bit patterns,
        // f16/bf16 NaNs, infinities and subnormals included.
        weight: b.tensor_padded(dtype, [e, rows, 1, 1], [0; 4], salted(1.0)),
        input,
        dst: b.output([rows, ncols, 1, 1]),
        precision,
    };
    let first = product(b);
    let second = product(b);
    MulMatVecPairGate {
        pair: MulMatVecPair { first, second },
        dt_bias: b.tensor_padded(DType::F32, [rows, 1, 1, 1], [0; 4], salted(30.0)),
        ssm_a: b.tensor_padded(DType::F32, [rows, 1, 1, 1], [0; 4], salted(16.0)),
        beta: b.output([rows, ncols, 1, 1]),
        gate: b.output([rows, ncols, 1, 1]),
    }
}

/// `words` with every NaN replaced by one quiet NaN: every other bit and every NaN's position
/// kept. Which input's payload a CPU `a + b` or `a * b` of two NaNs returns is not fixed — LLVM
/// may commute the operands, and does in optimized builds (`cargo test --release` saw the fused
/// and the unfused reference return different payloads for the same gate) — so the two
/// references can only be compared up to NaN payloads; the GPU kernels' own payloads are
/// compared bitwise, fused against unfused, by the GPU suite's twins.
fn nan_payloads_dropped(words: &[u32]) -> Vec<u32> {
    words.iter().map(|&w| if f32::from_bits(w).is_nan() { 0x7FC0_0000 } else { w }).collect()
}

#[test]
fn pair_gate_reference_equals_the_unfused_references() {
    let mut specials_seen = 0usize;
    for seed in 0..300u64 {
        for every in [1000, 7, 2] {
            let mut b = Builder::new(seed * 31 + every as u64);
            let op = random_gate(&mut b, every);
            let ncols = op.pair.first.input.ne()[1];
            for fused_softplus_mul in [false, true] {
                if fused_softplus_mul && ncols != 1 {
                    continue; // ggml fuses SOFTPLUS·MUL at n_t = 1 only (same shapes).
                }
                let unfused = unfused_ops(&op, &mut b, fused_softplus_mul);
                let (fused, chain) = run_both(&b.mem, &op, &unfused).expect("valid ops");
                for (k, name) in ["alpha", "beta_raw", "beta", "gate"].iter().enumerate() {
                    assert_eq!(
                        nan_payloads_dropped(&fused[k]),
                        nan_payloads_dropped(&chain[k]),
                        "seed {seed} every {every} {name} (fused softplus·mul {fused_softplus_mul})"
                    );
                }
                specials_seen += fused[3].iter().filter(|&&g| !f32::from_bits(g).is_finite() || g & 0x7F80_0000 == 0).count();
            }
        }
    }
    // The salted runs must reach NaN/Inf/zero/subnormal gates, or the specials proved nothing.
    assert!(specials_seen > 1000, "{specials_seen} special gate values");
}

#[test]
fn gdn_from_cache_reference_equals_get_rows_then_gdn() {
    use rgdn::ops::Op;
    use rgdn::suite::cases::gated_delta_net_from_cache::{random_op, unfused_ops};
    let mut specials_read = 0usize;
    for seed in 0..40u64 {
        let mut b = Builder::new(0x6d6e_0000 + seed);
        let op = random_op(&mut b);
        let unfused = unfused_ops(&op, &mut b);
        let mut fused = b.mem.clone();
        op.reference(&mut fused, &mut rgdn::reference::math::ExactMufu).expect("valid op");
        let mut chain = b.mem.clone();
        for o in &unfused {
            o.reference(&mut chain, &mut rgdn::reference::math::ExactMufu).expect("valid unfused op");
        }
        // Every byte of every buffer the fused op may write (the cache, out, states).
        for buf in [op.ssm_cache.buffer, op.out.buffer, op.states.buffer] {
            assert!(fused.bytes(buf) == chain.bytes(buf), "seed {seed}: buffer {buf:?} differs");
        }
        let rows = rgdn::memory::Memory::index_values(&b.mem, &op.source_rows).expect("an index buffer");
        let row_len = op.ssm_cache.ne()[0];
        specials_read += rows
            .iter()
            .flat_map(|&r| (0..row_len).map(move |e| (e, r)))
            .filter(|&(e, r)| {
                let x = b.mem.read_f32(&op.ssm_cache, [e, r as usize, 0, 0]).unwrap();
                !x.is_normal()
            })
            .count();
    }
    // The random salt must reach the state read (zeros, subnormals, NaN, ±Inf), or it proved nothing.
    assert!(specials_read > 100, "{specials_read} special state values read");
}
