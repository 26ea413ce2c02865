//! GATED_DELTA_NET, scalar gate, D = 128 — ggml's `gated_delta_net_cuda` (spec §2.10).
//!
//! Per value head h and sequence s the state S (D×D, S[i][col], i the key index) runs over the
//! tokens t = 0 … n_t−1:
//! `γ = expf(g)`, `KV = Σ_i S[i][col]·k[i]`, `δ = β·(v[col] − γ·KV)`,
//! `S[i][col] ← γ·S[i][col] + k[i]·δ`, `out[col] = (Σ_i S[i][col]·q[i])·scale`,
//! with q and k taken from key head `h mod H_k`. (Sᵀk comes from the *undecayed* S and is then
//! scaled by γ — the CUDA order, not ggml's CPU one.)
//!
//! Thread mapping: block (32, [`GDN_WARPS`] = 4, 1), grid (x = value head h, y = sequence s,
//! z = D/4). Warp `threadIdx.y` of block z owns value column `col = 4·z + threadIdx.y`; lane l
//! keeps S[i][col] for its [`ROWS_PER_LANE`] = 4 rows `i = 32·r + l` in registers for the whole
//! sequence. Column dot products are a per-lane fma chain over r followed by ggml's butterfly
//! warp sum, so every lane ends with the same sum.
//!
//! Layouts (element strides, checked by the host):
//! - `q` (i, kh, t, s) at `i + kh·q_head + t·q_token + s·q_seq`; `k` likewise, own strides;
//! - `v` (col, h, t, s) at `col + h·v_head + t·v_token + s·v_seq`;
//! - `g`, `beta` (0, h, t, s) at `h·g_head + t·g_token + s·g_seq` (each its own strides);
//! - `state_in` (i, col, h, s) at `i + col·in_col + h·in_head + s·in_seq`;
//! - `out` (col, h, t, s) at `col + h·out_head + t·out_token + s·out_seq`;
//! - `states`: slot k of sequence s starts at `s·states_seq + k·states_slot`, and holds (i, col, h)
//!   at `(h·D + col)·D + i`. Slot k receives the state after token n_t−1−k; only slots
//!   k < min(n_t, n_slots) are written, the others are left as they were.
//!
//! Aliasing: `out` and `states` must not overlap any input or each other, and no two of their
//! elements may share bytes: blocks write while other blocks still read the inputs. The host
//! refuses such views.

use crate::abi::{GDN_HEAD_DIM, GDN_WARPS};
use crate::device::math::{fma, mul};
use crate::device::thread::{block_idx_x, block_idx_y, block_idx_z, thread_idx_x, thread_idx_y};
use crate::device::trap;
use crate::device::warp::warp_sum;
use crate::fast_math::exp;

/// State rows each lane keeps: lane l holds rows `32·r + l`, r = 0 … 3.
pub const ROWS_PER_LANE: usize = GDN_HEAD_DIM / 32;

/// This lane's entries of a D-vector stored contiguously at `row`: `row[32·r + lane]`.
///
/// # Safety
/// `row` must point to [`GDN_HEAD_DIM`] readable f32 and `lane < 32`.
#[inline(always)]
pub unsafe fn load_lane(row: *const f32, lane: usize) -> [f32; ROWS_PER_LANE] {
    let mut x = [0.0f32; ROWS_PER_LANE];
    let mut r = 0;
    while r < ROWS_PER_LANE {
        // SAFETY: 32·r + lane < D, forwarded to the caller.
        x[r] = unsafe { *row.add(32 * r + lane) };
        r += 1;
    }
    x
}

/// Stores this lane's entries back to a contiguous D-vector: `row[32·r + lane] = x[r]`.
///
/// # Safety
/// `row` must point to [`GDN_HEAD_DIM`] writable f32 that no other thread accesses at the same
/// time (other lanes write the other rows) and `lane < 32`.
#[inline(always)]
pub unsafe fn store_lane(row: *mut f32, lane: usize, x: &[f32; ROWS_PER_LANE]) {
    let mut r = 0;
    while r < ROWS_PER_LANE {
        // SAFETY: 32·r + lane < D, forwarded to the caller.
        unsafe { *row.add(32 * r + lane) = x[r] };
        r += 1;
    }
}

/// This lane's part of a column dot product `Σ_r s[r]·x[r]`: an fma chain from a +0 addend
/// (spec §2.10 steps 3 and 8).
#[inline(always)]
pub fn lane_dot(s: &[f32; ROWS_PER_LANE], x: &[f32; ROWS_PER_LANE]) -> f32 {
    let mut acc = 0.0f32;
    let mut r = 0;
    while r < ROWS_PER_LANE {
        acc = fma(s[r], x[r], acc);
        r += 1;
    }
    acc
}

/// The decay `γ = expf(g)`: fast-math `ex2.approx.ftz(g · log2 e)` (step 2).
#[inline(always)]
pub fn decay(g: f32) -> f32 {
    exp(g)
}

/// `−x` by flipping the sign bit: exact, no rounding and no flush (the fma reads it with ftz).
#[inline(always)]
fn negate(x: f32) -> f32 {
    f32::from_bits(x.to_bits() ^ 0x8000_0000)
}

/// `δ = β·(v − γ·KV)` (steps 5–6): nvcc emits `γ·KV` then `v − ·`, which ptxas fuses into one
/// FFMA `KV·(−γ) + v`, so that part is a single rounding; the product with β is rounded.
#[inline(always)]
pub fn delta(kv: f32, gamma: f32, v: f32, beta: f32) -> f32 {
    mul(beta, fma(negate(gamma), kv, v))
}

