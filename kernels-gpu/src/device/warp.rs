//! Warp-level collectives, over the three shuffle primitives of
//! [`warp_shuffle`](super::warp_shuffle) (the only inline PTX they need).

use super::math;
pub use super::warp_shuffle::{shfl_idx, shfl_xor, sync_warp};

/// ggml's `warp_reduce_sum` (width 32): for offsets 16, 8, 4, 2, 1 every lane computes
/// `x = x + shfl_xor(x, offset)` with `add.rn.ftz`, own value first. Each step adds a
/// commutative pair, so all lanes end with the same bits (spec §2.0).
///
/// # Safety
/// All 32 lanes of the warp must call it together.
#[inline(always)]
pub unsafe fn warp_sum(mut x: f32) -> f32 {
    let mut offset = 16;
    while offset > 0 {
        // SAFETY: forwarded to the caller.
        x = math::add(x, unsafe { shfl_xor(x, offset) });
        offset >>= 1;
    }
    x
}

/// [`warp_sum`] of N independent values, interleaved step by step: for each value the same
/// `x + shfl_xor(x, offset)` sequence (offsets 16 … 1, own value first), so each result has
/// exactly [`warp_sum`]'s bits; the N butterflies' latencies overlap.
///
/// # Safety
/// All 32 lanes of the warp must call it together.
#[inline(always)]
pub unsafe fn warp_sum_each<const N: usize>(mut x: [f32; N]) -> [f32; N] {
    let mut offset = 16;
    while offset > 0 {
        let mut shuffled = [0.0f32; N];
        let mut j = 0;
        while j < N {
            // SAFETY: forwarded to the caller.
            shuffled[j] = unsafe { shfl_xor(x[j], offset) };
            j += 1;
        }
        let mut j = 0;
        while j < N {
            x[j] = math::add(x[j], shuffled[j]);
            j += 1;
        }
        offset >>= 1;
    }
    x
}

/// [layer-step] [`warp_sum`] of eight values as one reduce-scatter: returns, in lane `lane`, the
/// sum of value `(lane >> 2) & 7` — [`warp_sum`]'s bits for that value.
///
/// Why the bits are [`warp_sum`]'s: the butterfly's result is one binary tree of additions —
/// at offset o every pair of lanes (i, i ^ o) adds its two partial sums — and every lane ends
/// with the same bits because each addition is commutative (spec §2.0). Here, at offsets 16, 8
/// and 4 each lane keeps the half of its values its partner does not (the one selected by its
/// lane bit) and adds the partner's copy of it, own value first: the same additions on the same
/// operands as the butterfly's lane, for the values it keeps; offsets 2 and 1 are the butterfly
/// on the one value left. 9 shuffles and 9 additions instead of 40 and 40.
///
/// # Safety
/// All 32 lanes of the warp must call it together, `lane` being each one's lane index.
#[inline(always)]
pub unsafe fn warp_sum_eight_scattered(x: [f32; 8], lane: u32) -> f32 {
    let upper = |bit: u32| (lane >> bit) & 1 == 1;
    // Offset 16: lanes with bit 4 set keep values 4 … 7, the others 0 … 3.
    let high = upper(4);
    let mut y = [0.0f32; 4];
    let mut m = 0;
    while m < 4 {
        let (keep, send) = if high { (x[4 + m], x[m]) } else { (x[m], x[4 + m]) };
        // SAFETY: forwarded to the caller (whole warp).
        y[m] = math::add(keep, unsafe { shfl_xor(send, 16) });
        m += 1;
    }
    // Offset 8: y[m] is value 4·b4 + m; bit 3 picks the upper pair.
    let high = upper(3);
    let mut z = [0.0f32; 2];
    let mut m = 0;
    while m < 2 {
        let (keep, send) = if high { (y[2 + m], y[m]) } else { (y[m], y[2 + m]) };
        // SAFETY: as above.
        z[m] = math::add(keep, unsafe { shfl_xor(send, 8) });
        m += 1;
    }
    // Offset 4: z[m] is value 4·b4 + 2·b3 + m; bit 2 picks one.
    let (keep, send) = if upper(2) { (z[1], z[0]) } else { (z[0], z[1]) };
    // SAFETY: as above.
    let mut w = math::add(keep, unsafe { shfl_xor(send, 4) });
    // SAFETY: as above.
    w = math::add(w, unsafe { shfl_xor(w, 2) });
    // SAFETY: as above.
    math::add(w, unsafe { shfl_xor(w, 1) })
}

