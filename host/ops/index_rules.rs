//! [host-cost] Index rules prepared once per plan ([`Op::index_rules`]): the part of an op's
//! validation that depends on index values, with everything else worked out when the plan is
//! made, so that a step reads each index value once, in place, and compares it with tables.
//!
//! The rules of the fused ops (GDN_CONV_CHAIN, GATED_DELTA_NET_FROM_CACHE and GDN_LAYER_STEP,
//! which runs both on one index) are "is the value a row of the cache" and "may this sequence
//! read that row": which sequence may read which row depends only on the views (the rows the
//! step writes, and how a value maps to bytes), so a [`RowReaders`] table, built at plan time,
//! answers the second with one load per value.

use super::Op;
use crate::error::{Error, Result};
use crate::memory::Memory;
use crate::tensor::{DType, Tensor};

/// An op's index rules, ready to run against the index values a memory holds now: the verdict
/// of [`Op::check_indices`] on an op that passed [`Op::validate`], error for error
/// (`tests/plan.rs` holds every implementation to the full validation's verdict).
pub trait IndexRules: std::fmt::Debug {
    /// Runs the rules on the values `mem` holds now.
    fn check(&self, mem: &dyn Memory) -> Result<()>;
}

/// The default rules: [`Op::check_indices`] itself, for an op that prepares nothing.
#[derive(Debug)]
pub(crate) struct PerCall(pub Box<dyn Op>);

impl IndexRules for PerCall {
    fn check(&self, mem: &dyn Memory) -> Result<()> {
        self.0.check_indices(mem)
    }
}

/// An I32 index view of shape [n, 1, 1, 1], as its values are read at every step: `n` values,
/// `stride` bytes apart from byte `offset` of buffer `tensor.buffer`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct IndexView {
    pub tensor: Tensor,
    offset: usize,
    stride: usize,
    n: usize,
    /// One past the last byte read (`offset` when `n` = 0).
    end: usize,
}

impl IndexView {
    /// The view's reading plan; `None` when it is not an I32 [n, 1, 1, 1] view whose byte range
    /// is representable (validation refuses those; the caller then keeps its per-call rules).
    pub fn new(tensor: &Tensor) -> Option<IndexView> {
        let l = &tensor.layout;
        let [n, 1, 1, 1] = l.ne else { return None };
        if l.dtype != DType::I32 || !l.nb[0].is_multiple_of(4) {
            return None;
        }
        let end = match l.checked_byte_range().ok()? {
            Some(r) => r.end,
            None => l.offset,
        };
        Some(IndexView { tensor: *tensor, offset: l.offset, stride: l.nb[0], n, end })
    }

    /// The values `mem` holds, as [`Memory::index_values`] reads them — `None` exactly when it
    /// returns `None` (not an index buffer, the view past the buffer's bytes, or more than
    /// [`crate::memory::MAX_INDEX_VALUES`] values) — but read in place when the memory lends
    /// its bytes ([`Memory::index_bytes`]).
    pub fn read<'m>(&self, mem: &'m dyn Memory) -> Option<Values<'m>> {
        match mem.index_bytes(self.tensor.buffer) {
            // `index_values` refuses a view reaching past the bytes, or of more values than it
            // copies, before reading any value.
            Some(bytes) if (self.n > 0 && self.end > bytes.len()) || self.n > crate::memory::MAX_INDEX_VALUES => None,
            Some(bytes) => Some(Values::InPlace { bytes, offset: self.offset, stride: self.stride, n: self.n }),
            None => mem.index_values(&self.tensor).map(Values::Copied),
        }
    }

    /// Whether both views read the same values (same buffer and layout).
    pub fn same_values(&self, other: &IndexView) -> bool {
        self.tensor == other.tensor
    }
}

/// Index values of one step, read in place or copied.
pub(crate) enum Values<'m> {
    InPlace { bytes: &'m [u8], offset: usize, stride: usize, n: usize },
    Copied(Vec<i32>),
}

