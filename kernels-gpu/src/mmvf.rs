//! MUL_MAT_VEC — ggml's `mul_mat_vec_f` (mmvf) for 1–8 input columns and F32, BF16 or F16
//! weights (spec §2.9): `dst[j][r] = Σ_e weight[r][e] · input[j][e]`; and MUL_MAT_VEC_PAIR, two
//! such products of the same input in one launch (grid y = 2 picks the product), built from the
//! same bodies; and MUL_MAT_VEC_PAIR_GATE, the pair with the GDN gate path as its epilogue (the
//! pair's entries with a runtime flag, [`GateEpilogue`]).
//!
//! Thread mapping: one block per weight row (grid x = row r) and group of `NCOLS` columns
//! (grid z = g: columns g·NCOLS … g·NCOLS + NCOLS − 1; the host may split a launch's columns
//! into equal groups, each column's arithmetic does not depend on which others share its block). The block size is ggml's choice for
//! the row length E ([`mul_mat_vec_block_size`](crate::abi::mul_mat_vec_block_size): a multiple
//! of 32, at most 256) and is read from `%ntid.x`, so one entry serves every block size. Thread
//! `tid` reads the row as element pairs p = tid, tid+bs, tid+2bs, … < E/2 and, for every column j,
//! the input pair p of column j ([`thread_partials`]). Each column's per-thread partial sums are
//! then combined by [`block_reduce`] in ggml's order, and thread j writes column j.
//!
//! Accumulation ([`Accumulation`] implementations, ggml's `T` × `type_acc`):
//! - [`F32`], [`Bf16`], [`F16F32`]: weights converted exactly to f32, `fma.rn.ftz` per element;
//! - [`F16Half`]: ggml's default for F16 weights — the input pair rounded to f16, one
//!   `fma.rn.f16x2` per pair into a half2 accumulator, the two halves summed in f32 at the end.
//!
//! Speed (NOTES.md, "mul_mat_vec_f speed (static analysis)"): a thread's pairs are visited in
//! chunks of [`CHUNK`] iterations; every load of a chunk (weight pair and the pair of every
//! column) is issued before the first fma of the chunk, so a thread waits for memory once per
//! chunk instead of once per iteration (E = 4096 with 256 threads: 8 iterations, one chunk).
//! The fmas then run in exactly the order of the plain loop (p increasing, per column). Loads
//! use the read-only path (`ld.global.nc`, as nvcc does for ggml's `const __restrict__`
//! operands). The reduction stores every column's warp sums at once and needs one barrier for
//! all columns; each column's additions are ggml's, in ggml's order.
//!
//! Layouts (element strides, checked by the host): weight row r starts at `r·w_row` elements of
//! the weight type, input column j at `j·in_col` f32, dst column j at `j·dst_col` f32; rows and
//! columns are contiguous along E. Weight rows and input columns start at pair-aligned addresses
//! (the host refuses others), because pairs are loaded with one access each, as ggml does.
//!
//! Aliasing: `dst` must not overlap the weight or the input (the host refuses it); weight and
//! input are never written during the launch (the `.nc` loads rely on it). With the gate
//! epilogue, beta and gate overlap nothing else either (dt_bias and ssm_a are `.nc` loads too),
//! and element (r, j) of gate / beta is written by the thread that wrote (r, j) of alpha /
//! beta_raw, from the register it stored (no read-back).
//!
//! Shared memory: [`MUL_MAT_VEC_SHARED_BYTES`](crate::abi::MUL_MAT_VEC_SHARED_BYTES) of dynamic
//! shared memory: [`MUL_MAT_VEC_MAX_WARPS`](crate::abi::MUL_MAT_VEC_MAX_WARPS) warp sums per
//! column for the cross-warp step of the reduction.

use crate::abi::{self, MUL_MAT_VEC_MAX_WARPS};
#[cfg(target_arch = "nvptx64")]
use crate::device::grid::{allow_dependent_launch, wait_prerequisite_grids};
use crate::device::half::{f16_to_f32, f32_to_f16_rn, fma_f16x2, pack_f16x2};
use crate::device::load::{nc_f32x2, nc_u32};
use crate::device::math::{add, fma};
use crate::device::memory::load_nc_f32;
use crate::device::shared;
use crate::device::thread::{block_dim_x, block_idx_x, block_idx_y, block_idx_z, sync_threads, thread_idx_x};
use crate::device::warp::{sync_warp, warp_sum, warp_sum_scattered_32};

/// Pair iterations per thread whose loads are all issued before their fmas (see the module
/// docs). 8 covers E = 4096 at 256 threads in one chunk.
pub const CHUNK: u32 = 8;

/// Two adjacent f32 (ggml's `float2`), loaded with one 8-byte access.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub struct F32Pair {
    pub x: f32,
    pub y: f32,
}

impl F32Pair {
    const ZERO: F32Pair = F32Pair { x: 0.0, y: 0.0 };

    /// The pair at `p`, one `ld.global.nc.v2.f32`.
    ///
    /// # Safety
    /// `p` must point to a readable, aligned pair that nothing writes during the launch.
    #[inline(always)]
    unsafe fn load(p: *const F32Pair) -> F32Pair {
        // SAFETY: forwarded to the caller; F32Pair is two f32 at 8-byte alignment.
        let (x, y) = unsafe { nc_f32x2(p as *const f32) };
        F32Pair { x, y }
    }
}

/// [layer-step] A pair that a chunk can stage in shared memory instead of registers
/// ([`shared::copy_async_8`] / [`shared::copy_async_4`]): the same bytes an `ld.global.nc` of
/// it would load.
pub trait Stageable: Copy {
    /// Starts copying the pair at `src` to shared address `dst`.
    ///
    /// # Safety
    /// As [`shared::copy_async_8`] for this pair's size: `src` a readable, aligned pair that
    /// nothing writes during the launch, `dst` aligned to 8 inside the dynamic shared memory.
    unsafe fn stage(src: *const Self, dst: u32);

    /// The pair staged at `addr`.
    ///
    /// # Safety
    /// This thread staged it there and then ran [`shared::wait_async_copies`]; or [seq-batch] a
    /// thread of this warp copied it there, waited for the copy and then met this thread at
    /// [`sync_warp`], and nothing wrote it since.
    unsafe fn load_staged(addr: u32) -> Self;
}

impl Stageable for F32Pair {
    #[inline(always)]
    unsafe fn stage(src: *const F32Pair, dst: u32) {
        // SAFETY: forwarded to the caller; F32Pair is 8 bytes at 8-byte alignment.
        unsafe { shared::copy_async_8(dst, src as *const u64) }
    }

    #[inline(always)]
    unsafe fn load_staged(addr: u32) -> F32Pair {
        // SAFETY: forwarded to the caller.
        let (x, y) = unsafe { shared::load_f32x2(addr) };
        F32Pair { x, y }
    }
}

impl Stageable for u32 {
    #[inline(always)]
    unsafe fn stage(src: *const u32, dst: u32) {
        // SAFETY: forwarded to the caller (4 bytes, 4-byte aligned).
        unsafe { shared::copy_async_4(dst, src) }
    }

    #[inline(always)]
    unsafe fn load_staged(addr: u32) -> u32 {
        // SAFETY: forwarded to the caller.
        unsafe { shared::load_u32(addr) }
    }
}

/// One way of reading a weight row and accumulating its products with an input column (ggml's
/// `T` × `type_acc`).
pub trait Accumulation {
    /// A weight element as stored: `f32`, or the bits of an f16/bf16.
    type Elem;
    /// Two adjacent weights, loaded at once: a [`F32Pair`], or a `half2`/`bf16x2` as `u32`
    /// (element 2p in the low 16 bits).
    type Pair: Stageable;
    /// A column's per-thread accumulator: `f32`, or a `half2` as `u32`.
    type Acc: Copy;
    /// Placeholder for pairs a chunk does not load (never accumulated).
    const NO_PAIR: Self::Pair;
    /// The accumulator's start value (+0, or (+0, +0)).
    const ZERO: Self::Acc;

    /// The weight pair at `w`.
    ///
    /// # Safety
    /// `w` must point to a readable, aligned pair that nothing writes during the launch.
    unsafe fn load(w: *const Self::Pair) -> Self::Pair;

    /// One pair step of one column: ggml's `sumf[j] += x0*y0; sumf[j] += x1*y1` (or the half2
    /// form).
    fn step(acc: Self::Acc, x: Self::Pair, y: F32Pair) -> Self::Acc {
        Self::step_column(acc, x, Self::column(y))
    }

    /// [seq-batch] An input pair as every step of the column takes it (itself, or rounded to f16
    /// and packed for the half2 form): converted once where several rows share it.
    type Column: Copy;

    /// [seq-batch] The input pair `y` in [`Accumulation::Column`] form (exact for f32; the two
    /// `cvt.rn.f16.f32` of the half2 form).
    fn column(y: F32Pair) -> Self::Column;

    /// [seq-batch] [`Accumulation::step`] on an input pair already in column form: the same
    /// operations, so the same bits.
    fn step_column(acc: Self::Acc, x: Self::Pair, y: Self::Column) -> Self::Acc;

    /// The accumulator as the f32 partial sum the reduction takes.
    fn finish(acc: Self::Acc) -> f32;
}

/// F32 weights, f32 accumulation.
pub struct F32;
/// BF16 weights converted exactly to f32 (`bits << 16`), f32 accumulation.
pub struct Bf16;
/// F16 weights with the op precision set to F32: exact f16 → f32 conversion, f32 accumulation.
pub struct F16F32;
/// F16 weights with default precision: half2 accumulation (ggml's default on fast-fp16 GPUs).
pub struct F16Half;

/// The f32 step shared by [`F32`], [`Bf16`] and [`F16F32`]: `acc = fma(x0, y0, acc)` then
/// `acc = fma(x1, y1, acc)` (nvcc contracts ggml's `sumf[j] += x*y`).
#[inline(always)]
fn f32_step((x0, x1): (f32, f32), y: F32Pair, acc: f32) -> f32 {
    fma(x1, y.y, fma(x0, y.x, acc))
}

impl Accumulation for F32 {
    type Elem = f32;
    type Pair = F32Pair;
    type Acc = f32;
    const NO_PAIR: F32Pair = F32Pair::ZERO;
    const ZERO: f32 = 0.0;

    #[inline(always)]
    unsafe fn load(w: *const F32Pair) -> F32Pair {
        // SAFETY: forwarded to the caller.
        unsafe { F32Pair::load(w) }
    }

    type Column = F32Pair;

    #[inline(always)]
    fn column(y: F32Pair) -> F32Pair {
        y
    }

