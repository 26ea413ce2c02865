//! Element-wise unary ops of the alpha/beta path — ggml's `unary.cu` for SIGMOID, SOFTPLUS, SILU,
//! EXP on f32 (spec §2.7), each computed by the [`fast_math`](crate::fast_math) function that the
//! 2^32-input parity sweep proves equal to nvcc's fast-math compile of ggml's expression.
//!
//! Thread mapping: one element per thread, block [`UNARY_BLOCK`](crate::abi::UNARY_BLOCK), grid
//! ⌈n/256⌉ (x), as ggml launches it. Layout: `src` and `dst` contiguous, `n` elements.
//! Aliasing: `dst` may be `src` itself (each thread reads its element before writing it).

use crate::abi::unary_kind;
use crate::device::thread::{block_dim_x, block_idx_x, thread_idx_x};
use crate::fast_math;

/// The op `KIND` ([`unary_kind`] ids) of one value. Shared with fused kernels.
#[inline(always)]
pub fn apply<const KIND: u32>(x: f32) -> f32 {
    match KIND {
        unary_kind::SIGMOID => fast_math::sigmoid(x),
        unary_kind::SOFTPLUS => fast_math::softplus(x),
        unary_kind::SILU => fast_math::silu(x),
        _ => fast_math::exp(x),
    }
}

/// # Safety
/// `src` and `dst` must hold `n` f32 each, `dst` equal to or disjoint from `src`.
#[inline(always)]
unsafe fn unary<const KIND: u32>(src: *const f32, dst: *mut f32, n: usize) {
    let i = (block_idx_x() * block_dim_x() + thread_idx_x()) as usize;
    if i < n {
        // SAFETY: i < n, inside both buffers as the host validated.
        unsafe { *dst.add(i) = apply::<KIND>(*src.add(i)) };
    }
}

macro_rules! unary_entries {
    ($($name:ident = $kind:path;)*) => {$(
        /// Entry point; see the module docs.
        ///
        /// # Safety
        /// See [`unary`]: the host validates both views before launching.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(src: *const f32, dst: *mut f32, n: usize) {
            // SAFETY: forwarded from the launch contract.
            unsafe { unary::<{ $kind }>(src, dst, n) }
        }
    )*};
}

unary_entries! {
    unary_sigmoid_f32 = unary_kind::SIGMOID;
    unary_softplus_f32 = unary_kind::SOFTPLUS;
    unary_silu_f32 = unary_kind::SILU;
    unary_exp_f32 = unary_kind::EXP;
}
