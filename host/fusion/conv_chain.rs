//! Fusion `conv_chain` (the reference PR's conv chain, 5 ops / 6–9 kernels → 1): the
//! conv-state GET_ROWS, the CONCAT, the 1 + R snapshot CPYs, SSM_CONV+SiLU and the two
//! L2_NORMs become one [`GdnConvChain`] (rows and window offsets taken from the CPY nodes).
//! Scope: n_s sequences (each its own source row and its rows `row + s`, as llama.cpp's equal
//! split lays them out), n_t ≤ 16, 1–16 snapshot rows, d_conv 3–5, head dim 32/64/128, C a
//! multiple of 128 (the fused kernel's contract). A source row that another sequence writes is
//! the op's refusal (on the memory: `compile_for`), not the matcher's: index values are data.
//!
//! The fused node takes the CONCAT's place: the projection (qkv) is read there in both graphs,
//! which is what lets the reference PR's layout fuse (its ssm-state GET_ROWS writes the dead
//! qkv block between SSM_CONV and the L2 norms). Eliminated: the GET_ROWS and CONCAT outputs.
//! Supported overlaps: the SiLU output on qkv element for element, a snapshot row on the row
//! read (each thread reads its channel's inputs before its writes; the kernel's docs).

use super::legality::Candidate;
use super::{Fusion, Graph, Refusal, users, writer_of};
use crate::graph::layer::{LayerSpec, Rollback, window};
use crate::graph::{Bound, ByteSet};
use crate::layer::LayerTensors;
use crate::ops::{ConcatDim0, ConvCommit, Cpy, CpySnapshots, GdnConvChain, GetRows, L2Norm, SnapshotWrite, SsmConv};
use crate::tensor::{DType, Tensor};

/// Scope limits of the fused conv chain.
pub const MAX_TOKENS: usize = 16;
pub const MAX_SNAPSHOT_ROWS: usize = 16;
pub const D_CONV: std::ops::RangeInclusive<usize> = 3..=5;
pub const HEAD_DIMS: [usize; 3] = [32, 64, 128];
/// The fused kernel's channel block: C must be a multiple of it.
pub const CHANNEL_BLOCK: usize = 128;

pub const FUSION: Fusion = Fusion {
    name: "conv_chain",
    summary: "GET_ROWS + CONCAT + snapshot CPYs + SSM_CONV·SiLU + L2_NORM q/k → GDN_CONV_CHAIN",
    find,
    fires_on,
    default: true,
};

/// \[replay\] In a replay layer too: there the chain takes the window commit in front of it
/// (GET_ROWS of the committed rows, CONCAT with the log, CPY_SNAPSHOTS of the windows, GET_ROWS
/// of each sequence's window over its row) and the log copy of its inputs, and writes no
/// snapshot row ([`ConvCommit`]); each sequence reads its own row (the replay spec's rule).
fn fires_on(spec: &LayerSpec) -> bool {
    let (s, step) = (&spec.shape, &spec.step);
    let rows_ok = match spec.rollback {
        Rollback::Snapshots => !step.reads_another_sequences_row(step.slots()) && step.slots() <= MAX_SNAPSHOT_ROWS,
        Rollback::Replay { .. } => true,
    };
    rows_ok
        && step.n_tokens <= MAX_TOKENS
        && D_CONV.contains(&s.d_conv)
        && HEAD_DIMS.contains(&s.head_dim)
        && s.try_channels().is_ok_and(|c| c.is_multiple_of(CHANNEL_BLOCK))
}

fn bytes(t: &Tensor) -> ByteSet {
    ByteSet::of(t, Bound::Over)
}

/// True when a view's elements are densely packed (its span is exactly what it covers).
fn dense(t: &Tensor) -> bool {
    // The elements' bytes lie inside the span: as many bytes as the span means all of it.
    t.layout.byte_range().is_some_and(|r| ByteSet::of(t, Bound::Under).len() == r.len())
}

