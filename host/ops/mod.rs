//! One host wrapper per kernel file: an op is a plain struct of tensors and parameters that
//! validates itself against a [`Memory`], prepares its launch on the GPU (entry, shape,
//! parameters and [`crate::gpu::LaunchKind`], decided by the op), or runs its CPU reference.
//! Preparing the launch is the only `unsafe` line; its SAFETY comment names what validation
//! proved.

pub(crate) mod check;
pub(crate) mod index_rules;
pub use index_rules::IndexRules;
pub mod l2_norm;
pub mod ssm_conv;

pub use l2_norm::L2Norm;
pub use ssm_conv::SsmConv;

// [copies]
pub mod concat;
pub mod cpy;
pub mod get_rows;
pub mod scale;

pub use concat::ConcatDim0;
pub use cpy::{Cpy, CpySnapshots};
pub use get_rows::GetRows;
pub use scale::Scale;

// [unary]
pub mod binary;
pub mod unary;
pub use binary::{Binary, BinaryKind};
pub use unary::{Unary, UnaryKind};

// [mmvf]
pub mod mmvf;
pub use mmvf::{MulMatVec, Precision};

// [gdn]
/// What one plain launch of an op runs — its entry, shape and parameters over a memory's
/// [`KernelAddresses`](crate::memory::KernelAddresses) — once the op validated the memory. The
/// op's `prepare` launches exactly this; the kernel emulation (`tests/kernel_emulation.rs`)
/// runs the same entry's source on the CPU with the same parameters.
#[derive(Clone, Copy, Debug)]
pub struct PlainLaunch<P> {
    /// The kernel entry (`abi::ENTRIES`).
    pub entry: &'static str,
    /// Grid, block and dynamic shared memory.
    pub dims: crate::gpu::LaunchDims,
    /// The entry's parameters.
    pub params: P,
}

pub mod gated_delta_net;
pub use gated_delta_net::GatedDeltaNet;
// [overlap] programmatic dependent launch: the forms an op's kernel has, the pass's wrapper
pub mod overlap;
pub use overlap::Overlapped;
// [gdn-from-cache]
pub use gated_delta_net::GatedDeltaNetFromCache;
// [replay] the unfused replay op: logged tokens into one state row per sequence
pub mod gated_delta_net_replay;
pub use gated_delta_net_replay::GatedDeltaNetReplay;
pub mod gated_delta_net_replay_verify;
pub use gated_delta_net_replay_verify::GatedDeltaNetReplayVerify;

// [fused] the fused ops (their structs are the fusion pass's contract)
pub mod gdn_conv_chain;
pub mod mmvf_pair;
pub use gdn_conv_chain::{ConvCommit, GdnConvChain, SnapshotWrite};
pub use mmvf_pair::MulMatVecPair;
// [pair-gate]
pub use mmvf_pair::MulMatVecPairGate;
// [layer-step] the whole layer step in one launch
pub mod gdn_layer_step;
pub use gdn_layer_step::GdnLayerStep;
// [replay] a replay layer's step in one launch
pub mod gdn_layer_step_replay;
pub use gdn_layer_step_replay::GdnLayerStepReplay;

// [speed] fused SOFTPLUS·MUL (its file is unary.rs)
pub use unary::UnaryMul;

#[cfg(test)]
mod reference_tests;

use crate::error::Result;
use crate::gpu::{Gpu, PreparedLaunch};
use crate::memory::{DeviceMemory, HostMemory, Memory};
use crate::reference::math::Mufu;
use crate::tensor::Tensor;

/// Lets a graph pass look at the concrete op behind a `dyn Op` (`op.as_any().downcast_ref()`).
pub trait AsAny {
    fn as_any(&self) -> &dyn std::any::Any;
}

impl<T: std::any::Any> AsAny for T {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Lets a graph be copied: every op is a plain `Clone` value.
pub trait CloneOp {
    fn clone_op(&self) -> Box<dyn Op>;
}

impl<T: Op + Clone + 'static> CloneOp for T {
    fn clone_op(&self) -> Box<dyn Op> {
        Box::new(self.clone())
    }
}

impl Clone for Box<dyn Op> {
    fn clone(&self) -> Self {
        self.as_ref().clone_op()
    }
}

