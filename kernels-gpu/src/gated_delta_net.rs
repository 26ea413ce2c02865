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
//!
//! ## Reading the state from the cache (GATED_DELTA_NET_FROM_CACHE)
//!
//! [`gated_delta_net_from_cache_f32_d128`] is the same body with one difference: sequence s's
//! initial state is row `source_rows[s]` of the ssm cache (element (i, col, h) at
//! `(h·D + col)·D + i` of the row — what GET_ROWS would have copied), read with coherent
//! `ld.global` instead of `ld.global.nc`, because the slot rows the kernel writes may be that
//! very row (the layer's "read among written" case: the source row is slot 0's kv_head row).
//!
//! Why that is race-free: element (i, col, h) of sequence s is read by exactly one thread —
//! lane i mod 32 of warp col mod 4 of block (h, s, col / 4), register r = i / 32 — once, at the
//! start, before that thread's first store. Every store to `states` is of an element
//! (i, col, h, s, slot) by the thread that owns (i, col, h, s) (`store_f32x4_stride32` at
//! `col·D + lane + 32·r` of the head block), after its load. The host admits an overlap of
//! `states` with the rows read only when each written slot row that touches a read row *is*
//! the row read by the same sequence s, start for start (so every written element shares bytes
//! with exactly the same (i, col, h, s) element of the read row, or with nothing read). Then the
//! only thread that reads a byte the kernel writes is the thread that writes it, and it reads
//! first (program order of one thread; the load is not `pure`, so the compiler keeps it before
//! the stores): the value read is the one GET_ROWS would have copied before the kernel. Rows
//! read by other sequences, and every other input, are written by no thread; the index itself
//! (an index buffer) is never written, so it keeps the `.nc` load.

use crate::abi::{self, GDN_HEAD_DIM, GDN_WARPS};
use crate::device::math::add;
use crate::device::math::{fma, mul};
use crate::device::grid::load_l2_f32;
use crate::device::load::coherent_f32;
use crate::device::memory::{
    load_nc_f32, load_nc_f32_at, load_nc_u32, load_nc_f32x4_stride32, prefetch_l1, prefetch_l2, store_f32_at, store_f32x4_stride32,
};
use crate::device::thread::{block_idx_x, block_idx_y, block_idx_z, thread_idx_x, thread_idx_y};
use crate::device::trap;
use crate::device::warp::shfl_xor;
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

/// [speed] This lane's entries of a contiguous D-vector of an *input* (`row[32·r + lane]`),
/// read with `ld.global.nc`: the same bits as [`load_lane`].
///
/// # Safety
/// As [`load_lane`], and no thread writes those elements while the kernel runs.
#[inline(always)]
pub unsafe fn load_lane_nc(row: *const f32, lane: usize) -> [f32; ROWS_PER_LANE] {
    // SAFETY: forwarded to the caller.
    unsafe { load_lane_nc_at(row.add(lane)) }
}

/// [gdn-from-cache] This lane's entries of a contiguous D-vector (`row[32·r + lane]`) with
/// coherent loads ([`coherent_f32`]): the same bits as [`load_lane`], for a state row that this
/// lane overwrites later in the kernel.
///
/// # Safety
/// As [`load_lane`]; no other thread writes those elements while the kernel runs.
#[inline(always)]
pub unsafe fn load_lane_coherent(row: *const f32, lane: usize) -> [f32; ROWS_PER_LANE] {
    let mut x = [0.0f32; ROWS_PER_LANE];
    let mut r = 0;
    while r < ROWS_PER_LANE {
        // SAFETY: 32·r + lane < D, forwarded to the caller.
        x[r] = unsafe { coherent_f32(row.add(32 * r + lane)) };
        r += 1;
    }
    x
}

/// [speed] `row_lane[32·r]` for r = 0 … 3 with `ld.global.nc`, from a pointer already offset by
/// the lane.
///
/// # Safety
/// `row_lane[32·r]` readable and written by no thread while the kernel runs.
#[inline(always)]
unsafe fn load_lane_nc_at(row_lane: *const f32) -> [f32; ROWS_PER_LANE] {
    let mut x = [0.0f32; ROWS_PER_LANE];
    let mut r = 0;
    while r < ROWS_PER_LANE {
        // SAFETY: forwarded to the caller.
        x[r] = unsafe { load_nc_f32(row_lane.add(32 * r)) };
        r += 1;
    }
    x
}

