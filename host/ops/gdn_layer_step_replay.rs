//! \[replay\] GDN_LAYER_STEP_REPLAY — a replay layer's verify step in one launch: the fused conv
//! chain with the window commit in front ([`GdnConvChain`] with a [`ConvCommit`](super::gdn_conv_chain::ConvCommit)), the
//! alpha/beta products with the gate path ([`MulMatVecPairGate`]) and the replay with the
//! verify's recurrence ([`GatedDeltaNetReplayVerify`]), bit-identical to those three ops run one
//! after the other (hence to the unfused replay step, which each of them equals). Kernel:
//! `kernels-gpu/src/gdn_layer_step_replay.rs` (its docs: the phases, the hazards); reference: the
//! three ops' references in graph order. It is GDN_LAYER_STEP's single-sequence schedule
//! (`abi::LayerStepItems`: the same items, flags and waits, proved by the same readiness proof)
//! with GATED_DELTA_NET_REPLAY_VERIFY's blocks as its second phase, whose replay runs before the
//! wait.

use super::gated_delta_net::GdnShape;
use super::gated_delta_net_replay::ReplayShape;
use super::gdn_conv_chain::ChainShape;
use super::gdn_layer_step::{StepShape, own_items, persistent_grid};
use super::index_rules::IndexRules;
use super::mmvf::MatVecShape;
use super::{GatedDeltaNetReplayVerify, GdnConvChain, GdnLayerStep, MulMatVecPairGate, Op, check};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, KernelArg, ParamBlock, PreparedLaunch};
use crate::kernels::abi;
use crate::memory::{DeviceMemory, HostMemory, KernelAddresses, Memory};
use crate::reference::math::Mufu;
use crate::tensor::Tensor;

const OP: &str = "GDN_LAYER_STEP_REPLAY";

/// The three fused ops of one replay-mode GDN layer step, as one launch.
///
/// Valid when each part is valid on its own (its own errors, as that op reports them) and:
/// - **scope**: the chain commits a window (a chain without one is GDN_LAYER_STEP's); 1 ..=
///   [`abi::GDN_LAYER_STEP_MAX_SEQS`] sequences whose first-phase items — the single-sequence
///   layer step's over every sequence, n_s·C/128 + 2·H_v·⌈n_t·n_s/2⌉ — fit the readiness
///   state's [`abi::GRID_SYNC_FLAGS`] flags; n_t ≤ [`abi::GDN_LAYER_STEP_MAX_TOKENS`]; D = 128;
///   d_conv 3–5 — else [`Error::Unsupported`];
/// - **links**: GDN_LAYER_STEP's (the verify's q, k, v, g and β are the chain's q_norm, k_norm
///   and v channels and the pair-gate's gate and β; the products' columns the n_t·n_s tokens,
///   their rows the value heads) — else [`Error::Invalid`];
/// - **disjointness** (the first phase runs the commit-and-chain tiles and the products at the
///   same time; a second-phase block reads the previous step's log, the counts and the rows
///   and writes the ssm cache while first-phase items run, and writes `out`): every output of
///   the products disjoint from every tensor of the chain (its commit included) and vice versa;
///   `out` and the ssm cache disjoint from every tensor of the first phase; the replay's log,
///   counts and row indices disjoint from every output of the first phase; the commit's writes
///   (the conv cache, the logs of this step) disjoint from the verify's inputs — else
///   [`Error::Aliasing`];
/// - **readiness**: GDN_LAYER_STEP's proof on the same items and waits (every first-phase item
///   writing a byte a head's verify reads is among the items that head waits for; the commit's
///   writes meet none of those bytes, above) — else [`Error::Invalid`].
#[derive(Clone, Debug)]
pub struct GdnLayerStepReplay {
    pub chain: GdnConvChain,
    pub gate: MulMatVecPairGate,
    pub gdn: GatedDeltaNetReplayVerify,
}