/// The structural match of the conv chain in `layer`.
pub fn find(graph: &Graph, layer: usize) -> Result<Candidate, Refusal> {
    let nodes = graph.nodes;
    use Refusal::*;
    let concats: Vec<usize> =
        (0..nodes.len()).filter(|&i| nodes[i].layer == Some(layer) && nodes[i].get::<ConcatDim0>().is_some()).collect();
    // The CONCAT an SSM_CONV reads (a replay layer's first is the window commit's); else the first.
    let reads_conv = |&i: &usize| {
        let dst = nodes[i].get::<ConcatDim0>().expect("a CONCAT").dst;
        users(graph, i, &bytes(&dst)).iter().any(|&x| nodes[x].get::<SsmConv>().is_some_and(|conv| conv.conv_input == dst))
    };
    let c = concats.iter().copied().find(|i| reads_conv(i)).or(concats.first().copied()).ok_or(NoPattern("no CONCAT in the layer"))?;
    let concat = nodes[c].get::<ConcatDim0>().expect("found");
    let g = writer_of(graph, c, &concat.a).ok_or(NoPattern("nothing writes the CONCAT's first source"))?;
    let gather = nodes[g].get::<GetRows>().ok_or(NoPattern("the CONCAT's first source is not a GET_ROWS output"))?;
    let n_seqs = gather.rows.layout.n_elements();
    if n_seqs == 0 || concat.dst.ne()[2] != n_seqs || concat.dst.ne()[3] != 1 {
        return Err(Layout("the CONCAT's sequences are not the GET_ROWS' source rows"));
    }
    let state_len = concat.a.ne()[0];
    let channels = concat.a.ne()[1];
    let n_tokens = concat.b.ne()[0];
    if gather.dst.reshape([state_len, channels, n_seqs, 1]) != Some(concat.a) {
        return Err(Layout("the CONCAT's first source is not the GET_ROWS output reshaped [d_conv−1, C, n_s]"));
    }
    let qkv = concat.b.transpose();
    if !qkv.layout.is_contiguous() || qkv.dtype() != DType::F32 {
        return Err(Layout("the projection is not a contiguous F32 [C, n_t, n_s]"));
    }
    let cache = gather.src;
    if cache.ne()[0] != state_len.saturating_mul(channels) || !dense(&cache.view([cache.ne()[0], 1, 1, 1], cache.layout.nb, 0)) {
        return Err(Layout("the conv cache rows are not contiguous (d_conv−1)·C floats"));
    }

    // [replay] The window commit: the last writer of the cache before the gather is a GET_ROWS
    // of the layer (the commit's copy of each sequence's window over its row).
    let commit = match writer_of(graph, g, &cache) {
        Some(w) if nodes[w].layer == Some(layer) && nodes[w].get::<GetRows>().is_some() => {
            Some(find_commit(graph, layer, w, &cache, gather)?)
        }
        _ => None,
    };

    // Users of the GET_ROWS output: exactly the CONCAT.
    let g_users = users(graph, g, &bytes(&gather.dst));
    if g_users != [c] {
        return Err(ConvStatesUsers { users: g_users.len() });
    }
    // Users of the CONCAT output: the copies and SSM_CONV.
    let conv_input = concat.dst;
    let c_users = users(graph, c, &bytes(&conv_input));
    let copies: Vec<usize> = c_users.iter().copied().filter(|&x| nodes[x].get::<Cpy>().is_some()).collect();
    let convs: Vec<usize> = c_users.iter().copied().filter(|&x| nodes[x].get::<SsmConv>().is_some()).collect();
    if c_users.len() != copies.len() + 1 || convs.len() != 1 {
        return Err(ConcatUsers { users: c_users.len(), copies: copies.len() });
    }
    let conv_at = convs[0];
    let conv = nodes[conv_at].get::<SsmConv>().expect("found");
    if conv.conv_input != conv_input || conv.bias.is_some() || !conv.apply_silu {
        return Err(NoPattern("the SSM_CONV does not read the whole CONCAT output with SiLU and no bias"));
    }
    let d_conv = conv.weight.ne()[0];
    if d_conv != state_len + 1 {
        return Err(Layout("the conv weight's width is not d_conv"));
    }
    // The copies: window(o) of the CONCAT output into one whole cache row, each row once.
    let mut snapshots: Vec<SnapshotWrite> = Vec::new();
    for &x in &copies {
        let cpy = nodes[x].get::<Cpy>().expect("found");
        let rel = cpy.src.layout.offset.wrapping_sub(conv_input.layout.offset);
        let offset = rel / 4;
        if cpy.src.buffer != conv_input.buffer
            || cpy.src.layout.offset < conv_input.layout.offset
            || !rel.is_multiple_of(4)
            || offset > n_tokens
            || cpy.src != window(&conv_input, state_len, offset)
        {
            return Err(CopyNotWindow { node: x });
        }
        // One whole row per sequence: rows row … row + n_s − 1.
        let row = whole_rows(&cache, &cpy.dst, n_seqs).ok_or(CopyNotCacheRow { node: x })?;
        if snapshots.iter().any(|s| s.row.abs_diff(row) < n_seqs) {
            return Err(RowWrittenTwice { row });
        }
        snapshots.push(SnapshotWrite { row, offset });
    }
    // The L2 norms of the q and k heads of the SiLU output.
    let conv_out = conv.dst;
    let out_users = users(graph, conv_at, &bytes(&conv_out));
    let l2s: Vec<(usize, &L2Norm)> = out_users.iter().filter_map(|&x| nodes[x].get::<L2Norm>().map(|l| (x, l))).collect();
    let head = |offset_heads: usize, l: &L2Norm| {
        let [d, hk, ..] = l.src.ne();
        let nb = conv_out.layout.nb;
        let (Some(row), Some(offset)) = (d.checked_mul(4), crate::tensor::checked_product(&[4, offset_heads, hk, d])) else { return false };
        l.src == conv_out.view([d, hk, n_tokens, n_seqs], [4, row, nb[1], nb[2]], offset)
    };
    let (q_at, q) = *l2s.iter().find(|(_, l)| head(0, l)).ok_or(L2NotFound)?;
    let (k_at, k) = *l2s.iter().find(|(_, l)| head(1, l) && l.src.ne() == q.src.ne()).ok_or(L2NotFound)?;
    if q.eps.to_bits() != k.eps.to_bits() {
        return Err(L2NotFound);
    }
    let [head_dim, n_k_heads, ..] = q.src.ne();

    // Scope.
    if n_tokens > MAX_TOKENS {
        return Err(TooManyTokens { n_tokens });
    }
    if (snapshots.is_empty() && commit.is_none()) || snapshots.len() > MAX_SNAPSHOT_ROWS || (commit.is_some() && !snapshots.is_empty()) {
        return Err(SnapshotRows { rows: snapshots.len() });
    }
    if !D_CONV.contains(&d_conv) {
        return Err(ConvWidth { d_conv });
    }
    if !HEAD_DIMS.contains(&head_dim) {
        return Err(HeadDim { head_dim });
    }
    if !channels.is_multiple_of(CHANNEL_BLOCK) {
        return Err(Channels { channels });
    }
    // Layouts the fused kernel reads and writes.
    if !conv.weight.layout.is_contiguous() {
        return Err(Layout("the conv weight is not contiguous [d_conv, C]"));
    }
    if !conv_out.layout.is_contiguous() || conv_out.ne() != [channels, n_tokens, n_seqs, 1] {
        return Err(Layout("the SiLU output is not contiguous [C, n_t, n_s]"));
    }
    for t in [&q.dst, &k.dst] {
        if !t.layout.is_contiguous() || t.ne() != [head_dim, n_k_heads, n_tokens, n_seqs] {
            return Err(Layout("an L2 output is not contiguous [D, H_k, n_t, n_s]"));
        }
    }
    if 2 * n_k_heads * head_dim > channels {
        return Err(Layout("the q and k heads exceed the channels"));
    }

    let op = GdnConvChain {
        conv_cache: cache,
        source_row: gather.rows,
        qkv,
        weight: conv.weight,
        snapshots,
        conv_out,
        q_norm: q.dst,
        k_norm: k.dst,
        head_dim,
        n_k_heads,
        eps: q.eps,
        commit: None,
    };
    let mut op = op;
    let mut pattern_extra: Vec<usize> = Vec::new();
    let mut edges_extra: Vec<(usize, usize)> = Vec::new();
    let mut eliminated_extra: Vec<usize> = Vec::new();
    if let Some(m) = &commit {
        // The log copy of the step's inputs, if the layer has one: a CPY of the whole qkv view.
        let log_copy = (c + 1..conv_at).find(|&x| nodes[x].layer == Some(layer) && nodes[x].get::<Cpy>().is_some_and(|cpy| cpy.src == qkv));
        let log_out = log_copy.map(|x| nodes[x].get::<Cpy>().expect("found").dst);
        // The k and v logs, if the layer has them: a CPY of the whole k_norm, and one of the whole
        // v heads of the SiLU output (the first of each after the chain).
        let copy_of = |src: Option<Tensor>, after: usize| {
            let src = src?;
            (after + 1..nodes.len()).find(|&x| nodes[x].layer == Some(layer) && nodes[x].get::<Cpy>().is_some_and(|cpy| cpy.src == src))
        };
        let (k_copy, v_copy) = (copy_of(Some(k.dst), k_at), copy_of(op.v_heads(), conv_at));
        let dst_of = |x: Option<usize>| x.map(|x| nodes[x].get::<Cpy>().expect("found").dst);
        op.commit = Some(ConvCommit {
            log_qkv: m.log_qkv,
            window_rows: m.window_rows,
            row: m.row,
            log_out,
            log_k: dst_of(k_copy),
            log_v: dst_of(v_copy),
        });
        pattern_extra.extend([m.gather, m.concat, m.windows, m.back]);
        pattern_extra.extend(log_copy);
        pattern_extra.extend(k_copy);
        pattern_extra.extend(v_copy);
        edges_extra.extend(k_copy.map(|x| (k_at, x)));
        edges_extra.extend(v_copy.map(|x| (conv_at, x)));
        edges_extra.extend([(m.gather, m.concat), (m.concat, m.windows), (m.windows, m.back), (m.back, g)]);
        eliminated_extra.extend([m.gather, m.concat, m.windows]);
    }
    // The overlaps the kernel supports: the SiLU output on qkv element for element, and the
    // snapshot rows on the cache (read at the source row).
    let mut overlaps: Vec<(Tensor, Tensor)> = op.snapshots.iter().map(|s| (cache, op.cache_rows(s.row, n_seqs))).collect();
    if let Some(m) = &commit {
        // [replay] The commit rows on the cache: each float read, then written, by one thread.
        overlaps.push((cache, op.cache_rows(m.row, n_seqs)));
    }
    if conv_out.same_elements(&qkv) {
        overlaps.push((qkv, conv_out));
    }
    let mut edges = vec![(g, c), (c, conv_at), (conv_at, q_at), (conv_at, k_at)];
    edges.extend(copies.iter().map(|&x| (c, x)));
    edges.extend(edges_extra);
    let mut pattern: Vec<usize> = [g, c, conv_at, q_at, k_at].into_iter().chain(copies.iter().copied()).chain(pattern_extra).collect();
    pattern.sort_unstable();
    let mut eliminated = vec![g, c];
    eliminated.extend(eliminated_extra);
    eliminated.sort_unstable();
    Ok(Candidate { nodes: pattern, at: c, fused: Box::new(op), edges, eliminated, eliminated_values: vec![], overlaps })
}