/// [speed] What one token of the recurrence reads: this lane's k and q entries, the column's v,
/// the head's gate and β.
#[derive(Clone, Copy)]
pub struct TokenInputs {
    pub k: [f32; ROWS_PER_LANE],
    pub q: [f32; ROWS_PER_LANE],
    pub v: f32,
    pub g: f32,
    pub beta: f32,
}

/// [speed] Where one token's inputs are: the token's k and q rows, the head's v row, the g and
/// β elements — all the same for every lane of a warp (uniform registers) — the lane and the
/// value column as 32-bit indices, and the element strides to the next token.
struct TokenSource {
    k: *const f32,
    q: *const f32,
    v: *const f32,
    g: *const f32,
    beta: *const f32,
    lane: u32,
    col: u32,
    k_token: usize,
    q_token: usize,
    v_token: usize,
    g_token: usize,
    beta_token: usize,
}

impl TokenSource {
    /// Reads the current token's inputs (`ld.global.nc`): `k[32·r + lane]`, `q[32·r + lane]`,
    /// `v[col]`, `g`, `β`.
    ///
    /// # Safety
    /// The pointers address validated input elements that no thread writes.
    #[inline(always)]
    unsafe fn load(&self) -> TokenInputs {
        // SAFETY: forwarded to the caller.
        unsafe {
            TokenInputs {
                k: load_nc_f32x4_stride32(self.k, self.lane),
                q: load_nc_f32x4_stride32(self.q, self.lane),
                v: load_nc_f32_at(self.v, self.col),
                g: load_nc_f32(self.g),
                beta: load_nc_f32(self.beta),
            }
        }
    }

    /// [layer-step] [`TokenSource::load`] with L2 loads ([`load_l2_f32`], `ld.global.cg`): the
    /// same elements and bits, for inputs that other blocks of the launch wrote before a grid
    /// barrier (the `.nc` path, and a line L1 cached before the barrier, may be stale for
    /// those).
    ///
    /// # Safety
    /// The pointers address validated input elements that no thread writes from the grid
    /// barrier on.
    #[inline(always)]
    unsafe fn load_coherent(&self) -> TokenInputs {
        let lane = self.lane as usize;
        let row = |p: *const f32| {
            let mut x = [0.0f32; ROWS_PER_LANE];
            let mut r = 0;
            while r < ROWS_PER_LANE {
                // SAFETY: 32·r + lane < D of a validated row (caller).
                x[r] = unsafe { load_l2_f32(p.add(32 * r + lane)) };
                r += 1;
            }
            x
        };
        // SAFETY: forwarded to the caller.
        unsafe {
            TokenInputs {
                k: row(self.k),
                q: row(self.q),
                v: load_l2_f32(self.v.add(self.col as usize)),
                g: load_l2_f32(self.g),
                beta: load_l2_f32(self.beta),
            }
        }
    }

    /// [`TokenSource::load`], or [`TokenSource::load_coherent`] when `COHERENT`.
    ///
    /// # Safety
    /// As the function it calls.
    #[inline(always)]
    unsafe fn load_with<const COHERENT: bool>(&self) -> TokenInputs {
        // SAFETY: forwarded to the caller.
        unsafe { if COHERENT { self.load_coherent() } else { self.load() } }
    }

    /// L1 prefetch of the lines the *next* token's [`TokenSource::load`] will read (this lane's
    /// k and q addresses — the warp covers each row's lines — v, g, β).
    ///
    /// # Safety
    /// The next token is a validated token of every input view (hints only).
    #[inline(always)]
    unsafe fn prefetch_l1_next(&self) {
        // SAFETY: forwarded to the caller.
        unsafe {
            prefetch_l1(self.k.wrapping_add(self.k_token + self.lane as usize));
            prefetch_l1(self.q.wrapping_add(self.q_token + self.lane as usize));
            prefetch_l1(self.v.wrapping_add(self.v_token + self.col as usize));
            prefetch_l1(self.g.wrapping_add(self.g_token));
            prefetch_l1(self.beta.wrapping_add(self.beta_token));
        }
    }

    /// Steps every pointer to the next token.
    #[inline(always)]
    fn advance(&mut self) {
        self.k = self.k.wrapping_add(self.k_token);
        self.q = self.q.wrapping_add(self.q_token);
        self.v = self.v.wrapping_add(self.v_token);
        self.g = self.g.wrapping_add(self.g_token);
        self.beta = self.beta.wrapping_add(self.beta_token);
    }
}

/// [speed] Tokens whose inputs the kernel prefetches into L2 at its start (~1.5 KiB per token
/// and value head).
const L2_PREFETCH_TOKENS: usize = 64;