/// The sizes a valid [`GdnLayerStepReplay`] runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayStepShape {
    pub chain: ChainShape,
    pub products: MatVecShape,
    /// The replay's (its log's T_log).
    pub replay: ReplayShape,
    /// The verify's (no state slot).
    pub verify: GdnShape,
}

/// What one GDN_LAYER_STEP_REPLAY launch runs ([`GdnLayerStepReplay::launch`]): the grid is
/// the caller's (on the GPU every co-resident block; no bit depends on it).
#[derive(Clone, Copy, Debug)]
pub struct ReplayStepLaunch {
    /// The kernel entry (`abi::ENTRIES`).
    pub entry: &'static str,
    /// Dynamic shared memory of a block, bytes.
    pub shared_bytes: u32,
    /// The entry's parameters.
    pub params: abi::GdnLayerStepReplayParams,
    /// Work items of the first phase.
    pub first_phase_items: u32,
    /// Block items of the second phase (n_s·H_v·4).
    pub second_phase_items: u32,
}

impl GdnLayerStepReplay {
    /// The fused op of the three parts, or `None` when the chain commits no window.
    pub fn of_parts(chain: &GdnConvChain, gate: &MulMatVecPairGate, gdn: &GatedDeltaNetReplayVerify) -> Option<GdnLayerStepReplay> {
        chain.commit.is_some().then(|| GdnLayerStepReplay { chain: chain.clone(), gate: gate.clone(), gdn: gdn.clone() })
    }

    /// The layer step whose items, waits and readiness proof this op runs: the chain without its
    /// commit (its item writes are the chain's; the commit's own are proved disjoint from every
    /// read the proof covers), the products, and the verify as GATED_DELTA_NET_FROM_CACHE over
    /// the committed rows with no slot.
    fn as_layer_step(&self) -> GdnLayerStep {
        GdnLayerStep { chain: GdnConvChain { commit: None, ..self.chain.clone() }, gate: self.gate.clone(), gdn: self.gdn.as_from_cache() }
    }

