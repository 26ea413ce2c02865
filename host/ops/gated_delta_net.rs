//! GATED_DELTA_NET (scalar gate, D = 128) — kernel: `kernels-gpu/src/gated_delta_net.rs`,
//! reference: [`crate::reference::gated_delta_net`], spec §2.10.

use super::index_rules::{IndexRules, IndexView, MAX_TOUCHES, RowReaders, Values};
use super::{Op, PlainLaunch, check};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, KernelArg, LaunchDims, ParamBlock, PreparedLaunch};
use crate::kernels::abi;
use crate::memory::{DeviceMemory, HostMemory, KernelAddresses, Memory};
use crate::reference::math::Mufu;
use crate::tensor::{DType, Tensor};

const OP: &str = "GATED_DELTA_NET";
const D: usize = abi::GDN_HEAD_DIM;
// SAFETY: `abi::GatedDeltaNetParams` is `#[repr(C)]`: 31 u64 fields, then three u32 and one
// f32, 264 bytes, alignment 8, no padding bytes; it is the type the GATED_DELTA_NET entry takes
// by value (the same abi.rs is compiled into both).
unsafe impl crate::gpu::KernelParams for abi::GatedDeltaNetParams {}

/// Grid y (sequences) limit of a launch.
const MAX_GRID_YZ: usize = 65535;

/// The gated delta rule over n_t tokens for every value head h and sequence s (key head
/// `h mod H_k`), in ggml's CUDA order (spec §2.10):
/// `γ = expf(g)`, `δ = β·(v − γ·Sᵀk)`, `S ← γ·S + k·δᵀ`, `out = (Sᵀq)·scale`, scale = 1/√D.
///
/// - `q`, `k`: F32 ne [D, H_k, n_t, n_s] (rows contiguous, any other strides, independently);
/// - `v`: F32 ne [D, H_v, n_t, n_s] (rows contiguous, any strides — in the layer a view of the
///   conv output);
/// - `g`, `beta`: F32 ne [1, H_v, n_t, n_s] (any strides);
/// - `state_in`: F32 ne [D, D, H_v, n_s]; element (i, col, h, s) = `S[i][col]` of head h, i.e. the
///   k index i is fastest. The layer passes it contiguous; rows contiguous and any other
///   strides are accepted;
/// - `out`: F32 ne [D, H_v, n_t, n_s], rows contiguous (any other strides): attention output,
///   element (col, h, t, s);
/// - `states`: F32 ne [D·D·H_v, n_s, K, 1], dim 0 contiguous: slot k of sequence s starts at
///   `nb[1]·s + nb[2]·k` and holds element (i, col, h) at (h·D + col)·D + i. Slot k = the state
///   after token n_t−1−k; ONLY slots k < min(n_t, K) are written (the others keep their bytes).
///   Unfused layout: the tail of ggml's result tensor (slot stride D·D·H_v·n_s floats);
///   cache-fused layout: rows of the ssm cache (slot stride = M rows). Same kernel.
///
/// D must be 128 (else [`Error::Unsupported`]); H_v need not be a multiple of H_k (see
/// [`GdnShape::n_key_heads`]); 1 ≤ K ≤ 17 (else Unsupported); n_s ≤ 65535. `out` and `states`
/// are disjoint from every input and from each other, and neither has two elements sharing
/// bytes.
#[derive(Clone, Debug)]
pub struct GatedDeltaNet {
    pub q: Tensor,
    pub k: Tensor,
    pub v: Tensor,
    pub g: Tensor,
    pub beta: Tensor,
    pub state_in: Tensor,
    pub out: Tensor,
    pub states: Tensor,
}

/// The sizes a valid [`GatedDeltaNet`] runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GdnShape {
    /// H_k: heads of q and k. Value head h reads key head h mod H_k (ggml's rule, the kernel's
    /// and the reference's), which is defined for any H_v ≥ 1, so the op accepts H_v that is
    /// not a multiple of H_k (and H_k > H_v): the suite's GATED_DELTA_NET cases include
    /// (H_k, H_v) = (2, 3), (4, 6), (3, 5) and (3, 2). A Hugging Face config is stricter:
    /// [`crate::engine::hf::GdnConfig::shape`] refuses `linear_num_value_heads` not a multiple
    /// of `linear_num_key_heads`, the ratio its key-head mappings
    /// ([`crate::engine::hf::KeyHeads`]) are defined by.
    pub n_key_heads: usize,
    /// H_v: heads of v, g, beta, the state and the output.
    pub n_heads: usize,
    pub n_tokens: usize,
    pub n_seqs: usize,
    /// K: snapshot slots in `states`.
    pub n_slots: usize,
}

/// The attention scale `1.0f / sqrtf(D)` as ggml's host code computes it (IEEE f32 sqrt and
/// division): 0x3DB504F3 for D = 128.
pub fn attention_scale() -> f32 {
    1.0f32 / (D as f32).sqrt()
}

impl GatedDeltaNet {
    /// Validates the op and returns its sizes.
    pub fn check(&self, mem: &dyn Memory) -> Result<GdnShape> {
        let views = Views { q: &self.q, k: &self.k, v: &self.v, g: &self.g, beta: &self.beta, out: &self.out, states: Some(&self.states) };
        check_views(OP, &views, StateSource::In(&self.state_in), mem)
    }
}

/// The views GATED_DELTA_NET and GATED_DELTA_NET_FROM_CACHE share.
pub(crate) struct Views<'a> {
    pub q: &'a Tensor,
    pub k: &'a Tensor,
    pub v: &'a Tensor,
    pub g: &'a Tensor,
    pub beta: &'a Tensor,
    pub out: &'a Tensor,
    /// `None`: no state slot at all (\[replay\] GATED_DELTA_NET_REPLAY_VERIFY's verify, K = 0).
    pub states: Option<&'a Tensor>,
}

/// Where the initial state comes from.
pub(crate) enum StateSource<'a> {
    /// GATED_DELTA_NET: `state_in` [D, D, H_v, n_s].
    In(&'a Tensor),
    /// GATED_DELTA_NET_FROM_CACHE: rows `source_rows` of the ssm cache.
    FromCache { cache: &'a Tensor, source_rows: &'a Tensor },
}