/// [speed] L2 prefetch of tokens `lane, lane + 32, …` of a [`TokenSource`] at token 0: the k, q
/// and v rows — each row's 128-byte lines at elements 0, 32, 64, 96 and its last element 127
/// (in case the row is not line-aligned) — and the g and β elements.
///
/// # Safety
/// `src` at token 0, all its views valid for tokens < `n_tokens`.
#[inline(always)]
unsafe fn prefetch_tokens(src: &TokenSource, lane: usize, n_tokens: usize) {
    let (k_row0, q_row0, v_row0) = (src.k, src.q, src.v);
    let mut t = lane;
    while t < n_tokens {
        let (k_row, q_row, v_row) =
            (k_row0.wrapping_add(t * src.k_token), q_row0.wrapping_add(t * src.q_token), v_row0.wrapping_add(t * src.v_token));
        // SAFETY: token t < n_tokens: elements of the validated input views (hints only).
        unsafe {
            let mut off = 0;
            while off < GDN_HEAD_DIM {
                prefetch_l2(k_row.wrapping_add(off));
                prefetch_l2(q_row.wrapping_add(off));
                prefetch_l2(v_row.wrapping_add(off));
                off += 32;
            }
            prefetch_l2(k_row.wrapping_add(GDN_HEAD_DIM - 1));
            prefetch_l2(q_row.wrapping_add(GDN_HEAD_DIM - 1));
            prefetch_l2(v_row.wrapping_add(GDN_HEAD_DIM - 1));
            prefetch_l2(src.g.wrapping_add(t * src.g_token));
            prefetch_l2(src.beta.wrapping_add(t * src.beta_token));
        }
        t += 32;
    }
}

