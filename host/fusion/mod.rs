//! The fusion pass: opt-in (`RGDN_FUSION=conv_chain,pair,…`, `RGDN_GDN_FUSION=1` for all, or
//! [`Options`]), default off. It rewrites a graph of [`Node`]s; the executor runs the result.
//!
//! A fusion is one registered value, a [`Fusion`] in [`REGISTRY`]: its name, a matcher that
//! finds its pattern in a layer (or a named [`Refusal`]) and proposes a [`Candidate`] — the
//! pattern's nodes, where the fused node goes, which of them it eliminates, the pattern's
//! dataflow edges, the overlaps its kernel supports — and which layer graphs it must fire on
//! (what the sweep and the tests check). Whether a candidate may be applied is decided by ONE
//! check for all fusions, [`legality::check`], from byte sets alone; its module docs say why an
//! accepted rewrite cannot change an observed byte. The matchers only recognise structure (op
//! kinds, shapes, views, scope); nothing they do is needed for soundness.
//!
//! Every decision is reported per layer and fusion ([`Report`]): the nodes a rewrite replaced,
//! or the refusal.
//!
//! Registered fusions, in the order they are tried on each layer:
//! - `conv_chain` ([`conv_chain`]): conv-state GET_ROWS, CONCAT, the 1 + R snapshot CPYs,
//!   SSM_CONV+SiLU and both L2_NORMs → one GDN_CONV_CHAIN (the reference PR);
//! - `pair` ([`pair`]): the alpha and beta MUL_MAT_VECs → one MUL_MAT_VEC_PAIR (the PR);
//! - `gate_pair` ([`gate_pair`]): that pair plus SIGMOID, ADD, SOFTPLUS, MUL (or UNARY_MUL) →
//!   one MUL_MAT_VEC_PAIR_GATE (the gate path as the pair's epilogue);
//! - `state_read` ([`state_read`]): the ssm-state GET_ROWS and GATED_DELTA_NET → one
//!   GATED_DELTA_NET_FROM_CACHE (the state read straight from its cache row);
//! - `layer_step` ([`layer_step`]): those three fused nodes (GDN_CONV_CHAIN,
//!   MUL_MAT_VEC_PAIR_GATE, GATED_DELTA_NET_FROM_CACHE) → one GDN_LAYER_STEP (the whole verify
//!   step in one cooperative launch);
//! - `replay_verify` ([`replay_verify`]): \[replay\] in a replay-mode layer, GATED_DELTA_NET_REPLAY
//!   and the verify's GATED_DELTA_NET_FROM_CACHE → one GATED_DELTA_NET_REPLAY_VERIFY (the state
//!   read once and written once per sequence; the verify's scratch slot eliminated).
//!
//! After them, when [`Options`] allows `overlap`, the overlap pass ([`overlap`], not a fusion):
//! which launches of the compiled list start before the one before them completes
//! (programmatic dependent launch), by a byte check of its own.

pub mod conv_chain;
pub mod gate_pair;
pub mod layer_step;
pub mod legality;
// [overlap] programmatic dependent launch between a plan's launches (not a fusion: a pass over
// the compiled list, allowed by the same options)
pub mod overlap;
pub mod pair;
pub mod replay_step;
pub mod replay_verify;
pub mod state_read;
pub mod sweep;

pub use legality::{Accepted, Candidate, Hazard};

use crate::error::{Error, Result};
use crate::graph::layer::LayerSpec;
use crate::graph::{ByteSet, Effects, Node};
use crate::memory::Memory;
use std::fmt;

/// A graph as the matchers and the check see it: its nodes and, computed once, their effects.
pub struct Graph<'a> {
    pub nodes: &'a [Node],
    pub effects: Vec<Effects>,
}

impl<'a> Graph<'a> {
    pub fn new(nodes: &'a [Node]) -> Self {
        Graph { nodes, effects: nodes.iter().map(Node::effects).collect() }
    }
}

