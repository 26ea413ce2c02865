//! Fusion `replay_step` (\[replay\] issue 26, `docs/rollback.md`): a replay layer's whole verify
//! step in one launch. After `conv_chain` (with the window commit), `pair`, `gate_pair`,
//! `state_read` and `replay_verify` fired (registry order), a replay layer holds three fused
//! nodes — GDN_CONV_CHAIN committing the window, MUL_MAT_VEC_PAIR_GATE,
//! GATED_DELTA_NET_REPLAY_VERIFY — which become one [`GdnLayerStepReplay`]: the layer step's
//! items and readiness flags, with the replay of the previous step's accepted tokens running
//! while the first phase does.
//!
//! - **Pattern**: the layer's one GDN_CONV_CHAIN (with a commit), one MUL_MAT_VEC_PAIR_GATE and
//!   one GATED_DELTA_NET_REPLAY_VERIFY after both, the verify reading exactly the chain's q/k
//!   norms and v channels and the pair-gate's gate and β (GDN_LAYER_STEP's links).
//! - **Placement**: the replay-verify's; the chain and the products move down past the nodes in
//!   between (the log copies of g and β, …), which the legality check allows only when none of
//!   them touches their bytes.
//! - **Nothing eliminated**: every output of the three is still written.
//! - **Overlaps**: the parts' own (the commit rows on the conv cache, the SiLU output on qkv,
//!   the committed ssm rows read and written by one thread each).
//! - **Scope**: GDN_LAYER_STEP_REPLAY's (the single-sequence layer step's items over every
//!   sequence, within the readiness flags, D = 128, n_t ≤ 16) and at most
//!   [`REPLAY_STEP_MAX_SEQS`] sequences, where a step's first phase is a small part of its
//!   time; larger batches keep the three launches (GATED_DELTA_NET_REPLAY_VERIFY's grid has every
//!   (head, sequence) block, the layer step's blocks would run them in rounds).

use super::legality::Candidate;
use super::{Fusion, Graph, Refusal, only_node};
use crate::graph::layer::{LayerSpec, Rollback};
use crate::kernels::abi;
use crate::ops::{GatedDeltaNetReplayVerify, GdnConvChain, GdnLayerStepReplay, MulMatVecPairGate};
use crate::tensor::Tensor;

pub const FUSION: Fusion = Fusion {
    name: "replay_step",
    summary: "GDN_CONV_CHAIN (commit) + MUL_MAT_VEC_PAIR_GATE + GATED_DELTA_NET_REPLAY_VERIFY → GDN_LAYER_STEP_REPLAY",
    find,
    fires_on,
    // Default since the H200 ran it (`results/2026-12-05-h200-replay-step/`): its suite
    // groups, the replay episodes, compute-sanitizer and a planted skipped wait; faster than
    // the three launches at every n_s ≤ 4 and T ≤ 8 measured (n_s = 1, T = 4: 7.70 against
    // 10.31 µs a layer step).
    default: true,
};

/// (speed) Most sequences a replay step runs in one launch. Measured on the H200 with the knob
/// below (`results/2026-12-05-h200-replay-step/`): the one launch wins at n_s ≤ 4 (and at
/// n_s = 8, T = 1 by 4 %), loses from n_s = 8, T = 4 on (23.69 against 22.34 µs a layer step;
/// n_s = 16, T = 4 46.30 against 38.47): there the three launches keep
/// GATED_DELTA_NET_REPLAY_VERIFY's full grid, while the layer step's blocks run its blocks in
/// rounds.
pub const REPLAY_STEP_MAX_SEQS: usize = 4;

/// The most sequences the fusion takes: [`REPLAY_STEP_MAX_SEQS`], or `RGDN_REPLAY_STEP_MAX_SEQS`
/// (1 … 256, read once per process) — a measurement knob, for the bench to time wider steps in
/// one launch against the three; no test sets it, and no bit depends on it (either launch is
/// the same step's bytes).
pub fn max_seqs() -> usize {
    static KNOB: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    let knob = *KNOB.get_or_init(|| crate::ops::knob("RGDN_REPLAY_STEP_MAX_SEQS", 1, abi::GDN_LAYER_STEP_MAX_SEQS as u32));
    knob.map_or(REPLAY_STEP_MAX_SEQS, |k| k as usize)
}

/// Replay layers where the three parts fire, D = 128, n_t ≤ 16, at most [`max_seqs`] sequences.
fn fires_on(spec: &LayerSpec) -> bool {
    matches!(spec.rollback, Rollback::Replay { .. })
        && (super::conv_chain::FUSION.fires_on)(spec)
        && (super::gate_pair::FUSION.fires_on)(spec)
        && (super::replay_verify::FUSION.fires_on)(spec)
        && spec.shape.head_dim == abi::GDN_HEAD_DIM
        && spec.step.n_tokens <= abi::GDN_LAYER_STEP_MAX_TOKENS
        && spec.step.n_seqs() <= max_seqs()
}