/// GATED_DELTA_NET's validation (errors named as `op`'s), with the state from `state`; the
/// checks of [`StateSource::In`] are exactly GatedDeltaNet's, in its order.
pub(crate) fn check_views(op: &'static str, t: &Views, state: StateSource, mem: &dyn Memory) -> Result<GdnShape> {
    check::tensor(op, "q", t.q, DType::F32, mem)?;
    let [d, n_key_heads, n_tokens, n_seqs] = t.q.ne();
    if d != D {
        return Err(Error::Unsupported { op, what: format!("head dimension D = {d} (the kernel is built for D = {D})") });
    }
    if n_seqs > MAX_GRID_YZ {
        return Err(Error::Unsupported { op, what: format!("n_s = {n_seqs} sequences (grid y ≤ {MAX_GRID_YZ})") });
    }
    let n_slots = t.states.map_or(0, |s| s.ne()[2]);
    if t.states.is_some() && !(1..=abi::GDN_MAX_SLOTS).contains(&n_slots) {
        return Err(Error::Unsupported {
            op,
            what: format!("K = {n_slots} snapshot slots (1 ≤ K ≤ {}: R ≤ {} rollback groups)", abi::GDN_MAX_SLOTS, abi::GDN_MAX_SLOTS - 1),
        });
    }
    check::tensor(op, "k", t.k, DType::F32, mem)?;
    check::shape(op, "k", t.k, t.q.ne())?;
    check::tensor(op, "v", t.v, DType::F32, mem)?;
    let n_heads = t.v.ne()[1];
    check::shape(op, "v", t.v, [D, n_heads, n_tokens, n_seqs])?;
    for (arg, x) in [("g", t.g), ("beta", t.beta)] {
        check::tensor(op, arg, x, DType::F32, mem)?;
        if arg == "g" && x.ne() == [D, n_heads, n_tokens, n_seqs] {
            return Err(Error::Unsupported { op, what: "a vector gate (g ne[0] = D, ggml's KDA branch)".into() });
        }
        check::shape(op, arg, x, [1, n_heads, n_tokens, n_seqs])?;
    }
    // FromCache: the rows each sequence reads (byte views of whole cache rows).
    let mut read_rows: Vec<Tensor> = Vec::new();
    match state {
        StateSource::In(state_in) => {
            check::tensor(op, "state_in", state_in, DType::F32, mem)?;
            check::shape(op, "state_in", state_in, [D, D, n_heads, n_seqs])?;
        }
        StateSource::FromCache { cache, source_rows } => {
            let row_len = check::product(op, "v", "state floats per row D·D·H_v", &[D, D, n_heads])?;
            check::tensor(op, "ssm_cache", cache, DType::F32, mem)?;
            let n_rows = cache.ne()[1];
            check::shape(op, "ssm_cache", cache, [row_len, n_rows, 1, 1])?;
            check::rows_contiguous(op, "ssm_cache", cache)?;
            check::tensor(op, "source_rows", source_rows, DType::I32, mem)?;
            check::shape(op, "source_rows", source_rows, [n_seqs, 1, 1, 1])?;
            read_rows = source_row_views(op, cache, source_rows, mem)?;
        }
    }
    check::output(op, "out", t.out, DType::F32, mem)?;
    check::shape(op, "out", t.out, [D, n_heads, n_tokens, n_seqs])?;
    if let Some(states) = t.states {
        check::output(op, "states", states, DType::F32, mem)?;
        let slot_len = check::product(op, "v", "state floats per slot D·D·H_v", &[D, D, n_heads])?;
        check::shape(op, "states", states, [slot_len, n_seqs, n_slots, 1])?;
    }

    for (arg, x) in [("q", t.q), ("k", t.k), ("v", t.v)] {
        check::rows_contiguous(op, arg, x)?;
    }
    if let StateSource::In(state_in) = state {
        check::rows_contiguous(op, "state_in", state_in)?;
    }
    check::rows_contiguous(op, "out", t.out)?;
    if let Some(states) = t.states {
        check::rows_contiguous(op, "states", states)?;
        check::disjoint(op, "out", t.out, "states", states)?;
    }
    let mut inputs = vec![("q", t.q), ("k", t.k), ("v", t.v), ("g", t.g), ("beta", t.beta)];
    match state {
        StateSource::In(state_in) => inputs.push(("state_in", state_in)),
        StateSource::FromCache { source_rows, .. } => inputs.push(("source_rows", source_rows)),
    }
    for (arg, x) in inputs {
        check::disjoint(op, "out", t.out, arg, x)?;
        if let Some(states) = t.states {
            check::disjoint(op, "states", states, arg, x)?;
        }
    }
    if let StateSource::FromCache { cache, .. } = state {
        check::disjoint(op, "out", t.out, "ssm_cache", cache)?;
        if let Some(states) = t.states {
            states_over_read_rows(op, states, &read_rows, n_tokens.min(n_slots))?;
        }
    }
    check::fits_u32(op, "value heads", n_heads)?;
    check::fits_u32(op, "key heads", n_key_heads)?;
    check::fits_u32(op, "tokens", n_tokens)?;
    Ok(GdnShape { n_key_heads, n_heads, n_tokens, n_seqs, n_slots })
}

/// The cache rows `source_rows` selects, as [row_len, 1, 1, 1] views of a validated `cache`
/// (F32 [row_len, n_rows], rows contiguous): the rule that depends on the index values, each
/// in 0..n_rows.
fn source_row_views(op: &'static str, cache: &Tensor, source_rows: &Tensor, mem: &dyn Memory) -> Result<Vec<Tensor>> {
    let [row_len, n_rows, ..] = cache.ne();
    let values = mem.index_values(source_rows).ok_or_else(|| source_rows_not_an_index_buffer(op, source_rows))?;
    let mut read_rows = Vec::with_capacity(values.len());
    for (position, &index) in values.iter().enumerate() {
        if index < 0 || index as usize >= n_rows {
            return Err(source_row_out_of_range(op, position, index, n_rows));
        }
        // Inside the validated cache view: offset + index·nb[1] fits (the view's end does).
        read_rows.push(cache.view([row_len, 1, 1, 1], cache.layout.nb, index as usize * cache.layout.nb[1]));
    }
    Ok(read_rows)
}

/// GATED_DELTA_NET_FROM_CACHE's one admitted overlap (see the kernel's docs, "Reading the state
/// from the cache"): a slot row that the kernel writes (slots k < `written`) may share bytes with
/// a row read only when it is the row read by the *same* sequence, starting at the same byte
/// (then each element overlaps exactly its own (i, col, h, s) element, which the thread that
/// writes it has read before). Any other contact — another sequence's read row, a shifted or
/// partial overlap — is [`Error::Aliasing`]. Rows are contiguous runs of the same length, so the
/// byte ranges decide.
///
/// This is the rule as the full validation states it (each written slot against the sorted
/// rows read); a plan runs it prepared once ([`FromCacheIndexRules`]: the rows each sequence
/// may read, worked out from the views), and `tests/plan.rs` holds that to this verdict.
fn states_over_read_rows(op: &'static str, states: &Tensor, read_rows: &[Tensor], written: usize) -> Result<()> {
    let [row_len, n_seqs, ..] = states.ne();
    let mut reads: Vec<(usize, usize, &Tensor)> =
        read_rows.iter().enumerate().filter(|(_, r)| r.buffer == states.buffer).map(|(s, r)| (r.layout.offset, s, r)).collect();
    if reads.is_empty() {
        return Ok(());
    }
    reads.sort_unstable_by_key(|&(start, s, _)| (start, s));
    let row_bytes = row_len * 4;
    for s in 0..n_seqs {
        for k in 0..written {
            // Inside the validated states view.
            let rel = s * states.layout.nb[1] + k * states.layout.nb[2];
            let slot = states.view([row_len, 1, 1, 1], states.layout.nb, rel);
            let start = slot.layout.offset;
            // Read rows that may touch [start, start + row_bytes): those starting after
            // start − row_bytes.
            let first = reads.partition_point(|&(r, _, _)| r + row_bytes <= start);
            for &(r_start, r_seq, r) in &reads[first..] {
                if r_start >= start + row_bytes {
                    break;
                }
                if !slot.overlaps(r) {
                    continue;
                }
                if r_start != start || r_seq != s {
                    return Err(slot_over_another_row(op));
                }
            }
        }
    }
    Ok(())
}

