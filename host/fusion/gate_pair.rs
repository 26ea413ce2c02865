//! Fusion `gate_pair`: the gate path as the alpha/beta pair's epilogue. A MUL_MAT_VEC_PAIR
//! (what the `pair` fusion made) and SIGMOID(beta_raw) → beta, ADD(alpha, dt_bias) →
//! alpha_biased, SOFTPLUS → softplus, MUL(·, ssm_a) → gate — or, at n_t = 1, ggml's fused
//! SOFTPLUS·MUL (UNARY_MUL) — become one [`MulMatVecPairGate`]; n_t·n_s 1–16 columns (the
//! pair's scope: over 8, the pair already took the split products whole, and the gate path's
//! ops read the whole alpha and beta_raw), every weight type. The fused node takes the pair's place; eliminated: the ADD and SOFTPLUS
//! outputs (the products, beta and the gate are still written).

use super::legality::Candidate;
use super::{Fusion, Graph, Refusal, users};
use crate::graph::layer::LayerSpec;
use crate::graph::{Bound, ByteSet};
use crate::ops::{Binary, BinaryKind, MulMatVecPair, MulMatVecPairGate, Unary, UnaryKind, UnaryMul};
use crate::tensor::Tensor;

pub const FUSION: Fusion = Fusion {
    name: "gate_pair",
    summary: "MUL_MAT_VEC_PAIR + SIGMOID, ADD, SOFTPLUS, MUL (or UNARY_MUL) → MUL_MAT_VEC_PAIR_GATE",
    find,
    fires_on,
    default: true,
};

/// Column-wise like the pair (n_t·n_s columns; the epilogue is element-wise).
fn fires_on(spec: &LayerSpec) -> bool {
    spec.step.columns() <= super::pair::MAX_COLS
}

/// The nodes reading `value` (written by node `from`) while it holds that node's bytes.
fn readers(graph: &Graph, from: usize, value: &Tensor) -> Vec<usize> {
    users(graph, from, &ByteSet::of(value, Bound::Over))
}

/// The one user of `value` that is a `T` matching `ok`, or why not.
fn only_user<'a, T: crate::ops::Op + 'static>(
    graph: &'a Graph,
    from: usize,
    value: &Tensor,
    ok: impl Fn(&T) -> bool,
    missing: &'static str,
) -> Result<(usize, &'a T), Refusal> {
    let nodes = graph.nodes;
    let found: Vec<(usize, &T)> =
        readers(graph, from, value).into_iter().filter_map(|i| nodes[i].get::<T>().map(|t| (i, t))).filter(|(_, t)| ok(t)).collect();
    match found[..] {
        [one] => Ok(one),
        _ => Err(Refusal::NoPattern(missing)),
    }
}

/// A per-head vector [H_v, 1, 1, 1], contiguous F32: the broadcast operand the epilogue reads.
fn head_vector(t: &Tensor, heads: usize) -> bool {
    t.ne() == [heads, 1, 1, 1] && t.layout.is_contiguous() && t.dtype() == crate::tensor::DType::F32
}

/// The structural match of the gate path on the pair of `layer`.
pub fn find(graph: &Graph, layer: usize) -> Result<Candidate, Refusal> {
    let nodes = graph.nodes;
    use Refusal::*;
    let p = (0..nodes.len())
        .find(|&i| nodes[i].layer == Some(layer) && nodes[i].get::<MulMatVecPair>().is_some())
        .ok_or(NoPattern("no MUL_MAT_VEC_PAIR in the layer (the `pair` fusion did not fire)"))?;
    let pair = nodes[p].get::<MulMatVecPair>().expect("found").clone();
    let (rows, ncols) = (pair.first.dst.ne()[0], pair.first.dst.ne()[1]);
    let is_sigmoid = |u: &Unary| u.kind == UnaryKind::Sigmoid;
    // Which product is beta (read by a SIGMOID) and which alpha (read by an ADD)?
    let sigmoid_of = |dst: &Tensor| only_user::<Unary>(graph, p, dst, |u| is_sigmoid(u) && u.src == *dst, "SIGMOID of a product");
    let add_of = |dst: &Tensor| {
        only_user::<Binary>(
            graph,
            p,
            dst,
            |b| b.kind == BinaryKind::Add && b.a == *dst && head_vector(&b.b, rows),
            "ADD of a product and dt_bias",
        )
    };
    let (pair, (s_at, sigmoid), (a_at, add)) = match (sigmoid_of(&pair.second.dst), add_of(&pair.first.dst)) {
        (Ok(s), Ok(a)) => (pair, s, a),
        _ => {
            let swapped = MulMatVecPair { first: pair.second.clone(), second: pair.first.clone() };
            let (s, a) = (sigmoid_of(&swapped.second.dst)?, add_of(&swapped.first.dst)?);
            (swapped, s, a)
        }
    };
    let alpha_biased = add.dst;
    // SOFTPLUS then MUL by ssm_a, or ggml's fused SOFTPLUS·MUL.
    let fused_gate = only_user::<UnaryMul>(graph, a_at, &alpha_biased, |u| u.kind == UnaryKind::Softplus && u.src == alpha_biased, "");
    let (tail, ssm_a, gate, edges_tail, eliminated) = match fused_gate {
        Ok((u_at, u)) => (vec![u_at], u.mul, u.dst, vec![(a_at, u_at)], vec![a_at]),
        Err(_) => {
            let (sp_at, softplus) = only_user::<Unary>(
                graph,
                a_at,
                &alpha_biased,
                |u| u.kind == UnaryKind::Softplus && u.src == alpha_biased,
                "SOFTPLUS (or SOFTPLUS·MUL) of alpha + dt_bias",
            )?;
            let (m_at, mul) = only_user::<Binary>(
                graph,
                sp_at,
                &softplus.dst,
                |b| b.kind == BinaryKind::Mul && b.a == softplus.dst,
                "MUL of the softplus",
            )?;
            (vec![sp_at, m_at], mul.b, mul.dst, vec![(a_at, sp_at), (sp_at, m_at)], vec![a_at, sp_at])
        }
    };
    if !head_vector(&ssm_a, rows) {
        return Err(Layout("ssm_a is not a contiguous F32 [H_v] vector"));
    }
    for t in [&pair.first.dst, &pair.second.dst, &sigmoid.dst, &gate, &alpha_biased] {
        if t.ne() != [rows, ncols, 1, 1] || !t.layout.is_contiguous() {
            return Err(Layout("a gate-path value is not a contiguous F32 [H_v, n_t]"));
        }
    }
    let op = MulMatVecPairGate { pair, dt_bias: add.b, ssm_a, beta: sigmoid.dst, gate };
    let mut pattern = vec![p, s_at, a_at];
    pattern.extend(&tail);
    let mut edges = vec![(p, s_at), (p, a_at)];
    edges.extend(edges_tail);
    Ok(Candidate { nodes: pattern, at: p, fused: Box::new(op), edges, eliminated, eliminated_values: vec![], overlaps: vec![] })
}
