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
use crate::device::load::coherent_f32;
use crate::device::math::{fma, mul};
use crate::device::memory::{
    load_nc_f32, load_nc_f32_at, load_nc_f32x4_stride32, load_nc_u32, prefetch_l1, prefetch_l2, store_f32_at, store_f32x4_stride32,
};
use crate::device::shared;
use crate::device::thread::{block_idx_x, block_idx_y, block_idx_z, sync_threads, thread_idx_x, thread_idx_y};
use crate::device::trap;
use crate::device::warp::{shfl_idx, warp_sum, warp_sum_eight_scattered, warp_sum_sixteen_scattered};
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
pub(crate) struct TokenSource {
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
    pub(crate) unsafe fn load(&self) -> TokenInputs {
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
    pub(crate) fn advance(&mut self) {
        self.k = self.k.wrapping_add(self.k_token);
        self.q = self.q.wrapping_add(self.q_token);
        self.v = self.v.wrapping_add(self.v_token);
        self.g = self.g.wrapping_add(self.g_token);
        self.beta = self.beta.wrapping_add(self.beta_token);
    }
}

/// [speed] Tokens whose inputs the kernel prefetches into L2 at its start (~1.5 KiB per token
/// and value head).
pub(crate) const L2_PREFETCH_TOKENS: usize = 64;

/// [speed] L2 prefetch of tokens `lane, lane + 32, …` of a [`TokenSource`] at token 0: the k, q
/// and v rows — each row's 128-byte lines at elements 0, 32, 64, 96 and its last element 127
/// (in case the row is not line-aligned) — and the g and β elements.
///
/// # Safety
/// `src` at token 0, all its views valid for tokens < `n_tokens`.
#[inline(always)]
pub(crate) unsafe fn prefetch_tokens(src: &TokenSource, lane: usize, n_tokens: usize) {
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

/// [replay] The state update of one token on a lane's state registers (steps 3–7), `gamma` =
/// [`decay`]`(g)` already taken: `KV = Σ_i S[i][col]·k[i]` (the lane's fma chain, then the
/// butterfly [`warp_sum`]), `δ = β·(v − γ·KV)`, `S ← γ·S + k·δ`. [`token_step`] is this update
/// followed by the output sum; exact replay (GATED_DELTA_NET_REPLAY) runs the update alone — the
/// CPU reference's `token_update`, operation for operation.
///
/// # Safety
/// All 32 lanes of the warp must call it together (one warp sum).
#[inline(always)]
pub unsafe fn token_update(s: &mut [f32; ROWS_PER_LANE], k: &[f32; ROWS_PER_LANE], v: f32, gamma: f32, beta: f32) {
    // SAFETY: forwarded to the caller (the whole warp is here).
    let kv = unsafe { warp_sum(lane_dot(s, k)) };
    update(s, k, gamma, delta(kv, gamma, v, beta));
}

/// One token of the recurrence on a lane's state registers (steps 2–9): [`token_update`], then
/// the unscaled attention output `Σ_i S[i][col]·q[i]` of the *updated* state, the same bits in
/// every lane.
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
    unsafe { token_update(s, k, v, gamma, beta) };
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
    unsafe { run_at::<FROM_CACHE>(p, source_rows, source_rows_stride, at) }
}

/// Where one (value head, sequence) of a GATED_DELTA_NET launch reads and writes: its token
/// inputs at token 0, its `out` row, its state head block in slot 0, the state view, and the
/// strides and sizes the column bodies step with.
#[derive(Clone, Copy)]
pub(crate) struct HeadViews {
    pub q_row: *const f32,
    pub k_row: *const f32,
    pub v_row: *const f32,
    pub g_elem: *const f32,
    pub beta_elem: *const f32,
    pub out_head_row: *mut f32,
    pub state_head: *mut f32,
    pub state_in: *const f32,
    pub in_col: usize,
    pub in_head: usize,
    pub in_seq: usize,
    pub q_token: usize,
    pub k_token: usize,
    pub v_token: usize,
    pub g_token: usize,
    pub beta_token: usize,
    pub out_token: usize,
    pub states_slot: usize,
    pub n_tokens: usize,
    pub n_slots: usize,
    pub scale: f32,
}

impl HeadViews {
    /// The views of value head `head` (key head `head mod n_key_heads`) of sequence `seq`.
    ///
    /// # Safety
    /// `head` < H_v and `seq` < n_s of a launch whose views the host validated (module docs).
    #[inline(always)]
    pub(crate) unsafe fn at(p: &abi::GatedDeltaNetParams, head: u32, seq: u32) -> HeadViews {
        // The host validated n_key_heads ≥ 1; `checked_rem` keeps core's divide-by-zero panic
        // path out of the PTX, and a violated contract aborts the launch.
        let Some(key_head) = head.checked_rem(p.n_key_heads) else { trap() };
        let (key_head, head, seq) = (key_head as usize, head as usize, seq as usize);
        let (q, k, v) = (p.q as usize as *const f32, p.k as usize as *const f32, p.v as usize as *const f32);
        let (g, beta) = (p.g as usize as *const f32, p.beta as usize as *const f32);
        let (out, states) = (p.out as usize as *mut f32, p.states as usize as *mut f32);
        // SAFETY (every offset): the host checked that each view holds all the elements this
        // (head, seq) reaches for t < n_tokens and slot < n_slots.
        unsafe {
            HeadViews {
                q_row: q.add(key_head * p.q_head as usize + seq * p.q_seq as usize),
                k_row: k.add(key_head * p.k_head as usize + seq * p.k_seq as usize),
                v_row: v.add(head * p.v_head as usize + seq * p.v_seq as usize),
                g_elem: g.add(head * p.g_head as usize + seq * p.g_seq as usize),
                beta_elem: beta.add(head * p.beta_head as usize + seq * p.beta_seq as usize),
                out_head_row: out.add(head * p.out_head as usize + seq * p.out_seq as usize),
                state_head: states.add(seq * p.states_seq as usize + head * GDN_HEAD_DIM * GDN_HEAD_DIM),
                state_in: p.state_in as usize as *const f32,
                in_col: p.in_col as usize,
                in_head: p.in_head as usize,
                in_seq: p.in_seq as usize,
                q_token: p.q_token as usize,
                k_token: p.k_token as usize,
                v_token: p.v_token as usize,
                g_token: p.g_token as usize,
                beta_token: p.beta_token as usize,
                out_token: p.out_token as usize,
                states_slot: p.states_slot as usize,
                n_tokens: p.n_tokens as usize,
                n_slots: p.n_slots as usize,
                scale: p.scale,
            }
        }
    }

