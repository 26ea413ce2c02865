//! Validation shared by every op: each function names the op and argument in its error.

use crate::error::{Error, Result};
use crate::memory::Memory;
use crate::tensor::{self, DType, Tensor};

/// A tensor the op will access: right type, not empty, element-aligned, inside its buffer, its
/// exact byte range and element count representable (checked arithmetic: a view whose last
/// element's offset does not fit is an [`Error::Overflow`], never a wrapped range).
pub(crate) fn tensor(op: &'static str, arg: &'static str, t: &Tensor, dtype: DType, mem: &dyn Memory) -> Result<()> {
    if t.dtype() != dtype {
        return Err(Error::DType { op, arg, expected: format!("{dtype:?}"), got: t.dtype() });
    }
    let l = &t.layout;
    let range = l.checked_byte_range().map_err(|o| Error::Overflow { op, arg, what: o.what.into() })?;
    let Some(range) = range else {
        return Err(Error::Empty { op, arg, ne: l.ne });
    };
    if l.checked_n_elements().is_none() {
        return Err(Error::Overflow { op, arg, what: format!("element count of shape {:?}", l.ne) });
    }
    let size = dtype.size();
    if !l.offset.is_multiple_of(size) || l.nb.iter().any(|nb| nb % size != 0) {
        return Err(Error::Stride {
            op,
            arg,
            nb: l.nb,
            offset: l.offset,
            reason: format!("offset and strides must be multiples of the {size}-byte element"),
        });
    }
    let len = mem
        .buffer_len(t.buffer)
        .ok_or_else(|| Error::Invalid { op, what: format!("`{arg}` names buffer {}, which does not exist", t.buffer.0) })?;
    if range.end > len {
        return Err(Error::OutOfBounds { op, arg, buffer: t.buffer.0, start: range.start, end: range.end, len });
    }
    Ok(())
}

/// A tensor the op writes: also not an index buffer (whose host-side values must stay true),
/// and no two of its elements share bytes ([`distinct_elements`]: every kernel here writes its
/// outputs element by element from different threads, so a self-overlapping output races).
/// Every op's outputs go through here, so none can forget the self-overlap check; the
/// partial-overlap rules between an output and the inputs stay per op.
///
/// Outputs that an op writes only in part are no exception: CPY_SNAPSHOTS' `cache` is the
/// whole [(d_conv−1)·C, rows] cache, of which each (slot, sequence) pair writes one row, and
/// GATED_DELTA_NET's `states` is [D·D·H_v, n_s, K] with slot stride M rows. Two cache rows that
/// share bytes would be written by two blocks, so element-distinctness of the whole view is
/// necessary; and it refuses no legitimate cache: for `states` (row = D·D·H_v floats, rows
/// contiguous) the nesting condition reads M·row ≥ (n_s − 1)·row + row, i.e. M ≥ n_s — exactly
/// the condition for the groups of different slots not to collide.
pub(crate) fn output(op: &'static str, arg: &'static str, t: &Tensor, dtype: DType, mem: &dyn Memory) -> Result<()> {
    tensor(op, arg, t, dtype, mem)?;
    if mem.is_index_buffer(t.buffer) {
        return Err(Error::Invalid { op, what: format!("`{arg}` is in index buffer {}; kernels never write index buffers", t.buffer.0) });
    }
    distinct_elements(op, arg, t)
}

/// `Σ terms`, or [`Error::Overflow`] naming `what` (ops add sizes only through this).
pub(crate) fn sum(op: &'static str, arg: &'static str, what: &str, terms: &[usize]) -> Result<usize> {
    tensor::checked_sum(terms).ok_or_else(|| Error::Overflow { op, arg, what: format!("{what} ({})", join(terms, " + ")) })
}

/// `Π factors`, or [`Error::Overflow`] naming `what` (ops multiply sizes only through this).
pub(crate) fn product(op: &'static str, arg: &'static str, what: &str, factors: &[usize]) -> Result<usize> {
    tensor::try_product(op, arg, what, factors)
}

fn join(v: &[usize], sep: &str) -> String {
    v.iter().map(usize::to_string).collect::<Vec<_>>().join(sep)
}

/// Exactly this shape.
pub(crate) fn shape(op: &'static str, arg: &'static str, t: &Tensor, expected: [usize; 4]) -> Result<()> {
    if t.ne() != expected {
        return Err(Error::Shape { op, arg, expected: format!("{expected:?}"), got: t.ne() });
    }
    Ok(())
}

/// Elements along dimension 0 are adjacent (what every kernel here assumes for rows).
pub(crate) fn rows_contiguous(op: &'static str, arg: &'static str, t: &Tensor) -> Result<()> {
    if t.ne()[0] > 1 && t.layout.nb[0] != t.dtype().size() {
        return Err(Error::Stride { op, arg, nb: t.layout.nb, offset: t.layout.offset, reason: "dimension 0 must be contiguous".into() });
    }
    Ok(())
}

/// The two tensors touch disjoint bytes.
pub(crate) fn disjoint(op: &'static str, a: &'static str, ta: &Tensor, b: &'static str, tb: &Tensor) -> Result<()> {
    if ta.overlaps(tb) {
        return Err(Error::Aliasing { op, a, b, why: "the kernel reads one while writing the other" });
    }
    Ok(())
}

/// Either the same elements (an in-place op each thread does element by element) or disjoint.
pub(crate) fn same_or_disjoint(op: &'static str, a: &'static str, ta: &Tensor, b: &'static str, tb: &Tensor) -> Result<()> {
    if ta.overlaps(tb) && !ta.same_elements(tb) {
        return Err(Error::Aliasing { op, a, b, why: "partial overlap (only exact in-place use is allowed)" });
    }
    Ok(())
}

/// Element strides of a validated tensor (byte strides over the element size), as the kernels
/// take them.
pub(crate) fn elem_strides(t: &Tensor) -> [u64; 4] {
    let s = t.dtype().size();
    t.layout.nb.map(|nb| (nb / s) as u64)
}

/// A count that a kernel takes as `u32` (or a grid dimension).
pub(crate) fn fits_u32(op: &'static str, what: &str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::Unsupported { op, what: format!("{what} = {v} (above u32)") })
}

/// An output view addresses each of its elements at its own bytes (called by [`output`]) (no two threads write the
/// same address). Sufficient test: ordering the dimensions of more than one element by stride,
/// each stride reaches past everything the smaller ones span. Views that interleave in other
/// ways are refused even where they would happen to be one-to-one.
pub(crate) fn distinct_elements(op: &'static str, arg: &'static str, t: &Tensor) -> Result<()> {
    let l = &t.layout;
    let mut dims: Vec<(usize, usize)> = (0..4).filter(|&d| l.ne[d] > 1).map(|d| (l.nb[d], l.ne[d])).collect();
    dims.sort_unstable();
    let mut span = t.dtype().size();
    for (nb, ne) in dims {
        if nb < span {
            return Err(Error::Aliasing {
                op,
                a: arg,
                b: arg,
                why: "two elements of the output view share bytes (its dimensions do not nest)",
            });
        }
        // Below the byte range's length, which `tensor` proved representable; checked anyway.
        span = nb.checked_mul(ne - 1).and_then(|s| s.checked_add(span)).ok_or_else(|| Error::Overflow {
            op,
            arg,
            what: "byte span of the output view".into(),
        })?;
    }
    Ok(())
}