impl Values<'_> {
    /// How many values there are.
    pub fn len(&self) -> usize {
        match self {
            Values::InPlace { n, .. } => *n,
            Values::Copied(values) => values.len(),
        }
    }

    /// Calls `f(position, value)` for every value in order until it returns `Err`.
    pub fn try_for_each(&self, mut f: impl FnMut(usize, i32) -> Result<()>) -> Result<()> {
        match self {
            Values::InPlace { bytes, offset, stride, n } => {
                for p in 0..*n {
                    let o = offset + p * stride;
                    // In bounds: `IndexView::read` checked the view's last byte against the
                    // buffer (and its byte range is representable), so every o + 4 ≤ end ≤ len.
                    let v = i32::from_le_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]);
                    f(p, v)?;
                }
                Ok(())
            }
            Values::Copied(values) => values.iter().enumerate().try_for_each(|(p, &v)| f(p, v)),
        }
    }

    /// The fused ops' two index rules in their full validations' order: every value in range
    /// first (`range(position, value)` → the row, or the first out-of-range value's error), then,
    /// if any position reads a row it may not (`may_read(position, row)` false), `refused()`.
    pub fn range_then_readers(
        &self,
        range: impl Fn(usize, i32) -> Result<usize>,
        may_read: impl Fn(usize, usize) -> bool,
        refused: impl FnOnce() -> Error,
    ) -> Result<()> {
        let mut others = false;
        self.try_for_each(|p, v| {
            others |= !may_read(p, range(p, v)?);
            Ok(())
        })?;
        if others { Err(refused()) } else { Ok(()) }
    }
}

/// Which sequence may read each cache row, for the rows a step writes (or touches): worked out
/// at plan time from the views, so that the per-step rule "no sequence reads a row another
/// sequence writes" is one load per index value. Rows outside the table may be read by any
/// sequence.
#[derive(Clone, Debug)]
pub(crate) struct RowReaders {
    first: usize,
    who: Vec<u32>,
}

/// Any sequence may read the row.
const ANYONE: u32 = u32::MAX;
/// No sequence may read the row.
const NOBODY: u32 = u32::MAX - 1;

/// The most rows a [`RowReaders`] table covers (4 MiB of table): a step whose touched rows
/// spread wider keeps its per-call rules. Real steps touch (1 + R)·cells rows or fewer.
pub(crate) const MAX_TABLE_ROWS: usize = 1 << 20;

/// The most touches a table is built from (bounds plan time on views whose rows overlap each
/// other many times over, which no real cache has).
pub(crate) const MAX_TOUCHES: usize = 1 << 22;

impl RowReaders {
    /// The table of `touches`: `(row, Some(s))` — the row may be read by sequence `s` and no
    /// other — or `(row, None)` — by no sequence; a row touched several times may be read only
    /// by a sequence every touch allows. `None` when the touched rows span more than
    /// [`MAX_TABLE_ROWS`] or a sequence number is not below [`NOBODY`].
    pub fn from_touches(touches: &[(usize, Option<usize>)]) -> Option<RowReaders> {
        let Some(first) = touches.iter().map(|t| t.0).min() else {
            return Some(RowReaders { first: 0, who: Vec::new() });
        };
        let last = touches.iter().map(|t| t.0).max()?;
        if last - first >= MAX_TABLE_ROWS || touches.iter().any(|t| t.1.is_some_and(|s| s >= NOBODY as usize)) {
            return None;
        }
        let mut who = vec![ANYONE; last - first + 1];
        for &(row, seq) in touches {
            let w = &mut who[row - first];
            *w = match seq {
                // Validated above: s < NOBODY.
                Some(s) if *w == ANYONE || *w == s as u32 => s as u32,
                _ => NOBODY,
            };
        }
        Some(RowReaders { first, who })
    }