// The index rules' errors, one constructor each, so the per-call and the prepared rules cannot
// word them differently.
fn source_rows_not_an_index_buffer(op: &'static str, source_rows: &Tensor) -> Error {
    Error::Invalid {
        op,
        what: format!("`source_rows` (buffer {}) is not an index buffer: its values must be known to the host", source_rows.buffer.0),
    }
}

fn source_row_out_of_range(op: &'static str, position: usize, index: i32, n_rows: usize) -> Error {
    Error::IndexOutOfRange { op, arg: "source_rows", position, index: index as i64, rows: n_rows }
}

fn slot_over_another_row(op: &'static str) -> Error {
    Error::Aliasing {
        op,
        a: "states",
        b: "ssm_cache",
        why: "a written state slot overlaps a row read, and not exactly as the same sequence's own read row",
    }
}

/// [host-cost] GATED_DELTA_NET_FROM_CACHE's index rules prepared for a plan. Which sequence
/// may read cache row x depends only on the views: row x's bytes are
/// [c₀ + x·c₁, c₀ + x·c₁ + row) (c₀, c₁: the cache view's offset and row stride), and a written
/// slot (s, k) at byte w allows it to sequence s alone when c₀ + x·c₁ = w, to nobody when the
/// two ranges merely overlap. So the slots' rows go into a [`RowReaders`] table once (each slot
/// touches the rows x with |c₀ + x·c₁ − w| < row: at most two for a cache whose rows do not
/// overlap), and a step reads each value once: in range, then one load — where
/// `states_over_read_rows` builds a view per written slot (n_s·K of them) and binary-searches
/// the rows read for each. Views the table does not cover (never a real step's) keep the
/// per-call rules.
#[derive(Clone, Debug)]
pub(crate) enum FromCacheIndexRules {
    Table(FromCacheTable),
    PerCall(Box<GatedDeltaNetFromCache>),
}

#[derive(Clone, Debug)]
pub(crate) struct FromCacheTable {
    pub index: IndexView,
    n_rows: usize,
    /// `None`: no written slot can meet a row read (the cache in another buffer, or no slot
    /// written).
    readers: Option<RowReaders>,
}

impl FromCacheIndexRules {
    pub fn new(op: &GatedDeltaNetFromCache) -> FromCacheIndexRules {
        Self::table(op).map_or_else(|| FromCacheIndexRules::PerCall(Box::new(op.clone())), FromCacheIndexRules::Table)
    }

    fn table(op: &GatedDeltaNetFromCache) -> Option<FromCacheTable> {
        let (cache, states) = (&op.ssm_cache.layout, &op.states.layout);
        let index = IndexView::new(&op.source_rows)?;
        let [row_len, n_rows, ..] = cache.ne;
        let [slot_len, n_seqs, ..] = states.ne;
        let written = op.q.ne()[2].min(states.ne[2]);
        // What `states_over_read_rows` takes for granted of validated views: rows of one length,
        // each one contiguous byte run (then the byte ranges below are the views' own).
        let contiguous = |l: &crate::tensor::Layout| l.ne[0] <= 1 || l.nb[0] == 4;
        if row_len != slot_len || !contiguous(cache) || !contiguous(states) || index.tensor.ne()[0] != n_seqs {
            return None;
        }
        let row = row_len.checked_mul(4)?;
        if op.ssm_cache.buffer != op.states.buffer || row == 0 || written == 0 || n_seqs == 0 {
            return Some(FromCacheTable { index, n_rows, readers: None });
        }
        // Rows x of slot byte w: c₀ + x·c₁ ∈ (w − row, w + row), x < n_rows (rows past the
        // cache fail the range rule first). In i128: every input is below 2^64.
        let (c0, c1, row_i) = (cache.offset as i128, cache.nb[1] as i128, row as i128);
        let rows_near = |w: i128| -> (i128, i128) {
            let (lo, hi) = if c1 == 0 {
                if (c0 - w).abs() < row_i { (0, n_rows as i128) } else { (0, 0) }
            } else {
                // Smallest x with c₀ + x·c₁ > w − row, and smallest with c₀ + x·c₁ ≥ w + row.
                ((w - row_i - c0).div_euclid(c1) + 1, -((c0 - w - row_i).div_euclid(c1)))
            };
            (lo.max(0), hi.min(n_rows as i128))
        };
        let mut touches = Vec::new();
        for s in 0..n_seqs {
            for k in 0..written {
                let w = states.offset.checked_add(s.checked_mul(states.nb[1])?)?.checked_add(k.checked_mul(states.nb[2])?)?;
                let (lo, hi) = rows_near(w as i128);
                if hi - lo > (MAX_TOUCHES - touches.len()) as i128 {
                    return None;
                }
                for x in lo..hi {
                    // x < n_rows: below 2^64, as c₁ is, so the product fits i128 unless the
                    // view's rows do not fit the address space (refused by validation).
                    let start = c0 + x.checked_mul(c1)?;
                    // Exactly the overlap of [start, start + row) and [w, w + row).
                    if (start - w as i128).abs() < row_i {
                        touches.push((x as usize, (start == w as i128).then_some(s)));
                    }
                }
            }
        }
        let readers = RowReaders::from_touches(&touches)?;
        Some(FromCacheTable { index, n_rows, readers: Some(readers) })
    }
}

impl FromCacheTable {
    /// The first rule (in range) on one value: the row, or the error.
    #[inline]
    pub fn range(&self, position: usize, index: i32) -> Result<usize> {
        match usize::try_from(index) {
            Ok(row) if row < self.n_rows => Ok(row),
            _ => Err(source_row_out_of_range(FROM_CACHE_OP, position, index, self.n_rows)),
        }
    }

    /// The second rule on one value in range: no written slot but sequence `position`'s own,
    /// start for start, meets `row`.
    #[inline]
    pub fn may_read(&self, position: usize, row: usize) -> bool {
        self.readers.as_ref().is_none_or(|r| r.may_read(row, position))
    }

