//! rgdn device kernels: `#![no_std]` Rust compiled by rustc's `nvptx64-nvidia-cuda` backend to
//! one PTX module (see the root `build.rs`).
//!
//! Layout: [`device`] is the only module with inline PTX or nvptx intrinsics; [`fast_math`]
//! composes ggml's fast-math functions from it; every other module is one op (one file, its
//! `#[inline(always)]` bodies and its `extern "ptx-kernel"` entries). [`abi`] holds what the host
//! must agree on (block sizes, entry names) and is compiled into the host crate too.
#![no_std]
#![feature(abi_ptx, stdarch_nvptx, asm_experimental_arch)]
#![allow(clippy::missing_safety_doc)]

pub mod abi;
pub mod device;
pub mod fast_math;

pub mod l2_norm;
pub mod ssm_conv;
pub mod test_support;

// [copies] get_rows, concat, cpy, cpy_snapshots, scale
pub mod concat;
pub mod cpy;
pub mod get_rows;
pub mod scale;

// [unary] unary, binary
pub mod binary;
pub mod unary;

// [mmvf] mul_mat_vec
pub mod mmvf;

// [gdn] gated_delta_net
pub mod gated_delta_net;
// [replay] the unfused replay op: logged tokens into one state row
pub mod gated_delta_net_replay;
// [replay] the replay and the verify recurrence in one launch (the `replay_verify` fusion)
pub mod gated_delta_net_replay_verify;

// [convchain] the fused GDN conv chain
pub mod gdn_conv_chain;

// [layer-step] the whole GDN layer step in one launch
pub mod gdn_layer_step;
// [replay] a replay layer's whole step in one launch
pub mod gdn_layer_step_replay;

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    device::trap()
}