/// What the GPU suite, the layer runner and the graph executor need of every op.
pub trait Op: std::fmt::Debug + AsAny + CloneOp {
    /// ggml's name for the op ("SSM_CONV").
    fn name(&self) -> &'static str;
    /// Checks every tensor and parameter; the same checks guard [`Op::launch`] and
    /// [`Op::reference`].
    fn validate(&self, mem: &dyn Memory) -> Result<()>;
    /// Validates, then prepares the kernel launch: entry, shape, parameters and how it must be
    /// launched ([`crate::gpu::LaunchKind`]: the op decides, nothing else does). Nothing is
    /// launched; [`Op::launch`] runs it at once, a plan ([`crate::engine::StepPlan`]) at every
    /// step.
    fn prepare(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<PreparedLaunch>;
    /// Validates, then launches the kernel (asynchronously, on the GPU's stream).
    fn launch(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<()> {
        let launch = self.prepare(gpu, mem)?;
        // SAFETY: prepared just now, on `mem` (borrowed for this call): the validation behind
        // it holds for these buffers and these index values.
        unsafe { gpu.run(&launch) }
    }
    /// The rules of [`Op::validate`] whose outcome depends on the values in index buffers
    /// (a source row in range, …), for an op that passed [`Op::validate`] on this memory with
    /// other index values: a plan runs the full validation once, then only this before each
    /// step. The default runs the full validation (always sound); an op that reads indices
    /// overrides it with exactly its index-dependent rules, and `tests/plan.rs` holds every
    /// override to the full validation's verdict.
    fn check_indices(&self, mem: &dyn Memory) -> Result<()> {
        self.validate(mem)
    }
    /// [host-cost] [`Op::check_indices`] prepared once for this op's views: a plan calls this
    /// when it is made and runs the returned rules before every step. Everything in them that
    /// does not depend on an index value (which rows each sequence may read, where the values
    /// lie) is worked out here, so that a step reads each value once and compares. On an op
    /// that passed [`Op::validate`], their verdict on any index values is
    /// [`Op::check_indices`]'s (and so the full validation's), error for error; `tests/plan.rs`
    /// holds every override to that. The default runs [`Op::check_indices`] itself.
    fn index_rules(&self) -> Box<dyn IndexRules> {
        Box::new(index_rules::PerCall(self.clone_op()))
    }
    /// Validates, then computes the same result on the CPU in the kernel's float-op order.
    fn reference(&self, mem: &mut HostMemory, mufu: &mut dyn Mufu) -> Result<()>;
    /// The tensors the op reads (views as the op addresses them; index tensors included).
    fn inputs(&self) -> Vec<Tensor>;
    /// The tensors the op *may* write: every byte it can change lies in one of them (graph
    /// passes treat each view's whole byte span as possibly written).
    fn outputs(&self) -> Vec<Tensor>;
    /// The tensors the op *always* writes, every element of each (a subset of what
    /// [`Op::outputs`] covers). A graph pass may take these bytes as overwritten — ending the
    /// life of whatever they held — and only these: an op that writes part of an output (a
    /// cache of which it fills some rows, state slots beyond n_t) lists just that part here.
    /// Required, with no default, so that no op claims to overwrite what it leaves alone.
    fn must_write(&self) -> Vec<Tensor>;
    /// \[overlap\] The programmatic-launch forms this op's kernel has ([`overlap::Forms`]): the
    /// default has none.
    fn overlap_forms(&self) -> overlap::Forms {
        overlap::Forms::NONE
    }
    /// \[overlap\] Validates, then prepares the launch in form `overlap`, one of
    /// [`Op::overlap_forms`] (the overlap pass decides which, `crate::fusion::overlap`); any other
    /// form is [`crate::Error::Unsupported`]. The default has only the plain launch.
    fn prepare_overlapped(&self, gpu: &Gpu, mem: &DeviceMemory, overlap: overlap::Overlap) -> Result<PreparedLaunch> {
        if overlap != overlap::Overlap::NONE {
            return Err(overlap::unsupported(self.name(), overlap));
        }
        self.prepare(gpu, mem)
    }
}

impl dyn Op {
    /// The concrete op, if it is a `T` (for graph passes that match op patterns). Call it on
    /// `&dyn Op` (`op.as_ref()` for a `Box<dyn Op>`), never on the box itself.
    ///
    /// \[overlap\] Through an [`Overlapped`] op (a launch form, not another op) it finds the op
    /// inside, unless `T` is [`Overlapped`] itself.
    pub fn downcast_ref<T: Op + 'static>(&self) -> Option<&T> {
        self.as_any()
            .downcast_ref::<T>()
            .or_else(|| self.as_any().downcast_ref::<Overlapped>().and_then(|o| o.op.as_ref().downcast_ref::<T>()))
    }
}

/// [test] A measurement knob: the environment variable `name` as a number in `lo ..= hi` (spaces
/// around it allowed), None when unset or out of range. Callers read it once per process.
pub(crate) fn knob(name: &str, lo: u32, hi: u32) -> Option<u32> {
    std::env::var(name).ok().and_then(|v| v.trim().parse::<u32>().ok()).filter(|k| (lo..=hi).contains(k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::{BufferId, DType, Layout};

    #[test]
    fn downcast_finds_the_concrete_op_through_a_box() {
        let t = Tensor::new(BufferId(0), Layout::contiguous(DType::F32, [4, 1, 1, 1]));
        let op: Box<dyn Op> = Box::new(Scale { src: t, dst: t, scale: 0.0, bias: 0.0 });
        assert!(op.as_ref().downcast_ref::<Scale>().is_some());
        assert!(op.as_ref().downcast_ref::<Cpy>().is_none());
        assert_eq!(op.inputs(), vec![t]);
    }
}