/// One registered fusion.
pub struct Fusion {
    /// Its name in [`Options`] and reports (`conv_chain`).
    pub name: &'static str,
    /// What it fuses, in a few words.
    pub summary: &'static str,
    /// The structural match in `layer` of the graph: the candidate rewrite, or why not.
    pub find: fn(graph: &Graph, layer: usize) -> std::result::Result<Candidate, Refusal>,
    /// Whether it must fire on the graph [`crate::graph::layer`] builds for one layer of
    /// `spec` (with every fusion before it in the registry applied): what the sweep and the
    /// CPU off/on tests hold it to.
    pub fires_on: fn(spec: &LayerSpec) -> bool,
    /// In [`Options::ON`], the default set: the fusions that measured faster than what they
    /// replace on the H200 (all six; `layer_step` since its second design, NOTES.md;
    /// `replay_verify` since results/2026-12-04-h200-ring/).
    pub default: bool,
}

impl fmt::Debug for Fusion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fusion({})", self.name)
    }
}

/// The one node of `layer` that is a `T` (its index and the op), or [`Refusal::NoPattern`]
/// with `missing` when the layer holds none or several: the matchers that take fused nodes of
/// other fusions as their pattern (`layer_step`, `replay_verify`, `replay_step`).
pub(crate) fn only_node<'a, T: crate::ops::Op + 'static>(
    graph: &'a Graph,
    layer: usize,
    missing: &'static str,
) -> Result<(usize, &'a T), Refusal> {
    let found: Vec<(usize, &T)> =
        graph.nodes.iter().enumerate().filter(|(_, n)| n.layer == Some(layer)).filter_map(|(i, n)| n.get::<T>().map(|t| (i, t))).collect();
    match found[..] {
        [one] => Ok(one),
        _ => Err(Refusal::NoPattern(missing)),
    }
}

/// Every fusion, in the order the pass tries them on a layer.
pub static REGISTRY: &[Fusion] = &FUSIONS;

const FUSIONS: [Fusion; 7] = [
    conv_chain::FUSION,
    pair::FUSION,
    gate_pair::FUSION,
    state_read::FUSION,
    layer_step::FUSION,
    replay_verify::FUSION,
    replay_step::FUSION,
];

/// The bits of the fusions marked `default`.
const fn default_bits() -> u64 {
    let mut bits = 0;
    let mut i = 0;
    while i < FUSIONS.len() {
        if FUSIONS[i].default {
            bits |= 1 << i;
        }
        i += 1;
    }
    bits
}

/// The registered fusion named `name`.
pub fn fusion(name: &str) -> Option<&'static Fusion> {
    REGISTRY.iter().find(|f| f.name == name)
}

/// Which registered fusions the pass may apply (a set of [`REGISTRY`] indices), and whether the
/// overlap pass runs on the result ([`overlap::OVERLAP`], the last bit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options(u64);

/// [`Options`]' bit for the overlap pass (after every registry index).
const OVERLAP_BIT: u64 = 1 << 63;
const _: () = assert!(FUSIONS.len() < 63, "the registry's bits stay below the overlap pass's");

/// The bit `name` (a registered fusion or the overlap pass) has in [`Options`].
fn bit_of(name: &str) -> Option<u64> {
    if name == overlap::OVERLAP {
        return Some(OVERLAP_BIT);
    }
    REGISTRY.iter().position(|f| f.name == name).map(|i| 1 << i)
}

impl Options {
    pub const OFF: Options = Options(0);
    /// The default set: every registered fusion marked `default` (the fastest measured). The
    /// overlap pass is not in it: on the current kernels it gains only at 32 sequences, T = 4,
    /// and loses at 8 and 16 (`results/2026-12-06-overlap-default-h100/`).
    pub const ON: Options = Options(default_bits());
    /// Every registered fusion and the overlap pass (what the proofs exercise;
    /// `RGDN_GDN_FUSION=1`, `RGDN_FUSION=all`).
    pub const ALL: Options = Options(u64::MAX);

    /// Exactly the fusions named, and the overlap pass if `overlap` is among them (unknown names
    /// are an error naming the known ones).
    pub fn only(names: &[&str]) -> Result<Options> {
        let mut bits = 0;
        for name in names {
            bits |= bit_of(name).ok_or_else(|| Error::Invalid {
                op: "FUSION",
                what: format!(
                    "unknown fusion `{name}` (registered: {}; and the pass `{}`)",
                    REGISTRY.iter().map(|f| f.name).collect::<Vec<_>>().join(", "),
                    overlap::OVERLAP
                ),
            })?;
        }
        Ok(Options(bits))
    }

