//! Broadcast binary ADD / MUL on f32 — ggml's `binbcast.cu` (spec §2.8): `dst = a + b` or `a · b`
//! (`add.rn.ftz` / `mul.rn.ftz`, never contracted), `b` broadcast over `a` by index modulo.
//!
//! Thread mapping: one destination element per thread by flat index `f` in `dst`'s logical order,
//! block [`BINARY_BLOCK`](crate::abi::BINARY_BLOCK), grid ⌈n/256⌉ (x).
//! Layouts (element strides, checked by the host): `a` and `dst` have shape `ne`; `b` has shape
//! `ne_b` with `ne[d] % ne_b[d] == 0`; element (i0..i3) of `b` used is `(i0 % ne_b0, …)`.
//! Aliasing: `dst` may be `a` or `b` element for element (same shape), else disjoint.

use crate::abi::binary_kind;
use crate::device::math::{add, mul};
use crate::device::thread::{block_dim_x, block_idx_x, thread_idx_x};

/// `a ∘ b` for op `KIND` ([`binary_kind`] ids).
#[inline(always)]
pub fn apply<const KIND: u32>(a: f32, b: f32) -> f32 {
    if KIND == binary_kind::ADD { add(a, b) } else { mul(a, b) }
}

/// Shape and element strides of one operand, as the kernel receives them.
#[derive(Clone, Copy)]
#[repr(C)]
struct Strided {
    s: [usize; 4],
}

impl Strided {
    #[inline(always)]
    fn at(&self, i: [usize; 4]) -> usize {
        i[0] * self.s[0] + i[1] * self.s[1] + i[2] * self.s[2] + i[3] * self.s[3]
    }
}

/// # Safety
/// Every index of `ne` must lie inside `a`/`dst` with their strides, and of `ne_b` inside `b`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn binary<const KIND: u32>(
    a: *const f32,
    a_s: Strided,
    b: *const f32,
    b_s: Strided,
    b_ne: [usize; 4],
    dst: *mut f32,
    d_s: Strided,
    ne: [usize; 4],
) {
    // The host guarantees every extent ≥ 1; `max(1)` proves it to the compiler, so the index
    // divisions below carry no divide-by-zero panic path.
    let (ne, b_ne) = (ne.map(|n| n.max(1)), b_ne.map(|n| n.max(1)));
    let f = (block_idx_x() * block_dim_x() + thread_idx_x()) as usize;
    let n = ne[0] * ne[1] * ne[2] * ne[3];
    if f >= n {
        return;
    }
    let (i0, r) = (f % ne[0], f / ne[0]);
    let (i1, r) = (r % ne[1], r / ne[1]);
    let i = [i0, i1, r % ne[2], r / ne[2]];
    let ib = [i[0] % b_ne[0], i[1] % b_ne[1], i[2] % b_ne[2], i[3] % b_ne[3]];
    // SAFETY: i < ne and ib < b_ne, inside the views the host validated.
    unsafe { *dst.add(d_s.at(i)) = apply::<KIND>(*a.add(a_s.at(i)), *b.add(b_s.at(ib))) };
}

/// Dimension 0 contiguous, then the element strides of dimensions 1, 2, 3.
#[inline(always)]
fn strided([s1, s2, s3]: [u64; 3]) -> Strided {
    Strided { s: [1, s1 as usize, s2 as usize, s3 as usize] }
}

macro_rules! binary_entries {
    ($($name:ident = $key:ident, $kind:path;)*) => {$(
        /// Entry point; see the module docs.
        ///
        /// # Safety
        /// See [`binary`]: the host validates all three views before launching.
        #[cfg(target_arch = "nvptx64")]
        #[unsafe(export_name = crate::abi::entry_name!($key))]
        pub unsafe extern "ptx-kernel" fn $name(p: crate::abi::BinaryParams) {
            // Dimension 0 is contiguous in all three (checked by the host).
            let (a_s, b_s, d_s) = (strided(p.a_stride), strided(p.b_stride), strided(p.dst_stride));
            let (a, b, dst) = (p.a as *const f32, p.b as *const f32, p.dst as *mut f32);
            // SAFETY: forwarded from the launch contract.
            unsafe { binary::<{ $kind }>(a, a_s, b, b_s, p.b_ne.map(|n| n as usize), dst, d_s, p.ne.map(|n| n as usize)) }
        }
    )*};
}

binary_entries! {
    binary_add_f32 = binary_add, binary_kind::ADD;
    binary_mul_f32 = binary_mul, binary_kind::MUL;
}
