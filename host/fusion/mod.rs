//! The GDN fusion pass (issue 6, the reference PR): opt-in (`RGDN_GDN_FUSION=1`, or
//! [`Options::ON`]), default off. It rewrites a graph of [`Node`]s; the executor runs the result.
//! Every decision is reported per layer: which fusion fired, or the [`Refusal`] that refused it.
//!
//! **Conv chain** (5 kernels → 1, any width n_t 1–16): the conv-state GET_ROWS, the CONCAT, the
//! 1 + R snapshot CPYs, SSM_CONV+SiLU and the two L2_NORMs become one [`GdnConvChain`] node
//! (rows and window offsets taken from the CPY nodes). Scope: one sequence, n_t ≤ 16, 1–16
//! snapshot rows, d_conv 3–5, head dim 32/64/128, C a multiple of 128 (the fused kernel's
//! contract).
//!
//! **Alpha/beta pair**: the two MUL_MAT_VECs of the layer input become one [`MulMatVecPair`] at
//! ncols = n_t (1–8); a product split over several launches (n_t > 8) is refused.
//!
//! The matcher reasons on byte ranges ([`crate::graph::Access`]) only, never on names or on the
//! fused op's own validation.
//!
//! # Where the fused conv-chain node goes, and why the rules make that safe
//!
//! The fused node F is placed **at the CONCAT's position** c. Let g be the GET_ROWS, and the
//! other pattern nodes (CPYs, SSM_CONV, L2 q, L2 k) lie after c. Moving the pattern's effects
//! to c changes, for a node X strictly between g and the last pattern node:
//!
//! - *reads moved later* (g → c): the cache rows and ids read by the GET_ROWS. An X between g
//!   and c that wrote them would be seen by F but not by the GET_ROWS: **no X may write the
//!   cache or the ids**.
//! - *reads moved earlier* (SSM_CONV → c): the conv weight. **No X may write the weights.**
//!   The projection (qkv) is read at c in both graphs: X may write it anywhere — this is what
//!   lets the reference PR's layout (ssm-state GET_ROWS written into the dead qkv block between
//!   the conv and the L2 norms) fuse. Had F been placed at the last pattern node, that X would
//!   have clobbered qkv before F read it; placed at g, an X writing qkv between g and c would
//!   be missed.
//! - *writes moved earlier* (CPYs, SSM_CONV, L2 → c): the cache rows, the SiLU output and the
//!   L2 outputs. An X after c that read them would now see the new values instead of the old;
//!   an X that wrote them before their original writer would now overwrite F's result instead
//!   of being overwritten by it: **no X may read or write the cache, nor read or write the
//!   early SiLU/L2 outputs** (as byte ranges, whatever value they hold). Reading the cache
//!   between g and c would be harmless; it is refused anyway, as in the reference PR.
//! - *writes removed*: F never writes the GET_ROWS and CONCAT outputs. Every node that reads
//!   their bytes while they still hold those values (anywhere in the graph, not only in
//!   between) must be a pattern node: the GET_ROWS output has exactly one user (the CONCAT),
//!   the CONCAT exactly n_cpy + 1 (the CPYs and SSM_CONV), and none of those reads bytes that
//!   another node overwrote in the meantime (in ggml such a writer would be a view, i.e. another
//!   user).
//!
//! Nothing else is forbidden. Inside F, reads and writes happen together, so F's outputs must
//! not overlap its inputs or each other, except the two overlaps the kernel supports element
//! for element: the SiLU output *is* the projection, and a snapshot row *is* the row read.
//!
//! The pair is placed at the first mat-vec: the second's reads move earlier (no node in
//! between may write its input or weight) and its write moves earlier (none may read or write
//! its output); the two products must not overlap each other's operands.

pub mod sweep;

use crate::graph::layer::{batch_snapshot_copies, window};
use crate::graph::{Access, Node, any_overlap};
use crate::layer::LayerTensors;
use crate::ops::{ConcatDim0, Cpy, GdnConvChain, GetRows, L2Norm, MulMatVec, MulMatVecPair, SnapshotWrite, SsmConv};
use crate::tensor::{DType, Tensor};
use std::fmt;
use std::ops::Range;

