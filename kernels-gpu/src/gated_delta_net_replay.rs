//! [replay] GATED_DELTA_NET_REPLAY — exact-replay rollback's unfused op (`docs/rollback.md`,
//! "Through the registry"): GATED_DELTA_NET's state update over the first `a_s` tokens of a
//! logged verify step, from a committed ssm-cache row into one state row, no output.
//!
//! Per value head h, sequence s and value column col (GATED_DELTA_NET's grid and warp layout:
//! block (32, [`GDN_WARPS`], 1), grid (H_v, n_s, D / 4), warp `threadIdx.y` of block z owns
//! column `4·z + threadIdx.y`, lane l rows `32·r + l`):
//! 1. `a = accepted[s]` (an I32 index view, 0 ..= T, validated by the host); a = 0: nothing.
//! 2. The column's committed state from cache row `source_rows[s]` (element (i, col, h) at
//!    `(h·D + col)·D + i` of the row, as GATED_DELTA_NET_FROM_CACHE reads it).
//! 3. For t = 0 … a − 1: `γ = expf(g)` ([`decay`]) and [`token_update`] — the update half of
//!    GATED_DELTA_NET's `token_step`, the same `#[inline(always)]` bodies (lane fma chain,
//!    butterfly warp sum, `δ = β·fma(−γ, KV, v)`, `S = fma(γ, S, k·δ)`) — on the logged k, v, g,
//!    β of token t. This is the CPU reference's order (`reference::replay`), and the order in
//!    which GATED_DELTA_NET computed the state after token a − 1 when it wrote that snapshot.
//! 4. The state, once, to cache row `dest_rows[s]`, same element layout.
//!
//! Layouts (element strides, checked by the host): `k` (i, kh, t, s) at
//! `i + kh·k_head + t·k_token + s·k_seq`, kh = h mod H_k; `v` (col, h, t, s) likewise; `g`,
//! `beta` (0, h, t, s) at `h·*_head + t·*_token + s·*_seq`; cache row r at `r·cache_row`.
//!
//! Why the cache may be read and written by one launch: element (i, col, h) of row
//! `source_rows[s]` is read by exactly one thread (lane i mod 32 of the warp of column col in
//! block (h, s, col / 4), register i / 32), once, before that thread's only store, and with a
//! coherent load (`ld.global`, not `.nc`); every store is of element (i, col, h) of row
//! `dest_rows[s]` by that same thread. The host refuses index values under which a row one
//! sequence writes is a row another sequence reads or writes (`dest_rows[s]` ≠
//! `source_rows[s']` and ≠ `dest_rows[s']` for s ≠ s'), so a written byte is read, if at all, only
//! by the thread that writes it (`dest_rows[s] = source_rows[s]`), which reads it first (program
//! order of one thread; the load is not `pure`, so it stays before the store): GATED_DELTA_NET
//! _FROM_CACHE's argument. The log and the index views are never written: `.nc` loads.

use crate::abi::{self, GDN_HEAD_DIM, GDN_WARPS};
use crate::device::memory::{load_nc_f32, load_nc_f32_at, load_nc_f32x4_stride32, load_nc_u32, store_f32x4_stride32};
use crate::device::thread::{block_idx_x, block_idx_y, block_idx_z, thread_idx_x, thread_idx_y};
use crate::device::trap;
use crate::device::warp::shfl_idx;
use crate::gated_delta_net::{ROWS_PER_LANE, decay, delta, lane_dot, load_lane_coherent, token_update, update, warp_sum_scattered};

/// What one logged token of the replay reads: this lane's k entries, the column's v, the head's
/// g and β.
#[derive(Clone, Copy)]
pub(crate) struct LoggedToken {
    pub k: [f32; ROWS_PER_LANE],
    pub v: f32,
    pub g: f32,
    pub beta: f32,
}

