//! CPY f32 → f32 and CPY_SNAPSHOTS (all conv-state snapshot rows in one launch) — kernels:
//! `kernels-gpu/src/cpy.rs`, reference: [`crate::reference::cpy`], spec §2.3, §1.3 W1/W2 and
//! the clamped snapshot rule (spec README, decision 1).

use super::{Op, check};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, KernelArg, LaunchDims, ParamBlock, PreparedLaunch};
use crate::kernels::abi;
use crate::memory::{DeviceMemory, HostMemory, Memory};
use crate::reference::math::Mufu;
use crate::tensor::{DType, Tensor};

const OP: &str = "CPY";
const OP_SNAPSHOTS: &str = "CPY_SNAPSHOTS";

/// CPY f32→f32 (ggml's scalar kernel, §2.3): src and dst any 4-D F32 views with the same element
/// count; the f-th element of src in logical (ne) order goes to the f-th element of dst in
/// logical order. Disjoint.
#[derive(Clone, Debug)]
pub struct Cpy {
    pub src: Tensor,
    pub dst: Tensor,
}

impl Cpy {
    /// Validates the op and returns its element count.
    pub fn check(&self, mem: &dyn Memory) -> Result<usize> {
        check::tensor(OP, "src", &self.src, DType::F32, mem)?;
        check::output(OP, "dst", &self.dst, DType::F32, mem)?;
        let n = self.src.layout.n_elements();
        if self.dst.layout.n_elements() != n {
            return Err(Error::Shape {
                op: OP,
                arg: "dst",
                expected: format!("{n} elements like src {:?}", self.src.ne()),
                got: self.dst.ne(),
            });
        }
        // ggml's kernel indexes with `int`; so does ours (flat index and sizes in u32).
        if n > i32::MAX as usize {
            return Err(Error::Unsupported { op: OP, what: format!("{n} elements (at most 2^31 − 1)") });
        }
        check::disjoint(OP, "dst", &self.dst, "src", &self.src)?;
        Ok(n)
    }
}

impl Op for Cpy {
    fn name(&self) -> &'static str {
        OP
    }

    fn validate(&self, mem: &dyn Memory) -> Result<()> {
        self.check(mem).map(|_| ())
    }

    fn prepare(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<PreparedLaunch> {
        let n = self.check(mem)?;
        let (sn, dn) = (self.src.ne(), self.dst.ne());
        let blocks = n.div_ceil(abi::CPY_BLOCK as usize) as u32;
        let dims = LaunchDims::new((blocks, 1, 1), (abi::CPY_BLOCK, 1, 1));
        // Each size is at most n ≤ 2^31 − 1, so the u32 casts are lossless.
        let params = abi::CpyParams {
            src: mem.device_ptr(&self.src),
            src_stride: check::elem_strides(&self.src),
            dst: mem.device_ptr(&self.dst),
            dst_stride: check::elem_strides(&self.dst),
            src_ne: [sn[0] as u32, sn[1] as u32, sn[2] as u32],
            dst_ne: [dn[0] as u32, dn[1] as u32, dn[2] as u32],
            n: n as u32,
            _pad: 0,
        };
        // SAFETY: `check` proved that both views hold n ≥ 1 elements (so every size is ≥ 1)
        // inside their buffers, that dst addresses each element once and is disjoint from src,
        // and `params` is the struct the entry takes.
        unsafe { gpu.prepare(abi::CPY_ENTRY, dims, &[KernelArg::Params(ParamBlock::of(&params)?)]) }
    }

    fn reference(&self, mem: &mut HostMemory, _mufu: &mut dyn Mufu) -> Result<()> {
        self.check(mem)?;
        crate::reference::cpy::cpy(&self.src, &self.dst, mem)?;
        Ok(())
    }

    fn inputs(&self) -> Vec<Tensor> {
        vec![self.src]
    }

    fn outputs(&self) -> Vec<Tensor> {
        vec![self.dst]
    }

    fn must_write(&self) -> Vec<Tensor> {
        self.outputs()
    }
}