    #[inline(always)]
    fn step_column(acc: f32, x: F32Pair, y: F32Pair) -> f32 {
        f32_step((x.x, x.y), y, acc)
    }

    #[inline(always)]
    fn finish(acc: f32) -> f32 {
        acc
    }
}

impl Accumulation for Bf16 {
    type Elem = u16;
    type Pair = u32;
    type Acc = f32;
    const NO_PAIR: u32 = 0;
    const ZERO: f32 = 0.0;

    #[inline(always)]
    unsafe fn load(w: *const u32) -> u32 {
        // SAFETY: forwarded to the caller.
        unsafe { nc_u32(w) }
    }

    type Column = F32Pair;

    #[inline(always)]
    fn column(y: F32Pair) -> F32Pair {
        y
    }

    /// A bf16 is the upper half of an f32: moving the bits converts exactly (`cvt.f32.bf16`).
    #[inline(always)]
    fn step_column(acc: f32, x: u32, y: F32Pair) -> f32 {
        f32_step((f32::from_bits(x << 16), f32::from_bits(x & 0xFFFF_0000)), y, acc)
    }

    #[inline(always)]
    fn finish(acc: f32) -> f32 {
        acc
    }
}

impl Accumulation for F16F32 {
    type Elem = u16;
    type Pair = u32;
    type Acc = f32;
    const NO_PAIR: u32 = 0;
    const ZERO: f32 = 0.0;

    #[inline(always)]
    unsafe fn load(w: *const u32) -> u32 {
        // SAFETY: forwarded to the caller.
        unsafe { nc_u32(w) }
    }

    type Column = F32Pair;

    #[inline(always)]
    fn column(y: F32Pair) -> F32Pair {
        y
    }

    /// ggml's `__half22float2`: two exact `cvt.f32.f16`.
    #[inline(always)]
    fn step_column(acc: f32, x: u32, y: F32Pair) -> f32 {
        f32_step((f16_to_f32(x as u16), f16_to_f32((x >> 16) as u16)), y, acc)
    }

    #[inline(always)]
    fn finish(acc: f32) -> f32 {
        acc
    }
}

impl Accumulation for F16Half {
    type Elem = u16;
    type Pair = u32;
    type Acc = u32;
    const NO_PAIR: u32 = 0;
    const ZERO: u32 = 0;

    #[inline(always)]
    unsafe fn load(w: *const u32) -> u32 {
        // SAFETY: forwarded to the caller.
        unsafe { nc_u32(w) }
    }

    /// ggml's `make_half2(y.x, y.y)`: the input pair rounded to f16 (`cvt.rn.f16.f32`, no ftz).
    type Column = u32;

    #[inline(always)]
    fn column(y: F32Pair) -> u32 {
        pack_f16x2(f32_to_f16_rn(y.x), f32_to_f16_rn(y.y))
    }

    /// ggml's `sumh2[j] += x2 * make_half2(y.x, y.y)`: one `fma.rn.f16x2` of the rounded pair
    /// into the half2 accumulator (ptxas fuses ggml's mul + add into HFMA2).
    #[inline(always)]
    fn step_column(acc: u32, x: u32, y: u32) -> u32 {
        fma_f16x2(x, y, acc)
    }

    /// `low + high` in f32 (exact conversions, one `add.rn.ftz`).
    #[inline(always)]
    fn finish(acc: u32) -> f32 {
        add(f16_to_f32(acc as u16), f16_to_f32((acc >> 16) as u16))
    }
}

/// `$body` once for each `$k` = 0 … [`CHUNK`]−1, in order, as straight-line code.
macro_rules! each_k {
    ($k:ident => $body:block) => {{
        let $k: usize = 0;
        $body
        let $k: usize = 1;
        $body
        let $k: usize = 2;
        $body
        let $k: usize = 3;
        $body
        let $k: usize = 4;
        $body
        let $k: usize = 5;
        $body
        let $k: usize = 6;
        $body
        let $k: usize = 7;
        $body
    }};
}
const _: () = assert!(CHUNK == 8, "each_k! writes out CHUNK iterations");

/// One chunk of a thread's loop: iterations k = 0 … CHUNK−1 at pairs `p + k·block`, those with
/// `k·block < left` (all of them when `FULL`; `left` = n_pairs − p > 0). Every load first
/// ([`chunk_loads`]), then per iteration (k increasing) and column the [`Accumulation::step`]
/// ([`chunk_steps`]) — the plain loop's order.
///
/// # Safety
/// As [`thread_partials`], for the pairs `p + k·block < n_pairs`.
#[inline(always)]
unsafe fn chunk<A: Accumulation, const NCOLS: usize, const FULL: bool>(
    acc: &mut [A::Acc; NCOLS],
    w: *const A::Pair,
    cols: &[*const F32Pair; NCOLS],
    p: u32,
    block: u32,
    left: u32,
) {
    // SAFETY: forwarded to the caller.
    let loaded = unsafe { chunk_loads::<A, NCOLS, FULL>(w, cols, p, block, left) };
    chunk_steps::<A, NCOLS, FULL>(acc, &loaded, block, left);
}

/// A chunk's operands: weight pair and column pairs of iteration k (unloaded iterations hold
/// placeholders that are never accumulated).
type ChunkOperands<A, const NCOLS: usize> = ([<A as Accumulation>::Pair; CHUNK as usize], [[F32Pair; NCOLS]; CHUNK as usize]);

/// [`chunk`]'s loads: the weight pair and every column's pair of each iteration it takes.
///
/// # Safety
/// As [`chunk`].
#[inline(always)]
unsafe fn chunk_loads<A: Accumulation, const NCOLS: usize, const FULL: bool>(
    w: *const A::Pair,
    cols: &[*const F32Pair; NCOLS],
    p: u32,
    block: u32,
    left: u32,
) -> ChunkOperands<A, NCOLS> {
    const K: usize = CHUNK as usize;
    let mut xs = [A::NO_PAIR; K];
    let mut ys = [[F32Pair::ZERO; NCOLS]; K];
    // Written out per k (LLVM does not fully unroll the k loop for wide column counts, and a
    // rolled loop would put these arrays in local memory).
    each_k!(k => {
        if FULL || (k as u32) * block < left {
            // p + k·block < p + left = n_pairs: no overflow, and inside every row and column.
            let pk = (p + k as u32 * block) as usize;
            // SAFETY: pk < n_pairs, forwarded to the caller.
            xs[k] = unsafe { A::load(w.add(pk)) };
            let mut j = 0;
            while j < NCOLS {
                // SAFETY: j < NCOLS and pk < n_pairs, forwarded to the caller.
                ys[k][j] = unsafe { F32Pair::load(cols[j].add(pk)) };
                j += 1;
            }
        }
    });
    (xs, ys)
}

/// [`chunk`]'s accumulation of what [`chunk_loads`] loaded for the same `block` and `left`.
#[inline(always)]
fn chunk_steps<A: Accumulation, const NCOLS: usize, const FULL: bool>(
    acc: &mut [A::Acc; NCOLS],
    (xs, ys): &ChunkOperands<A, NCOLS>,
    block: u32,
    left: u32,
) {
    each_k!(k => {
        if FULL || (k as u32) * block < left {
            let mut j = 0;
            while j < NCOLS {
                acc[j] = A::step(acc[j], xs[k], ys[k][j]);
                j += 1;
            }
        }
    });
}

/// This thread's partial dot product of the row with each of the `NCOLS` columns, over the
/// pairs p = tid, tid + block, … < n_pairs, in increasing p (ggml's per-thread loop; +0 for a
/// thread without pairs), in chunks of [`CHUNK`] iterations.
///
/// # Safety
/// `w` must point to `n_pairs` readable, aligned pairs; `y.add(j·y_col)` to `n_pairs` readable,
/// aligned [`F32Pair`]s for every column j < `NCOLS`; none of them written during the launch.
#[inline(always)]
pub unsafe fn thread_partials<A: Accumulation, const NCOLS: usize>(
    w: *const A::Pair,
    y: *const F32Pair,
    y_col: usize,
    n_pairs: u32,
    tid: u32,
    block: u32,
) -> [f32; NCOLS] {
    let mut cols = [y; NCOLS];
    let mut j = 0;
    while j < NCOLS {
        // SAFETY: column j < NCOLS exists (caller).
        cols[j] = unsafe { y.add(j * y_col) };
        j += 1;
    }
    // SAFETY: forwarded to the caller (every column pointer addresses its n_pairs pairs).
    unsafe { thread_partials_of::<A, NCOLS>(w, &cols, n_pairs, tid, block) }
}

/// [`thread_partials`] with the columns given by their first pairs (`cols[j]`, each holding
/// `n_pairs` pairs): the same loop, chunks and accumulation. [layer-step] GDN_LAYER_STEP passes
/// column n_t − 1 again for the columns it does not use.
///
/// # Safety
/// `w` must point to `n_pairs` readable, aligned pairs and every `cols[j]` to `n_pairs`
/// readable, aligned [`F32Pair`]s, none of them written during the launch.
#[inline(always)]
pub unsafe fn thread_partials_of<A: Accumulation, const NCOLS: usize>(
    w: *const A::Pair,
    cols: &[*const F32Pair; NCOLS],
    n_pairs: u32,
    tid: u32,
    block: u32,
) -> [f32; NCOLS] {
    let mut acc = [A::ZERO; NCOLS];
    if tid < n_pairs {
        let mut p = tid;
        loop {
            let left = n_pairs - p;
            // SAFETY: forwarded to the caller; p < n_pairs.
            unsafe {
                if left > (CHUNK - 1) * block {
                    chunk::<A, NCOLS, true>(&mut acc, w, cols, p, block, left);
                } else {
                    chunk::<A, NCOLS, false>(&mut acc, w, cols, p, block, left);
                }
            }
            if left <= CHUNK * block {
                break;
            }
            p += CHUNK * block;
        }
    }
    let mut out = [0.0f32; NCOLS];
    let mut j = 0;
    while j < NCOLS {
        out[j] = A::finish(acc[j]);
        j += 1;
    }
    out
}

