//! The CPU references' tests that run them through their ops (the op validates, derives its
//! sizes, then calls its reference). They live on the ops side so that `host/reference/`
//! imports nothing from `host/ops/`: the dependency runs one way, op → reference.

/// [`crate::reference::binary`] through its op.
mod binary {
    use crate::memory::HostMemory;
    use crate::ops::{Binary, BinaryKind, Op};
    use crate::reference::math::ExactMufu;
    use crate::tensor::DType;

    fn run(kind: BinaryKind, a: &[f32], ne: [usize; 4], b: &[f32], ne_b: [usize; 4]) -> Vec<f32> {
        let mut mem = HostMemory::new();
        let (ta, tb, dst) = (mem.alloc_tensor(DType::F32, ne), mem.alloc_tensor(DType::F32, ne_b), mem.alloc_tensor(DType::F32, ne));
        mem.fill_f32(&ta, a).unwrap();
        mem.fill_f32(&tb, b).unwrap();
        Binary { kind, a: ta, b: tb, dst }.reference(&mut mem, &mut ExactMufu).unwrap();
        mem.to_f32_vec(&dst).unwrap()
    }

    #[test]
    fn b_repeats_over_a_by_modulo() {
        // a [2, 3], b [2, 1]: row h of every token gets bias[h].
        let y = run(BinaryKind::Add, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3, 1, 1], &[10.0, 20.0], [2, 1, 1, 1]);
        assert_eq!(y, vec![11.0, 22.0, 13.0, 24.0, 15.0, 26.0]);
        let y = run(BinaryKind::Mul, &[1.0, 2.0, 3.0, 4.0], [2, 2, 1, 1], &[-1.0, 0.5], [2, 1, 1, 1]);
        assert_eq!(y, vec![-1.0, 1.0, -3.0, 2.0]);
    }

    #[test]
    fn results_flush_to_zero() {
        let tiny = f32::from_bits(0x0080_0000); // smallest normal
        let y = run(BinaryKind::Mul, &[tiny], [1, 1, 1, 1], &[0.5], [1, 1, 1, 1]);
        assert_eq!(y[0].to_bits(), 0);
        let y = run(BinaryKind::Add, &[tiny], [1, 1, 1, 1], &[-f32::from_bits(0x0080_0001)], [1, 1, 1, 1]);
        assert_eq!(y[0].to_bits(), 0x8000_0000);
    }

    #[test]
    fn refuses_shapes_that_do_not_broadcast() {
        let mut mem = HostMemory::new();
        let (a, b, dst) = (
            mem.alloc_tensor(DType::F32, [4, 2, 1, 1]),
            mem.alloc_tensor(DType::F32, [3, 1, 1, 1]),
            mem.alloc_tensor(DType::F32, [4, 2, 1, 1]),
        );
        let op = Binary { kind: BinaryKind::Add, a, b, dst };
        assert!(matches!(op.validate(&mem), Err(crate::Error::Shape { arg: "b", .. })));
        // dst shifted by one element over a: partial overlap.
        let big = mem.alloc_tensor(DType::F32, [9, 1, 1, 1]);
        let (a, dst) = (big.view([8, 1, 1, 1], big.layout.nb, 0), big.view([8, 1, 1, 1], big.layout.nb, 4));
        let b = mem.alloc_tensor(DType::F32, [8, 1, 1, 1]);
        let op = Binary { kind: BinaryKind::Mul, a, b, dst };
        assert!(matches!(op.validate(&mem), Err(crate::Error::Aliasing { a: "dst", b: "a", .. })));
    }
}

/// [`crate::reference::concat`] through its op.
mod concat {
    use crate::memory::HostMemory;
    use crate::ops::{ConcatDim0, Op};
    use crate::reference::math::ExactMufu;
    use crate::tensor::DType;

    #[test]
    fn conv_state_then_transposed_tokens_per_channel() {
        let mut mem = HostMemory::new();
        // conv state (d_conv − 1 = 2 columns) of C = 3 channels: channel c holds [10c, 10c + 1].
        let a = mem.alloc_tensor(DType::F32, [2, 3, 1, 1]);
        mem.fill_f32(&a, &[0.0, 1.0, 10.0, 11.0, 20.0, 21.0]).unwrap();
        // Projection row-major [t][c] for n_t = 2: token t of channel c is 100 + 10t + c.
        let proj = mem.alloc_tensor(DType::F32, [3, 2, 1, 1]);
        mem.fill_f32(&proj, &[100.0, 101.0, 102.0, 110.0, 111.0, 112.0]).unwrap();
        let dst = mem.alloc_tensor(DType::F32, [4, 3, 1, 1]);
        ConcatDim0 { a, b: proj.transpose(), dst }.reference(&mut mem, &mut ExactMufu).unwrap();
        #[rustfmt::skip]
        let want = vec![
            0.0, 1.0, 100.0, 110.0,
            10.0, 11.0, 101.0, 111.0,
            20.0, 21.0, 102.0, 112.0,
        ];
        assert_eq!(mem.to_f32_vec(&dst).unwrap(), want);
    }

