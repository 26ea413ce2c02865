//! \[replay\] GATED_DELTA_NET_REPLAY — kernel: `kernels-gpu/src/gated_delta_net_replay.rs`,
//! reference: [`crate::reference::replay::replay_states`] (the state half of exact replay),
//! design: `docs/rollback.md` ("Through the registry").

use super::index_rules::{IndexRules, IndexView, Values};
use super::{Op, check};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, KernelArg, ParamBlock, PreparedLaunch};
use crate::kernels::abi;
use crate::memory::{DeviceMemory, HostMemory, KernelAddresses, Memory};
use crate::reference::math::Mufu;
use crate::reference::replay::{StateLog, replay_states};
use crate::tensor::{DType, Tensor};

const OP: &str = "GATED_DELTA_NET_REPLAY";
const D: usize = abi::GDN_HEAD_DIM;
/// Grid y (sequences) limit of a launch.
const MAX_GRID_YZ: usize = 65535;

// SAFETY: `abi::GatedDeltaNetReplayParams` is declared with `param_struct!` (`#[repr(C)]`, no
// padding bytes: four `TokenViewParams` of four u64, eight u64, two u32: 200 bytes, alignment 8) and is the type the
// GATED_DELTA_NET_REPLAY entry takes by value (the same abi.rs is compiled into both; its row in
// `abi::ENTRIES` is checked against the PTX by `tests/ptx.rs`).
unsafe impl crate::gpu::KernelParams for abi::GatedDeltaNetReplayParams {}

/// Exact-replay rollback's unfused op: for each sequence s with `a = accepted[s] > 0`, the
/// committed state of ssm-cache row `source_rows[s]` run through GATED_DELTA_NET's state update
/// (γ = expf(g), `KV = Sᵀk`, `δ = β·(v − γ·KV)`, `S ← γ·S + k·δᵀ`, the kernel's operation
/// order) over the logged tokens t = 0 … a − 1, then written once to row `dest_rows[s]`. No
/// output; with a = 0 nothing is written. The state it writes is GATED_DELTA_NET's state after
/// token a − 1 of the logged step (its snapshot of that token), bit for bit.
///
/// - `k`: F32 ne [D, H_k, T, n_s] (rows contiguous, any other strides): the logged k;
/// - `v`: F32 ne [D, H_v, T, n_s] (rows contiguous): the logged v;
/// - `g`, `beta`: F32 ne [1, H_v, T, n_s] (any strides);
/// - `ssm_cache`: F32 ne [D·D·H_v, n_rows, 1, 1], rows contiguous and not sharing bytes; element
///   (i, col, h) of a row at (h·D + col)·D + i (GATED_DELTA_NET_FROM_CACHE's layout);
/// - `source_rows`, `dest_rows`: I32 ne \[n_s\] in index buffers, each value in 0..n_rows
///   ([`Error::IndexOutOfRange`]); a destination may be its own sequence's source row, never a row
///   another sequence reads or writes ([`Error::Aliasing`]; checked for every sequence, whatever
///   its count);
/// - `accepted`: I32 ne \[n_s\] in an index buffer, each value in 0 ..= T ([`Error::IndexOutOfRange`]
///   with `rows` = T + 1).
///
/// D must be 128 (else [`Error::Unsupported`]); n_s ≤ 65535. The cache overlaps no log view.
#[derive(Clone, Debug)]
pub struct GatedDeltaNetReplay {
    pub k: Tensor,
    pub v: Tensor,
    pub g: Tensor,
    pub beta: Tensor,
    pub ssm_cache: Tensor,
    pub source_rows: Tensor,
    pub dest_rows: Tensor,
    pub accepted: Tensor,
}

/// The sizes a valid [`GatedDeltaNetReplay`] runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayShape {
    /// H_k: heads of k.
    pub n_key_heads: usize,
    /// H_v: heads of v, g, beta and the state.
    pub n_heads: usize,
    /// T: logged tokens per sequence.
    pub n_tokens: usize,
    pub n_seqs: usize,
    /// Rows of the cache.
    pub n_rows: usize,
}

/// The index values of one launch, each validated.
struct Indices {
    source: Vec<usize>,
    dest: Vec<usize>,
    accepted: Vec<usize>,
}

impl GatedDeltaNetReplay {
    /// Validates the op (views and index values) and returns its sizes.
    pub fn check(&self, mem: &dyn Memory) -> Result<ReplayShape> {
        self.check_as(OP, mem)
    }

