//! GET_ROWS f32 → f32 — kernel: `kernels-gpu/src/get_rows.rs`, reference:
//! [`crate::reference::get_rows`], spec §2.1.

use super::{Op, check};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, KernelArg, LaunchDims, ParamBlock, PreparedLaunch};
use crate::kernels::abi;
use crate::memory::{DeviceMemory, HostMemory, Memory};
use crate::reference::math::Mufu;
use crate::tensor::{DType, Tensor};

const OP: &str = "GET_ROWS";

/// GET_ROWS f32: dst row i = src row `rows[i]`. src F32 ne [row_len, n_src_rows, 1, 1] (rows
/// contiguous); rows: I32 ne [n, 1, 1, 1] in an index buffer (values known to the host:
/// `Memory::index_values`, each checked to be in 0..n_src_rows → Error::IndexOutOfRange); dst F32
/// ne [row_len, n, 1, 1] rows contiguous, disjoint from src.
#[derive(Clone, Debug)]
pub struct GetRows {
    pub src: Tensor,
    pub rows: Tensor,
    pub dst: Tensor,
}

/// The sizes a valid [`GetRows`] runs with (declared beside the reference that iterates them).
pub use crate::reference::get_rows::RowsShape;

impl GetRows {
    /// Validates the op (every index included) and returns its sizes.
    pub fn check(&self, mem: &dyn Memory) -> Result<RowsShape> {
        check::tensor(OP, "src", &self.src, DType::F32, mem)?;
        let [row_len, n_src_rows, ..] = self.src.ne();
        check::shape(OP, "src", &self.src, [row_len, n_src_rows, 1, 1])?;
        check::rows_contiguous(OP, "src", &self.src)?;
        check::tensor(OP, "rows", &self.rows, DType::I32, mem)?;
        let n_rows = self.rows.ne()[0];
        check::shape(OP, "rows", &self.rows, [n_rows, 1, 1, 1])?;
        check::output(OP, "dst", &self.dst, DType::F32, mem)?;
        check::shape(OP, "dst", &self.dst, [row_len, n_rows, 1, 1])?;
        check::rows_contiguous(OP, "dst", &self.dst)?;
        check::disjoint(OP, "dst", &self.dst, "src", &self.src)?;
        // [validation] before the index values are read (their count is bounded by dst's bytes).
        if n_rows > i32::MAX as usize {
            return Err(Error::Unsupported { op: OP, what: format!("{n_rows} rows gathered (grid x ≤ 2^31 − 1)") });
        }
        self.check_rows(mem, n_src_rows)?;
        Ok(RowsShape { row_len, n_src_rows, n_rows })
    }

    /// The rule that depends on the index values: each in 0..n_src_rows.
    fn check_rows(&self, mem: &dyn Memory, n_src_rows: usize) -> Result<()> {
        let values = mem.index_values(&self.rows).ok_or_else(|| Error::Invalid {
            op: OP,
            what: format!("`rows` (buffer {}) is not an index buffer: its values must be known to the host", self.rows.buffer.0),
        })?;
        for (position, &index) in values.iter().enumerate() {
            if index < 0 || index as usize >= n_src_rows {
                return Err(Error::IndexOutOfRange { op: OP, arg: "rows", position, index: index as i64, rows: n_src_rows });
            }
        }
        Ok(())
    }
}