    pub fn slot_over_another_row(&self) -> Error {
        slot_over_another_row(FROM_CACHE_OP)
    }

    pub fn not_an_index_buffer(&self) -> Error {
        source_rows_not_an_index_buffer(FROM_CACHE_OP, &self.index.tensor)
    }

    /// Both rules in the full validation's order (every value in range, then the slots) over
    /// values already read.
    pub fn check_values(&self, values: &Values) -> Result<()> {
        values.range_then_readers(|p, v| self.range(p, v), |p, row| self.may_read(p, row), || self.slot_over_another_row())
    }
}

impl IndexRules for FromCacheIndexRules {
    fn check(&self, mem: &dyn Memory) -> Result<()> {
        match self {
            FromCacheIndexRules::Table(t) => t.check_values(&t.index.read(mem).ok_or_else(|| t.not_an_index_buffer())?),
            FromCacheIndexRules::PerCall(op) => op.check_indices(mem),
        }
    }
}

impl Op for GatedDeltaNet {
    fn name(&self) -> &'static str {
        OP
    }

    fn validate(&self, mem: &dyn Memory) -> Result<()> {
        self.check(mem).map(|_| ())
    }

    fn prepare(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<PreparedLaunch> {
        let shape = self.check(mem)?;
        let [_, in_col, in_head, in_seq] = check::elem_strides(&self.state_in);
        let params = gdn_params(self, &shape, mem, [in_col, in_head, in_seq]);
        let dims = launch_dims(shape.n_heads, shape.n_seqs);
        let args = [KernelArg::Params(ParamBlock::of(&params)?)];
        // SAFETY: `check` proved every view lies inside its buffer for the grid (H_v, n_s,
        // D/4) × block (32, 4) with D = 128, key heads < H_k, n_t tokens and K slots (D·D·H_v
        // floats per slot row); that out and states overlap no input, each other, or
        // themselves; and `params` is the entry's parameter struct.
        unsafe { gpu.prepare(entry(), dims, &args) }
    }

    fn reference(&self, mem: &mut HostMemory, mufu: &mut dyn Mufu) -> Result<()> {
        self.check(mem)?;
        crate::reference::gated_delta_net::gated_delta_net(&reference_views(self), &self.state_in, attention_scale(), mem, mufu)?;
        Ok(())
    }

    fn inputs(&self) -> Vec<Tensor> {
        vec![self.q, self.k, self.v, self.g, self.beta, self.state_in]
    }

    fn outputs(&self) -> Vec<Tensor> {
        vec![self.out, self.states]
    }

    /// `out`, and only the slots k < min(n_t, K) of `states` (the others keep their bytes).
    fn must_write(&self) -> Vec<Tensor> {
        let s = &self.states;
        let written = s.ne()[2].min(self.q.ne()[2]);
        vec![self.out, s.view([s.ne()[0], s.ne()[1], written, s.ne()[3]], s.layout.nb, 0)]
    }
}

// ---- [gdn-from-cache] GATED_DELTA_NET_FROM_CACHE ----

const FROM_CACHE_OP: &str = "GATED_DELTA_NET_FROM_CACHE";

// SAFETY: `abi::GatedDeltaNetFromCacheParams` is `#[repr(C)]`: the 264-byte GatedDeltaNetParams
// (alignment 8, no padding) then two u64: 280 bytes, alignment 8, no padding bytes; it is the
// type the GATED_DELTA_NET_FROM_CACHE entry takes by value (the same abi.rs is compiled into
// both).
unsafe impl crate::gpu::KernelParams for abi::GatedDeltaNetFromCacheParams {}

/// GET_ROWS(ssm_cache, source_rows) → ssm_state followed by [`GatedDeltaNet`] with
/// `state_in` = ssm_state as [D, D, H_v, n_s], in one launch: the kernel reads sequence s's
/// initial state straight from cache row `source_rows[s]` (the GET_ROWS copy disappears), bits
/// identical. Kernel: `gated_delta_net_from_cache_f32_d128` (`kernels-gpu/src/gated_delta_net.rs`,
/// GATED_DELTA_NET's body, coherent state loads); reference: the selected rows read first, then
/// the GATED_DELTA_NET reference.
///
/// Valid as GatedDeltaNet is (same errors, named as this op's), with `ssm_cache` F32
/// \[D·D·H_v, n_rows, 1, 1\] rows contiguous and `source_rows` I32 \[n_s\] in an index buffer, every
/// value in 0..n_rows ([`Error::IndexOutOfRange`]). `out` overlaps nothing; `states` overlaps no
/// input but the cache, and the cache only where the kernel does not read it — or, for a slot the
/// kernel writes, exactly the row its own sequence reads (the layer's "read among written" case);
/// every other overlap is [`Error::Aliasing`].
#[derive(Clone, Debug)]
pub struct GatedDeltaNetFromCache {
    pub q: Tensor,
    pub k: Tensor,
    pub v: Tensor,
    pub g: Tensor,
    pub beta: Tensor,
    /// F32 \[D·D·H_v, n_rows, 1, 1\], rows contiguous (nb\[0\] = 4): sequence s's initial state is row source_rows\[s\],
    /// element (i, col, h) at (h·D + col)·D + i of the row — exactly what GET_ROWS copies and GDN reads.
    pub ssm_cache: Tensor,
    /// I32 \[n_s\]: GET_ROWS' index tensor, read by the kernel on the device like GET_ROWS reads it
    /// (the host validates the values it knows, as GET_ROWS' and GDN_CONV_CHAIN's validation do).
    pub source_rows: Tensor,
    pub out: Tensor,
    pub states: Tensor,
}

impl GatedDeltaNetFromCache {
    /// GATED_DELTA_NET `gdn` reading its initial states straight from rows `source_rows` of
    /// `ssm_cache` (what the `state_read` fusion makes of GET_ROWS + GATED_DELTA_NET).
    pub fn from_cache(gdn: &GatedDeltaNet, ssm_cache: Tensor, source_rows: Tensor) -> GatedDeltaNetFromCache {
        GatedDeltaNetFromCache {
            q: gdn.q,
            k: gdn.k,
            v: gdn.v,
            g: gdn.g,
            beta: gdn.beta,
            ssm_cache,
            source_rows,
            out: gdn.out,
            states: gdn.states,
        }
    }

    /// Validates the op and returns its sizes.
    pub fn check(&self, mem: &dyn Memory) -> Result<GdnShape> {
        let views = Views { q: &self.q, k: &self.k, v: &self.v, g: &self.g, beta: &self.beta, out: &self.out, states: Some(&self.states) };
        check_views(FROM_CACHE_OP, &views, StateSource::FromCache { cache: &self.ssm_cache, source_rows: &self.source_rows }, mem)
    }