/// Where the logged tokens of one (head, sequence, column) are: token 0's k row, v row, g and β
/// elements, and the element strides to the next token.
pub(crate) struct LogSource {
    pub k: *const f32,
    pub v: *const f32,
    pub g: *const f32,
    pub beta: *const f32,
    pub lane: u32,
    pub col: u32,
    pub k_token: usize,
    pub v_token: usize,
    pub g_token: usize,
    pub beta_token: usize,
}

impl LogSource {
    /// Reads the current token (`ld.global.nc`): `k[32·r + lane]`, `v[col]`, `g`, `β`.
    ///
    /// # Safety
    /// The pointers address validated log elements that no thread writes.
    #[inline(always)]
    pub(crate) unsafe fn load(&self) -> LoggedToken {
        // SAFETY: forwarded to the caller.
        unsafe {
            LoggedToken {
                k: load_nc_f32x4_stride32(self.k, self.lane),
                v: load_nc_f32_at(self.v, self.col),
                g: load_nc_f32(self.g),
                beta: load_nc_f32(self.beta),
            }
        }
    }

    /// Steps every pointer to the next token (dereferenced only for tokens < a).
    #[inline(always)]
    pub(crate) fn advance(&mut self) {
        self.k = self.k.wrapping_add(self.k_token);
        self.v = self.v.wrapping_add(self.v_token);
        self.g = self.g.wrapping_add(self.g_token);
        self.beta = self.beta.wrapping_add(self.beta_token);
    }
}

impl abi::TokenViewParams {
    /// Token 0 of head `head` and sequence `seq` (dereferenced only inside validated views).
    #[inline(always)]
    pub(crate) fn at(&self, head: usize, seq: usize) -> *const f32 {
        (self.addr as usize as *const f32).wrapping_add(head * self.head as usize + seq * self.seq as usize)
    }
}

/// Element `index_view[seq·stride]` of an I32 index view, as an unsigned value.
///
/// # Safety
/// The element lies in a validated index view that no thread writes.
#[inline(always)]
pub(crate) unsafe fn index_at(index_view: u64, stride: u64, seq: usize) -> u32 {
    // SAFETY: forwarded to the caller.
    unsafe { load_nc_u32((index_view as usize as *const u32).add(seq * stride as usize)) }
}

/// [speed] Sequence `seq`'s accepted count, source row and destination row (each as
/// [`index_at`] reads it) in one round trip: lane 0 loads the count, lane 1 the source row, the
/// other lanes the destination row ([`replay_indices_broadcast`] then broadcasts each value from
/// its lane). (Three loads of warp-uniform addresses let ptxas move the count into a uniform
/// register, waiting for it, before it issues the rows' loads: two dependent round trips before
/// the state's loads.) The load is only issued here: work that does not need the indices may run
/// between this and the broadcast, which waits for it.
///
/// # Safety
/// `lane` is the calling lane's own; seq < n_s of the launch's validated index views, which no
/// thread writes.
#[inline(always)]
pub(crate) unsafe fn replay_indices_load(p: &abi::GatedDeltaNetReplayParams, seq: usize, lane: u32) -> u32 {
    let (view, stride) = match lane {
        0 => (p.accepted, p.accepted_stride),
        1 => (p.source_rows, p.source_rows_stride),
        _ => (p.dest_rows, p.dest_rows_stride),
    };
    // SAFETY: forwarded to the caller: an element of a validated index view nobody writes.
    unsafe { index_at(view, stride, seq) }
}

/// [speed] The accepted count, source row and destination row from lanes 0, 1 and 2 of
/// [`replay_indices_load`]'s `mine`, to every lane.
///
/// # Safety
/// All 32 lanes of the warp call it together, each with its own [`replay_indices_load`].
#[inline(always)]
pub(crate) unsafe fn replay_indices_broadcast(mine: u32) -> (u32, u32, u32) {
    let mine = f32::from_bits(mine);
    // SAFETY: the whole warp (caller); a shuffle moves the bits unchanged.
    unsafe { (shfl_idx(mine, 0).to_bits(), shfl_idx(mine, 1).to_bits(), shfl_idx(mine, 2).to_bits()) }
}