    /// [`GatedDeltaNetReplay::check`] with the errors named as op `op`'s (a fused op that runs
    /// this replay: GATED_DELTA_NET_REPLAY_VERIFY).
    pub(crate) fn check_as(&self, op: &'static str, mem: &dyn Memory) -> Result<ReplayShape> {
        let shape = self.check_views(op, mem)?;
        self.indices(op, &shape, mem)?;
        Ok(shape)
    }

    /// Every rule that does not read an index value (errors named as `op`'s).
    fn check_views(&self, op: &'static str, mem: &dyn Memory) -> Result<ReplayShape> {
        check::tensor(op, "k", &self.k, DType::F32, mem)?;
        let [d, n_key_heads, n_tokens, n_seqs] = self.k.ne();
        if d != D {
            return Err(Error::Unsupported { op, what: format!("head dimension D = {d} (the kernel is built for D = {D})") });
        }
        if n_seqs > MAX_GRID_YZ {
            return Err(Error::Unsupported { op, what: format!("n_s = {n_seqs} sequences (grid y ≤ {MAX_GRID_YZ})") });
        }
        check::tensor(op, "v", &self.v, DType::F32, mem)?;
        let n_heads = self.v.ne()[1];
        check::shape(op, "v", &self.v, [D, n_heads, n_tokens, n_seqs])?;
        for (arg, x) in [("g", &self.g), ("beta", &self.beta)] {
            check::tensor(op, arg, x, DType::F32, mem)?;
            if arg == "g" && x.ne() == [D, n_heads, n_tokens, n_seqs] {
                return Err(Error::Unsupported { op, what: "a vector gate (g ne[0] = D, ggml's KDA branch)".into() });
            }
            check::shape(op, arg, x, [1, n_heads, n_tokens, n_seqs])?;
        }
        let row_len = check::product(op, "v", "state floats per row D·D·H_v", &[D, D, n_heads])?;
        check::output(op, "ssm_cache", &self.ssm_cache, DType::F32, mem)?;
        let n_rows = self.ssm_cache.ne()[1];
        check::shape(op, "ssm_cache", &self.ssm_cache, [row_len, n_rows, 1, 1])?;
        for (arg, x) in [("source_rows", &self.source_rows), ("dest_rows", &self.dest_rows), ("accepted", &self.accepted)] {
            check::tensor(op, arg, x, DType::I32, mem)?;
            check::shape(op, arg, x, [n_seqs, 1, 1, 1])?;
        }
        for (arg, x) in [("k", &self.k), ("v", &self.v), ("ssm_cache", &self.ssm_cache)] {
            check::rows_contiguous(op, arg, x)?;
        }
        for (arg, x) in [
            ("k", &self.k),
            ("v", &self.v),
            ("g", &self.g),
            ("beta", &self.beta),
            ("source_rows", &self.source_rows),
            ("dest_rows", &self.dest_rows),
            ("accepted", &self.accepted),
        ] {
            check::disjoint(op, "ssm_cache", &self.ssm_cache, arg, x)?;
        }
        check::fits_u32(op, "value heads", n_heads)?;
        check::fits_u32(op, "key heads", n_key_heads)?;
        check::fits_u32(op, "tokens", n_tokens)?;
        // The kernel addresses a row's elements with 32-bit indices.
        check::fits_u32(op, "state floats per row D·D·H_v", row_len)?;
        Ok(ReplayShape { n_key_heads, n_heads, n_tokens, n_seqs, n_rows })
    }