/// ggml's reduction of every column's partial sums (spec §2.9), each column exactly as ggml
/// reduces it: the warp butterfly; with more than one warp, every lane of warp w stores its
/// warp's sum v_w at `buf[j][w]`, barrier, and warp 0 runs the butterfly again over
/// `buf[j][lane]` for lanes below the warp count and +0 for the others (the zeros ggml's buffer
/// holds there). The stores of all columns share one barrier. Column j's sum is returned in
/// every lane of warp 0 (with a one-warp block: in every lane).
///
/// Call at most once per launch with a given `buf` (the buffer is not reset).
///
/// # Safety
/// Every thread of the block must call it together; `buf` must be the shared address of
/// `NCOLS · MUL_MAT_VEC_MAX_WARPS` floats; `block` must be the block size, a multiple of 32 and
/// at most `32 · MUL_MAT_VEC_MAX_WARPS`.
#[inline(always)]
pub unsafe fn block_reduce<const NCOLS: usize>(partials: [f32; NCOLS], buf: u32, tid: u32, block: u32) -> [f32; NCOLS] {
    let mut sums = [0.0f32; NCOLS];
    let mut j = 0;
    while j < NCOLS {
        // SAFETY: all threads (so all 32 lanes of every full warp) are here together (caller).
        sums[j] = unsafe { warp_sum(partials[j]) };
        j += 1;
    }
    if block <= 32 {
        return sums;
    }
    let slot = |j: usize, w: u32| buf + 4 * (j as u32 * MUL_MAT_VEC_MAX_WARPS + w);
    let mut j = 0;
    while j < NCOLS {
        // SAFETY: tid / 32 < block / 32 ≤ MUL_MAT_VEC_MAX_WARPS: inside column j's slots.
        unsafe { shared::store_f32(slot(j, tid / 32), sums[j]) };
        j += 1;
    }
    // SAFETY: `block` is uniform, so every thread of the block reaches the barrier.
    unsafe { sync_threads() };
    if tid < 32 {
        let warps = block / 32;
        let mut j = 0;
        while j < NCOLS {
            // SAFETY: lane tid < warps was written before the barrier; warp 0 is a full warp,
            // converged here for the butterfly.
            let v = if tid < warps { unsafe { shared::load_f32(slot(j, tid)) } } else { 0.0 };
            sums[j] = unsafe { warp_sum(v) };
            j += 1;
        }
    }
    sums
}

/// [layer-step] The partials of virtual threads `tid` (low) and `tid + 128` (high) of a block of
/// `block` ≤ 256 virtual threads, each exactly [`thread_partials_of`]'s (+0 for a virtual thread
/// at or above `block`): the same chunks, loads and steps in the same order per virtual thread.
/// [speed] Both in one memory round trip per chunk: the high thread's chunk is staged in shared
/// memory (`cp.async`, no registers held) while the low thread's chunk loads into registers and
/// accumulates; then the high thread accumulates from its staged copy. Pure loads moved; each
/// virtual thread's steps are unchanged and the low thread's still come before the high's.
///
/// # Safety
/// As [`thread_partials_of`] for both virtual threads; `stage` is the shared address of
/// [`abi::GDN_LAYER_STEP_ROW_STAGE_BYTES`] bytes (8-aligned) that only this call touches
/// between the block barriers around it; the block has 128 threads.
#[inline(always)]
unsafe fn thread_partials_halves<A: Accumulation, const NCOLS: usize>(
    w: *const A::Pair,
    cols: &[*const F32Pair; NCOLS],
    n_pairs: u32,
    tid: u32,
    block: u32,
    stage: u32,
) -> ([f32; NCOLS], [f32; NCOLS]) {
    const K: usize = CHUNK as usize;
    const { assert!((K * (1 + NCOLS) * 128 * 8) as u32 <= abi::GDN_LAYER_STEP_ROW_STAGE_BYTES) };
    let high = tid + 128;
    let (mut acc_low, mut acc_high) = ([A::ZERO; NCOLS], [A::ZERO; NCOLS]);
    // Iteration k's operand c (0: weight, 1 + j: column j) of this thread's staged chunk: 8-byte
    // slots, a warp's 32 threads side by side (conflict-free).
    let slot = |k: usize, c: usize| stage + 8 * ((k * (1 + NCOLS) + c) as u32 * 128 + tid);
    // Chunk offsets 0, CHUNK·block, …: virtual thread t's chunk at pair t + offset, with
    // `left` = n_pairs − t − offset pairs from there (0: it has no such chunk).
    let mut offset = 0u32;
    loop {
        let left_of = |t: u32| if t < block && t < n_pairs && offset < n_pairs - t { n_pairs - t - offset } else { 0 };
        let (low_left, high_left) = (left_of(tid), left_of(high));
        if high_left > 0 {
            let p = high + offset;
            each_k!(k => {
                if (k as u32) * block < high_left {
                    // p + k·block < n_pairs: inside the row and every column (as `chunk_loads`).
                    let pk = (p + k as u32 * block) as usize;
                    // SAFETY: pk < n_pairs, forwarded to the caller; the slots are this
                    // thread's, untouched until it waits below.
                    unsafe {
                        A::Pair::stage(w.add(pk), slot(k, 0));
                        let mut j = 0;
                        while j < NCOLS {
                            F32Pair::stage(cols[j].add(pk), slot(k, 1 + j));
                            j += 1;
                        }
                    }
                }
            });
        }
        if low_left > 0 {
            // SAFETY: forwarded to the caller; tid + offset < n_pairs.
            unsafe {
                if low_left > (CHUNK - 1) * block {
                    chunk::<A, NCOLS, true>(&mut acc_low, w, cols, tid + offset, block, low_left);
                } else {
                    chunk::<A, NCOLS, false>(&mut acc_low, w, cols, tid + offset, block, low_left);
                }
            }
        }
        if high_left > 0 {
            shared::wait_async_copies();
            // Iteration by iteration (k increasing, then the columns): `chunk_steps`' order;
            // shared loads are short, so no chunk of registers is held.
            each_k!(k => {
                if (k as u32) * block < high_left {
                    // SAFETY: staged above by this thread, which has waited for its copies.
                    let x = unsafe { A::Pair::load_staged(slot(k, 0)) };
                    let mut j = 0;
                    while j < NCOLS {
                        // SAFETY: as above.
                        let y = unsafe { F32Pair::load_staged(slot(k, 1 + j)) };
                        acc_high[j] = A::step(acc_high[j], x, y);
                        j += 1;
                    }
                }
            });
        }
        // The low thread's chunks outlast the high one's (its pairs start 128 earlier).
        if low_left <= CHUNK * block {
            break;
        }
        offset += CHUNK * block;
    }
    let (mut low, mut high) = ([0.0f32; NCOLS], [0.0f32; NCOLS]);
    let mut j = 0;
    while j < NCOLS {
        low[j] = A::finish(acc_low[j]);
        high[j] = A::finish(acc_high[j]);
        j += 1;
    }
    (low, high)
}

/// [layer-step] [`block_reduce`] of a block of `block` ≤ 256 *virtual* threads run by 128 real
/// threads: real thread `tid` holds the partials of virtual threads `tid` (`low`) and
/// `tid + 128` (`high`), so real warp w holds virtual warps w and w + 4, lane for lane. Each
/// virtual warp's butterfly is [`warp_sum`] over its 32 values in lane order (as in a block of
/// `block` threads); with more than one virtual warp, virtual warp v's sum is stored at
/// `buf[j][v]`, barrier, and warp 0 runs the butterfly over `buf[j][lane]` for lanes below
/// `block / 32` and +0 for the others — [`block_reduce`]'s additions in its order, so every
/// column's sum has its bits. Virtual threads at or above `block` do not exist: their warps'
/// sums land in slots that are never read (`block` is a multiple of 32). Column j's sum is
/// returned in every lane of warp 0.
///
/// # Safety
/// All 128 threads of the block must call it together; `buf` must be the shared address of
/// `NCOLS · MUL_MAT_VEC_MAX_WARPS` floats that no thread reads or writes from the previous
/// barrier until every thread has returned; `block` a multiple of 32, at most 256.
#[inline(always)]
pub unsafe fn block_reduce_halves<const NCOLS: usize>(
    low: [f32; NCOLS],
    high: [f32; NCOLS],
    buf: u32,
    tid: u32,
    block: u32,
) -> [f32; NCOLS] {
    let mut sums = [0.0f32; NCOLS];
    let mut sums_high = [0.0f32; NCOLS];
    let mut j = 0;
    while j < NCOLS {
        // SAFETY: all 128 threads (so all 32 lanes of every warp) are here together (caller).
        unsafe {
            sums[j] = warp_sum(low[j]);
            sums_high[j] = warp_sum(high[j]);
        }
        j += 1;
    }
    if block <= 32 {
        return sums;
    }
    let slot = |j: usize, w: u32| buf + 4 * (j as u32 * MUL_MAT_VEC_MAX_WARPS + w);
    let warp = tid / 32;
    let mut j = 0;
    while j < NCOLS {
        // SAFETY: warp < 4 and warp + 4 < 8 = MUL_MAT_VEC_MAX_WARPS: inside column j's slots.
        unsafe {
            shared::store_f32(slot(j, warp), sums[j]);
            shared::store_f32(slot(j, warp + 4), sums_high[j]);
        }
        j += 1;
    }
    // SAFETY: `block` is uniform, so every thread of the block reaches the barrier.
    unsafe { sync_threads() };
    if tid < 32 {
        let warps = block / 32;
        let mut j = 0;
        while j < NCOLS {
            // SAFETY: slot tid < warps was written before the barrier; warp 0 is converged.
            let v = if tid < warps { unsafe { shared::load_f32(slot(j, tid)) } } else { 0.0 };
            sums[j] = unsafe { warp_sum(v) };
            j += 1;
        }
    }
    sums
}

/// What a product's writer thread does with element (row, j) of its result besides storing it
/// in dst: nothing (MUL_MAT_VEC, MUL_MAT_VEC_PAIR), or MUL_MAT_VEC_PAIR_GATE's gate path.
pub trait Epilogue {
    /// Whether [`Epilogue::apply`] does anything (false: no code at all is emitted for it).
    const ACTIVE: bool;

    /// Called by thread j after it stored `sum` = dst element (row, j) (j < the block's column
    /// count, relative to the block's column group).
    ///
    /// # Safety
    /// The element (row, j) lies inside the epilogue's views (host-validated).
    unsafe fn apply(&self, row: usize, j: usize, sum: f32);
}

/// No epilogue: the plain product (compiles to nothing).
pub struct NoEpilogue;

impl Epilogue for NoEpilogue {
    const ACTIVE: bool = false;

    #[inline(always)]
    unsafe fn apply(&self, _row: usize, _j: usize, _sum: f32) {}
}

/// MUL_MAT_VEC_PAIR_GATE's epilogue for one block (see [`abi::MulMatVecPairGateParams`]):
/// `out` = gate (product 0) or beta (product 1) at the block's column group, `out_col` its
/// column stride; `mode` is [`abi::PAIR_EPILOGUE_NONE`] (nothing) or
/// [`abi::PAIR_EPILOGUE_GATE`], uniform over the launch.
pub struct GateEpilogue {
    pub mode: u32,
    /// 0: alpha → gate; 1: beta_raw → beta (the block's grid y).
    pub product: u32,
    pub dt_bias: *const f32,
    pub ssm_a: *const f32,
    pub out: *mut f32,
    pub out_col: usize,
}

