//! Fusion `layer_step`: the whole GDN layer verify step in one launch. After `conv_chain`,
//! `pair`, `gate_pair` and `state_read` fired (registry order), a layer holds three fused
//! nodes — GDN_CONV_CHAIN, MUL_MAT_VEC_PAIR_GATE, GATED_DELTA_NET_FROM_CACHE — which become one
//! [`GdnLayerStep`]. Scope: the three parts' (one sequence, n_t ≤ 8, d_conv 3–5, C a multiple of
//! 128) with D = 128 and the GDN reading exactly the chain's q/k norms and v channels and the
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
use super::{Fusion, Graph, Refusal};
use crate::graph::layer::LayerSpec;
use crate::kernels::abi;
use crate::ops::{GatedDeltaNetFromCache, GdnConvChain, GdnLayerStep, MulMatVecPairGate, Op};
use crate::tensor::Tensor;

pub const FUSION: Fusion = Fusion {
    name: "layer_step",
    summary: "GDN_CONV_CHAIN + MUL_MAT_VEC_PAIR_GATE + GATED_DELTA_NET_FROM_CACHE → GDN_LAYER_STEP",
    find,
    fires_on,
};

/// Where the three parts fire, and D = 128 (GATED_DELTA_NET's).
fn fires_on(spec: &LayerSpec) -> bool {
    (super::conv_chain::FUSION.fires_on)(spec)
        && (super::gate_pair::FUSION.fires_on)(spec)
        && (super::state_read::FUSION.fires_on)(spec)
        && spec.shape.head_dim == abi::GDN_HEAD_DIM
        && spec.step.n_tokens <= abi::GDN_LAYER_STEP_MAX_TOKENS
}

/// The one node of `layer` that is a `T`, or why not.
fn only<'a, T: Op + 'static>(graph: &'a Graph, layer: usize, missing: &'static str) -> Result<(usize, &'a T), Refusal> {
    let found: Vec<(usize, &T)> =
        graph.nodes.iter().enumerate().filter(|(_, n)| n.layer == Some(layer)).filter_map(|(i, n)| n.get::<T>().map(|t| (i, t))).collect();
    match found[..] {
        [one] => Ok(one),
        _ => Err(Refusal::NoPattern(missing)),
    }
}

/// The structural match of the layer step in `layer`.
pub fn find(graph: &Graph, layer: usize) -> Result<Candidate, Refusal> {
    use Refusal::*;
    let (c, chain) = only::<GdnConvChain>(graph, layer, "no GDN_CONV_CHAIN in the layer (the `conv_chain` fusion did not fire)")?;
    let (g, gate) = only::<MulMatVecPairGate>(graph, layer, "no MUL_MAT_VEC_PAIR_GATE in the layer (the `gate_pair` fusion did not fire)")?;
    let (n, gdn) =
        only::<GatedDeltaNetFromCache>(graph, layer, "no GATED_DELTA_NET_FROM_CACHE in the layer (the `state_read` fusion did not fire)")?;
    if !(c < n && g < n) {
        return Err(NoPattern("GATED_DELTA_NET_FROM_CACHE does not come after the conv chain and the products"));
    }
    if chain.head_dim != abi::GDN_HEAD_DIM {
        return Err(HeadDim { head_dim: chain.head_dim });
    }
    let n_t = chain.qkv.ne()[1];
    if n_t > abi::GDN_LAYER_STEP_MAX_TOKENS {
        return Err(TooManyTokens { n_tokens: n_t });
    }
    let sequences = gdn.q.ne()[3];
    if sequences != 1 {
        return Err(MultiSequence { sequences });
    }
    let op = GdnLayerStep { chain: chain.clone(), gate: gate.clone(), gdn: gdn.clone() };
    if let Some(what) = op.broken_link() {
        return Err(Layout(what));
    }
    // The parts' own supported overlaps (each part's matcher declares the same).
    let mut overlaps: Vec<(Tensor, Tensor)> = chain.snapshots.iter().map(|s| (chain.conv_cache, chain.cache_row(s.row))).collect();
    if chain.conv_out == chain.qkv {
        overlaps.push((chain.qkv, chain.conv_out));
    }
    overlaps.push((gdn.ssm_cache, gdn.states));
    Ok(Candidate { nodes: vec![c, g, n], at: n, fused: Box::new(op), edges: vec![(c, n), (g, n)], eliminated: vec![], overlaps })
}
