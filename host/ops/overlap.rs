//! \[overlap\] Programmatic dependent launch: how an op's kernel may overlap the stream's grids
//! around it, and the op wrapper the overlap pass (`crate::fusion::overlap`) puts in a plan.
//!
//! Two forms, each a kernel entry of its own beside the plain one (the plain entries' PTX is
//! untouched):
//! - **lets the next start** (`griddepcontrol.launch_dependents` at the kernel's start): once every
//!   block of it has begun, the stream's next grid may start, if that one was launched
//!   programmatically;
//! - **starts early** ([`crate::gpu::LaunchKind::Programmatic`]): the grid may start before the
//!   previous one completed; before its `griddepcontrol.wait` it touches only what
//!   [`BeforeWait`] names, after it everything before it is complete and visible.
//!
//! Which launches take which form is the pass's decision, once per compiled plan: an op only says
//! what its kernel can do ([`crate::ops::Op::overlap_forms`]) and prepares the form it is given
//! ([`crate::ops::Op::prepare_overlapped`]). Every form computes the same bits as the plain
//! launch: the entries run the same bodies, and the waits only order.

use super::Op;
use super::index_rules::IndexRules;
use crate::error::{Error, Result};
use crate::gpu::{Gpu, PreparedLaunch};
use crate::memory::{DeviceMemory, HostMemory, Memory};
use crate::reference::math::Mufu;
use crate::tensor::Tensor;

/// How one launch takes part in programmatic dependent launch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Overlap {
    /// The kernel lets the stream's next grid start once every block of it has begun.
    pub lets_next_start: bool,
    /// The grid is launched programmatically: it may start before the previous grid completed,
    /// and waits for it before touching anything beyond its [`BeforeWait`].
    pub starts_early: bool,
}

impl Overlap {
    /// The plain launch.
    pub const NONE: Overlap = Overlap { lets_next_start: false, starts_early: false };
}

/// What a kernel that starts early touches before its `griddepcontrol.wait`: views it may read
/// and views it may write (whole byte spans, as the graph's effects take them); and how many of
/// its blocks reach the wait with work left after it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BeforeWait {
    pub reads: Vec<Tensor>,
    pub writes: Vec<Tensor>,
    /// \[speed\] The grid's blocks that reach the wait with work still to do after it (0 where the
    /// wait follows all of a block's work). While the grids before it run, each such block holds
    /// a multiprocessor's slots without progress; the pass refuses the early start when there are
    /// many ([`crate::fusion::overlap::EARLY_START_MAX_PARKED_BLOCKS`]).
    pub parked_blocks: usize,
}

/// The overlap forms an op's kernel has.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Forms {
    /// It has an entry that lets the next grid start early.
    pub lets_next_start: bool,
    /// It has an entry that may start early, touching this before its wait.
    pub early: Option<BeforeWait>,
}

impl Forms {
    /// No overlap form: the op's launches start after the previous grid completed and let
    /// nothing start before they complete.
    pub const NONE: Forms = Forms { lets_next_start: false, early: None };

    /// Whether `overlap` is one of these forms.
    pub fn allow(&self, overlap: Overlap) -> bool {
        (!overlap.lets_next_start || self.lets_next_start) && (!overlap.starts_early || self.early.is_some())
    }
}

/// The error of an op asked for a form its kernel does not have.
pub(crate) fn unsupported(op: &'static str, overlap: Overlap) -> Error {
    Error::Unsupported { op, what: format!("the overlap form {overlap:?} (the op's kernel has no such entry)") }
}

/// An op launched in an overlap form: what the overlap pass leaves in a plan. Everything but
/// the launch is the op's own (its name, validation, reference, views and index rules).
#[derive(Clone, Debug)]
pub struct Overlapped {
    pub op: Box<dyn Op>,
    pub overlap: Overlap,
}

impl Op for Overlapped {
    fn name(&self) -> &'static str {
        self.op.name()
    }

    fn validate(&self, mem: &dyn Memory) -> Result<()> {
        if !self.op.overlap_forms().allow(self.overlap) {
            return Err(unsupported(self.op.name(), self.overlap));
        }
        self.op.validate(mem)
    }

    fn prepare(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<PreparedLaunch> {
        self.op.prepare_overlapped(gpu, mem, self.overlap)
    }

    fn check_indices(&self, mem: &dyn Memory) -> Result<()> {
        self.op.check_indices(mem)
    }

    fn index_rules(&self) -> Box<dyn IndexRules> {
        self.op.index_rules()
    }

    fn reference(&self, mem: &mut HostMemory, mufu: &mut dyn Mufu) -> Result<()> {
        self.op.reference(mem, mufu)
    }

    fn inputs(&self) -> Vec<Tensor> {
        self.op.inputs()
    }

    fn outputs(&self) -> Vec<Tensor> {
        self.op.outputs()
    }

    fn must_write(&self) -> Vec<Tensor> {
        self.op.must_write()
    }

    fn overlap_forms(&self) -> Forms {
        self.op.overlap_forms()
    }

    fn prepare_overlapped(&self, gpu: &Gpu, mem: &DeviceMemory, overlap: Overlap) -> Result<PreparedLaunch> {
        self.op.prepare_overlapped(gpu, mem, overlap)
    }
}