    /// The rules that read index values, in order: every source row in 0..n_rows, every
    /// destination row in 0..n_rows, every accepted count in 0 ..= T; then no destination row
    /// written by two sequences, and none that another sequence reads.
    fn indices(&self, op: &'static str, shape: &ReplayShape, mem: &dyn Memory) -> Result<Indices> {
        let values = |arg: &'static str, t: &Tensor, bound: usize| -> Result<Vec<usize>> {
            let values = mem.index_values(t).ok_or_else(|| not_an_index_buffer(op, arg, t))?;
            values.iter().enumerate().map(|(position, &index)| in_range(op, arg, position, index, bound)).collect()
        };
        let source = values("source_rows", &self.source_rows, shape.n_rows)?;
        let dest = values("dest_rows", &self.dest_rows, shape.n_rows)?;
        let accepted = values("accepted", &self.accepted, shape.n_tokens + 1)?;
        let mut writer = std::collections::HashMap::with_capacity(dest.len());
        for (s, &row) in dest.iter().enumerate() {
            if writer.insert(row, s).is_some() {
                return Err(two_writers(op));
            }
        }
        if source.iter().enumerate().any(|(s, row)| writer.get(row).is_some_and(|&w| w != s)) {
            return Err(reads_another_writers_row(op));
        }
        Ok(Indices { source, dest, accepted })
    }

    /// The rules that read the three index views (ranges, then the rows written), as the full
    /// validation states them, errors named as `op`'s.
    pub(crate) fn check_indices_as(&self, op: &'static str, mem: &dyn Memory) -> Result<()> {
        let n_rows = self.ssm_cache.ne()[1];
        let [_, n_key_heads, n_tokens, n_seqs] = self.k.ne();
        let shape = ReplayShape { n_key_heads, n_heads: self.v.ne()[1], n_tokens, n_seqs, n_rows };
        self.indices(op, &shape, mem).map(|_| ())
    }

    /// The kernel's parameters for a validated op.
    pub(crate) fn params(&self, shape: &ReplayShape, mem: &dyn KernelAddresses) -> abi::GatedDeltaNetReplayParams {
        let view = |t: &Tensor| {
            let [_, head, token, seq] = check::elem_strides(t);
            abi::TokenViewParams { addr: mem.address(t), head, token, seq }
        };
        let [_, cache_row, ..] = check::elem_strides(&self.ssm_cache);
        let index = |t: &Tensor| (mem.address(t), check::elem_strides(t)[0]);
        let ((source_rows, source_rows_stride), (dest_rows, dest_rows_stride), (accepted, accepted_stride)) =
            (index(&self.source_rows), index(&self.dest_rows), index(&self.accepted));
        abi::GatedDeltaNetReplayParams {
            k: view(&self.k),
            v: view(&self.v),
            g: view(&self.g),
            beta: view(&self.beta),
            cache: mem.address(&self.ssm_cache),
            cache_row,
            source_rows,
            source_rows_stride,
            dest_rows,
            dest_rows_stride,
            accepted,
            accepted_stride,
            n_tokens: shape.n_tokens as u32,
            n_key_heads: shape.n_key_heads as u32,
        }
    }
}

// The index rules' errors, one constructor each, so the per-call and the prepared rules cannot
// word them differently (errors named as `op`'s: this op's, or GATED_DELTA_NET_REPLAY_VERIFY's).
fn not_an_index_buffer(op: &'static str, arg: &'static str, t: &Tensor) -> Error {
    Error::Invalid { op, what: format!("`{arg}` (buffer {}) is not an index buffer: its values must be known to the host", t.buffer.0) }
}

/// The range rule on one value: the value as a row (or count) below `bound`, else the error.
#[inline]
fn in_range(op: &'static str, arg: &'static str, position: usize, index: i32, bound: usize) -> Result<usize> {
    match usize::try_from(index) {
        Ok(x) if x < bound => Ok(x),
        _ => Err(Error::IndexOutOfRange { op, arg, position, index: index as i64, rows: bound }),
    }
}

fn two_writers(op: &'static str) -> Error {
    Error::Aliasing { op, a: "dest_rows", b: "dest_rows", why: "two sequences write one cache row" }
}

fn reads_another_writers_row(op: &'static str) -> Error {
    Error::Aliasing { op, a: "dest_rows", b: "source_rows", why: "a sequence writes a cache row another sequence reads" }
}

