//! Tensors as views, like ggml's: a buffer, a byte offset, `ne[4]` (elements per dimension,
//! `ne[0]` fastest) and `nb[4]` (byte strides). Views of the same buffer may overlap or alias;
//! each op says which overlaps it tolerates and refuses the others.

use std::ops::Range;

/// Element types the kernels read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit float.
    F32,
    /// IEEE half.
    F16,
    /// bfloat16.
    BF16,
    /// 32-bit signed integer (row indices).
    I32,
}

impl DType {
    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }
}

/// Which buffer of a [`Memory`](crate::memory::Memory) a tensor lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufferId(pub usize);

/// A layout quantity that does not fit in `usize` (the byte offset of the last element, the
/// element count, a stride product, …). Validation turns it into [`crate::Error::Overflow`]
/// naming the op and argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overflow {
    /// What overflowed, in words ("byte offset of the last element").
    pub what: &'static str,
}

impl std::fmt::Display for Overflow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} overflows 64 bits", self.what)
    }
}

/// The sum of `terms`, or `None` when it does not fit (ops and the layer add sizes with it).
pub fn checked_sum(terms: &[usize]) -> Option<usize> {
    terms.iter().try_fold(0usize, |acc, &t| acc.checked_add(t))
}

/// The product of `factors`, or `None` when it does not fit. A zero factor makes the product
/// 0 whatever the others are (an empty view has 0 elements even when another size is huge).
pub fn checked_product(factors: &[usize]) -> Option<usize> {
    if factors.contains(&0) {
        return Some(0);
    }
    factors.iter().try_fold(1usize, |acc, &f| acc.checked_mul(f))
}

/// `Π factors`, or [`crate::Error::Overflow`] naming the op, the argument and `what` (sizes
/// are multiplied only through this or [`checked_product`]).
pub fn try_product(op: &'static str, arg: &'static str, what: &str, factors: &[usize]) -> crate::Result<usize> {
    checked_product(factors).ok_or_else(|| crate::Error::Overflow {
        op,
        arg,
        what: format!("{what} ({})", factors.iter().map(usize::to_string).collect::<Vec<_>>().join(" · ")),
    })
}

/// Shape, strides and offset of a view, in ggml's conventions.
///
/// Every quantity derived from a layout has a checked form (`try_contiguous`,
/// `checked_n_elements`, `checked_byte_offset`, `checked_byte_range`, `checked_view`) that
/// returns `None`/[`Overflow`] instead of wrapping; validation (`ops::check`) uses those, so a
/// validated view has an exact byte range inside its buffer. The plain forms are for validated
/// views: for any other input they saturate at `usize::MAX` (never wrap, never panic), which
/// makes a range reach the end of the address space, so it fails every bounds check and
/// overlaps conservatively.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    /// Element type.
    pub dtype: DType,
    /// Byte offset of element (0, 0, 0, 0) from the start of the buffer.
    pub offset: usize,
    /// Elements per dimension, fastest first.
    pub ne: [usize; 4],
    /// Byte stride per dimension.
    pub nb: [usize; 4],
}

impl Layout {
    /// A contiguous tensor: `nb[0]` = element size, each further stride spans the dimension
    /// below. Strides that do not fit saturate at `usize::MAX` (see [`Layout::try_contiguous`]).
    pub fn contiguous(dtype: DType, ne: [usize; 4]) -> Self {
        let mut nb = [dtype.size(); 4];
        for d in 1..4 {
            nb[d] = nb[d - 1].saturating_mul(ne[d - 1]);
        }
        Layout { dtype, offset: 0, ne, nb }
    }

    /// [`Layout::contiguous`], or `None` when its byte size (the strides and the size of the
    /// whole tensor) does not fit in `usize`.
    pub fn try_contiguous(dtype: DType, ne: [usize; 4]) -> Option<Self> {
        let mut nb = [dtype.size(); 4];
        for d in 1..4 {
            nb[d] = nb[d - 1].checked_mul(ne[d - 1])?;
        }
        nb[3].checked_mul(ne[3])?;
        Some(Layout { dtype, offset: 0, ne, nb })
    }

