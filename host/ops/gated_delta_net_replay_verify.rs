//! \[replay\] GATED_DELTA_NET_REPLAY_VERIFY — kernel: `kernels-gpu/src/gated_delta_net_replay_verify.rs`,
//! reference: GATED_DELTA_NET_REPLAY's ([`crate::reference::replay::replay_states`]) then
//! GATED_DELTA_NET_FROM_CACHE's ([`crate::reference::gated_delta_net::gated_delta_net_from_cache`])
//! with no state slot; the `replay_verify` fusion (`crate::fusion::replay_verify`) makes it of
//! the pair. Design: `docs/rollback.md` ("Replay: one step").

use super::gated_delta_net::{GdnShape, StateSource, Views, attention_scale, check_views, reference_views};
use super::gated_delta_net_replay::{ReplayIndexRules, ReplayShape};
use super::index_rules::IndexRules;
use super::overlap::{BeforeWait, Forms, Overlap};
use super::{GatedDeltaNetFromCache, GatedDeltaNetReplay, Op, PlainLaunch, check};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, KernelArg, LaunchDims, ParamBlock, PreparedLaunch};
use crate::kernels::abi;
use crate::memory::{DeviceMemory, HostMemory, KernelAddresses, Memory};
use crate::reference::math::Mufu;
use crate::tensor::Tensor;

const OP: &str = "GATED_DELTA_NET_REPLAY_VERIFY";

// SAFETY: `abi::GatedDeltaNetReplayVerifyParams` is declared with `param_struct!` (`#[repr(C)]`,
// no padding bytes: the 200-byte GatedDeltaNetReplayParams then the 264-byte
// GatedDeltaNetParams, both alignment 8: 464 bytes) and is the type the
// GATED_DELTA_NET_REPLAY_VERIFY entry takes by value (the same abi.rs is compiled into both; its
// row in `abi::ENTRIES` is checked against the PTX by `tests/ptx.rs`).
unsafe impl crate::gpu::KernelParams for abi::GatedDeltaNetReplayVerifyParams {}

/// [`GatedDeltaNetReplay`] followed by [`GatedDeltaNetFromCache`] reading the rows the replay
/// commits to (`replay.dest_rows`), in one launch, with no state slot: per sequence the
/// committed state is read once and written once (when a > 0), where the pair reads it twice
/// and writes it twice (the replay's commit and the verify's slot). Every cache byte the replay
/// writes and every `out` element are the pair's, bit for bit; the verify's slots are not
/// written (the value the `replay_verify` fusion eliminates).
///
/// Valid when the replay is valid (GATED_DELTA_NET_REPLAY's rules: counts in 0 ..= T_log by
/// value, rows in range, no row one sequence writes that another reads or writes) and the
/// verify is valid as GATED_DELTA_NET_FROM_CACHE over `replay.ssm_cache` and `replay.dest_rows`
/// with no slot (its rules but the slots'), every error named as this op's; and, because the
/// launch writes the cache while other blocks read the verify's inputs and writes `out` while
/// others read the log, the verify's q, k, v, g and β share no bytes with the cache and `out`
/// none with the log or the index views ([`Error::Aliasing`]); and the log and the verify have
/// at most [`abi::REPLAY_VERIFY_MAX_TOKENS`] tokens each (the kernel stages both in shared memory;
/// [`Error::Unsupported`] names the one over it).
#[derive(Clone, Debug)]
pub struct GatedDeltaNetReplayVerify {
    /// The replay: sequence s commits to cache row `replay.dest_rows[s]`, which the verify reads.
    pub replay: GatedDeltaNetReplay,
    /// The verify step's GATED_DELTA_NET views (q, k \[D, H_k, T, n_s\], v \[D, H_v, T, n_s\], g, β
    /// \[1, H_v, T, n_s\], `out` like v); its initial state is row `replay.dest_rows[s]`.
    pub q: Tensor,
    pub k: Tensor,
    pub v: Tensor,
    pub g: Tensor,
    pub beta: Tensor,
    pub out: Tensor,
}

impl GatedDeltaNetReplayVerify {
    /// The fused op of `replay` then `verify`, when the verify reads its states from the cache
    /// the replay writes through the replay's destination index itself (the same view): `None`
    /// otherwise. The verify's `states` are dropped.
    pub fn of_pair(replay: &GatedDeltaNetReplay, verify: &GatedDeltaNetFromCache) -> Option<GatedDeltaNetReplayVerify> {
        (verify.ssm_cache == replay.ssm_cache && verify.source_rows == replay.dest_rows).then(|| GatedDeltaNetReplayVerify {
            replay: replay.clone(),
            q: verify.q,
            k: verify.k,
            v: verify.v,
            g: verify.g,
            beta: verify.beta,
            out: verify.out,
        })
    }