/// The first of `n_seqs` consecutive whole rows of `cache` that `view` is exactly (one per
/// sequence: rows row … row + n_s − 1), or none.
fn whole_rows(cache: &Tensor, view: &Tensor, n_seqs: usize) -> Option<usize> {
    let row_bytes = cache.layout.nb[1];
    let rel = view.layout.offset.checked_sub(cache.layout.offset)?;
    let row = rel.checked_div(row_bytes)?;
    (view.buffer == cache.buffer
        && rel.is_multiple_of(row_bytes)
        && row < cache.ne()[1]
        && LayerTensors::try_cache_rows("conv_cache", cache, row, n_seqs).ok() == Some(*view))
    .then_some(row)
}

/// \[replay\] The window commit's four nodes, found from the GET_ROWS `back` that writes each
/// sequence's window over its row.
struct CommitMatch {
    gather: usize,
    concat: usize,
    windows: usize,
    back: usize,
    log_qkv: Tensor,
    window_rows: Tensor,
    row: usize,
}

/// \[replay\] Matches the window commit ending at GET_ROWS `back`: `back` copies rows of a
/// window table (through `window_rows`) over rows `row … row + n_s − 1` of the conv cache; the
/// table is written by one CPY_SNAPSHOTS of T_log + 1 slots, group stride n_s, first row 0 (row
/// j·n_s + s ← window(T_log − j)) from a CONCAT of [GET_ROWS of the cache through the chain's own
/// source index ; the transposed log of T_log tokens]. Anything else is refused by name.
fn find_commit(graph: &Graph, layer: usize, back: usize, cache: &Tensor, chain_gather: &GetRows) -> Result<CommitMatch, Refusal> {
    use Refusal::*;
    let nodes = graph.nodes;
    let n_seqs = chain_gather.rows.layout.n_elements();
    let copy_back = nodes[back].get::<GetRows>().expect("a GET_ROWS");
    let row = whole_rows(cache, &copy_back.dst, n_seqs);
    let Some(row) = row.filter(|_| copy_back.rows.layout.n_elements() == n_seqs) else {
        return Err(NoPattern("the GET_ROWS before the conv chain does not write one whole conv row per sequence"));
    };
    let in_layer = |i: Option<usize>| i.filter(|&i| nodes[i].layer == Some(layer));
    let windows =
        in_layer(writer_of(graph, back, &copy_back.src)).ok_or(NoPattern("nothing in the layer writes the commit's window table"))?;
    let snap = nodes[windows].get::<CpySnapshots>().ok_or(NoPattern("the commit's window table is not a CPY_SNAPSHOTS output"))?;
    let concat_at =
        in_layer(writer_of(graph, windows, &snap.conv_input)).ok_or(NoPattern("nothing in the layer writes the windows' input"))?;
    let concat = nodes[concat_at].get::<ConcatDim0>().ok_or(NoPattern("the windows' input is not a CONCAT output"))?;
    let gather =
        in_layer(writer_of(graph, concat_at, &concat.a)).ok_or(NoPattern("nothing in the layer writes the commit's CONCAT source"))?;
    let first = nodes[gather].get::<GetRows>().ok_or(NoPattern("the commit's CONCAT source is not a GET_ROWS output"))?;
    let log_qkv = concat.b.transpose();
    let [channels, log_tokens, log_seqs, _] = log_qkv.ne();
    let state_len = concat.a.ne()[0];
    if snap.conv_input != concat.dst
        || snap.cache != copy_back.src
        || snap.first_row != 0
        || snap.group_stride != n_seqs
        || snap.n_slots != log_tokens + 1
        || snap.d_conv != state_len + 1
        || concat.dst.ne() != [state_len + log_tokens, channels, n_seqs, 1]
    {
        return Err(Layout("the commit's CPY_SNAPSHOTS is not the T_log + 1 windows of its CONCAT, row j·n_s + s"));
    }
    if first.src != *cache
        || first.rows != chain_gather.rows
        || first.dst.reshape([state_len, channels, n_seqs, 1]) != Some(concat.a)
        || log_seqs != n_seqs
        || !log_qkv.layout.is_contiguous()
        || log_qkv.dtype() != DType::F32
    {
        return Err(Layout("the commit does not gather the chain's own source rows, or its log is not a contiguous F32 [C, T_log, n_s]"));
    }
    Ok(CommitMatch { gather, concat: concat_at, windows, back, log_qkv, window_rows: copy_back.rows, row })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fusion::{sweep, try_fusion};
    use crate::graph::Node;

    /// A one-layer replay graph, unfused, and what the caller observes.
    fn replay_layer(n_t: usize) -> (Vec<Node>, crate::graph::ByteSet) {
        sweep::small_replay_layer(n_t)
    }

    /// \[replay\] On a replay layer the chain takes the commit's four nodes and the two log
    /// copies (the conv inputs and v; k is the log's already: the layer's k norm writes there); a
    /// commit whose window table is not the T + 1 windows of row j·n_s + s is refused by name (the
    /// legality check cannot see window offsets: the matcher must).
    #[test]
    fn the_commit_and_the_logs_join_the_chain_and_a_foreign_window_table_is_refused() {
        let (nodes, live_out) = replay_layer(4);
        let (c, _) = try_fusion(&nodes, &live_out, &FUSION, 0).unwrap();
        let op = c.fused.as_ref().downcast_ref::<GdnConvChain>().expect("a GDN_CONV_CHAIN");
        let commit = op.commit.expect("a window commit");
        assert!(commit.log_out.is_some() && commit.log_k.is_none() && commit.log_v.is_some(), "{commit:?}");
        assert!(op.snapshots.is_empty());
        assert_eq!(c.nodes.iter().filter(|&&i| nodes[i].get::<Cpy>().is_some()).count(), 2);
        let snap_at = nodes.iter().position(|n| n.get::<CpySnapshots>().is_some()).unwrap();
        let snap = nodes[snap_at].get::<CpySnapshots>().unwrap().clone();
        for wrong in [
            CpySnapshots { n_slots: snap.n_slots - 1, ..snap.clone() },
            CpySnapshots { first_row: 1, n_slots: snap.n_slots - 1, ..snap.clone() },
            CpySnapshots { group_stride: 1, ..snap.clone() },
        ] {
            let mut other = nodes.clone();
            other[snap_at] = Node::new(Box::new(wrong.clone()), Some(0));
            let got = try_fusion(&other, &live_out, &FUSION, 0).map(|_| ());
            assert!(matches!(got, Err(Refusal::Layout(_))), "{wrong:?}: {got:?}");
        }
    }
}