    /// Bytes of a contiguous tensor of `ne`, or `None` when it does not fit.
    pub fn contiguous_bytes(dtype: DType, ne: [usize; 4]) -> Option<usize> {
        checked_product(&[ne[0], ne[1], ne[2], ne[3], dtype.size()])
    }

    /// Element count; saturates at `usize::MAX` (exact for validated views).
    pub fn n_elements(&self) -> usize {
        self.checked_n_elements().unwrap_or(usize::MAX)
    }

    /// Element count, or `None` when it does not fit.
    pub fn checked_n_elements(&self) -> Option<usize> {
        checked_product(&self.ne)
    }

    /// Whether the view has no elements.
    pub fn is_empty(&self) -> bool {
        self.ne.contains(&0)
    }

    /// True when the elements are densely packed in `ne` order (ggml_is_contiguous).
    pub fn is_contiguous(&self) -> bool {
        Layout::try_contiguous(self.dtype, self.ne).is_some_and(|c| *self == Layout { offset: self.offset, ..c })
    }

    /// Byte offset of element `i` from the start of the buffer; saturates at `usize::MAX`
    /// (exact for validated views and indices inside `ne`).
    pub fn byte_offset(&self, i: [usize; 4]) -> usize {
        self.checked_byte_offset(i).unwrap_or(usize::MAX)
    }

    /// Byte offset of element `i`, or `None` when it does not fit.
    pub fn checked_byte_offset(&self, i: [usize; 4]) -> Option<usize> {
        (0..4).try_fold(self.offset, |acc, d| acc.checked_add(i[d].checked_mul(self.nb[d])?))
    }

    /// The bytes the view can touch (first byte of the first element to the last byte of the
    /// last), or `None` when it has no elements. When the end does not fit it saturates at
    /// `usize::MAX` (see [`Layout::checked_byte_range`]).
    pub fn byte_range(&self) -> Option<Range<usize>> {
        match self.checked_byte_range() {
            Ok(r) => r,
            Err(_) => Some(self.offset..usize::MAX),
        }
    }

    /// The exact byte range (`Ok(None)` for an empty view), or which quantity overflowed.
    pub fn checked_byte_range(&self) -> Result<Option<Range<usize>>, Overflow> {
        if self.is_empty() {
            return Ok(None);
        }
        let last = self
            .checked_byte_offset(self.ne.map(|n| n - 1))
            .ok_or(Overflow { what: "byte offset of the last element (offset + Σ (ne[d] − 1)·nb[d])" })?;
        let end = last.checked_add(self.dtype.size()).ok_or(Overflow { what: "end of the last element" })?;
        Ok(Some(self.offset..end))
    }

    /// A view with new shape and strides, `extra_offset` bytes further in (ggml_view_4d). The
    /// offset saturates at `usize::MAX` (see [`Layout::checked_view`]).
    pub fn view(&self, ne: [usize; 4], nb: [usize; 4], extra_offset: usize) -> Self {
        Layout { dtype: self.dtype, offset: self.offset.saturating_add(extra_offset), ne, nb }
    }

    /// [`Layout::view`], or `None` when the new offset does not fit.
    pub fn checked_view(&self, ne: [usize; 4], nb: [usize; 4], extra_offset: usize) -> Option<Self> {
        Some(Layout { dtype: self.dtype, offset: self.offset.checked_add(extra_offset)?, ne, nb })
    }

    /// The same bytes with dimensions 0 and 1 swapped (ggml_transpose).
    pub fn transpose(&self) -> Self {
        let (mut ne, mut nb) = (self.ne, self.nb);
        ne.swap(0, 1);
        nb.swap(0, 1);
        Layout { ne, nb, ..*self }
    }

    /// A contiguous tensor with a new shape of the same element count (ggml_reshape); `None`
    /// for a non-contiguous view, a different count, or a shape whose size does not fit.
    pub fn reshape(&self, ne: [usize; 4]) -> Option<Self> {
        let count = self.checked_n_elements()?;
        let new = Layout::try_contiguous(self.dtype, ne)?;
        (self.is_contiguous() && checked_product(&ne)? == count).then_some(Layout { offset: self.offset, ..new })
    }