    /// True when `fusion` may fire (or, for [`overlap::OVERLAP`], when the overlap pass runs).
    pub fn allows(&self, fusion: &str) -> bool {
        bit_of(fusion).is_some_and(|b| self.0 & b != 0)
    }

    /// This set without `fusion` (the same set when `fusion` is not in it).
    pub fn without(self, fusion: &str) -> Options {
        match bit_of(fusion) {
            Some(b) => Options(self.0 & !b),
            None => self,
        }
    }

    /// This set with `fusion` (the same set for an unknown name).
    pub fn with(self, fusion: &str) -> Options {
        match bit_of(fusion) {
            Some(b) => Options(self.0 | b),
            None => self,
        }
    }

    /// The fusions allowed, in registry order, then the overlap pass if it runs.
    pub fn names(&self) -> Vec<&'static str> {
        REGISTRY.iter().map(|f| f.name).chain([overlap::OVERLAP]).filter(|n| self.allows(n)).collect()
    }

    /// `RGDN_FUSION=name,name,…` (or `all`, `default`, `none`); else `RGDN_GDN_FUSION=1` turns
    /// every fusion on; unset (or anything else) leaves them off. An unknown name is an error.
    pub fn from_env() -> Result<Options> {
        match std::env::var("RGDN_FUSION") {
            Ok(v) => Options::parse(&v),
            Err(_) => Ok(if std::env::var("RGDN_GDN_FUSION").is_ok_and(|v| v == "1") { Options::ALL } else { Options::OFF }),
        }
    }

    /// `all`, `default`, `none` (or empty), or registered names (and `overlap`), comma-separated,
    /// each adding to the set (`default,overlap`: the defaults and the overlap pass) — what
    /// `RGDN_FUSION` and `rgdn bench --fusions` take. An unknown name is an error.
    pub fn parse(spec: &str) -> Result<Options> {
        let mut bits = 0;
        for name in spec.split(',').map(str::trim) {
            bits |= match name {
                "all" => Options::ALL.0,
                "default" => Options::ON.0,
                "" | "none" => 0,
                name => Options::only(&[name])?.0,
            };
        }
        Ok(Options(bits))
    }
}

