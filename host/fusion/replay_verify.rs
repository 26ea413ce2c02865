//! Fusion `replay_verify` (\[replay\] issue 26, `docs/rollback.md`): in a replay-mode layer,
//! GATED_DELTA_NET_REPLAY (the previous step's accepted tokens, committed to each sequence's
//! row) and the verify's GATED_DELTA_NET_FROM_CACHE (made by `state_read`, reading those rows
//! back) become one [`GatedDeltaNetReplayVerify`]: the committed state is read once and written
//! once per sequence instead of read twice and written twice.
//!
//! - **Pattern**: the layer's one GATED_DELTA_NET_REPLAY and, after it, its one
//!   GATED_DELTA_NET_FROM_CACHE reading the same cache through the replay's destination index
//!   itself (the same view: the rows read are the rows committed, whatever the index values).
//! - **Placement**: the fused node takes GATED_DELTA_NET_FROM_CACHE's place; the replay moves
//!   down past the nodes in between (the window commit, the conv chain, the products, the log
//!   copies of the other set), which the legality check allows only when none of them touches
//!   the cache, the index views or the log the replay reads.
//! - **Eliminated value**: the verify's state slot (the layer's `verify_states` scratch); the
//!   legality check refuses by name when anything reads it afterwards
//!   ([`Refusal::EliminatedRead`]) or the caller observes it ([`Refusal::EliminatedLive`]).
//! - **Dataflow and overlap**: the verify reads the rows the replay may write (the replay
//!   writes a row only when its count is > 0): the one edge, a value the producer may leave as
//!   it was, admitted because the fused kernel reads every cache element it writes before
//!   writing it, the same thread, element for element — the declared (cache, cache) overlap —
//!   and takes the replayed state where it commits one and the row's own bits where not.

use super::legality::Candidate;
use super::{Fusion, Graph, Refusal, only_node};
use crate::graph::layer::{LayerSpec, Rollback};
use crate::kernels::abi;
use crate::ops::{GatedDeltaNetFromCache, GatedDeltaNetReplay, GatedDeltaNetReplayVerify};

pub const FUSION: Fusion = Fusion {
    name: "replay_verify",
    summary: "GATED_DELTA_NET_REPLAY + GATED_DELTA_NET_FROM_CACHE → GATED_DELTA_NET_REPLAY_VERIFY",
    find,
    fires_on,
    // Measured faster than what it replaces, same call (`rgdn bench --replay half --replay-arms
    // fusions`, results/2026-12-04-h200-ring/2-profile-d9352cf/): the replay layer's step at
    // n_s = 64, T = 4 134.40 µs against 218.29 unfused.
    default: true,
};

/// Replay-mode layers, where `state_read` fires (it makes the GATED_DELTA_NET_FROM_CACHE), of
/// at most [`abi::REPLAY_VERIFY_MAX_TOKENS`] tokens a step (the fused kernel's shared-memory
/// stages; the GDN tail's step limit is the same 16).
fn fires_on(spec: &LayerSpec) -> bool {
    matches!(spec.rollback, Rollback::Replay { .. })
        && (super::state_read::FUSION.fires_on)(spec)
        && spec.step.n_tokens <= abi::REPLAY_VERIFY_MAX_TOKENS
}