    fn views(&self) -> Views<'_> {
        Views { q: &self.q, k: &self.k, v: &self.v, g: &self.g, beta: &self.beta, out: &self.out, states: None }
    }

    /// Validates the op (views and index values) and returns the replay's sizes and the
    /// verify's (K = 0).
    pub fn check(&self, mem: &dyn Memory) -> Result<(ReplayShape, GdnShape)> {
        let r = &self.replay;
        let replay = r.check_as(OP, mem)?;
        let verify = check_views(OP, &self.views(), StateSource::FromCache { cache: &r.ssm_cache, source_rows: &r.dest_rows }, mem)?;
        // The kernel stages both token sets in shared memory (`abi::replay_verify_shared_bytes`).
        for (what, n) in [("log", replay.n_tokens), ("verify", verify.n_tokens)] {
            if n > abi::REPLAY_VERIFY_MAX_TOKENS {
                return Err(Error::Unsupported {
                    op: OP,
                    what: format!("a {what} of T = {n} tokens (at most REPLAY_VERIFY_MAX_TOKENS = {})", abi::REPLAY_VERIFY_MAX_TOKENS),
                });
            }
        }
        for (arg, x) in [("q", &self.q), ("k", &self.k), ("v", &self.v), ("g", &self.g), ("beta", &self.beta)] {
            check::disjoint(OP, "ssm_cache", &r.ssm_cache, arg, x)?;
        }
        for (arg, x) in [
            ("log k", &r.k),
            ("log v", &r.v),
            ("log g", &r.g),
            ("log beta", &r.beta),
            ("source_rows", &r.source_rows),
            ("accepted", &r.accepted),
        ] {
            check::disjoint(OP, "out", &self.out, arg, x)?;
        }
        Ok((replay, verify))
    }

    /// The verify as GATED_DELTA_NET_FROM_CACHE over the destination rows, its `states` the
    /// cache's row 0 with zero slots (never written): for its parameters and its reference.
    pub(crate) fn as_from_cache(&self) -> GatedDeltaNetFromCache {
        let r = &self.replay;
        let cache = r.ssm_cache;
        GatedDeltaNetFromCache {
            q: self.q,
            k: self.k,
            v: self.v,
            g: self.g,
            beta: self.beta,
            ssm_cache: cache,
            source_rows: r.dest_rows,
            out: self.out,
            states: cache.view([cache.ne()[0], 1, 0, 1], cache.layout.nb, 0),
        }
    }

    /// What the op launches once `mem` validated it ([`Self::check`]): its entry, shape
    /// (`launch_dims`, with the column groups a warp of [`replay_verify_groups`]) and the
    /// parameters over `addresses`.
    pub fn launch(&self, mem: &dyn Memory, addresses: &dyn KernelAddresses) -> Result<PlainLaunch<abi::GatedDeltaNetReplayVerifyParams>> {
        self.launch_with_groups(mem, addresses, None)
    }

    /// [test] [`Self::launch`] with `groups` column groups a warp (1 …
    /// `REPLAY_VERIFY_MAX_WARP_GROUPS`; None: the host's rule) — what the knob
    /// `RGDN_REPLAY_VERIFY_GROUPS` forces, without reading it: the kernel emulation runs both.
    /// Another count is [`Error::Unsupported`].
    pub fn launch_with_groups(
        &self,
        mem: &dyn Memory,
        addresses: &dyn KernelAddresses,
        groups: Option<u32>,
    ) -> Result<PlainLaunch<abi::GatedDeltaNetReplayVerifyParams>> {
        let shapes = self.check(mem)?;
        let groups = match groups {
            None => replay_verify_groups(shapes.1.n_heads * shapes.1.n_seqs),
            Some(g) if (1..=abi::REPLAY_VERIFY_MAX_WARP_GROUPS).contains(&g) => g,
            Some(g) => {
                return Err(Error::Unsupported {
                    op: OP,
                    what: format!("{g} column groups a warp (1 to {})", abi::REPLAY_VERIFY_MAX_WARP_GROUPS),
                });
            }
        };
        Ok(PlainLaunch {
            entry: abi::GATED_DELTA_NET_REPLAY_VERIFY_ENTRY,
            dims: launch_dims(&shapes, groups),
            params: self.params(&shapes, addresses),
        })
    }

    /// \[overlap\] [`Self::launch`] in form `overlap`: starting early, the entry that runs the
    /// replay and its commit, then waits for the grids before it, then the verify
    /// ([`abi::GATED_DELTA_NET_REPLAY_VERIFY_OVERLAP_ENTRY`], one column group a warp); the plain
    /// form is [`Self::launch`]'s. The kernel lets nothing start early after it: that form is
    /// [`Error::Unsupported`].
    pub fn launch_overlapped(
        &self,
        mem: &dyn Memory,
        addresses: &dyn KernelAddresses,
        overlap: Overlap,
    ) -> Result<PlainLaunch<abi::GatedDeltaNetReplayVerifyParams>> {
        if !self.overlap_forms().allow(overlap) {
            return Err(super::overlap::unsupported(OP, overlap));
        }
        if !overlap.starts_early {
            return self.launch(mem, addresses);
        }
        let launch = self.launch_with_groups(mem, addresses, Some(1))?;
        Ok(PlainLaunch { entry: abi::GATED_DELTA_NET_REPLAY_VERIFY_OVERLAP_ENTRY, ..launch })
    }

    /// The kernel's parameters for a validated op.
    pub(crate) fn params(
        &self,
        (replay, verify): &(ReplayShape, GdnShape),
        mem: &dyn KernelAddresses,
    ) -> abi::GatedDeltaNetReplayVerifyParams {
        let mut gdn = self.as_from_cache().params(verify, mem).gdn;
        // No slot: `states` is the cache's row 0 and the kernel's slot pointer for (head, seq)
        // stays inside it (states_seq = 0); it is never dereferenced.
        (gdn.states_seq, gdn.states_slot, gdn.n_slots) = (0, 0, 0);
        abi::GatedDeltaNetReplayVerifyParams { replay: self.replay.params(replay, mem), verify: gdn }
    }
}