/// Why a fusion did not fire. The structural rules are the matchers' (the reference PR's rules
/// among them); the rest are the legality check's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Fusion turned off.
    Off,
    /// The layer does not hold the pattern (what is missing).
    NoPattern(&'static str),
    /// Scope: more sequences than the fused step takes in one launch (`most`: the snapshot
    /// step's `layer_step::max_seqs`, the replay step's `replay_step::max_seqs`; a replay step
    /// whose first-phase items overflow the readiness flags names its own `sequences`). The
    /// layer then runs the same bytes as three fused launches.
    TooManySequences { sequences: usize, most: usize },
    /// Scope: n_t > 16.
    TooManyTokens { n_tokens: usize },
    /// Scope: 1–16 snapshot rows.
    SnapshotRows { rows: usize },
    /// Scope: d_conv outside 3–5.
    ConvWidth { d_conv: usize },
    /// Scope: head dim not 32, 64 or 128.
    HeadDim { head_dim: usize },
    /// Scope: C not a multiple of 128.
    Channels { channels: usize },
    /// A tensor of the pattern is not laid out as the fused kernel reads or writes it.
    Layout(&'static str),
    /// The GET_ROWS output is read by another node than the CONCAT (PR rule).
    ConvStatesUsers { users: usize },
    /// The CONCAT does not have exactly n_cpy + 1 users, the copies and SSM_CONV (PR rule).
    ConcatUsers { users: usize, copies: usize },
    /// A copy's source is not `window(o)` of the CONCAT output with 0 ≤ o ≤ n_t.
    CopyNotWindow { node: usize },
    /// A copy's destination is not one whole row of the conv cache the GET_ROWS reads.
    CopyNotCacheRow { node: usize },
    /// Two copies write the same cache row.
    RowWrittenTwice { row: usize },
    /// The two L2_NORMs of the q and k heads of the SiLU output were not found.
    L2NotFound,
    /// The alpha/beta products have more columns than the pair takes (n_t·n_s > 16).
    PairTooWide { ncols: usize },
    /// A product split over several launches whose column slices do not tile one input and
    /// one dst exactly (what is wrong).
    PairSlices(&'static str),
    /// Not exactly two products (mat-vec weights) in the layer.
    PairNotFound { mat_vecs: usize },
    /// The two mat-vecs differ in input, weight type/shape or precision.
    PairMismatch(&'static str),

    // ---- the legality check (legality.rs) ----
    /// A matcher proposed a malformed candidate (a bug in the matcher, not in the graph).
    Malformed(&'static str),
    /// Node `node`, between the pattern's nodes, cannot trade places with pattern node
    /// `pattern_node` (the PR's "nothing in between may touch…" rules are instances).
    Reorder { node: usize, pattern_node: usize, hazard: Hazard },
    /// Pattern node `consumer` reads bytes `producer` may write, but no edge says it reads its
    /// value.
    UndeclaredDataflow { producer: usize, consumer: usize },
    /// … reads bytes of the producer's output that the producer does not always write.
    PartialValue { producer: usize, consumer: usize },
    /// The fused node reads from memory bytes the pattern passes from `producer` to
    /// `consumer` (an operand placed on an internal value's bytes).
    FusedReadsInternal { producer: usize, consumer: usize },
    /// The fused node does not read every byte pattern node `node` reads from outside.
    FusedMissesInput { node: usize },
    /// Pattern nodes `first` and `second` both write bytes the second does not always write.
    WrittenTwice { first: usize, second: usize },
    /// The fused node's writes are not the pattern's.
    FusedWrites(&'static str),
    /// The fused node's reads and writes, or two of its outputs, share bytes its kernel does
    /// not support.
    FusedOverlap,
    /// Node `node` reads bytes the fused graph no longer writes, before anything overwrote
    /// them.
    EliminatedRead { node: usize },
    /// Bytes the fused graph no longer writes are observed after the run (a graph output or
    /// a cache).
    EliminatedLive,
    /// The fused op's own validation refuses it on the memory the graph runs on.
    FusedInvalid(String),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Refusal::*;
        match self {
            Off => write!(f, "fusion off"),
            NoPattern(what) => write!(f, "no pattern: {what}"),
            TooManySequences { sequences, most } => write!(f, "scope: {sequences} sequences (one launch takes at most {most})"),
            TooManyTokens { n_tokens } => write!(f, "scope: n_t = {n_tokens} (at most {})", conv_chain::MAX_TOKENS),
            SnapshotRows { rows } => write!(f, "scope: {rows} snapshot rows (1 to {})", conv_chain::MAX_SNAPSHOT_ROWS),
            ConvWidth { d_conv } => write!(f, "scope: d_conv = {d_conv} (3 to 5)"),
            HeadDim { head_dim } => write!(f, "scope: head dim {head_dim} (32, 64 or 128)"),
            Channels { channels } => write!(f, "scope: C = {channels} (a multiple of {})", conv_chain::CHANNEL_BLOCK),
            Layout(what) => write!(f, "layout: {what}"),
            ConvStatesUsers { users } => write!(f, "the conv-state GET_ROWS output has {users} users (exactly the CONCAT)"),
            ConcatUsers { users, copies } => write!(f, "the CONCAT has {users} users, not n_cpy + 1 = {}", copies + 1),
            CopyNotWindow { node } => write!(f, "copy node {node} is not a view of the concat at column offset 0..n_t"),
            CopyNotCacheRow { node } => write!(f, "copy node {node} does not write one whole cache row"),
            RowWrittenTwice { row } => write!(f, "cache row {row} is written twice"),
            L2NotFound => write!(f, "no L2_NORM pair of the q and k heads of the SiLU output"),
            PairTooWide { ncols } => write!(f, "pair: {ncols} columns (at most {})", pair::MAX_COLS),
            PairSlices(what) => write!(f, "pair: {what}"),
            PairNotFound { mat_vecs } => write!(f, "pair: {mat_vecs} products (mat-vec weights), not two of one input"),
            PairMismatch(what) => write!(f, "pair: {what}"),
            Malformed(what) => write!(f, "malformed candidate: {what}"),
            Reorder { node, pattern_node, hazard } => {
                write!(f, "node {node} in between cannot trade places with pattern node {pattern_node}: it {hazard}")
            }
            UndeclaredDataflow { producer, consumer } => {
                write!(f, "pattern node {consumer} reads bytes pattern node {producer} writes, outside the pattern's dataflow")
            }
            PartialValue { producer, consumer } => {
                write!(f, "pattern node {consumer} reads bytes of node {producer}'s output that it does not always write")
            }
            FusedReadsInternal { producer, consumer } => {
                write!(f, "the fused node would read from memory the value node {producer} passes to node {consumer}")
            }
            FusedMissesInput { node } => write!(f, "the fused node does not read every input of pattern node {node}"),
            WrittenTwice { first, second } => {
                write!(f, "pattern nodes {first} and {second} write the same bytes, the second not all of them")
            }
            FusedWrites(what) => write!(f, "{what}"),
            FusedOverlap => write!(f, "the fused node's operands share bytes its kernel does not support"),
            EliminatedRead { node } => write!(f, "node {node} reads bytes the fused graph no longer writes"),
            EliminatedLive => write!(f, "bytes the fused graph no longer writes are observed after the run"),
            FusedInvalid(e) => write!(f, "the fused op is refused on this memory: {e}"),
        }
    }
}

/// One applied rewrite.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rewrite {
    /// The nodes it replaced (indices into the graph as this fusion saw it) and their ops.
    pub replaced: Vec<usize>,
    pub replaced_ops: Vec<&'static str>,
    /// The fused node's op and its index in the graph after the rewrite.
    pub fused_op: &'static str,
    pub at: usize,
    /// Bytes the rewrite left unwritten that nothing overwrites later (none observed).
    pub eliminated: ByteSet,
    /// The nodes of the graph given to the pass that the fused node stands for, and the one
    /// whose position it takes.
    pub original: Vec<usize>,
    pub anchor: usize,
}

/// What happened to one fusion of one layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Fused(Rewrite),
    Refused(Refusal),
}

impl Outcome {
    pub fn fused(&self) -> bool {
        matches!(self, Outcome::Fused(_))
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Fused(r) => write!(
                f,
                "fused {} nodes ({}: {}) → {} at node {}",
                r.replaced.len(),
                r.replaced.iter().map(usize::to_string).collect::<Vec<_>>().join(", "),
                r.replaced_ops.join(" "),
                r.fused_op,
                r.at
            ),
            Outcome::Refused(r) => write!(f, "refused: {r}"),
        }
    }
}

/// The decisions for one layer: (fusion, outcome) in registry order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerReport {
    pub layer: usize,
    pub outcomes: Vec<(&'static str, Outcome)>,
}

impl LayerReport {
    /// The outcome of fusion `name` (every registered fusion has one).
    pub fn outcome(&self, name: &str) -> Option<&Outcome> {
        self.outcomes.iter().find(|(n, _)| *n == name).map(|(_, o)| o)
    }
}

/// The decisions for every layer of a graph.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub layers: Vec<LayerReport>,
    /// \[overlap\] The overlap pass's decisions, one per launch that could start early (empty
    /// when the pass did not run).
    pub overlaps: Vec<overlap::Decision>,
}