    #[test]
    fn padded_views_and_nan_payloads() {
        let mut mem = HostMemory::new();
        // a: 1 column of 2 rows with stride 2 (padding 9); b: 1 column; dst rows padded to 3.
        let abuf = mem.alloc_tensor(DType::F32, [2, 2, 1, 1]);
        mem.fill_f32(&abuf, &[1.0, 9.0, 2.0, 9.0]).unwrap();
        let a = abuf.view([1, 2, 1, 1], [4, 8, 16, 16], 0);
        let b = mem.alloc_tensor(DType::F32, [1, 2, 1, 1]);
        mem.write_u32(&b, [0, 0, 0, 0], 0x7FC0_0ABC).unwrap();
        mem.write_u32(&b, [0, 1, 0, 0], 0x8000_0001).unwrap();
        let dbuf = mem.alloc_tensor(DType::F32, [3, 2, 1, 1]);
        mem.fill_f32(&dbuf, &[7.0; 6]).unwrap();
        let dst = dbuf.view([2, 2, 1, 1], [4, 12, 24, 24], 0);
        ConcatDim0 { a, b, dst }.reference(&mut mem, &mut ExactMufu).unwrap();
        let all: Vec<u32> = mem.to_f32_vec(&dbuf).unwrap().iter().map(|v| v.to_bits()).collect();
        let want = [1.0f32.to_bits(), 0x7FC0_0ABC, 7.0f32.to_bits(), 2.0f32.to_bits(), 0x8000_0001, 7.0f32.to_bits()];
        assert_eq!(all, want);
    }
}

/// [`crate::reference::cpy`] through its op.
mod cpy {
    use crate::memory::HostMemory;
    use crate::ops::{Cpy, CpySnapshots, Op};
    use crate::reference::math::ExactMufu;
    use crate::tensor::{DType, Tensor};

    /// conv_input ne [d_conv−1+n_t, C, n_s] holding `1000·s + 100·c + col` (exact in f32).
    fn conv_input(mem: &mut HostMemory, cols: usize, channels: usize, seqs: usize) -> Tensor {
        let t = mem.alloc_tensor(DType::F32, [cols, channels, seqs, 1]);
        let v: Vec<f32> = t.layout.indices().map(|[col, c, s, _]| (1000 * s + 100 * c + col) as f32).collect();
        mem.fill_f32(&t, &v).unwrap();
        t
    }

    /// The spec's window(o): ne [d_conv−1, C, n_s] of conv_input, starting at column o.
    fn window(x: &Tensor, state_len: usize, o: usize) -> Tensor {
        let nb = x.layout.nb;
        x.view([state_len, x.ne()[1], x.ne()[2], 1], [4, nb[1], nb[2], nb[3]], 4 * o)
    }

    /// The spec's dst(slot): ne [(d_conv−1)·C, n_s] rows of the cache from `first`.
    fn dst_rows(cache: &Tensor, first: usize, n_s: usize) -> Tensor {
        let nb = cache.layout.nb;
        cache.view([cache.ne()[0], n_s, 1, 1], [4, nb[1], nb[1] * n_s, nb[1] * n_s], first * nb[1])
    }

    #[test]
    fn cpy_writes_a_window_channel_major_into_a_cache_row() {
        let mut mem = HostMemory::new();
        // d_conv = 3 (2 state columns), C = 2, n_t = 2: columns 0..4 per channel.
        let x = conv_input(&mut mem, 4, 2, 1);
        let cache = mem.alloc_tensor(DType::F32, [4, 3, 1, 1]);
        mem.fill_f32(&cache, &[-1.0; 12]).unwrap();
        Cpy { src: window(&x, 2, 1), dst: dst_rows(&cache, 1, 1) }.reference(&mut mem, &mut ExactMufu).unwrap();
        // Row 1 = [c0: col 1, col 2, c1: col 1, col 2]; rows 0 and 2 untouched.
        #[rustfmt::skip]
        let want = vec![
            -1.0, -1.0, -1.0, -1.0,
            1.0, 2.0, 101.0, 102.0,
            -1.0, -1.0, -1.0, -1.0,
        ];
        assert_eq!(mem.to_f32_vec(&cache).unwrap(), want);
    }