/// Scope limits of the fused conv chain.
pub const MAX_TOKENS: usize = 16;
pub const MAX_SNAPSHOT_ROWS: usize = 16;
pub const D_CONV: std::ops::RangeInclusive<usize> = 3..=5;
pub const HEAD_DIMS: [usize; 3] = [32, 64, 128];
/// The fused kernel's channel block: C must be a multiple of it.
pub const CHANNEL_BLOCK: usize = 128;
/// The pair's column limit (mul_mat_vec_f's).
pub const PAIR_MAX_COLS: usize = 8;

/// Which fusions the pass may apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    pub conv_chain: bool,
    pub pair: bool,
}

impl Options {
    pub const OFF: Options = Options { conv_chain: false, pair: false };
    pub const ON: Options = Options { conv_chain: true, pair: true };

    /// `RGDN_GDN_FUSION=1` turns both on; anything else (or unset) leaves them off.
    pub fn from_env() -> Options {
        if std::env::var("RGDN_GDN_FUSION").is_ok_and(|v| v == "1") { Options::ON } else { Options::OFF }
    }
}

/// Why a fusion did not fire: one variant per rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Fusion turned off.
    Off,
    /// The layer has no CONCAT fed by a GET_ROWS, or not the op shapes of the pattern.
    NoPattern(&'static str),
    /// Scope: more than one sequence.
    MultiSequence { sequences: usize },
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
    /// The GET_ROWS output is read by another node than the CONCAT.
    ConvStatesUsers { users: usize },
    /// The CONCAT does not have exactly n_cpy + 1 users (the copies and SSM_CONV).
    ConcatUsers { users: usize, copies: usize },
    /// A node overwrote part of the CONCAT output while a copy or SSM_CONV still read it.
    ConcatOverwritten { node: usize },
    /// A copy's source is not `window(o)` of the CONCAT output with 0 ≤ o ≤ n_t.
    CopyNotWindow { node: usize },
    /// A copy's destination is not one whole row of the conv cache the GET_ROWS reads.
    CopyNotCacheRow { node: usize },
    /// Two copies write the same cache row.
    RowWrittenTwice { row: usize },
    /// The two L2_NORMs of the q and k heads of the SiLU output were not found.
    L2NotFound,
    /// A node between the first and last fused node reads the early SiLU/L2 outputs.
    BetweenReadsEarlyOutput { node: usize },
    /// … writes them.
    BetweenWritesEarlyOutput { node: usize },
    /// … writes the conv cache.
    BetweenWritesCache { node: usize },
    /// … reads the conv cache.
    BetweenReadsCache { node: usize },
    /// … writes the conv weights.
    BetweenWritesWeights { node: usize },
    /// … writes the row ids.
    BetweenWritesIds { node: usize },
    /// The fused node would read and write overlapping bytes the kernel does not support.
    FusedAliasing { a: &'static str, b: &'static str },
    /// The alpha/beta products are split over several launches (n_t > 8).
    PairTooWide { ncols: usize },
    /// Not exactly two single-launch mat-vecs in the layer.
    PairNotFound { mat_vecs: usize },
    /// The two mat-vecs differ in input, weight type/shape or precision.
    PairMismatch(&'static str),
    /// A node between the two mat-vecs writes the second's input or weight.
    PairBetweenWritesInput { node: usize },
    /// A node between the two mat-vecs reads or writes the second's output.
    PairBetweenTouchesOutput { node: usize },
    /// One product overlaps the other's operands or output.
    PairAliasing,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Refusal::*;
        match self {
            Off => write!(f, "fusion off"),
            NoPattern(what) => write!(f, "no pattern: {what}"),
            MultiSequence { sequences } => write!(f, "scope: {sequences} sequences (single sequence only)"),
            TooManyTokens { n_tokens } => write!(f, "scope: n_t = {n_tokens} (at most {MAX_TOKENS})"),
            SnapshotRows { rows } => write!(f, "scope: {rows} snapshot rows (1 to {MAX_SNAPSHOT_ROWS})"),
            ConvWidth { d_conv } => write!(f, "scope: d_conv = {d_conv} (3 to 5)"),
            HeadDim { head_dim } => write!(f, "scope: head dim {head_dim} (32, 64 or 128)"),
            Channels { channels } => write!(f, "scope: C = {channels} (a multiple of {CHANNEL_BLOCK})"),
            Layout(what) => write!(f, "layout: {what}"),
            ConvStatesUsers { users } => write!(f, "the conv-state GET_ROWS output has {users} users (exactly the CONCAT)"),
            ConcatUsers { users, copies } => write!(f, "the CONCAT has {users} users, not n_cpy + 1 = {}", copies + 1),
            ConcatOverwritten { node } => write!(f, "node {node} overwrites the CONCAT output while the chain still reads it"),
            CopyNotWindow { node } => write!(f, "copy node {node} is not a view of the concat at column offset 0..n_t"),
            CopyNotCacheRow { node } => write!(f, "copy node {node} does not write one whole cache row"),
            RowWrittenTwice { row } => write!(f, "cache row {row} is written twice"),
            L2NotFound => write!(f, "no L2_NORM pair of the q and k heads of the SiLU output"),
            BetweenReadsEarlyOutput { node } => write!(f, "node {node} in between reads the early SiLU/L2 outputs"),
            BetweenWritesEarlyOutput { node } => write!(f, "node {node} in between writes the early SiLU/L2 outputs"),
            BetweenWritesCache { node } => write!(f, "node {node} in between writes the conv cache"),
            BetweenReadsCache { node } => write!(f, "node {node} in between reads the conv cache"),
            BetweenWritesWeights { node } => write!(f, "node {node} in between writes the conv weights"),
            BetweenWritesIds { node } => write!(f, "node {node} in between writes the row ids"),
            FusedAliasing { a, b } => write!(f, "the fused node's `{a}` and `{b}` overlap"),
            PairTooWide { ncols } => write!(f, "pair: {ncols} columns (at most {PAIR_MAX_COLS})"),
            PairNotFound { mat_vecs } => write!(f, "pair: {mat_vecs} mat-vec launches, not two of one input"),
            PairMismatch(what) => write!(f, "pair: {what}"),
            PairBetweenWritesInput { node } => write!(f, "pair: node {node} in between writes the second mat-vec's input or weight"),
            PairBetweenTouchesOutput { node } => write!(f, "pair: node {node} in between touches the second mat-vec's output"),
            PairAliasing => write!(f, "pair: one product overlaps the other's operands"),
        }
    }
}

