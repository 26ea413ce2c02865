//! Fusion `state_read`: GATED_DELTA_NET reads its initial state straight from the ssm-cache
//! row its index selects — the ssm-state GET_ROWS (a 2 MiB row copy for Qwen3.5-9B) and
//! GATED_DELTA_NET become one [`GatedDeltaNetFromCache`]. The SCALE zeroing of a fresh cell
//! stays where it is (before the read); the states still go straight into the cache rows. The
//! fused node takes GATED_DELTA_NET's place (the cache read moves later: nothing in between may
//! write the cache or the index); eliminated: the GET_ROWS output. Supported overlap: a written
//! state slot on the row read, element for element (each lane reads its elements before it
//! writes them; the kernel's docs).

use super::legality::Candidate;
use super::{Fusion, Graph, Refusal, users, writer_of};
use crate::graph::layer::LayerSpec;
use crate::graph::{Bound, ByteSet};
use crate::ops::{GatedDeltaNet, GatedDeltaNetFromCache, GetRows};
use crate::tensor::DType;

pub const FUSION: Fusion = Fusion {
    name: "state_read",
    summary: "ssm-state GET_ROWS + GATED_DELTA_NET → GATED_DELTA_NET_FROM_CACHE",
    find,
    fires_on,
    default: true,
};

/// Wherever the GDN is built. [seq-batch] With n_s > 1 a sequence's source row may be another
/// sequence's written slot, an overlap the fused kernel does not support (the unfused GET_ROWS
/// reads every source row before the GDN writes): the op refuses it on the memory
/// (`compile_for`), by the index values; llama.cpp's steps (each sequence reads a row of its own
/// cell) never do.
fn fires_on(spec: &LayerSpec) -> bool {
    spec.gdn_tail && !spec.step.reads_another_sequences_row(spec.step.n_tokens.min(spec.step.slots()))
}

/// The structural match of the state read in `layer`.
pub fn find(graph: &Graph, layer: usize) -> Result<Candidate, Refusal> {
    use Refusal::*;
    let nodes = graph.nodes;
    let n = (0..nodes.len())
        .find(|&i| nodes[i].layer == Some(layer) && nodes[i].get::<GatedDeltaNet>().is_some())
        .ok_or(NoPattern("no GATED_DELTA_NET in the layer"))?;
    let gdn = nodes[n].get::<GatedDeltaNet>().expect("found");
    let g = writer_of(graph, n, &gdn.state_in).ok_or(NoPattern("nothing writes GATED_DELTA_NET's initial state"))?;
    let gather = nodes[g].get::<GetRows>().ok_or(NoPattern("GATED_DELTA_NET's initial state is not a GET_ROWS output"))?;
    let [row_len, ..] = gather.src.ne();
    let [d, _, heads, seqs] = gdn.state_in.ne();
    if gather.rows.layout.n_elements() != seqs {
        return Err(Layout("the GET_ROWS gathers another number of rows than the GDN has sequences"));
    }
    if gather.dst.reshape(gdn.state_in.ne()) != Some(gdn.state_in) || gather.dst.ne() != [row_len, seqs, 1, 1] || row_len != d * d * heads {
        return Err(Layout("the initial state is not the GET_ROWS output reshaped [D, D, H_v, n_s]"));
    }
    let cache = gather.src;
    if cache.dtype() != DType::F32 || cache.layout.nb[0] != 4 || cache.ne()[2] != 1 || cache.ne()[3] != 1 {
        return Err(Layout("the ssm cache rows are not contiguous F32"));
    }
    // The GET_ROWS output is read by GATED_DELTA_NET only.
    let readers = users(graph, g, &ByteSet::of(&gather.dst, Bound::Over));
    if readers != [n] {
        return Err(NoPattern("the GET_ROWS output has other readers than GATED_DELTA_NET"));
    }
    // A state slot that shares bytes with the cache must be whole cache rows at the cache's
    // row stride (the overlap the kernel supports; its validation has the precise rule).
    let s = &gdn.states;
    if s.buffer == cache.buffer {
        let stride = cache.layout.nb[1];
        let rel = s.layout.offset.wrapping_sub(cache.layout.offset);
        if stride == 0
            || s.layout.offset < cache.layout.offset
            || rel % stride != 0
            || !s.layout.nb[1].is_multiple_of(stride)
            || !s.layout.nb[2].is_multiple_of(stride)
        {
            return Err(Layout("the state slots are not whole rows of the ssm cache"));
        }
    }
    let op = GatedDeltaNetFromCache::from_cache(gdn, cache, gather.rows);
    Ok(Candidate {
        nodes: vec![g, n],
        at: n,
        fused: Box::new(op),
        edges: vec![(g, n)],
        eliminated: vec![g],
        eliminated_values: vec![],
        overlaps: vec![(cache, gdn.states)],
    })
}
