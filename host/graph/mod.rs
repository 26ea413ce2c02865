//! A layer graph that behaves like ggml's: nodes in execution order, each an [`Op`] with the
//! byte ranges of buffers it reads and writes (derived from [`Op::inputs`] / [`Op::outputs`],
//! conservatively: a strided view counts as its whole first-to-last byte span). Graph passes
//! (the snapshot batching of [`layer::batch_snapshot_copies`], the fusion pass of
//! [`crate::fusion`]) reason on these ranges, never on names.
//!
//! - [`layer`]: the GDN layer as llama.cpp builds it (spec §1.3–1.4), one layer or a stack of
//!   L layers, with values placed by the [`plan`]ner; every builder of the layer lives there
//!   ([`layer::unfused_ops`], today's launch sequence, is [`layer::layer_ops`]); `crate::layer`
//!   holds the data they wire (shape, step, the tensor table and its views);
//! - [`plan`]: ggml-style buffer planning (values dead after their last access reused best-fit
//!   in execution order), with pins for the reference PR's aliasing layout;
//! - [`exec`]: runs a node list on the GPU or on the CPU reference.

// The byte sets live beside the tensors (ops reason on them too); re-exported for the graph's users.
pub use crate::bytes;
pub mod exec;
pub mod layer;
pub mod plan;

pub use bytes::{Bound, ByteSet};

use crate::error::{Error, Result};
use crate::gpu::{Gpu, PreparedLaunch};
use crate::memory::{DeviceMemory, HostMemory, Memory};
use crate::ops::Op;
use crate::reference::math::Mufu;
use crate::tensor::{BufferId, Tensor};
use std::ops::Range;

/// Bytes `bytes` of buffer `buffer` (a conservative span: first to last byte of a view).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Access {
    pub buffer: BufferId,
    pub bytes: Range<usize>,
}

impl Access {
    /// The bytes a view can touch; `None` for an empty view.
    pub fn of(t: &Tensor) -> Option<Access> {
        t.layout.byte_range().map(|bytes| Access { buffer: t.buffer, bytes })
    }

    pub fn overlaps(&self, other: &Access) -> bool {
        self.buffer == other.buffer && self.bytes.start < other.bytes.end && other.bytes.start < self.bytes.end
    }

    /// True when every byte of `self` lies in `other`.
    pub fn within(&self, other: &Access) -> bool {
        self.buffer == other.buffer && other.bytes.start <= self.bytes.start && self.bytes.end <= other.bytes.end
    }
}

/// True when any access of `a` overlaps any of `b`.
pub fn any_overlap(a: &[Access], b: &[Access]) -> bool {
    a.iter().any(|x| b.iter().any(|y| x.overlaps(y)))
}

/// One node: an op, and the layer it belongs to (for reports; `None` outside any layer).
#[derive(Clone, Debug)]
pub struct Node {
    pub op: Box<dyn Op>,
    pub layer: Option<usize>,
}

impl Node {
    pub fn new(op: Box<dyn Op>, layer: Option<usize>) -> Self {
        Node { op, layer }
    }

    /// What the node reads.
    pub fn reads(&self) -> Vec<Access> {
        self.op.inputs().iter().filter_map(Access::of).collect()
    }

    /// What the node writes.
    pub fn writes(&self) -> Vec<Access> {
        self.op.outputs().iter().filter_map(Access::of).collect()
    }

    /// What the node touches, byte for byte: what it may read, may write and always writes.
    pub fn effects(&self) -> Effects {
        Effects::of(self.op.as_ref())
    }

    /// The concrete op, if it is a `T`.
    pub fn get<T: Op + 'static>(&self) -> Option<&T> {
        self.op.as_ref().downcast_ref::<T>()
    }
}

/// The exact bytes an op touches ([`bytes`]): reads and may-writes err on the side of more,
/// must-writes on the side of less.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Effects {
    pub reads: ByteSet,
    pub may_write: ByteSet,
    pub must_write: ByteSet,
}

impl Effects {
    pub fn of(op: &dyn Op) -> Effects {
        Effects {
            reads: ByteSet::of_all(&op.inputs(), Bound::Over),
            may_write: ByteSet::of_all(&op.outputs(), Bound::Over),
            // What is certainly written is certainly also possibly written.
            must_write: ByteSet::of_all(&op.must_write(), Bound::Under).intersection(&ByteSet::of_all(&op.outputs(), Bound::Over)),
        }
    }
}

/// The ops of a node list, in order (what the executor runs).
pub fn ops(nodes: &[Node]) -> impl Iterator<Item = &dyn Op> {
    nodes.iter().map(|n| n.op.as_ref())
}

/// STAGE — a host-provided value arriving at this point of the graph: a byte copy of `src`
/// (a persistent input buffer) into `dst` (a planned block of the arena). It stands in for the
/// out-of-scope producer of a layer input (the qkv projection mat-mul, the attention norm), so
/// that the planner can reuse the block once its last reader has run, as ggml's allocator does
/// with those nodes' outputs. On the GPU it is a stream-ordered device-to-device memcpy, not a
/// kernel: it never appears in the launch log.
///
/// `src` and `dst`: contiguous views of the same type and shape, disjoint.
#[derive(Clone, Debug)]
pub struct Stage {
    pub src: Tensor,
    pub dst: Tensor,
}

const STAGE: &str = "STAGE";

impl Stage {
    fn check(&self, mem: &dyn Memory) -> Result<usize> {
        let dtype = self.src.dtype();
        crate::ops::check::tensor(STAGE, "src", &self.src, dtype, mem)?;
        crate::ops::check::output(STAGE, "dst", &self.dst, dtype, mem)?;
        crate::ops::check::shape(STAGE, "dst", &self.dst, self.src.ne())?;
        if !self.src.layout.is_contiguous() || !self.dst.layout.is_contiguous() {
            return Err(Error::Invalid { op: STAGE, what: "src and dst must be contiguous".into() });
        }
        crate::ops::check::disjoint(STAGE, "dst", &self.dst, "src", &self.src)?;
        Ok(self.src.layout.n_elements() * dtype.size())
    }
}

impl Op for Stage {
    fn name(&self) -> &'static str {
        STAGE
    }

    fn validate(&self, mem: &dyn Memory) -> Result<()> {
        self.check(mem).map(|_| ())
    }

    fn prepare(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<PreparedLaunch> {
        let bytes = self.check(mem)?;
        let (dst, src) = (mem.device_ptr(&self.dst), mem.device_ptr(&self.src));
        // SAFETY: `check` proved both contiguous views (`bytes` bytes each) lie inside their
        // live device buffers and are disjoint.
        unsafe { gpu.prepare_copy(STAGE, dst, src, bytes) }
    }

    fn reference(&self, mem: &mut HostMemory, _mufu: &mut dyn Mufu) -> Result<()> {
        let bytes = self.check(mem)?;
        let (s, d) = (self.src.layout.offset, self.dst.layout.offset);
        let data = mem.bytes(self.src.buffer)[s..s + bytes].to_vec();
        mem.bytes_mut(self.dst.buffer)[d..d + bytes].copy_from_slice(&data);
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