/// \[speed\] From how many (value head, sequence) pairs a replay-verify warp runs two column groups
/// one after the other (its index loads, addresses and token staging paid once for 16 columns)
/// instead of one: the grid then has half the blocks, each twice as long, which pays only when it
/// has many waves of them (H_v·n_s = 1024 is 2048 two-group blocks, 2.6 waves of the H200's 792
/// resident ones at six a multiprocessor; the 9B's n_s = 64 is 5.2). Measured there on the H200
/// (`results/2026-12-06-rv-prefetch-ahead-h200/`, the replay step at a = T/2): one group a warp
/// 116.38 µs at T = 4 and 172.04 at T = 8, two groups 113.18 and 162.21; the threshold itself
/// (below n_s = 64) is not measured. `RGDN_REPLAY_VERIFY_GROUPS` = 1 / 2 forces either for
/// measurements.
pub const REPLAY_VERIFY_TWO_GROUPS_MIN_HEAD_SEQS: usize = 1024;

/// The column groups a replay-verify warp runs for `heads_x_seqs` = H_v·n_s: the default rule, or
/// the measurement knob `RGDN_REPLAY_VERIFY_GROUPS` = 1 / 2 (read once per process, as the other
/// launch knobs).
pub fn replay_verify_groups(heads_x_seqs: usize) -> u32 {
    static KNOB: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    match *KNOB.get_or_init(|| super::knob("RGDN_REPLAY_VERIFY_GROUPS", 1, abi::REPLAY_VERIFY_MAX_WARP_GROUPS)) {
        Some(groups) => groups,
        None if heads_x_seqs >= REPLAY_VERIFY_TWO_GROUPS_MIN_HEAD_SEQS => abi::REPLAY_VERIFY_MAX_WARP_GROUPS,
        None => 1,
    }
}

/// The kernel's launch shape: grid (H_v, n_s, D / (32·G)), block (32, 4, 1) — G groups of the
/// batched layer step's eight value columns a warp, one after the other
/// (`groups`, the host's from [`replay_verify_groups`]) — with the dynamic shared memory its token stages take for the
/// verify's T and the log's T_log tokens. The sizes were validated (H_v fits u32, n_s ≤ 65535,
/// both token counts ≤ `REPLAY_VERIFY_MAX_TOKENS`).
fn launch_dims((replay, verify): &(ReplayShape, GdnShape), groups: u32) -> LaunchDims {
    LaunchDims::new((verify.n_heads as u32, verify.n_seqs as u32, abi::replay_verify_grid_z(groups)), (32, abi::GDN_WARPS, 1))
        .with_shared_bytes(abi::replay_verify_shared_bytes(verify.n_tokens, replay.n_tokens, groups))
}

