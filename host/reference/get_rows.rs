//! GET_ROWS reference (spec §2.1): `dst row i = src row rows[i]`, moved as bits.

use crate::error::Result;
use crate::memory::HostMemory;
use crate::tensor::Tensor;

/// The sizes a valid GET_ROWS (`ops::GetRows`) runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowsShape {
    /// Elements per row.
    pub row_len: usize,
    /// Rows of `src`.
    pub n_src_rows: usize,
    /// Rows gathered (`rows` entries, `dst` rows).
    pub n_rows: usize,
}

/// CPU reference of GET_ROWS on a validated op's views (every index proved in range).
pub fn get_rows(src: &Tensor, rows: &Tensor, dst: &Tensor, shape: &RowsShape, mem: &mut HostMemory) -> Result<()> {
    for i in 0..shape.n_rows {
        // `check` proved 0 ≤ index < n_src_rows.
        let r = mem.read_u32(rows, [i, 0, 0, 0])? as i32 as usize;
        for i0 in 0..shape.row_len {
            let v = mem.read_u32(src, [i0, r, 0, 0])?;
            mem.write_u32(dst, [i0, i, 0, 0], v)?;
        }
    }
    Ok(())
}
