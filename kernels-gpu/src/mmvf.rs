//! MUL_MAT_VEC — ggml's `mul_mat_vec_f` (mmvf) for 1–8 input columns and F32, BF16 or F16
//! weights (spec §2.9): `dst[j][r] = Σ_e weight[r][e] · input[j][e]`.
//!
//! Thread mapping: one block per weight row (grid x = row r). The block size is ggml's choice for
//! the row length E ([`mul_mat_vec_block_size`](crate::abi::mul_mat_vec_block_size): a multiple
//! of 32, at most 256) and is read from `%ntid.x`, so one entry serves every block size. Thread
//! `tid` reads the row as element pairs p = tid, tid+bs, tid+2bs, … < E/2 and, for every column j,
//! the input pair p of column j ([`Accumulation::thread_partials`]). Each column's per-thread
//! partial sums are then combined by [`block_reduce_column`] in ggml's order, and thread j writes
//! column j.
//!
//! Accumulation ([`Accumulation`] implementations, ggml's `T` × `type_acc`):
//! - [`F32`], [`Bf16`], [`F16F32`]: weights converted exactly to f32, `fma.rn.ftz` per element;
//! - [`F16Half`]: ggml's default for F16 weights — the input pair rounded to f16, one
//!   `fma.rn.f16x2` per pair into a half2 accumulator, the two halves summed in f32 at the end.
//!
//! Layouts (element strides, checked by the host): weight row r starts at `r·w_row` elements of
//! the weight type, input column j at `j·in_col` f32, dst column j at `j·dst_col` f32; rows and
//! columns are contiguous along E. Weight rows and input columns start at pair-aligned addresses
//! (the host refuses others), because pairs are loaded with one access each, as ggml does.
//!
//! Aliasing: `dst` must not overlap the weight or the input (the host refuses it).
//!
//! Shared memory: [`MUL_MAT_VEC_SHARED_BYTES`](crate::abi::MUL_MAT_VEC_SHARED_BYTES) of dynamic
//! shared memory, ggml's 32-float buffer for the cross-warp step of the reduction.

use crate::device::half::{f16_to_f32, f32_to_f16_rn, fma_f16x2, pack_f16x2};
use crate::device::math::{add, fma};
use crate::device::shared;
use crate::device::thread::{block_dim_x, block_idx_x, sync_threads, thread_idx_x};
use crate::device::warp::warp_sum;

/// Two adjacent f32 (ggml's `float2`), loaded with one 8-byte access.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub struct F32Pair {
    pub x: f32,
    pub y: f32,
}

/// One way of reading a weight row and accumulating its products with the input columns.
pub trait Accumulation {
    /// A weight element as stored: `f32`, or the bits of an f16/bf16.
    type Elem;
    /// Two adjacent weights, loaded at once: a [`F32Pair`], or a `half2`/`bf16x2` as `u32`
    /// (element 2p in the low 16 bits).
    type Pair: Copy;

    /// This thread's partial dot product of the row with each of the `NCOLS` columns, over the
    /// pairs p = tid, tid + block, … < n_pairs, in increasing p (+0 for a thread without pairs).
    ///
    /// # Safety
    /// `w` must point to `n_pairs` readable, aligned pairs; `y.add(j·y_col)` to `n_pairs`
    /// readable, aligned [`F32Pair`]s for every column j < `NCOLS`.
    unsafe fn thread_partials<const NCOLS: usize>(
        w: *const Self::Pair,
        y: *const F32Pair,
        y_col: usize,
        n_pairs: u32,
        tid: u32,
        block: u32,
    ) -> [f32; NCOLS];
}

/// F32 weights, f32 accumulation.
pub struct F32;
/// BF16 weights converted exactly to f32 (`bits << 16`), f32 accumulation.
pub struct Bf16;
/// F16 weights with the op precision set to F32: exact f16 → f32 conversion, f32 accumulation.
pub struct F16F32;
/// F16 weights with default precision: half2 accumulation (ggml's default on fast-fp16 GPUs).
pub struct F16Half;

