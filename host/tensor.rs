//! Tensors as views, like ggml's: a buffer, a byte offset, `ne[4]` (elements per dimension,
//! `ne[0]` fastest) and `nb[4]` (byte strides). Views of the same buffer may overlap or alias;
//! each op says which overlaps it tolerates and refuses the others.

use std::ops::Range;

/// Element types the kernels read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F16,
    BF16,
    I32,
}

impl DType {
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

/// Shape, strides and offset of a view, in ggml's conventions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    pub dtype: DType,
    /// Byte offset of element (0, 0, 0, 0) from the start of the buffer.
    pub offset: usize,
    /// Elements per dimension, fastest first.
    pub ne: [usize; 4],
    /// Byte stride per dimension.
    pub nb: [usize; 4],
}

impl Layout {
    /// A contiguous tensor: `nb[0]` = element size, each further stride spans the dimension below.
    pub fn contiguous(dtype: DType, ne: [usize; 4]) -> Self {
        let mut nb = [dtype.size(); 4];
        for d in 1..4 {
            nb[d] = nb[d - 1] * ne[d - 1];
        }
        Layout { dtype, offset: 0, ne, nb }
    }

    pub fn n_elements(&self) -> usize {
        self.ne.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.n_elements() == 0
    }

    /// True when the elements are densely packed in `ne` order (ggml_is_contiguous).
    pub fn is_contiguous(&self) -> bool {
        *self == Layout { offset: self.offset, ..Layout::contiguous(self.dtype, self.ne) }
    }

    /// Byte offset of element `i` from the start of the buffer.
    pub fn byte_offset(&self, i: [usize; 4]) -> usize {
        self.offset + i[0] * self.nb[0] + i[1] * self.nb[1] + i[2] * self.nb[2] + i[3] * self.nb[3]
    }

    /// The bytes the view can touch (first byte of the first element to the last byte of the
    /// last), or `None` when it has no elements.
    pub fn byte_range(&self) -> Option<Range<usize>> {
        if self.is_empty() {
            return None;
        }
        let last = self.byte_offset([self.ne[0] - 1, self.ne[1] - 1, self.ne[2] - 1, self.ne[3] - 1]);
        Some(self.offset..last + self.dtype.size())
    }

    /// A view with new shape and strides, `extra_offset` bytes further in (ggml_view_4d).
    pub fn view(&self, ne: [usize; 4], nb: [usize; 4], extra_offset: usize) -> Self {
        Layout { dtype: self.dtype, offset: self.offset + extra_offset, ne, nb }
    }

    /// The same bytes with dimensions 0 and 1 swapped (ggml_transpose).
    pub fn transpose(&self) -> Self {
        let (mut ne, mut nb) = (self.ne, self.nb);
        ne.swap(0, 1);
        nb.swap(0, 1);
        Layout { ne, nb, ..*self }
    }

    /// A contiguous tensor with a new shape of the same element count (ggml_reshape); `None`
    /// for a non-contiguous view or a different count.
    pub fn reshape(&self, ne: [usize; 4]) -> Option<Self> {
        (self.is_contiguous() && ne.iter().product::<usize>() == self.n_elements())
            .then(|| Layout { offset: self.offset, ..Layout::contiguous(self.dtype, ne) })
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
    pub buffer: BufferId,
    pub layout: Layout,
}

impl Tensor {
    pub fn new(buffer: BufferId, layout: Layout) -> Self {
        Tensor { buffer, layout }
    }

    pub fn ne(&self) -> [usize; 4] {
        self.layout.ne
    }

    pub fn dtype(&self) -> DType {
        self.layout.dtype
    }

    /// A sub-view (ggml_view_4d) of the same buffer.
    pub fn view(&self, ne: [usize; 4], nb: [usize; 4], extra_offset: usize) -> Self {
        Tensor { buffer: self.buffer, layout: self.layout.view(ne, nb, extra_offset) }
    }

    pub fn transpose(&self) -> Self {
        Tensor { buffer: self.buffer, layout: self.layout.transpose() }
    }

    pub fn reshape(&self, ne: [usize; 4]) -> Option<Self> {
        self.layout.reshape(ne).map(|layout| Tensor { buffer: self.buffer, layout })
    }

    /// True when the two views' byte ranges intersect (conservative: interleaved views that
    /// touch disjoint elements inside a common range also count).
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
    fn empty_views_have_no_range() {
        let l = Layout::contiguous(DType::F32, [0, 4, 1, 1]);
        assert!(l.is_empty());
        assert_eq!(l.byte_range(), None);
    }
}
