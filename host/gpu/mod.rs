//! The GPU side: a probe that never panics ([`probe`]), and [`Gpu`], the one place that loads
//! the PTX module, allocates, copies and launches — so every launch can be counted and timed.

mod context;
mod probe;

pub use context::{
    DeviceBuffer, Gpu, KernelArg, KernelParams, LaunchDims, LaunchKind, LaunchRecord, PARAM_BLOCK_BYTES, ParamBlock, PreparedLaunch,
};
pub use probe::{GpuInfo, probe};
