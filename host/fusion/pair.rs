//! Fusion `pair` (the reference PR's alpha/beta pair): the two MUL_MAT_VECs of the layer
//! input become one [`MulMatVecPair`] at ncols = n_t (1–16). [wide-pair] Over 8 columns ggml (and
//! the graph builder) splits each product into launches of at most 8 columns — mat-vecs of one
//! weight over consecutive column slices of one input, writing consecutive column slices of
//! one dst; the matcher takes such a split product whole when its slices tile the input and
//! the dst exactly (same buffer, type and strides, each slice starting where the previous one
//! ends, in graph order; anything else is [`Refusal::PairSlices`]). The pair over the whole
//! columns is bit-identical to the split launches: each column's arithmetic is its own
//! (`host/ops/mmvf_pair.rs`). The fused node takes the first mat-vec's place; nothing is
//! eliminated.

use super::legality::Candidate;
use super::{Fusion, Graph, Refusal};
use crate::graph::Node;
use crate::graph::layer::LayerSpec;
use crate::kernels::abi;
use crate::ops::{MulMatVec, MulMatVecPair};
use crate::tensor::Tensor;

/// The pair's column limit ([`abi::MUL_MAT_VEC_PAIR_MAX_COLS`]: the products of up to 16
/// columns, split or not).
pub const MAX_COLS: usize = abi::MUL_MAT_VEC_PAIR_MAX_COLS;

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

/// `t` with `cols` columns from its first (the same buffer, type, offset and strides).
fn widened(t: &Tensor, cols: usize) -> Tensor {
    let [n0, _, n2, n3] = t.ne();
    Tensor { layout: crate::tensor::Layout { ne: [n0, cols, n2, n3], ..t.layout }, ..*t }
}

/// The one product the mat-vecs `list` (one weight's, in graph order) compute: a single
/// launch as it is; a split product (ggml's launches of ≤ 8 columns) as one mat-vec over the
/// whole input and dst, when the slices tile them exactly — slice k's input (and dst) is the
/// first slice's view moved on by the columns of slices 0 … k−1 (same buffer, type, strides,
/// rows, one plane), with the same precision. Checked arithmetic: an offset that does not
/// fit is a refusal, not a wrap.
fn whole_product(nodes: &[Node], list: &[usize]) -> Result<MulMatVec, Refusal> {
    use Refusal::PairSlices;
    let mv = |i: usize| nodes[i].get::<MulMatVec>().expect("a mat-vec");
    let first = mv(list[0]);
    if list.len() == 1 {
        return Ok(first.clone());
    }
    let mut cols = 0usize;
    for &i in list {
        let part = mv(i);
        if part.precision != first.precision {
            return Err(PairSlices("the launches of one product differ in precision"));
        }
        for (slice, base) in [(&part.input, &first.input), (&part.dst, &first.dst)] {
            let [n0, n1, n2, n3] = slice.ne();
            if slice.buffer != base.buffer || slice.layout.dtype != base.layout.dtype || slice.layout.nb != base.layout.nb {
                return Err(PairSlices("a launch's input or dst is not a slice of the first launch's buffer, type and strides"));
            }
            if n0 != base.ne()[0] || n2 != 1 || n3 != 1 || n1 == 0 {
                return Err(PairSlices("a launch's input or dst is not a whole-row column slice of one plane"));
            }
            let at = cols.checked_mul(base.layout.nb[1]).and_then(|d| base.layout.offset.checked_add(d));
            if at != Some(slice.layout.offset) {
                return Err(PairSlices("the launches' column slices do not follow each other (a gap, an overlap or another order)"));
            }
        }
        if part.input.ne()[1] != part.dst.ne()[1] {
            return Err(PairSlices("a launch's input and dst slices differ in columns"));
        }
        cols = cols.checked_add(part.input.ne()[1]).ok_or(PairSlices("column count overflows"))?;
    }
    Ok(MulMatVec { input: widened(&first.input, cols), dst: widened(&first.dst, cols), ..first.clone() })
}

/// The structural match of the pair in `layer`.
pub fn find(graph: &Graph, layer: usize) -> Result<Candidate, Refusal> {
    let nodes = graph.nodes;
    use Refusal::*;
    let by_weight = products(nodes, layer);
    let [(_, list_a), (_, list_b)] = &by_weight[..] else {
        return Err(PairNotFound { mat_vecs: by_weight.len() });
    };
    let (first, second) = (whole_product(nodes, list_a)?, whole_product(nodes, list_b)?);
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
    let mut pattern: Vec<usize> = list_a.iter().chain(list_b).copied().collect();
    pattern.sort_unstable();
    let at = pattern[0];
    let op = MulMatVecPair { first, second };
    Ok(Candidate {
        nodes: pattern,
        at,
        fused: Box::new(op),
        edges: vec![],
        eliminated: vec![],
        eliminated_values: vec![],
        overlaps: vec![],
    })
}