/// [seq-batch] [`warp_sum`] of sixteen values as one reduce-scatter: returns, in lane `lane`, the sum
/// of value `(lane >> 1) & 15` — [`warp_sum`]'s bits for that value (the argument of
/// [`warp_sum_eight_scattered`]: at offsets 16, 8, 4 and 2 each lane keeps the half of its values
/// selected by its lane bit and adds its partner's copy, own value first; offset 1 is the
/// butterfly on the one value left). 16 shuffles and 16 additions instead of 80 and 80.
///
/// # Safety
/// All 32 lanes of the warp must call it together, `lane` being each one's lane index.
#[inline(always)]
pub unsafe fn warp_sum_sixteen_scattered(x: [f32; 16], lane: u32) -> f32 {
    let mut y = [0.0f32; 32];
    let mut i = 0;
    while i < 16 {
        y[i] = x[i];
        i += 1;
    }
    // Value m of x[m] for the 16 values: the steps of `warp_sum_scattered_32` at offsets 8, 4,
    // 2, 1 applied to lane bits 4, 3, 2, 1 (a value per lane pair).
    // SAFETY (each step): forwarded to the caller (whole warp).
    unsafe {
        half_step::<8, 16>(&mut y, lane);
        half_step::<4, 8>(&mut y, lane);
        half_step::<2, 4>(&mut y, lane);
        half_step::<1, 2>(&mut y, lane);
        // The one value left: the butterfly's last step.
        math::add(y[0], shfl_xor(y[0], 1))
    }
}

/// [replay] [`warp_sum_sixteen_scattered`] with the offset-16 step's choice made by the caller:
/// `x[m]` (m < 8) holds value `m + 8·b4` and `x[8 + m]` value `m + 8·(1 − b4)`, b4 the lane's
/// bit 4. Each lane then keeps `x[0 .. 8]` and sends `x[8 ..]` with no select: the same
/// additions on the same operands (own value first) as [`warp_sum_sixteen_scattered`] on the
/// values in their plain order, so every value's sum has [`warp_sum`]'s bits, in lanes
/// `2·value`, `2·value + 1`.
///
/// # Safety
/// All 32 lanes of the warp must call it together, `lane` being each one's lane index.
#[inline(always)]
pub unsafe fn warp_sum_sixteen_scattered_lane_ordered(x: [f32; 16], lane: u32) -> f32 {
    let mut y = [0.0f32; 32];
    let mut m = 0;
    while m < 8 {
        // SAFETY: forwarded to the caller (whole warp). The partner (lane ^ 16) holds this
        // lane's kept value m + 8·b4 at its x[8 + m].
        y[m] = math::add(x[m], unsafe { shfl_xor(x[8 + m], 16) });
        m += 1;
    }
    // SAFETY (each step): as above.
    unsafe {
        half_step::<4, 8>(&mut y, lane);
        half_step::<2, 4>(&mut y, lane);
        half_step::<1, 2>(&mut y, lane);
        math::add(y[0], shfl_xor(y[0], 1))
    }
}

/// One step of [`warp_sum_sixteen_scattered`]: x[m] (m < O) becomes the kept one of x[m],
/// x[O + m] (the upper one when the lane's bit `B` is set) plus the partner lane's (lane ^ B)
/// copy of it.
///
/// # Safety
/// All 32 lanes of the warp must call it together.
#[inline(always)]
unsafe fn half_step<const O: usize, const B: u32>(x: &mut [f32; 32], lane: u32) {
    let high = lane & B != 0;
    let mut m = 0;
    while m < O {
        let (keep, send) = if high { (x[O + m], x[m]) } else { (x[m], x[O + m]) };
        // SAFETY: forwarded to the caller (whole warp).
        x[m] = math::add(keep, unsafe { shfl_xor(send, B) });
        m += 1;
    }
}

/// [seq-batch] [`warp_sum`] of 32 values as one reduce-scatter: returns, in lane `lane`, the sum of
/// value `lane` — [`warp_sum`]'s bits for that value (the argument of
/// [`warp_sum_eight_scattered`]: at offsets 16, 8, 4, 2, 1 each lane keeps the half of its
/// values selected by its lane bit and adds its partner's copy of it, own value first — the
/// butterfly lane's additions on the same operands for the values it keeps). 31 shuffles and
/// 31 additions instead of 160 and 160.
///
/// # Safety
/// All 32 lanes of the warp must call it together, `lane` being each one's lane index.
#[inline(always)]
pub unsafe fn warp_sum_scattered_32(mut x: [f32; 32], lane: u32) -> f32 {
    // After the step with offset o, x[0 .. o] hold the values whose index agrees with the lane
    // on the bits at and above o (value m + (lane's bits ≥ o) for x[m]). Each step with a
    // constant offset, so that every index is a constant and the array stays in registers.
    // SAFETY (each step): forwarded to the caller (whole warp).
    unsafe {
        scatter_step::<16>(&mut x, lane);
        scatter_step::<8>(&mut x, lane);
        scatter_step::<4>(&mut x, lane);
        scatter_step::<2>(&mut x, lane);
        scatter_step::<1>(&mut x, lane);
    }
    x[0]
}

/// One step of [`warp_sum_scattered_32`]: x[m] (m < O) becomes the kept one of x[m], x[O + m]
/// (the upper one when the lane's bit O is set) plus the partner lane's copy of it.
///
/// # Safety
/// All 32 lanes of the warp must call it together.
#[inline(always)]
unsafe fn scatter_step<const O: usize>(x: &mut [f32; 32], lane: u32) {
    let high = lane & O as u32 != 0;
    let mut m = 0;
    while m < O {
        let (keep, send) = if high { (x[O + m], x[m]) } else { (x[m], x[O + m]) };
        // SAFETY: forwarded to the caller (whole warp).
        x[m] = math::add(keep, unsafe { shfl_xor(send, O as u32) });
        m += 1;
    }
}
