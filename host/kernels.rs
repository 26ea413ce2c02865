//! The built PTX module and the entry-point table shared with the device crate.

/// What host and kernels agree on (block sizes, entry names): the device crate's own file.
#[path = "../kernels-gpu/src/abi.rs"]
pub mod abi;

/// The PTX of every rgdn kernel, built from `kernels-gpu/` by `build.rs`.
pub const PTX: &str = include_str!(env!("RGDN_PTX_PATH"));

/// The GPU architecture the PTX targets (`RGDN_CUDA_ARCH` at build time, default sm_90).
pub const PTX_ARCH: &str = env!("RGDN_PTX_ARCH");

/// Where [`PTX`] came from: `"source"` (built from `kernels-gpu/` by the nightly kernel
/// toolchain) or `"committed"` (`kernels-gpu/ptx/<arch>.ptx.gz`, when that toolchain is absent, e.g.
/// on stable Rust). `tests/ptx_committed.rs` keeps the two byte-identical.
pub const PTX_ORIGIN: &str = env!("RGDN_PTX_ORIGIN");

/// Every entry point the host may launch ([`abi::ENTRIES`]); `tests/ptx.rs` checks each is in
/// [`PTX`] with its parameter struct's size and alignment.
pub fn all_entries() -> Vec<&'static str> {
    abi::ENTRIES.iter().map(|e| e.name).collect()
}

// SAFETY (all impls): each type is declared in abi.rs with `param_struct!`, which makes it
// `#[repr(C)]` + `Copy` and asserts at compile time that it has no padding bytes; its fields are
// u64/u32/f32 (alignment ≤ 8); and it is the type its entries take by value (their table row in
// `abi::ENTRIES`, checked against the PTX's parameter list by `tests/ptx.rs`).
unsafe impl crate::gpu::KernelParams for abi::GetRowsParams {}
unsafe impl crate::gpu::KernelParams for abi::ConcatDim0Params {}
unsafe impl crate::gpu::KernelParams for abi::CpyParams {}
unsafe impl crate::gpu::KernelParams for abi::CpySnapshotsParams {}
unsafe impl crate::gpu::KernelParams for abi::ScaleParams {}
unsafe impl crate::gpu::KernelParams for abi::SsmConvParams {}
unsafe impl crate::gpu::KernelParams for abi::L2NormParams {}
unsafe impl crate::gpu::KernelParams for abi::UnaryParams {}
unsafe impl crate::gpu::KernelParams for abi::BinaryParams {}
unsafe impl crate::gpu::KernelParams for abi::MathProbeParams {}
unsafe impl crate::gpu::KernelParams for abi::CountMismatchesParams {}
unsafe impl crate::gpu::KernelParams for abi::MufuEvalParams {}

/// Names of the `.entry` functions in [`PTX`].
pub fn ptx_entries() -> Vec<&'static str> {
    PTX.lines()
        .filter_map(|l| l.trim_start().strip_prefix(".visible .entry "))
        .map(|rest| rest.split('(').next().unwrap_or(rest).trim())
        .collect()
}
