//! Element-wise unary ops of the alpha/beta path — ggml's `unary.cu` for SIGMOID, SOFTPLUS, SILU,
//! EXP on f32 (spec §2.7), each computed by the [`fast_math`](crate::fast_math) function that the
//! 2^32-input parity sweep proves equal to nvcc's fast-math compile of ggml's expression.
//!
//! Thread mapping: one element per thread, block [`UNARY_BLOCK`](crate::abi::UNARY_BLOCK), grid
//! ⌈n/256⌉ (x), as ggml launches it. Layout: `src` and `dst` contiguous, `n` elements.
//! Aliasing: `dst` may be `src` itself (each thread reads its element before writing it).

use crate::abi::{binary_kind, unary_kind};
use crate::device::memory::{load_u32_at, store_u32_at};
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
    ($($name:ident = $key:ident, $kind:path;)*) => {$(
        /// Entry point; see the module docs.
        ///
        /// # Safety
        /// See [`unary`]: the host validates both views before launching.
        #[cfg(target_arch = "nvptx64")]
        #[unsafe(export_name = crate::abi::entry_name!($key))]
        pub unsafe extern "ptx-kernel" fn $name(p: crate::abi::UnaryParams) {
            // SAFETY: forwarded from the launch contract.
            unsafe { unary::<{ $kind }>(p.src as *const f32, p.dst as *mut f32, p.n as usize) }
        }
    )*};
}

unary_entries! {
    unary_sigmoid_f32 = unary_sigmoid, unary_kind::SIGMOID;
    unary_softplus_f32 = unary_softplus, unary_kind::SOFTPLUS;
    unary_silu_f32 = unary_silu, unary_kind::SILU;
    unary_exp_f32 = unary_exp, unary_kind::EXP;
}

/// [speed] Fused UNARY→MUL `y[i] = softplus(x[i]) · m[i mod n_mul]` (spec §2.7): the SOFTPLUS
/// body of [`apply`] then [`binary::apply`](crate::binary::apply)'s MUL (`mul.rn.ftz`, the
/// softplus result first) — the very operations of SOFTPLUS followed by MUL, so the bits equal
/// the unfused pair's. `m` is either the same shape as `x` (`n_mul = n`: ggml's fused case, the
/// gate path at n_t = 1) or a leading block MUL broadcasts over the higher dimensions (the gate's
/// `a` [H_v] over [H_v, n_t]), which MUL's modulo indexing reads at `i mod n_mul`.
///
/// Thread mapping as the unary kernels: one element per thread, block
/// [`UNARY_BLOCK`](crate::abi::UNARY_BLOCK), grid ⌈n/256⌉. Layout: `x`, `m`, `y` contiguous.
/// Aliasing: `y` may be `x` itself, or `m` itself when `n_mul = n` (each thread reads its
/// elements before writing), otherwise disjoint.
///
/// # Safety
/// The host validated the three views for `n` and `n_mul ≥ 1` elements and the aliasing rule.
#[cfg(target_arch = "nvptx64")]
#[unsafe(export_name = crate::abi::entry_name!(unary_softplus_mul))]
pub unsafe extern "ptx-kernel" fn unary_softplus_mul_f32(p: crate::abi::UnaryMulParams) {
    let i = block_idx_x() * block_dim_x() + thread_idx_x();
    if i < p.n {
        // `checked_rem` keeps core's division panic path out of the PTX (n_mul ≥ 1 is validated).
        let Some(j) = i.checked_rem(p.n_mul) else { crate::device::trap() };
        let (x, m, y) = (p.x as *const u32, p.m as *const u32, p.y as *mut u32);
        // SAFETY: i < n and j < n_mul, inside the buffers as the host validated; coherent loads,
        // as y may be x or m itself (this thread's element, read before it is written).
        unsafe {
            let (x, m) = (f32::from_bits(load_u32_at(x, i)), f32::from_bits(load_u32_at(m, j)));
            let v = crate::binary::apply::<{ binary_kind::MUL }>(apply::<{ unary_kind::SOFTPLUS }>(x), m);
            store_u32_at(y, i, v.to_bits());
        }
    }
}