    /// What the op launches once `mem` validated it ([`Self::check`]): the entry
    /// (`from_cache_launch`), its shape, and the parameters over `addresses`.
    pub fn launch(&self, mem: &dyn Memory, addresses: &dyn KernelAddresses) -> Result<PlainLaunch<abi::GatedDeltaNetFromCacheParams>> {
        let shape = self.check(mem)?;
        let (entry, dims) = from_cache_launch(&shape);
        Ok(PlainLaunch { entry, dims, params: self.params(&shape, addresses) })
    }

    /// The kernel's parameters for a validated op (`shape` from [`GatedDeltaNetFromCache::check`]).
    pub(crate) fn params(&self, shape: &GdnShape, mem: &dyn KernelAddresses) -> abi::GatedDeltaNetFromCacheParams {
        let [_, cache_row, ..] = check::elem_strides(&self.ssm_cache);
        let [source_rows_stride, ..] = check::elem_strides(&self.source_rows);
        let gdn = gdn_params(&self.as_gated_delta_net(), shape, mem, [D as u64, (D * D) as u64, cache_row]);
        abi::GatedDeltaNetFromCacheParams { gdn, source_rows: mem.address(&self.source_rows), source_rows_stride }
    }

    /// The GATED_DELTA_NET views of this op (for the shared reference), `state_in` = the cache
    /// (not read: the reference takes the state from the gathered rows).
    pub fn as_gated_delta_net(&self) -> GatedDeltaNet {
        GatedDeltaNet {
            q: self.q,
            k: self.k,
            v: self.v,
            g: self.g,
            beta: self.beta,
            state_in: self.ssm_cache,
            out: self.out,
            states: self.states,
        }
    }
}

impl Op for GatedDeltaNetFromCache {
    fn name(&self) -> &'static str {
        FROM_CACHE_OP
    }

    fn validate(&self, mem: &dyn Memory) -> Result<()> {
        self.check(mem).map(|_| ())
    }

    /// The rules that read the source rows: each in range, and no written state slot on a row
    /// another sequence reads (the slots written: min(n_t, K)), as the full validation states
    /// them.
    fn check_indices(&self, mem: &dyn Memory) -> Result<()> {
        let read_rows = source_row_views(FROM_CACHE_OP, &self.ssm_cache, &self.source_rows, mem)?;
        states_over_read_rows(FROM_CACHE_OP, &self.states, &read_rows, self.q.ne()[2].min(self.states.ne()[2]))
    }

    /// The same rules prepared once (`FromCacheIndexRules`: a table of the rows each sequence
    /// may read, made from the views).
    fn index_rules(&self) -> Box<dyn IndexRules> {
        Box::new(FromCacheIndexRules::new(self))
    }

    fn prepare(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<PreparedLaunch> {
        let PlainLaunch { entry, dims, params } = self.launch(mem, mem)?;
        let args = [KernelArg::Params(ParamBlock::of(&params)?)];
        // SAFETY: `check` proved every view but the state lies inside its buffer for the grid
        // (H_v, n_s, D/4) × block (32, 4) as for GATED_DELTA_NET — the columns the batched
        // layout's grid (H_v, n_s, D/32) × block (32, 4) reaches are the same, and it gets its
        // dynamic shared memory for n_t ≤ BATCH_GDN_MAX_TOKENS tokens (`from_cache_launch`);
        // every source_rows[s] (s < n_s)
        // a row of the cache, whose rows hold D·D·H_v contiguous floats (element (i, col, h) at
        // i + col·D + h·D·D, rows cache_row apart: the strides passed); out overlapping nothing;
        // states overlapping no input but the cache, and a row read only as that same sequence's
        // own row, start for start (the kernel's race-free case, see its docs); and `params` is
        // the entry's parameter struct.
        unsafe { gpu.prepare(entry, dims, &args) }
    }

    fn reference(&self, mem: &mut HostMemory, mufu: &mut dyn Mufu) -> Result<()> {
        self.check(mem)?;
        let rows = mem
            .index_values(&self.source_rows)
            .ok_or_else(|| Error::Invalid { op: FROM_CACHE_OP, what: "`source_rows` is not an index buffer".into() })?;
        let views = reference_views(&self.as_gated_delta_net());
        crate::reference::gated_delta_net::gated_delta_net_from_cache(&views, &self.ssm_cache, &rows, attention_scale(), mem, mufu)?;
        Ok(())
    }

    fn inputs(&self) -> Vec<Tensor> {
        vec![self.q, self.k, self.v, self.g, self.beta, self.ssm_cache, self.source_rows]
    }

    fn outputs(&self) -> Vec<Tensor> {
        vec![self.out, self.states]
    }

    /// `out`, and only the slots k < min(n_t, K) of `states`, as [`GatedDeltaNet::must_write`].
    fn must_write(&self) -> Vec<Tensor> {
        self.as_gated_delta_net().must_write()
    }
}

/// \[seq-batch\] Fewest sequences for which GATED_DELTA_NET_FROM_CACHE runs the batched layout
/// (eight columns a warp, `GATED_DELTA_NET_FROM_CACHE_BATCH_ENTRY`); below it one warp a column
/// keeps more warps on a small grid.
pub const FROM_CACHE_BATCH_MIN_SEQS: usize = 2;

/// \[seq-batch\] GATED_DELTA_NET_FROM_CACHE's entry and launch shape for a validated `shape`: the
/// batched layout from [`FROM_CACHE_BATCH_MIN_SEQS`] sequences on when every sequence's tokens
/// fit its stage (1 ≤ n_t ≤ `BATCH_GDN_MAX_TOKENS`), else one warp a column. Same bits either
/// way.
pub(crate) fn from_cache_launch(shape: &GdnShape) -> (&'static str, LaunchDims) {
    let fits = (1..=abi::BATCH_GDN_MAX_TOKENS).contains(&shape.n_tokens);
    if fits && shape.n_seqs >= FROM_CACHE_BATCH_MIN_SEQS {
        let grid = (shape.n_heads as u32, shape.n_seqs as u32, D as u32 / abi::BATCH_GDN_BLOCK_COLUMNS);
        let dims = LaunchDims::new(grid, (32, abi::GDN_WARPS, 1)).with_shared_bytes(abi::batch_token_stage_bytes(shape.n_tokens));
        (abi::GATED_DELTA_NET_FROM_CACHE_BATCH_ENTRY, dims)
    } else {
        (abi::GATED_DELTA_NET_FROM_CACHE_ENTRY, launch_dims(shape.n_heads, shape.n_seqs))
    }
}

/// The views the shared CPU reference reads and writes (`state_in` aside).
pub(crate) fn reference_views(op: &GatedDeltaNet) -> crate::reference::gated_delta_net::GdnViews {
    let GatedDeltaNet { q, k, v, g, beta, out, states, .. } = *op;
    crate::reference::gated_delta_net::GdnViews { q, k, v, g, beta, out, states }
}

