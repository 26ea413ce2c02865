//! CPY and CPY_SNAPSHOTS references (spec §2.3, §1.3 W1/W2, README decision 1): bit moves.

use crate::memory::HostMemory;
use crate::ops::cpy::{Cpy, CpySnapshots, SnapshotShape};

/// The f-th element of `src` in logical order to the f-th element of `dst` in logical order.
pub fn cpy(op: &Cpy, mem: &mut HostMemory) {
    for (i, o) in op.src.layout.indices().zip(op.dst.layout.indices()) {
        let v = mem.read_u32(&op.src, i);
        mem.write_u32(&op.dst, o, v);
    }
}

/// Slot j of sequence s: cache row `j·group_stride + first_row + s` ← window(max(0, n_t − j)),
/// window element (jj, c) = conv_input(o + jj, c, s) at row offset c·(d_conv − 1) + jj.
pub fn cpy_snapshots(op: &CpySnapshots, shape: &SnapshotShape, mem: &mut HostMemory) {
    let SnapshotShape { state_len, n_channels, n_tokens, n_seqs } = *shape;
    for slot in 0..op.n_slots {
        let o = n_tokens.saturating_sub(slot);
        for s in 0..n_seqs {
            let row = op.row(slot, s);
            for c in 0..n_channels {
                for jj in 0..state_len {
                    let v = mem.read_u32(&op.conv_input, [o + jj, c, s, 0]);
                    mem.write_u32(&op.cache, [c * state_len + jj, row, 0, 0], v);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::memory::HostMemory;
    use crate::ops::{Cpy, CpySnapshots, Op};
    use crate::reference::math::ExactMufu;
    use crate::tensor::{DType, Tensor};

    /// conv_input ne [d_conv−1+n_t, C, n_s] holding `1000·s + 100·c + col` (exact in f32).
    fn conv_input(mem: &mut HostMemory, cols: usize, channels: usize, seqs: usize) -> Tensor {
        let t = mem.alloc_tensor(DType::F32, [cols, channels, seqs, 1]);
        let v: Vec<f32> = t.layout.indices().map(|[col, c, s, _]| (1000 * s + 100 * c + col) as f32).collect();
        mem.fill_f32(&t, &v);
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
        mem.fill_f32(&cache, &[-1.0; 12]);
        Cpy { src: window(&x, 2, 1), dst: dst_rows(&cache, 1, 1) }.reference(&mut mem, &mut ExactMufu).unwrap();
        // Row 1 = [c0: col 1, col 2, c1: col 1, col 2]; rows 0 and 2 untouched.
        #[rustfmt::skip]
        let want = vec![
            -1.0, -1.0, -1.0, -1.0,
            1.0, 2.0, 101.0, 102.0,
            -1.0, -1.0, -1.0, -1.0,
        ];
        assert_eq!(mem.to_f32_vec(&cache), want);
    }

    #[test]
    fn cpy_pairs_elements_by_logical_order_across_shapes() {
        let mut mem = HostMemory::new();
        // src: the transpose of a row-major 2×3 matrix [[0,1,2],[3,4,5]] → logical order
        // 0, 3, 1, 4, 2, 5, written into a contiguous [2, 3] destination.
        let m = mem.alloc_tensor(DType::F32, [3, 2, 1, 1]);
        mem.fill_f32(&m, &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        let dst = mem.alloc_tensor(DType::F32, [2, 3, 1, 1]);
        Cpy { src: m.transpose(), dst }.reference(&mut mem, &mut ExactMufu).unwrap();
        assert_eq!(mem.to_f32_vec(&dst), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        // And into a [6, 1, 1, 1] destination with a stride of 2 elements.
        let buf = mem.alloc_tensor(DType::F32, [12, 1, 1, 1]);
        let dst = buf.view([6, 1, 1, 1], [8, 48, 48, 48], 4);
        Cpy { src: m, dst }.reference(&mut mem, &mut ExactMufu).unwrap();
        let got: Vec<f32> = mem.to_f32_vec(&buf);
        assert_eq!(got, vec![0.0, 0.0, 0.0, 1.0, 0.0, 2.0, 0.0, 3.0, 0.0, 4.0, 0.0, 5.0]);
    }

    #[test]
    fn snapshot_slots_take_clamped_windows() {
        let mut mem = HostMemory::new();
        // d_conv = 3, C = 2, n_t = 3, one sequence, 5 slots (a short draft: slots 3 and 4 get
        // window(0)), cache of 2 cells per group, kv_head = 1.
        let x = conv_input(&mut mem, 5, 2, 1);
        let cache = mem.alloc_tensor(DType::F32, [4, 10, 1, 1]);
        mem.fill_f32(&cache, &[-1.0; 40]);
        let op = CpySnapshots { conv_input: x, cache, d_conv: 3, first_row: 1, group_stride: 2, n_slots: 5 };
        op.reference(&mut mem, &mut ExactMufu).unwrap();
        let row = |r: usize| (0..4).map(|i| mem.read_f32(&cache, [i, r, 0, 0])).collect::<Vec<_>>();
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
            mem.fill_f32(&cache, &vec![-1.0; (d_conv - 1) * c * m * k]);
            let mut by_cpys = mem.clone();
            for tp in 1..=k {
                let o = (n_t + tp).saturating_sub(k);
                let dst = dst_rows(&cache, (k - tp) * m + kv_head, n_s);
                Cpy { src: window(&x, d_conv - 1, o), dst }.reference(&mut by_cpys, &mut ExactMufu).unwrap();
            }
            let op = CpySnapshots { conv_input: x, cache, d_conv, first_row: kv_head, group_stride: m, n_slots: k };
            op.reference(&mut mem, &mut ExactMufu).unwrap();
            assert_eq!(mem.to_f32_vec(&cache), by_cpys.to_f32_vec(&cache), "n_t = {n_t}, K = {k}");
            assert_ne!(mem.to_f32_vec(&cache), vec![-1.0; (d_conv - 1) * c * m * k]);
        }
    }
}