impl Op for GatedDeltaNetReplayVerify {
    fn name(&self) -> &'static str {
        OP
    }

    fn validate(&self, mem: &dyn Memory) -> Result<()> {
        self.check(mem).map(|_| ())
    }

    /// The rules that read the index views: the replay's (the verify's own, rows in range, are
    /// among them: it reads `dest_rows`, and writes no slot), as the full validation states
    /// them.
    fn check_indices(&self, mem: &dyn Memory) -> Result<()> {
        self.replay.check_indices_as(OP, mem)
    }

    /// The same rules prepared once (the replay's, named as this op's).
    fn index_rules(&self) -> Box<dyn IndexRules> {
        Box::new(ReplayIndexRules::new(OP, &self.replay))
    }

    fn prepare(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<PreparedLaunch> {
        self.prepare_overlapped(gpu, mem, Overlap::NONE)
    }

    /// \[overlap\] It may start early: before its wait the kernel reads the replay's views (the
    /// log, the index views, the cache rows) and writes the cache's destination rows; the verify's
    /// q, k, v, g and β are read and `out` written only after it (`tests/kernel_emulation.rs`
    /// holds the kernel to that).
    fn overlap_forms(&self) -> Forms {
        // Every block of the early entry's grid (H_v, n_s, 4) waits with its verify left.
        let [_, heads, _, seqs] = self.v.ne();
        let parked_blocks = heads.saturating_mul(seqs).saturating_mul(abi::replay_verify_grid_z(1) as usize);
        Forms {
            lets_next_start: false,
            early: Some(BeforeWait { reads: self.replay.inputs(), writes: vec![self.replay.ssm_cache], parked_blocks }),
        }
    }

    fn prepare_overlapped(&self, gpu: &Gpu, mem: &DeviceMemory, overlap: Overlap) -> Result<PreparedLaunch> {
        let PlainLaunch { entry, dims, params } = self.launch_overlapped(mem, mem, overlap)?;
        let args = [KernelArg::Params(ParamBlock::of(&params)?)];
        // SAFETY: `check` proved the replay's launch contract (every log view inside its buffer
        // for the heads < H_v, sequences < n_s and columns < D = 128 the grid (H_v, n_s,
        // D/(32·G)) × block (32, 4) reaches with G groups of 8 columns a warp, key heads < H_k, T_log tokens;
        // cache rows of D·D·H_v contiguous floats, rows cache_row elements apart, sharing no
        // bytes, overlapping no log or index view; every source and destination row a row of
        // the cache, every count ≤ T_log, no row written by two sequences nor read by a
        // sequence other than its writer) and the verify's as GATED_DELTA_NET_FROM_CACHE's over
        // the destination rows (views inside their buffers for the same grid, T ≥ 1 tokens,
        // out overlapping no input nor the cache), plus the verify's inputs off the cache and
        // out off the log and indices (the kernel's race-free case, see its docs); the verify's
        // `states` is the cache's row 0 with states_seq = 0 (in bounds, never written); both
        // token counts ≤ REPLAY_VERIFY_MAX_TOKENS, the dynamic shared memory the kernel's for them
        // (`launch_dims`); and `params` is the entry's parameter struct. [overlap] Starting early,
        // the entry with one group a warp (its grid) touches only its `BeforeWait` until every
        // grid before it completed, and the overlap pass proved that no grid that may run beside
        // it touches those bytes (`fusion::overlap`).
        unsafe { if overlap.starts_early { gpu.prepare_programmatic(entry, dims, &args) } else { gpu.prepare(entry, dims, &args) } }
    }

    /// The pair's references, composed: GATED_DELTA_NET_REPLAY's, then GATED_DELTA_NET_FROM_CACHE's
    /// from the destination rows with zero slots.
    fn reference(&self, mem: &mut HostMemory, mufu: &mut dyn Mufu) -> Result<()> {
        self.check(mem)?;
        self.replay.reference(mem, mufu)?;
        let rows = mem
            .index_values(&self.replay.dest_rows)
            .ok_or_else(|| Error::Invalid { op: OP, what: "`dest_rows` is not an index buffer".into() })?;
        let views = reference_views(&self.as_from_cache().as_gated_delta_net());
        crate::reference::gated_delta_net::gated_delta_net_from_cache(&views, &self.replay.ssm_cache, &rows, attention_scale(), mem, mufu)?;
        Ok(())
    }

    fn inputs(&self) -> Vec<Tensor> {
        let mut inputs = self.replay.inputs();
        inputs.extend([self.q, self.k, self.v, self.g, self.beta]);
        inputs
    }

    fn outputs(&self) -> Vec<Tensor> {
        vec![self.out, self.replay.ssm_cache]
    }

    /// `out`; the cache rows written depend on the counts (a = 0 writes none).
    fn must_write(&self) -> Vec<Tensor> {
        vec![self.out]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::math::ExactMufu;
    use crate::tensor::DType;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    const HV: usize = 2;
    const D: usize = abi::GDN_HEAD_DIM;

    /// Random floats, uniform in ±`scale`, into a new tensor.
    fn random(mem: &mut HostMemory, rng: &mut StdRng, ne: [usize; 4], scale: f32) -> Tensor {
        let t = mem.alloc_tensor(DType::F32, ne);
        let values: Vec<f32> = (0..t.layout.n_elements()).map(|_| rng.random_range(-scale..scale)).collect();
        mem.fill_f32(&t, &values).unwrap();
        t
    }

    /// Gates as the layer makes them (−exp of a realistic range) and β in [0, 1).
    fn gates(mem: &mut HostMemory, rng: &mut StdRng, n_t: usize, n_s: usize) -> (Tensor, Tensor) {
        let (g, beta) = (mem.alloc_tensor(DType::F32, [1, HV, n_t, n_s]), mem.alloc_tensor(DType::F32, [1, HV, n_t, n_s]));
        let gs: Vec<f32> = (0..HV * n_t * n_s).map(|_| -rng.random_range(-6.0f32..2.08).exp()).collect();
        let bs: Vec<f32> = (0..HV * n_t * n_s).map(|_| rng.random_range(0.0..1.0)).collect();
        mem.fill_f32(&g, &gs).unwrap();
        mem.fill_f32(&beta, &bs).unwrap();
        (g, beta)
    }

    /// The unfused pair over a cache of `n_rows` rows — a replay of a `t_log`-token log from
    /// `source` into `dest` with `accepted`, then a `n_t`-token verify reading `dest` and
    /// writing its one slot into a scratch — and the fused op over the same views.
    fn pair(
        mem: &mut HostMemory,
        rng: &mut StdRng,
        (n_rows, t_log, n_t): (usize, usize, usize),
        source: &[i32],
        dest: &[i32],
        accepted: &[i32],
    ) -> (GatedDeltaNetReplay, GatedDeltaNetFromCache, GatedDeltaNetReplayVerify) {
        let n_s = source.len();
        let (lg, lbeta) = gates(mem, rng, t_log, n_s);
        let replay = GatedDeltaNetReplay {
            k: random(mem, rng, [D, 1, t_log, n_s], 0.15),
            v: random(mem, rng, [D, HV, t_log, n_s], 2.0),
            g: lg,
            beta: lbeta,
            ssm_cache: random(mem, rng, [D * D * HV, n_rows, 1, 1], 0.5),
            source_rows: mem.alloc_indices(source),
            dest_rows: mem.alloc_indices(dest),
            accepted: mem.alloc_indices(accepted),
        };
        let (g, beta) = gates(mem, rng, n_t, n_s);
        let verify = GatedDeltaNetFromCache {
            q: random(mem, rng, [D, 1, n_t, n_s], 0.15),
            k: random(mem, rng, [D, 1, n_t, n_s], 0.15),
            v: random(mem, rng, [D, HV, n_t, n_s], 2.0),
            g,
            beta,
            ssm_cache: replay.ssm_cache,
            source_rows: replay.dest_rows,
            out: mem.alloc_tensor(DType::F32, [D, HV, n_t, n_s]),
            states: mem.alloc_tensor(DType::F32, [D * D * HV, n_s, 1, 1]),
        };
        let fused = GatedDeltaNetReplayVerify::of_pair(&replay, &verify).expect("the verify reads the replay's rows");
        (replay, verify, fused)
    }

    fn whole(mem: &HostMemory, t: &Tensor) -> Vec<u8> {
        mem.bytes(t.buffer).to_vec()
    }

    #[test]
    fn params_have_no_padding() {
        assert_eq!(std::mem::size_of::<abi::GatedDeltaNetReplayVerifyParams>(), 200 + 264);
        assert_eq!(std::mem::align_of::<abi::GatedDeltaNetReplayVerifyParams>(), 8);
    }

    /// The fused op equals the unfused pair byte for byte — the whole cache (the rows
    /// committed, the others untouched) and every `out` element — at log and verify lengths
    /// 1/4/8/16, counts 0, T and in between, the destination the source row or another; and it
    /// leaves the pair's scratch slot alone.
    #[test]
    fn it_is_the_unfused_pair_without_the_slot() {
        for (t_log, n_t, n_s) in [(1, 1, 2), (4, 4, 3), (8, 3, 2), (16, 16, 3), (4, 9, 1)] {
            for distinct in [false, true] {
                let mut rng = StdRng::seed_from_u64(260 + (t_log * 31 + n_t) as u64 + distinct as u64);
                let mut mem = HostMemory::new();
                let n_rows = 2 * n_s + 1;
                let source: Vec<i32> = (0..n_s as i32).map(|s| 2 * s + 1).collect();
                let dest: Vec<i32> = if distinct { (0..n_s as i32).map(|s| 2 * s).collect() } else { source.clone() };
                let accepted: Vec<i32> = (0..n_s).map(|s| [t_log, 0, t_log / 2 + 1][s % 3].min(t_log) as i32).collect();
                let (replay, verify, fused) = pair(&mut mem, &mut rng, (n_rows, t_log, n_t), &source, &dest, &accepted);
                let mut unfused = mem.clone();
                replay.reference(&mut unfused, &mut ExactMufu).unwrap();
                verify.reference(&mut unfused, &mut ExactMufu).unwrap();
                let before = mem.clone();
                fused.reference(&mut mem, &mut ExactMufu).unwrap();
                let ctx = format!("T_log {t_log}, T {n_t}, n_s {n_s}, distinct {distinct}");
                assert_eq!(whole(&mem, &replay.ssm_cache), whole(&unfused, &replay.ssm_cache), "{ctx}: the cache");
                assert_eq!(whole(&mem, &verify.out), whole(&unfused, &verify.out), "{ctx}: out");
                assert_eq!(whole(&mem, &verify.states), whole(&before, &verify.states), "{ctx}: the scratch slot was written");
                assert_ne!(whole(&mem, &verify.out), whole(&before, &verify.out), "{ctx}: out not written");
            }
        }
    }

    #[test]
    fn refuses_by_name_as_this_op() {
        let mut rng = StdRng::seed_from_u64(7);
        let mut mem = HostMemory::new();
        let (_, verify, fused) = pair(&mut mem, &mut rng, (5, 4, 4), &[0, 1], &[0, 1], &[4, 0]);
        fused.validate(&mem).unwrap();
        let with = |mem: &mut HostMemory, source: &[i32], dest: &[i32], accepted: &[i32]| {
            let mut o = fused.clone();
            o.replay.source_rows = mem.alloc_indices(source);
            o.replay.dest_rows = mem.alloc_indices(dest);
            o.replay.accepted = mem.alloc_indices(accepted);
            // A refusal is the reference's too, before anything is written.
            let r = o.validate(mem);
            let mut copy = mem.clone();
            assert_eq!(
                o.reference(&mut copy, &mut ExactMufu).map_err(|e| e.to_string()),
                r.as_ref().map(|_| ()).map_err(|e| e.to_string())
            );
            assert!(r.is_ok() || whole(&copy, &o.replay.ssm_cache) == whole(mem, &o.replay.ssm_cache));
            assert_eq!(o.check_indices(mem).map_err(|e| format!("{e:?}")), r.as_ref().map(|_| ()).map_err(|e| format!("{e:?}")));
            r
        };
        let r = with(&mut mem, &[0, 1], &[0, 1], &[4, 5]);
        assert!(matches!(r, Err(Error::IndexOutOfRange { op: OP, arg: "accepted", position: 1, index: 5, rows: 5 })), "{r:?}");
        let r = with(&mut mem, &[0, 1], &[0, 5], &[1, 1]);
        assert!(matches!(r, Err(Error::IndexOutOfRange { op: OP, arg: "dest_rows", position: 1, index: 5, rows: 5 })), "{r:?}");
        let r = with(&mut mem, &[0, -1], &[0, 1], &[1, 1]);
        assert!(matches!(r, Err(Error::IndexOutOfRange { op: OP, arg: "source_rows", position: 1, .. })), "{r:?}");
        let r = with(&mut mem, &[0, 1], &[2, 2], &[1, 0]);
        assert!(matches!(r, Err(Error::Aliasing { op: OP, a: "dest_rows", b: "dest_rows", .. })), "{r:?}");
        let r = with(&mut mem, &[0, 1], &[1, 2], &[0, 0]);
        assert!(matches!(r, Err(Error::Aliasing { op: OP, a: "dest_rows", b: "source_rows", .. })), "{r:?}");
        with(&mut mem, &[0, 1], &[3, 4], &[2, 0]).unwrap();
        // The verify's views: shapes, and the bytes the launch writes shared with what it reads.
        let mut o = fused.clone();
        o.q = mem.alloc_tensor(DType::F32, [D, 1, 3, 2]);
        assert!(matches!(o.validate(&mem), Err(Error::Shape { op: OP, arg: "k", .. }) | Err(Error::Shape { op: OP, .. })));
        let mut o = fused.clone();
        o.v = o.replay.ssm_cache.view(o.v.ne(), crate::tensor::Layout::contiguous(DType::F32, o.v.ne()).nb, 0);
        assert!(matches!(o.validate(&mem), Err(Error::Aliasing { op: OP, a: "ssm_cache", b: "v", .. })), "{:?}", o.validate(&mem));
        let mut o = fused.clone();
        o.out = o.replay.k.view(o.out.ne(), crate::tensor::Layout::contiguous(DType::F32, o.out.ne()).nb, 0);
        let big = mem.alloc_tensor(DType::F32, [o.out.layout.n_elements(), 1, 1, 1]);
        o.replay.k = big.view(o.replay.k.ne(), o.replay.k.layout.nb, 0);
        o.out = big.view(verify.out.ne(), verify.out.layout.nb, 0);
        assert!(matches!(o.validate(&mem), Err(Error::Aliasing { op: OP, a: "out", b: "log k", .. })), "{:?}", o.validate(&mem));
        // Token counts the kernel's shared-memory stages have no room for, the log's and the verify's.
        let max = abi::REPLAY_VERIFY_MAX_TOKENS;
        let mut rng = StdRng::seed_from_u64(8);
        let mut big = HostMemory::new();
        let (_, _, long) = pair(&mut big, &mut rng, (3, max, max), &[0], &[1], &[1]);
        long.validate(&big).unwrap();
        for (t_log, n_t, what) in [(max + 1, 4, "log"), (4, max + 1, "verify")] {
            let (_, _, o) = pair(&mut big, &mut rng, (3, t_log, n_t), &[0], &[1], &[1]);
            let r = o.validate(&big);
            assert!(
                matches!(&r, Err(Error::Unsupported { op: OP, what: w }) if w.contains(&format!("a {what} of T = {}", max + 1))),
                "{r:?}"
            );
        }
        // The pair only fuses when the verify reads through the replay's destination index.
        let other = GatedDeltaNetFromCache { source_rows: fused.replay.source_rows, ..verify };
        assert!(GatedDeltaNetReplayVerify::of_pair(&fused.replay, &other).is_none());
    }

    /// A memory that lends no index bytes: prepared rules then read the values through
    /// `index_values`, with the same verdicts.
    struct NoBytes<'a>(&'a HostMemory);

    impl Memory for NoBytes<'_> {
        fn buffer_len(&self, id: crate::tensor::BufferId) -> Option<usize> {
            self.0.buffer_len(id)
        }
        fn is_index_buffer(&self, id: crate::tensor::BufferId) -> bool {
            self.0.is_index_buffer(id)
        }
        fn index_values(&self, t: &Tensor) -> Option<Vec<i32>> {
            self.0.index_values(t)
        }
    }

    /// [host-cost] The prepared index rules (`ReplayIndexRules`, read in place or copied) give
    /// the full validation's verdict, error for error, for GATED_DELTA_NET_REPLAY_VERIFY and the
    /// plain GATED_DELTA_NET_REPLAY, on random index values: each of the three indices alone
    /// perturbed (a value replaced by a random one in −1 … rows + 1, or by another sequence's
    /// row or count), and all three random; every verdict occurs.
    #[test]
    fn prepared_index_rules_are_the_validations() {
        let mut rng = StdRng::seed_from_u64(31);
        let mut mem = HostMemory::new();
        let (n_rows, t_log, n_s) = (8, 4, 3);
        let (source, dest, accepted) = ([1, 3, 5], [0, 2, 4], [4, 0, 2]);
        let (replay, _, fused) = pair(&mut mem, &mut rng, (n_rows, t_log, 2), &source, &dest, &accepted);
        let ops: [&dyn Op; 2] = [&fused, &replay];
        let debug = |r: Result<()>| r.map_err(|e| format!("{e:?}"));
        let mut seen = std::collections::BTreeMap::<String, usize>::new();
        let r = &fused.replay;
        let write = |mem: &mut HostMemory, values: &[[i32; 3]; 3]| {
            for (t, v) in [(&r.source_rows, &values[0]), (&r.dest_rows, &values[1]), (&r.accepted, &values[2])] {
                for (w, x) in mem.bytes_mut(t.buffer)[t.layout.offset..].chunks_exact_mut(4).zip(v) {
                    w.copy_from_slice(&x.to_le_bytes());
                }
            }
        };
        for op in ops {
            write(&mut mem, &[source, dest, accepted]);
            op.validate(&mem).unwrap();
            let rules = op.index_rules();
            for trial in 0..3000 {
                let mut values = [source, dest, accepted];
                let bound = |k: usize| if k == 2 { t_log as i32 + 1 } else { n_rows as i32 };
                let pick = |rng: &mut StdRng, k: usize, values: &[[i32; 3]; 3]| match rng.random_range(0..3) {
                    0 => rng.random_range(-1..=bound(k) + 1),
                    1 => values[k][rng.random_range(0..n_s)],
                    _ => values[(k + 1) % 2][rng.random_range(0..n_s)],
                };
                if trial % 4 == 3 {
                    for (k, row) in values.iter_mut().enumerate() {
                        for v in row.iter_mut() {
                            *v = rng.random_range(-1..=bound(k));
                        }
                    }
                } else {
                    let k = trial % 3;
                    for _ in 0..rng.random_range(1..=2) {
                        let v = pick(&mut rng, k, &values);
                        values[k][rng.random_range(0..n_s)] = v;
                    }
                }
                write(&mut mem, &values);
                let validated = op.validate(&mem);
                let kind = match &validated {
                    Ok(()) => "accepted".to_string(),
                    Err(Error::IndexOutOfRange { arg, .. }) => format!("out of range: {arg}"),
                    Err(Error::Aliasing { a, b, .. }) => format!("aliasing: {a} / {b}"),
                    Err(e) => panic!("a verdict no index rule gives: {e}"),
                };
                *seen.entry(kind).or_default() += 1;
                let full = debug(validated);
                let ctx = format!("{}: {values:?}", op.name());
                assert_eq!(full, debug(op.check_indices(&mem)), "{ctx}: check_indices");
                assert_eq!(full, debug(rules.check(&mem)), "{ctx}: prepared rules, in place");
                assert_eq!(full, debug(rules.check(&NoBytes(&mem))), "{ctx}: prepared rules, copied");
            }
        }
        // Accepted, each index out of range, two writers of a row, a row another sequence writes.
        assert_eq!(seen.len(), 6, "{seen:?}");
        assert!(seen.values().all(|&n| n >= 20), "{seen:?}");
    }
}

