//! What the bench and the main command run: one layer's chain "off" (unfused) and "on" (fused)
//! over the same tensors. [`ChainBuilder`] is the plug-in point: [`default_builder`] returns
//! [`Fused`] (ggml's graph of the layer through the fusion pass, `crate::fusion`);
//! [`UnfusedOnly`] runs the unfused chain in both arms (its outputs say "fusion not available").

use crate::error::Result;
use crate::graph::layer::unfused_ops;
use crate::layer::{GdnShape, LayerInit, LayerTensors, Step};
use crate::memory::HostMemory;
use crate::ops::Op;
use crate::tensor::BufferId;
use rand::SeedableRng;
use rand::rngs::StdRng;
use std::collections::BTreeSet;

/// One layer step's configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ChainConfig {
    pub shape: GdnShape,
    pub step: Step,
    pub init: LayerInit,
}

/// Builds one layer's op chain, unfused (`fusion = false`) or fused (`fusion = true`), over
/// tensors the caller allocated. Both chains must compute the same bytes in every buffer the
/// fused chain writes (the main command checks it bit for bit).
pub trait ChainBuilder: Sync {
    /// Whether `layer_ops(.., true)` really differs from the unfused chain.
    fn fusion_available(&self) -> bool;
    /// Whether the two arms compute the same bytes (then the bench compares them after one
    /// planned step each and fails on a difference). \[replay\] Not so for
    /// [`ReplayVsSnapshot`], whose arms are two different steps.
    fn equivalent(&self) -> bool {
        true
    }
    /// \[replay\] The count every sequence of the "on" arm accepted of its logged step, for a
    /// step of `n_t` tokens, when that arm is a replay-mode layer (the report's replay table).
    fn replay_accepted(&self, _n_t: usize) -> Option<usize> {
        None
    }
    /// What the chain is, for the output ("unfused", "fused: conv chain + alpha/beta pair", …).
    fn label(&self, fusion: bool) -> String;
    /// The ops of one layer step over `t`, in launch order. May allocate scratch in `mem`.
    fn layer_ops(&self, mem: &mut HostMemory, t: &LayerTensors, cfg: &ChainConfig, fusion: bool) -> Result<Vec<Box<dyn Op>>>;
}

/// The unfused chain for both arms: the honest stand-in while no fusion pass exists.
pub struct UnfusedOnly;

impl ChainBuilder for UnfusedOnly {
    fn fusion_available(&self) -> bool {
        false
    }

    fn label(&self, fusion: bool) -> String {
        if fusion { "fusion not available: the unfused chain again".into() } else { "unfused".into() }
    }

    fn layer_ops(&self, _mem: &mut HostMemory, t: &LayerTensors, cfg: &ChainConfig, _fusion: bool) -> Result<Vec<Box<dyn Op>>> {
        unfused_ops(t, &cfg.shape, &cfg.step, cfg.init.precision)
    }
}

/// "off": the unfused chain; "on": ggml's graph of the layer through the fusion pass (the GDN
/// conv chain and the alpha/beta pair wherever the matcher accepts them; each refusal leaves
/// those nodes unfused), then the backend's snapshot batching. The "on" arm applies the
/// fusions in `.0` (the default set unless `rgdn bench --fusions` names others).
pub struct Fused(pub crate::fusion::Options);

impl ChainBuilder for Fused {
    fn fusion_available(&self) -> bool {
        true
    }

    fn label(&self, fusion: bool) -> String {
        if fusion { format!("fused ({} where the pass accepts)", self.0.names().join(" + ")) } else { "unfused".into() }
    }

    fn layer_ops(&self, mem: &mut HostMemory, t: &LayerTensors, cfg: &ChainConfig, fusion: bool) -> Result<Vec<Box<dyn Op>>> {
        // The library's own entry (what an engine calls): one definition of the fused step,
        // planned on this memory (the device copy has the same buffers).
        let fusions = if fusion { self.0 } else { crate::fusion::Options::OFF };
        Ok(crate::engine::layer_step_with(t, &cfg.shape, &cfg.step, &cfg.init, fusions, mem)?.ops)
    }
}