impl Report {
    /// Layer `layer` with every registered fusion turned off (what [`Options::OFF`] reports).
    pub fn all_off(layer: usize) -> Report {
        let outcomes = REGISTRY.iter().map(|f| (f.name, Outcome::Refused(Refusal::Off))).collect();
        Report { layers: vec![LayerReport { layer, outcomes }], overlaps: Vec::new() }
    }

    /// Layers where fusion `name` fired.
    pub fn fired(&self, name: &str) -> usize {
        self.layers.iter().filter(|l| l.outcome(name).is_some_and(Outcome::fused)).count()
    }

    /// Every byte some rewrite left unwritten.
    pub fn eliminated(&self) -> ByteSet {
        let mut s = ByteSet::new();
        for l in &self.layers {
            for (_, o) in &l.outcomes {
                if let Outcome::Fused(r) = o {
                    s.union_with(&r.eliminated);
                }
            }
        }
        s
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for l in &self.layers {
            let parts: Vec<String> = l.outcomes.iter().map(|(n, o)| format!("{n} {o}")).collect();
            writeln!(f, "layer {}: {}", l.layer, parts.join("; "))?;
        }
        for d in &self.overlaps {
            match &d.outcome {
                Ok(beside) => writeln!(f, "node {} ({}): starts early beside nodes {beside:?}", d.node, d.op)?,
                Err(r) => writeln!(f, "node {} ({}): starts after the launch before it: {r}", d.node, d.op)?,
            }
        }
        Ok(())
    }
}