#[cfg(test)]
mod group_rule_tests {
    use super::*;

    /// \[speed\] Two column groups a warp from [`REPLAY_VERIFY_TWO_GROUPS_MIN_HEAD_SEQS`] (value
    /// head, sequence) pairs on, one below, and the grid that covers D columns either way (the
    /// defaults only: a process with `RGDN_REPLAY_VERIFY_GROUPS` set says so and checks nothing).
    #[test]
    fn replay_verify_runs_two_groups_a_warp_from_the_threshold_on() {
        if std::env::var_os("RGDN_REPLAY_VERIFY_GROUPS").is_some() {
            eprintln!("RGDN_REPLAY_VERIFY_GROUPS is set: the defaults are not what this process runs; not checked");
            return;
        }
        let min = REPLAY_VERIFY_TWO_GROUPS_MIN_HEAD_SEQS;
        for (heads_x_seqs, groups) in [(1, 1), (32 * 16, 1), (min - 1, 1), (min, 2), (32 * 64, 2), (32 * 256, 2)] {
            assert_eq!(replay_verify_groups(heads_x_seqs), groups, "H_v·n_s = {heads_x_seqs}");
            let block_columns = abi::GDN_WARPS * abi::BATCH_GDN_WARP_COLUMNS * groups;
            assert_eq!(abi::replay_verify_grid_z(groups) * block_columns, abi::GDN_HEAD_DIM as u32, "grid z for {groups} groups");
        }
    }
}