    /// Logical indices in `ne` order, fastest first (for gathering a view element by element).
    pub fn indices(&self) -> impl Iterator<Item = [usize; 4]> + '_ {
        let ne = self.ne;
        (0..ne[3])
            .flat_map(move |i3| (0..ne[2]).flat_map(move |i2| (0..ne[1]).flat_map(move |i1| (0..ne[0]).map(move |i0| [i0, i1, i2, i3]))))
    }
}

/// A view of one buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tensor {
    /// The buffer the view lies in.
    pub buffer: BufferId,
    /// Offset, shape and strides.
    pub layout: Layout,
}

impl Tensor {
    /// A view of `buffer`.
    pub fn new(buffer: BufferId, layout: Layout) -> Self {
        Tensor { buffer, layout }
    }

    /// Elements per dimension.
    pub fn ne(&self) -> [usize; 4] {
        self.layout.ne
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.layout.dtype
    }

    /// A sub-view (ggml_view_4d) of the same buffer (offset saturating: see [`Layout::view`]).
    pub fn view(&self, ne: [usize; 4], nb: [usize; 4], extra_offset: usize) -> Self {
        Tensor { buffer: self.buffer, layout: self.layout.view(ne, nb, extra_offset) }
    }

    /// [`Tensor::view`], or `None` when the new offset does not fit.
    pub fn checked_view(&self, ne: [usize; 4], nb: [usize; 4], extra_offset: usize) -> Option<Self> {
        Some(Tensor { buffer: self.buffer, layout: self.layout.checked_view(ne, nb, extra_offset)? })
    }

    /// The view with dimensions 0 and 1 swapped.
    pub fn transpose(&self) -> Self {
        Tensor { buffer: self.buffer, layout: self.layout.transpose() }
    }

    /// The same bytes as a contiguous view of shape `ne`, `None` when the view is not contiguous or the counts differ.
    pub fn reshape(&self, ne: [usize; 4]) -> Option<Self> {
        self.layout.reshape(ne).map(|layout| Tensor { buffer: self.buffer, layout })
    }

    /// [`Tensor::checked_view`], or [`crate::Error::Overflow`] naming `op` and `arg` (the
    /// checked-view helper every builder uses).
    pub fn try_view(
        &self,
        op: &'static str,
        arg: &'static str,
        ne: [usize; 4],
        nb: [usize; 4],
        extra_offset: usize,
    ) -> crate::Result<Self> {
        self.checked_view(ne, nb, extra_offset).ok_or_else(|| crate::Error::Overflow {
            op,
            arg,
            what: format!("view offset {} + {extra_offset}", self.layout.offset),
        })
    }

    /// [`Tensor::reshape`], or [`crate::Error::Stride`] naming `op` and `arg`.
    pub fn try_reshape(&self, op: &'static str, arg: &'static str, ne: [usize; 4]) -> crate::Result<Self> {
        self.reshape(ne).ok_or_else(|| crate::Error::Stride {
            op,
            arg,
            nb: self.layout.nb,
            offset: self.layout.offset,
            reason: format!("must be contiguous with the element count of {ne:?} to be reshaped to it"),
        })
    }

    /// True when the two views' byte ranges intersect (conservative: interleaved views that
    /// touch disjoint elements inside a common range also count; a range whose end overflows
    /// reaches the end of the address space).
    pub fn overlaps(&self, other: &Tensor) -> bool {
        if self.buffer != other.buffer {
            return false;
        }
        match (self.layout.byte_range(), other.layout.byte_range()) {
            (Some(a), Some(b)) => a.start < b.end && b.start < a.end,
            _ => false,
        }
    }