/// [host-cost] GATED_DELTA_NET_REPLAY's index rules prepared for a plan (and
/// GATED_DELTA_NET_REPLAY_VERIFY's, named as that op): the three index views read in place
/// ([`IndexView`]), each value against its bound, then the row rules over the destination rows
/// sorted once per step — where the per-call rules copy the values out and hash every row. Views
/// that are not plain I32 vectors (never a real step's) keep the per-call rules.
#[derive(Clone, Debug)]
pub(crate) enum ReplayIndexRules {
    Views(Box<ReplayViews>),
    PerCall { op: &'static str, replay: Box<GatedDeltaNetReplay> },
}

/// [`ReplayIndexRules`]' reading plan: the op the errors name, the three views, the bounds.
#[derive(Clone, Debug)]
pub(crate) struct ReplayViews {
    op: &'static str,
    source: IndexView,
    dest: IndexView,
    accepted: IndexView,
    n_rows: usize,
    n_tokens: usize,
}

impl ReplayIndexRules {
    pub fn new(op: &'static str, replay: &GatedDeltaNetReplay) -> ReplayIndexRules {
        match (IndexView::new(&replay.source_rows), IndexView::new(&replay.dest_rows), IndexView::new(&replay.accepted)) {
            (Some(source), Some(dest), Some(accepted)) => ReplayIndexRules::Views(Box::new(ReplayViews {
                op,
                source,
                dest,
                accepted,
                n_rows: replay.ssm_cache.ne()[1],
                n_tokens: replay.k.ne()[2],
            })),
            _ => ReplayIndexRules::PerCall { op, replay: Box::new(replay.clone()) },
        }
    }
}

impl IndexRules for ReplayIndexRules {
    fn check(&self, mem: &dyn Memory) -> Result<()> {
        let (op, source, dest, accepted, n_rows, n_tokens) = match self {
            ReplayIndexRules::Views(v) => (v.op, &v.source, &v.dest, &v.accepted, v.n_rows, v.n_tokens),
            ReplayIndexRules::PerCall { op, replay } => return replay.check_indices_as(op, mem),
        };
        // `indices`' order: each view read and range-checked in turn, then the rows written.
        let read = |arg: &'static str, view: &IndexView, bound: usize| -> Result<Values<'_>> {
            let values = view.read(mem).ok_or_else(|| not_an_index_buffer(op, arg, &view.tensor))?;
            values.try_for_each(|position, index| in_range(op, arg, position, index, bound).map(|_| ()))?;
            Ok(values)
        };
        let source = read("source_rows", source, n_rows)?;
        let dest = read("dest_rows", dest, n_rows)?;
        read("accepted", accepted, n_tokens + 1)?;
        // (row, writer), sorted by row: two writers of a row are neighbours.
        let mut written = Vec::with_capacity(dest.len());
        // In range (checked above): the casts are lossless.
        dest.try_for_each(|s, row| {
            written.push((row as usize, s));
            Ok(())
        })?;
        written.sort_unstable();
        if written.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err(two_writers(op));
        }
        let mut refused = false;
        source.try_for_each(|s, row| {
            if let Ok(i) = written.binary_search_by_key(&(row as usize), |w| w.0) {
                refused |= written[i].1 != s;
            }
            Ok(())
        })?;
        if refused { Err(reads_another_writers_row(op)) } else { Ok(()) }
    }
}