/// GATED_DELTA_NET's parameters for `op`'s views (validated, `shape` from the check), the
/// state's element strides (col, head, seq) given: `op.state_in`'s, or the cache layout's.
fn gdn_params(
    op: &GatedDeltaNet,
    shape: &GdnShape,
    mem: &dyn KernelAddresses,
    [in_col, in_head, in_seq]: [u64; 3],
) -> abi::GatedDeltaNetParams {
    let [_, q_head, q_token, q_seq] = check::elem_strides(&op.q);
    let [_, k_head, k_token, k_seq] = check::elem_strides(&op.k);
    let [_, v_head, v_token, v_seq] = check::elem_strides(&op.v);
    let [_, g_head, g_token, g_seq] = check::elem_strides(&op.g);
    let [_, beta_head, beta_token, beta_seq] = check::elem_strides(&op.beta);
    let [_, out_head, out_token, out_seq] = check::elem_strides(&op.out);
    let [_, states_seq, states_slot, _] = check::elem_strides(&op.states);
    abi::GatedDeltaNetParams {
        q: mem.address(&op.q),
        q_head,
        q_token,
        q_seq,
        k: mem.address(&op.k),
        k_head,
        k_token,
        k_seq,
        v: mem.address(&op.v),
        v_head,
        v_token,
        v_seq,
        g: mem.address(&op.g),
        g_head,
        g_token,
        g_seq,
        beta: mem.address(&op.beta),
        beta_head,
        beta_token,
        beta_seq,
        state_in: mem.address(&op.state_in),
        in_col,
        in_head,
        in_seq,
        out: mem.address(&op.out),
        out_head,
        out_token,
        out_seq,
        states: mem.address(&op.states),
        states_seq,
        states_slot,
        n_tokens: shape.n_tokens as u32,
        n_key_heads: shape.n_key_heads as u32,
        n_slots: shape.n_slots as u32,
        scale: attention_scale(),
    }
}

/// GATED_DELTA_NET's launch shape (also GATED_DELTA_NET_FROM_CACHE's and \[replay\]
/// GATED_DELTA_NET_REPLAY's): grid (H_v, n_s, D / 4), block (32, 4, 1) — one warp per value
/// column. The sizes were validated to fit u32 (H_v) and grid y (n_s ≤ 65535).
pub(crate) fn launch_dims(n_heads: usize, n_seqs: usize) -> LaunchDims {
    LaunchDims::new((n_heads as u32, n_seqs as u32, D as u32 / abi::GDN_WARPS), (32, abi::GDN_WARPS, 1))
}

/// The kernel entry. (A paired-butterfly variant — token t+1's KV sum interleaved with token
/// t's attention sum — was measured on the H200 at 2.2–2.7× this kernel's time and removed;
/// NOTES.md, GATED_DELTA_NET speed.)
pub fn entry() -> &'static str {
    abi::GATED_DELTA_NET_ENTRY
}

/// A valid op with every tensor contiguous in a buffer of its own: inputs zero, `out` and
/// `states` filled with a NaN sentinel (so unwritten elements are recognisable).
#[cfg(test)]
pub(crate) fn contiguous_op(mem: &mut HostMemory, h_k: usize, h_v: usize, n_t: usize, n_s: usize, slots: usize) -> GatedDeltaNet {
    let out = mem.alloc_tensor(DType::F32, [D, h_v, n_t, n_s]);
    let states = mem.alloc_tensor(DType::F32, [D * D * h_v, n_s, slots, 1]);
    for t in [out, states] {
        mem.bytes_mut(t.buffer).chunks_exact_mut(4).for_each(|w| w.copy_from_slice(&SENTINEL.to_le_bytes()));
    }
    GatedDeltaNet {
        q: mem.alloc_tensor(DType::F32, [D, h_k, n_t, n_s]),
        k: mem.alloc_tensor(DType::F32, [D, h_k, n_t, n_s]),
        v: mem.alloc_tensor(DType::F32, [D, h_v, n_t, n_s]),
        g: mem.alloc_tensor(DType::F32, [1, h_v, n_t, n_s]),
        beta: mem.alloc_tensor(DType::F32, [1, h_v, n_t, n_s]),
        state_in: mem.alloc_tensor(DType::F32, [D, D, h_v, n_s]),
        out,
        states,
    }
}