/// [replay] One logged token's inputs for `C` value columns of one warp: this lane's k entries
/// (rows `32·r + lane` of the key head's row), the v of the column whose sum this lane holds
/// after the reduce-scatter (column `lane / (32 / C)`: [`columns_token_update`] takes its δ
/// there), the head's g and β — each the value [`LogSource::load`] reads for its column.
#[derive(Clone, Copy)]
pub(crate) struct LoggedColumns<const C: usize> {
    pub k: [f32; ROWS_PER_LANE],
    pub v_own: f32,
    pub g: f32,
    pub beta: f32,
}

/// [replay] [`token_update`] of one logged token on `C` = 8 or 16 value columns of one warp (this
/// lane's rows of each in `s`): `γ = expf(g)` ([`decay`]), each column's `KV = Σ_i S[i][col]·k[i]`
/// (its lane fma chain, [`lane_dot`]) — the C sums in one reduce-scatter
/// ([`warp_sum_scattered`]: each value's sum has [`warp_sum`](crate::device::warp::warp_sum)'s
/// bits, the butterfly over lanes xor 16, 8, 4, 2, 1) — then each column's `δ = β·(v − γ·KV)`
/// ([`delta`]) in the lanes that hold its sum, broadcast from the column's first lane, and
/// `S ← γ·S + k·δ` ([`update`]). Column j's operations, operands and order are
/// [`token_update`]'s for that column (δ is computed once, in a lane that holds KV's bits, instead
/// of in every lane: the same operation on the same operands); only independent operations of
/// different columns interleave. The replay loop's body of GATED_DELTA_NET_REPLAY_VERIFY.
///
/// # Safety
/// All 32 lanes of the warp call it together, `lane` being each one's lane index; `x.v_own` is
/// the v of column `lane / (32 / C)`.
#[inline(always)]
pub(crate) unsafe fn columns_token_update<const C: usize>(s: &mut [[f32; ROWS_PER_LANE]; C], x: &LoggedColumns<C>, lane: u32) {
    const { assert!(C == 8 || C == 16, "an 8- or 16-value reduce-scatter") };
    // Value j of the reduce-scatter lands in lanes j·W … j·W + W − 1.
    let w = 32 / C;
    let gamma = decay(x.g);
    let mut dots = [0.0f32; C];
    let mut j = 0;
    while j < C {
        dots[j] = lane_dot(&s[j], &x.k);
        j += 1;
    }
    // SAFETY: forwarded to the caller (the whole warp).
    let sums = unsafe { warp_sum_scattered(dots, lane) };
    // [speed] This lane's column's δ (its sum is that column's KV), once instead of every
    // column's in every lane.
    let own_delta = delta(sums, gamma, x.v_own, x.beta);
    let mut j = 0;
    while j < C {
        // SAFETY: as above.
        let d = unsafe { shfl_idx(own_delta, (j * w) as u32) };
        update(&mut s[j], &x.k, gamma, d);
        j += 1;
    }
}