/// All 1+R conv-state snapshot rows in ONE launch. conv_input F32 ne [d_conv−1+n_t, C, n_s, 1];
/// cache F32 ne [(d_conv−1)·C, n_rows, 1, 1] (rows contiguous: the conv state r_l). For slot j in
/// 0..n_slots and sequence s: cache row (j·group_stride + first_row + s) ← window(max(0, n_t − j)),
/// where window(o) element (jj, c, s) = conv_input(o + jj, c, s) lands at offset c·(d_conv−1) + jj
/// of the row. Refuse: rows out of range, two (slot, s) pairs writing the same row, cache
/// overlapping conv_input, n_slots == 0 or > 17 (1 + 16 snapshots).
///
/// In the layer: `first_row` = kv_head, `group_stride` = M (cells per rollback group), n_slots =
/// K = 1 + R; this is the W1/W2 sequence of CPYs (spec §1.3) in one launch.
#[derive(Clone, Debug)]
pub struct CpySnapshots {
    pub conv_input: Tensor,
    pub cache: Tensor,
    pub d_conv: usize,
    pub first_row: usize,
    pub group_stride: usize,
    pub n_slots: usize,
}

/// The sizes a valid [`CpySnapshots`] runs with (declared beside the reference that iterates them).
pub use crate::reference::cpy::SnapshotShape;

impl CpySnapshots {
    /// The cache row that slot `slot` of sequence `seq` writes (exact on a validated op, which
    /// proved the last row representable and inside the cache; saturates otherwise).
    pub fn row(&self, slot: usize, seq: usize) -> usize {
        slot.saturating_mul(self.group_stride).saturating_add(self.first_row).saturating_add(seq)
    }

    /// Validates the op and returns its sizes: the buffers (existence, bounds, no index
    /// buffer written), then [`CpySnapshots::check_structure`].
    pub fn check(&self, mem: &dyn Memory) -> Result<SnapshotShape> {
        const OP: &str = OP_SNAPSHOTS;
        check::tensor(OP, "conv_input", &self.conv_input, DType::F32, mem)?;
        check::output(OP, "cache", &self.cache, DType::F32, mem)?;
        self.check_structure()
    }

    /// Every rule of [`CpySnapshots::check`] that does not depend on the memory: types,
    /// shapes, strides, rows in range and pairwise distinct, the cache's rows not sharing
    /// bytes, cache and conv_input disjoint, the launch sizes. A graph pass that wants to
    /// rewrite CPYs into this op asks this (on symbolic or real views) and leaves the CPYs
    /// alone when it refuses.
    pub fn check_structure(&self) -> Result<SnapshotShape> {
        const OP: &str = OP_SNAPSHOTS;
        for (arg, t) in [("conv_input", &self.conv_input), ("cache", &self.cache)] {
            if t.dtype() != DType::F32 {
                return Err(Error::DType { op: OP, arg, expected: "F32".into(), got: t.dtype() });
            }
        }
        for (arg, t) in [("conv_input", &self.conv_input), ("cache", &self.cache)] {
            if t.layout.is_empty() {
                return Err(Error::Empty { op: OP, arg, ne: t.ne() });
            }
        }
        check::distinct_elements(OP, "cache", &self.cache)?;
        if self.d_conv < 2 {
            return Err(Error::Invalid {
                op: OP, what: format!("d_conv = {} (a conv state holds d_conv − 1 ≥ 1 columns)", self.d_conv)
            });
        }
        let state_len = self.d_conv - 1;
        let [cols, n_channels, n_seqs, _] = self.conv_input.ne();
        if cols <= state_len {
            return Err(Error::Shape {
                op: OP,
                arg: "conv_input",
                expected: format!("[d_conv−1+n_t with n_t ≥ 1 (> {state_len}), C, n_s, 1]"),
                got: self.conv_input.ne(),
            });
        }
        let n_tokens = cols - state_len;
        check::shape(OP, "conv_input", &self.conv_input, [cols, n_channels, n_seqs, 1])?;
        check::rows_contiguous(OP, "conv_input", &self.conv_input)?;
        // state_len < cols, so this product is below conv_input's element count.
        let n_cache_rows = self.cache.ne()[1];
        let row_len = check::product(OP, "conv_input", "conv-state row (d_conv − 1)·C", &[state_len, n_channels])?;
        check::shape(OP, "cache", &self.cache, [row_len, n_cache_rows, 1, 1])?;
        check::rows_contiguous(OP, "cache", &self.cache)?;
        check::disjoint(OP, "cache", &self.cache, "conv_input", &self.conv_input)?;
        if self.n_slots == 0 {
            return Err(Error::Invalid { op: OP, what: "n_slots = 0 (at least the live row is written)".into() });
        }
        if self.n_slots > abi::CPY_SNAPSHOTS_MAX_SLOTS {
            return Err(Error::Unsupported {
                op: OP,
                what: format!("n_slots = {} (at most {}: 1 + 16 snapshots)", self.n_slots, abi::CPY_SNAPSHOTS_MAX_SLOTS),
            });
        }
        // The largest row is that of the last slot and sequence; rows grow with both.
        let last =
            (self.n_slots - 1).checked_mul(self.group_stride).and_then(|r| crate::tensor::checked_sum(&[r, self.first_row, n_seqs - 1]));
        match last {
            Some(row) if row < n_cache_rows => {}
            _ => {
                return Err(Error::IndexOutOfRange {
                    op: OP,
                    arg: "cache",
                    position: self.n_slots.saturating_mul(n_seqs) - 1,
                    index: last.map_or(i64::MAX, |r| i64::try_from(r).unwrap_or(i64::MAX)),
                    rows: n_cache_rows,
                });
            }
        }
        // Rows (j, s) and (j', s') coincide iff (j − j')·group_stride = s' − s, possible for
        // j ≠ j' exactly when group_stride < n_s.
        if self.n_slots > 1 && self.group_stride < n_seqs {
            return Err(Error::Aliasing {
                op: OP,
                a: "cache",
                b: "cache",
                why: "two (slot, sequence) pairs would write the same cache row (group_stride < n_s)",
            });
        }
        check::fits_u32(OP, "state columns (d_conv − 1)", state_len)?;
        check::fits_u32(OP, "channels", n_channels)?;
        check::fits_u32(OP, "tokens", n_tokens)?;
        let grid_y = check::product(OP, "conv_input", "grid y n_slots·n_s", &[self.n_slots, n_seqs])?;
        if grid_y > 65535 {
            return Err(Error::Unsupported { op: OP, what: format!("n_slots·n_s = {grid_y} (grid y ≤ 65535)") });
        }
        Ok(SnapshotShape { state_len, n_channels, n_tokens, n_seqs })
    }
}

