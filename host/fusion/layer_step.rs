//! Fusion `layer_step`: the whole GDN layer verify step in one launch. After `conv_chain`,
//! `pair`, `gate_pair` and `state_read` fired (registry order), a layer holds three fused
//! nodes — GDN_CONV_CHAIN, MUL_MAT_VEC_PAIR_GATE, GATED_DELTA_NET_FROM_CACHE — which become one
//! [`GdnLayerStep`]. Scope: the three parts' (one sequence, n_t ≤ 16 —
//! [`abi::GDN_LAYER_STEP_MAX_TOKENS`]: over 8 the `pair` fusion took ggml's split products
//! whole —, d_conv 3–5, C a multiple of 128) with D = 128 and the GDN reading exactly the chain's q/k norms and v channels and the
//! pair-gate's gate and β.
//!
//! The fused node takes GATED_DELTA_NET_FROM_CACHE's place (the last of the three: a fresh
//! cell's ssm-cache SCALE in between stays before the state read); the conv chain and the
//! products move down past the nodes in between, which the legality check allows only when
//! none of them touches their bytes. Nothing is eliminated: every output of the three (the
//! norms, the SiLU output, the products, β, the gate, the attention output, both caches) is
//! still written. Supported overlaps: the parts' own (the SiLU output on qkv element for
//! element, a snapshot row on the conv row read, a state slot on the ssm row read; the kernel's
//! docs).

use super::legality::Candidate;
use super::{Fusion, Graph, Refusal, only_node};
use crate::graph::layer::LayerSpec;
use crate::kernels::abi;
use crate::ops::{GatedDeltaNetFromCache, GdnConvChain, GdnLayerStep, MulMatVecPairGate};
use crate::tensor::Tensor;

pub const FUSION: Fusion = Fusion {
    name: "layer_step",
    summary: "GDN_CONV_CHAIN + MUL_MAT_VEC_PAIR_GATE + GATED_DELTA_NET_FROM_CACHE → GDN_LAYER_STEP",
    find,
    fires_on,
    default: true,
};

/// (speed) Most sequences a snapshot step runs as one launch; above it the step is the three
/// fused launches (GDN_CONV_CHAIN, MUL_MAT_VEC_PAIR_GATE, GATED_DELTA_NET_FROM_CACHE's batched
/// entry), the same bytes. Measured on an H100, both forms in the same calls (3 calls, 1–2
/// rounds each, `results/2026-12-07-h100-three-launches/`): the one launch wins at n_s ≤ 4
/// (n_s = 4, T = 4: 17.68 against 21.18 µs a layer step) and at n_s = 8, T = 1 (13.79 against
/// 15.05), the three launches from n_s = 8, T = 4 on (41.21 against 43.88; n_s = 16, T = 4:
/// 75.35 against 78.05; n_s = 64, T = 4: 281.7 against 287.0; n_s = 64, T = 8 level). Not
/// profiled (why the three win there), and not yet timed on the H200 (session 38 estimated
/// 219 against 225.18 µs at n_s = 64, T = 4 from its parts).
pub const LAYER_STEP_MAX_SEQS: usize = 8;

/// The most sequences the fusion takes: [`LAYER_STEP_MAX_SEQS`], or `RGDN_LAYER_STEP_MAX_SEQS`
/// (1 … 256, read once per process) — a measurement knob, for timing and proving (the GPU sweep)
/// one form where the other would run: no test sets it, and no bit depends on it (either form
/// is the same step's bytes).
pub fn max_seqs() -> usize {
    static KNOB: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    let knob = *KNOB.get_or_init(|| crate::ops::knob("RGDN_LAYER_STEP_MAX_SEQS", 1, abi::GDN_LAYER_STEP_MAX_SEQS as u32));
    knob.map_or(LAYER_STEP_MAX_SEQS, |k| k as usize)
}

/// Where the three parts fire, and D = 128 (GATED_DELTA_NET's), at most [`max_seqs`] sequences.
fn fires_on(spec: &LayerSpec) -> bool {
    // [replay] Not on a replay layer: its conv chain commits a window (GDN_CONV_CHAIN's alone).
    spec.rollback == crate::graph::layer::Rollback::Snapshots
        && (super::conv_chain::FUSION.fires_on)(spec)
        && (super::gate_pair::FUSION.fires_on)(spec)
        && (super::state_read::FUSION.fires_on)(spec)
        && spec.shape.head_dim == abi::GDN_HEAD_DIM
        && spec.step.n_tokens <= abi::GDN_LAYER_STEP_MAX_TOKENS
        && spec.step.n_seqs() <= max_seqs()
}