/// The replay of one column (see the module docs) for block (`head`, `seq`, `group`), warp
/// `warp`, lane `lane`.
///
/// # Safety
/// Launched with block (32, [`GDN_WARPS`], 1) and grid (H_v, n_s, D / [`GDN_WARPS`]); all 32
/// lanes of the warp call it together; the host validated that the log views hold every element
/// of heads < H_v (key heads < `n_key_heads`), tokens < `n_tokens` and sequences < n_s, that
/// every `source_rows[s]` and `dest_rows[s]` (s < n_s) is a row of the cache (D·D·H_v contiguous
/// floats), every `accepted[s]` in 0 ..= `n_tokens`, and the row rule of the module docs.
#[inline(always)]
unsafe fn run(p: &abi::GatedDeltaNetReplayParams, head: u32, seq: u32, group: u32, warp: u32, lane: u32) {
    let (head, seq, lane_usize) = (head as usize, seq as usize, lane as usize);
    let col = (group * GDN_WARPS + warp) as usize;
    // SAFETY: seq < n_s: an element of the validated index view, never written.
    let a = unsafe { index_at(p.accepted, p.accepted_stride, seq) };
    if a > p.n_tokens {
        // The host validated a ≤ T; a violated contract aborts the launch.
        trap();
    }
    if a == 0 {
        return;
    }
    // The host validated n_key_heads ≥ 1; `checked_rem` keeps core's divide-by-zero panic path
    // out of the PTX.
    let Some(key_head) = (head as u32).checked_rem(p.n_key_heads) else { trap() };
    let key_head = key_head as usize;
    // SAFETY: seq < n_s: elements of the validated index views, each a row of the cache, never
    // written; the cast of a non-negative i32 is lossless.
    let (source, dest) =
        unsafe { (index_at(p.source_rows, p.source_rows_stride, seq) as usize, index_at(p.dest_rows, p.dest_rows_stride, seq) as usize) };
    let cache = p.cache as usize as *mut f32;
    // This column's elements in a row's head block: (h·D + col)·D + i.
    let column = (head * GDN_HEAD_DIM + col) * GDN_HEAD_DIM;
    let row_stride = p.cache_row as usize;
    // SAFETY: this lane's elements (i, col, head) of row `source`, inside the validated cache
    // view; read before this thread's only store, and no other thread writes them (module docs).
    let mut s = unsafe { load_lane_coherent(cache.wrapping_add(source * row_stride + column), lane_usize) };
    let mut src = LogSource {
        k: p.k.at(key_head, seq),
        v: p.v.at(head, seq),
        g: p.g.at(head, seq),
        beta: p.beta.at(head, seq),
        lane,
        col: col as u32,
        k_token: p.k.token as usize,
        v_token: p.v.token as usize,
        g_token: p.g.token as usize,
        beta_token: p.beta.token as usize,
    };
    // [speed] Token t + 1's inputs are loaded before token t's arithmetic (pure loads moved
    // earlier, as GATED_DELTA_NET's `run_at` does; the float operations are unchanged); the last
    // token is peeled off so that every loaded value is used.
    // SAFETY (loads): token t < a ≤ T of the validated log views, written by nobody.
    let mut cur = unsafe { src.load() };
    let mut t = 1;
    while t < a {
        src.advance();
        // SAFETY: token t < a ≤ T of the validated log views, written by nobody.
        let next = unsafe { src.load() };
        // SAFETY: every lane of the warp runs the same trip count (a is the warp's) with no
        // early exit.
        unsafe { token_update(&mut s, &cur.k, cur.v, decay(cur.g), cur.beta) };
        cur = next;
        t += 1;
    }
    // SAFETY: as above.
    unsafe { token_update(&mut s, &cur.k, cur.v, decay(cur.g), cur.beta) };
    // SAFETY: this lane's elements (i, col, head) of row `dest` (index `column + lane + 32·r`),
    // inside the validated cache view, written by this thread only (module docs).
    unsafe { store_f32x4_stride32(cache.wrapping_add(dest * row_stride), (column + lane_usize) as u32, &s) };
}

/// Entry point; see the module docs.
///
/// # Safety
/// As [`run`]: launched with block (32, [`GDN_WARPS`], 1) and grid (H_v, n_s, D / [`GDN_WARPS`])
/// on parameters the host validated.
#[cfg(target_arch = "nvptx64")]
#[unsafe(export_name = crate::abi::entry_name!(gated_delta_net_replay))]
pub unsafe extern "ptx-kernel" fn gated_delta_net_replay_f32_d128(p: abi::GatedDeltaNetReplayParams) {
    // SAFETY: forwarded from the launch contract (the indices are the launch's own).
    unsafe { run(&p, block_idx_x(), block_idx_y(), block_idx_z(), thread_idx_y(), thread_idx_x()) }
}

const _: () = assert!(ROWS_PER_LANE == 4, "store_f32x4_stride32 stores four rows a lane");