impl Op for GetRows {
    fn name(&self) -> &'static str {
        OP
    }

    fn validate(&self, mem: &dyn Memory) -> Result<()> {
        self.check(mem).map(|_| ())
    }

    fn check_indices(&self, mem: &dyn Memory) -> Result<()> {
        self.check_rows(mem, self.src.ne()[1])
    }

    fn prepare(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<PreparedLaunch> {
        let shape = self.check(mem)?;
        let [_, src_row, ..] = check::elem_strides(&self.src);
        let [rows_stride, ..] = check::elem_strides(&self.rows);
        let [_, dst_row, ..] = check::elem_strides(&self.dst);
        let blocks_y = shape.row_len.div_ceil(abi::GET_ROWS_BLOCK as usize).min(abi::GET_ROWS_MAX_GRID_Y as usize) as u32;
        let dims = LaunchDims::new((shape.n_rows as u32, blocks_y, 1), (abi::GET_ROWS_BLOCK, 1, 1));
        let params = abi::GetRowsParams {
            src: mem.device_ptr(&self.src),
            src_row,
            rows: mem.device_ptr(&self.rows),
            rows_stride,
            dst: mem.device_ptr(&self.dst),
            dst_row,
            row_len: shape.row_len as u64,
        };
        // SAFETY: `check` proved that every row index in the index buffer (whose device copy
        // holds the same values) is in 0..n_src_rows, that src, rows and dst lie inside their
        // buffers for row_len elements × the grid's n_rows rows, that dst rows are distinct and
        // disjoint from src, and `params` is the struct the entry takes.
        unsafe { gpu.prepare(abi::GET_ROWS_ENTRY, dims, &[KernelArg::Params(ParamBlock::of(&params)?)]) }
    }

    fn reference(&self, mem: &mut HostMemory, _mufu: &mut dyn Mufu) -> Result<()> {
        let shape = self.check(mem)?;
        crate::reference::get_rows::get_rows(&self.src, &self.rows, &self.dst, &shape, mem)?;
        Ok(())
    }

    fn inputs(&self) -> Vec<Tensor> {
        vec![self.src, self.rows]
    }

    fn outputs(&self) -> Vec<Tensor> {
        vec![self.dst]
    }

    fn must_write(&self) -> Vec<Tensor> {
        self.outputs()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Layout;

    /// A 4-row source of 8 elements, indices `idx`, and a matching destination.
    fn op(mem: &mut HostMemory, idx: &[i32]) -> GetRows {
        let src = mem.alloc_tensor(DType::F32, [8, 4, 1, 1]);
        let rows = mem.alloc_indices(idx);
        let dst = mem.alloc_tensor(DType::F32, [8, idx.len(), 1, 1]);
        GetRows { src, rows, dst }
    }

    #[test]
    fn a_valid_gather_passes() {
        let mut mem = HostMemory::new();
        let o = op(&mut mem, &[3, 0, 3]);
        assert_eq!(o.check(&mem).unwrap(), RowsShape { row_len: 8, n_src_rows: 4, n_rows: 3 });
    }

    #[test]
    fn indices_outside_the_source_are_refused_with_their_position() {
        let mut mem = HostMemory::new();
        let o = op(&mut mem, &[0, 4]);
        assert!(matches!(o.check(&mem), Err(Error::IndexOutOfRange { op: OP, arg: "rows", position: 1, index: 4, rows: 4 })));
        let o = op(&mut mem, &[-1]);
        assert!(matches!(o.check(&mem), Err(Error::IndexOutOfRange { position: 0, index: -1, .. })));
        // The reference refuses too instead of reading out of bounds.
        assert!(matches!(o.reference(&mut mem, &mut crate::reference::math::ExactMufu), Err(Error::IndexOutOfRange { .. })));
    }

    #[test]
    fn indices_must_be_host_known() {
        let mut mem = HostMemory::new();
        let mut o = op(&mut mem, &[1]);
        o.rows = mem.alloc_tensor(DType::I32, [1, 1, 1, 1]);
        assert!(matches!(o.check(&mem), Err(Error::Invalid { op: OP, .. })));
    }

    #[test]
    fn types_and_shapes_are_checked() {
        let mut mem = HostMemory::new();
        let mut o = op(&mut mem, &[1, 2]);
        o.rows = mem.alloc_tensor(DType::F32, [2, 1, 1, 1]);
        assert!(matches!(o.check(&mem), Err(Error::DType { arg: "rows", .. })));
        let mut o = op(&mut mem, &[1, 2]);
        o.dst = mem.alloc_tensor(DType::F32, [8, 3, 1, 1]);
        assert!(matches!(o.check(&mem), Err(Error::Shape { arg: "dst", .. })));
        let mut o = op(&mut mem, &[1, 2]);
        o.src = mem.alloc_tensor(DType::F32, [8, 4, 2, 1]);
        assert!(matches!(o.check(&mem), Err(Error::Shape { arg: "src", .. })));
    }

    #[test]
    fn strided_elements_and_overlapping_rows_are_refused() {
        let mut mem = HostMemory::new();
        let mut o = op(&mut mem, &[1, 2]);
        o.src = o.src.view([4, 4, 1, 1], [8, 32, 128, 128], 0);
        o.dst = o.dst.view([4, 2, 1, 1], [4, 32, 64, 64], 0);
        assert!(matches!(o.check(&mem), Err(Error::Stride { arg: "src", .. })));
        // Two destination rows on the same bytes: two blocks would race.
        let mut o = op(&mut mem, &[1, 2]);
        o.dst = o.dst.view([8, 2, 1, 1], [4, 0, 32, 32], 0);
        assert!(matches!(o.check(&mem), Err(Error::Aliasing { a: "dst", b: "dst", .. })));
    }

    #[test]
    fn the_destination_must_not_overlap_the_source() {
        let mut mem = HostMemory::new();
        let mut o = op(&mut mem, &[1]);
        o.dst = Tensor::new(o.src.buffer, Layout::contiguous(DType::F32, [8, 1, 1, 1]));
        assert!(matches!(o.check(&mem), Err(Error::Aliasing { op: OP, .. })));
        // Writing into the index buffer is refused as well.
        let mut o = op(&mut mem, &[1]);
        let index_buffer = mem.alloc_indices(&[0; 8]).buffer;
        o.dst = Tensor::new(index_buffer, Layout::contiguous(DType::F32, [8, 1, 1, 1]));
        assert!(matches!(o.check(&mem), Err(Error::Invalid { op: OP, .. })));
    }
}