/// \[replay\] Which count every sequence of the bench's replay arm accepted of its logged step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayAccept {
    /// a = ⌊T/2⌋.
    Half,
    /// a = T.
    All,
}

impl ReplayAccept {
    /// `half` or `all` (what `rgdn bench --replay` takes).
    pub fn parse(s: &str) -> Result<ReplayAccept> {
        match s.trim() {
            "half" => Ok(ReplayAccept::Half),
            "all" => Ok(ReplayAccept::All),
            other => Err(crate::Error::Invalid { op: "bench", what: format!("--replay {other}: expected half (a = T/2) or all (a = T)") }),
        }
    }

    /// The count for a step of `n_t` tokens.
    pub fn count(self, n_t: usize) -> usize {
        match self {
            ReplayAccept::Half => n_t / 2,
            ReplayAccept::All => n_t,
        }
    }

    /// The replay layer's label: "replay layer (R = 0, a = T/2, `what`)".
    fn layer_label(self, what: &str) -> String {
        let a = match self {
            ReplayAccept::Half => "T/2",
            ReplayAccept::All => "T",
        };
        format!("replay layer (R = 0, a = {a}, {what})")
    }
}

/// \[replay\] Exact replay against ggml's snapshots (`docs/rollback.md`): the "off" arm is the
/// snapshot layer of the mode (T, R) with `snapshots` fusions — what the engine runs today —
/// and the "on" arm the replay-mode layer of the same T and sequences (R = 0, every fusion, so
/// `replay_verify` among them) over buffers of its own, each sequence first committing
/// `accept` tokens of a logged step. The arms compute different steps: nothing is compared
/// between them.
pub struct ReplayVsSnapshot {
    pub snapshots: crate::fusion::Options,
    pub accept: ReplayAccept,
}

impl ChainBuilder for ReplayVsSnapshot {
    fn fusion_available(&self) -> bool {
        true
    }

    fn equivalent(&self) -> bool {
        false
    }

    fn replay_accepted(&self, n_t: usize) -> Option<usize> {
        Some(self.accept.count(n_t))
    }

    fn label(&self, fusion: bool) -> String {
        if fusion { self.accept.layer_label("every fusion") } else { format!("snapshot layer ({})", Fused(self.snapshots).label(true)) }
    }

    fn layer_ops(&self, mem: &mut HostMemory, t: &LayerTensors, cfg: &ChainConfig, fusion: bool) -> Result<Vec<Box<dyn Op>>> {
        if !fusion {
            return Ok(crate::engine::layer_step_with(t, &cfg.shape, &cfg.step, &cfg.init, self.snapshots, mem)?.ops);
        }
        replay_layer(mem, cfg, self.accept.count(cfg.step.n_tokens), every_fusion())
    }
}

/// \[replay\] The replay arms' "every fusion": every registered fusion, not the overlap pass (its
/// own arms, [`ReplayOverlap`], measure it).
fn every_fusion() -> crate::fusion::Options {
    crate::fusion::Options::ALL.without(crate::fusion::overlap::OVERLAP)
}

/// \[overlap\] Two replay-mode layers (R = 0, every sequence having accepted `accept` of its
/// logged step) compiled with the `fusions` set: the "off" arm without the overlap pass, the
/// "on" arm with it (`fusion::overlap`: from 5 sequences on, the step's three launches
/// overlapped where the products run as tiles) — what programmatic dependent launch buys. The
/// same kernels' bits either way; each arm builds its layer over tensors of its own, so nothing
/// is compared between them (the GPU replay episodes compare the overlapped graph with the
/// others).
pub struct ReplayOverlap {
    pub fusions: crate::fusion::Options,
    pub accept: ReplayAccept,
}

impl ChainBuilder for ReplayOverlap {
    fn fusion_available(&self) -> bool {
        true
    }

    fn equivalent(&self) -> bool {
        false
    }

    fn label(&self, fusion: bool) -> String {
        let options = self.options(fusion);
        self.accept.layer_label(&format!("{}{}", Fused(options).label(true), if fusion { ", overlapped" } else { "" }))
    }