/// What happened to one fusion of one layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Fired: `replaced` nodes became one, placed at node `at` of the result.
    Fused {
        replaced: usize,
        at: usize,
    },
    Refused(Refusal),
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Fused { replaced, at } => write!(f, "fused ({replaced} nodes → 1, at node {at})"),
            Outcome::Refused(r) => write!(f, "refused: {r}"),
        }
    }
}

/// The decisions for one layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerReport {
    pub layer: usize,
    pub conv_chain: Outcome,
    pub pair: Outcome,
}

/// The decisions for every layer of a graph.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub layers: Vec<LayerReport>,
}

impl Report {
    /// Layers where the conv chain / the pair fused.
    pub fn fused_counts(&self) -> (usize, usize) {
        let n = |f: fn(&LayerReport) -> &Outcome| self.layers.iter().filter(|l| matches!(f(l), Outcome::Fused { .. })).count();
        (n(|l| &l.conv_chain), n(|l| &l.pair))
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for l in &self.layers {
            writeln!(f, "layer {}: conv chain {}; alpha/beta pair {}", l.layer, l.conv_chain, l.pair)?;
        }
        Ok(())
    }
}

/// Runs the fusion pass, then the backend's snapshot batching (ggml's #379) on what is left:
/// the node list the executor runs.
pub fn compile(nodes: Vec<Node>, options: Options) -> (Vec<Node>, Report) {
    let (nodes, report) = fuse(nodes, options);
    (batch_snapshot_copies(nodes), report)
}

/// The fusion pass alone: each layer (in order of first appearance) gets its conv chain and
/// its pair matched on the current graph and, when accepted, rewritten.
pub fn fuse(mut nodes: Vec<Node>, options: Options) -> (Vec<Node>, Report) {
    let mut layers: Vec<usize> = Vec::new();
    for n in &nodes {
        if let Some(l) = n.layer
            && !layers.contains(&l)
        {
            layers.push(l);
        }
    }
    let mut report = Report::default();
    for layer in layers {
        let conv_chain = if options.conv_chain {
            match match_conv_chain(&nodes, layer) {
                Ok(m) => {
                    let replaced = m.nodes.len();
                    let (next, at) = rewrite(nodes, &m.nodes, m.at, Node::new(Box::new(m.op), Some(layer)));
                    nodes = next;
                    Outcome::Fused { replaced, at }
                }
                Err(r) => Outcome::Refused(r),
            }
        } else {
            Outcome::Refused(Refusal::Off)
        };
        let pair = if options.pair {
            match match_pair(&nodes, layer) {
                Ok(m) => {
                    let (next, at) = rewrite(nodes, &m.nodes, m.at, Node::new(Box::new(m.op), Some(layer)));
                    nodes = next;
                    Outcome::Fused { replaced: 2, at }
                }
                Err(r) => Outcome::Refused(r),
            }
        } else {
            Outcome::Refused(Refusal::Off)
        };
        report.layers.push(LayerReport { layer, conv_chain, pair });
    }
    (nodes, report)
}