/// Runs the fusion pass, then the backend's snapshot batching (ggml's #379) on what is left:
/// the node list the executor runs. `live_out`: the bytes the caller reads after the run
/// (caches, graph outputs) — a rewrite may leave no stale byte there.
pub fn compile(nodes: Vec<Node>, live_out: &ByteSet, options: Options) -> (Vec<Node>, Report) {
    compile_for(nodes, live_out, options, None)
}

/// [`compile`] for a graph that will run on `mem`: a rewrite whose fused op `mem` would refuse
/// (an op's own rules the byte-set check does not know, e.g. GDN_CONV_CHAIN's qkv sharing a
/// buffer region with the conv cache) is refused instead ([`Refusal::FusedInvalid`]), so the
/// pass never turns a graph that runs into one that does not.
///
/// \[overlap\] With [`overlap::OVERLAP`] allowed, the overlap pass runs last ([`overlap::mark`]):
/// the launches it proves may start early are left as [`crate::ops::Overlapped`] ops, its
/// decisions in [`Report::overlaps`].
pub fn compile_for(nodes: Vec<Node>, live_out: &ByteSet, options: Options, mem: Option<&dyn Memory>) -> (Vec<Node>, Report) {
    let (nodes, mut report) = fuse_for(nodes, live_out, options, mem);
    let nodes = crate::graph::layer::batch_snapshot_copies(nodes);
    if !options.allows(overlap::OVERLAP) {
        return (nodes, report);
    }
    let (nodes, decisions) = overlap::mark(nodes);
    report.overlaps = decisions;
    (nodes, report)
}

/// The fusion pass alone: each layer (in order of first appearance) gets every allowed fusion
/// tried in registry order on the current graph, each candidate checked by
/// [`legality::check`] and, when accepted, applied.
pub fn fuse(nodes: Vec<Node>, live_out: &ByteSet, options: Options) -> (Vec<Node>, Report) {
    fuse_for(nodes, live_out, options, None)
}

/// [`fuse`], validating each fused op against `mem` when given (see [`compile_for`]).
pub fn fuse_for(nodes: Vec<Node>, live_out: &ByteSet, options: Options, mem: Option<&dyn Memory>) -> (Vec<Node>, Report) {
    let (nodes, report, _) = fuse_traced(nodes, live_out, options, mem);
    (nodes, report)
}

/// For a node of a rewritten list: the nodes of the input graph it stands for, and where it sits
/// there (its anchor).
type Origin = (Vec<usize>, usize);

/// [`fuse_for`], and each node's [`Origin`].
fn fuse_traced(mut nodes: Vec<Node>, live_out: &ByteSet, options: Options, mem: Option<&dyn Memory>) -> (Vec<Node>, Report, Vec<Origin>) {
    let mut layers: Vec<usize> = Vec::new();
    for n in &nodes {
        if let Some(l) = n.layer
            && !layers.contains(&l)
        {
            layers.push(l);
        }
    }
    // The nodes of the input graph each current node stands for, and where it sits there.
    let mut origin: Vec<Origin> = (0..nodes.len()).map(|i| (vec![i], i)).collect();
    let mut report = Report::default();
    let mut effects: Vec<Effects> = nodes.iter().map(Node::effects).collect();
    for layer in layers {
        let mut outcomes = Vec::new();
        for f in REGISTRY {
            let outcome = if !options.allows(f.name) {
                Outcome::Refused(Refusal::Off)
            } else {
                let graph = Graph { nodes: &nodes, effects: std::mem::take(&mut effects) };
                let tried = try_on(&graph, live_out, f, layer).and_then(|(c, a)| match mem.map(|m| c.fused.validate(m)) {
                    Some(Err(e)) => Err(Refusal::FusedInvalid(e.to_string())),
                    _ => Ok((c, a)),
                });
                effects = graph.effects;
                match tried {
                    Ok((candidate, accepted)) => {
                        let mut replaced = candidate.nodes.clone();
                        replaced.sort_unstable();
                        let replaced_ops = replaced.iter().map(|&i| nodes[i].op.name()).collect();
                        let mut original: Vec<usize> = replaced.iter().flat_map(|&i| origin[i].0.iter().copied()).collect();
                        original.sort_unstable();
                        let anchor = origin[candidate.at].1;
                        let fused_op = candidate.fused.name();
                        let fused_effects = accepted.fused;
                        let (next, at) = rewrite(nodes, &replaced, candidate.at, Node::new(candidate.fused, Some(layer)));
                        let (next_origin, _) = rewrite(origin, &replaced, candidate.at, (original.clone(), anchor));
                        let (next_effects, _) = rewrite(effects, &replaced, candidate.at, fused_effects);
                        nodes = next;
                        origin = next_origin;
                        effects = next_effects;
                        Outcome::Fused(Rewrite { replaced, replaced_ops, fused_op, at, eliminated: accepted.eliminated, original, anchor })
                    }
                    Err(r) => Outcome::Refused(r),
                }
            };
            outcomes.push((f.name, outcome));
        }
        report.layers.push(LayerReport { layer, outcomes });
    }
    (nodes, report, origin)
}