/// `S[i][col] ← γ·S[i][col] + k[i]·δ` on this lane's rows (step 7): `k·δ` is rounded first,
/// then the decay product is the fused one.
#[inline(always)]
pub fn update(s: &mut [f32; ROWS_PER_LANE], k: &[f32; ROWS_PER_LANE], gamma: f32, delta: f32) {
    let mut r = 0;
    while r < ROWS_PER_LANE {
        let p = mul(k[r], delta);
        s[r] = fma(gamma, s[r], p);
        r += 1;
    }
}

/// One token of the recurrence on a lane's state registers (steps 2–9). Returns the unscaled
/// attention output `Σ_i S[i][col]·q[i]` of the *updated* state, the same bits in every lane.
///
/// # Safety
/// All 32 lanes of the warp must call it together (two warp sums).
#[inline(always)]
pub unsafe fn token_step(
    s: &mut [f32; ROWS_PER_LANE],
    k: &[f32; ROWS_PER_LANE],
    q: &[f32; ROWS_PER_LANE],
    v: f32,
    g: f32,
    beta: f32,
) -> f32 {
    let gamma = decay(g);
    // SAFETY: forwarded to the caller (the whole warp is here).
    let kv = unsafe { warp_sum(lane_dot(s, k)) };
    update(s, k, gamma, delta(kv, gamma, v, beta));
    // SAFETY: as above.
    unsafe { warp_sum(lane_dot(s, q)) }
}

/// Entry point; see the module docs for the layouts.
///
/// # Safety
/// Launched with block (32, [`GDN_WARPS`], 1) and grid (H_v, n_s, D / [`GDN_WARPS`]); the host
/// validated that every view covers the elements the grid reaches (heads < H_v, key heads
/// < `n_key_heads`, tokens < `n_tokens`, slots < `n_slots`, sequences < n_s) and the aliasing
/// rules of the module docs.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "ptx-kernel" fn gated_delta_net_f32_d128(
    q: *const f32,
    q_head: usize,
    q_token: usize,
    q_seq: usize,
    k: *const f32,
    k_head: usize,
    k_token: usize,
    k_seq: usize,
    v: *const f32,
    v_head: usize,
    v_token: usize,
    v_seq: usize,
    g: *const f32,
    g_head: usize,
    g_token: usize,
    g_seq: usize,
    beta: *const f32,
    beta_head: usize,
    beta_token: usize,
    beta_seq: usize,
    state_in: *const f32,
    in_col: usize,
    in_head: usize,
    in_seq: usize,
    out: *mut f32,
    out_head: usize,
    out_token: usize,
    out_seq: usize,
    states: *mut f32,
    states_seq: usize,
    states_slot: usize,
    n_tokens: u32,
    n_key_heads: u32,
    n_slots: u32,
    scale: f32,
) {
    let head = block_idx_x();
    // The host validated n_key_heads ≥ 1; `checked_rem` keeps core's divide-by-zero panic
    // path out of the PTX, and a violated contract aborts the launch.
    let Some(key_head) = head.checked_rem(n_key_heads) else { trap() };
    let key_head = key_head as usize;
    let head = head as usize;
    let seq = block_idx_y() as usize;
    let col = (block_idx_z() * GDN_WARPS + thread_idx_y()) as usize;
    let lane = thread_idx_x() as usize;
    let n_tokens = n_tokens as usize;

    // SAFETY (every offset and access below): the host checked that each view holds all the
    // elements this (head, seq, col) reaches for t < n_tokens and slot < n_slots, and that the
    // outputs overlap nothing else; each lane touches only its own rows 32·r + lane.
    let q_row = unsafe { q.add(key_head * q_head + seq * q_seq) };
    let k_row = unsafe { k.add(key_head * k_head + seq * k_seq) };
    let v_elem = unsafe { v.add(col + head * v_head + seq * v_seq) };
    let g_elem = unsafe { g.add(head * g_head + seq * g_seq) };
    let beta_elem = unsafe { beta.add(head * beta_head + seq * beta_seq) };
    let out_elem = unsafe { out.add(col + head * out_head + seq * out_seq) };
    let state_col = unsafe { states.add(seq * states_seq + (head * GDN_HEAD_DIM + col) * GDN_HEAD_DIM) };

    let mut s = unsafe { load_lane(state_in.add(col * in_col + head * in_head + seq * in_seq), lane) };
    let mut t = 0;
    while t < n_tokens {
        // SAFETY: t < n_tokens, so these are elements of the validated input views.
        let k_t = unsafe { load_lane(k_row.add(t * k_token), lane) };
        let q_t = unsafe { load_lane(q_row.add(t * q_token), lane) };
        let (v_t, g_t, beta_t) = unsafe { (*v_elem.add(t * v_token), *g_elem.add(t * g_token), *beta_elem.add(t * beta_token)) };
        // SAFETY: every lane of the warp runs the same trip count with no early exit.
        let a = unsafe { token_step(&mut s, &k_t, &q_t, v_t, g_t, beta_t) };
        if lane == 0 {
            // SAFETY: element (col, head, t, seq) of `out`, written by this warp's lane 0 only.
            unsafe { *out_elem.add(t * out_token) = mul(a, scale) };
        }
        let slot = n_tokens - 1 - t;
        if slot < n_slots as usize {
            // SAFETY: slot < n_slots: this column's row of slot `slot`; each lane writes its own
            // four elements.
            unsafe { store_lane(state_col.add(slot * states_slot), lane, &s) };
        }
        t += 1;
    }
}