/// Drops the nodes `gone` and puts `fused` where node `at` was; returns the new index of it.
fn rewrite(nodes: Vec<Node>, gone: &[usize], at: usize, fused: Node) -> (Vec<Node>, usize) {
    let mut out = Vec::with_capacity(nodes.len());
    let mut fused = Some(fused);
    let mut position = 0;
    for (i, n) in nodes.into_iter().enumerate() {
        if i == at {
            position = out.len();
            out.push(fused.take().expect("placed once"));
        }
        if !gone.contains(&i) {
            out.push(n);
        }
    }
    (out, position)
}

/// An accepted conv chain: the pattern's node indices, where the fused node goes, the op.
#[derive(Debug)]
pub struct ChainMatch {
    pub nodes: Vec<usize>,
    pub at: usize,
    pub op: GdnConvChain,
}

/// An accepted pair.
#[derive(Debug)]
pub struct PairMatch {
    pub nodes: Vec<usize>,
    pub at: usize,
    pub op: MulMatVecPair,
}

/// True when a view's elements are densely packed (so its byte span is exactly what it
/// writes).
fn dense(t: &Tensor) -> bool {
    let l = &t.layout;
    let mut dims: Vec<(usize, usize)> = (0..4).filter(|&d| l.ne[d] > 1).map(|d| (l.nb[d], l.ne[d])).collect();
    dims.sort_unstable();
    let mut span = t.dtype().size();
    for (nb, ne) in dims {
        if nb != span {
            return false;
        }
        span *= ne;
    }
    true
}

fn subtract(live: &mut Vec<Range<usize>>, cut: &Range<usize>) {
    let mut out = Vec::with_capacity(live.len() + 1);
    for r in live.drain(..) {
        if cut.end <= r.start || r.end <= cut.start {
            out.push(r);
            continue;
        }
        if r.start < cut.start {
            out.push(r.start..cut.start);
        }
        if cut.end < r.end {
            out.push(cut.end..r.end);
        }
    }
    *live = out;
}

fn covered(live: &[Range<usize>], r: &Range<usize>) -> bool {
    let mut rest = vec![r.clone()];
    for l in live {
        subtract(&mut rest, l);
    }
    rest.is_empty()
}

/// A node that reads bytes of a value while they still hold what node `from` wrote, and
/// whether every byte of the value it reads still holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Reader {
    node: usize,
    fully_live: bool,
}

/// Every reader of the bytes `value` that node `from` wrote, until all are overwritten. Only
/// dense writes count as overwriting (a strided view's span is conservative).
fn live_readers(nodes: &[Node], from: usize, value: &Access) -> Vec<Reader> {
    let mut live = vec![value.bytes.clone()];
    let mut readers = Vec::new();
    for (x, node) in nodes.iter().enumerate().skip(from + 1) {
        if live.is_empty() {
            break;
        }
        let mut reads_live = false;
        let mut fully = true;
        for r in node.reads() {
            if !r.overlaps(value) {
                continue;
            }
            let clipped = r.bytes.start.max(value.bytes.start)..r.bytes.end.min(value.bytes.end);
            if live.iter().any(|l| l.start < clipped.end && clipped.start < l.end) {
                reads_live = true;
                fully &= covered(&live, &clipped);
            }
        }
        if reads_live {
            readers.push(Reader { node: x, fully_live: fully });
        }
        for t in node.op.outputs() {
            if let Some(w) = Access::of(&t)
                && w.overlaps(value)
                && dense(&t)
            {
                subtract(&mut live, &w.bytes);
            }
        }
    }
    readers
}