    /// The first link the views break, structure only (what the fusion's matcher asks too).
    pub fn broken_link(&self) -> Option<&'static str> {
        self.as_layer_step().broken_link()
    }

    /// Validates the op (see the struct docs) and returns its sizes.
    pub fn check(&self, mem: &dyn Memory) -> Result<ReplayStepShape> {
        let (chain, gate, gdn) = (&self.chain, &self.gate, &self.gdn);
        let n_t = chain.qkv.ne()[1];
        if n_t > abi::GDN_LAYER_STEP_MAX_TOKENS {
            return Err(Error::Unsupported {
                op: OP,
                what: format!("n_t = {n_t} tokens (at most {}: GDN_LAYER_STEP_MAX_TOKENS)", abi::GDN_LAYER_STEP_MAX_TOKENS),
            });
        }
        if chain.head_dim != abi::GDN_HEAD_DIM {
            return Err(Error::Unsupported {
                op: OP,
                what: format!("head_dim = {} (GATED_DELTA_NET's D = {})", chain.head_dim, abi::GDN_HEAD_DIM),
            });
        }
        let Some(commit) = &chain.commit else {
            return Err(Error::Unsupported { op: OP, what: "a conv chain without a window commit (GDN_LAYER_STEP runs it)".into() });
        };
        // Each part on its own.
        let chain_shape = chain.check(mem)?;
        let products = gate.check(mem)?;
        let (replay, verify) = gdn.check(mem)?;
        let n_s = verify.n_seqs;
        if n_s == 0 || n_s > abi::GDN_LAYER_STEP_MAX_SEQS {
            return Err(Error::Unsupported {
                op: OP,
                what: format!("{n_s} sequences (1 to {}: GDN_LAYER_STEP_MAX_SEQS)", abi::GDN_LAYER_STEP_MAX_SEQS),
            });
        }
        if abi::gdn_layer_step_replay_entry(products.kind, chain_shape.d_conv).is_none() {
            return Err(Error::Unsupported {
                op: OP,
                what: format!("mat-vec kind {} with d_conv = {} has no entry", products.kind, chain_shape.d_conv),
            });
        }
        // Links.
        let link = |ok: bool, what: &str| {
            if ok { Ok(()) } else { Err(Error::Invalid { op: OP, what: format!("the parts are not linked as one layer step: {what}") }) }
        };
        link(verify.n_tokens == n_t && chain_shape.n_seqs == n_s, "the token or sequence counts of the parts differ")?;
        link(products.ncols == n_t * n_s, "the products' columns are not the n_t·n_s tokens")?;
        link(products.rows == verify.n_heads, "the products' rows are not the GDN's value heads")?;
        link(
            2 * chain.n_k_heads + verify.n_heads <= chain_shape.n_channels / abi::GDN_HEAD_DIM,
            "the conv output has no v channels for every value head",
        )?;
        if let Some(what) = self.broken_link() {
            link(false, what)?;
        }
        // Disjointness across the parts and the phases.
        let (first, second) = (&gate.pair.first, &gate.pair.second);
        let chain_reads: Vec<(&'static str, &Tensor)> = vec![
            ("conv_cache", &chain.conv_cache),
            ("source_row", &chain.source_row),
            ("qkv", &chain.qkv),
            ("conv_weight", &chain.weight),
            ("window_rows", &commit.window_rows),
            ("log_qkv", &commit.log_qkv),
        ];
        let mut chain_writes: Vec<(&'static str, &Tensor)> =
            vec![("conv_out", &chain.conv_out), ("q_norm", &chain.q_norm), ("k_norm", &chain.k_norm), ("conv_cache", &chain.conv_cache)];
        let commit_writes: Vec<(&'static str, &Tensor)> =
            [("log_out", &commit.log_out), ("log_k", &commit.log_k), ("log_v", &commit.log_v)]
                .into_iter()
                .filter_map(|(name, t)| t.as_ref().map(|t| (name, t)))
                .collect();
        chain_writes.extend(commit_writes.iter().copied());
        let pair_reads: [(&'static str, &Tensor); 5] = [
            ("alpha_weight", &first.weight),
            ("beta_weight", &second.weight),
            ("cur", &first.input),
            ("dt_bias", &gate.dt_bias),
            ("ssm_a", &gate.ssm_a),
        ];
        let pair_writes: [(&'static str, &Tensor); 4] =
            [("alpha", &first.dst), ("beta_raw", &second.dst), ("beta", &gate.beta), ("gate", &gate.gate)];
        for (a, ta) in pair_writes {
            for (b, tb) in chain_reads.iter().chain(&chain_writes) {
                check::disjoint(OP, a, ta, b, tb)?;
            }
        }
        for (a, ta) in &chain_writes {
            for (b, tb) in pair_reads {
                check::disjoint(OP, a, ta, b, tb)?;
            }
        }
        let r = &gdn.replay;
        let first_phase: Vec<(&'static str, &Tensor)> =
            chain_reads.iter().chain(&chain_writes).chain(&pair_reads).chain(&pair_writes).copied().collect();
        for (a, ta) in [("out", &gdn.out), ("ssm_cache", &r.ssm_cache)] {
            for (b, tb) in &first_phase {
                check::disjoint(OP, a, ta, b, tb)?;
            }
        }
        let first_phase_writes: Vec<(&'static str, &Tensor)> = chain_writes.iter().chain(&pair_writes).copied().collect();
        for (a, ta) in [
            ("log k", &r.k),
            ("log v", &r.v),
            ("log g", &r.g),
            ("log beta", &r.beta),
            ("accepted", &r.accepted),
            ("ssm_source_rows", &r.source_rows),
            ("ssm_dest_rows", &r.dest_rows),
        ] {
            for (b, tb) in &first_phase_writes {
                check::disjoint(OP, a, ta, b, tb)?;
            }
        }
        let mut commit_and_cache = commit_writes.clone();
        commit_and_cache.push(("conv_cache", &chain.conv_cache));
        for (a, ta) in [("q", &gdn.q), ("k", &gdn.k), ("v", &gdn.v), ("g", &gdn.g), ("beta", &gdn.beta)] {
            for (b, tb) in &commit_and_cache {
                check::disjoint(OP, a, ta, b, tb)?;
            }
        }
        // The single-sequence layer step's items over every sequence, within the flags.
        let own = own_items(&chain_shape, &verify)?;
        if own > abi::GRID_SYNC_FLAGS {
            return Err(Error::Unsupported {
                op: OP,
                what: format!(
                    "{own} first-phase work items (n_s·C/128 + 2·H_v·⌈n_t·n_s/2⌉; the readiness state has {} flags)",
                    abi::GRID_SYNC_FLAGS
                ),
            });
        }
        let shape = ReplayStepShape { chain: chain_shape, products, replay, verify };
        self.items(&shape)?;
        if verify.n_heads == 0 || verify.n_key_heads == 0 {
            return Err(Error::Invalid { op: OP, what: "no value heads or no key heads".into() });
        }
        // Readiness: the layer step's proof on the same items and waits.
        let step = self.as_layer_step();
        let step_shape = Self::step_shape(&shape);
        if let Some((seq, head, item)) = step.kernel_readiness_gap(&step_shape) {
            return Err(Error::Invalid {
                op: OP,
                what: format!(
                    "sequence {seq}'s value head {head} reads bytes that first-phase item {item} writes, and the kernel's \
                     readiness waits (abi::LayerStepItems::item_read_by) do not include it"
                ),
            });
        }
        Ok(shape)
    }

    /// The layer step's shape the readiness proof runs on: its single-sequence items over n_s
    /// sequences.
    fn step_shape(shape: &ReplayStepShape) -> StepShape {
        StepShape {
            chain: shape.chain,
            products: shape.products,
            gdn: shape.verify,
            // n_s ≤ GDN_LAYER_STEP_MAX_SEQS (checked).
            batch: abi::LayerStepBatchParams { n_seqs: shape.verify.n_seqs as u32, groups_per_warp: 1, ..Default::default() },
        }
    }

    /// (first-phase items, second-phase block items), checked to fit u32.
    fn items(&self, shape: &ReplayStepShape) -> Result<(u32, u32)> {
        let first = own_items(&shape.chain, &shape.verify)?;
        let second = check::product(
            OP,
            "v",
            "second-phase block items n_s·H_v·4",
            &[shape.verify.n_seqs, shape.verify.n_heads, abi::REPLAY_STEP_ITEMS_PER_HEAD as usize],
        )?;
        Ok((check::fits_u32(OP, "first-phase work items", first)?, check::fits_u32(OP, "second-phase work items", second)?))
    }

    /// What the step launches (entry, shared memory, parameters over `addresses`, work items),
    /// once `mem` validated it; `sync_state` is the address of the launch's readiness state.
    /// [`Op::prepare`] launches this on a co-resident grid; the kernel emulation runs the same
    /// entry's source on the CPU.
    pub fn launch(&self, mem: &dyn Memory, addresses: &dyn KernelAddresses, sync_state: u64) -> Result<ReplayStepLaunch> {
        let shape = self.check(mem)?;
        let (kind, d_conv, n_t) = (shape.products.kind, shape.chain.d_conv, shape.chain.n_tokens);
        let entry = abi::gdn_layer_step_replay_entry(kind, d_conv)
            .ok_or_else(|| Error::Unsupported { op: OP, what: format!("mat-vec kind {kind} with d_conv = {d_conv} has no entry") })?;
        // The parts' own parameter blocks, as their launches build them, from the shapes `check`
        // validated (each part checked once).
        let Some(chain) = self.chain.commit_params(self.chain.params(&shape.chain, addresses), addresses) else {
            return Err(Error::Unsupported { op: OP, what: "a conv chain without a window commit (GDN_LAYER_STEP runs it)".into() });
        };
        let rv = self.gdn.params(&(shape.replay, shape.verify), addresses);
        let (first_phase_items, second_phase_items) = self.items(&shape)?;
        // Validated: H_v, C/128, n_t and n_s fit u32 (the items do).
        let params = abi::GdnLayerStepReplayParams {
            chain,
            gate: self.gate.params(addresses, &shape.products),
            rv,
            sync_state,
            pair_block: shape.products.block_size,
            n_heads: shape.verify.n_heads as u32,
            n_chain_tiles: (shape.chain.n_channels / abi::GDN_CONV_CHAIN_BLOCK as usize) as u32,
            n_tokens: n_t as u32,
            n_seqs: shape.verify.n_seqs as u32,
            _pad: 0,
        };
        Ok(ReplayStepLaunch {
            entry,
            shared_bytes: abi::gdn_layer_step_replay_shared_bytes(d_conv, n_t, shape.replay.n_tokens),
            params,
            first_phase_items,
            second_phase_items,
        })
    }
}

// SAFETY: `#[repr(C)]`, `Copy`: the 448-byte GdnConvChainCommitParams, the 144-byte
// MulMatVecPairGateParams and the 464-byte GatedDeltaNetReplayVerifyParams (each alignment 8 with
// no padding), one u64 and six u32: 1088 bytes, alignment 8, no padding (`param_struct!` asserts
// it); it is exactly the type the `gdn_layer_step_replay_*` entries take.
unsafe impl crate::gpu::KernelParams for abi::GdnLayerStepReplayParams {}

/// The parts' prepared index rules, run in `check`'s order (the chain's, then the GDN's).
#[derive(Debug)]
struct BothRules(Box<dyn IndexRules>, Box<dyn IndexRules>);

impl IndexRules for BothRules {
    fn check(&self, mem: &dyn Memory) -> Result<()> {
        self.0.check(mem)?;
        self.1.check(mem)
    }
}

impl Op for GdnLayerStepReplay {
    fn name(&self) -> &'static str {
        OP
    }

    fn validate(&self, mem: &dyn Memory) -> Result<()> {
        self.check(mem).map(|_| ())
    }

    /// The parts' index rules: no rule of the step's own (links, disjointness, readiness) reads
    /// an index value.
    fn check_indices(&self, mem: &dyn Memory) -> Result<()> {
        self.chain.check_indices(mem)?;
        self.gdn.check_indices(mem)
    }

    fn index_rules(&self) -> Box<dyn IndexRules> {
        Box::new(BothRules(self.chain.index_rules(), self.gdn.index_rules()))
    }

    fn prepare(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<PreparedLaunch> {
        let ReplayStepLaunch { entry, shared_bytes: shared, params, first_phase_items: first, second_phase_items: second } =
            self.launch(mem, mem, gpu.grid_sync())?;
        // The second phase's units are replay-verify blocks, one a block at a time.
        let dims = persistent_grid(gpu, OP, entry, shared, (first, second, 1))?;
        let args = [KernelArg::Params(ParamBlock::of(&params)?)];
        // SAFETY: `check` proved each part valid for the views its kernel body reads and writes
        // (as its own launch would: the commit-and-chain tiles for C/128 tiles of n_s sequences,
        // the products for H_v rows and n_t·n_s columns of ggml's block size, the replay-verify's
        // blocks (H_v, n_s, 4) with one group a warp), the links that make the verify read exactly
        // the first phase's outputs, the disjointness the kernel's docs rely on (across the parts,
        // and the second phase's early reads and its writes off every first-phase output) and the
        // readiness waits; the grid is at most the device's co-resident block count for this entry,
        // block and shared memory, and the launch is cooperative, so no wait for an item's flag
        // can wait on an unscheduled block; the first-phase items fit the readiness state's flags
        // and 2·⌈n_t/2⌉ + 3 ≤ 32 (n_t ≤ 16); the state is this Gpu's, whose one stream runs
        // launches in order; every work index fits u32 with the grid added; the shared memory is
        // the entry's layout; `params` is the entry's parameter struct.
        unsafe { gpu.prepare_cooperative(entry, dims, &args) }
    }

    fn reference(&self, mem: &mut HostMemory, mufu: &mut dyn Mufu) -> Result<()> {
        // Everything validated before anything is written.
        self.check(mem)?;
        self.chain.reference(mem, mufu)?;
        self.gate.reference(mem, mufu)?;
        self.gdn.reference(mem, mufu)
    }

    /// Every input of the parts from outside the step: the verify's q, k, v, g and β are the
    /// step's own outputs (read after it wrote them), not inputs.
    fn inputs(&self) -> Vec<Tensor> {
        let mut v = self.chain.inputs();
        v.extend(self.gate.inputs());
        v.extend(self.gdn.replay.inputs());
        v
    }

    fn outputs(&self) -> Vec<Tensor> {
        let mut v = self.chain.outputs();
        v.extend(self.gate.outputs());
        v.extend(self.gdn.outputs());
        v
    }

    fn must_write(&self) -> Vec<Tensor> {
        let mut v = self.chain.must_write();
        v.extend(self.gate.must_write());
        v.extend(self.gdn.must_write());
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fusion::{Options, compile, sweep};
    use crate::graph::exec::run_cpu;
    use crate::graph::layer::{LayerSpec, Outputs, Rollback, StackSpec};
    use crate::layer::{GdnShape, Step};
    use crate::reference::math::ExactMufu;

    const SMALL: GdnShape = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 128, d_conv: 4, eps: 1e-6 };

    /// A built one-layer replay graph of `n_s` sequences (own cells) and `n_t` tokens.
    fn replay_layer(n_s: usize, n_t: usize, seed: u64) -> crate::graph::layer::Built {
        let more: Vec<(usize, usize)> = (1..n_s).map(|s| (s, 0)).collect();
        let step = Step { cells: n_s, ..Step::new(n_t, 0) }.with_sequences(&more).unwrap();
        let layer = LayerSpec { rollback: Rollback::Replay { log_set: 0 }, ..LayerSpec::new(SMALL, step) };
        sweep::build(&StackSpec { layers: vec![layer], outputs: Outputs::Products }, seed, sweep::Planning::FusionAware).unwrap()
    }

    /// The fused step of a built replay layer (every fusion).
    fn fused_step(b: &crate::graph::layer::Built) -> GdnLayerStepReplay {
        let (nodes, report) = compile(b.replay_nodes(1).unwrap(), &b.live_out(), Options::ALL);
        assert_eq!(report.fired("replay_step"), 1, "{report}");
        nodes.iter().find_map(|n| n.get::<GdnLayerStepReplay>()).unwrap().clone()
    }

    #[test]
    fn params_have_no_padding_and_entries_are_named() {
        assert_eq!(std::mem::size_of::<abi::GdnLayerStepReplayParams>(), 1088);
        for kind in
            [abi::mul_mat_vec_kind::F32, abi::mul_mat_vec_kind::BF16, abi::mul_mat_vec_kind::F16_HALF, abi::mul_mat_vec_kind::F16_F32]
        {
            for d in 3..=5 {
                let e = abi::gdn_layer_step_replay_entry(kind, d).unwrap();
                assert!(e.starts_with("gdn_layer_step_replay_") && abi::ENTRIES.iter().any(|s| s.name == e), "{e}");
            }
        }
        assert!(abi::gdn_layer_step_replay_entry(abi::mul_mat_vec_kind::F32, 6).is_none());
    }

    /// The whole replay graph with the step fused (one GDN_LAYER_STEP_REPLAY) equals it with the
    /// three parts (`replay_step` off), byte for byte, on the CPU references: every buffer.
    #[test]
    fn the_fused_replay_step_equals_its_three_parts_on_the_cpu() {
        for (n_s, n_t, seed) in [(1, 1, 1), (1, 4, 2), (2, 3, 3), (4, 16, 4)] {
            let b = replay_layer(n_s, n_t, seed);
            let run = |options: Options| {
                let (nodes, _) = compile(b.replay_nodes(1).unwrap(), &b.live_out(), options);
                let mut mem = b.mem.clone();
                run_cpu(&nodes, &mut mem, &mut ExactMufu).unwrap();
                mem
            };
            let (fused, parts) = (run(Options::ALL), run(Options::ALL.without("replay_step")));
            for i in 0..fused.n_buffers() {
                let id = crate::tensor::BufferId(i);
                assert!(fused.bytes(id) == parts.bytes(id), "n_s = {n_s}, n_t = {n_t}: buffer {i} differs");
            }
        }
    }

    #[test]
    fn a_valid_step_launches_its_entry_with_the_layer_steps_items() {
        let b = replay_layer(2, 3, 5);
        let op = fused_step(&b);
        let shape = op.check(&b.mem).unwrap();
        assert_eq!((shape.verify.n_seqs, shape.verify.n_tokens, shape.replay.n_tokens), (2, 3, 3));
        // Addresses: the tensor's byte offset past a fixed base (no device needed).
        struct At(u64);
        impl KernelAddresses for At {
            fn address(&self, t: &Tensor) -> u64 {
                self.0 + t.layout.offset as u64
            }
        }
        let launch = op.launch(&b.mem, &At(1 << 20), 64).unwrap();
        assert_eq!(launch.params.sync_state, 64);
        assert_eq!(launch.entry, "gdn_layer_step_replay_f32_d4");
        // 2 sequences × C/128 = 4 tiles, 2·H_v·⌈n_t·n_s/2⌉ = 12 row items; n_s·H_v·4 blocks.
        assert_eq!((launch.first_phase_items, launch.second_phase_items), (8 + 12, 16));
        assert_eq!(launch.params.n_seqs, 2);
        assert_eq!(launch.shared_bytes, abi::gdn_layer_step_replay_shared_bytes(4, 3, 3));
    }

    #[test]
    fn refuses_steps_out_of_scope_unlinked_or_sharing_bytes_across_phases() {
        let b = replay_layer(1, 4, 6);
        let op = fused_step(&b);
        // A chain without its commit: GDN_LAYER_STEP's.
        let mut plain = op.clone();
        plain.chain.commit = None;
        assert!(matches!(plain.check(&b.mem), Err(Error::Unsupported { op: OP, .. })), "{:?}", plain.check(&b.mem));
        // The verify reading q from elsewhere.
        let mut unlinked = op.clone();
        unlinked.gdn.q = unlinked.gdn.k;
        assert!(matches!(unlinked.check(&b.mem), Err(Error::Invalid { op: OP, .. })), "{:?}", unlinked.check(&b.mem));
        // The replay's log on bytes the first phase writes (this step's conv-input log): a
        // second-phase block would read it while a conv item writes it.
        let mut racing = op.clone();
        let log_out = racing.chain.commit.as_ref().unwrap().log_out.unwrap();
        racing.gdn.replay.k = log_out.view(racing.gdn.replay.k.ne(), racing.gdn.replay.k.layout.nb, 0);
        assert!(matches!(racing.check(&b.mem), Err(Error::Aliasing { .. })), "{:?}", racing.check(&b.mem));
        assert!(op.check(&b.mem).is_ok());
    }
}