impl Epilogue for GateEpilogue {
    const ACTIVE: bool = true;

    /// Product 0: `gate = MUL(SOFTPLUS(ADD(alpha, dt_bias[row])), ssm_a[row])`; product 1:
    /// `beta = SIGMOID(beta_raw)` — the unary and binary kernels' `apply` bodies with their
    /// operand order (ADD: the product first; MUL: the softplus first), on the f32 the pair
    /// just stored (the unfused ops read those very bits back), so every result has the unfused
    /// chain's bits. dt_bias and ssm_a are read-only inputs (`ld.global.nc`).
    #[inline(always)]
    unsafe fn apply(&self, row: usize, j: usize, sum: f32) {
        // SAFETY: forwarded to the caller (row < H_v, element (row, j) of the gate / beta view).
        unsafe { self.apply_with(row, j, sum, self.operands(row)) }
    }
}

impl GateEpilogue {
    /// Row `row`'s (dt_bias, ssm_a) for product 0 (the gate), unread (+0, +0) otherwise or
    /// without the gate epilogue.
    ///
    /// # Safety
    /// With the gate epilogue and product 0, row < H_v: inside the [H_v] dt_bias and ssm_a
    /// views, never written during the launch (host: disjoint from every output).
    #[inline(always)]
    pub(crate) unsafe fn operands(&self, row: usize) -> (f32, f32) {
        if self.mode != abi::PAIR_EPILOGUE_GATE || self.product != 0 {
            return (0.0, 0.0);
        }
        // SAFETY: forwarded to the caller.
        unsafe { (load_nc_f32(self.dt_bias.add(row)), load_nc_f32(self.ssm_a.add(row))) }
    }

    /// [`Epilogue::apply`] with row `row`'s [`GateEpilogue::operands`] already loaded.
    ///
    /// # Safety
    /// Element (row, j) of the gate / beta view (host-validated), written by this thread only;
    /// `(bias, a)` = `self.operands(row)`.
    #[inline(always)]
    pub(crate) unsafe fn apply_with(&self, row: usize, j: usize, sum: f32, (bias, a): (f32, f32)) {
        use crate::abi::{binary_kind, unary_kind};
        if self.mode != abi::PAIR_EPILOGUE_GATE {
            return;
        }
        let v = if self.product == 0 {
            let biased = crate::binary::apply::<{ binary_kind::ADD }>(sum, bias);
            crate::binary::apply::<{ binary_kind::MUL }>(crate::unary::apply::<{ unary_kind::SOFTPLUS }>(biased), a)
        } else {
            crate::unary::apply::<{ unary_kind::SIGMOID }>(sum)
        };
        // SAFETY: forwarded to the caller.
        unsafe { *self.out.add(j * self.out_col + row) = v };
    }
}

/// One block computes row `row` of every column of one product: `w_row_ptr` is the row's first
/// pair, `dst` the product's dst (column j at `j·dst_col`); the writer of each element then
/// runs `epilogue` on it.
///
/// # Safety
/// See the module docs: the host validates every view and launches with ggml's block size and
/// [`MUL_MAT_VEC_SHARED_BYTES`](crate::abi::MUL_MAT_VEC_SHARED_BYTES) of dynamic shared memory;
/// every thread of the block calls it.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn mul_mat_vec_row<A: Accumulation, const NCOLS: usize, E: Epilogue>(
    w_row_ptr: *const A::Pair,
    input: *const f32,
    in_col: usize,
    dst: *mut f32,
    dst_col: usize,
    row: usize,
    n_pairs: u32,
    epilogue: &E,
) {
    let (tid, block) = (thread_idx_x(), block_dim_x());
    // SAFETY: every column of the input is pair-aligned (host), so `in_col / 2` is exact, and
    // holds n_pairs pairs; the row holds n_pairs pairs.
    let partials = unsafe { thread_partials::<A, NCOLS>(w_row_ptr, input as *const F32Pair, in_col / 2, n_pairs, tid, block) };
    // SAFETY: every thread calls it once; the launch requested the buffer.
    let sums = unsafe { block_reduce::<NCOLS>(partials, shared::base(), tid, block) };
    let mut j = 0;
    while j < NCOLS {
        if tid as usize == j {
            // SAFETY: thread j < NCOLS is in warp 0 and holds column j's sum; the host checked
            // that dst element (row, j) lies inside the dst view.
            unsafe { *dst.add(j * dst_col + row) = sums[j] };
        }
        j += 1;
    }
    if E::ACTIVE {
        // Thread j < NCOLS takes column j's sum by selects (no runtime index into `sums`, which
        // would put it in local memory), then runs the epilogue on it.
        let mut mine = 0.0f32;
        let mut j = 0;
        while j < NCOLS {
            if tid as usize == j {
                mine = sums[j];
            }
            j += 1;
        }
        if (tid as usize) < NCOLS {
            // SAFETY: element (row, tid) of the epilogue's views (host-validated); thread
            // tid < NCOLS is in warp 0 and holds column tid's sum.
            unsafe { epilogue.apply(row, tid as usize, mine) };
        }
    }
}

/// One block computes row `%ctaid.x` of column group `%ctaid.z` of the product `p` describes.
///
/// # Safety
/// See the module docs: the host validates every view before launching one block per row and
/// column group (gridDim.z · NCOLS columns).
#[inline(always)]
unsafe fn mul_mat_vec<A: Accumulation, const NCOLS: usize>(p: &abi::MulMatVecParams) {
    let row = block_idx_x() as usize;
    let weight = p.weight as usize as *const A::Elem;
    // SAFETY: the host checked that row `row` (< rows = gridDim.x) lies inside the weight view
    // and starts pair-aligned.
    let w = unsafe { weight.add(row * p.w_row as usize) } as *const A::Pair;
    let (in_col, dst_col) = (p.in_col as usize, p.dst_col as usize);
    let g = block_idx_z() as usize;
    let (input, dst) = (p.input as usize as *const f32, p.dst as usize as *mut f32);
    // SAFETY: the host launches gridDim.z = ncols / NCOLS groups: columns g·NCOLS … of the
    // input and dst views exist.
    let (input, dst) = unsafe { (input.add(g * NCOLS * in_col), dst.add(g * NCOLS * dst_col)) };
    // SAFETY: forwarded from the launch contract.
    unsafe { mul_mat_vec_row::<A, NCOLS, NoEpilogue>(w, input, in_col, dst, dst_col, row, p.n_pairs, &NoEpilogue) }
}

/// MUL_MAT_VEC_PAIR (and MUL_MAT_VEC_PAIR_GATE): block (x, y, z) computes row x of product y
/// (0: the `_0` fields of `p.pair`, 1: the `_1` fields) for column group z, with the unfused
/// kernel's body; with `p.epilogue` = [`abi::PAIR_EPILOGUE_GATE`] the writer of each element
/// also runs the gate path on it ([`GateEpilogue`]).
///
/// # Safety
/// See the module docs, for both products; grid (rows, 2, ncols / NCOLS); with the gate
/// epilogue, the host validated its views for rows × ncols and their disjointness from
/// everything else.
#[inline(always)]
unsafe fn mul_mat_vec_pair<A: Accumulation, const NCOLS: usize>(gp: &abi::MulMatVecPairGateParams) {
    let p = &gp.pair;
    let row = block_idx_x() as usize;
    let product = block_idx_y();
    // Field selects, no indexing: the parameter struct stays in the parameter space.
    let (weight, w_row, dst, dst_col) =
        if product == 0 { (p.weight_0, p.w_row_0, p.dst_0, p.dst_col_0) } else { (p.weight_1, p.w_row_1, p.dst_1, p.dst_col_1) };
    let weight = weight as usize as *const A::Elem;
    // SAFETY: as `mul_mat_vec`, for the selected product.
    let w = unsafe { weight.add(row * w_row as usize) } as *const A::Pair;
    let (in_col, dst_col) = (p.in_col as usize, dst_col as usize);
    let g = block_idx_z() as usize;
    let (input, dst) = (p.input as usize as *const f32, dst as usize as *mut f32);
    // SAFETY: the host launches gridDim.z = ncols / NCOLS groups: columns g·NCOLS … of the
    // input and dst views exist.
    let (input, dst) = unsafe { (input.add(g * NCOLS * in_col), dst.add(g * NCOLS * dst_col)) };
    let (out, out_col) = if product == 0 { (gp.gate, gp.gate_col) } else { (gp.beta, gp.beta_col) };
    let out_col = out_col as usize;
    let epilogue = GateEpilogue {
        mode: gp.epilogue,
        product,
        dt_bias: gp.dt_bias as usize as *const f32,
        ssm_a: gp.ssm_a as usize as *const f32,
        // Column group g of gate / beta; dereferenced only in GATE mode, where the host
        // validated the view (hence wrapping: a zero address in NONE mode is never used).
        out: (out as usize as *mut f32).wrapping_add(g * NCOLS * out_col),
        out_col,
    };
    // SAFETY: forwarded from the launch contract.
    unsafe { mul_mat_vec_row::<A, NCOLS, GateEpilogue>(w, input, in_col, dst, dst_col, row, p.n_pairs, &epilogue) }
}