/// The structural match of the layer step in `layer`.
pub fn find(graph: &Graph, layer: usize) -> Result<Candidate, Refusal> {
    use Refusal::*;
    let (c, chain) = only_node::<GdnConvChain>(graph, layer, "no GDN_CONV_CHAIN in the layer (the `conv_chain` fusion did not fire)")?;
    let (g, gate) =
        only_node::<MulMatVecPairGate>(graph, layer, "no MUL_MAT_VEC_PAIR_GATE in the layer (the `gate_pair` fusion did not fire)")?;
    let (n, gdn) = only_node::<GatedDeltaNetFromCache>(
        graph,
        layer,
        "no GATED_DELTA_NET_FROM_CACHE in the layer (the `state_read` fusion did not fire)",
    )?;
    if !(c < n && g < n) {
        return Err(NoPattern("GATED_DELTA_NET_FROM_CACHE does not come after the conv chain and the products"));
    }
    if chain.commit.is_some() {
        return Err(NoPattern("the conv chain commits a replay window (the layer step runs ggml's chain)"));
    }
    if chain.head_dim != abi::GDN_HEAD_DIM {
        return Err(HeadDim { head_dim: chain.head_dim });
    }
    let n_t = chain.qkv.ne()[1];
    if n_t > abi::GDN_LAYER_STEP_MAX_TOKENS {
        return Err(TooManyTokens { n_tokens: n_t });
    }
    let sequences = gdn.q.ne()[3];
    if sequences > max_seqs() {
        return Err(TooManySequences { sequences, most: max_seqs() });
    }
    let op = GdnLayerStep { chain: chain.clone(), gate: gate.clone(), gdn: gdn.clone() };
    if let Some(what) = op.broken_link() {
        return Err(Layout(what));
    }
    // The parts' own supported overlaps (each part's matcher declares the same).
    let mut overlaps: Vec<(Tensor, Tensor)> =
        chain.snapshots.iter().map(|s| (chain.conv_cache, chain.cache_rows(s.row, sequences))).collect();
    if chain.conv_out == chain.qkv {
        overlaps.push((chain.qkv, chain.conv_out));
    }
    overlaps.push((gdn.ssm_cache, gdn.states));
    Ok(Candidate {
        nodes: vec![c, g, n],
        at: n,
        fused: Box::new(op),
        edges: vec![(c, n), (g, n)],
        eliminated: vec![],
        eliminated_values: vec![],
        overlaps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fusion::{Options, fuse, sweep, try_fusion};
    use crate::graph::Node;
    use crate::graph::layer::{LayerSpec, Outputs, StackSpec};
    use crate::layer::{GdnShape, Step};
    use crate::ops::Op;

    const SMALL: GdnShape = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 128, d_conv: 4, eps: 1e-6 };

    /// A one-layer graph after the three part fusions, and what the caller observes.
    fn parts(step: Step) -> (Vec<Node>, crate::graph::ByteSet) {
        let spec = StackSpec { layers: vec![LayerSpec::new(SMALL, step)], outputs: Outputs::Products };
        let b = sweep::build(&spec, 3, sweep::Planning::FusionAware).unwrap();
        let options = Options::only(&["conv_chain", "pair", "gate_pair", "state_read"]).unwrap();
        let (nodes, report) = fuse(b.fresh_nodes().unwrap(), &b.live_out(), options);
        assert_eq!(report.fired("state_read") + report.fired("gate_pair") + report.fired("conv_chain"), 3, "{report}");
        (nodes, b.live_out())
    }

    fn at<T: Op + 'static>(nodes: &[Node]) -> usize {
        nodes.iter().position(|n| n.get::<T>().is_some()).unwrap()
    }

    #[test]
    fn the_three_parts_become_one_step_at_the_gdn() {
        let (nodes, live_out) = parts(Step::new(4, 3));
        let (c, accepted) = try_fusion(&nodes, &live_out, &FUSION, 0).unwrap();
        let (chain, gate, gdn) = (at::<GdnConvChain>(&nodes), at::<MulMatVecPairGate>(&nodes), at::<GatedDeltaNetFromCache>(&nodes));
        assert_eq!((c.nodes.clone(), c.at), (vec![chain, gate, gdn], gdn));
        assert!(c.eliminated.is_empty() && accepted.eliminated.is_empty());
        assert_eq!(c.fused.name(), "GDN_LAYER_STEP");
    }

    #[test]
    fn refuses_what_is_not_one_layer_step() {
        // A part missing.
        let (nodes, live_out) = parts(Step::new(4, 3));
        let without_gate: Vec<Node> = nodes.iter().filter(|n| n.get::<MulMatVecPairGate>().is_none()).cloned().collect();
        assert!(matches!(try_fusion(&without_gate, &live_out, &FUSION, 0), Err(Refusal::NoPattern(_))));
        // The GDN reading q from elsewhere.
        let mut relinked = nodes.clone();
        let g = at::<GatedDeltaNetFromCache>(&relinked);
        let mut gdn = relinked[g].get::<GatedDeltaNetFromCache>().unwrap().clone();
        gdn.q = gdn.k;
        relinked[g] = Node::new(Box::new(gdn), Some(0));
        assert!(matches!(try_fusion(&relinked, &live_out, &FUSION, 0), Err(Refusal::Layout(_))));
        // A node in between that writes what the conv chain reads, once it has to move down.
        let mut blocked = nodes.clone();
        let chain = at::<GdnConvChain>(&blocked);
        let qkv = blocked[chain].get::<GdnConvChain>().unwrap().qkv;
        let src = blocked[chain].get::<GdnConvChain>().unwrap().conv_out;
        blocked.insert(chain + 1, Node::new(Box::new(crate::graph::Stage { src, dst: qkv }), Some(0)));
        let r = try_fusion(&blocked, &live_out, &FUSION, 0).map(|_| ());
        assert!(matches!(r, Err(Refusal::Reorder { pattern_node, .. }) if pattern_node == chain), "{r:?}");
        // Out of the registry's scope: fires_on says no above 16 tokens or without the GDN tail.
        assert!(!(FUSION.fires_on)(&LayerSpec::new(SMALL, Step::new(17, 3))));
        assert!((FUSION.fires_on)(&LayerSpec::new(SMALL, Step::new(9, 3))));
        assert!((FUSION.fires_on)(&LayerSpec::new(SMALL, Step::new(16, 15))));
        assert!(!(FUSION.fires_on)(&LayerSpec::new(GdnShape { head_dim: 64, ..SMALL }, Step::new(4, 3))));
        assert!((FUSION.fires_on)(&LayerSpec::new(SMALL, Step::new(8, 15))));
    }

    /// n_s sequences, each its own cell.
    fn batch(n_s: usize) -> Step {
        let more: Vec<(usize, usize)> = (1..n_s).map(|s| (s, 0)).collect();
        Step { cells: n_s, ..Step::new(4, 3) }.with_sequences(&more).unwrap()
    }

    #[test]
    fn batches_above_the_limit_stay_three_launches() {
        // Unset in tests (`max_seqs`' knob is for benches and the GPU sweep): the default holds.
        assert_eq!(max_seqs(), LAYER_STEP_MAX_SEQS);
        for n_s in [2, LAYER_STEP_MAX_SEQS] {
            assert!((FUSION.fires_on)(&LayerSpec::new(SMALL, batch(n_s))), "n_s = {n_s}");
            let (nodes, live_out) = parts(batch(n_s));
            assert!(try_fusion(&nodes, &live_out, &FUSION, 0).is_ok(), "n_s = {n_s}");
        }
        let n_s = LAYER_STEP_MAX_SEQS + 1;
        assert!(!(FUSION.fires_on)(&LayerSpec::new(SMALL, batch(n_s))));
        // The matcher refuses by name, the parts stay three fused launches.
        let (nodes, live_out) = parts(batch(n_s));
        let r = try_fusion(&nodes, &live_out, &FUSION, 0).map(|_| ());
        assert!(
            matches!(r, Err(Refusal::TooManySequences { sequences, most }) if sequences == n_s && most == LAYER_STEP_MAX_SEQS),
            "{r:?}"
        );
        assert_eq!(r.unwrap_err().to_string(), format!("scope: {n_s} sequences (one launch takes at most {LAYER_STEP_MAX_SEQS})"));
    }
}