/// The f32-accumulating loop shared by [`F32`], [`Bf16`] and [`F16F32`]: per pair and column,
/// `acc = fma(x0, y0, acc)` then `acc = fma(x1, y1, acc)` (nvcc contracts ggml's
/// `sumf[j] += x*y`), from a +0 accumulator.
///
/// # Safety
/// As [`Accumulation::thread_partials`].
#[inline(always)]
unsafe fn f32_partials<P: Copy, const NCOLS: usize>(
    w: *const P,
    to_f32: impl Fn(P) -> (f32, f32),
    y: *const F32Pair,
    y_col: usize,
    n_pairs: u32,
    tid: u32,
    block: u32,
) -> [f32; NCOLS] {
    let mut acc = [0.0f32; NCOLS];
    let mut p = tid;
    while p < n_pairs {
        // SAFETY: p < n_pairs, forwarded to the caller.
        let (x0, x1) = to_f32(unsafe { *w.add(p as usize) });
        let mut j = 0;
        while j < NCOLS {
            // SAFETY: j < NCOLS and p < n_pairs, forwarded to the caller.
            let yp = unsafe { *y.add(j * y_col + p as usize) };
            acc[j] = fma(x0, yp.x, acc[j]);
            acc[j] = fma(x1, yp.y, acc[j]);
            j += 1;
        }
        p += block;
    }
    acc
}

impl Accumulation for F32 {
    type Elem = f32;
    type Pair = F32Pair;

    #[inline(always)]
    unsafe fn thread_partials<const NCOLS: usize>(
        w: *const F32Pair,
        y: *const F32Pair,
        y_col: usize,
        n_pairs: u32,
        tid: u32,
        block: u32,
    ) -> [f32; NCOLS] {
        // SAFETY: forwarded to the caller.
        unsafe { f32_partials::<F32Pair, NCOLS>(w, |x| (x.x, x.y), y, y_col, n_pairs, tid, block) }
    }
}

impl Accumulation for Bf16 {
    type Elem = u16;
    type Pair = u32;

    #[inline(always)]
    unsafe fn thread_partials<const NCOLS: usize>(
        w: *const u32,
        y: *const F32Pair,
        y_col: usize,
        n_pairs: u32,
        tid: u32,
        block: u32,
    ) -> [f32; NCOLS] {
        // A bf16 is the upper half of an f32: moving the bits converts exactly (`cvt.f32.bf16`).
        let to_f32 = |x: u32| (f32::from_bits(x << 16), f32::from_bits(x & 0xFFFF_0000));
        // SAFETY: forwarded to the caller.
        unsafe { f32_partials::<u32, NCOLS>(w, to_f32, y, y_col, n_pairs, tid, block) }
    }
}

impl Accumulation for F16F32 {
    type Elem = u16;
    type Pair = u32;

    #[inline(always)]
    unsafe fn thread_partials<const NCOLS: usize>(
        w: *const u32,
        y: *const F32Pair,
        y_col: usize,
        n_pairs: u32,
        tid: u32,
        block: u32,
    ) -> [f32; NCOLS] {
        // ggml's `__half22float2`: two exact `cvt.f32.f16`.
        let to_f32 = |x: u32| (f16_to_f32(x as u16), f16_to_f32((x >> 16) as u16));
        // SAFETY: forwarded to the caller.
        unsafe { f32_partials::<u32, NCOLS>(w, to_f32, y, y_col, n_pairs, tid, block) }
    }
}

impl Accumulation for F16Half {
    type Elem = u16;
    type Pair = u32;