/// The groups of nodes the pass would fuse in `nodes` (a symbolic graph, typically: one
/// buffer per value), for fusion-aware planning ([`crate::graph::plan::plan_with_groups`]).
///
/// \[overlap\] With [`overlap::OVERLAP`] allowed, also each run of launches the overlap pass
/// would let run side by side on that graph: the nodes they stand for, twice, anchored at the
/// run's first and at its last launch — so that every value the run touches is live from its
/// first launch to its last, and no value of it shares a block with another value of it (a grid
/// would write a block another still reads). The pass itself decides on the planned graph.
pub fn groups(nodes: &[Node], live_out: &ByteSet, options: Options) -> Vec<crate::graph::plan::Group> {
    let (fused, report, origin) = fuse_traced(nodes.to_vec(), live_out, options, None);
    let mut out: Vec<crate::graph::plan::Group> = Vec::new();
    for l in &report.layers {
        for (_, o) in &l.outcomes {
            if let Outcome::Fused(r) = o {
                // A rewrite of an earlier fused node takes over its group.
                out.retain(|g| !g.nodes.iter().all(|n| r.original.contains(n)));
                out.push(crate::graph::plan::Group { nodes: r.original.clone(), anchor: r.anchor });
            }
        }
    }
    if options.allows(overlap::OVERLAP) {
        let (forms, _) = overlap::plan(&fused);
        let mut first = 0;
        for k in 1..=forms.len() {
            if k < forms.len() && forms[k].starts_early {
                continue;
            }
            // Nodes first .. k − 1 form a run (k is past its end or starts after it).
            if k - first > 1 {
                let mut members: Vec<usize> = origin[first..k].iter().flat_map(|(o, _)| o.iter().copied()).collect();
                members.sort_unstable();
                out.push(crate::graph::plan::Group { nodes: members.clone(), anchor: origin[first].1 });
                out.push(crate::graph::plan::Group { nodes: members, anchor: origin[k - 1].1 });
            }
            first = k;
        }
    }
    out
}

/// Matches `f` in `layer` and checks the candidate.
pub fn try_fusion(nodes: &[Node], live_out: &ByteSet, f: &Fusion, layer: usize) -> std::result::Result<(Candidate, Accepted), Refusal> {
    try_on(&Graph::new(nodes), live_out, f, layer)
}

fn try_on(graph: &Graph, live_out: &ByteSet, f: &Fusion, layer: usize) -> std::result::Result<(Candidate, Accepted), Refusal> {
    let candidate = (f.find)(graph, layer)?;
    let accepted = legality::check(graph.nodes, &graph.effects, live_out, &candidate)?;
    Ok((candidate, accepted))
}

/// Drops the nodes `gone` and puts `fused` where node `at` was; returns the new index of it.
fn rewrite<T>(nodes: Vec<T>, gone: &[usize], at: usize, fused: T) -> (Vec<T>, usize) {
    let mut out = Vec::with_capacity(nodes.len());
    let mut fused = Some(fused);
    let mut position = 0;
    for (i, n) in nodes.into_iter().enumerate() {
        if i == at {
            position = out.len();
            out.extend(fused.take());
        }
        if gone.binary_search(&i).is_err() {
            out.push(n);
        }
    }
    (out, position)
}