impl Op for CpySnapshots {
    fn name(&self) -> &'static str {
        OP_SNAPSHOTS
    }

    fn validate(&self, mem: &dyn Memory) -> Result<()> {
        self.check(mem).map(|_| ())
    }

    fn prepare(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<PreparedLaunch> {
        let shape = self.check(mem)?;
        let [_, in_channel, in_seq, _] = check::elem_strides(&self.conv_input);
        let [_, cache_row, ..] = check::elem_strides(&self.cache);
        let channel_blocks = shape.n_channels.div_ceil(abi::CPY_SNAPSHOTS_BLOCK as usize) as u32;
        let dims = LaunchDims::new((channel_blocks, (self.n_slots * shape.n_seqs) as u32, 1), (abi::CPY_SNAPSHOTS_BLOCK, 1, 1));
        let params = abi::CpySnapshotsParams {
            conv_input: mem.device_ptr(&self.conv_input),
            in_channel,
            in_seq,
            cache: mem.device_ptr(&self.cache),
            cache_row,
            first_row: self.first_row as u64,
            group_stride: self.group_stride as u64,
            state_len: shape.state_len as u32,
            n_channels: shape.n_channels as u32,
            n_tokens: shape.n_tokens as u32,
            n_seqs: shape.n_seqs as u32,
        };
        // SAFETY: `check` proved that conv_input holds state_len + n_tokens columns of every
        // (channel, sequence), that every row j·group_stride + first_row + s for j < n_slots
        // (grid y = n_slots·n_s) lies in the cache and these rows are distinct, that the cache
        // is disjoint from conv_input, and `params` is the struct the entry takes (the u32 sizes
        // were checked to fit).
        unsafe { gpu.prepare(abi::CPY_SNAPSHOTS_ENTRY, dims, &[KernelArg::Params(ParamBlock::of(&params)?)]) }
    }

    fn reference(&self, mem: &mut HostMemory, _mufu: &mut dyn Mufu) -> Result<()> {
        let shape = self.check(mem)?;
        crate::reference::cpy::cpy_snapshots(&self.conv_input, &self.cache, self.n_slots, &|slot, seq| self.row(slot, seq), &shape, mem)?;
        Ok(())
    }

    fn inputs(&self) -> Vec<Tensor> {
        vec![self.conv_input]
    }

    fn outputs(&self) -> Vec<Tensor> {
        vec![self.cache]
    }

    /// Only the (slot, sequence) rows: the rest of the cache keeps its bytes. An op whose
    /// structure is refused writes nothing (it never runs), so it lists nothing — which also
    /// keeps this bounded (at most 17 · 65535 rows) and panic-free for any field values.
    fn must_write(&self) -> Vec<Tensor> {
        if self.check_structure().is_err() {
            return Vec::new();
        }
        let n_seqs = self.conv_input.ne()[2];
        let mut rows = Vec::new();
        for slot in 0..self.n_slots {
            for seq in 0..n_seqs {
                let nb = self.cache.layout.nb;
                let offset = self.row(slot, seq).saturating_mul(nb[1]);
                rows.push(self.cache.view([self.cache.ne()[0], 1, 1, 1], [nb[0], nb[1], nb[1], nb[1]], offset));
            }
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Layout;

    #[test]
    fn cpy_needs_equal_counts_and_disjoint_views() {
        let mut mem = HostMemory::new();
        let src = mem.alloc_tensor(DType::F32, [3, 4, 1, 1]);
        let dst = mem.alloc_tensor(DType::F32, [2, 6, 1, 1]);
        assert_eq!(Cpy { src, dst }.check(&mem).unwrap(), 12);
        let dst = mem.alloc_tensor(DType::F32, [13, 1, 1, 1]);
        assert!(matches!(Cpy { src, dst }.check(&mem), Err(Error::Shape { op: OP, arg: "dst", .. })));
        // dst overlapping src, in place included: the copy reorders elements.
        assert!(matches!(Cpy { src, dst: src.transpose() }.check(&mem), Err(Error::Aliasing { op: OP, .. })));
        // A broadcast destination (stride 0) would have many threads write one address.
        let dst = mem.alloc_tensor(DType::F32, [3, 1, 1, 1]).view([3, 4, 1, 1], [4, 0, 0, 0], 0);
        assert!(matches!(Cpy { src, dst }.check(&mem), Err(Error::Aliasing { a: "dst", b: "dst", .. })));
        // ... while a broadcast source is fine: every element is read, none written twice.
        let src = src.view([3, 4, 1, 1], [4, 0, 0, 0], 0);
        let dst = mem.alloc_tensor(DType::F32, [12, 1, 1, 1]);
        assert!(Cpy { src, dst }.check(&mem).is_ok());
    }

    #[test]
    fn cpy_refuses_bad_types_bounds_and_empty_views() {
        let mut mem = HostMemory::new();
        let src = mem.alloc_tensor(DType::I32, [4, 1, 1, 1]);
        let dst = mem.alloc_tensor(DType::F32, [4, 1, 1, 1]);
        assert!(matches!(Cpy { src, dst }.check(&mem), Err(Error::DType { arg: "src", .. })));
        let src = Tensor::new(dst.buffer, Layout::contiguous(DType::F32, [5, 1, 1, 1]));
        assert!(matches!(Cpy { src, dst: mem.alloc_tensor(DType::F32, [5, 1, 1, 1]) }.check(&mem), Err(Error::OutOfBounds { .. })));
        let src = dst.view([0, 1, 1, 1], dst.layout.nb, 0);
        assert!(matches!(Cpy { src, dst }.check(&mem), Err(Error::Empty { arg: "src", .. })));
    }

    /// d_conv = 4, C = 2, n_t = 3, n_s = 2 into a cache of 2 groups × 3 cells.
    fn snapshots(mem: &mut HostMemory) -> CpySnapshots {
        let conv_input = mem.alloc_tensor(DType::F32, [6, 2, 2, 1]);
        let cache = mem.alloc_tensor(DType::F32, [6, 6, 1, 1]);
        CpySnapshots { conv_input, cache, d_conv: 4, first_row: 1, group_stride: 3, n_slots: 2 }
    }

    #[test]
    fn a_valid_snapshot_set_passes() {
        let mut mem = HostMemory::new();
        let op = snapshots(&mut mem);
        assert_eq!(op.check(&mem).unwrap(), SnapshotShape { state_len: 3, n_channels: 2, n_tokens: 3, n_seqs: 2 });
        assert_eq!([op.row(0, 0), op.row(0, 1), op.row(1, 0), op.row(1, 1)], [1, 2, 4, 5]);
    }

    #[test]
    fn slot_counts_outside_1_to_17_are_refused() {
        let mut mem = HostMemory::new();
        let op = CpySnapshots { n_slots: 0, ..snapshots(&mut mem) };
        assert!(matches!(op.check(&mem), Err(Error::Invalid { op: OP_SNAPSHOTS, .. })));
        let cache = mem.alloc_tensor(DType::F32, [6, 40, 1, 1]);
        let op = CpySnapshots { n_slots: 18, cache, group_stride: 2, first_row: 0, ..snapshots(&mut mem) };
        assert!(matches!(op.check(&mem), Err(Error::Unsupported { op: OP_SNAPSHOTS, .. })));
        assert!(CpySnapshots { n_slots: 17, ..op }.check(&mem).is_ok());
    }

    #[test]
    fn rows_past_the_cache_are_refused() {
        let mut mem = HostMemory::new();
        // Slot 1 of sequence 1 would be row 2 + 3 + 1 = 6 of 6.
        let op = CpySnapshots { first_row: 2, ..snapshots(&mut mem) };
        assert!(matches!(op.check(&mem), Err(Error::IndexOutOfRange { arg: "cache", position: 3, index: 6, rows: 6, .. })));
        let op = CpySnapshots { group_stride: usize::MAX, ..snapshots(&mut mem) };
        assert!(matches!(op.check(&mem), Err(Error::IndexOutOfRange { index: i64::MAX, .. })));
    }

    #[test]
    fn two_pairs_writing_one_row_are_refused() {
        let mut mem = HostMemory::new();
        // group_stride 1 < n_s = 2: slot 0 of sequence 1 and slot 1 of sequence 0 are both row 2.
        let op = CpySnapshots { group_stride: 1, ..snapshots(&mut mem) };
        assert!(matches!(op.check(&mem), Err(Error::Aliasing { op: OP_SNAPSHOTS, a: "cache", b: "cache", .. })));
        // One slot never collides, whatever the stride.
        assert!(CpySnapshots { group_stride: 0, n_slots: 1, ..op }.check(&mem).is_ok());
        // group_stride = n_s packs the groups back to back: no collision.
        assert!(CpySnapshots { group_stride: 2, first_row: 0, ..op }.check(&mem).is_ok());
    }

    #[test]
    fn more_slot_rows_than_grid_y_allows_are_refused() {
        let mut mem = HostMemory::new();
        // 17 slots × 3856 sequences = 65552 blocks along y (at most 65535).
        let n_s = 3856;
        let conv_input = mem.alloc_tensor(DType::F32, [4, 1, n_s, 1]);
        let cache = mem.alloc_tensor(DType::F32, [3, 17 * n_s, 1, 1]);
        let op = CpySnapshots { conv_input, cache, d_conv: 4, first_row: 0, group_stride: n_s, n_slots: 17 };
        assert!(matches!(op.check(&mem), Err(Error::Unsupported { op: OP_SNAPSHOTS, .. })));
        assert!(CpySnapshots { n_slots: 16, ..op }.check(&mem).is_ok());
    }

    #[test]
    fn snapshot_shapes_and_overlap_are_checked() {
        let mut mem = HostMemory::new();
        let op = CpySnapshots { d_conv: 5, ..snapshots(&mut mem) };
        assert!(matches!(op.check(&mem), Err(Error::Shape { arg: "cache", .. })));
        let op = CpySnapshots { d_conv: 7, ..snapshots(&mut mem) };
        assert!(matches!(op.check(&mem), Err(Error::Shape { arg: "conv_input", .. })));
        let op = CpySnapshots { d_conv: 1, ..snapshots(&mut mem) };
        assert!(matches!(op.check(&mem), Err(Error::Invalid { .. })));
        // The cache overlapping conv_input: rows 0..1 of a cache laid over conv_input's buffer.
        let base = snapshots(&mut mem);
        let cache = Tensor::new(base.conv_input.buffer, Layout::contiguous(DType::F32, [6, 4, 1, 1]));
        let op = CpySnapshots { cache, first_row: 0, group_stride: 2, ..base };
        assert!(matches!(op.check(&mem), Err(Error::Aliasing { a: "cache", b: "conv_input", .. })));
        // Cache rows that overlap each other.
        let cache = base.cache.view([6, 6, 1, 1], [4, 8, 48, 48], 0);
        assert!(matches!(CpySnapshots { cache, ..base }.check(&mem), Err(Error::Aliasing { a: "cache", b: "cache", .. })));
    }
}
