//! One host wrapper per kernel file: an op is a plain struct of tensors and parameters that
//! validates itself against a [`Memory`], launches on the GPU, or runs its CPU reference. The
//! launch is the only `unsafe` line; its SAFETY comment names what validation proved.

pub(crate) mod check;
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
pub mod gated_delta_net;
pub use gated_delta_net::GatedDeltaNet;

use crate::error::Result;
use crate::gpu::Gpu;
use crate::memory::{DeviceMemory, HostMemory, Memory};
use crate::reference::math::Mufu;
use crate::tensor::Tensor;

/// What the GPU suite, the layer runner and (later) the graph executor need of every op.
pub trait Op: std::fmt::Debug {
    /// ggml's name for the op ("SSM_CONV").
    fn name(&self) -> &'static str;
    /// Checks every tensor and parameter; the same checks guard [`Op::launch`] and
    /// [`Op::reference`].
    fn validate(&self, mem: &dyn Memory) -> Result<()>;
    /// Validates, then launches the kernel (asynchronously, on the GPU's stream).
    fn launch(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<()>;
    /// Validates, then computes the same result on the CPU in the kernel's float-op order.
    fn reference(&self, mem: &mut HostMemory, mufu: &mut dyn Mufu) -> Result<()>;
    /// The tensors the op writes.
    fn outputs(&self) -> Vec<Tensor>;
}