/// [layer-step] Row `row` of product `product` (0: alpha → gate, 1: beta_raw → beta) of the
/// pair-gate `gp`, for the [`abi::GDN_LAYER_STEP_COLS`] columns `first_col`, `first_col` + 1
/// (those below `end_col`), computed by a 128-thread block exactly as a `mul_mat_vec_pair_*`
/// block of `block` threads (ggml's block size for E) computes them: virtual thread v <
/// `block` takes the pairs v, v + block, … ([`thread_partials_of`], the same loop and
/// accumulation), real thread `tid` runs virtual threads `tid` and `tid + 128`,
/// [`block_reduce_halves`] reduces in ggml's order, and thread j writes element
/// (row, `first_col` + j) and runs [`GateEpilogue::apply`] on the register it stored, as the
/// pair's block does. A column's sums do not depend on which other columns share its block
/// (spec §2.9: each column's loop, butterflies and block sum are its own), so any split of the
/// n_t columns gives every element ggml's bits; a column ≥ `end_col` reads column `end_col` − 1
/// again and its sums are dropped. [seq-batch] The batched step's one-row items pass the end of
/// the item's columns (the columns of other items are theirs to write).
///
/// # Safety
/// All 128 threads of the block call it together; `gp` is a valid MUL_MAT_VEC_PAIR_GATE (the
/// host validated both products for at least `end_col` columns, `first_col` < `end_col`,
/// `row` < their rows, and the gate views) whose inputs nobody writes during the launch;
/// `area` is the shared address (8-byte aligned) of [`abi::MUL_MAT_VEC_SHARED_BYTES`] +
/// [`abi::GDN_LAYER_STEP_ROW_STAGE_BYTES`] bytes that no other code accesses until every thread
/// has returned.
#[inline(always)]
pub(crate) unsafe fn pair_gate_row_halves<A: Accumulation>(
    gp: &abi::MulMatVecPairGateParams,
    product: u32,
    row: usize,
    first_col: usize,
    end_col: usize,
    block: u32,
    area: u32,
) {
    const NCOLS: usize = abi::GDN_LAYER_STEP_COLS;
    let p = &gp.pair;
    let tid = thread_idx_x();
    // Field selects, no indexing: the parameter struct stays in the parameter space.
    let (weight, w_row, dst, dst_col) =
        if product == 0 { (p.weight_0, p.w_row_0, p.dst_0, p.dst_col_0) } else { (p.weight_1, p.w_row_1, p.dst_1, p.dst_col_1) };
    let weight = weight as usize as *const A::Elem;
    // SAFETY: the host checked that row `row` lies inside the weight view and starts pair-aligned.
    let w = unsafe { weight.add(row * w_row as usize) } as *const A::Pair;
    let input = p.input as usize as *const F32Pair;
    // Input columns are pair-aligned (host), so in_col / 2 is exact.
    let in_col = p.in_col as usize / 2;
    let mut cols = [input; NCOLS];
    let mut j = 0;
    while j < NCOLS {
        let c = if first_col + j < end_col { first_col + j } else { end_col - 1 };
        // SAFETY: column c < end_col of the validated input view.
        cols[j] = unsafe { input.add(c * in_col) };
        j += 1;
    }
    // [speed] The gate operands of this thread's element, loaded before the products (pure
    // loads moved: dt_bias and ssm_a are read-only inputs), so their round trip overlaps the
    // products' instead of following the reduction.
    let (out, out_col) = if product == 0 { (gp.gate, gp.gate_col) } else { (gp.beta, gp.beta_col) };
    let epilogue = GateEpilogue {
        mode: gp.epilogue,
        product,
        dt_bias: gp.dt_bias as usize as *const f32,
        ssm_a: gp.ssm_a as usize as *const f32,
        out: out as usize as *mut f32,
        out_col: out_col as usize,
    };
    // SAFETY: row < H_v (caller), read-only views (host).
    let operands =
        if (tid as usize) < NCOLS && first_col + (tid as usize) < end_col { unsafe { epilogue.operands(row) } } else { (0.0, 0.0) };
    // SAFETY: forwarded from the caller for virtual threads tid and tid + 128 below `block`;
    // the staging area follows the reduction buffer inside the caller's area.
    let (low, high) = unsafe { thread_partials_halves::<A, NCOLS>(w, &cols, p.n_pairs, tid, block, area + abi::MUL_MAT_VEC_SHARED_BYTES) };
    // SAFETY: every thread calls it once per item (caller); the buffer is the area's first bytes.
    let sums = unsafe { block_reduce_halves::<NCOLS>(low, high, area, tid, block) };
    let dst = dst as usize as *mut f32;
    // Thread j < NCOLS takes column j's sum by selects (no runtime index into `sums`).
    let mut mine = 0.0f32;
    let mut j = 0;
    while j < NCOLS {
        if tid as usize == j {
            mine = sums[j];
        }
        j += 1;
    }
    let col = first_col + tid as usize;
    if (tid as usize) < NCOLS && col < end_col {
        // SAFETY: thread tid < NCOLS is in warp 0 and holds column first_col + tid's sum;
        // element (row, col) lies inside the dst, gate and beta views (host-validated).
        unsafe {
            *dst.add(col * dst_col as usize + row) = mine;
            epilogue.apply_with(row, col, mine, operands);
        }
    }
}

/// [seq-batch] Rows of one batched mat-vec item: value heads `first_head … + BATCH_ROW_HEADS − 1`
/// of both products, row rr = 2·(head − first_head) + product.
const TILE_ROWS: usize = 2 * abi::BATCH_ROW_HEADS as usize;
/// [seq-batch] Columns of one batched mat-vec item.
const TILE_COLS: usize = abi::BATCH_ROW_COLS as usize;

/// [seq-batch] One virtual thread's partial sums of the [`TILE_ROWS`] × [`TILE_COLS`] products of a
/// batched mat-vec item (value j = rr·TILE_COLS + c): for each (row, column) exactly
/// [`thread_partials_of`]'s per-thread loop — the pairs v, v + block, … < n_pairs in increasing
/// order, [`Accumulation::step`] from [`Accumulation::ZERO`] — with +0 for a virtual thread at or
/// above `block` or without pairs. [speed] The next iteration's operands are loaded before the
/// current one accumulates (pure loads moved), and every operand is loaded once per item and
/// iteration, shared by the products that need it: a weight pair by the item's columns, a column
/// pair by its rows.
///
/// # Safety
/// `rows[rr]` must point to `n_pairs` readable, aligned pairs and every `cols[c]` to `n_pairs`
/// readable, aligned [`F32Pair`]s, none of them written during the launch.
#[inline(always)]
unsafe fn tile_partials<A: Accumulation>(
    rows: &[*const A::Pair; TILE_ROWS],
    cols: &[*const F32Pair; TILE_COLS],
    n_pairs: u32,
    v: u32,
    block: u32,
) -> [f32; TILE_ROWS * TILE_COLS] {
    let mut acc = [A::ZERO; TILE_ROWS * TILE_COLS];
    if v < block && v < n_pairs {
        let load = |p: u32| {
            let mut x = [A::NO_PAIR; TILE_ROWS];
            let mut y = [F32Pair::ZERO; TILE_COLS];
            let mut rr = 0;
            while rr < TILE_ROWS {
                // SAFETY: p < n_pairs, forwarded to the caller.
                x[rr] = unsafe { A::load(rows[rr].add(p as usize)) };
                rr += 1;
            }
            let mut c = 0;
            while c < TILE_COLS {
                // SAFETY: as above.
                y[c] = unsafe { F32Pair::load(cols[c].add(p as usize)) };
                c += 1;
            }
            (x, y)
        };
        let mut p = v;
        let mut cur = load(p);
        loop {
            let next_p = p + block;
            let more = next_p < n_pairs;
            let next = if more { load(next_p) } else { cur };
            let (x, y) = cur;
            // Each column's pair in the form every row's step takes (converted once, not per row).
            let mut yc = [A::column(F32Pair::ZERO); TILE_COLS];
            let mut c = 0;
            while c < TILE_COLS {
                yc[c] = A::column(y[c]);
                c += 1;
            }
            let mut rr = 0;
            while rr < TILE_ROWS {
                let mut c = 0;
                while c < TILE_COLS {
                    acc[rr * TILE_COLS + c] = A::step_column(acc[rr * TILE_COLS + c], x[rr], yc[c]);
                    c += 1;
                }
                rr += 1;
            }
            if !more {
                break;
            }
            cur = next;
            p = next_p;
        }
    }
    let mut out = [0.0f32; TILE_ROWS * TILE_COLS];
    // Written out (not a loop): a partly unrolled loop over the values would keep `acc` and
    // `out` in local memory (the half2 form's `finish` is long enough for that).
    each_value!(j => {
        out[j] = A::finish(acc[j]);
    });
    out
}

/// [seq-batch] [speed] One warp's operand ring for a batched mat-vec item: the stream of its
/// virtual warps' iterations — virtual warp `warp` (the real warp's low virtual threads) at
/// k = 0 … n_low − 1, then virtual warp `warp` + 4 (the high ones) — whose operands (the
/// [`TILE_ROWS`] weight pairs and [`TILE_COLS`] column pairs of the iteration's 32 pairs, one
/// per lane) are copied into shared memory with 16-byte `cp.async` copies, `depth` − 1 stages
/// ahead of the one that accumulates. No registers hold operands in flight, so a lane waits for
/// one memory round trip per `depth` − 1 iterations instead of one per iteration, and the
/// high virtual threads' copies start while the low ones still accumulate.
///
/// Stage layout (`stage_bytes`): weight row rr's 32 pairs at `rr · 32 · PB` (PB = the pair's
/// bytes), then column c's 32 pairs at `TILE_ROWS · 32 · PB + 256 · c`, each as in global memory
/// (pair `p0 + lane` at lane · its size: conflict-free shared loads). Every lane copies 16-byte
/// chunks q = lane, lane + 32, … of the stage (a warp's copies are one contiguous run), so a
/// lane reads pairs other lanes copied: each lane waits for its own copies
/// ([`shared::wait_async_groups`]) and the warp then meets ([`sync_warp`]), which also tells every
/// lane that the others finished reading the previous stage, whose slot it refills next.
struct TileRing {
    /// This lane's weight chunks m = 0 … (4 for F32 pairs, 2 for 16-bit ones): the global
    /// address of chunk q = lane + 32m at pair 0 (row q / (2·PB), byte 16·(q mod 2·PB) of it).
    wsrc: [*const u8; 4],
    /// This lane's column chunks m = 0, 1: chunk q = lane + 32m at pair 0 (column q / 16, byte
    /// 16·(q mod 16) of it).
    csrc: [*const u8; 2],
    /// Shared address of the warp's ring (slot 0).
    ring: u32,
    lane: u32,
    warp: u32,
    block: u32,
    /// Iterations of virtual warp `warp`, and of both virtual warps.
    n_low: u32,
    n_all: u32,
}

/// Whether [`TileRing`] can run a batched item: 16-byte aligned rows and columns, and whole
/// 32-pair runs (n_pairs a multiple of 32, so that a virtual warp's iteration holds a pair for
/// every lane or for none and no chunk reads past a row). Block-uniform.
#[inline(always)]
fn tile_ring_fits<A: Accumulation>(rows: &[*const A::Pair; TILE_ROWS], cols: &[*const F32Pair; TILE_COLS], n_pairs: u32) -> bool {
    let mut bits = n_pairs as usize % 32;
    let mut rr = 0;
    while rr < TILE_ROWS {
        bits |= rows[rr] as usize % 16;
        rr += 1;
    }
    let mut c = 0;
    while c < TILE_COLS {
        bits |= cols[c] as usize % 16;
        c += 1;
    }
    bits == 0
}

impl TileRing {
    /// Bytes of one weight pair (8 or 4).
    #[inline(always)]
    const fn pair_bytes<A: Accumulation>() -> u32 {
        core::mem::size_of::<A::Pair>() as u32
    }