/// Every node of `layer` after `from` that reads bytes of `value` (the bytes node `from`
/// wrote) before they are all certainly overwritten: the value's users, the way the matchers
/// find a pattern's next nodes. (Soundness does not rest on this: see [`legality`].)
pub(crate) fn users(graph: &Graph, from: usize, value: &ByteSet) -> Vec<usize> {
    let mut live = value.clone();
    let mut out = Vec::new();
    for (x, e) in graph.effects.iter().enumerate().skip(from + 1) {
        if live.is_empty() {
            break;
        }
        if e.reads.intersects(&live) {
            out.push(x);
        }
        live.subtract(&e.must_write);
    }
    out
}

/// The latest node before `before` that may write any byte of `t`.
pub(crate) fn writer_of(graph: &Graph, before: usize, t: &crate::tensor::Tensor) -> Option<usize> {
    let bytes = ByteSet::of(t, crate::graph::Bound::Over);
    (0..before).rev().find(|&i| graph.effects[i].may_write.intersects(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Bound, Stage};
    use crate::tensor::{BufferId, DType, Layout, Tensor};

    fn t(buffer: usize, offset_floats: usize, n: usize) -> Tensor {
        let l = Layout::contiguous(DType::F32, [n, 1, 1, 1]);
        Tensor::new(BufferId(buffer), l.view(l.ne, l.nb, 4 * offset_floats))
    }

    fn stage(src: Tensor, dst: Tensor) -> Node {
        Node::new(Box::new(Stage { src, dst }), Some(0))
    }

    #[test]
    fn users_end_at_certain_overwrites_only() {
        // Node 0 writes floats 0..8 of buffer 0; node 1 reads 0..4; node 2 overwrites 0..4;
        // node 3 reads 0..8; node 4 overwrites 4..8; node 5 reads 0..8 (dead by then).
        let nodes = [
            stage(t(1, 0, 8), t(0, 0, 8)),
            stage(t(0, 0, 4), t(2, 0, 4)),
            stage(t(3, 0, 4), t(0, 0, 4)),
            stage(t(0, 0, 8), t(4, 0, 8)),
            stage(t(3, 0, 4), t(0, 4, 4)),
            stage(t(0, 0, 8), t(5, 0, 8)),
        ];
        assert_eq!(users(&Graph::new(&nodes), 0, &ByteSet::of(&t(0, 0, 8), Bound::Over)), [1, 3]);
    }

    #[test]
    fn options_name_registered_fusions() {
        assert_eq!(Options::only(&["pair"]).unwrap().names(), ["pair"]);
        // Every registered fusion, then the overlap pass.
        assert_eq!(Options::ALL.names(), REGISTRY.iter().map(|f| f.name).chain([overlap::OVERLAP]).collect::<Vec<_>>());
        assert_eq!(Options::ON.names(), REGISTRY.iter().filter(|f| f.default).map(|f| f.name).collect::<Vec<_>>());
        assert!(Options::ON.allows("layer_step") && Options::ALL.allows("layer_step"));
        assert!(Options::OFF.names().is_empty());
        // `without` takes one fusion out and leaves an unknown name's set as it was.
        let no_rv = Options::ON.without("replay_verify");
        assert!(!no_rv.allows("replay_verify") && no_rv.allows("layer_step"), "{:?}", no_rv.names());
        assert_eq!(no_rv.names().len() + 1, Options::ON.names().len());
        assert_eq!(Options::ON.without("nope"), Options::ON);
        let e = Options::only(&["conv_chain", "nope"]).unwrap_err().to_string();
        assert!(e.contains("nope") && e.contains("conv_chain"), "{e}");
    }

    #[test]
    fn refusals_display_their_rule() {
        assert_eq!(Refusal::ConcatUsers { users: 6, copies: 4 }.to_string(), "the CONCAT has 6 users, not n_cpy + 1 = 5");
        let r = Refusal::Reorder { node: 4, pattern_node: 7, hazard: Hazard::WritesPatternInput };
        assert_eq!(r.to_string(), "node 4 in between cannot trade places with pattern node 7: it writes bytes it reads");
    }
}