    /// True when both views address exactly the same elements in the same order.
    pub fn same_elements(&self, other: &Tensor) -> bool {
        self.buffer == other.buffer && self.layout == other.layout
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_strides_and_range() {
        let l = Layout::contiguous(DType::F32, [3, 4, 2, 1]);
        assert_eq!(l.nb, [4, 12, 48, 96]);
        assert!(l.is_contiguous());
        assert_eq!(l.byte_range(), Some(0..96));
        assert_eq!(l.byte_offset([2, 3, 1, 0]), 4 * (2 + 3 * 3 + 12));
    }

    #[test]
    fn transpose_is_a_non_contiguous_view_of_the_same_bytes() {
        let l = Layout::contiguous(DType::F32, [5, 7, 1, 1]);
        let t = l.transpose();
        assert_eq!(t.ne, [7, 5, 1, 1]);
        assert_eq!(t.nb, [20, 4, 140, 140]);
        assert!(!t.is_contiguous());
        assert_eq!(t.byte_range(), l.byte_range());
        assert_eq!(t.byte_offset([6, 4, 0, 0]), l.byte_offset([4, 6, 0, 0]));
    }

    #[test]
    fn reshape_needs_contiguity_and_equal_count() {
        let l = Layout::contiguous(DType::F32, [6, 4, 1, 1]);
        assert_eq!(l.reshape([3, 2, 4, 1]).unwrap().nb, [4, 12, 24, 96]);
        assert!(l.reshape([5, 5, 1, 1]).is_none());
        assert!(l.transpose().reshape([24, 1, 1, 1]).is_none());
    }

    #[test]
    fn overlap_is_by_byte_range_within_one_buffer() {
        let a = Tensor::new(BufferId(0), Layout::contiguous(DType::F32, [4, 1, 1, 1]));
        let b = a.view([4, 1, 1, 1], a.layout.nb, 16);
        let c = a.view([4, 1, 1, 1], a.layout.nb, 12);
        assert!(!a.overlaps(&b));
        assert!(a.overlaps(&c));
        assert!(!a.overlaps(&Tensor { buffer: BufferId(1), ..a }));
        assert!(a.same_elements(&a.view(a.layout.ne, a.layout.nb, 0)));
        assert!(!a.same_elements(&b));
    }

    #[test]
    fn overflowing_layouts_saturate_or_are_reported() {
        // The H200 case: a destination whose offset is 2^64 − 4 bytes.
        let l = Layout { offset: usize::MAX - 3, ..Layout::contiguous(DType::F32, [2, 1, 1, 1]) };
        assert_eq!(l.checked_byte_range(), Err(Overflow { what: "byte offset of the last element (offset + Σ (ne[d] − 1)·nb[d])" }));
        assert_eq!(l.byte_range(), Some(usize::MAX - 3..usize::MAX));
        assert_eq!(l.byte_offset([1, 0, 0, 0]), usize::MAX);
        // One element ending exactly at 2^64 does not fit either.
        let l = Layout { offset: usize::MAX - 3, ..Layout::contiguous(DType::F32, [1, 1, 1, 1]) };
        assert!(l.checked_byte_range().is_err());
        // A "negative" stride (wrapped) does not wrap back into the buffer.
        let l = Layout { dtype: DType::F32, offset: 64, ne: [2, 1, 1, 1], nb: [4usize.wrapping_neg(), 4, 4, 4] };
        assert!(l.checked_byte_range().is_err());
        assert!(l.byte_range().unwrap().end == usize::MAX);
        // Sizes whose product does not fit.
        let ne = [1 << 32, 1 << 32, 1, 1];
        assert_eq!(Layout::try_contiguous(DType::F32, ne), None);
        assert_eq!(Layout::contiguous(DType::F32, ne).n_elements(), usize::MAX);
        assert_eq!(Layout::contiguous_bytes(DType::F32, ne), None);
        assert!(!Layout::contiguous(DType::F32, ne).is_contiguous());
        assert_eq!(Layout::contiguous(DType::F32, [4, 1, 1, 1]).reshape(ne), None);
        // A zero dimension makes a view empty whatever the others are.
        assert_eq!(Layout { ne: [0, usize::MAX, usize::MAX, 2], ..Layout::contiguous(DType::F32, [1; 4]) }.checked_n_elements(), Some(0));
        let base = Layout::contiguous(DType::F32, [4, 1, 1, 1]).view([1; 4], [4; 4], 4);
        assert_eq!(base.checked_view([1; 4], [4; 4], usize::MAX), None);
        assert_eq!(base.view([1; 4], [4; 4], usize::MAX).offset, usize::MAX);
        assert_eq!(checked_sum(&[usize::MAX, 1]), None);
        assert_eq!(checked_product(&[3, 5]), Some(15));
    }

    #[test]
    fn empty_views_have_no_range() {
        let l = Layout::contiguous(DType::F32, [0, 4, 1, 1]);
        assert!(l.is_empty());
        assert_eq!(l.byte_range(), None);
    }
}