    /// Bytes of one stage: an iteration's operands for the warp's 32 lanes.
    #[inline(always)]
    const fn stage_bytes<A: Accumulation>() -> u32 {
        TILE_ROWS as u32 * 32 * Self::pair_bytes::<A>() + TILE_COLS as u32 * 256
    }

    /// Stages in the ring ([`abi::BATCH_ROW_RING_DEPTH`], for every weight type: a deeper ring
    /// of 16-bit pairs, which the bytes would allow, spills 8 bytes at the bf16 and f16/f32-acc
    /// d_conv 5 entries — its prologue's copies, written out, hold their addresses at once).
    #[inline(always)]
    const fn depth<A: Accumulation>() -> u32 {
        abi::BATCH_ROW_RING_DEPTH
    }

    /// The ring of this lane of warp `warp` for an item of rows `rows` and columns `cols`
    /// (their first pairs), n_pairs pairs and `block` virtual threads; `ring` is the warp's
    /// [`abi::BATCH_ROW_RING_WARP_BYTES`], 16-byte aligned. Starts the first `depth` − 1 stages'
    /// copies. With `REAL_WARPS` = 4 (128 threads) the stream is virtual warps `warp` and
    /// `warp` + 4; with 8 (256 threads) virtual warp `warp` alone.
    ///
    /// # Safety
    /// All 32 lanes of the warp call it together; [`tile_ring_fits`] holds; `rows[rr]` and
    /// `cols[c]` point to `n_pairs` readable pairs nothing writes during the launch; nothing else
    /// reads or writes `ring` until the warp's last [`TileRing::partials`] returned; `block` a
    /// multiple of 32, at most 256.
    #[inline(always)]
    unsafe fn start<A: Accumulation, const REAL_WARPS: u32>(
        rows: &[*const A::Pair; TILE_ROWS],
        cols: &[*const F32Pair; TILE_COLS],
        n_pairs: u32,
        block: u32,
        ring: u32,
        warp: u32,
        lane: u32,
    ) -> TileRing {
        const {
            assert!(abi::BATCH_ROW_RING_DEPTH >= 2 && TILE_COLS * 16 == 64);
            assert!(Self::depth::<A>() * Self::stage_bytes::<A>() <= abi::BATCH_ROW_RING_WARP_BYTES);
        };
        let pb = Self::pair_bytes::<A>();
        // Iterations of virtual warp vw: k with 32·vw + k·block < n_pairs (none if vw has no threads).
        let iterations = |vw: u32| if 32 * vw < block && 32 * vw < n_pairs { (n_pairs - 32 * vw).div_ceil(block) } else { 0 };
        // With eight real warps each runs its own virtual warp alone (no high half).
        let (n_low, n_high) = (iterations(warp), if REAL_WARPS == 4 { iterations(warp + 4) } else { 0 });
        let mut wsrc = [core::ptr::null::<u8>(); 4];
        let mut m = 0;
        while m < (TILE_ROWS as u32 * pb / 16) as usize {
            let q = lane + 32 * m as u32;
            let (row, chunk) = (q / (2 * pb), q % (2 * pb));
            // Row `row` by selects (no runtime index into `rows`).
            let mut rr = 0;
            while rr < TILE_ROWS {
                if rr as u32 == row {
                    wsrc[m] = rows[rr] as *const u8;
                }
                rr += 1;
            }
            // Byte 16·chunk < 32·PB of the row's first run: inside it (n_pairs ≥ 32 when an
            // iteration exists; addresses only formed, read by `issue` for an existing one).
            wsrc[m] = wsrc[m].wrapping_add(16 * chunk as usize);
            m += 1;
        }
        let mut csrc = [core::ptr::null::<u8>(); 2];
        let mut m = 0;
        while m < 2 {
            let q = lane + 32 * m as u32;
            let (col, chunk) = (q / 16, q % 16);
            let mut c = 0;
            while c < TILE_COLS {
                if c as u32 == col {
                    csrc[m] = cols[c] as *const u8;
                }
                c += 1;
            }
            csrc[m] = csrc[m].wrapping_add(16 * chunk as usize);
            m += 1;
        }
        let me = TileRing { wsrc, csrc, ring, lane, warp, block, n_low, n_all: n_low + n_high };
        let mut j = 0;
        while j + 1 < Self::depth::<A>() {
            // SAFETY: forwarded from the caller; stage j's slot is untouched so far.
            unsafe { me.issue::<A>(j) };
            j += 1;
        }
        me
    }

    /// Starts this lane's copies of stream iteration `j` (none past the stream's end) into slot
    /// j mod depth, and closes them into one group (an empty one past the end, so that every
    /// call adds one group and [`TileRing::partials`] can count them).
    ///
    /// # Safety
    /// As [`TileRing::start`]; no lane of the warp reads the slot until it waited for the copies
    /// and met the warp.
    #[inline(always)]
    unsafe fn issue<A: Accumulation>(&self, j: u32) {
        let pb = Self::pair_bytes::<A>();
        if j < self.n_all {
            let (half, k) = if j < self.n_low { (0, j) } else { (1, j - self.n_low) };
            // The iteration's first pair: virtual thread 32·(warp + 4·half) + lane at k.
            let p0 = 32 * (self.warp + 4 * half) + k * self.block;
            let slot = self.ring + (j % Self::depth::<A>()) * Self::stage_bytes::<A>();
            let mut m = 0;
            while m < (TILE_ROWS as u32 * pb / 16) as usize {
                // SAFETY: p0 + 32 ≤ n_pairs (n_pairs a multiple of 32, p0 < n_pairs): the chunk's
                // pairs lie inside the row; 16-byte aligned (row and p0·PB); the slot's chunk is
                // the ring's, 16-byte aligned (caller).
                unsafe { shared::copy_async_16(slot + 16 * (self.lane + 32 * m as u32), self.wsrc[m].add((p0 * pb) as usize)) };
                m += 1;
            }
            let mut m = 0;
            while m < 2 {
                // SAFETY: as above, for the column's pairs.
                unsafe {
                    shared::copy_async_16(
                        slot + TILE_ROWS as u32 * 32 * pb + 16 * (self.lane + 32 * m as u32),
                        self.csrc[m].add(8 * p0 as usize),
                    )
                };
                m += 1;
            }
        }
        shared::commit_async_copies();
    }

    /// Waits until at most depth − 2 of this lane's newest copy groups are in flight.
    #[inline(always)]
    fn wait<A: Accumulation>() {
        shared::wait_async_groups::<{ abi::BATCH_ROW_RING_DEPTH - 2 }>()
    }

    /// The partial sums of stream iterations `first` … `first + count − 1` — one virtual warp's
    /// iterations, all of them — as [`tile_partials`] computes them for this lane's virtual
    /// thread: per iteration (k increasing) each (row, column)'s [`Accumulation::step_column`]
    /// from [`Accumulation::ZERO`], on the same pairs. Before iteration j accumulates, the copies
    /// of iteration j + depth − 1 start, into the slot of iteration j − 1.
    ///
    /// # Safety
    /// All 32 lanes of the warp call it together, the calls taking the stream's iterations in
    /// order from 0 (after [`TileRing::start`]).
    #[inline(always)]
    unsafe fn partials<A: Accumulation>(&self, first: u32, count: u32) -> [f32; TILE_ROWS * TILE_COLS] {
        let pb = Self::pair_bytes::<A>();
        let mut acc = [A::ZERO; TILE_ROWS * TILE_COLS];
        let mut j = first;
        while j < first + count {
            // Groups committed so far: depth − 1 + j, one per iteration issued; with depth − 2
            // left in flight, those of iterations 0 … j have landed (and any older group).
            Self::wait::<A>();
            // SAFETY: every lane is here (caller); every lane's copies of iteration j are now
            // visible to all, and every lane finished reading iteration j − 1's slot.
            unsafe { sync_warp() };
            // SAFETY: forwarded; the slot of iteration j + depth − 1 is iteration j − 1's, which
            // no lane reads any more (the barrier above).
            unsafe { self.issue::<A>(j + Self::depth::<A>() - 1) };
            let slot = self.ring + (j % Self::depth::<A>()) * Self::stage_bytes::<A>();
            let mut x = [A::NO_PAIR; TILE_ROWS];
            let mut rr = 0;
            while rr < TILE_ROWS {
                // SAFETY: landed and visible (above); this lane's pair of row rr.
                x[rr] = unsafe { A::Pair::load_staged(slot + (rr as u32 * 32 + self.lane) * pb) };
                rr += 1;
            }
            // Each column's pair in the form every row's step takes (converted once, not per row).
            let mut yc = [A::column(F32Pair::ZERO); TILE_COLS];
            let mut c = 0;
            while c < TILE_COLS {
                // SAFETY: as above, this lane's pair of column c.
                let y = unsafe { F32Pair::load_staged(slot + TILE_ROWS as u32 * 32 * pb + 256 * c as u32 + 8 * self.lane) };
                yc[c] = A::column(y);
                c += 1;
            }
            let mut rr = 0;
            while rr < TILE_ROWS {
                let mut c = 0;
                while c < TILE_COLS {
                    acc[rr * TILE_COLS + c] = A::step_column(acc[rr * TILE_COLS + c], x[rr], yc[c]);
                    c += 1;
                }
                rr += 1;
            }
            j += 1;
        }
        let mut out = [0.0f32; TILE_ROWS * TILE_COLS];
        // Written out, as in `tile_partials`.
        each_value!(j => {
            out[j] = A::finish(acc[j]);
        });
        out
    }
}

/// `$body` once for each `$j` = 0 … [`abi::BATCH_ROW_VALUES`]−1, in order, as straight-line code.
macro_rules! each_value {
    ($j:ident => $body:block) => {{
        each_value!(@ $j $body 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31);
    }};
    (@ $j:ident $body:block $($n:literal)*) => {$({
        let $j: usize = $n;
        $body
    })*};
}
use each_value;
const _: () = assert!(abi::BATCH_ROW_VALUES == 32, "each_value! writes out 32 values");