    #[test]
    fn cpy_pairs_elements_by_logical_order_across_shapes() {
        let mut mem = HostMemory::new();
        // src: the transpose of a row-major 2×3 matrix [[0,1,2],[3,4,5]] → logical order
        // 0, 3, 1, 4, 2, 5, written into a contiguous [2, 3] destination.
        let m = mem.alloc_tensor(DType::F32, [3, 2, 1, 1]);
        mem.fill_f32(&m, &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
        let dst = mem.alloc_tensor(DType::F32, [2, 3, 1, 1]);
        Cpy { src: m.transpose(), dst }.reference(&mut mem, &mut ExactMufu).unwrap();
        assert_eq!(mem.to_f32_vec(&dst).unwrap(), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        // And into a [6, 1, 1, 1] destination with a stride of 2 elements.
        let buf = mem.alloc_tensor(DType::F32, [12, 1, 1, 1]);
        let dst = buf.view([6, 1, 1, 1], [8, 48, 48, 48], 4);
        Cpy { src: m, dst }.reference(&mut mem, &mut ExactMufu).unwrap();
        let got: Vec<f32> = mem.to_f32_vec(&buf).unwrap();
        assert_eq!(got, vec![0.0, 0.0, 0.0, 1.0, 0.0, 2.0, 0.0, 3.0, 0.0, 4.0, 0.0, 5.0]);
    }

    #[test]
    fn snapshot_slots_take_clamped_windows() {
        let mut mem = HostMemory::new();
        // d_conv = 3, C = 2, n_t = 3, one sequence, 5 slots (a short draft: slots 3 and 4 get
        // window(0)), cache of 2 cells per group, kv_head = 1.
        let x = conv_input(&mut mem, 5, 2, 1);
        let cache = mem.alloc_tensor(DType::F32, [4, 10, 1, 1]);
        mem.fill_f32(&cache, &[-1.0; 40]).unwrap();
        let op = CpySnapshots { conv_input: x, cache, d_conv: 3, first_row: 1, group_stride: 2, n_slots: 5 };
        op.reference(&mut mem, &mut ExactMufu).unwrap();
        let row = |r: usize| (0..4).map(|i| mem.read_f32(&cache, [i, r, 0, 0]).unwrap()).collect::<Vec<_>>();
        assert_eq!(row(1), vec![3.0, 4.0, 103.0, 104.0]); // slot 0: window(3), the final state
        assert_eq!(row(3), vec![2.0, 3.0, 102.0, 103.0]); // slot 1: window(2)
        assert_eq!(row(5), vec![1.0, 2.0, 101.0, 102.0]); // slot 2: window(1)
        assert_eq!(row(7), vec![0.0, 1.0, 100.0, 101.0]); // slot 3: window(0), the incoming state
        assert_eq!(row(9), vec![0.0, 1.0, 100.0, 101.0]); // slot 4: clamped to window(0)
        for r in [0, 2, 4, 6, 8] {
            assert_eq!(row(r), vec![-1.0; 4], "row {r} must stay untouched");
        }
    }

    #[test]
    fn snapshots_equal_the_layers_sequence_of_cpys() {
        // Spec §1.3 W2: for t' = 1 … K, CPY window(max(0, n_t − K + t')) → dst(K − t'), with
        // n_s = 2 sequences, against one CpySnapshots on a copy of the same memory.
        for (n_t, k) in [(4, 1), (4, 4), (2, 6), (1, 17)] {
            let (d_conv, c, n_s, m, kv_head) = (4, 3, 2, 3, 1);
            let mut mem = HostMemory::new();
            let x = conv_input(&mut mem, d_conv - 1 + n_t, c, n_s);
            let cache = mem.alloc_tensor(DType::F32, [(d_conv - 1) * c, m * k, 1, 1]);
            mem.fill_f32(&cache, &vec![-1.0; (d_conv - 1) * c * m * k]).unwrap();
            let mut by_cpys = mem.clone();
            for tp in 1..=k {
                let o = (n_t + tp).saturating_sub(k);
                let dst = dst_rows(&cache, (k - tp) * m + kv_head, n_s);
                Cpy { src: window(&x, d_conv - 1, o), dst }.reference(&mut by_cpys, &mut ExactMufu).unwrap();
            }
            let op = CpySnapshots { conv_input: x, cache, d_conv, first_row: kv_head, group_stride: m, n_slots: k };
            op.reference(&mut mem, &mut ExactMufu).unwrap();
            assert_eq!(mem.to_f32_vec(&cache).unwrap(), by_cpys.to_f32_vec(&cache).unwrap(), "n_t = {n_t}, K = {k}");
            assert_ne!(mem.to_f32_vec(&cache).unwrap(), vec![-1.0; (d_conv - 1) * c * m * k]);
        }
    }
}

/// [`crate::reference::get_rows`] through its op.
mod get_rows {
    use crate::memory::HostMemory;
    use crate::ops::{GetRows, Op};
    use crate::reference::math::ExactMufu;
    use crate::tensor::DType;

    #[test]
    fn rows_are_gathered_in_index_order_with_repeats() {
        let mut mem = HostMemory::new();
        let src = mem.alloc_tensor(DType::F32, [2, 3, 1, 1]);
        mem.fill_f32(&src, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        let rows = mem.alloc_indices(&[2, 0, 2]);
        let dst = mem.alloc_tensor(DType::F32, [2, 3, 1, 1]);
        GetRows { src, rows, dst }.reference(&mut mem, &mut ExactMufu).unwrap();
        assert_eq!(mem.to_f32_vec(&dst).unwrap(), vec![5.0, 6.0, 1.0, 2.0, 5.0, 6.0]);
    }

    #[test]
    fn every_bit_pattern_is_copied_unchanged() {
        let mut mem = HostMemory::new();
        // A NaN with a payload, a signalling NaN, −0, the smallest subnormal: all kept as is.
        let bits = [0x7FC0_1234u32, 0xFF80_0001, 0x8000_0000, 0x0000_0001];
        let src = mem.alloc_tensor(DType::F32, [4, 1, 1, 1]);
        for (i, b) in bits.iter().enumerate() {
            mem.write_u32(&src, [i, 0, 0, 0], *b).unwrap();
        }
        let rows = mem.alloc_indices(&[0]);
        let dst = mem.alloc_tensor(DType::F32, [4, 1, 1, 1]);
        GetRows { src, rows, dst }.reference(&mut mem, &mut ExactMufu).unwrap();
        let got: Vec<u32> = (0..4).map(|i| mem.read_u32(&dst, [i, 0, 0, 0]).unwrap()).collect();
        assert_eq!(got, bits);
    }

    #[test]
    fn strided_rows_and_a_strided_index_view_are_followed() {
        let mut mem = HostMemory::new();
        // Rows of 2 inside rows of 3 (padding holds 9s); indices every other entry of [1, 7, 0, 7].
        let buf = mem.alloc_tensor(DType::F32, [3, 2, 1, 1]);
        mem.fill_f32(&buf, &[1.0, 2.0, 9.0, 3.0, 4.0, 9.0]).unwrap();
        let src = buf.view([2, 2, 1, 1], [4, 12, 24, 24], 0);
        let all = mem.alloc_indices(&[1, 7, 0, 7]);
        let rows = all.view([2, 1, 1, 1], [8, 16, 16, 16], 0);
        let dst = mem.alloc_tensor(DType::F32, [2, 2, 1, 1]);
        GetRows { src, rows, dst }.reference(&mut mem, &mut ExactMufu).unwrap();
        assert_eq!(mem.to_f32_vec(&dst).unwrap(), vec![3.0, 4.0, 1.0, 2.0]);
    }
}

/// [`crate::reference::scale`] through its op.
mod scale {
    use crate::memory::HostMemory;
    use crate::ops::{Op, Scale};
    use crate::reference::math::ExactMufu;
    use crate::tensor::DType;

    fn run(xs: &[f32], scale: f32, bias: f32) -> Vec<u32> {
        let mut mem = HostMemory::new();
        let t = mem.alloc_tensor(DType::F32, [xs.len(), 1, 1, 1]);
        mem.fill_f32(&t, xs).unwrap();
        Scale { src: t, dst: t, scale, bias }.reference(&mut mem, &mut ExactMufu).unwrap();
        mem.to_f32_vec(&t).unwrap().iter().map(|v| v.to_bits()).collect()
    }

    #[test]
    fn zeroing_gives_plus_zero_for_finite_and_nan_for_inf_and_nan() {
        let sub = f32::from_bits(0x8000_0001);
        let y = run(&[-5.0, -0.0, sub, f32::MAX, f32::INFINITY, f32::NEG_INFINITY, f32::NAN], 0.0, 0.0);
        // 0·x is ±0 and −0 + (+0) = +0; 0·Inf is NaN.
        assert_eq!(&y[..4], &[0, 0, 0, 0]);
        assert!(y[4..].iter().all(|b| f32::from_bits(*b).is_nan()), "{y:x?}");
    }

    #[test]
    fn scale_and_bias_round_once() {
        assert_eq!(run(&[3.0, -1.5], 2.0, 1.0), vec![7.0f32.to_bits(), (-2.0f32).to_bits()]);
        // (1 + 2^-23)(1 − 2^-23) − 1 = −2^-46 with one rounding (a rounded product gives 0).
        let (a, b) = (f32::from_bits(0x3F80_0001), f32::from_bits(0x3F7F_FFFE));
        assert_eq!(run(&[b], a, -1.0), vec![(-(2.0f32).powi(-46)).to_bits()]);
    }

    #[test]
    fn subnormal_inputs_and_results_flush_to_zero() {
        // 1e-30 · 1e-10 = 1e-40 is subnormal: flushed to +0. A subnormal input reads as ±0.
        assert_eq!(run(&[1e-10], 1e-30, 0.0), vec![0]);
        assert_eq!(run(&[f32::from_bits(0x0000_0400)], 1e30, 1.0), vec![1.0f32.to_bits()]);
    }
}

/// [`crate::reference::unary`] through its op.
mod unary {
    use crate::memory::HostMemory;
    use crate::ops::{Op, Unary, UnaryKind};
    use crate::reference::math::{ExactMufu, LOG2_E, MufuOp, MufuTable, RecordingMufu, mul};
    use crate::tensor::DType;

    fn run(kind: UnaryKind, x: &[f32]) -> Vec<f32> {
        let mut mem = HostMemory::new();
        let (src, dst) = (mem.alloc_tensor(DType::F32, [x.len(), 1, 1, 1]), mem.alloc_tensor(DType::F32, [x.len(), 1, 1, 1]));
        mem.fill_f32(&src, x).unwrap();
        Unary { kind, src, dst }.reference(&mut mem, &mut ExactMufu).unwrap();
        mem.to_f32_vec(&dst).unwrap()
    }

    #[test]
    fn functions_at_known_points() {
        assert_eq!(run(UnaryKind::Sigmoid, &[0.0, f32::INFINITY, f32::NEG_INFINITY]), vec![0.5, 1.0, 0.0]);
        assert_eq!(run(UnaryKind::Exp, &[0.0, f32::NEG_INFINITY]), vec![1.0, 0.0]);
        let y = run(UnaryKind::Silu, &[0.0, 10.0]);
        assert_eq!(y[0], 0.0);
        assert!((y[1] - 9.999_546).abs() < 1e-5);
    }

    #[test]
    fn softplus_passes_x_through_only_above_20() {
        let above = f32::from_bits(0x41A0_0001);
        let y = run(UnaryKind::Softplus, &[above, 20.0, f32::NAN]);
        assert_eq!(y[0], above);
        // At exactly 20 the log form runs: log(1 + e^20) ≈ 20 + 2e-9, which rounds to 20.
        assert!((y[1] - 20.0).abs() < 4e-6);
        assert!(y[2].is_nan());
    }

    #[test]
    fn exp_uses_the_hardware_ex2_of_the_rounded_product() {
        // The reference asks its MUFU provider for ex2(x · log2 e) (one rounded mul first).
        let x = 1.5f32;
        let mut table = MufuTable::new();
        table.insert(MufuOp::Ex2, mul(x, LOG2_E).to_bits(), 0x4080_0001);
        let mut mem = HostMemory::new();
        let (src, dst) = (mem.alloc_tensor(DType::F32, [1, 1, 1, 1]), mem.alloc_tensor(DType::F32, [1, 1, 1, 1]));
        mem.fill_f32(&src, &[x]).unwrap();
        let mut rec = RecordingMufu::new(&table);
        Unary { kind: UnaryKind::Exp, src, dst }.reference(&mut mem, &mut rec).unwrap();
        assert!(rec.missing.is_empty());
        assert_eq!(mem.read_f32(&dst, [0, 0, 0, 0]).unwrap().to_bits(), 0x4080_0001);
    }

    #[test]
    fn refuses_non_contiguous_views() {
        let mut mem = HostMemory::new();
        let t = mem.alloc_tensor(DType::F32, [4, 4, 1, 1]);
        let op = Unary { kind: UnaryKind::Exp, src: t.transpose(), dst: t.transpose() };
        assert!(matches!(op.validate(&mem), Err(crate::Error::Stride { arg: "src", .. })));
    }

    /// A deterministic stand-in for the hardware: the exact result with its last bit flipped
    /// for some arguments (so the comparison does not lean on exact math).
    struct SkewedMufu;
    impl crate::reference::math::Mufu for SkewedMufu {
        fn eval(&mut self, op: MufuOp, x: f32) -> f32 {
            let y = crate::reference::math::exact_mufu(op, x);
            if y.is_finite() && x.to_bits().count_ones().is_multiple_of(3) { f32::from_bits(y.to_bits() ^ 1) } else { y }
        }
    }

    /// [speed] The fused SOFTPLUS·MUL reference equals SOFTPLUS then MUL bit for bit, for both a
    /// deterministic skewed MUFU and exact math, over random values, the x > 20 threshold,
    /// subnormals, zeros, infinities and NaN, on both operands.
    #[test]
    fn softplus_mul_equals_softplus_then_mul_bitwise() {
        use crate::ops::{Binary, BinaryKind, UnaryMul};
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x5EED);
        let specials = [
            0.0f32,
            -0.0,
            20.0,
            f32::from_bits(0x41A0_0001),
            f32::from_bits(0x419F_FFFF),
            -20.0,
            -100.0,
            f32::from_bits(1),
            f32::from_bits(0x8000_0001),
            f32::MIN_POSITIVE,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1e30,
            -1e-30,
        ];
        let n = 4096;
        let mut xs: Vec<f32> = (0..n).map(|_| rng.random_range(-30.0f32..30.0)).collect();
        let mut ms: Vec<f32> = (0..n).map(|_| -rng.random_range(0.0f32..16.0)).collect();
        for (k, &v) in specials.iter().enumerate() {
            for j in 0..specials.len() {
                xs[k * specials.len() + j] = v;
                ms[k * specials.len() + j] = specials[j];
            }
        }
        let ne = [64, n / 64, 1, 1];
        // `mul` of the same shape (ggml's fusion) and as a leading block MUL broadcasts
        // ([64] over [64, 64]: the gate's `a` over n_t tokens).
        for ne_m in [ne, [64, 1, 1, 1]] {
            for mufu in [&mut SkewedMufu as &mut dyn crate::reference::math::Mufu, &mut ExactMufu] {
                let mut mem = HostMemory::new();
                let (x, m, tmp, unfused, fused) = (
                    mem.alloc_tensor(DType::F32, ne),
                    mem.alloc_tensor(DType::F32, ne_m),
                    mem.alloc_tensor(DType::F32, ne),
                    mem.alloc_tensor(DType::F32, ne),
                    mem.alloc_tensor(DType::F32, ne),
                );
                mem.fill_f32(&x, &xs).unwrap();
                mem.fill_f32(&m, &ms[..ne_m.iter().product::<usize>()]).unwrap();
                Unary { kind: UnaryKind::Softplus, src: x, dst: tmp }.reference(&mut mem, mufu).unwrap();
                Binary { kind: BinaryKind::Mul, a: tmp, b: m, dst: unfused }.reference(&mut mem, mufu).unwrap();
                UnaryMul { kind: UnaryKind::Softplus, src: x, mul: m, dst: fused }.reference(&mut mem, mufu).unwrap();
                assert_eq!(mem.bytes(unfused.buffer), mem.bytes(fused.buffer));
            }
        }
    }
}

/// [`crate::reference::mmvf`] through MUL_MAT_VEC (whose check picks the kind and block size).
mod mmvf {
    use crate::memory::HostMemory;
    use crate::ops::{MulMatVec, Op, Precision};
    use crate::reference::math::ExactMufu;
    use crate::tensor::{DType, Tensor};

    const F16_ONE: u16 = 0x3C00;

    /// Runs the op on a weight given as element bits (`dtype`) and `ncols` columns.
    fn run(dtype: DType, precision: Precision, rows: &[Vec<u32>], cols: &[Vec<f32>]) -> Vec<Vec<f32>> {
        let mut mem = HostMemory::new();
        let e = rows[0].len();
        let weight = mem.alloc_tensor(dtype, [e, rows.len(), 1, 1]);
        for (r, row) in rows.iter().enumerate() {
            for (i, bits) in row.iter().enumerate() {
                match dtype {
                    DType::F32 => mem.write_u32(&weight, [i, r, 0, 0], *bits).unwrap(),
                    _ => mem.write_u16(&weight, [i, r, 0, 0], *bits as u16).unwrap(),
                }
            }
        }
        let input = mem.alloc_tensor(DType::F32, [e, cols.len(), 1, 1]);
        mem.fill_f32(&input, &cols.concat()).unwrap();
        let dst: Tensor = mem.alloc_tensor(DType::F32, [rows.len(), cols.len(), 1, 1]);
        mem.fill_f32(&dst, &vec![f32::NAN; rows.len() * cols.len()]).unwrap();
        MulMatVec { weight, input, dst, precision }.reference(&mut mem, &mut ExactMufu).unwrap();
        (0..rows.len()).map(|r| (0..cols.len()).map(|j| mem.read_f32(&dst, [r, j, 0, 0]).unwrap()).collect()).collect()
    }

    fn f32_rows(rows: &[&[f32]]) -> Vec<Vec<u32>> {
        rows.iter().map(|r| r.iter().map(|x| x.to_bits()).collect()).collect()
    }

    #[test]
    fn f32_weights_dot_each_column() {
        let w = f32_rows(&[&[1.0, 2.0, 3.0, 4.0], &[0.5, -1.0, 0.0, 2.0]]);
        let y = run(DType::F32, Precision::Default, &w, &[vec![1.0; 4], vec![1.0, 2.0, 3.0, 4.0]]);
        assert_eq!(y, vec![vec![10.0, 30.0], vec![1.5, 6.5]]);
    }

    #[test]
    fn bf16_weights_are_the_upper_half_of_an_f32_and_subnormals_flush() {
        // 0x3FC0 = 1.5, 0xC020 = −2.5: 1.5·2 − 2.5·4 = −7.
        let y = run(DType::BF16, Precision::Default, &[vec![0x3FC0, 0xC020]], &[vec![2.0, 4.0]]);
        assert_eq!(y[0][0], -7.0);
        // bf16 0x0001 is the f32 subnormal 2^-133: the ftz fma reads it as 0 (else 2^-33).
        let y = run(DType::BF16, Precision::Default, &[vec![0x0001, 0]], &[vec![2f32.powi(100), 0.0]]);
        assert_eq!(y[0][0].to_bits(), 0);
    }

    #[test]
    fn f16_default_precision_accumulates_in_half() {
        let w = vec![vec![F16_ONE as u32, F16_ONE as u32]];
        let cols = [vec![0.1f32, 0.2]];
        // Half: the inputs round to f16 (0x2E66 = 1638·2^-14, 0x3266 = 1638·2^-13), one per
        // lane, and low + high = 4914·2^-14 exactly.
        assert_eq!(run(DType::F16, Precision::Default, &w, &cols)[0][0], 4914.0 / 16384.0);
        // F32 precision: fma(1, 0.1, 0) then fma(1, 0.2, 0.1) = 0.1f + 0.2f rounded once.
        assert_eq!(run(DType::F16, Precision::F32, &w, &cols)[0][0].to_bits(), 0x3E99_999A);
    }

    #[test]
    fn f16_half_accumulator_rounds_every_step() {
        // E = 2560: block 256, thread 0 owns pairs 0, 256, 512, …; its low lane gets 1·2048 and
        // then 1·1: 2049 is a tie at f16 spacing 2 → 2048. In f32 the sum stays 2049.
        let mut w = vec![0u32; 2560];
        w[0] = F16_ONE as u32;
        w[512] = F16_ONE as u32;
        let mut y = vec![0.0f32; 2560];
        y[0] = 2048.0;
        y[512] = 1.0;
        let cols = [y];
        assert_eq!(run(DType::F16, Precision::Default, std::slice::from_ref(&w), &cols)[0][0], 2048.0);
        assert_eq!(run(DType::F16, Precision::F32, &[w], &cols)[0][0], 2049.0);
    }

    #[test]
    fn f16_half_accumulation_overflows_on_large_inputs() {
        // 70000 becomes +Inf in f16: 1·Inf = Inf, and 0·Inf = NaN; in f32 both are finite.
        let cols = [vec![70000.0f32, 1.0]];
        let one = vec![vec![F16_ONE as u32, 0]];
        assert_eq!(run(DType::F16, Precision::Default, &one, &cols)[0][0], f32::INFINITY);
        assert_eq!(run(DType::F16, Precision::F32, &one, &cols)[0][0], 70000.0);
        let zero = vec![vec![0, F16_ONE as u32]];
        assert!(run(DType::F16, Precision::Default, &zero, &cols)[0][0].is_nan());
        assert_eq!(run(DType::F16, Precision::F32, &zero, &cols)[0][0], 1.0);
    }

    #[test]
    fn warp_sums_combine_in_ggml_tree_order() {
        // E = 512: block 256, one pair per thread. Thread 0 (warp 0) gives 2^25, thread 32
        // (warp 1) −2^25, thread 128 (warp 4) 1. ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)):
        // 2^25 + 1 rounds to 2^25 (spacing 4), then cancels: +0, where a running sum would give 1.
        let mut w = vec![0.0f32; 512];
        let mut y = vec![0.0f32; 512];
        for (elem, value) in [(0, 2f32.powi(25)), (64, -(2f32.powi(25))), (256, 1.0)] {
            w[elem] = 1.0;
            y[elem] = value;
        }
        let out = run(DType::F32, Precision::Default, &f32_rows(&[&w]), &[y]);
        assert_eq!(out[0][0].to_bits(), 0);
    }

    #[test]
    fn one_warp_blocks_keep_negative_zero_and_larger_blocks_normalise_it() {
        // Every pair gives −0: fma(−1e-20, 1e-20, +0) = −1e-40 flushes to −0; fma(0, −1, −0) = −0.
        let pattern = |e: usize| {
            let w: Vec<f32> = (0..e).map(|i| if i % 2 == 0 { -1e-20 } else { 0.0 }).collect();
            let y: Vec<f32> = (0..e).map(|i| if i % 2 == 0 { 1e-20 } else { -1.0 }).collect();
            run(DType::F32, Precision::Default, &f32_rows(&[&w]), &[y])[0][0]
        };
        // E = 64: one warp, the butterfly of 32 −0 is −0 and is the result.
        assert_eq!(pattern(64).to_bits(), 0x8000_0000);
        // E = 128: two warps; the second butterfly adds the buffer's +0s: +0.
        assert_eq!(pattern(128).to_bits(), 0);
    }
}

/// [`crate::reference::gated_delta_net`] through GATED_DELTA_NET.
mod gated_delta_net {
    use crate::kernels::abi::GDN_HEAD_DIM as D;
    use crate::memory::HostMemory;
    use crate::ops::Op;
    use crate::ops::gated_delta_net::{GatedDeltaNet, SENTINEL, attention_scale, contiguous_op};
    use crate::reference::math::{ExactMufu, Mufu, MufuOp};

    fn fill(mem: &mut HostMemory, t: &crate::tensor::Tensor, f: impl Fn([usize; 4]) -> f32) {
        let idx: Vec<_> = t.layout.indices().collect();
        for i in idx {
            mem.write_f32(t, i, f(i)).unwrap();
        }
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
        assert_eq!(mem.read_f32(&op.states, [40 * D + 2, 0, 0, 0]).unwrap(), 5.0);
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
            assert_eq!(mem.read_f32(&op.out, [col, 0, 0, 0]).unwrap(), col as f32 * scale);
            for i in 0..D {
                let want = if i == 0 { col as f32 / 2.0 } else { 0.0 };
                assert_eq!(mem.read_u32(&op.states, [col * D + i, 0, 0, 0]).unwrap(), want.to_bits(), "S[{i}][{col}]");
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
                let got = mem.read_u32(&op.states, [col * D, 0, slot, 0]).unwrap();
                let want = if slot < 3 { ((3 - slot) as f32).to_bits() } else { SENTINEL };
                assert_eq!(got, want, "slot {slot}, col {col}");
            }
            for t in 0..3 {
                assert_eq!(mem.read_f32(&op.out, [col, 0, t, 0]).unwrap(), (t + 1) as f32 * attention_scale());
            }
        }
        // K < n_t: only the newest K states are kept.
        let op = contiguous_op(&mut mem, 1, 1, 3, 1, 2);
        counting_tokens(&mut mem, &op);
        op.reference(&mut mem, &mut ExactMufu).unwrap();
        assert_eq!(mem.read_f32(&op.states, [5 * D, 0, 0, 0]).unwrap(), 3.0);
        assert_eq!(mem.read_f32(&op.states, [5 * D, 0, 1, 0]).unwrap(), 2.0);
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
            let got = mem.read_u32(&cache, [3 * D, r, 0, 0]).unwrap(); // S[0][3]
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
        let s = |h: usize, i: usize| mem.read_f32(&op.states, [(h * D + 9) * D + i, 0, 0, 0]).unwrap();
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
        assert_eq!(mem.read_f32(&op.states, [0, 0, 0, 0]).unwrap(), 2.0);
        assert_eq!(mem.read_u32(&op.states, [1, 0, 0, 0]).unwrap(), 0);
        assert_eq!(mem.read_f32(&op.out, [0, 0, 0, 0]).unwrap(), 2.0 * attention_scale());
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
        assert_eq!(mem.read_u32(&op.states, [0, 0, 0, 0]).unwrap(), 0);
        assert_eq!(mem.read_u32(&op.states, [D + 5, 0, 0, 0]).unwrap(), 1f32.to_bits());
        assert_eq!(mem.read_u32(&op.out, [1, 0, 0, 0]).unwrap(), 0);
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