    /// Whether sequence `seq` may read row `row`.
    #[inline]
    pub fn may_read(&self, row: usize, seq: usize) -> bool {
        // Rows before `first` wrap to past the table: anyone may read them, as after it.
        match self.who.get(row.wrapping_sub(self.first)) {
            None => true,
            Some(&w) => w == ANYONE || w as usize == seq,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::HostMemory;
    use crate::tensor::Layout;

    #[test]
    fn a_table_allows_exactly_what_every_touch_of_a_row_allows() {
        // Row 5: sequence 1 only; row 6: sequence 1 twice; row 7: two sequences → nobody;
        // row 8: nobody; row 9 untouched inside the span, 4 and 11 outside it.
        let t = RowReaders::from_touches(&[(5, Some(1)), (6, Some(1)), (6, Some(1)), (7, Some(0)), (7, Some(2)), (8, None), (10, Some(0))])
            .unwrap();
        assert!(t.may_read(5, 1) && !t.may_read(5, 0) && !t.may_read(5, 2));
        assert!(t.may_read(6, 1) && !t.may_read(6, 0));
        assert!((0..4).all(|s| !t.may_read(7, s) && !t.may_read(8, s)));
        assert!((0..4).all(|s| t.may_read(9, s) && t.may_read(4, s) && t.may_read(11, s) && t.may_read(0, s)));
        assert!(t.may_read(usize::MAX, 3));
        // Nobody stays nobody whatever touches the row after.
        let t = RowReaders::from_touches(&[(3, None), (3, Some(1))]).unwrap();
        assert!(!t.may_read(3, 1));
        // Too wide a span, or a sequence number that collides with the markers: no table.
        assert!(RowReaders::from_touches(&[(0, None), (MAX_TABLE_ROWS, None)]).is_none());
        assert!(RowReaders::from_touches(&[(0, None), (MAX_TABLE_ROWS - 1, None)]).is_some());
        assert!(RowReaders::from_touches(&[(0, Some(NOBODY as usize))]).is_none());
        assert!(RowReaders::from_touches(&[]).unwrap().may_read(0, 0));
    }

    #[test]
    fn values_are_read_in_place_as_index_values_reads_them() {
        let mut mem = HostMemory::new();
        let idx = mem.alloc_indices(&[7, -1, 3, 9]);
        let data = mem.alloc_tensor(DType::I32, [4, 1, 1, 1]);
        let read = |mem: &HostMemory, t: &Tensor| -> Option<Vec<(usize, i32)>> {
            let mut got = Vec::new();
            IndexView::new(t)?
                .read(mem)?
                .try_for_each(|p, v| {
                    got.push((p, v));
                    Ok(())
                })
                .ok()?;
            Some(got)
        };
        let values = |mem: &HostMemory, t: &Tensor| mem.index_values(t).map(|v| v.into_iter().enumerate().collect::<Vec<_>>());
        let views = [
            idx,
            // Every second value, a broadcast, a broadcast of more values than the memory
            // copies, an empty view, one past the end, a data buffer.
            idx.view([2, 1, 1, 1], [8, 8, 8, 8], 0),
            idx.view([3, 1, 1, 1], [0, 4, 4, 4], 4),
            idx.view([crate::memory::MAX_INDEX_VALUES + 1, 1, 1, 1], [0, 4, 4, 4], 4),
            idx.view([0, 1, 1, 1], [4, 4, 4, 4], 16),
            idx.view([2, 1, 1, 1], [4, 4, 4, 4], 12),
            data,
        ];
        for t in views {
            assert_eq!(read(&mem, &t), values(&mem, &t), "{:?}", t.layout);
        }
        assert_eq!(read(&mem, &views[1]), Some(vec![(0, 7), (1, 3)]));
        // Not an I32 [n, 1, 1, 1] view: no reading plan (the op keeps its per-call rules).
        assert!(IndexView::new(&Tensor::new(idx.buffer, Layout::contiguous(DType::I32, [2, 2, 1, 1]))).is_none());
        assert!(IndexView::new(&Tensor::new(idx.buffer, Layout::contiguous(DType::F32, [4, 1, 1, 1]))).is_none());
    }
}