/// [speed] Two independent butterfly warp sums (spec §2.0) run interleaved: step by step the
/// same `x + shfl_xor(x, o)` as [`warp_sum`] on each value, so each result has its bits.
///
/// # Safety
/// All 32 lanes of the warp must call it together.
#[inline(always)]
pub unsafe fn warp_sum_pair(mut x: f32, mut y: f32) -> (f32, f32) {
    let mut offset = 16;
    while offset > 0 {
        // SAFETY: forwarded to the caller.
        let (sx, sy) = unsafe { (shfl_xor(x, offset), shfl_xor(y, offset)) };
        x = add(x, sx);
        y = add(y, sy);
        offset >>= 1;
    }
    (x, y)
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

/// The recurrence of one (value head, sequence, value column) per warp (see the module docs);
/// `p` holds every view's address and strides.
///
/// # Safety
/// Launched with block (32, [`GDN_WARPS`], 1) and grid (H_v, n_s, D / [`GDN_WARPS`]); the host
/// validated that every view covers the elements the grid reaches (heads < H_v, key heads
/// < `n_key_heads`, tokens < `n_tokens`, slots < `n_slots`, sequences < n_s) and the aliasing
/// rules of the module docs.
///
/// `FROM_CACHE` (GATED_DELTA_NET_FROM_CACHE): sequence s's initial state is row
/// `source_rows[s·source_rows_stride]` of the cache `p.state_in` (row stride `p.in_seq`), read with
/// coherent loads (see the module docs, "Reading the state from the cache"); otherwise
/// `source_rows` is unused.
#[inline(always)]
unsafe fn run<const FROM_CACHE: bool>(p: &abi::GatedDeltaNetParams, source_rows: *const i32, source_rows_stride: usize) {
    let at = ColumnAt { head: block_idx_x(), seq: block_idx_y(), group: block_idx_z(), warp: thread_idx_y(), lane: thread_idx_x() };
    // SAFETY: forwarded from the launch contract (the indices are the launch's own).
    unsafe { run_at::<FROM_CACHE, false>(p, source_rows, source_rows_stride, at) }
}

/// Which value column a warp runs, and which lane this thread is: GATED_DELTA_NET's block
/// (head, seq, group) = `%ctaid` and (lane, warp) = `%tid`, or [layer-step] a work item of
/// GDN_LAYER_STEP's second phase.
#[derive(Clone, Copy)]
pub(crate) struct ColumnAt {
    pub head: u32,
    pub seq: u32,
    /// Column group z: columns 4·z … 4·z + 3.
    pub group: u32,
    /// Warp 0 … 3 of the group (column 4·z + warp).
    pub warp: u32,
    pub lane: u32,
}

/// [`run`]'s body for the column `at` names. `COHERENT`: every token input (q, k, v, g, β) is
/// read with L2 loads (`ld.global.cg`) instead of `ld.global.nc` (GDN_LAYER_STEP, whose first phase
/// wrote them); the arithmetic is the same either way.
///
/// # Safety
/// As [`run`], for the (head, seq, group) of `at` inside the grid the host validated, `at.warp`
/// < [`GDN_WARPS`], `at.lane` < 32, all 32 lanes of the warp calling together; with
/// `COHERENT`, no thread writes any token input from before the call until the warp returns.
#[inline(always)]
pub(crate) unsafe fn run_at<const FROM_CACHE: bool, const COHERENT: bool>(
    p: &abi::GatedDeltaNetParams,
    source_rows: *const i32,
    source_rows_stride: usize,
    at: ColumnAt,
) {
    let (q, q_head, q_token, q_seq) = (p.q as usize as *const f32, p.q_head as usize, p.q_token as usize, p.q_seq as usize);
    let (k, k_head, k_token, k_seq) = (p.k as usize as *const f32, p.k_head as usize, p.k_token as usize, p.k_seq as usize);
    let (v, v_head, v_token, v_seq) = (p.v as usize as *const f32, p.v_head as usize, p.v_token as usize, p.v_seq as usize);
    let (g, g_head, g_token, g_seq) = (p.g as usize as *const f32, p.g_head as usize, p.g_token as usize, p.g_seq as usize);
    let (beta, beta_head, beta_token, beta_seq) =
        (p.beta as usize as *const f32, p.beta_head as usize, p.beta_token as usize, p.beta_seq as usize);
    let (state_in, in_col, in_head, in_seq) = (p.state_in as usize as *const f32, p.in_col as usize, p.in_head as usize, p.in_seq as usize);
    let (out, out_head, out_token, out_seq) = (p.out as usize as *mut f32, p.out_head as usize, p.out_token as usize, p.out_seq as usize);
    let (states, states_seq, states_slot) = (p.states as usize as *mut f32, p.states_seq as usize, p.states_slot as usize);
    let (n_tokens, n_key_heads, n_slots, scale) = (p.n_tokens, p.n_key_heads, p.n_slots, p.scale);
    let head = at.head;
    // The host validated n_key_heads ≥ 1; `checked_rem` keeps core's divide-by-zero panic
    // path out of the PTX, and a violated contract aborts the launch.
    let Some(key_head) = head.checked_rem(n_key_heads) else { trap() };
    let key_head = key_head as usize;
    let head = head as usize;
    let seq = at.seq as usize;
    let col = (at.group * GDN_WARPS + at.warp) as usize;
    let lane = at.lane as usize;
    let n_tokens = n_tokens as usize;

    // SAFETY (every offset and access below): the host checked that each view holds all the
    // elements this (head, seq, col) reaches for t < n_tokens and slot < n_slots, and that the
    // outputs overlap nothing else; each lane touches only its own rows 32·r + lane.
    let q_row = unsafe { q.add(key_head * q_head + seq * q_seq) };
    let k_row = unsafe { k.add(key_head * k_head + seq * k_seq) };
    let v_row = unsafe { v.add(head * v_head + seq * v_seq) };
    let g_elem = unsafe { g.add(head * g_head + seq * g_seq) };
    let beta_elem = unsafe { beta.add(head * beta_head + seq * beta_seq) };
    let out_head_row = unsafe { out.add(head * out_head + seq * out_seq) };
    let state_head = unsafe { states.add(seq * states_seq + head * GDN_HEAD_DIM * GDN_HEAD_DIM) };
    // This lane's first element of its column within a state slot's head block: col·D + lane.
    let state_index = (col * GDN_HEAD_DIM + lane) as u32;

    if n_tokens == 0 {
        return;
    }
    // [speed] Every input is read with `ld.global.nc` (the host proved no output overlaps an
    // input), and token t+1's inputs are loaded before token t's arithmetic: their memory
    // latency hides behind the two warp sums instead of stalling each token. Pure loads in
    // another order: the float operations and their operands are unchanged.
    let mut src = TokenSource {
        k: k_row,
        q: q_row,
        v: v_row,
        g: g_elem,
        beta: beta_elem,
        lane: lane as u32,
        col: col as u32,
        k_token,
        q_token,
        v_token,
        g_token,
        beta_token,
    };
    // [speed] Warp 0 of the blocks with z = 0 (one per value head and sequence) asks L2 for every
    // token's k, q and v rows and its g and β now, all at once: the token loop then meets L2
    // hits instead of one DRAM round trip per token. Hints only: nothing is read back. Capped
    // at the first L2_PREFETCH_TOKENS tokens (a verify step has ≤ 17; a long prompt must not
    // flood L2).
    if at.group == 0 && at.warp == 0 {
        // SAFETY: `src` is at token 0 of the validated views (hints only).
        unsafe { prefetch_tokens(&src, lane, n_tokens.min(L2_PREFETCH_TOKENS)) };
    }
    let mut s = if FROM_CACHE {
        // SAFETY: seq < n_s indices (host-validated), each in 0..n_rows of the cache, so the cast
        // is lossless and the row lies inside the cache view; the index buffer is never written.
        let row = unsafe { load_nc_u32(source_rows.add(seq * source_rows_stride) as *const u32) } as usize;
        // SAFETY: as above; this lane's elements (i, col, head) of the row, read before this
        // lane's first store, and no other thread writes them (module docs).
        unsafe { load_lane_coherent(state_in.add(row * in_seq + col * in_col + head * in_head), lane) }
    } else {
        unsafe { load_lane_nc(state_in.add(col * in_col + head * in_head + seq * in_seq), lane) }
    };
    // This token's output and snapshot stores.
    let mut out_t = out_head_row;
    let mut finish = |s: &[f32; ROWS_PER_LANE], a: f32, t: usize| {
        if lane == 0 {
            // SAFETY: element (col, head, t, seq) of `out`, written by this warp's lane 0 only.
            unsafe { store_f32_at(out_t, col as u32, mul(a, scale)) };
        }
        let slot = n_tokens - 1 - t;
        if slot < n_slots as usize {
            // SAFETY: slot < n_slots: this column's row of slot `slot`; each lane writes its own
            // four elements.
            unsafe { store_f32x4_stride32(state_head.wrapping_add(slot * states_slot), state_index, s) };
        }
        // One token further in `out`; dereferenced only for the next t < n_tokens.
        out_t = out_t.wrapping_add(out_token);
    };
    // Tokens 0 … n_t−2 each load the next token before their own arithmetic; the last token is
    // peeled off so that the prefetched values are used on every path out of the loop (ptxas
    // would otherwise sink the loads past the loop's exit test, next to their use).
    // SAFETY (loads): token t + 1 < n_tokens of the validated input views, written by nobody.
    let mut cur = unsafe { src.load_with::<COHERENT>() };
    let mut t = 0;
    while t + 1 < n_tokens {
        src.advance();
        let next = unsafe { src.load_with::<COHERENT>() };
        // SAFETY: every lane of the warp runs the same trip count with no early exit.
        let a = unsafe { token_step(&mut s, &cur.k, &cur.q, cur.v, cur.g, cur.beta) };
        finish(&s, a, t);
        cur = next;
        t += 1;
    }
    // SAFETY: as above.
    let a = unsafe { token_step(&mut s, &cur.k, &cur.q, cur.v, cur.g, cur.beta) };
    finish(&s, a, t);
}

/// Entry point; see the module docs for the layouts.
///
/// # Safety
/// Launched with block (32, [`GDN_WARPS`], 1) and grid (H_v, n_s, D / [`GDN_WARPS`]); the host
/// validated that every view covers the elements the grid reaches (heads < H_v, key heads
/// < `n_key_heads`, tokens < `n_tokens`, slots < `n_slots`, sequences < n_s) and the aliasing
/// rules of the module docs.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn gated_delta_net_f32_d128(p: abi::GatedDeltaNetParams) {
    // SAFETY: forwarded from the launch contract.
    unsafe { run::<false>(&p, core::ptr::null(), 0) }
}

/// [gdn-from-cache] GATED_DELTA_NET_FROM_CACHE entry: [`gated_delta_net_f32_d128`] with the
/// initial state of sequence s read from cache row `source_rows[s]` (module docs, "Reading the
/// state from the cache").
///
/// # Safety
/// As [`gated_delta_net_f32_d128`], with `p.gdn.state_in` the cache's row 0 (element (i, col, h)
/// at `i + col·in_col + h·in_head`, rows `in_seq` apart), every `source_rows[s]` (s < n_s) a row
/// of the cache, and the overlap rule of the module docs for `states` against the rows read.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn gated_delta_net_from_cache_f32_d128(p: abi::GatedDeltaNetFromCacheParams) {
    // SAFETY: forwarded from the launch contract.
    unsafe { run::<true>(&p.gdn, p.source_rows as usize as *const i32, p.source_rows_stride as usize) }
}