/// [seq-batch] One batched mat-vec item of GDN_LAYER_STEP's first phase: rows of value heads
/// `first_head … first_head + n_heads − 1` (≤ [`abi::BATCH_ROW_HEADS`]) of both products (alpha
/// with the gate epilogue, beta_raw with SIGMOID) for the token columns `first_col … first_col +
/// n_cols − 1` (≤ [`abi::BATCH_ROW_COLS`]), each element computed by a block of `REAL_WARPS`
/// warps (4: GDN_LAYER_STEP's block; 8: the tiled pair's) exactly as a `mul_mat_vec_pair_*` block
/// of `block` threads (ggml's block size for E) computes it: virtual thread v < `block` runs
/// [`thread_partials_of`]'s loop for every element of the item ([`tile_partials`]); real thread
/// `tid` runs virtual threads `tid`, then (with four real warps) `tid + 128`; each
/// virtual warp's butterfly of each element, then — with more than one virtual warp — the
/// butterfly over `buf[element][lane]` (lanes below `block / 32`, +0 above) of [`block_reduce`],
/// all as 32-value reduce-scatters ([`warp_sum_scattered_32`]: each value's butterfly tree
/// unchanged); lane j of warp 0 then holds element j's sum, writes it and runs
/// [`GateEpilogue::apply_with`] on the register it stored, as the pair's writer thread does. A
/// column's sums do not depend on which other columns or rows share its block (spec §2.9), so
/// every element has ggml's bits. Rows past `n_heads` and columns past `n_cols` read row / column
/// 0 of the item again and their sums are dropped.
///
/// # Safety
/// All 32·`REAL_WARPS` threads of the block call it together; `gp` is a valid MUL_MAT_VEC_PAIR_GATE (the host
/// validated both products for the launch's columns, every head < their rows, the gate views)
/// whose inputs nobody writes during the launch; `first_head + n_heads` ≤ H_v, `first_col +
/// n_cols` ≤ the products' columns, 1 ≤ `n_heads`, 1 ≤ `n_cols`; `buf` is the shared address of
/// [`abi::BATCH_ROW_REDUCE_BYTES`] and `ring` the 16-byte aligned shared address of `REAL_WARPS`
/// × [`abi::BATCH_ROW_RING_WARP_BYTES`] (disjoint from `buf`) that no other code accesses between the
/// block barrier before this call and the one after it, and no `cp.async` copy of this block
/// targets then.
#[inline(always)]
pub(crate) unsafe fn pair_gate_tile<A: Accumulation, const REAL_WARPS: u32>(
    gp: &abi::MulMatVecPairGateParams,
    first_head: u32,
    n_heads: u32,
    first_col: u32,
    n_cols: u32,
    block: u32,
    buf: u32,
    ring: u32,
) {
    const { assert!(REAL_WARPS == 4 || REAL_WARPS == 8) };
    let p = &gp.pair;
    let tid = thread_idx_x();
    let (lane, warp) = (tid % 32, tid / 32);
    // Virtual threads a real thread runs: tid and tid + 128 with four real warps, tid alone with
    // eight (ggml's blocks have at most 256 threads).
    let halves: u32 = if REAL_WARPS == 4 { 2 } else { 1 };
    let weight = |product: usize| if product == 0 { (p.weight_0, p.w_row_0) } else { (p.weight_1, p.w_row_1) };
    let mut rows = [core::ptr::null::<A::Pair>(); TILE_ROWS];
    let mut rr = 0;
    while rr < TILE_ROWS {
        let hh = (rr / 2) as u32;
        let head = first_head + if hh < n_heads { hh } else { 0 };
        let (w, w_row) = weight(rr % 2);
        // SAFETY: head < H_v: a validated, pair-aligned weight row (caller).
        rows[rr] = unsafe { (w as usize as *const A::Elem).add(head as usize * w_row as usize) } as *const A::Pair;
        rr += 1;
    }
    let input = p.input as usize as *const F32Pair;
    // Input columns are pair-aligned (host), so in_col / 2 is exact.
    let in_col = p.in_col as usize / 2;
    let mut cols = [input; TILE_COLS];
    let mut c = 0;
    while c < TILE_COLS {
        let col = first_col + if (c as u32) < n_cols { c as u32 } else { 0 };
        // SAFETY: column col < the validated columns of the input view.
        cols[c] = unsafe { input.add(col as usize * in_col) };
        c += 1;
    }
    // Lane j of warp 0 ends up with element j = rr·TILE_COLS + c: its gate operands, loaded
    // before the products (read-only inputs) so their round trip overlaps them.
    let (rr, c) = ((lane as usize) / TILE_COLS, (lane as usize) % TILE_COLS);
    let (hh, product) = ((rr / 2) as u32, (rr % 2) as u32);
    let mine = hh < n_heads && (c as u32) < n_cols;
    let (out, out_col) = if product == 0 { (gp.gate, gp.gate_col) } else { (gp.beta, gp.beta_col) };
    let epilogue = GateEpilogue {
        mode: gp.epilogue,
        product,
        dt_bias: gp.dt_bias as usize as *const f32,
        ssm_a: gp.ssm_a as usize as *const f32,
        out: out as usize as *mut f32,
        out_col: out_col as usize,
    };
    let (head, col) = ((first_head + hh) as usize, (first_col as usize) + c);
    // SAFETY: head < H_v for a kept element (caller), read-only views.
    let operands = if warp == 0 && mine { unsafe { epilogue.operands(head) } } else { (0.0, 0.0) };
    let slot = |j: u32, w: u32| buf + 4 * (j * MUL_MAT_VEC_MAX_WARPS + w);
    // [speed] The operands through the warp's ring where the item's rows and columns allow it
    // (block-uniform); otherwise each virtual thread's loads one iteration ahead in registers.
    // Virtual warp warp + 4·half's sums: lane j holds element j's butterfly, the block's sum
    // with one virtual warp, else stored for the cross-warp step.
    let keep = |partials: [f32; TILE_ROWS * TILE_COLS], half: u32, sum: &mut f32| {
        // SAFETY: the whole warp is here (warp-uniform callers).
        let warp_sum = unsafe { warp_sum_scattered_32(partials, lane) };
        if block <= 32 {
            // One warp: its butterfly is the block's sum (ggml skips the shared step).
            *sum = warp_sum;
        } else {
            // SAFETY: virtual warp warp + 4·half < 8: inside element lane's slots.
            unsafe { shared::store_f32(slot(lane, warp + 4 * half), warp_sum) };
        }
    };
    // Virtual threads tid (virtual warp `warp`), then tid + 128 (virtual warp warp + 4). The whole
    // virtual warp exists or none of it (`block` is a multiple of 32): the conditions are
    // warp-uniform.
    let mut sum = 0.0f32;
    // [speed] The operands through the warp's ring where the item's rows and columns allow it
    // (block-uniform); otherwise each virtual thread's loads one iteration ahead in registers.
    // Two separate loops, so that neither path's addresses stay live through the other.
    if tile_ring_fits::<A>(&rows, &cols, p.n_pairs) {
        // SAFETY: the whole warp (block-uniform condition); the ring fits (checked); validated,
        // read-only rows and columns (caller); warp `warp`'s part of the rings, which only this
        // warp touches until the barrier after the item (caller).
        let r = unsafe {
            TileRing::start::<A, REAL_WARPS>(&rows, &cols, p.n_pairs, block, ring + warp * abi::BATCH_ROW_RING_WARP_BYTES, warp, lane)
        };
        if tid - lane < block {
            // SAFETY: the whole warp; the stream's first n_low iterations (virtual warp `warp`).
            keep(unsafe { r.partials::<A>(0, r.n_low) }, 0, &mut sum);
        }
        if halves == 2 && tid + 128 - lane < block {
            // SAFETY: the whole warp; the rest of the stream (virtual warp warp + 4, which exists
            // only if the low one does).
            keep(unsafe { r.partials::<A>(r.n_low, r.n_all - r.n_low) }, 1, &mut sum);
        }
    } else {
        let mut half = 0;
        while half < halves {
            let v = tid + 128 * half;
            if v - lane < block {
                // SAFETY: forwarded from the caller (validated rows and columns, read-only).
                keep(unsafe { tile_partials::<A>(&rows, &cols, p.n_pairs, v, block) }, half, &mut sum);
            }
            half += 1;
        }
    }
    if block > 32 {
        // SAFETY: `block` is uniform, so every thread of the block reaches the barrier.
        unsafe { sync_threads() };
        if warp == 0 {
            let warps = block / 32;
            let mut vals = [0.0f32; TILE_ROWS * TILE_COLS];
            let mut j = 0;
            while j < TILE_ROWS * TILE_COLS {
                // SAFETY: slot (j, lane) for lane < warps was written before the barrier.
                vals[j] = if lane < warps { unsafe { shared::load_f32(slot(j as u32, lane)) } } else { 0.0 };
                j += 1;
            }
            // SAFETY: warp 0 is converged here.
            sum = unsafe { warp_sum_scattered_32(vals, lane) };
        }
    }
    if warp == 0 && mine {
        let (dst, dst_col) = if product == 0 { (p.dst_0, p.dst_col_0) } else { (p.dst_1, p.dst_col_1) };
        // SAFETY: element (head, col) lies inside the dst, gate and beta views (host-validated),
        // written by this thread only.
        unsafe {
            *(dst as usize as *mut f32).add(col * dst_col as usize + head) = sum;
            epilogue.apply_with(head, col, sum, operands);
        }
    }
}

macro_rules! mul_mat_vec_entries {
    ($($acc:ty => [$($name:ident, $pair:ident = $ncols:literal);*];)*) => {$($(
        /// Entry point; see the module docs.
        ///
        /// # Safety
        /// See the module docs: the host validates every view before launching.
        #[cfg(target_arch = "nvptx64")]
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(p: abi::MulMatVecParams) {
            // SAFETY: forwarded from the launch contract above.
            unsafe { mul_mat_vec::<$acc, $ncols>(&p) }
        }

        /// MUL_MAT_VEC_PAIR / MUL_MAT_VEC_PAIR_GATE entry point (`p.epilogue` picks); see the
        /// module docs.
        ///
        /// # Safety
        /// See the module docs: the host validates both products (and, with the gate
        /// epilogue, its views) before launching.
        #[cfg(target_arch = "nvptx64")]
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $pair(p: abi::MulMatVecPairGateParams) {
            // SAFETY: forwarded from the launch contract above.
            unsafe { mul_mat_vec_pair::<$acc, $ncols>(&p) }
        }
    )*)*};
}