    /// ggml's `sumh2[j] += x2 * make_half2(y.x, y.y)`: the input pair rounded to f16
    /// (`cvt.rn.f16.f32`, no ftz), then one `fma.rn.f16x2` into the half2 accumulator (ptxas
    /// fuses ggml's mul + add into HFMA2), from (+0, +0). At the end `low + high` in f32.
    #[inline(always)]
    unsafe fn thread_partials<const NCOLS: usize>(
        w: *const u32,
        y: *const F32Pair,
        y_col: usize,
        n_pairs: u32,
        tid: u32,
        block: u32,
    ) -> [f32; NCOLS] {
        let mut acc_h2 = [0u32; NCOLS];
        let mut p = tid;
        while p < n_pairs {
            // SAFETY: p < n_pairs, forwarded to the caller.
            let x = unsafe { *w.add(p as usize) };
            let mut j = 0;
            while j < NCOLS {
                // SAFETY: j < NCOLS and p < n_pairs, forwarded to the caller.
                let yp = unsafe { *y.add(j * y_col + p as usize) };
                let y_h2 = pack_f16x2(f32_to_f16_rn(yp.x), f32_to_f16_rn(yp.y));
                acc_h2[j] = fma_f16x2(x, y_h2, acc_h2[j]);
                j += 1;
            }
            p += block;
        }
        let mut acc = [0.0f32; NCOLS];
        let mut j = 0;
        while j < NCOLS {
            acc[j] = add(f16_to_f32(acc_h2[j] as u16), f16_to_f32((acc_h2[j] >> 16) as u16));
            j += 1;
        }
        acc
    }
}

/// Zeroes ggml's 32-float reduction buffer at shared address `buf` when the block has more than
/// one warp (threads 0…31, then a barrier). Call once at kernel start, before any
/// [`block_reduce_column`]: the lanes of warp 0 beyond the block's warp count read these zeros
/// in every later reduction.
///
/// # Safety
/// Every thread of the block must call it; `buf` must be 32 floats of the launch's dynamic
/// shared memory; `block` must be the block size (a multiple of 32).
#[inline(always)]
pub unsafe fn zero_reduction_buffer(buf: u32, tid: u32, block: u32) {
    if block > 32 {
        if tid < 32 {
            // SAFETY: tid < 32, inside the 32-float buffer (caller).
            unsafe { shared::store_f32(buf + 4 * tid, 0.0) };
        }
        // SAFETY: `block` is uniform, so every thread of the block reaches this barrier.
        unsafe { sync_threads() };
    }
}

/// ggml's reduction of one column's partial sums (spec §2.9): the warp butterfly; with more
/// than one warp, every lane of warp w stores its warp's sum at `buf[w]`, barrier, warp 0 loads
/// `buf[lane]` (lanes ≥ block/32 read the +0 of [`zero_reduction_buffer`]) and runs the butterfly
/// again, barrier (so the next column may reuse the buffer). The block's sum is returned in
/// every lane of warp 0 (with a one-warp block: in every lane).
///
/// # Safety
/// Every thread of the block must call it together, after [`zero_reduction_buffer`] with the
/// same `buf` and `block`.
#[inline(always)]
pub unsafe fn block_reduce_column(partial: f32, buf: u32, tid: u32, block: u32) -> f32 {
    // SAFETY: all threads (so all 32 lanes of every full warp) are here together (caller).
    let warp_total = unsafe { warp_sum(partial) };
    if block <= 32 {
        return warp_total;
    }
    let mut total = warp_total;
    // SAFETY: tid / 32 < block / 32 ≤ 8 < 32 floats of the buffer; `block` is uniform, so every
    // thread reaches both barriers; warp 0 (tid < 32) is a full warp for the butterfly.
    unsafe {
        shared::store_f32(buf + 4 * (tid / 32), warp_total);
        sync_threads();
        if tid < 32 {
            total = warp_sum(shared::load_f32(buf + 4 * tid));
        }
        sync_threads();
    }
    total
}