    /// The token inputs of this head at token 0, for `lane` and value column `col`.
    #[inline(always)]
    pub(crate) fn token_source(&self, lane: usize, col: usize) -> TokenSource {
        TokenSource {
            k: self.k_row,
            q: self.q_row,
            v: self.v_row,
            g: self.g_elem,
            beta: self.beta_elem,
            lane: lane as u32,
            col: col as u32,
            k_token: self.k_token,
            q_token: self.q_token,
            v_token: self.v_token,
            g_token: self.g_token,
            beta_token: self.beta_token,
        }
    }

    /// The cache row sequence `seq` reads its initial state from (GATED_DELTA_NET_FROM_CACHE).
    ///
    /// # Safety
    /// `source_rows[seq·stride]` is a host-validated index in 0..n_rows of the cache, never
    /// written.
    #[inline(always)]
    unsafe fn source_row(source_rows: *const i32, source_rows_stride: usize, seq: usize) -> usize {
        // SAFETY: forwarded to the caller.
        unsafe { cache_source_row(source_rows, source_rows_stride, seq) as usize }
    }
}

/// [layer-step] The cache row sequence `seq` reads its initial state from
/// (GATED_DELTA_NET_FROM_CACHE): `source_rows[seq·stride]`.
///
/// # Safety
/// `source_rows[seq·stride]` is a host-validated index in 0..n_rows of the cache, never written.
#[inline(always)]
pub(crate) unsafe fn cache_source_row(source_rows: *const i32, source_rows_stride: usize, seq: usize) -> u32 {
    // SAFETY: forwarded to the caller; the index is non-negative, so the cast is lossless.
    unsafe { load_nc_u32(source_rows.add(seq * source_rows_stride) as *const u32) }
}

/// Which value column a warp runs, and which lane this thread is: GATED_DELTA_NET's block
/// (head, seq, group) = `%ctaid` and (lane, warp) = `%tid`.
#[derive(Clone, Copy)]
struct ColumnAt {
    pub head: u32,
    pub seq: u32,
    /// Column group z: columns 4·z … 4·z + 3.
    pub group: u32,
    /// Warp 0 … 3 of the group (column 4·z + warp).
    pub warp: u32,
    pub lane: u32,
}

/// [`run`]'s body for the column `at` names.
///
/// # Safety
/// As [`run`], for the (head, seq, group) of `at` inside the grid the host validated, `at.warp`
/// < [`GDN_WARPS`], `at.lane` < 32, all 32 lanes of the warp calling together.
#[inline(always)]
unsafe fn run_at<const FROM_CACHE: bool>(p: &abi::GatedDeltaNetParams, source_rows: *const i32, source_rows_stride: usize, at: ColumnAt) {
    let col = (at.group * GDN_WARPS + at.warp) as usize;
    let lane = at.lane as usize;
    // SAFETY: forwarded from the caller (head, seq inside the validated grid).
    let h = unsafe { HeadViews::at(p, at.head, at.seq) };
    let HeadViews { q_row, k_row, v_row, g_elem, beta_elem, out_head_row, state_head, state_in, .. } = h;
    let (n_tokens, n_slots, scale) = (h.n_tokens, h.n_slots, h.scale);
    let (head, seq) = (at.head as usize, at.seq as usize);
    let (in_col, in_head, in_seq, out_token, states_slot) = (h.in_col, h.in_head, h.in_seq, h.out_token, h.states_slot);
    // This lane's first element of its column within a state slot's head block: col·D + lane.
    let state_index = (col * GDN_HEAD_DIM + lane) as u32;

    if n_tokens == 0 {
        return;
    }
    // [speed] Every input is read with `ld.global.nc` (the host proved no output overlaps an
    // input), and token t+1's inputs are loaded before token t's arithmetic: their memory
    // latency hides behind the two warp sums instead of stalling each token. Pure loads in
    // another order: the float operations and their operands are unchanged.
    let mut src = h.token_source(lane, col);
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
        // SAFETY: seq < n_s indices (host-validated), each in 0..n_rows of the cache, so the row
        // lies inside the cache view; the index buffer is never written.
        let row = unsafe { HeadViews::source_row(source_rows, source_rows_stride, seq) };
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
        if slot < n_slots {
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
    let mut cur = unsafe { src.load() };
    let mut t = 0;
    while t + 1 < n_tokens {
        src.advance();
        let next = unsafe { src.load() };
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

/// [layer-step] Value columns one warp runs in GDN_LAYER_STEP's second phase: a whole column
/// group (GATED_DELTA_NET's block z), the four columns' recurrences interleaved in one warp so
/// that their latencies overlap instead of queueing as four block items.
pub const GROUP_COLUMNS: usize = abi::GDN_LAYER_STEP_GROUP_COLUMNS as usize;

/// [layer-step] Which column group a warp runs in GDN_LAYER_STEP's second phase, and which lane
/// this thread is.
#[derive(Clone, Copy)]
pub(crate) struct GroupAt {
    pub head: u32,
    pub seq: u32,
    /// Column group z: columns 4·z … 4·z + 3.
    pub group: u32,
    /// [layer-step] The warp of the block (0 … 3) running the group.
    pub warp: u32,
    pub lane: u32,
}

/// [layer-step] This lane's entries of a [`TokenSource`]'s token for the [`GROUP_COLUMNS`]
/// columns 4·z + j of a group: k and q (one key head for the whole group), each column's v, the
/// head's gate and β — each element the one [`TokenSource::load`] reads for column 4·z + j
/// (GDN_LAYER_STEP's first phase wrote them; staged by [`stage_group_tokens`]).
/// [seq-batch] `C` columns: one group ([`GROUP_COLUMNS`]) or, in the batched step, a warp's two
/// groups run as one.
#[derive(Clone, Copy)]
struct GroupInputs<const C: usize> {
    k: [f32; ROWS_PER_LANE],
    q: [f32; ROWS_PER_LANE],
    v: [f32; C],
    g: f32,
    beta: f32,
}

impl<const C: usize> GroupInputs<C> {
    const ZERO: GroupInputs<C> = GroupInputs { k: [0.0; ROWS_PER_LANE], q: [0.0; ROWS_PER_LANE], v: [0.0; C], g: 0.0, beta: 0.0 };
}

/// [layer-step] The L2 prefetch of the initial state a [`run_group_at`] will read: the group's
/// four columns of the cache row (lanes 4j … 4j + 3 ask for column j's four 128-byte lines at
/// rows 0, 32, 64, 96, lanes 16 … 19 for row 127 in case a column is not line-aligned). A
/// hint only — nothing is read back — issued before GDN_LAYER_STEP's first phase, so that the
/// state reads of its second phase meet L2 instead of DRAM.
///
/// # Safety
/// As [`run_group_at`] with `FROM_CACHE`; all lanes may call it (hints only).
#[inline(always)]
pub(crate) unsafe fn prefetch_group_state(p: &abi::GatedDeltaNetParams, source_rows: *const i32, source_rows_stride: usize, at: GroupAt) {
    let lane = at.lane as usize;
    let (col, row_in_col) =
        if lane < 4 * GROUP_COLUMNS { (lane / 4, 32 * (lane % 4)) } else { (lane - 4 * GROUP_COLUMNS, GDN_HEAD_DIM - 1) };
    if lane >= 5 * GROUP_COLUMNS {
        return;
    }
    // SAFETY: seq < n_s (caller), a validated index of the cache.
    let row = unsafe { HeadViews::source_row(source_rows, source_rows_stride, at.seq as usize) };
    let col = at.group as usize * GROUP_COLUMNS + col;
    let (state_in, in_seq, in_col, in_head) = (p.state_in as usize as *const f32, p.in_seq as usize, p.in_col as usize, p.in_head as usize);
    // SAFETY: an element of the validated cache row's (i, col, head) view (hints only).
    unsafe { prefetch_l2(state_in.wrapping_add(row * in_seq + col * in_col + at.head as usize * in_head + row_in_col)) };
}

/// [layer-step] Shared memory of the staged token inputs ([`stage_tokens`]): tokens t < n_t of
/// the block's key head — q at `t·QK + 4i`, k at `t·QK + 512 + 4i` (QK = 1024 bytes, i < D) —
/// then, per warp w, each token's v of the warp's `GP`·4 columns (group g's at +16·g), g and β
/// (+16·GP, +16·GP + 4) at `QK·MAX + (w·MAX + t)·W` (MAX = [`abi::GDN_LAYER_STEP_MAX_TOKENS`] in
/// the single-sequence step, [seq-batch] n_t in the batched one: [`abi::batch_token_stage_bytes`];
/// W = [`abi::layer_step_stage_warp_token_bytes`]`(GP)`: 32 bytes for one group a warp, as
/// the single-sequence step has always laid it out, 64 for two).
const STAGE_QK_BYTES: u32 = 2 * GDN_HEAD_DIM as u32 * 4;
const STAGE_MAX_TOKENS: u32 = abi::GDN_LAYER_STEP_MAX_TOKENS as u32;
const _: () = assert!(STAGE_QK_BYTES == abi::LAYER_STEP_STAGE_QK_BYTES);

/// [layer-step] How many groups a warp runs per staged head: `groups` (each [`GROUP_COLUMNS`]
/// columns, consecutive), the staging bytes per (warp, token) that fit their v, g and β, and
/// the tokens the stage has room for (MAX above).
#[derive(Clone, Copy)]
pub(crate) struct WarpGroups {
    pub groups: u32,
    pub warp_token_bytes: u32,
    pub stage_tokens: u32,
}

impl WarpGroups {
    /// One group a warp: the single-sequence layer step's layout.
    pub const ONE: WarpGroups =
        WarpGroups { groups: 1, warp_token_bytes: abi::layer_step_stage_warp_token_bytes(1), stage_tokens: STAGE_MAX_TOKENS };

    /// `groups` (1 ..= [`abi::BATCH_MAX_GROUPS_PER_WARP`]) a warp, with the batched step's layout
    /// for `n_tokens` tokens ([`abi::batch_token_stage_bytes`]).
    pub const fn batch(groups: u32, n_tokens: u32) -> WarpGroups {
        WarpGroups {
            groups,
            warp_token_bytes: abi::layer_step_stage_warp_token_bytes(abi::BATCH_MAX_GROUPS_PER_WARP),
            stage_tokens: n_tokens,
        }
    }

    /// Value columns a warp stages: 4 per group.
    const fn columns(self) -> u32 {
        self.groups * GROUP_COLUMNS as u32
    }
}

/// [layer-step] Token t's two places in the staging area at `base`: its q/k rows (the block's)
/// and warp `warp`'s v, g, β.
#[inline(always)]
pub(crate) fn stage_slots(layout: WarpGroups, base: u32, warp: u32, t: u32) -> (u32, u32) {
    let tokens = layout.stage_tokens;
    (base + t * STAGE_QK_BYTES, base + STAGE_QK_BYTES * tokens + (warp * tokens + t) * layout.warp_token_bytes)
}

/// [layer-step] Stages every token input of the block's column groups (one head, `layout.groups`
/// consecutive groups a warp) in shared memory ([`issue_token_copies`]), then waits for its
/// copies and meets the block.
///
/// # Safety
/// As [`issue_token_copies`]; all 128 threads of the block call it together.
#[inline(always)]
unsafe fn stage_tokens(layout: WarpGroups, src: TokenSource, n_tokens: usize, warp: u32, base: u32) {
    // SAFETY: forwarded to the caller.
    unsafe { issue_token_copies(layout, src, n_tokens, warp, base) };
    shared::wait_async_copies();
    // SAFETY: every thread of the block is here (caller); after it, each thread's copies are
    // visible to the whole block.
    unsafe { sync_threads() };
}

/// [layer-step] Starts staging every token input of the block's column groups in shared memory:
/// thread 32·w + lane copies element 32·w + lane of every token's q and k row, lanes
/// 0 … 4·GP − 1 of warp w its columns' v, lane 4·GP g, lane 4·GP + 1 β — each element the one
/// [`TokenSource::load`] reads for its column. The copies land once the thread waited for them.
///
/// The copies are how the layer step reads the token inputs its first phase wrote:
/// `cp.async.ca` — ordinary weak global loads through L1, issued after the block's acquire of
/// the writers' flags (`device/grid.rs`: `wait_items`, `wait_count`), which orders them after
/// every phase-1 write they read (in the PTX memory model, weak loads after an acquire observe
/// the released values, so no line L1 cached before the acquire may be returned).
///
/// # Safety
/// Warp w = `warp` of the block, `src` at token 0 of the block's head and at the warp's first
/// column; every element of tokens < `n_tokens` written and visible to this thread and written
/// by nobody any more; no thread reads or writes the staging area between the previous block
/// barrier and the barrier after this thread's wait.
#[inline(always)]
pub(crate) unsafe fn issue_token_copies(layout: WarpGroups, mut src: TokenSource, n_tokens: usize, warp: u32, base: u32) {
    let lane = src.lane;
    let tid = 32 * warp + lane;
    let columns = layout.columns();
    let mut t = 0u32;
    while (t as usize) < n_tokens {
        let (qk, mine) = stage_slots(layout, base, warp, t);
        // SAFETY: token t < n_tokens of the validated views, element tid < D of its q and k rows,
        // the warp's columns col + lane (lane < 4·GP), its g and β (caller); the slots lie inside
        // the staging area (t < MAX, w < 4), each written by this thread only.
        unsafe {
            shared::copy_async_4(qk + 4 * tid, src.q.add(tid as usize) as *const u32);
            shared::copy_async_4(qk + GDN_HEAD_DIM as u32 * 4 + 4 * tid, src.k.add(tid as usize) as *const u32);
            // [speed] One copy for the three: the places are `mine + 4·lane` for all of them,
            // only the source differs (a select, not three branches of one copy each).
            if lane < columns + 2 {
                let from = if lane < columns {
                    src.v.add(src.col as usize + lane as usize)
                } else if lane == columns {
                    src.g
                } else {
                    src.beta
                };
                shared::copy_async_4(mine + 4 * lane, from as *const u32);
            }
        }
        src.advance();
        t += 1;
    }
}

/// [layer-step] Token t's [`GroupInputs`] for the warp's group `g` (< `layout.groups`) from
/// [`stage_tokens`]'s area: k and q at rows 32·r + lane, each column's v, g, β.
///
/// # Safety
/// [`stage_tokens`] with `layout` staged tokens > t of this block and warp, and nothing wrote the
/// area since.
#[inline(always)]
unsafe fn staged_group_inputs<const C: usize>(layout: WarpGroups, base: u32, warp: u32, lane: u32, t: u32, g: u32) -> GroupInputs<C> {
    let (qk, mine) = stage_slots(layout, base, warp, t);
    let mut x = GroupInputs::ZERO;
    let mut r = 0;
    while r < ROWS_PER_LANE {
        let i = 32 * r as u32 + lane;
        // SAFETY: staged slots (caller).
        unsafe {
            x.q[r] = shared::load_f32(qk + 4 * i);
            x.k[r] = shared::load_f32(qk + GDN_HEAD_DIM as u32 * 4 + 4 * i);
        }
        r += 1;
    }
    let mut j = 0;
    while j < C {
        // SAFETY: as above (columns g·C … g·C + C − 1 of the warp's 4·GP).
        x.v[j] = unsafe { shared::load_f32(mine + 4 * (g * C as u32 + j as u32)) };
        j += 1;
    }
    let columns = layout.columns();
    // SAFETY: as above.
    unsafe {
        x.g = shared::load_f32(mine + 4 * columns);
        x.beta = shared::load_f32(mine + 4 * columns + 4);
    }
    x
}

/// [layer-step] The recurrences of the [`GROUP_COLUMNS`] value columns of group `at.group`
/// (head, sequence) in one warp, reading the initial state from the cache (GATED_DELTA_NET_FROM_
/// CACHE): for each column the loads, operations, stores and their order of
/// [`run_at`]`::<true>` for that column (its lane's state registers, the same token inputs,
/// `token_step`'s arithmetic, the columns interleaved — `out` element and state slots), so
/// every written bit is the one GATED_DELTA_NET_FROM_CACHE's warp for that column writes (lane 0
/// stores the four `out` elements).
///
/// [speed] Every token input is staged in shared memory at once ([`stage_tokens`]: one
/// memory round trip for all n_t tokens, the block's four warps sharing the head's q and k), and
/// token t + 1's `KV` dot products ride in the same butterflies as token t's outputs
/// ([`group_recurrence`]).
///
/// `inputs_ready` runs in every lane (in none when n_t = 0) after the initial state is loaded
/// and before the first token input is (the caller's wait for the token inputs, which other
/// blocks write).
///
/// # Safety
/// As [`run_at`]`::<true>` for the four columns of group (head, seq, group), all 32 lanes
/// of the warp calling together, and all four warps of the block together (warp `at.warp`), for
/// groups of the same head and sequence; each column is run by this warp only; once
/// `inputs_ready` returned, every token input of the group is written and visible to this
/// thread's loads, and nothing writes them any more; `stage` is the shared address of
/// [`abi::GDN_LAYER_STEP_TOKEN_STAGE_BYTES`] that no thread touches between the block barrier
/// `inputs_ready` ends with and this call's return.
#[inline(always)]
pub(crate) unsafe fn run_group_at(
    p: &abi::GatedDeltaNetParams,
    source_rows: *const i32,
    source_rows_stride: usize,
    at: GroupAt,
    stage: u32,
    inputs_ready: impl FnOnce(),
) {
    // SAFETY: forwarded from the caller (one group: the single-sequence step's stage layout).
    unsafe {
        run_groups_at::<GROUP_COLUMNS, { 2 * GROUP_COLUMNS }>(p, source_rows, source_rows_stride, at, WarpGroups::ONE, stage, inputs_ready)
    }
}

/// [seq-batch] Groups `at.group` and `at.group` + 1 as one eight-column recurrence, as
/// [`run_group_at`] runs one group (the batched step's two-group recurrence, [`run_batch_groups`],
/// with the initial state loaded from the cache into registers): the two groups' latencies
/// overlap, each column's operations unchanged. The token inputs are staged in the batched
/// step's layout for n_t tokens ([`abi::batch_token_stage_bytes`]).
///
/// # Safety
/// As [`run_group_at`] for both groups (at.group even, < D/4 − 1), with `stage` the shared
/// address of [`abi::batch_token_stage_bytes`]`(n_t)` bytes under the same rule.
#[inline(always)]
pub(crate) unsafe fn run_group_pair_at(
    p: &abi::GatedDeltaNetParams,
    source_rows: *const i32,
    source_rows_stride: usize,
    at: GroupAt,
    stage: u32,
    inputs_ready: impl FnOnce(),
) {
    let layout = WarpGroups::batch(2, p.n_tokens);
    // SAFETY: forwarded from the caller.
    unsafe {
        run_groups_at::<{ 2 * GROUP_COLUMNS }, { 4 * GROUP_COLUMNS }>(p, source_rows, source_rows_stride, at, layout, stage, inputs_ready)
    }
}

/// The body of [`run_group_at`] (C = 4 columns from `at.group`) and [`run_group_pair_at`] (C = 8).
///
/// # Safety
/// As those, with `layout` the stage layout of `C / 4` groups a warp that `stage` holds.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn run_groups_at<const C: usize, const V: usize>(
    p: &abi::GatedDeltaNetParams,
    source_rows: *const i32,
    source_rows_stride: usize,
    at: GroupAt,
    layout: WarpGroups,
    stage: u32,
    inputs_ready: impl FnOnce(),
) {
    let col0 = at.group as usize * GROUP_COLUMNS;
    let lane = at.lane as usize;
    // SAFETY: forwarded from the caller (head, seq inside the validated grid).
    let h = unsafe { HeadViews::at(p, at.head, at.seq) };
    let (head, seq) = (at.head as usize, at.seq as usize);
    if h.n_tokens == 0 {
        return;
    }
    // SAFETY: seq < n_s (caller); the row lies in the cache view, the index is never written.
    let row = unsafe { HeadViews::source_row(source_rows, source_rows_stride, seq) };
    let mut s = [[0.0f32; ROWS_PER_LANE]; C];
    let mut j = 0;
    while j < C {
        // SAFETY: this lane's elements (i, col0 + j, head) of the row, read before this lane's
        // first store, and no other thread writes them (module docs).
        s[j] = unsafe { load_lane_coherent(h.state_in.add(row * h.in_seq + (col0 + j) * h.in_col + head * h.in_head), lane) };
        j += 1;
    }
    // [speed] The state loads above are in flight while the caller waits.
    inputs_ready();
    // SAFETY: all four warps of the block are here together with groups of one head (caller),
    // after `inputs_ready`: the inputs are visible, the staging area free.
    unsafe { stage_tokens(layout, h.token_source(lane, col0), h.n_tokens, at.warp, stage) };
    // SAFETY: staged above for this warp's C / 4 groups; the whole warp is here.
    unsafe { group_recurrence::<C, V>(layout, &h, s, col0, stage, at.warp, at.lane, 0) };
}

/// [seq-batch] Where one second-phase item of the batched layer step works: value head `head` of
/// sequence `seq`, groups `first_group …` (4·GP of them, GP = `groups.groups`: warp w runs
/// groups first_group + w·GP + g, g < GP, consecutive columns), with the item's initial state
/// already in shared memory at `state` (column k of the item — item-relative, `k` < 16·GP — at
/// `state + 512·k`, row i at `+ 4i`: the cache row's bytes copied as they are) and the staging
/// area at `stage`.
#[derive(Clone, Copy)]
pub(crate) struct BatchGroups {
    pub head: u32,
    pub seq: u32,
    pub first_group: u32,
    pub groups: WarpGroups,
    pub warp: u32,
    pub lane: u32,
}

/// [seq-batch] Starts staging the token inputs of a second-phase item ([`issue_token_copies`] for
/// the warp's GP groups of (head, seq)).
///
/// # Safety
/// As [`issue_token_copies`] for warp `at.warp` and the item's head and sequence inside the
/// validated launch.
#[inline(always)]
pub(crate) unsafe fn issue_batch_token_copies(p: &abi::GatedDeltaNetParams, at: BatchGroups, stage: u32) {
    // SAFETY: forwarded from the caller (head, seq inside the validated launch).
    let h = unsafe { HeadViews::at(p, at.head, at.seq) };
    let col0 = (at.first_group + at.warp * at.groups.groups) as usize * GROUP_COLUMNS;
    // SAFETY: forwarded from the caller.
    unsafe { issue_token_copies(at.groups, h.token_source(at.lane as usize, col0), h.n_tokens, at.warp, stage) };
}

/// [seq-batch] Starts copying a second-phase item's initial state — columns 4·`first_group` …
/// + 16·GP − 1 of value head `head`, cache row `row` (the sequence's source row) of the ssm
/// cache: GP × 8 KiB, contiguous in the row — into shared memory at `state` (thread t copies
/// the 16-byte chunks t, t + 128, …), into this thread's next committed copy group (the caller
/// commits). The same bytes as the coherent loads of [`run_group_at`]: read once, through L2.
///
/// # Safety
/// All 128 threads call it (thread `tid`); the item inside the validated launch, `row` its
/// sequence's validated source row, the cache rows 16-byte aligned with `in_col` = D and
/// `in_head` = D·D (host); nothing writes those bytes until the item's own state stores, which
/// follow its wait for the copy; `state` holds GP × [`abi::BATCH_STATE_BYTES_PER_GROUP`] bytes
/// no thread touches until then.
#[inline(always)]
pub(crate) unsafe fn issue_batch_state_copies(p: &abi::GatedDeltaNetParams, row: usize, at: BatchGroups, tid: u32, state: u32) {
    let first =
        (row * p.in_seq as usize + at.head as usize * p.in_head as usize + at.first_group as usize * GROUP_COLUMNS * GDN_HEAD_DIM) * 4;
    let base = (p.state_in as usize as *const u8).wrapping_add(first);
    let chunks = at.groups.groups * abi::BATCH_STATE_BYTES_PER_GROUP / 16;
    let mut chunk = tid;
    while chunk < chunks {
        // SAFETY: chunk < the item's 16·GP columns × D floats / 4, inside the validated row,
        // 16-byte aligned (caller); the shared chunk lies inside `state`.
        unsafe { shared::copy_async_16(state + 16 * chunk, base.wrapping_add(16 * chunk as usize)) };
        chunk += abi::GDN_LAYER_STEP_BLOCK;
    }
}

/// [seq-batch] The batched layer step's second-phase item, once its token inputs are staged
/// ([`issue_batch_token_copies`]) and its initial state copied ([`issue_batch_state_copies`]):
/// each warp runs its GP groups one after the other, each column with exactly [`run_group_at`]'s
/// operations (the initial state read from the copy of the cache row in shared memory instead
/// of the row: the same bits — the host proves no thread writes those cache bytes before this
/// item read them: only this item's own state stores, which follow).
///
/// # Safety
/// All 32 lanes of warp `at.warp` call it together; (head, seq) inside the validated launch and
/// its groups < D/4; the staging area holds the item's token inputs and `state` its initial
/// state (copies complete, a block barrier since), and no thread writes either until this call
/// returned in every warp.
#[inline(always)]
pub(crate) unsafe fn run_batch_groups(p: &abi::GatedDeltaNetParams, at: BatchGroups, state: u32, stage: u32) {
    // SAFETY: forwarded from the caller (head, seq inside the validated launch).
    let h = unsafe { HeadViews::at(p, at.head, at.seq) };
    if h.n_tokens == 0 {
        return;
    }
    let gp = at.groups.groups as usize;
    let warp_group = at.first_group as usize + at.warp as usize * gp;
    let col0 = warp_group * GROUP_COLUMNS;
    // The warp's columns start at item-relative column (warp·GP)·4.
    let k0 = at.warp as usize * gp * GROUP_COLUMNS;
    if gp == 2 {
        // [speed] Both groups in one recurrence: eight columns interleaved, their latencies
        // overlapping (each column's operations unchanged).
        // SAFETY: the item's state copy and staged inputs (caller); the whole warp is here.
        unsafe {
            let s = state_columns::<{ 2 * GROUP_COLUMNS }>(state, k0, at.lane);
            group_recurrence::<{ 2 * GROUP_COLUMNS }, { 4 * GROUP_COLUMNS }>(at.groups, &h, s, col0, stage, at.warp, at.lane, 0)
        };
        return;
    }
    let mut g = 0;
    while g < gp {
        // SAFETY: as above, group g's four columns.
        unsafe {
            let s = state_columns::<GROUP_COLUMNS>(state, k0 + g * GROUP_COLUMNS, at.lane);
            group_recurrence::<GROUP_COLUMNS, { 2 * GROUP_COLUMNS }>(
                at.groups,
                &h,
                s,
                col0 + g * GROUP_COLUMNS,
                stage,
                at.warp,
                at.lane,
                g as u32,
            )
        };
        g += 1;
    }
}

/// [seq-batch] This lane's rows of `C` item-relative columns `k … k + C − 1` of a second-phase item's
/// state copy at `state` (column c at `state + 512·c`, row i at `+ 4i`).
///
/// # Safety
/// The copy is complete and visible to this thread; `k + C` ≤ the item's 16·GP columns.
#[inline(always)]
unsafe fn state_columns<const C: usize>(state: u32, k: usize, lane: u32) -> [[f32; ROWS_PER_LANE]; C] {
    let mut s = [[0.0f32; ROWS_PER_LANE]; C];
    let mut j = 0;
    while j < C {
        let mut r = 0;
        while r < ROWS_PER_LANE {
            // SAFETY: forwarded to the caller (column k + j, row 32·r + lane of the copy).
            s[j][r] = unsafe { shared::load_f32(state + 4 * (((k + j) * GDN_HEAD_DIM + 32 * r) as u32 + lane)) };
            r += 1;
        }
        j += 1;
    }
    s
}

/// [layer-step] The token loop of `C` columns of one warp (`col0 … col0 + C − 1` of head `h`:
/// one group, or [seq-batch] a warp's two groups as one), from their initial state `s` (this lane's
/// rows of each column) and the staged token inputs of the warp's group `g` (< `layout.groups`;
/// 0 for two groups as one): for each column and token `token_step`'s operations in its order,
/// then the `out` element and the state slots — what GATED_DELTA_NET_FROM_CACHE's warp for that
/// column computes and stores.
///
/// [speed] Token t + 1's `KV` dot products ride in the same butterflies as token t's outputs
/// (both read the state after token t's update; one `V` = 2·C-value reduce-scatter, each value's
/// butterfly unchanged) — the recurrence waits for one butterfly per token instead of two. Only
/// the order of independent operations changes; every operation and its operands are the same.
///
/// # Safety
/// All 32 lanes of the warp call it together (`lane` each one's index); [`stage_tokens`] with
/// `layout` staged this warp's tokens < n_t; the columns' `out` elements and state-slot rows are
/// written by this warp only (module docs); `V` = 2·C with C = 4 or 8.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn group_recurrence<const C: usize, const V: usize>(
    layout: WarpGroups,
    h: &HeadViews,
    mut s: [[f32; ROWS_PER_LANE]; C],
    col0: usize,
    stage: u32,
    warp: u32,
    lane: u32,
    g: u32,
) {
    const { assert!(V == 2 * C && (C == 4 || C == 8), "four or eight columns") };
    // Value v of the reduce-scatter lands in lanes v·W … v·W + W − 1.
    let w = 32 / V;
    let lane_usize = lane as usize;
    let mut out_t = h.out_head_row;
    // `sums` is this lane's reduce-scatter result: column j's output in lanes j·W …; its first
    // lane stores it.
    let mut finish = |s: &[[f32; ROWS_PER_LANE]; C], sums: f32, t: usize| {
        if lane_usize % w == 0 && lane_usize < w * C {
            // SAFETY: element (col0 + lane / W, head, t, seq) of `out`, written by this lane only.
            unsafe { store_f32_at(out_t, (col0 + lane_usize / w) as u32, mul(sums, h.scale)) };
        }
        let slot = h.n_tokens - 1 - t;
        if slot < h.n_slots {
            let slot_head = h.state_head.wrapping_add(slot * h.states_slot);
            let mut j = 0;
            while j < C {
                // SAFETY: slot < n_slots: column col0 + j's row of slot `slot`; each lane
                // writes its own four elements of it.
                unsafe { store_f32x4_stride32(slot_head, ((col0 + j) * GDN_HEAD_DIM + lane_usize) as u32, &s[j]) };
                j += 1;
            }
        }
        // One token further in `out`; dereferenced only for the next t < n_tokens.
        out_t = out_t.wrapping_add(h.out_token);
    };
    // SAFETY (every `staged_group_inputs`): tokens < n_tokens, staged (caller).
    let mut x = unsafe { staged_group_inputs::<C>(layout, stage, warp, lane, 0, g) };
    // Every butterfly is one reduce-scatter: values 0 … C−1 the columns' outputs of token t,
    // C … 2C−1 their KV for token t + 1 (both read the state after token t's update); every
    // lane reads the C KV back.
    let kv_of = |sums: f32| {
        let mut kv = [0.0f32; C];
        let mut j = 0;
        while j < C {
            // SAFETY: the whole warp (warp-uniform loop, caller).
            kv[j] = unsafe { shfl_idx(sums, ((C + j) * w) as u32) };
            j += 1;
        }
        kv
    };
    // Token 0's KV (`token_step`'s first butterfly).
    let mut both = [0.0f32; V];
    let mut j = 0;
    while j < C {
        both[C + j] = lane_dot(&s[j], &x.k);
        j += 1;
    }
    // SAFETY: every lane of the warp runs the same tokens (warp-uniform bounds).
    let mut kv = kv_of(unsafe { warp_sum_scattered(both, lane) });
    let n_tokens = h.n_tokens as u32;
    let mut t = 0u32;
    loop {
        // Token t: `token_step` from its γ to its output's dot products, for each column.
        let gamma = decay(x.g);
        let mut both = [0.0f32; V];
        let mut j = 0;
        while j < C {
            update(&mut s[j], &x.k, gamma, delta(kv[j], gamma, x.v[j], x.beta));
            both[j] = lane_dot(&s[j], &x.q);
            j += 1;
        }
        let last = t + 1 == n_tokens;
        let mut next = GroupInputs::ZERO;
        if !last {
            // Token t + 1's KV reads the same updated state.
            // SAFETY: t + 1 < n_tokens.
            next = unsafe { staged_group_inputs::<C>(layout, stage, warp, lane, t + 1, g) };
            let mut j = 0;
            while j < C {
                both[C + j] = lane_dot(&s[j], &next.k);
                j += 1;
            }
        }
        // SAFETY: as above (the whole warp, warp-uniform loop).
        let sums = unsafe { warp_sum_scattered(both, lane) };
        finish(&s, sums, t as usize);
        if last {
            break;
        }
        kv = kv_of(sums);
        x = next;
        t += 1;
    }
}

/// [seq-batch] [`warp_sum_eight_scattered`] (V = 8) or [`warp_sum_sixteen_scattered`] (V = 16): value
/// v's sum in lanes v·32/V … with [`warp_sum`]'s bits.
///
/// # Safety
/// All 32 lanes of the warp call it together.
#[inline(always)]
pub(crate) unsafe fn warp_sum_scattered<const V: usize>(x: [f32; V], lane: u32) -> f32 {
    // SAFETY: forwarded to the caller.
    unsafe {
        if V == 8 {
            warp_sum_eight_scattered(core::array::from_fn(|i| x[i]), lane)
        } else {
            warp_sum_sixteen_scattered(core::array::from_fn(|i| x[i]), lane)
        }
    }
}

/// Entry point; see the module docs for the layouts.
///
/// # Safety
/// Launched with block (32, [`GDN_WARPS`], 1) and grid (H_v, n_s, D / [`GDN_WARPS`]); the host
/// validated that every view covers the elements the grid reaches (heads < H_v, key heads
/// < `n_key_heads`, tokens < `n_tokens`, slots < `n_slots`, sequences < n_s) and the aliasing
/// rules of the module docs.
#[cfg(target_arch = "nvptx64")]
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
#[cfg(target_arch = "nvptx64")]
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn gated_delta_net_from_cache_f32_d128(p: abi::GatedDeltaNetFromCacheParams) {
    // SAFETY: forwarded from the launch contract.
    unsafe { run::<true>(&p.gdn, p.source_rows as usize as *const i32, p.source_rows_stride as usize) }
}

/// [seq-batch] GATED_DELTA_NET_FROM_CACHE for a batch of sequences: the same columns in the batched
/// layer step's layout — eight value columns a warp, interleaved ([`group_recurrence`]`::<8, 16>`)
/// — at 5 blocks (20 warps) per multiprocessor instead of the layer step's 3.
///
/// Block (32, [`GDN_WARPS`], 1), grid (H_v, n_s, D / [`abi::BATCH_GDN_BLOCK_COLUMNS`]): warp w of
/// block (h, s, z) runs columns `col0 = 32·z + 8·w` … `col0 + 7` of head h and sequence s; lane
/// l holds rows `32·r + l` of each. Per block: the eight columns' initial state from cache row
/// `source_rows[s]` (coherent loads, as [`gated_delta_net_from_cache_f32_d128`]), every token's
/// inputs staged in shared memory by `cp.async` (the layer step's [`stage_tokens`]), then the
/// token loop. Every column's operations, operands and order are those of the
/// one-warp-per-column entry's warp for it: only independent operations of different columns
/// and tokens interleave, and each reduce-scatter value's sum is the butterfly's
/// (`device/warp.rs`).
///
/// Race-free by the one-warp-per-column entry's argument (module docs, "Reading the state from
/// the cache") with this ownership: element (i, col, h) of sequence s's row is read by lane
/// i mod 32 of warp (col mod 32) / 8 in block (h, s, col / 32), once, before that thread's first
/// store, and every slot element (i, col, h, s, slot) is stored by that same thread
/// (`group_recurrence`'s `store_f32x4_stride32` at `col·D + lane + 32·r`).
///
/// # Safety
/// As [`gated_delta_net_from_cache_f32_d128`], launched with block (32, [`GDN_WARPS`], 1), grid
/// (H_v, n_s, D / [`abi::BATCH_GDN_BLOCK_COLUMNS`]) and
/// [`abi::batch_token_stage_bytes`]`(n_tokens)` bytes of dynamic shared memory, 1 ≤ n_tokens ≤
/// [`abi::BATCH_GDN_MAX_TOKENS`].
#[cfg(target_arch = "nvptx64")]
#[unsafe(export_name = crate::abi::entry_name!(gated_delta_net_from_cache_batch))]
pub unsafe extern "ptx-kernel" fn gated_delta_net_from_cache_batch_f32_d128(p: abi::GatedDeltaNetFromCacheParams) {
    // SAFETY: forwarded from the launch contract.
    unsafe { from_cache_batch(&p) }
}

/// [test] The batched entry's body for a host emulation of the launch
/// (`tests/kernel_emulation.rs`); the same indices as the entry point.
///
/// # Safety
/// As the entry point, on the emulation's threads.
#[cfg(not(target_arch = "nvptx64"))]
pub unsafe fn gated_delta_net_from_cache_batch_emulated(p: &abi::GatedDeltaNetFromCacheParams) {
    // SAFETY: forwarded to the caller.
    unsafe { from_cache_batch(p) }
}

/// [seq-batch] The batched entry's body (see the entry point's docs).
///
/// # Safety
/// As [`gated_delta_net_from_cache_batch_f32_d128`].
#[inline(always)]
unsafe fn from_cache_batch(p: &abi::GatedDeltaNetFromCacheParams) {
    const C: usize = abi::BATCH_GDN_WARP_COLUMNS as usize;
    let (head, seq, group, warp, lane) = (block_idx_x(), block_idx_y(), block_idx_z(), thread_idx_y(), thread_idx_x());
    let col0 = (group * abi::BATCH_GDN_BLOCK_COLUMNS + warp * abi::BATCH_GDN_WARP_COLUMNS) as usize;
    let lane_usize = lane as usize;
    // SAFETY: head < H_v, seq < n_s of the validated views (launch contract).
    let h = unsafe { HeadViews::at(&p.gdn, head, seq) };
    // SAFETY: seq < n_s: a host-validated index in 0..n_rows of the cache, never written.
    let row = unsafe { HeadViews::source_row(p.source_rows as usize as *const i32, p.source_rows_stride as usize, seq as usize) };
    let read = h.state_in.wrapping_add(row * h.in_seq + head as usize * h.in_head + col0 * h.in_col);
    let mut s = [[0.0f32; ROWS_PER_LANE]; C];
    let mut j = 0;
    while j < C {
        // SAFETY: this lane's elements (i, col0 + j, head) of the row, inside the validated cache
        // view, read before this thread's first store; no other thread writes them (above).
        s[j] = unsafe { load_lane_coherent(read.wrapping_add(j * h.in_col), lane_usize) };
        j += 1;
    }
    let layout = WarpGroups::batch(abi::BATCH_MAX_GROUPS_PER_WARP, h.n_tokens as u32);
    let stage = shared::base();
    // [speed] The state loads above are in flight while the block stages its tokens.
    // SAFETY: warp `warp` of the block at its first column, tokens < n_tokens ≤ the stage's room
    // (the launch's shared bytes), inputs validated and written by nobody; every thread of the
    // block calls it.
    unsafe { stage_tokens(layout, h.token_source(lane_usize, col0), h.n_tokens, warp, stage) };
    // SAFETY: the tokens staged above for this warp (barrier inside `stage_tokens`); the columns'
    // `out` elements and slot rows written by this warp only; the whole warp is here.
    unsafe { group_recurrence::<C, { 2 * C }>(layout, &h, s, col0, stage, warp, lane, 0) };
}