    fn layer_ops(&self, mem: &mut HostMemory, _t: &LayerTensors, cfg: &ChainConfig, fusion: bool) -> Result<Vec<Box<dyn Op>>> {
        replay_layer(mem, cfg, self.accept.count(cfg.step.n_tokens), self.options(fusion))
    }
}

impl ReplayOverlap {
    fn options(&self, overlap: bool) -> crate::fusion::Options {
        use crate::fusion::overlap::OVERLAP;
        if overlap { self.fusions.with(OVERLAP) } else { self.fusions.without(OVERLAP) }
    }
}

/// \[replay\] Two replay-mode layers (R = 0, every sequence having accepted `accept` of its logged
/// step): the "off" arm with the `fusions` set less `replay_step` (the step as three launches:
/// GDN_CONV_CHAIN with the commit, MUL_MAT_VEC_PAIR_GATE, GATED_DELTA_NET_REPLAY_VERIFY), the "on"
/// arm with every fusion (GDN_LAYER_STEP_REPLAY where it fires: up to
/// `replay_step::REPLAY_STEP_MAX_SEQS` sequences) — what `replay_step` buys. (`replay_verify`'s
/// own arms were measured before it, `results/2026-12-04-h200-ring/`.) Each arm builds its layer over
/// tensors of its own, so nothing is compared between them (the GPU replay episodes compare the
/// fused and unfused replay graphs).
pub struct ReplayFusions {
    pub fusions: crate::fusion::Options,
    pub accept: ReplayAccept,
}

impl ChainBuilder for ReplayFusions {
    fn fusion_available(&self) -> bool {
        true
    }

    fn equivalent(&self) -> bool {
        false
    }

    fn label(&self, fusion: bool) -> String {
        self.accept.layer_label(&if fusion { "every fusion".into() } else { Fused(self.unfused()).label(true) })
    }

    fn layer_ops(&self, mem: &mut HostMemory, _t: &LayerTensors, cfg: &ChainConfig, fusion: bool) -> Result<Vec<Box<dyn Op>>> {
        let options = if fusion { every_fusion() } else { self.unfused() };
        replay_layer(mem, cfg, self.accept.count(cfg.step.n_tokens), options)
    }
}

impl ReplayFusions {
    /// The "off" arm's set: `fusions` less `replay_step`.
    fn unfused(&self) -> crate::fusion::Options {
        self.fusions.without(crate::fusion::replay_step::FUSION.name)
    }
}

/// \[replay\] The replay-mode layer of `cfg`'s T and sequences (R = 0, sequence s on cell s)
/// over tensors of its own in `mem` — the layer's random caches, inputs and weights, a logged
/// step in log set 1 (k, v and the conv inputs uniform, g < 0, β in [0, 1)), every sequence's
/// count `accepted` — compiled with `fusions`: it replays set 1 and logs into set 0.
pub fn replay_layer(mem: &mut HostMemory, cfg: &ChainConfig, accepted: usize, fusions: crate::fusion::Options) -> Result<Vec<Box<dyn Op>>> {
    use crate::graph::layer::{LayerSpec, ReplayTensors, Rollback, replay_layer_ops};
    use crate::graph::{Bound, ByteSet, Node};
    use rand::Rng;
    let step = super::seqs_step(cfg.step.n_tokens, 0, cfg.step.n_seqs())?;
    let spec = LayerSpec {
        rollback: Rollback::Replay { log_set: 0 },
        weights: cfg.init.mat_vec_weights,
        precision: cfg.init.precision,
        ..LayerSpec::new(cfg.shape, step)
    };
    let t = LayerTensors::alloc(mem, &cfg.shape, &step, &cfg.init)?;
    let mut rng = StdRng::seed_from_u64(0x2601);
    t.fill_random(mem, &cfg.shape, &mut rng, &cfg.init)?;
    let r = ReplayTensors::alloc(mem, &cfg.shape, &step)?;
    let log = r.logs[1];
    for (x, lo, hi) in [(log.qkv, -1.0, 1.0), (log.k, -0.15, 0.15), (log.v, -1.0, 1.0), (log.g, -1.0, 0.0), (log.beta, 0.0, 1.0)] {
        let values: Vec<f32> = (0..x.layout.n_elements()).map(|_| rng.random_range(lo..hi)).collect();
        mem.fill_f32(&x, &values)?;
    }
    r.set_accepted(mem, &vec![accepted; step.n_seqs()])?;
    let nodes = replay_layer_ops(&t, &r, &spec)?.into_iter().map(|op| Node::new(op, Some(0))).collect();
    // What the step hands on: both caches, its products, the attention output and the log it
    // writes (as `engine::layer_step_with`, plus the log).
    let l = r.logs[0];
    let observed = [
        t.conv_cache,
        t.ssm_cache,
        t.conv_out,
        t.q_norm,
        t.k_norm,
        t.alpha,
        t.beta_raw,
        t.beta,
        t.gate,
        t.attn_out,
        l.qkv,
        l.k,
        l.v,
        l.g,
        l.beta,
    ];
    let (nodes, _) = crate::fusion::compile_for(nodes, &ByteSet::of_all(&observed, Bound::Over), fusions, Some(mem));
    Ok(nodes.into_iter().map(|n| n.op).collect())
}