/// The structural match of the replay step in `layer`.
pub fn find(graph: &Graph, layer: usize) -> Result<Candidate, Refusal> {
    use Refusal::*;
    let (c, chain) = only_node::<GdnConvChain>(graph, layer, "no GDN_CONV_CHAIN in the layer (the `conv_chain` fusion did not fire)")?;
    let (g, gate) =
        only_node::<MulMatVecPairGate>(graph, layer, "no MUL_MAT_VEC_PAIR_GATE in the layer (the `gate_pair` fusion did not fire)")?;
    let (n, gdn) = only_node::<GatedDeltaNetReplayVerify>(
        graph,
        layer,
        "no GATED_DELTA_NET_REPLAY_VERIFY in the layer (the `replay_verify` fusion did not fire)",
    )?;
    if !(c < n && g < n) {
        return Err(NoPattern("GATED_DELTA_NET_REPLAY_VERIFY does not come after the conv chain and the products"));
    }
    let Some(op) = GdnLayerStepReplay::of_parts(chain, gate, gdn) else {
        return Err(NoPattern("the conv chain commits no replay window (GDN_LAYER_STEP runs ggml's chain)"));
    };
    if chain.head_dim != abi::GDN_HEAD_DIM {
        return Err(HeadDim { head_dim: chain.head_dim });
    }
    let n_t = chain.qkv.ne()[1];
    if n_t > abi::GDN_LAYER_STEP_MAX_TOKENS {
        return Err(TooManyTokens { n_tokens: n_t });
    }
    let sequences = gdn.q.ne()[3];
    // The first-phase items (n_s·C/128 + 2·H_v·⌈n_t·n_s/2⌉) must fit the readiness flags.
    let fits = |n_s: usize| {
        n_s.checked_mul(chain.conv_out.ne()[0] / abi::GDN_CONV_CHAIN_BLOCK as usize)
            .zip(n_t.checked_mul(n_s).and_then(|cols| cols.div_ceil(abi::GDN_LAYER_STEP_COLS).checked_mul(2 * gdn.v.ne()[1])))
            .and_then(|(tiles, rows)| tiles.checked_add(rows))
            .is_some_and(|items| items <= abi::GRID_SYNC_FLAGS)
    };
    if sequences > max_seqs() || !fits(sequences) {
        // The most this layer's shape takes in one launch (items grow with n_s).
        let most = (1..=max_seqs()).rev().find(|&n_s| fits(n_s)).unwrap_or(0);
        return Err(TooManySequences { sequences, most });
    }
    if let Some(what) = op.broken_link() {
        return Err(Layout(what));
    }
    // The parts' own supported overlaps (each part's matcher declares the same).
    let commit = chain.commit.as_ref().map(|m| m.row);
    let mut overlaps: Vec<(Tensor, Tensor)> = commit.map(|row| (chain.conv_cache, chain.cache_rows(row, sequences))).into_iter().collect();
    if chain.conv_out.same_elements(&chain.qkv) {
        overlaps.push((chain.qkv, chain.conv_out));
    }
    overlaps.push((gdn.replay.ssm_cache, gdn.replay.ssm_cache));
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
    use crate::ops::Op;

    /// A one-layer replay graph (two sequences of `n_t` tokens, own cells) after the fusions
    /// before this one, and what the caller observes.
    fn replay_layer(n_t: usize) -> (Vec<Node>, crate::graph::ByteSet) {
        let (nodes, live_out) = sweep::small_replay_layer(n_t);
        let options = Options::only(&["conv_chain", "pair", "gate_pair", "state_read", "layer_step", "replay_verify"]).unwrap();
        let (nodes, report) = fuse(nodes, &live_out, options);
        assert_eq!(report.fired("replay_verify") + report.fired("gate_pair") + report.fired("conv_chain"), 3, "{report}");
        (nodes, live_out)
    }

    fn at<T: Op + 'static>(nodes: &[Node]) -> usize {
        nodes.iter().position(|n| n.get::<T>().is_some()).unwrap()
    }

    #[test]
    fn the_three_replay_parts_become_one_step_at_the_replay_verify() {
        for n_t in [1, 4, 16] {
            let (nodes, live_out) = replay_layer(n_t);
            let (c, accepted) = try_fusion(&nodes, &live_out, &FUSION, 0).unwrap();
            let (chain, gate, gdn) = (at::<GdnConvChain>(&nodes), at::<MulMatVecPairGate>(&nodes), at::<GatedDeltaNetReplayVerify>(&nodes));
            assert_eq!((c.nodes.clone(), c.at), (vec![chain, gate, gdn], gdn));
            assert!(c.eliminated.is_empty() && accepted.eliminated.is_empty());
            assert_eq!(c.fused.name(), "GDN_LAYER_STEP_REPLAY");
        }
    }

    #[test]
    fn refuses_what_is_not_one_replay_step() {
        // A part missing.
        let (nodes, live_out) = replay_layer(4);
        let without_gate: Vec<Node> = nodes.iter().filter(|n| n.get::<MulMatVecPairGate>().is_none()).cloned().collect();
        assert!(matches!(try_fusion(&without_gate, &live_out, &FUSION, 0), Err(Refusal::NoPattern(_))));
        // The verify reading q from elsewhere.
        let mut relinked = nodes.clone();
        let r = at::<GatedDeltaNetReplayVerify>(&relinked);
        let mut rv = relinked[r].get::<GatedDeltaNetReplayVerify>().unwrap().clone();
        rv.q = rv.k;
        relinked[r] = Node::new(Box::new(rv), Some(0));
        assert!(matches!(try_fusion(&relinked, &live_out, &FUSION, 0), Err(Refusal::Layout(_))));
        // A chain without its commit is GDN_LAYER_STEP's.
        let mut plain = nodes.clone();
        let c = at::<GdnConvChain>(&plain);
        let mut chain = plain[c].get::<GdnConvChain>().unwrap().clone();
        chain.commit = None;
        plain[c] = Node::new(Box::new(chain), Some(0));
        assert!(matches!(try_fusion(&plain, &live_out, &FUSION, 0), Err(Refusal::NoPattern(_))));
    }
}
