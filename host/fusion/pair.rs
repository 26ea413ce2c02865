//! Fusion `pair` (the reference PR's alpha/beta pair): the two MUL_MAT_VECs of the layer
//! input become one [`MulMatVecPair`] at ncols = n_t (1–8); a product split over several
//! launches (n_t > 8) is refused. The fused node takes the first mat-vec's place; nothing is
//! eliminated.

use super::legality::Candidate;
use super::{Fusion, Graph, Refusal};
use crate::graph::Node;
use crate::graph::layer::LayerSpec;
use crate::ops::{MulMatVec, MulMatVecPair};
use crate::tensor::Tensor;

/// The pair's column limit (mul_mat_vec_f's).
pub const MAX_COLS: usize = 8;

pub const FUSION: Fusion =
    Fusion { name: "pair", summary: "the alpha and beta MUL_MAT_VECs → MUL_MAT_VEC_PAIR", find, fires_on, default: true };

/// The products have n_t·n_s columns (sequence-major); the pair is column-wise, so n_s does
/// not matter beyond the column count.
fn fires_on(spec: &LayerSpec) -> bool {
    spec.step.columns() <= MAX_COLS
}

/// The mat-vec nodes of `layer`, grouped by weight: one group per product.
pub(crate) fn products(nodes: &[Node], layer: usize) -> Vec<(Tensor, Vec<usize>)> {
    let mut by_weight: Vec<(Tensor, Vec<usize>)> = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        if n.layer != Some(layer) {
            continue;
        }
        let Some(mv) = n.get::<MulMatVec>() else { continue };
        match by_weight.iter_mut().find(|(w, _)| *w == mv.weight) {
            Some((_, list)) => list.push(i),
            None => by_weight.push((mv.weight, vec![i])),
        }
    }
    by_weight
}

/// The structural match of the pair in `layer`.
pub fn find(graph: &Graph, layer: usize) -> Result<Candidate, Refusal> {
    let nodes = graph.nodes;
    use Refusal::*;
    let mv = |i: usize| nodes[i].get::<MulMatVec>().expect("a mat-vec");
    let by_weight = products(nodes, layer);
    // A weight with several launches is a product wider than 8.
    if let Some((_, list)) = by_weight.iter().find(|(_, l)| l.len() > 1) {
        return Err(PairTooWide { ncols: list.iter().map(|&i| mv(i).input.ne()[1]).sum() });
    }
    let mvs: Vec<usize> = by_weight.iter().map(|(_, l)| l[0]).collect();
    let [a, b] = mvs[..] else {
        return Err(PairNotFound { mat_vecs: mvs.len() });
    };
    let (first, second) = (mv(a), mv(b));
    if !first.input.same_elements(&second.input) {
        return Err(PairMismatch("the two mat-vecs read different inputs"));
    }
    let ncols = first.input.ne()[1];
    if ncols > MAX_COLS {
        return Err(PairTooWide { ncols });
    }
    if first.weight.dtype() != second.weight.dtype() || first.weight.ne() != second.weight.ne() || first.precision != second.precision {
        return Err(PairMismatch("weights of different type, shape or precision"));
    }
    let op = MulMatVecPair { first: first.clone(), second: second.clone() };
    Ok(Candidate { nodes: vec![a, b], at: a, fused: Box::new(op), edges: vec![], eliminated: vec![], overlaps: vec![] })
}