/// THE plug-in point: the builder `rgdn bench`, `cargo bench` and the main command use (the
/// default fusion set).
pub fn default_builder() -> &'static dyn ChainBuilder {
    &Fused(crate::fusion::Options::ON)
}

/// One layer's memory (random caches, inputs and weights, seeded) and both chains over it
/// (fusion off and on); not the graph builder's [`crate::graph::layer::Built`].
pub struct ChainPair {
    pub mem: HostMemory,
    pub tensors: LayerTensors,
    pub off: Vec<Box<dyn Op>>,
    pub on: Vec<Box<dyn Op>>,
    pub off_label: String,
    pub on_label: String,
    pub fusion_available: bool,
    /// [`ChainBuilder::equivalent`]: the arms are compared after one planned step each.
    pub equivalent: bool,
}

impl ChainPair {
    pub fn new(builder: &dyn ChainBuilder, cfg: &ChainConfig, seed: u64) -> Result<Self> {
        let mut mem = HostMemory::new();
        let tensors = LayerTensors::alloc(&mut mem, &cfg.shape, &cfg.step, &cfg.init)?;
        tensors.fill_random(&mut mem, &cfg.shape, &mut StdRng::seed_from_u64(seed), &cfg.init)?;
        let off = builder.layer_ops(&mut mem, &tensors, cfg, false)?;
        let on = builder.layer_ops(&mut mem, &tensors, cfg, true)?;
        Ok(ChainPair {
            mem,
            tensors,
            off,
            on,
            off_label: builder.label(false),
            on_label: builder.label(true),
            fusion_available: builder.fusion_available(),
            equivalent: builder.equivalent(),
        })
    }

    pub fn ops(&self, fused: bool) -> &[Box<dyn Op>] {
        if fused { &self.on } else { &self.off }
    }

    /// Bytes of all buffers of one layer (the footprint a copy of the layer occupies).
    pub fn footprint_bytes(&self) -> usize {
        (0..self.mem.n_buffers()).map(|b| self.mem.bytes(BufferId(b)).len()).sum()
    }
}

/// Buffers the unfused chain writes and the fused one does not: intermediates a fusion
/// eliminates. They are left out of the off/on comparison (and listed).
pub fn eliminated_buffers(off: &[Box<dyn Op>], on: &[Box<dyn Op>]) -> BTreeSet<usize> {
    let written = |ops: &[Box<dyn Op>]| ops.iter().flat_map(|op| op.outputs()).map(|t| t.buffer.0).collect::<BTreeSet<_>>();
    written(off).difference(&written(on)).copied().collect()
}

/// Key of each op in a chain: its ggml name plus its occurrence (`GET_ROWS#1`), and a role
/// where the layer's structure names one (GET_ROWS#0 reads the conv state, #1 the ssm state…).
pub fn op_keys(ops: &[Box<dyn Op>]) -> Vec<(String, Option<&'static str>)> {
    let names: Vec<&'static str> = ops.iter().map(|o| o.name()).collect();
    keys_for_names(&names)
}