/// The bits [`contiguous_op`] fills its outputs with: a NaN no float op produces.
#[cfg(test)]
pub(crate) const SENTINEL: u32 = 0x7FC0_1234;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::math::ExactMufu;
    use crate::tensor::{BufferId, Layout};

    fn op(mem: &mut HostMemory) -> GatedDeltaNet {
        contiguous_op(mem, 2, 3, 4, 2, 3)
    }

    #[test]
    fn params_have_no_padding() {
        assert_eq!(std::mem::size_of::<abi::GatedDeltaNetParams>(), 31 * 8 + 4 * 4);
        assert_eq!(std::mem::align_of::<abi::GatedDeltaNetParams>(), 8);
        assert_eq!(std::mem::size_of::<abi::GatedDeltaNetFromCacheParams>(), 31 * 8 + 4 * 4 + 2 * 8);
        assert_eq!(std::mem::align_of::<abi::GatedDeltaNetFromCacheParams>(), 8);
    }

    /// [gdn-from-cache] The fused op over a cache of 2 cells × K = 2 groups (+ a spare row), two
    /// sequences, slots at rows k·2 + s, reading `rows`.
    fn from_cache(mem: &mut HostMemory, rows: &[i32], n_t: usize) -> GatedDeltaNetFromCache {
        let o = contiguous_op(mem, 1, 2, n_t, 2, 2);
        let row = D * D * 2;
        let ssm_cache = mem.alloc_tensor(DType::F32, [row, 5, 1, 1]);
        let states = ssm_cache.view([row, 2, 2, 1], [4, 4 * row, 8 * row, 16 * row], 0);
        let source_rows = mem.alloc_indices(rows);
        GatedDeltaNetFromCache { q: o.q, k: o.k, v: o.v, g: o.g, beta: o.beta, ssm_cache, source_rows, out: o.out, states }
    }

    #[test]
    fn from_cache_admits_exactly_the_own_row_overlap() {
        let mut mem = HostMemory::new();
        // Own slot-0 rows, own slot-1 rows, the spare row: fine.
        for rows in [[0, 1], [2, 3], [4, 4], [0, 3]] {
            let o = from_cache(&mut mem, &rows, 2);
            o.validate(&mem).unwrap_or_else(|e| panic!("{rows:?}: {e}"));
            assert_eq!(o.must_write()[1].ne()[2], 2);
        }
        // Another sequence's written row (slot 0 of seq 1 is row 1; slot 1 of seq 0 is row 2).
        for rows in [[1, 1], [0, 0], [1, 0], [3, 2]] {
            let o = from_cache(&mut mem, &rows, 2);
            assert!(
                matches!(o.validate(&mem), Err(Error::Aliasing { a: "states", b: "ssm_cache", .. })),
                "{rows:?}: {:?}",
                o.validate(&mem)
            );
        }
        // With n_t = 1 slot 1 (rows 2, 3) is not written: reading it from the other sequence is fine.
        from_cache(&mut mem, &[3, 2], 1).validate(&mem).unwrap();
        // A cache view shifted by one float: every row read straddles a written slot row.
        let mut o = from_cache(&mut mem, &[0, 1], 2);
        o.ssm_cache = o.ssm_cache.view([D * D * 2, 4, 1, 1], o.ssm_cache.layout.nb, 4);
        assert!(matches!(o.validate(&mem), Err(Error::Aliasing { a: "states", b: "ssm_cache", .. })));
        // Indices are checked against the cache rows.
        let o = from_cache(&mut mem, &[0, 5], 2);
        assert!(matches!(o.validate(&mem), Err(Error::IndexOutOfRange { arg: "source_rows", position: 1, index: 5, rows: 5, .. })));
        assert_eq!(o.inputs().len(), 7);
        assert_eq!(o.name(), FROM_CACHE_OP);
    }

    /// [host-cost] The prepared rules (a table of which sequence may read which row, built
    /// from the views) against the rules as validation states them, on every pair of values in
    /// −1 ..= 6, for the layer's layout and for views it never makes: the cache or the slots
    /// shifted by one float (every row read straddles two slot rows, one of them by 4 bytes),
    /// rows a float further apart than the
    /// slots, half a row apart, and one row repeated (stride 0: every row has one verdict —
    /// slot (0, 0)'s row, which only sequence 0 may read, or the spare row, which all may).
    #[test]
    fn prepared_index_rules_give_the_per_call_verdict_on_every_layout() {
        let mut mem = HostMemory::new();
        let row = D * D * 2;
        // (cache rows, row stride, cache offset, states offset), in bytes.
        let layouts: [(usize, usize, usize, usize); 7] = [
            (5, 4 * row, 0, 0),
            (4, 4 * row, 4, 0),
            (5, 4 * row, 0, 4),
            (4, 4 * row + 4, 0, 0),
            (9, 2 * row, 0, 0),
            (5, 0, 0, 0),
            (5, 0, 16 * row, 0),
        ];
        for (n_rows, stride, offset, states_offset) in layouts {
            let (mut accepted, mut refused) = (0, 0);
            for n_t in [1, 2] {
                let mut o = from_cache(&mut mem, &[0, 1], n_t);
                o.ssm_cache = o.ssm_cache.view([row, n_rows, 1, 1], [4, stride, stride * n_rows, stride * n_rows], offset);
                o.states.layout.offset += states_offset;
                let rules = FromCacheIndexRules::new(&o);
                assert!(matches!(rules, FromCacheIndexRules::Table(_)), "stride {stride}");
                for pair in (-1i32..=6).flat_map(|a| (-1..=6).map(move |b| [a, b])) {
                    mem.bytes_mut(o.source_rows.buffer).copy_from_slice(&[pair[0].to_le_bytes(), pair[1].to_le_bytes()].concat());
                    let per_call = o.check_indices(&mem).map_err(|e| format!("{e:?}"));
                    let at = format!("{pair:?}, n_t {n_t}, stride {stride}, offset {offset}");
                    assert_eq!(per_call, rules.check(&mem).map_err(|e| format!("{e:?}")), "{at}");
                    assert_eq!(per_call, o.validate(&mem).map_err(|e| format!("{e:?}")), "{at}");
                    if per_call.is_ok() { accepted += 1 } else { refused += 1 }
                }
            }
            // Every pair has sequence 1 on slot (0, 0)'s row in the fifth layout.
            let all_refused = stride == 0 && offset == 0;
            assert!(
                (accepted > 0 || all_refused) && refused > 0,
                "stride {stride}, offset {offset}: {accepted} accepted, {refused} refused"
            );
        }
        // An index view the table's reader does not take (validation refuses its stride): the
        // prepared rules are the per-call ones.
        let mut o = from_cache(&mut mem, &[0, 1], 2);
        o.source_rows.layout.nb[0] = 2;
        let rules = FromCacheIndexRules::new(&o);
        assert!(matches!(rules, FromCacheIndexRules::PerCall(_)));
        assert_eq!(rules.check(&mem).map_err(|e| format!("{e:?}")), o.check_indices(&mem).map_err(|e| format!("{e:?}")));
    }

    /// \[seq-batch\] The batched entry from two sequences on while the tokens fit its stage, with its
    /// grid (H_v, n_s, D/32) and the stage's shared bytes; one warp a column otherwise.
    #[test]
    fn from_cache_takes_the_batched_entry_for_batches_of_at_most_sixteen_tokens() {
        let shape = |n_tokens, n_seqs| GdnShape { n_key_heads: 16, n_heads: 32, n_tokens, n_seqs, n_slots: 1 };
        for (n_t, n_s, batched) in [(4, 1, false), (1, 2, true), (16, 64, true), (17, 4, false), (0, 4, false)] {
            let (entry, dims) = from_cache_launch(&shape(n_t, n_s));
            if batched {
                assert_eq!(entry, abi::GATED_DELTA_NET_FROM_CACHE_BATCH_ENTRY, "n_t = {n_t}, n_s = {n_s}");
                assert_eq!(dims.grid, (32, n_s as u32, 4));
                assert_eq!(dims.shared_bytes, abi::batch_token_stage_bytes(n_t));
            } else {
                assert_eq!(entry, abi::GATED_DELTA_NET_FROM_CACHE_ENTRY, "n_t = {n_t}, n_s = {n_s}");
                assert_eq!(dims, launch_dims(32, n_s));
            }
        }
    }

    #[test]
    fn the_attention_scale_is_ggmls_host_constant() {
        assert_eq!(attention_scale().to_bits(), 0x3DB5_04F3);
    }

    #[test]
    fn a_valid_op_passes_and_runs_its_reference() {
        let mut mem = HostMemory::new();
        let op = op(&mut mem);
        assert_eq!(op.check(&mem).unwrap(), GdnShape { n_key_heads: 2, n_heads: 3, n_tokens: 4, n_seqs: 2, n_slots: 3 });
        op.reference(&mut mem, &mut ExactMufu).unwrap();
    }

    #[test]
    fn refuses_other_head_dims_slot_counts_and_sequence_counts() {
        let mut mem = HostMemory::new();
        let mut o = op(&mut mem);
        o.q = mem.alloc_tensor(DType::F32, [64, 2, 4, 2]);
        assert!(matches!(o.validate(&mem), Err(Error::Unsupported { op: OP, .. })));
        for slots in [0, abi::GDN_MAX_SLOTS + 1] {
            let mut o = op(&mut mem);
            o.states = mem.alloc_tensor(DType::F32, [D * D * 3, 2, slots, 1]);
            assert!(matches!(o.validate(&mem), Err(Error::Unsupported { op: OP, .. })), "K = {slots}");
        }
        // 65536 sequences (grid y ≤ 65535): a zero-stride q view is enough to be refused first.
        let mut o = op(&mut mem);
        o.q = o.q.view([D, 2, 4, 65536], [4, 4 * D, 8 * D, 0], 0);
        assert!(matches!(o.validate(&mem), Err(Error::Unsupported { op: OP, .. })));
        // A vector gate (ggml's KDA branch) is another kernel.
        let mut o = op(&mut mem);
        o.g = mem.alloc_tensor(DType::F32, [D, 3, 4, 2]);
        assert!(matches!(o.validate(&mem), Err(Error::Unsupported { op: OP, .. })));
    }

    #[test]
    fn refuses_inconsistent_shapes() {
        let mut mem = HostMemory::new();
        type Edit = fn(&mut GatedDeltaNet, &mut HostMemory);
        let cases: [(&str, Edit); 8] = [
            ("k", |o, m| o.k = m.alloc_tensor(DType::F32, [D, 1, 4, 2])),
            ("v", |o, m| o.v = m.alloc_tensor(DType::F32, [D, 3, 5, 2])),
            ("g", |o, m| o.g = m.alloc_tensor(DType::F32, [1, 2, 4, 2])),
            ("beta", |o, m| o.beta = m.alloc_tensor(DType::F32, [1, 3, 4, 1])),
            ("state_in", |o, m| o.state_in = m.alloc_tensor(DType::F32, [D, D, 2, 2])),
            ("out", |o, m| o.out = m.alloc_tensor(DType::F32, [D, 3, 3, 2])),
            ("states", |o, m| o.states = m.alloc_tensor(DType::F32, [D * D * 2, 2, 3, 1])),
            ("states", |o, m| o.states = m.alloc_tensor(DType::F32, [D * D * 3, 2, 3, 2])),
        ];
        for (arg, edit) in cases {
            let mut o = op(&mut mem);
            edit(&mut o, &mut mem);
            let err = o.validate(&mem);
            assert!(matches!(err, Err(Error::Shape { op: OP, arg: a, .. }) if a == arg), "{arg}: {err:?}");
        }
    }

    #[test]
    fn refuses_wrong_types_strides_bounds_and_index_buffers() {
        let mut mem = HostMemory::new();
        let mut o = op(&mut mem);
        o.beta.layout.dtype = DType::F16;
        assert!(matches!(o.validate(&mem), Err(Error::DType { arg: "beta", got: DType::F16, .. })));

        let mut o = op(&mut mem);
        let buf = mem.alloc(4 * 2 * D * 3 * 4 * 2);
        o.v = Tensor::new(buf, Layout { dtype: DType::F32, offset: 0, ne: [D, 3, 4, 2], nb: [8, 8 * D, 24 * D, 96 * D] });
        assert!(matches!(o.validate(&mem), Err(Error::Stride { arg: "v", .. })));

        let mut o = op(&mut mem);
        o.states.layout.offset += 4;
        assert!(matches!(o.validate(&mem), Err(Error::OutOfBounds { arg: "states", .. })));

        let mut o = op(&mut mem);
        o.state_in.buffer = BufferId(999);
        assert!(matches!(o.validate(&mem), Err(Error::Invalid { op: OP, .. })));

        let mut o = op(&mut mem);
        let idx = mem.alloc_indices(&vec![0; D * 3 * 4 * 2]);
        o.out = Tensor::new(idx.buffer, Layout::contiguous(DType::F32, [D, 3, 4, 2]));
        assert!(matches!(o.validate(&mem), Err(Error::Invalid { op: OP, .. })));
    }

    #[test]
    fn refuses_outputs_that_overlap_inputs_each_other_or_themselves() {
        let mut mem = HostMemory::new();
        // out's first element is q's last.
        let (q_len, out_len, slot) = (D * 2 * 4 * 2, D * 3 * 4 * 2, D * D * 3);
        let mut o = op(&mut mem);
        let shared = mem.alloc_tensor(DType::F32, [q_len + out_len, 1, 1, 1]);
        o.q = shared.view(o.q.ne(), o.q.layout.nb, 0);
        o.out = shared.view(o.out.ne(), o.out.layout.nb, 4 * (q_len - 1));
        assert!(matches!(o.validate(&mem), Err(Error::Aliasing { a: "out", b: "q", .. })));

        // The unfused layout: out and states are disjoint parts of one result buffer — fine; one
        // float less between them and they overlap.
        for (gap, ok) in [(0, true), (-1, false)] {
            let mut o = op(&mut mem);
            let result = mem.alloc_tensor(DType::F32, [out_len + slot * 2 * 3, 1, 1, 1]);
            o.out = result.view([D, 3, 4, 2], Layout::contiguous(DType::F32, [D, 3, 4, 2]).nb, 0);
            let offset = (4 * out_len as isize + 4 * gap) as usize;
            o.states = result.view([slot, 2, 3, 1], [4, 4 * slot, 8 * slot, 24 * slot], offset);
            let r = o.validate(&mem);
            assert_eq!(r.is_ok(), ok, "gap {gap}: {r:?}");
            if !ok {
                assert!(matches!(r, Err(Error::Aliasing { a: "out", b: "states", .. })));
            }
        }

        // states' last element is v's first.
        let mut o = op(&mut mem);
        let shared = mem.alloc_tensor(DType::F32, [slot * 2 * 3 + out_len, 1, 1, 1]);
        o.states = shared.view(o.states.ne(), o.states.layout.nb, 0);
        o.v = shared.view(o.v.ne(), o.v.layout.nb, 4 * (slot * 2 * 3 - 1));
        assert!(matches!(o.validate(&mem), Err(Error::Aliasing { a: "states", b: "v", .. })));

        // A cache with fewer cells per group (1) than sequences (2): slot 1 of sequence 0 would
        // be the row of slot 0 of sequence 1.
        let mut o = op(&mut mem);
        let cache = mem.alloc_tensor(DType::F32, [slot, 4, 1, 1]);
        o.states = cache.view([slot, 2, 3, 1], [4, 4 * slot, 4 * slot, 12 * slot], 0);
        assert!(matches!(o.validate(&mem), Err(Error::Aliasing { a: "states", b: "states", .. })));
        // With two cells per group it is valid.
        let cache = mem.alloc_tensor(DType::F32, [slot, 6, 1, 1]);
        o.states = cache.view([slot, 2, 3, 1], [4, 4 * slot, 8 * slot, 24 * slot], 0);
        o.validate(&mem).unwrap();

        // An output whose tokens share a row.
        let mut o = op(&mut mem);
        o.out = o.out.view([D, 3, 4, 2], [4, 4 * D, 0, 12 * D], 0);
        assert!(matches!(o.validate(&mem), Err(Error::Aliasing { a: "out", b: "out", .. })));
    }
}