mul_mat_vec_entries! {
    F32 => [mul_mat_vec_f32_c1, mul_mat_vec_pair_f32_c1 = 1; mul_mat_vec_f32_c2, mul_mat_vec_pair_f32_c2 = 2;
            mul_mat_vec_f32_c3, mul_mat_vec_pair_f32_c3 = 3; mul_mat_vec_f32_c4, mul_mat_vec_pair_f32_c4 = 4;
            mul_mat_vec_f32_c5, mul_mat_vec_pair_f32_c5 = 5; mul_mat_vec_f32_c6, mul_mat_vec_pair_f32_c6 = 6;
            mul_mat_vec_f32_c7, mul_mat_vec_pair_f32_c7 = 7; mul_mat_vec_f32_c8, mul_mat_vec_pair_f32_c8 = 8];
    Bf16 => [mul_mat_vec_bf16_c1, mul_mat_vec_pair_bf16_c1 = 1; mul_mat_vec_bf16_c2, mul_mat_vec_pair_bf16_c2 = 2;
             mul_mat_vec_bf16_c3, mul_mat_vec_pair_bf16_c3 = 3; mul_mat_vec_bf16_c4, mul_mat_vec_pair_bf16_c4 = 4;
             mul_mat_vec_bf16_c5, mul_mat_vec_pair_bf16_c5 = 5; mul_mat_vec_bf16_c6, mul_mat_vec_pair_bf16_c6 = 6;
             mul_mat_vec_bf16_c7, mul_mat_vec_pair_bf16_c7 = 7; mul_mat_vec_bf16_c8, mul_mat_vec_pair_bf16_c8 = 8];
    F16Half => [mul_mat_vec_f16_c1, mul_mat_vec_pair_f16_c1 = 1; mul_mat_vec_f16_c2, mul_mat_vec_pair_f16_c2 = 2;
                mul_mat_vec_f16_c3, mul_mat_vec_pair_f16_c3 = 3; mul_mat_vec_f16_c4, mul_mat_vec_pair_f16_c4 = 4;
                mul_mat_vec_f16_c5, mul_mat_vec_pair_f16_c5 = 5; mul_mat_vec_f16_c6, mul_mat_vec_pair_f16_c6 = 6;
                mul_mat_vec_f16_c7, mul_mat_vec_pair_f16_c7 = 7; mul_mat_vec_f16_c8, mul_mat_vec_pair_f16_c8 = 8];
    F16F32 => [mul_mat_vec_f16_f32acc_c1, mul_mat_vec_pair_f16_f32acc_c1 = 1; mul_mat_vec_f16_f32acc_c2, mul_mat_vec_pair_f16_f32acc_c2 = 2;
               mul_mat_vec_f16_f32acc_c3, mul_mat_vec_pair_f16_f32acc_c3 = 3; mul_mat_vec_f16_f32acc_c4, mul_mat_vec_pair_f16_f32acc_c4 = 4;
               mul_mat_vec_f16_f32acc_c5, mul_mat_vec_pair_f16_f32acc_c5 = 5; mul_mat_vec_f16_f32acc_c6, mul_mat_vec_pair_f16_f32acc_c6 = 6;
               mul_mat_vec_f16_f32acc_c7, mul_mat_vec_pair_f16_f32acc_c7 = 7; mul_mat_vec_f16_f32acc_c8, mul_mat_vec_pair_f16_f32acc_c8 = 8];
}

/// \[speed\] MUL_MAT_VEC_PAIR(_GATE) as tiles (`abi::MulMatVecPairTilesParams`): block (x, y)
/// runs [`pair_gate_tile`] for heads x·BATCH_ROW_HEADS … and columns y·BATCH_ROW_COLS … (the
/// last tile of each clipped), each element with the pair's bits, with `REAL_WARPS` warps: 4
/// (`mul_mat_vec_pair_tiles_*`, [`abi::PAIR_TILES_BLOCK`]) or 8 (`mul_mat_vec_pair_tiles_wide_*`,
/// [`abi::PAIR_TILES_WIDE_BLOCK`]).
///
/// # Safety
/// The host validated the pair (and the gate views with the epilogue on) for `n_rows` rows and
/// `n_cols` columns, the grid covers them exactly in tiles, the block has 32·`REAL_WARPS`
/// threads and that form's dynamic shared memory ([`abi::PAIR_TILES_SHARED_BYTES`],
/// [`abi::PAIR_TILES_WIDE_SHARED_BYTES`]; 16-byte aligned), and `pair_block` is ggml's block
/// size for E.
#[inline(always)]
unsafe fn pair_tiles_block<A: Accumulation, const REAL_WARPS: u32>(p: &abi::MulMatVecPairTilesParams) {
    let (first_head, first_col) = (block_idx_x() * abi::BATCH_ROW_HEADS, block_idx_y() * abi::BATCH_ROW_COLS);
    // The grid covers the rows and columns in tiles: first_head < n_rows, first_col < n_cols.
    let n_heads = if p.n_rows - first_head < abi::BATCH_ROW_HEADS { p.n_rows - first_head } else { abi::BATCH_ROW_HEADS };
    let n_cols = if p.n_cols - first_col < abi::BATCH_ROW_COLS { p.n_cols - first_col } else { abi::BATCH_ROW_COLS };
    let buf = shared::base();
    // SAFETY: forwarded from the launch contract above: heads and columns inside the validated
    // products, all the block's threads, the reduction buffer then the rings (one a warp) in
    // the block's own dynamic shared memory (no other code, no cp.async into it).
    unsafe {
        pair_gate_tile::<A, REAL_WARPS>(
            &p.gate,
            first_head,
            n_heads,
            first_col,
            n_cols,
            p.pair_block,
            buf,
            buf + abi::BATCH_ROW_REDUCE_BYTES,
        )
    }
}

macro_rules! pair_tiles_entries {
    ($($acc:ty, $warps:literal => $name:literal, $fn_name:ident, $overlap_name:literal, $overlap_fn:ident;)*) => {$(
        /// \[speed\] The tiled pair: [`pair_tiles_block`].
        ///
        /// # Safety
        /// As [`pair_tiles_block`].
        #[cfg(target_arch = "nvptx64")]
        #[unsafe(export_name = $name)]
        pub unsafe extern "ptx-kernel" fn $fn_name(p: abi::MulMatVecPairTilesParams) {
            // SAFETY: forwarded from the launch contract above.
            unsafe { pair_tiles_block::<$acc, $warps>(&p) }
        }

        /// \[overlap\] The tiled pair for programmatic dependent launch: the stream's next grid
        /// may start once every block of this one has begun ([`allow_dependent_launch`] first);
        /// the same body; then [`wait_prerequisite_grids`], so that this grid completes only after
        /// every grid before it completed, and a grid waiting for this one also waits for those
        /// (it may have run beside them).
        ///
        /// # Safety
        /// As [`pair_tiles_block`], and, launched programmatically, the host's overlap rule
        /// (`fusion::overlap`): nothing this grid touches is touched by a grid still running
        /// beside it.
        #[cfg(target_arch = "nvptx64")]
        #[unsafe(export_name = $overlap_name)]
        pub unsafe extern "ptx-kernel" fn $overlap_fn(p: abi::MulMatVecPairTilesParams) {
            // SAFETY: forwarded from the launch contract above.
            unsafe {
                allow_dependent_launch();
                pair_tiles_block::<$acc, $warps>(&p);
                wait_prerequisite_grids();
            }
        }
    )*};
}

/// \[test\] The tiled pair's entries' host twins (name, body, threads a block): the same
/// [`pair_tiles_block`] in both forms, for running the entries' source on the CPU
/// (`tests/kernel_emulation.rs`).
#[cfg(not(target_arch = "nvptx64"))]
pub const PAIR_TILES_ENTRIES_EMULATED: [(&str, unsafe fn(&abi::MulMatVecPairTilesParams), u32); 8] = [
    ("mul_mat_vec_pair_tiles_f32", pair_tiles_block::<F32, 4>, abi::PAIR_TILES_BLOCK),
    ("mul_mat_vec_pair_tiles_bf16", pair_tiles_block::<Bf16, 4>, abi::PAIR_TILES_BLOCK),
    ("mul_mat_vec_pair_tiles_f16", pair_tiles_block::<F16Half, 4>, abi::PAIR_TILES_BLOCK),
    ("mul_mat_vec_pair_tiles_f16_f32acc", pair_tiles_block::<F16F32, 4>, abi::PAIR_TILES_BLOCK),
    ("mul_mat_vec_pair_tiles_wide_f32", pair_tiles_block::<F32, 8>, abi::PAIR_TILES_WIDE_BLOCK),
    ("mul_mat_vec_pair_tiles_wide_bf16", pair_tiles_block::<Bf16, 8>, abi::PAIR_TILES_WIDE_BLOCK),
    ("mul_mat_vec_pair_tiles_wide_f16", pair_tiles_block::<F16Half, 8>, abi::PAIR_TILES_WIDE_BLOCK),
    ("mul_mat_vec_pair_tiles_wide_f16_f32acc", pair_tiles_block::<F16F32, 8>, abi::PAIR_TILES_WIDE_BLOCK),
];

pair_tiles_entries! {
    F32, 4 => "mul_mat_vec_pair_tiles_f32", mul_mat_vec_pair_tiles_f32,
        "mul_mat_vec_pair_tiles_f32_overlap", mul_mat_vec_pair_tiles_f32_overlap;
    Bf16, 4 => "mul_mat_vec_pair_tiles_bf16", mul_mat_vec_pair_tiles_bf16,
        "mul_mat_vec_pair_tiles_bf16_overlap", mul_mat_vec_pair_tiles_bf16_overlap;
    F16Half, 4 => "mul_mat_vec_pair_tiles_f16", mul_mat_vec_pair_tiles_f16,
        "mul_mat_vec_pair_tiles_f16_overlap", mul_mat_vec_pair_tiles_f16_overlap;
    F16F32, 4 => "mul_mat_vec_pair_tiles_f16_f32acc", mul_mat_vec_pair_tiles_f16_f32acc,
        "mul_mat_vec_pair_tiles_f16_f32acc_overlap", mul_mat_vec_pair_tiles_f16_f32acc_overlap;
    F32, 8 => "mul_mat_vec_pair_tiles_wide_f32", mul_mat_vec_pair_tiles_wide_f32,
        "mul_mat_vec_pair_tiles_wide_f32_overlap", mul_mat_vec_pair_tiles_wide_f32_overlap;
    Bf16, 8 => "mul_mat_vec_pair_tiles_wide_bf16", mul_mat_vec_pair_tiles_wide_bf16,
        "mul_mat_vec_pair_tiles_wide_bf16_overlap", mul_mat_vec_pair_tiles_wide_bf16_overlap;
    F16Half, 8 => "mul_mat_vec_pair_tiles_wide_f16", mul_mat_vec_pair_tiles_wide_f16,
        "mul_mat_vec_pair_tiles_wide_f16_overlap", mul_mat_vec_pair_tiles_wide_f16_overlap;
    F16F32, 8 => "mul_mat_vec_pair_tiles_wide_f16_f32acc", mul_mat_vec_pair_tiles_wide_f16_f32acc,
        "mul_mat_vec_pair_tiles_wide_f16_f32acc_overlap", mul_mat_vec_pair_tiles_wide_f16_f32acc_overlap;
}