impl Op for GatedDeltaNetReplay {
    fn name(&self) -> &'static str {
        OP
    }

    fn validate(&self, mem: &dyn Memory) -> Result<()> {
        self.check(mem).map(|_| ())
    }

    /// The rules that read the three index views (ranges, then the rows written), as the full
    /// validation states them.
    fn check_indices(&self, mem: &dyn Memory) -> Result<()> {
        self.check_indices_as(OP, mem)
    }

    /// The same rules prepared once (`ReplayIndexRules`: the views read in place, no hashing).
    fn index_rules(&self) -> Box<dyn IndexRules> {
        Box::new(ReplayIndexRules::new(OP, self))
    }

    fn prepare(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<PreparedLaunch> {
        let shape = self.check(mem)?;
        let params = self.params(&shape, mem);
        let dims = super::gated_delta_net::launch_dims(shape.n_heads, shape.n_seqs);
        let args = [KernelArg::Params(ParamBlock::of(&params)?)];
        // SAFETY: `check` proved every log view lies inside its buffer for the grid (H_v, n_s,
        // D/4) × block (32, 4) with D = 128, key heads < H_k and T tokens; the cache rows hold
        // D·D·H_v contiguous floats (element (i, col, h) at (h·D + col)·D + i, rows cache_row
        // elements apart, sharing no bytes) and overlap no log or index view; every source and
        // destination row (s < n_s) is a row of the cache, every accepted count ≤ T, no row is
        // written by two sequences nor read by a sequence other than its writer (the kernel's
        // race-free case, see its docs); and `params` is the entry's parameter struct.
        unsafe { gpu.prepare(abi::GATED_DELTA_NET_REPLAY_ENTRY, dims, &args) }
    }

    fn reference(&self, mem: &mut HostMemory, mufu: &mut dyn Mufu) -> Result<()> {
        let shape = self.check_views(OP, mem)?;
        let Indices { source, dest, accepted } = self.indices(OP, &shape, mem)?;
        let log = StateLog { ssm_cache: self.ssm_cache, k: self.k, v: self.v, g: self.g, beta: self.beta, n_k_heads: shape.n_key_heads };
        replay_states(&log, &source, &dest, &accepted, mem, mufu)?;
        Ok(())
    }

    fn inputs(&self) -> Vec<Tensor> {
        vec![self.k, self.v, self.g, self.beta, self.ssm_cache, self.source_rows, self.dest_rows, self.accepted]
    }

    fn outputs(&self) -> Vec<Tensor> {
        vec![self.ssm_cache]
    }

    /// Nothing: which rows are written depends on the index values (a sequence with a = 0
    /// writes none).
    fn must_write(&self) -> Vec<Tensor> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::GatedDeltaNet;
    use crate::reference::math::ExactMufu;
    use crate::reference::replay::{CommittedViews, TokenLog, replay};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    /// Random floats, uniform in ±`scale`, into `t` (contiguous).
    fn fill(mem: &mut HostMemory, t: &Tensor, rng: &mut StdRng, scale: f32) {
        let values: Vec<f32> = (0..t.layout.n_elements()).map(|_| rng.random_range(-scale..scale)).collect();
        mem.fill_f32(t, &values).unwrap();
    }

    /// A layer of H_k = 1, H_v = 2 (C = 512, K_c = 4) with `n_rows` committed rows of random
    /// conv windows and ssm states, and a random log of `n_t` tokens × `n_s` sequences (g
    /// realistic, β in [0, 1)).
    fn layer(mem: &mut HostMemory, rng: &mut StdRng, n_rows: usize, n_t: usize, n_s: usize) -> (CommittedViews, TokenLog) {
        let (hk, hv, kc) = (1, 2, 4);
        let c = (2 * hk + hv) * D;
        let views = CommittedViews {
            conv_cache: mem.alloc_tensor(DType::F32, [(kc - 1) * c, n_rows, 1, 1]),
            ssm_cache: mem.alloc_tensor(DType::F32, [D * D * hv, n_rows, 1, 1]),
            weight: mem.alloc_tensor(DType::F32, [kc, c, 1, 1]),
            n_k_heads: hk,
            n_v_heads: hv,
            eps: 1e-6,
        };
        fill(mem, &views.conv_cache, rng, 1.0);
        fill(mem, &views.ssm_cache, rng, 0.5);
        let log = TokenLog::alloc(mem, &views, n_t, n_s).unwrap();
        fill(mem, &log.qkv, rng, 1.0);
        fill(mem, &log.k, rng, 0.15);
        fill(mem, &log.v, rng, 2.0);
        let gates: Vec<f32> = (0..hv * n_t * n_s).map(|_| -rng.random_range(-6.0f32..2.08).exp()).collect();
        mem.fill_f32(&log.g, &gates).unwrap();
        let betas: Vec<f32> = (0..hv * n_t * n_s).map(|_| rng.random_range(0.0..1.0)).collect();
        mem.fill_f32(&log.beta, &betas).unwrap();
        (views, log)
    }

    fn op(
        mem: &mut HostMemory,
        views: &CommittedViews,
        log: &TokenLog,
        source: &[i32],
        dest: &[i32],
        accepted: &[i32],
    ) -> GatedDeltaNetReplay {
        GatedDeltaNetReplay {
            k: log.k,
            v: log.v,
            g: log.g,
            beta: log.beta,
            ssm_cache: views.ssm_cache,
            source_rows: mem.alloc_indices(source),
            dest_rows: mem.alloc_indices(dest),
            accepted: mem.alloc_indices(accepted),
        }
    }

    fn whole(mem: &HostMemory, t: &Tensor) -> Vec<u8> {
        mem.bytes(t.buffer).to_vec()
    }

    #[test]
    fn params_have_no_padding() {
        assert_eq!(std::mem::size_of::<abi::GatedDeltaNetReplayParams>(), 24 * 8 + 2 * 4);
        assert_eq!(std::mem::align_of::<abi::GatedDeltaNetReplayParams>(), 8);
    }

    /// The op over the committed rows themselves is `reference::replay`'s state commit, bit
    /// for bit (the conv windows aside, which the op does not touch), at T 1/4/8/16 with counts
    /// 0, T and in between, rows shuffled over a cache with spare rows.
    #[test]
    fn over_the_committed_rows_it_is_replays_state_commit() {
        for (n_t, n_s) in [(1, 2), (4, 3), (8, 2), (16, 3)] {
            let mut rng = StdRng::seed_from_u64(26 + n_t as u64);
            let mut mem = HostMemory::new();
            let (views, log) = layer(&mut mem, &mut rng, n_s + 2, n_t, n_s);
            let rows: Vec<usize> = (0..n_s).map(|s| (2 * s + 1) % (n_s + 2)).collect();
            let accepted: Vec<usize> = (0..n_s).map(|s| [n_t, 0, n_t / 2 + 1][s % 3].min(n_t)).collect();
            let (ssm, conv) = (views.ssm_cache, views.conv_cache);
            let mut by_replay = mem.clone();
            replay(&views, &rows, &log, &accepted, &mut by_replay, &mut ExactMufu).unwrap();
            let as_i32 = |v: &[usize]| v.iter().map(|&x| x as i32).collect::<Vec<_>>();
            let o = op(&mut mem, &views, &log, &as_i32(&rows), &as_i32(&rows), &as_i32(&accepted));
            let before = mem.clone();
            o.reference(&mut mem, &mut ExactMufu).unwrap();
            assert_eq!(whole(&mem, &ssm), whole(&by_replay, &ssm), "T {n_t}: the ssm cache");
            assert_eq!(whole(&mem, &conv), whole(&before, &conv), "T {n_t}: the op wrote the conv cache");
            // Something was replayed: the a = T sequence's row changed, the a = 0 one did not.
            let row_bytes = |m: &HostMemory, r: usize| (0..D * D * 2).map(|e| m.read_u32(&ssm, [e, r, 0, 0]).unwrap()).collect::<Vec<_>>();
            assert_ne!(row_bytes(&mem, rows[0]), row_bytes(&before, rows[0]), "T {n_t}");
            assert_eq!(row_bytes(&mem, rows[1]), row_bytes(&before, rows[1]), "T {n_t}");
        }
    }

    /// With every count T the state written is GATED_DELTA_NET's last state slot (slot 0: the
    /// state after token T − 1) run from the source rows on the same log and any q; the other
    /// rows, sources included when the destination is elsewhere, keep their bytes.
    #[test]
    fn replaying_all_t_tokens_is_gated_delta_nets_last_state_slot() {
        for n_t in [1, 4, 8, 16] {
            let n_s = 2;
            let mut rng = StdRng::seed_from_u64(100 + n_t as u64);
            let mut mem = HostMemory::new();
            let (views, log) = layer(&mut mem, &mut rng, 2 * n_s + 1, n_t, n_s);
            let (source, dest) = ([3, 0], [1, 4]);
            let o = op(&mut mem, &views, &log, &source, &dest, &[n_t as i32; 2]);
            // GATED_DELTA_NET from a copy of the source rows, one slot.
            let hv = 2;
            let row = D * D * hv;
            let q = mem.alloc_tensor(DType::F32, [D, 1, n_t, n_s]);
            fill(&mut mem, &q, &mut rng, 0.15);
            let state_in = mem.alloc_tensor(DType::F32, [D, D, hv, n_s]);
            for (s, &r) in source.iter().enumerate() {
                for e in 0..row {
                    let x = mem.read_u32(&views.ssm_cache, [e, r as usize, 0, 0]).unwrap();
                    mem.write_u32(&state_in, [e % D, (e / D) % D, e / (D * D), s], x).unwrap();
                }
            }
            let gdn = GatedDeltaNet {
                q,
                k: log.k,
                v: log.v,
                g: log.g,
                beta: log.beta,
                state_in,
                out: mem.alloc_tensor(DType::F32, [D, hv, n_t, n_s]),
                states: mem.alloc_tensor(DType::F32, [row, n_s, 1, 1]),
            };
            let before = mem.clone();
            gdn.reference(&mut mem, &mut ExactMufu).unwrap();
            o.reference(&mut mem, &mut ExactMufu).unwrap();
            for r in 0..2 * n_s + 1 {
                let got: Vec<u32> = (0..row).map(|e| mem.read_u32(&views.ssm_cache, [e, r, 0, 0]).unwrap()).collect();
                let want: Vec<u32> = match dest.iter().position(|&d| d as usize == r) {
                    Some(s) => (0..row).map(|e| mem.read_u32(&gdn.states, [e, s, 0, 0]).unwrap()).collect(),
                    None => (0..row).map(|e| before.read_u32(&views.ssm_cache, [e, r, 0, 0]).unwrap()).collect(),
                };
                assert!(got == want, "T {n_t}: cache row {r}");
            }
        }
    }

    fn small(mem: &mut HostMemory) -> (CommittedViews, TokenLog) {
        let mut rng = StdRng::seed_from_u64(7);
        layer(mem, &mut rng, 3, 4, 2)
    }

    #[test]
    fn refuses_bad_counts_rows_and_index_views_by_name() {
        let mut mem = HostMemory::new();
        let (views, log) = small(&mut mem);
        let mut check = |source: &[i32], dest: &[i32], accepted: &[i32]| {
            let o = op(&mut mem, &views, &log, source, dest, accepted);
            let r = o.validate(&mem);
            // A refusal is refused by the reference too, before anything is written.
            let mut copy = mem.clone();
            assert_eq!(
                o.reference(&mut copy, &mut ExactMufu).map_err(|e| e.to_string()),
                r.as_ref().map(|_| ()).map_err(|e| e.to_string())
            );
            assert!(r.is_ok() || whole(&copy, &views.ssm_cache) == whole(&mem, &views.ssm_cache));
            r
        };
        check(&[0, 1], &[0, 1], &[4, 0]).unwrap();
        check(&[0, 1], &[2, 1], &[2, 3]).unwrap();
        let r = check(&[0, 1], &[0, 1], &[4, 5]);
        assert!(matches!(r, Err(Error::IndexOutOfRange { op: OP, arg: "accepted", position: 1, index: 5, rows: 5 })), "{r:?}");
        let r = check(&[0, 1], &[0, 1], &[-1, 0]);
        assert!(matches!(r, Err(Error::IndexOutOfRange { op: OP, arg: "accepted", position: 0, index: -1, .. })), "{r:?}");
        let r = check(&[0, 3], &[0, 1], &[1, 1]);
        assert!(matches!(r, Err(Error::IndexOutOfRange { op: OP, arg: "source_rows", position: 1, index: 3, rows: 3 })), "{r:?}");
        let r = check(&[0, 1], &[-2, 1], &[1, 1]);
        assert!(matches!(r, Err(Error::IndexOutOfRange { op: OP, arg: "dest_rows", position: 0, index: -2, .. })), "{r:?}");
        let r = check(&[0, 1], &[2, 2], &[1, 1]);
        assert!(matches!(r, Err(Error::Aliasing { op: OP, a: "dest_rows", b: "dest_rows", .. })), "{r:?}");
        // Sequence 0 writes the row sequence 1 reads — refused whatever the counts.
        for a in [[1, 1], [0, 0]] {
            let r = check(&[0, 1], &[1, 2], &a);
            assert!(matches!(r, Err(Error::Aliasing { op: OP, a: "dest_rows", b: "source_rows", .. })), "{r:?}");
        }
        // Index views the host cannot read, of the wrong length or type.
        let mut o = op(&mut mem, &views, &log, &[0, 1], &[0, 1], &[1, 1]);
        o.accepted = mem.alloc_tensor(DType::I32, [2, 1, 1, 1]);
        assert!(matches!(o.validate(&mem), Err(Error::Invalid { op: OP, .. })));
        o.accepted = mem.alloc_indices(&[1, 1, 1]);
        assert!(matches!(o.validate(&mem), Err(Error::Shape { op: OP, arg: "accepted", .. })));
        o.accepted = mem.alloc_indices(&[1, 1]);
        o.dest_rows.layout.dtype = DType::F32;
        assert!(matches!(o.validate(&mem), Err(Error::DType { op: OP, arg: "dest_rows", .. })));
    }

    #[test]
    fn refuses_inconsistent_views_by_name() {
        let mut mem = HostMemory::new();
        let (views, log) = small(&mut mem);
        let base = op(&mut mem, &views, &log, &[0, 1], &[0, 1], &[1, 1]);
        type Edit = fn(&mut GatedDeltaNetReplay, &mut HostMemory);
        let shapes: [(&str, Edit); 5] = [
            ("v", |o, m| o.v = m.alloc_tensor(DType::F32, [D, 2, 3, 2])),
            ("g", |o, m| o.g = m.alloc_tensor(DType::F32, [1, 3, 4, 2])),
            ("beta", |o, m| o.beta = m.alloc_tensor(DType::F32, [1, 2, 4, 1])),
            ("ssm_cache", |o, m| o.ssm_cache = m.alloc_tensor(DType::F32, [D * D, 3, 1, 1])),
            ("source_rows", |o, m| o.source_rows = m.alloc_indices(&[0])),
        ];
        for (arg, edit) in shapes {
            let mut o = base.clone();
            edit(&mut o, &mut mem);
            let r = o.validate(&mem);
            assert!(matches!(r, Err(Error::Shape { op: OP, arg: a, .. }) if a == arg), "{arg}: {r:?}");
        }
        let mut o = base.clone();
        o.k = mem.alloc_tensor(DType::F32, [64, 1, 4, 2]);
        assert!(matches!(o.validate(&mem), Err(Error::Unsupported { op: OP, .. })));
        // The cache over the log, or in an index buffer.
        let mut o = base.clone();
        o.ssm_cache = o.k.view([D * D * 2, 1, 1, 1], [4; 4], 0);
        let r = o.validate(&mem);
        assert!(matches!(r, Err(Error::OutOfBounds { .. }) | Err(Error::Aliasing { op: OP, a: "ssm_cache", .. })), "{r:?}");
        let mut o = base.clone();
        let big = mem.alloc_tensor(DType::F32, [D * D * 2 * 3 + D * 2 * 4 * 2, 1, 1, 1]);
        o.ssm_cache = big.view([D * D * 2, 3, 1, 1], [4, 4 * D * D * 2, 12 * D * D * 2, 12 * D * D * 2], 0);
        o.v = big.view([D, 2, 4, 2], [4, 4 * D, 8 * D, 32 * D], 4 * (D * D * 2 * 3 - 1));
        assert!(matches!(o.validate(&mem), Err(Error::Aliasing { op: OP, a: "ssm_cache", b: "v", .. })));
        let mut o = base.clone();
        let idx = mem.alloc_indices(&vec![0; D * D * 2 * 3]);
        o.ssm_cache = Tensor::new(idx.buffer, crate::tensor::Layout::contiguous(DType::F32, [D * D * 2, 3, 1, 1]));
        assert!(matches!(o.validate(&mem), Err(Error::Invalid { op: OP, .. })));
        // Cache rows that share bytes.
        let mut o = base.clone();
        o.ssm_cache = o.ssm_cache.view([D * D * 2, 2, 1, 1], [4, 4 * D, 8 * D, 8 * D], 0);
        assert!(matches!(o.validate(&mem), Err(Error::Aliasing { op: OP, a: "ssm_cache", b: "ssm_cache", .. })));
    }

    /// `check_indices` (what a plan runs before each step) gives the full validation's verdict,
    /// error for error, on every combination of row values in −1 ..= 3 and counts in
    /// {−1, 0, T, T + 1} for two sequences over three rows.
    #[test]
    fn the_index_rules_give_the_full_validations_verdict() {
        let mut mem = HostMemory::new();
        let (views, log) = small(&mut mem);
        let o = op(&mut mem, &views, &log, &[0, 1], &[0, 1], &[1, 1]);
        let set = |mem: &mut HostMemory, t: &Tensor, v: [i32; 2]| {
            mem.bytes_mut(t.buffer).copy_from_slice(&[v[0].to_le_bytes(), v[1].to_le_bytes()].concat())
        };
        let rows = [-1, 0, 1, 2, 3];
        let counts = [-1, 0, 4, 5];
        let (mut accepted, mut refused) = (0, 0);
        for s in rows.iter().flat_map(|&a| rows.iter().map(move |&b| [a, b])) {
            for d in rows.iter().flat_map(|&a| rows.iter().map(move |&b| [a, b])) {
                for a in counts.iter().flat_map(|&x| counts.iter().map(move |&y| [x, y])) {
                    set(&mut mem, &o.source_rows, s);
                    set(&mut mem, &o.dest_rows, d);
                    set(&mut mem, &o.accepted, a);
                    let full = o.validate(&mem).map_err(|e| format!("{e:?}"));
                    assert_eq!(o.check_indices(&mem).map_err(|e| format!("{e:?}")), full, "{s:?} {d:?} {a:?}");
                    assert_eq!(o.index_rules().check(&mem).map_err(|e| format!("{e:?}")), full, "{s:?} {d:?} {a:?}");
                    if full.is_ok() { accepted += 1 } else { refused += 1 }
                }
            }
        }
        assert!(accepted > 0 && refused > 0, "{accepted} accepted, {refused} refused");
    }
}