/// The structural match in `layer`.
pub fn find(graph: &Graph, layer: usize) -> Result<Candidate, Refusal> {
    use Refusal::*;
    let (r, replay) = only_node::<GatedDeltaNetReplay>(graph, layer, "not one GATED_DELTA_NET_REPLAY in the layer (not a replay layer)")?;
    let (n, verify) = only_node::<GatedDeltaNetFromCache>(
        graph,
        layer,
        "not one GATED_DELTA_NET_FROM_CACHE in the layer (the `state_read` fusion did not fire)",
    )?;
    if n < r {
        return Err(NoPattern("GATED_DELTA_NET_FROM_CACHE comes before the replay"));
    }
    let fused = GatedDeltaNetReplayVerify::of_pair(replay, verify)
        .ok_or(Layout("the verify does not read its states through the replay's cache and destination index"))?;
    Ok(Candidate {
        nodes: vec![r, n],
        at: n,
        fused: Box::new(fused),
        edges: vec![(r, n)],
        eliminated: vec![],
        eliminated_values: vec![verify.states],
        overlaps: vec![(replay.ssm_cache, replay.ssm_cache)],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fusion::{Options, fuse, sweep, try_fusion};
    use crate::graph::layer::{Outputs, StackSpec};
    use crate::graph::{Node, Stage};
    use crate::layer::{GdnShape, Step};
    use crate::ops::Op;

    const SMALL: GdnShape = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 128, d_conv: 4, eps: 1e-6 };

    /// A one-layer replay graph (two sequences of `n_t` tokens, own cells) after the fusions
    /// before this one, and what the caller observes.
    fn replay_layer(n_t: usize) -> (Vec<Node>, crate::graph::ByteSet) {
        let (nodes, live_out) = sweep::small_replay_layer(n_t);
        let options = Options::only(&["conv_chain", "pair", "gate_pair", "state_read", "layer_step"]).unwrap();
        let (nodes, report) = fuse(nodes, &live_out, options);
        assert_eq!(report.fired("state_read"), 1, "{report}");
        (nodes, live_out)
    }

    fn at<T: Op + 'static>(nodes: &[Node]) -> usize {
        nodes.iter().position(|n| n.get::<T>().is_some()).unwrap()
    }

    #[test]
    fn the_replay_and_the_verify_become_one_node_at_the_verify() {
        let (nodes, live_out) = replay_layer(4);
        let (c, accepted) = try_fusion(&nodes, &live_out, &FUSION, 0).unwrap();
        let (r, n) = (at::<GatedDeltaNetReplay>(&nodes), at::<GatedDeltaNetFromCache>(&nodes));
        assert_eq!((c.nodes.clone(), c.at, c.fused.name()), (vec![r, n], n, "GATED_DELTA_NET_REPLAY_VERIFY"));
        // What is left unwritten is exactly the verify's scratch slot.
        let states = nodes[n].get::<GatedDeltaNetFromCache>().unwrap().states;
        assert_eq!(accepted.eliminated, crate::graph::ByteSet::of(&states, crate::graph::Bound::Over));
        assert!((FUSION.fires_on)(&LayerSpec { rollback: Rollback::Replay { log_set: 1 }, ..LayerSpec::new(SMALL, Step::new(4, 0)) }));
        assert!(!(FUSION.fires_on)(&LayerSpec::new(SMALL, Step::new(4, 3))));
    }

    #[test]
    fn refuses_by_name() {
        let (nodes, live_out) = replay_layer(4);
        let (r, n) = (at::<GatedDeltaNetReplay>(&nodes), at::<GatedDeltaNetFromCache>(&nodes));
        let verify = nodes[n].get::<GatedDeltaNetFromCache>().unwrap().clone();
        // A reader of the scratch slot after the verify: the eliminated value is read.
        let mut read = nodes.clone();
        let sink = verify.out;
        read.insert(n + 1, Node::new(Box::new(Stage { src: verify.states.view(sink.ne(), sink.layout.nb, 0), dst: sink }), Some(0)));
        assert_eq!(try_fusion(&read, &live_out, &FUSION, 0).map(|_| ()), Err(Refusal::EliminatedRead { node: n + 1 }));
        // … or the caller observes it.
        let mut observed = live_out.clone();
        observed.union_with(&crate::graph::ByteSet::of(&verify.states, crate::graph::Bound::Over));
        assert_eq!(try_fusion(&nodes, &observed, &FUSION, 0).map(|_| ()), Err(Refusal::EliminatedLive));
        // The verify reading other rows than the replay commits to.
        let mut other = nodes.clone();
        let replay = other[r].get::<GatedDeltaNetReplay>().unwrap().clone();
        other[r] = Node::new(Box::new(GatedDeltaNetReplay { dest_rows: replay.accepted, ..replay }), Some(0));
        assert!(matches!(try_fusion(&other, &live_out, &FUSION, 0), Err(Refusal::Layout(_))));
        // A node in between that writes the cache (the replay cannot move down past it).
        let mut blocked = nodes.clone();
        let cache = verify.ssm_cache;
        let row = cache.view([16, 1, 1, 1], cache.layout.nb, 0);
        blocked.insert(r + 1, Node::new(Box::new(Stage { src: row, dst: row }), Some(0)));
        let got = try_fusion(&blocked, &live_out, &FUSION, 0).map(|_| ());
        assert!(matches!(got, Err(Refusal::Reorder { node, .. }) if node == r + 1), "{got:?}");
        // No replay: a snapshot layer.
        let (plain, live) = {
            let spec = StackSpec { layers: vec![LayerSpec::new(SMALL, Step::new(4, 3))], outputs: Outputs::Products };
            let b = sweep::build(&spec, 3, sweep::Planning::FusionAware).unwrap();
            (b.fresh_nodes().unwrap(), b.live_out())
        };
        assert!(matches!(try_fusion(&plain, &live, &FUSION, 0), Err(Refusal::NoPattern(_))));
    }
}