/// The latest node before `before` that writes any byte of `t`.
fn writer_of(nodes: &[Node], before: usize, t: &Tensor) -> Option<usize> {
    let a = Access::of(t)?;
    (0..before).rev().find(|&i| nodes[i].writes().iter().any(|w| w.overlaps(&a)))
}

fn acc(t: &Tensor) -> Vec<Access> {
    Access::of(t).into_iter().collect()
}

/// Matches the conv chain of `layer` and checks every rule.
pub fn match_conv_chain(nodes: &[Node], layer: usize) -> Result<ChainMatch, Refusal> {
    use Refusal::*;
    let c = (0..nodes.len())
        .find(|&i| nodes[i].layer == Some(layer) && nodes[i].get::<ConcatDim0>().is_some())
        .ok_or(NoPattern("no CONCAT in the layer"))?;
    let concat = nodes[c].get::<ConcatDim0>().expect("found");
    let g = writer_of(nodes, c, &concat.a).ok_or(NoPattern("nothing writes the CONCAT's first source"))?;
    let gather = nodes[g].get::<GetRows>().ok_or(NoPattern("the CONCAT's first source is not a GET_ROWS output"))?;
    let sequences = gather.rows.layout.n_elements();
    if sequences != 1 || concat.dst.ne()[2] != 1 || concat.dst.ne()[3] != 1 {
        return Err(MultiSequence { sequences: sequences.max(concat.dst.ne()[2]) });
    }
    let state_len = concat.a.ne()[0];
    let channels = concat.a.ne()[1];
    let n_tokens = concat.b.ne()[0];
    if gather.dst.reshape([state_len, channels, 1, 1]) != Some(concat.a) {
        return Err(Layout("the CONCAT's first source is not the GET_ROWS output reshaped [d_conv−1, C]"));
    }
    let qkv = concat.b.transpose();
    if !qkv.layout.is_contiguous() || qkv.dtype() != DType::F32 {
        return Err(Layout("the projection is not a contiguous F32 [C, n_t]"));
    }
    let cache = gather.src;
    if cache.ne()[0] != state_len * channels || !dense(&cache.view([cache.ne()[0], 1, 1, 1], cache.layout.nb, 0)) {
        return Err(Layout("the conv cache rows are not contiguous (d_conv−1)·C floats"));
    }

    // Users of the GET_ROWS output: exactly the CONCAT.
    let g_users = live_readers(nodes, g, &Access::of(&gather.dst).ok_or(Layout("empty conv state"))?);
    if g_users != [Reader { node: c, fully_live: true }] {
        return Err(ConvStatesUsers { users: g_users.len() });
    }
    // Users of the CONCAT output: the copies and SSM_CONV.
    let conv_input = concat.dst;
    let c_users = live_readers(nodes, c, &Access::of(&conv_input).ok_or(Layout("empty conv input"))?);
    let copies: Vec<usize> = c_users.iter().map(|r| r.node).filter(|&x| nodes[x].get::<Cpy>().is_some()).collect();
    let convs: Vec<usize> = c_users.iter().map(|r| r.node).filter(|&x| nodes[x].get::<SsmConv>().is_some()).collect();
    if c_users.len() != copies.len() + 1 || convs.len() != 1 {
        return Err(ConcatUsers { users: c_users.len(), copies: copies.len() });
    }
    if let Some(r) = c_users.iter().find(|r| !r.fully_live) {
        return Err(ConcatOverwritten { node: r.node });
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
        let row_bytes = cache.layout.nb[1];
        let rel = cpy.dst.layout.offset.wrapping_sub(cache.layout.offset);
        let row = rel.checked_div(row_bytes).unwrap_or(usize::MAX);
        if cpy.dst.buffer != cache.buffer
            || cpy.dst.layout.offset < cache.layout.offset
            || row_bytes == 0
            || rel % row_bytes != 0
            || row >= cache.ne()[1]
            || cpy.dst != LayerTensors::cache_row(&cache, row)
        {
            return Err(CopyNotCacheRow { node: x });
        }
        if snapshots.iter().any(|s| s.row == row) {
            return Err(RowWrittenTwice { row });
        }
        snapshots.push(SnapshotWrite { row, offset });
    }
    // The L2 norms of the q and k heads of the SiLU output, read while it holds the conv's.
    let conv_out = conv.dst;
    let out_users = live_readers(nodes, conv_at, &Access::of(&conv_out).ok_or(Layout("empty conv output"))?);
    let l2s: Vec<(usize, &L2Norm)> =
        out_users.iter().filter(|r| r.fully_live).filter_map(|r| nodes[r.node].get::<L2Norm>().map(|l| (r.node, l))).collect();
    let head = |offset_heads: usize, l: &L2Norm| {
        let [d, hk, ..] = l.src.ne();
        let nb = conv_out.layout.nb;
        l.src == conv_out.view([d, hk, n_tokens, 1], [4, 4 * d, nb[1], nb[2]], 4 * offset_heads * hk * d)
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
    if snapshots.is_empty() || snapshots.len() > MAX_SNAPSHOT_ROWS {
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
    if !conv_out.layout.is_contiguous() || conv_out.ne() != [channels, n_tokens, 1, 1] {
        return Err(Layout("the SiLU output is not contiguous [C, n_t]"));
    }
    for t in [&q.dst, &k.dst] {
        if !t.layout.is_contiguous() || t.ne() != [head_dim, n_k_heads, n_tokens, 1] {
            return Err(Layout("an L2 output is not contiguous [D, H_k, n_t]"));
        }
    }
    if 2 * n_k_heads * head_dim > channels {
        return Err(Layout("the q and k heads exceed the channels"));
    }

    // The fused node's own reads and writes.
    let written: [(&'static str, &Tensor); 4] = [("conv_cache", &cache), ("conv_out", &conv_out), ("q_norm", &q.dst), ("k_norm", &k.dst)];
    let read: [(&'static str, &Tensor); 4] =
        [("qkv", &qkv), ("weight", &conv.weight), ("source_row", &gather.rows), ("conv_cache", &cache)];
    for (i, (wa, ta)) in written.iter().enumerate() {
        for (rb, tb) in read.iter().chain(&written[i + 1..]) {
            let allowed = (*wa == "conv_cache" && *rb == "conv_cache") || (*wa == "conv_out" && *rb == "qkv" && ta.same_elements(tb));
            if !allowed && ta.overlaps(tb) {
                return Err(FusedAliasing { a: wa, b: rb });
            }
        }
    }

    // Nodes in between the first and last fused node.
    let mut pattern: Vec<usize> = [g, c, conv_at, q_at, k_at].into_iter().chain(copies.iter().copied()).collect();
    pattern.sort_unstable();
    let (first, last) = (pattern[0], *pattern.last().expect("non-empty"));
    let early: Vec<Access> = [conv_out, q.dst, k.dst].iter().filter_map(Access::of).collect();
    let (cache_a, weight_a, ids_a) = (acc(&cache), acc(&conv.weight), acc(&gather.rows));
    for (x, node) in nodes.iter().enumerate().take(last).skip(first + 1) {
        if pattern.contains(&x) {
            continue;
        }
        let (r, w) = (node.reads(), node.writes());
        if any_overlap(&w, &cache_a) {
            return Err(BetweenWritesCache { node: x });
        }
        if any_overlap(&r, &cache_a) {
            return Err(BetweenReadsCache { node: x });
        }
        if any_overlap(&w, &weight_a) {
            return Err(BetweenWritesWeights { node: x });
        }
        if any_overlap(&w, &ids_a) {
            return Err(BetweenWritesIds { node: x });
        }
        if any_overlap(&r, &early) {
            return Err(BetweenReadsEarlyOutput { node: x });
        }
        if any_overlap(&w, &early) {
            return Err(BetweenWritesEarlyOutput { node: x });
        }
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
    };
    Ok(ChainMatch { nodes: pattern, at: c, op })
}

/// Matches the alpha/beta pair of `layer` and checks every rule.
pub fn match_pair(nodes: &[Node], layer: usize) -> Result<PairMatch, Refusal> {
    use Refusal::*;
    let mvs: Vec<usize> = (0..nodes.len()).filter(|&i| nodes[i].layer == Some(layer) && nodes[i].get::<MulMatVec>().is_some()).collect();
    let mv = |i: usize| nodes[i].get::<MulMatVec>().expect("a mat-vec");
    // One product per weight; a weight with several launches is a product wider than 8.
    let mut by_weight: Vec<(Tensor, Vec<usize>)> = Vec::new();
    for &i in &mvs {
        match by_weight.iter_mut().find(|(w, _)| *w == mv(i).weight) {
            Some((_, list)) => list.push(i),
            None => by_weight.push((mv(i).weight, vec![i])),
        }
    }
    if let Some((_, list)) = by_weight.iter().find(|(_, l)| l.len() > 1) {
        return Err(PairTooWide { ncols: list.iter().map(|&i| mv(i).input.ne()[1]).sum() });
    }
    let [a, b] = mvs[..] else {
        return Err(PairNotFound { mat_vecs: mvs.len() });
    };
    let (first, second) = (mv(a), mv(b));
    if !first.input.same_elements(&second.input) {
        return Err(PairMismatch("the two mat-vecs read different inputs"));
    }
    let ncols = first.input.ne()[1];
    if ncols > PAIR_MAX_COLS {
        return Err(PairTooWide { ncols });
    }
    if first.weight.dtype() != second.weight.dtype() || first.weight.ne() != second.weight.ne() || first.precision != second.precision {
        return Err(PairMismatch("weights of different type, shape or precision"));
    }
    let (d1, d2) = (acc(&first.dst), acc(&second.dst));
    let ops1: Vec<Access> = [first.weight, first.input].iter().filter_map(Access::of).collect();
    let ops2: Vec<Access> = [second.weight, second.input].iter().filter_map(Access::of).collect();
    if any_overlap(&d1, &d2) || any_overlap(&d1, &ops2) || any_overlap(&d2, &ops1) {
        return Err(PairAliasing);
    }
    for (x, node) in nodes.iter().enumerate().take(b).skip(a + 1) {
        if any_overlap(&node.writes(), &ops2) {
            return Err(PairBetweenWritesInput { node: x });
        }
        if any_overlap(&node.writes(), &d2) || any_overlap(&node.reads(), &d2) {
            return Err(PairBetweenTouchesOutput { node: x });
        }
    }
    Ok(PairMatch { nodes: vec![a, b], at: a, op: MulMatVecPair { first: first.clone(), second: second.clone() } })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Stage;
    use crate::tensor::{BufferId, Layout};

    fn t(buffer: usize, offset_floats: usize, n: usize) -> Tensor {
        let l = Layout::contiguous(DType::F32, [n, 1, 1, 1]);
        Tensor::new(BufferId(buffer), l.view(l.ne, l.nb, 4 * offset_floats))
    }

    fn stage(src: Tensor, dst: Tensor) -> Node {
        Node::new(Box::new(Stage { src, dst }), Some(0))
    }

    #[test]
    fn live_readers_stop_at_dense_overwrites_only() {
        // Node 0 writes floats 0..8 of buffer 0; node 1 reads 0..4; node 2 overwrites 0..4;
        // node 3 reads 0..8 (half stale); node 4 overwrites 4..8; node 5 reads 0..8 (dead).
        let nodes = [
            stage(t(1, 0, 8), t(0, 0, 8)),
            stage(t(0, 0, 4), t(2, 0, 4)),
            stage(t(3, 0, 4), t(0, 0, 4)),
            stage(t(0, 0, 8), t(4, 0, 8)),
            stage(t(3, 0, 4), t(0, 4, 4)),
            stage(t(0, 0, 8), t(5, 0, 8)),
        ];
        let value = Access::of(&t(0, 0, 8)).unwrap();
        assert_eq!(live_readers(&nodes, 0, &value), [Reader { node: 1, fully_live: true }, Reader { node: 3, fully_live: false }]);
        // A strided write does not count as overwriting (its span is conservative).
        let strided = Tensor::new(BufferId(0), Layout::contiguous(DType::F32, [4, 1, 1, 1]).view([4, 1, 1, 1], [8, 32, 32, 32], 0));
        assert!(!dense(&strided));
        assert!(dense(&t(0, 3, 5)));
    }

    #[test]
    fn range_arithmetic() {
        let mut live = vec![0..10, 20..30];
        subtract(&mut live, &(5..25));
        assert_eq!(live, vec![0..5, 25..30]);
        assert!(covered(&live, &(1..4)));
        assert!(!covered(&live, &(4..6)));
    }

    #[test]
    fn refusals_display_their_rule() {
        assert_eq!(Refusal::ConcatUsers { users: 6, copies: 4 }.to_string(), "the CONCAT has 6 users, not n_cpy + 1 = 5");
        assert_eq!(Outcome::Fused { replaced: 9, at: 3 }.to_string(), "fused (9 nodes → 1, at node 3)");
    }
}
