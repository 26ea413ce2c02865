//! The only place in the kernel crate with inline PTX or `core::arch::nvptx` intrinsics.
//!
//! Kernels are written as plain Rust over indices and call these functions for everything
//! that needs a specific instruction:
//! - [`thread`]: special registers (thread/block indices) and barriers;
//! - [`warp`]: shuffles and ggml's butterfly warp sum;
//! - [`math`]: f32 arithmetic with the exact rounding/flush mode ggml's `-use_fast_math`
//!   build runs (`.rn.ftz` add/mul/fma, `.approx.ftz` MUFU ops, `max.ftz`, ordered compares);
//! - [`half`]: f16/bf16 conversions and the packed f16x2 fma of ggml's half accumulation;
//! - [`shared`]: the dynamic shared-memory window, addressed with 32-bit shared addresses;
//! - [`atomic`]: global atomics (used by test-support kernels only);
//! - [`memory`]: read-only (`ld.global.nc`) global loads;
//! - [`grid`]: the grid-wide barrier of GDN_LAYER_STEP (fences, acquire/release atomics), and
//!   programmatic dependent launch (`griddepcontrol`) between grids of one stream.
//!
//! Why inline PTX instead of Rust float operators: LLVM's NVPTX backend lowers `a + b` to
//! `add.rn.f32` (no flush-to-zero) and never contracts, while ggml's build runs `.ftz` forms
//! and fuses `a*b + c` into one fma. Writing each operation's instruction explicitly makes the
//! result independent of later compiler stages: `.rn` on a non-fused add/mul forbids ptxas
//! from contracting it, and fused steps are written as `fma.rn.ftz` (spec §0.2).
//!
//! Every function here is `#[inline(always)]`: a kernel compiles to the same straight-line
//! PTX it would have with hand-written assembly.

pub mod atomic;
pub mod half;
pub mod math;
pub mod shared;
pub mod thread;
pub mod warp;
// [speed] the shuffle primitives `warp` builds on
pub mod warp_shuffle;

// [mmvf-pair] read-only (`ld.global.nc`) global loads
pub mod load;

// [speed] read-only global loads
pub mod memory;

// [layer-step] the grid-wide barrier of cooperative launches (fences, acquire/release atomics)
pub mod grid;

/// Aborts the kernel (PTX `trap`); the launch reports an error to the host.
#[inline(always)]
pub fn trap() -> ! {
    // SAFETY: `trap` has no preconditions; it ends the grid with an error.
    unsafe { core::arch::nvptx::trap() }
}