/// One block computes row `%ctaid.x` of every column.
///
/// # Safety
/// See the module docs: the host validates every view, launches one block per row with ggml's
/// block size and at least 32 floats of dynamic shared memory.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn mul_mat_vec<A: Accumulation, const NCOLS: usize>(
    weight: *const A::Elem,
    w_row: usize,
    input: *const f32,
    in_col: usize,
    dst: *mut f32,
    dst_col: usize,
    n_pairs: u32,
) {
    let row = block_idx_x() as usize;
    let (tid, block) = (thread_idx_x(), block_dim_x());
    let buf = shared::base();
    // SAFETY: every thread calls it; the launch requested the 32-float buffer.
    unsafe { zero_reduction_buffer(buf, tid, block) };
    // SAFETY: the host checked that row `row` (< rows = gridDim.x) lies inside the weight view
    // and starts pair-aligned, and that every column of the input is pair-aligned, so the
    // casts to pair pointers are aligned and `in_col / 2` is exact.
    let w = unsafe { weight.add(row * w_row) } as *const A::Pair;
    let y = input as *const F32Pair;
    // SAFETY: the host checked that both views hold n_pairs pairs per row/column.
    let partials = unsafe { A::thread_partials::<NCOLS>(w, y, in_col / 2, n_pairs, tid, block) };
    let mut j = 0;
    while j < NCOLS {
        // SAFETY: every thread of the block runs this loop the same NCOLS times.
        let sum = unsafe { block_reduce_column(partials[j], buf, tid, block) };
        if tid as usize == j {
            // SAFETY: thread j < NCOLS is in warp 0 and holds column j's sum; the host checked
            // that dst element (row, j) lies inside the dst view.
            unsafe { *dst.add(j * dst_col + row) = sum };
        }
        j += 1;
    }
}

macro_rules! mul_mat_vec_entries {
    ($($acc:ty => [$($name:ident = $ncols:literal),*];)*) => {$($(
        /// Entry point; see the module docs.
        ///
        /// # Safety
        /// See the module docs: the host validates every view before launching.
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(
            weight: *const <$acc as Accumulation>::Elem, w_row: usize,
            input: *const f32, in_col: usize,
            dst: *mut f32, dst_col: usize,
            n_pairs: u32,
        ) {
            // SAFETY: forwarded from the launch contract above.
            unsafe { mul_mat_vec::<$acc, $ncols>(weight, w_row, input, in_col, dst, dst_col, n_pairs) }
        }
    )*)*};
}

mul_mat_vec_entries! {
    F32 => [mul_mat_vec_f32_c1 = 1, mul_mat_vec_f32_c2 = 2, mul_mat_vec_f32_c3 = 3, mul_mat_vec_f32_c4 = 4,
            mul_mat_vec_f32_c5 = 5, mul_mat_vec_f32_c6 = 6, mul_mat_vec_f32_c7 = 7, mul_mat_vec_f32_c8 = 8];
    Bf16 => [mul_mat_vec_bf16_c1 = 1, mul_mat_vec_bf16_c2 = 2, mul_mat_vec_bf16_c3 = 3, mul_mat_vec_bf16_c4 = 4,
             mul_mat_vec_bf16_c5 = 5, mul_mat_vec_bf16_c6 = 6, mul_mat_vec_bf16_c7 = 7, mul_mat_vec_bf16_c8 = 8];
    F16Half => [mul_mat_vec_f16_c1 = 1, mul_mat_vec_f16_c2 = 2, mul_mat_vec_f16_c3 = 3, mul_mat_vec_f16_c4 = 4,
                mul_mat_vec_f16_c5 = 5, mul_mat_vec_f16_c6 = 6, mul_mat_vec_f16_c7 = 7, mul_mat_vec_f16_c8 = 8];
    F16F32 => [mul_mat_vec_f16_f32acc_c1 = 1, mul_mat_vec_f16_f32acc_c2 = 2, mul_mat_vec_f16_f32acc_c3 = 3,
               mul_mat_vec_f16_f32acc_c4 = 4, mul_mat_vec_f16_f32acc_c5 = 5, mul_mat_vec_f16_f32acc_c6 = 6,
               mul_mat_vec_f16_f32acc_c7 = 7, mul_mat_vec_f16_f32acc_c8 = 8];
}
