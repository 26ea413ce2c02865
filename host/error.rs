//! One error type for the whole library. Every refusal names the op, the argument and what was
//! wrong, so callers (and tests) can match on the variant instead of parsing text.

use crate::tensor::DType;

/// `Result` with rgdn's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why rgdn refused or failed. New refusals may be added (`#[non_exhaustive]`): match the
/// variants you handle and keep a fallback arm.
///
/// Fields common to many variants: `op` names the op or entry point that refused (ggml's name,
/// e.g. `"SSM_CONV"`, or a function such as `"CallerMemory::bind"`); `arg` names the argument
/// (a tensor field of the op, e.g. `"conv_state"`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // the fields `op` and `arg` are documented once, above
pub enum Error {
    /// No usable CUDA driver or device; nothing was launched.
    #[error("no GPU: {reason}")]
    NoGpu {
        /// What is missing (library, device, driver call that failed).
        reason: String,
    },

    /// Writing a report or the program's output failed (a closed pipe, a full disk).
    #[error("writing the output: {0}")]
    Io(#[from] std::io::Error),

    /// The CUDA driver refused a call.
    #[error("CUDA driver error: {0}")]
    Driver(#[from] cudarc::driver::DriverError),

    /// A tensor has the wrong number of elements along some dimension.
    #[error("{op}: `{arg}` has shape {got:?}, expected {expected}")]
    Shape {
        op: &'static str,
        arg: &'static str,
        /// The shape the op needs, in words.
        expected: String,
        /// The tensor's `ne`.
        got: [usize; 4],
    },

    /// A tensor's strides or offset do not fit what the kernel reads or writes.
    #[error("{op}: `{arg}` has strides {nb:?} (bytes) at offset {offset}: {reason}")]
    Stride {
        op: &'static str,
        arg: &'static str,
        /// The tensor's strides in bytes.
        nb: [usize; 4],
        /// The tensor's byte offset in its buffer.
        offset: usize,
        /// What the kernel needs of them.
        reason: String,
    },

    /// A tensor has the wrong element type.
    #[error("{op}: `{arg}` is {got:?}, expected {expected}")]
    DType {
        op: &'static str,
        arg: &'static str,
        /// The element type(s) the op takes.
        expected: String,
        /// The tensor's element type.
        got: DType,
    },

    /// A tensor has no elements (ggml's "null size"); the kernels never launch on those.
    #[error("{op}: `{arg}` is empty (shape {ne:?})")]
    Empty {
        op: &'static str,
        arg: &'static str,
        /// The tensor's `ne`.
        ne: [usize; 4],
    },

    /// A tensor's bytes reach past the end of its buffer, or name a buffer that does not exist.
    #[error("{op}: `{arg}` spans bytes {start}..{end} of buffer {buffer}, which holds {len} bytes")]
    OutOfBounds {
        op: &'static str,
        arg: &'static str,
        /// The buffer id.
        buffer: usize,
        /// First byte the view spans.
        start: usize,
        /// One past the last byte the view spans.
        end: usize,
        /// Bytes the buffer holds (0 when it does not exist).
        len: usize,
    },

    /// Two tensors share memory in a way the kernel cannot tolerate.
    #[error("{op}: `{a}` and `{b}` overlap in memory ({why})")]
    Aliasing {
        op: &'static str,
        /// One of the two arguments.
        a: &'static str,
        /// The other.
        b: &'static str,
        /// Why the overlap is not allowed.
        why: &'static str,
    },

    /// A row index names a row outside its source tensor.
    #[error("{op}: `{arg}`[{position}] = {index} is outside 0..{rows}")]
    IndexOutOfRange {
        op: &'static str,
        arg: &'static str,
        /// Position of the index in the index tensor (logical order).
        position: usize,
        /// The index value.
        index: i64,
        /// Rows the source holds.
        rows: usize,
    },

    /// A parameter is outside what the kernels were built for (d_conv, column counts, …).
    #[error("{op}: unsupported {what}")]
    Unsupported {
        op: &'static str,
        /// The parameter and value the kernels were not built for.
        what: String,
    },

    /// A cooperative launch's grid is larger than the blocks of its kernel that fit the device
    /// at once: its blocks could wait on blocks that are never scheduled, so rgdn refuses it
    /// (before the driver is asked).
    #[error("{entry}: a cooperative grid of {grid} blocks, but only {co_resident} can be resident at once")]
    NotCoResident {
        /// The kernel entry.
        entry: &'static str,
        /// Blocks in the grid.
        grid: u64,
        /// Blocks of this entry, block size and shared memory that fit the device at once.
        co_resident: u32,
    },

    /// A caller-level inconsistency: wrong mode, missing host values of an index tensor, …
    #[error("{op}: {what}")]
    Invalid {
        op: &'static str,
        /// What is inconsistent.
        what: String,
    },

    // [validation]
    /// A size, offset or count derived from an argument does not fit in 64 bits: the view or
    /// shape cannot exist, and no arithmetic on it was allowed to wrap.
    #[error("{op}: `{arg}`: {what} overflows 64 bits")]
    Overflow {
        op: &'static str,
        arg: &'static str,
        /// The quantity that overflows.
        what: String,
    },

    /// An allocation would exceed the host memory budget (or the allocator refused it): a
    /// typed error instead of an abort.
    #[error("{op}: {requested} bytes requested, {available} bytes of the {budget}-byte host memory budget left")]
    OutOfMemory {
        op: &'static str,
        /// Bytes asked for.
        requested: usize,
        /// Bytes left under the budget.
        available: usize,
        /// The whole budget.
        budget: usize,
    },
}