/// [`op_keys`] on names alone.
pub fn keys_for_names(names: &[&'static str]) -> Vec<(String, Option<&'static str>)> {
    let count = |n: &str| names.iter().filter(|x| **x == n).count();
    // The fused conv chain reads the conv state itself: the only GET_ROWS left is the ssm state's.
    let conv_state_fused = names.contains(&"GDN_CONV_CHAIN");
    // [replay] A replay layer's copies are the window commit's and the log's: the snapshot
    // layer's roles do not name them.
    let replay = names.iter().any(|n| n.starts_with("GATED_DELTA_NET_REPLAY") || *n == "GDN_LAYER_STEP_REPLAY");
    let mut seen = std::collections::HashMap::<&str, usize>::new();
    names
        .iter()
        .map(|&n| {
            let mut i = *seen.entry(n).and_modify(|i| *i += 1).or_insert(0);
            // Keys pair the same op across the unfused and fused chains: the fused chain's
            // GET_ROWS is the unfused chain's second one (the ssm state's), and keeps its key.
            if conv_state_fused && n == "GET_ROWS" {
                i += 1;
            }
            let total = count(n);
            let role = match (n, i) {
                ("GET_ROWS" | "CPY" | "CPY_SNAPSHOTS", _) if replay => None,
                ("GET_ROWS", 0) => Some("conv state"),
                ("GET_ROWS", 1) => Some("ssm state"),
                ("L2_NORM", 0) => Some("q"),
                ("L2_NORM", 1) => Some("k"),
                ("SCALE", 0) => Some("zero conv row"),
                ("SCALE", 1) => Some("zero ssm row"),
                ("MUL_MAT_VEC", i) if i < total / 2 => Some("alpha"),
                ("MUL_MAT_VEC", _) => Some("beta"),
                ("CPY_SNAPSHOTS", _) => Some("snapshot rows"),
                ("CPY", _) => Some("conv state write-back"),
                _ => None,
            };
            (format!("{n}#{i}"), role)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: GdnShape = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 128, d_conv: 4, eps: 1e-6 };

    fn cfg(n_t: usize, r: usize) -> ChainConfig {
        ChainConfig { shape: SMALL, step: Step::new(n_t, r), init: LayerInit::default() }
    }

    #[test]
    fn the_stand_in_says_fusion_is_not_available() {
        let b: &dyn ChainBuilder = &UnfusedOnly;
        assert!(!b.fusion_available());
        assert!(b.label(true).contains("fusion not available"));
        let built = ChainPair::new(b, &cfg(4, 3), 1).unwrap();
        let names = |ops: &[Box<dyn Op>]| ops.iter().map(|o| o.name()).collect::<Vec<_>>();
        assert_eq!(names(&built.off), names(&built.on));
        assert!(eliminated_buffers(&built.off, &built.on).is_empty());
        assert!(built.footprint_bytes() > 4 * SMALL.ssm_row() * 4);
    }

    /// The default builder runs the fusion pass: at T = 4 the conv chain (GET_ROWS, CONCAT,
    /// CPY_SNAPSHOTS, SSM_CONV, L2_NORM ×2), the two mat-vecs with the gate path, and the
    /// ssm-state read with GATED_DELTA_NET become one GDN_LAYER_STEP launch (the default set);
    /// without layer_step, one launch each.
    #[test]
    fn the_default_builder_fuses_the_conv_chain_and_the_pair() {
        let b = default_builder();
        assert!(b.fusion_available());
        let built = ChainPair::new(b, &cfg(4, 3), 1).unwrap();
        let names = |ops: &[Box<dyn Op>]| ops.iter().map(|o| o.name()).collect::<Vec<_>>();
        let on = names(&built.on);
        assert_eq!(on, ["GDN_LAYER_STEP"], "{on:?}");
        let three = Fused(crate::fusion::Options::only(&["conv_chain", "pair", "gate_pair", "state_read"]).unwrap());
        let on = names(&ChainPair::new(&three, &cfg(4, 3), 1).unwrap().on);
        assert_eq!(on, ["GDN_CONV_CHAIN", "MUL_MAT_VEC_PAIR_GATE", "GATED_DELTA_NET_FROM_CACHE"], "{on:?}");
        assert_eq!(built.off.len(), 14, "{:?}", names(&built.off));
        // The fused chain no longer writes the CONCAT's inputs and output, the ssm state, the
        // biased alpha and the softplus.
        assert_eq!(eliminated_buffers(&built.off, &built.on).len(), 5);
        assert!(op_keys(&built.off).contains(&("GET_ROWS#1".to_string(), Some("ssm state"))));
        // [wide-pair] T = 9, 12 and 16 (R = T − 1: the bench's widest mode is T = 16, R = 15): the
        // products ggml splits into 8 + the rest columns pair whole, so the default set still
        // makes one GDN_LAYER_STEP launch.
        for t in [9, 12, 16] {
            let built = ChainPair::new(b, &cfg(t, t - 1), 1).unwrap();
            assert_eq!(names(&built.on), ["GDN_LAYER_STEP"], "T = {t}");
            assert_eq!(names(&built.off).iter().filter(|n| **n == "MUL_MAT_VEC").count(), 4, "T = {t}");
        }
    }

    /// \[replay\] The replay-against-snapshots arms: the snapshot layer as the engine runs it, the
    /// replay layer with `replay_verify` fired, both running on the CPU references from the
    /// bench's memory; a = T/2 and a = T; one and two sequences.
    #[test]
    fn the_replay_arm_is_the_fused_replay_layer_and_the_other_the_snapshot_layer() {
        use crate::reference::math::ExactMufu;
        assert_eq!((ReplayAccept::parse("half").unwrap().count(5), ReplayAccept::parse(" all").unwrap().count(5)), (2, 5));
        assert!(ReplayAccept::parse("some").is_err());
        for (accept, n_s) in [(ReplayAccept::Half, 1), (ReplayAccept::All, 2)] {
            let b = ReplayVsSnapshot { snapshots: crate::fusion::Options::ON, accept };
            assert!(!b.equivalent() && b.label(true).contains("replay") && b.label(false).contains("snapshot"));
            let cfg = ChainConfig { step: crate::bench::seqs_step(4, 3, n_s).unwrap(), ..cfg(4, 3) };
            let built = ChainPair::new(&b, &cfg, 1).unwrap();
            assert!(!built.equivalent);
            let names = |ops: &[Box<dyn Op>]| ops.iter().map(|o| o.name()).collect::<Vec<_>>();
            assert_eq!(names(&built.off), ["GDN_LAYER_STEP"]);
            let on = names(&built.on);
            // One and two sequences: the whole GDN part in one launch (`replay_step`).
            assert!(on.contains(&"GDN_LAYER_STEP_REPLAY") && !on.contains(&"GATED_DELTA_NET_REPLAY"), "{on:?}");
            assert!(op_keys(&built.on).iter().all(|(k, role)| role.is_none() || !(k.starts_with("GET_ROWS") || k.starts_with("CPY"))));
            let mut mem = built.mem.clone();
            for op in built.off.iter().chain(&built.on) {
                op.reference(&mut mem, &mut ExactMufu).unwrap();
            }
        }
    }

    /// \[replay\] `--replay-arms fusions`: both arms replay layers, the defaults' without
    /// `replay_step` (GDN_CONV_CHAIN, MUL_MAT_VEC_PAIR_GATE, GATED_DELTA_NET_REPLAY_VERIFY), every
    /// fusion's with GDN_LAYER_STEP_REPLAY (two sequences: within its scope); the rest of the step
    /// the same kernels.
    #[test]
    fn the_replay_fusion_arms_differ_only_in_replay_step() {
        use crate::reference::math::ExactMufu;
        let b = ReplayFusions { fusions: crate::fusion::Options::ON, accept: ReplayAccept::Half };
        assert!(!b.equivalent() && b.label(true).contains("every fusion") && b.label(false).contains("replay layer"));
        let cfg = ChainConfig { step: crate::bench::seqs_step(4, 3, 2).unwrap(), ..cfg(4, 3) };
        let built = ChainPair::new(&b, &cfg, 1).unwrap();
        let names = |ops: &[Box<dyn Op>]| ops.iter().map(|o| o.name()).collect::<Vec<_>>();
        let (off, on) = (names(&built.off), names(&built.on));
        let parts = ["GDN_CONV_CHAIN", "MUL_MAT_VEC_PAIR_GATE", "GATED_DELTA_NET_REPLAY_VERIFY"];
        assert!(parts.iter().all(|p| off.contains(p)) && !off.contains(&"GDN_LAYER_STEP_REPLAY"), "{off:?}");
        assert!(on.contains(&"GDN_LAYER_STEP_REPLAY") && parts.iter().all(|p| !on.contains(p)), "{on:?}");
        let rest = |ops: &[&'static str]| {
            ops.iter().copied().filter(|n| !parts.contains(n) && *n != "GDN_LAYER_STEP_REPLAY").collect::<Vec<&'static str>>()
        };
        assert_eq!(rest(&off), rest(&on));
        let mut mem = built.mem.clone();
        for op in built.off.iter().chain(&built.on) {
            op.reference(&mut mem, &mut ExactMufu).unwrap();
        }
    }

    /// \[overlap\] `--replay-arms overlap`: both arms the same replay layer's launches (16
    /// sequences: three of them, the products as tiles), the "on" arm's overlapped (the chain
    /// lets the products start, they and the replay-verify start early), the "off" arm's plain.
    #[test]
    fn the_overlap_arms_differ_only_in_the_launch_forms() {
        use crate::ops::overlap::{Overlap, Overlapped};
        let b = ReplayOverlap { fusions: crate::fusion::Options::ON, accept: ReplayAccept::Half };
        assert!(!b.equivalent() && b.label(true).contains("overlapped") && !b.label(false).contains("overlapped"));
        let cfg = ChainConfig { step: crate::bench::seqs_step(4, 3, 16).unwrap(), ..cfg(4, 3) };
        let built = ChainPair::new(&b, &cfg, 1).unwrap();
        let names = |ops: &[Box<dyn Op>]| ops.iter().map(|o| o.name()).collect::<Vec<_>>();
        assert_eq!(names(&built.off), names(&built.on));
        assert_eq!(names(&built.on), ["GDN_CONV_CHAIN", "MUL_MAT_VEC_PAIR_GATE", "GATED_DELTA_NET_REPLAY_VERIFY"]);
        let form = |op: &(dyn Op + 'static)| op.downcast_ref::<Overlapped>().map_or(Overlap::NONE, |o| o.overlap);
        assert!(built.off.iter().all(|op| form(op.as_ref()) == Overlap::NONE));
        let on: Vec<Overlap> = built.on.iter().map(|op| form(op.as_ref())).collect();
        assert!(on[0].lets_next_start && on[1].lets_next_start && on[1].starts_early && on[2].starts_early, "{on:?}");
    }

    #[test]
    fn keys_name_occurrences_and_roles() {
        let built = ChainPair::new(&UnfusedOnly, &cfg(12, 3), 1).unwrap();
        let keys = op_keys(&built.off);
        let find = |k: &str| keys.iter().find(|(key, _)| key == k).map(|(_, r)| *r);
        assert_eq!(find("GET_ROWS#0"), Some(Some("conv state")));
        assert_eq!(find("GET_ROWS#1"), Some(Some("ssm state")));
        // 12 tokens: alpha and beta mat-vecs each run as 8 + 4 columns.
        assert_eq!(find("MUL_MAT_VEC#1"), Some(Some("alpha")));
        assert_eq!(find("MUL_MAT_VEC#2"), Some(Some("beta")));
        assert_eq!(find("GATED_DELTA_NET#0"), Some(None));
        assert_eq!(keys.len(), built.off.len());
    }

    #[test]
    fn eliminated_buffers_are_the_unfused_only_outputs() {
        let built = ChainPair::new(&UnfusedOnly, &cfg(4, 0), 1).unwrap();
        // Dropping the first two ops (GET_ROWS, CONCAT) from "on" eliminates their outputs.
        let on: Vec<Box<dyn Op>> =
            UnfusedOnly.layer_ops(&mut built.mem.clone(), &built.tensors, &cfg(4, 0), true).unwrap().into_iter().skip(2).collect();
        let gone = eliminated_buffers(&built.off, &on);
        assert_eq!(gone, [built.tensors.conv_states.buffer.0, built.tensors.conv_input.buffer.0].into_iter().collect());
    }
}
