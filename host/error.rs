//! One error type for the whole library. Every refusal names the op, the argument and what was
//! wrong, so callers (and tests) can match on the variant instead of parsing text.

use crate::tensor::DType;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No usable CUDA driver or device; nothing was launched.
    #[error("no GPU: {reason}")]
    NoGpu { reason: String },

    /// Writing a report or the program's output failed (a closed pipe, a full disk).
    #[error("writing the output: {0}")]
    Io(#[from] std::io::Error),

    /// The CUDA driver refused a call.
    #[error("CUDA driver error: {0}")]
    Driver(#[from] cudarc::driver::DriverError),

    /// A tensor has the wrong number of elements along some dimension.
    #[error("{op}: `{arg}` has shape {got:?}, expected {expected}")]
    Shape { op: &'static str, arg: &'static str, expected: String, got: [usize; 4] },

    /// A tensor's strides or offset do not fit what the kernel reads or writes.
    #[error("{op}: `{arg}` has strides {nb:?} (bytes) at offset {offset}: {reason}")]
    Stride { op: &'static str, arg: &'static str, nb: [usize; 4], offset: usize, reason: String },

    /// A tensor has the wrong element type.
    #[error("{op}: `{arg}` is {got:?}, expected {expected}")]
    DType { op: &'static str, arg: &'static str, expected: String, got: DType },

    /// A tensor has no elements (ggml's "null size"); the kernels never launch on those.
    #[error("{op}: `{arg}` is empty (shape {ne:?})")]
    Empty { op: &'static str, arg: &'static str, ne: [usize; 4] },

    /// A tensor's bytes reach past the end of its buffer, or name a buffer that does not exist.
    #[error("{op}: `{arg}` spans bytes {start}..{end} of buffer {buffer}, which holds {len} bytes")]
    OutOfBounds { op: &'static str, arg: &'static str, buffer: usize, start: usize, end: usize, len: usize },

    /// Two tensors share memory in a way the kernel cannot tolerate.
    #[error("{op}: `{a}` and `{b}` overlap in memory ({why})")]
    Aliasing { op: &'static str, a: &'static str, b: &'static str, why: &'static str },

    /// A row index names a row outside its source tensor.
    #[error("{op}: `{arg}`[{position}] = {index} is outside 0..{rows}")]
    IndexOutOfRange { op: &'static str, arg: &'static str, position: usize, index: i64, rows: usize },

    /// A parameter is outside what the kernels were built for (d_conv, column counts, …).
    #[error("{op}: unsupported {what}")]
    Unsupported { op: &'static str, what: String },

    /// A caller-level inconsistency: wrong mode, missing host values of an index tensor, …
    #[error("{op}: {what}")]
    Invalid { op: &'static str, what: String },

    // [validation]
    /// A size, offset or count derived from an argument does not fit in 64 bits: the view or
    /// shape cannot exist, and no arithmetic on it was allowed to wrap.
    #[error("{op}: `{arg}`: {what} overflows 64 bits")]
    Overflow { op: &'static str, arg: &'static str, what: String },

    /// An allocation would exceed the host memory budget (or the allocator refused it): a
    /// typed error instead of an abort.
    #[error("{op}: {requested} bytes requested, {available} bytes of the {budget}-byte host memory budget left")]
    OutOfMemory { op: &'static str, requested: usize, available: usize, budget: usize },
}
