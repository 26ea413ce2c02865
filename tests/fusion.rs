//! CPU tests of the fusion pass (`rgdn::fusion`): fused graphs equal unfused ones on the CPU
//! reference; each structural rule and each rule of the legality check has a graph that breaks
//! only it and is refused with it; the reference PR's aliasing layout is accepted. The
//! differential fuzzer (`tests/fusion_fuzz.rs`) perturbs graphs at random.

use rgdn::fusion::sweep::{self, off_on_cpu};
use rgdn::fusion::{Hazard, Options, Outcome, REGISTRY, Refusal, compile, fuse, fusion, try_fusion};
use rgdn::graph::layer::{self, LayerLayout, LayerSpec, Outputs, StackSpec, ggml_layer_ops, window};
use rgdn::graph::{Access, Bound, ByteSet, Node, Stage};
use rgdn::layer::{GdnShape, LayerTensors, Step};
use rgdn::memory::HostMemory;
use rgdn::ops::{Cpy, GdnConvChain, L2Norm, MulMatVec, Op};
use rgdn::reference::math::ExactMufu;
use rgdn::tensor::{DType, Tensor};

/// C = (2·1 + 2)·32 = 128.
const TINY: GdnShape = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 32, d_conv: 4, eps: 1e-6 };

/// Every tensor of a layer in its own buffer, without the layer builder's validation (so scope
/// limits can be crossed).
fn tensors(mem: &mut HostMemory, s: &GdnShape, step: &Step) -> LayerTensors {
    let (c, n_t, e) = (s.channels(), step.n_tokens, s.n_embd);
    let (d, hk, hv, kc) = (s.head_dim, s.n_k_heads, s.n_v_heads, s.d_conv);
    let mut f = |ne| mem.alloc_tensor(DType::F32, ne);
    let t = LayerTensors {
        conv_cache: f([s.conv_row(), step.cache_rows(), 1, 1]),
        ssm_cache: f([s.ssm_row(), step.cache_rows(), 1, 1]),
        source_rows: Tensor::new(rgdn::tensor::BufferId(0), rgdn::tensor::Layout::contiguous(DType::I32, [1, 1, 1, 1])),
        qkv_mixed: f([c, n_t, 1, 1]),
        cur: f([e, n_t, 1, 1]),
        conv_weight: f([kc, c, 1, 1]),
        alpha_weight: f([e, hv, 1, 1]),
        beta_weight: f([e, hv, 1, 1]),
        dt_bias: f([hv, 1, 1, 1]),
        ssm_a: f([hv, 1, 1, 1]),
        conv_states: f([s.conv_row(), 1, 1, 1]),
        conv_input: f([kc - 1 + n_t, c, 1, 1]),
        conv_out: f([c, n_t, 1, 1]),
        q_norm: f([d, hk, n_t, 1]),
        k_norm: f([d, hk, n_t, 1]),
        ssm_state: f([s.ssm_row(), 1, 1, 1]),
        alpha: f([hv, n_t, 1, 1]),
        beta_raw: f([hv, n_t, 1, 1]),
        beta: f([hv, n_t, 1, 1]),
        alpha_biased: f([hv, n_t, 1, 1]),
        softplus: f([hv, n_t, 1, 1]),
        gate: f([hv, n_t, 1, 1]),
        attn_out: f([d, hv, n_t, 1]),
    };
    LayerTensors { source_rows: mem.alloc_indices(&[step.source_row() as i32]), ..t }
}

/// A one-layer graph (no GDN tail), every tensor in its own buffer: nodes in ggml's order
/// 0 GET_ROWS, 1 CONCAT, 2 … 1+K CPYs, 2+K SSM_CONV, 3+K L2 q, 4+K L2 k, 5+K GET_ROWS (ssm),
/// then the mat-vecs.
struct Case {
    mem: HostMemory,
    t: LayerTensors,
    nodes: Vec<Node>,
    k: usize,
}

fn case(shape: GdnShape, step: Step) -> Case {
    let mut mem = HostMemory::new();
    let t = tensors(&mut mem, &shape, &step);
    let spec = LayerSpec { gdn_tail: false, ..LayerSpec::new(shape, step) };
    let nodes = ggml_layer_ops(&t, &spec).unwrap().into_iter().map(|op| Node::new(op, Some(0))).collect();
    Case { mem, t, nodes, k: step.slots() }
}

fn base() -> Case {
    case(TINY, Step::new(4, 3))
}

impl Case {
    fn fresh(&mut self, like: &Tensor) -> Tensor {
        self.mem.alloc_tensor(like.dtype(), like.ne())
    }
    fn insert(&mut self, at: usize, op: impl Op + 'static) {
        self.nodes.insert(at, Node::new(Box::new(op), Some(0)));
    }
    fn replace(&mut self, at: usize, op: impl Op + 'static) {
        self.nodes[at] = Node::new(Box::new(op), Some(0));
    }
    /// What the caller observes: the caches, the products and the attention output.
    fn live_out(&self) -> ByteSet {
        let t = &self.t;
        ByteSet::of_all(
            &[t.conv_cache, t.ssm_cache, t.conv_out, t.q_norm, t.k_norm, t.alpha, t.beta_raw, t.beta, t.gate, t.attn_out],
            Bound::Over,
        )
    }
    fn try_(&self, name: &str) -> Result<(), Refusal> {
        try_fusion(&self.nodes, &self.live_out(), fusion(name).unwrap(), 0).map(|_| ())
    }
    fn chain(&self) -> Result<(), Refusal> {
        self.try_("conv_chain")
    }
    fn pair(&self) -> Result<(), Refusal> {
        self.try_("pair")
    }
    /// A reader of `t` (into a fresh buffer).
    fn reader(&mut self, t: Tensor) -> Stage {
        let dst = self.fresh(&t);
        Stage { src: t, dst }
    }
    /// A writer of `t` (from a fresh buffer).
    fn writer(&mut self, t: Tensor) -> Stage {
        let src = self.fresh(&t);
        Stage { src, dst: t }
    }
}

#[test]
fn the_base_graphs_fuse() {
    let c = base();
    assert_eq!(c.chain(), Ok(()));
    assert_eq!(c.pair(), Ok(()));
    let live_out = c.live_out();
    let (nodes, report) = compile(c.nodes, &live_out, Options::ALL);
    assert_eq!((report.fired("conv_chain"), report.fired("pair")), (1, 1));
    let names: Vec<_> = nodes.iter().map(|n| n.op.name()).collect();
    assert_eq!(names, ["GDN_CONV_CHAIN", "GET_ROWS", "MUL_MAT_VEC_PAIR_GATE"]);
    // Off: the snapshot batching pass still runs, nothing else changes.
    let (nodes, report) = compile(base().nodes, &live_out, Options::OFF);
    assert_eq!(report.layers[0].outcome("conv_chain"), Some(&Outcome::Refused(Refusal::Off)));
    assert_eq!(nodes.iter().filter(|n| n.op.name() == "CPY_SNAPSHOTS").count(), 1);
    // One fusion alone.
    let (_, report) = compile(base().nodes, &live_out, Options::only(&["pair"]).unwrap());
    assert_eq!((report.fired("conv_chain"), report.fired("pair")), (0, 1));
}

#[test]
fn the_fused_node_sits_at_the_concat_and_takes_its_rows_from_the_copies() {
    let step = Step { cells: 2, kv_head: 1, src_cell: 0, rollback_depth: 1, ..Step::new(5, 6) };
    let c = case(TINY, step);
    let (m, _) = try_fusion(&c.nodes, &c.live_out(), fusion("conv_chain").unwrap(), 0).unwrap();
    assert_eq!(m.at, 1);
    assert_eq!(m.eliminated, [0, 1]);
    let op = m.fused.as_ref().downcast_ref::<GdnConvChain>().unwrap();
    let rows: Vec<(usize, usize)> = op.snapshots.iter().map(|s| (s.row, s.offset)).collect();
    // Built slot K−1 first: slot j gets window(max(0, n_t − j)) into row j·M + kv_head.
    let want: Vec<(usize, usize)> = (0..7).rev().map(|j| (j * 2 + 1, 5usize.saturating_sub(j))).collect();
    assert_eq!(rows, want);
    assert_eq!((op.head_dim, op.n_k_heads), (32, 1));
}

/// Each rule: a graph that breaks only it is refused with it.
#[test]
fn every_rule_refuses_the_graph_that_breaks_it() {
    use Refusal::*;
    // Scope.
    // (n_t > 16, TooManyTokens, is out of the builder's range: `Step::validate` refuses it.)
    assert_eq!(case(TINY, Step::new(4, 16)).chain(), Err(SnapshotRows { rows: 17 }));
    assert_eq!(case(GdnShape { d_conv: 9, ..TINY }, Step::new(4, 3)).chain(), Err(ConvWidth { d_conv: 9 }));
    assert_eq!(case(GdnShape { head_dim: 16, ..TINY }, Step::new(4, 3)).chain(), Err(HeadDim { head_dim: 16 }));
    assert_eq!(case(GdnShape { head_dim: 256, ..TINY }, Step::new(4, 3)).chain(), Err(HeadDim { head_dim: 256 }));
    assert_eq!(case(GdnShape { head_dim: 96, n_v_heads: 6, ..TINY }, Step::new(4, 3)).chain(), Err(HeadDim { head_dim: 96 }));
    assert_eq!(case(GdnShape { n_v_heads: 1, ..TINY }, Step::new(4, 3)).chain(), Err(Channels { channels: 96 }));
    let mut c = base();
    let g = c.nodes[0].get::<rgdn::ops::GetRows>().unwrap().clone();
    let two = c.mem.alloc_indices(&[0, 1]);
    c.replace(0, rgdn::ops::GetRows { rows: two, ..g });
    // [seq-batch] Two source rows for a one-sequence concat: the rows and the sequences disagree.
    assert_eq!(c.chain(), Err(Layout("the CONCAT's sequences are not the GET_ROWS' source rows")));
    // Layout: an L2 output with padded rows.
    let mut c = base();
    let q = c.nodes[3 + c.k].get::<L2Norm>().unwrap().clone();
    let wide = c.mem.alloc_tensor(DType::F32, [64, 1, 4, 1]);
    c.replace(3 + c.k, L2Norm { dst: wide.view([32, 1, 4, 1], [4, 128, 256, 1024], 0), ..q });
    assert_eq!(c.chain(), Err(Layout("an L2 output is not contiguous [D, H_k, n_t, n_s]")));
    // The GET_ROWS output has another user.
    let mut c = base();
    let r = c.reader(c.t.conv_states);
    c.insert(1, r);
    assert_eq!(c.chain(), Err(ConvStatesUsers { users: 2 }));
    // The CONCAT has another user (after the chain: nothing else is in the way).
    let mut c = base();
    let r = c.reader(c.t.conv_input);
    c.insert(5 + c.k, r);
    assert_eq!(c.chain(), Err(ConcatUsers { users: c.k + 2, copies: c.k }));
    // … or a node overwrites it while SSM_CONV still reads it (the legality check: it cannot
    // trade places with SSM_CONV).
    let mut c = base();
    let row = c.t.conv_input.view([7, 1, 1, 1], c.t.conv_input.layout.nb, 7 * 4 * 5);
    let w = c.writer(row);
    c.insert(2 + c.k, w);
    assert_eq!(c.chain(), Err(Reorder { node: 2 + c.k, pattern_node: 3 + c.k, hazard: Hazard::WritesPatternInput }));
    // A copy that is not a window of the concat at 0 … n_t.
    let mut c = base();
    let cpy = c.nodes[2].get::<Cpy>().unwrap().clone();
    c.replace(2, Cpy { src: window(&c.t.conv_input, 3, 5), ..cpy.clone() });
    assert_eq!(c.chain(), Err(CopyNotWindow { node: 2 }));
    c.replace(2, Cpy { src: c.t.conv_input.view([3, 128, 1, 1], [4, 32, 32 * 128, 32 * 128], 4), ..cpy });
    assert_eq!(c.chain(), Err(CopyNotWindow { node: 2 }));
    // A copy into something that is not one whole cache row.
    let mut c = base();
    let cpy = c.nodes[2].get::<Cpy>().unwrap().clone();
    let other = c.fresh(&cpy.dst);
    c.replace(2, Cpy { dst: other, ..cpy.clone() });
    assert_eq!(c.chain(), Err(CopyNotCacheRow { node: 2 }));
    c.replace(2, Cpy { dst: cpy.dst.view(cpy.dst.ne(), cpy.dst.layout.nb, 4), ..cpy });
    assert_eq!(c.chain(), Err(CopyNotCacheRow { node: 2 }));
    // A row written twice.
    let mut c = base();
    let (a, b) = (c.nodes[2].get::<Cpy>().unwrap().clone(), c.nodes[3].get::<Cpy>().unwrap().clone());
    c.replace(2, Cpy { dst: b.dst, ..a });
    assert_eq!(c.chain(), Err(RowWrittenTwice { row: 2 }));
    // No L2 of the k heads.
    let mut c = base();
    let k = c.nodes[4 + c.k].get::<L2Norm>().unwrap().clone();
    c.replace(4 + c.k, L2Norm { src: c.t.head_view(&TINY, 2), ..k });
    assert_eq!(c.chain(), Err(L2NotFound));
    // Nodes in between (inserted between SSM_CONV and L2 q, node 3 + K): the legality check.
    let mid = |c: &Case| 3 + c.k;
    let mut c = base();
    let w = c.writer(c.t.k_norm);
    c.insert(mid(&c), w);
    assert_eq!(c.chain(), Err(Reorder { node: mid(&c), pattern_node: mid(&c) + 2, hazard: Hazard::BothWrite }));
    // A whole overwrite of the SiLU output leaves the L2 norms nothing of SSM_CONV's to read
    // (structure); one element written is a hazard for the L2 norm it trades places with.
    let mut c = base();
    let w = c.writer(c.t.conv_out);
    c.insert(mid(&c), w);
    assert_eq!(c.chain(), Err(L2NotFound));
    let mut c = base();
    let w = c.writer(c.t.conv_out.view([1, 1, 1, 1], [4, 4, 4, 4], 0));
    c.insert(mid(&c), w);
    assert_eq!(c.chain(), Err(Reorder { node: mid(&c), pattern_node: mid(&c) + 1, hazard: Hazard::WritesPatternInput }));
    let mut c = base();
    let w = c.writer(c.t.source_rows);
    c.insert(1, w);
    assert_eq!(c.chain(), Err(Reorder { node: 1, pattern_node: 0, hazard: Hazard::WritesPatternInput }));
    let mut c = base();
    let r = c.reader(c.t.conv_states);
    c.insert(2, r);
    assert_eq!(c.chain(), Err(ConvStatesUsers { users: 2 }));
    // The fused node's own outputs over its inputs: q_norm on the projection.
    let mut c = base();
    let q = c.nodes[3 + c.k].get::<L2Norm>().unwrap().clone();
    let on_qkv = c.t.qkv_mixed.view(q.dst.ne(), q.dst.layout.nb, 0);
    c.replace(3 + c.k, L2Norm { dst: on_qkv, ..q });
    assert_eq!(c.chain(), Err(FusedOverlap));
    // The conv weight on the CONCAT output's bytes: the fused node would read a value only the
    // eliminated CONCAT writes (hole 3 of issue 12).
    let mut c = base();
    let conv = c.nodes[2 + c.k].get::<rgdn::ops::SsmConv>().unwrap().clone();
    let on_concat = Tensor::new(c.t.conv_input.buffer, conv.weight.layout);
    c.replace(2 + c.k, rgdn::ops::SsmConv { weight: on_concat, ..conv });
    assert!(matches!(c.chain(), Err(FusedReadsInternal { producer: 1, .. })), "{:?}", c.chain());
    // A strided write into the live CONCAT output after the chain, read later: the CONCAT
    // output is stale in the fused graph (hole 1 of issue 12) — its reader is counted.
    let mut c = base();
    let strided = c.t.conv_input.view([2, 1, 1, 1], [8, 8, 8, 8], 0);
    let w = c.writer(strided);
    c.insert(5 + c.k, w);
    let r = c.reader(c.t.conv_input);
    c.insert(6 + c.k, r);
    assert!(matches!(c.chain(), Err(ConcatUsers { .. })), "{:?}", c.chain());
    // The CONCAT output observed after the run.
    let c = base();
    let mut live_out = c.live_out();
    live_out.union_with(&ByteSet::of(&c.t.conv_input, Bound::Over));
    assert_eq!(try_fusion(&c.nodes, &live_out, fusion("conv_chain").unwrap(), 0).map(|_| ()).unwrap_err(), EliminatedLive);

    // The pair.
    // [seq-batch] The pair takes up to 16 tokens of 256 sequences; 17 tokens of 241 is one column more.
    assert_eq!(case(TINY, Step::new(17, 0)).pair(), Ok(()));
    assert_eq!(case(TINY, Step::new(17, 0)).chain(), Err(TooManyTokens { n_tokens: 17 }));
    assert_eq!(case(TINY, Step::new(12, 0)).chain(), Ok(()));
    let mut c = base();
    let mv = 6 + c.k;
    // Two one-launch products of one more column than the pair kernel takes (the builder
    // stops at fewer: a hand-made graph).
    let too_many = rgdn::kernels::abi::MUL_MAT_VEC_PAIR_MAX_COLS + 1;
    let (alpha, beta) = (c.nodes[mv].get::<MulMatVec>().unwrap().clone(), c.nodes[mv + 1].get::<MulMatVec>().unwrap().clone());
    let input = c.mem.alloc_tensor(alpha.input.dtype(), [alpha.input.ne()[0], too_many, 1, 1]);
    let (a_dst, b_dst) = (
        c.mem.alloc_tensor(DType::F32, [alpha.dst.ne()[0], too_many, 1, 1]),
        c.mem.alloc_tensor(DType::F32, [beta.dst.ne()[0], too_many, 1, 1]),
    );
    c.replace(mv, MulMatVec { input, dst: a_dst, ..alpha });
    c.replace(mv + 1, MulMatVec { input, dst: b_dst, ..beta });
    assert_eq!(c.pair(), Err(PairTooWide { ncols: too_many }));
    let mut c = base();
    c.nodes.remove(mv + 1);
    assert_eq!(c.pair(), Err(PairNotFound { mat_vecs: 1 }));
    let mut c = base();
    let beta = c.nodes[mv + 1].get::<MulMatVec>().unwrap().clone();
    let other = c.fresh(&beta.input);
    c.replace(mv + 1, MulMatVec { input: other, ..beta.clone() });
    assert_eq!(c.pair(), Err(PairMismatch("the two mat-vecs read different inputs")));
    let mut c = base();
    c.replace(mv + 1, MulMatVec { precision: rgdn::ops::Precision::F32, ..beta.clone() });
    assert_eq!(c.pair(), Err(PairMismatch("weights of different type, shape or precision")));
    let mut c = base();
    let alpha_dst = c.nodes[mv].get::<MulMatVec>().unwrap().dst;
    c.replace(mv + 1, MulMatVec { dst: alpha_dst, ..beta.clone() });
    assert_eq!(c.pair(), Err(FusedOverlap));
    let mut c = base();
    let w = c.writer(c.t.cur);
    c.insert(mv + 1, w);
    assert_eq!(c.pair(), Err(Reorder { node: mv + 1, pattern_node: mv + 2, hazard: Hazard::WritesPatternInput }));
    let mut c = base();
    let r = c.reader(c.t.beta_raw);
    c.insert(mv + 1, r);
    assert_eq!(c.pair(), Err(Reorder { node: mv + 1, pattern_node: mv + 2, hazard: Hazard::ReadsPatternOutput }));
}

/// [wide-pair] Over 8 columns the builder splits each product into launches of ≤ 8 columns (ggml's
/// split); the pair takes them whole exactly when the slices tile one input and one dst.
#[test]
fn split_products_pair_only_when_their_slices_tile() {
    use Refusal::*;
    let wide = || case(TINY, Step::new(12, 0));
    let c = wide();
    let mv = 6 + c.k;
    let slices: Vec<MulMatVec> = (mv..mv + 4).map(|i| c.nodes[i].get::<MulMatVec>().unwrap().clone()).collect();
    // alpha 0..8, alpha 8..12, beta 0..8, beta 8..12.
    assert_eq!(slices.iter().map(|m| m.input.ne()[1]).collect::<Vec<_>>(), [8, 4, 8, 4]);
    assert_eq!(c.pair(), Ok(()));
    let (m, _) = try_fusion(&c.nodes, &c.live_out(), fusion("pair").unwrap(), 0).unwrap();
    assert_eq!((m.nodes.clone(), m.at), ((mv..mv + 4).collect::<Vec<_>>(), mv));
    let pair = m.fused.as_ref().downcast_ref::<rgdn::ops::MulMatVecPair>().unwrap();
    assert_eq!((pair.first.input, pair.first.dst, pair.second.dst), (c.t.cur, c.t.alpha, c.t.beta_raw));
    // Another split of the same columns (beta as 4 + 8) pairs too: each column's arithmetic is
    // its own.
    let mut c = wide();
    let b = &slices[2];
    let col = |t: &Tensor, first: usize, n: usize| t.view([t.ne()[0], n, 1, 1], t.layout.nb, first * t.layout.nb[1]);
    c.replace(mv + 2, MulMatVec { input: col(&c.t.cur, 0, 4), dst: col(&c.t.beta_raw, 0, 4), ..b.clone() });
    c.replace(mv + 3, MulMatVec { input: col(&c.t.cur, 4, 8), dst: col(&c.t.beta_raw, 4, 8), ..b.clone() });
    assert_eq!(c.pair(), Ok(()));
    // The slices in the other order.
    let mut c = wide();
    c.nodes.swap(mv, mv + 1);
    assert!(matches!(c.pair(), Err(PairSlices(w)) if w.contains("do not follow")), "{:?}", c.pair());
    // A gap: the second alpha launch one column further on (columns 9..12 of the input).
    let a = &slices[1];
    let mut c = wide();
    c.replace(mv + 1, MulMatVec { input: col(&c.t.cur, 9, 3), dst: col(&c.t.alpha, 9, 3), ..a.clone() });
    assert!(matches!(c.pair(), Err(PairSlices(w)) if w.contains("do not follow")), "{:?}", c.pair());
    // An overlap: the second alpha launch from column 7.
    let mut c = wide();
    c.replace(mv + 1, MulMatVec { input: col(&c.t.cur, 7, 4), dst: col(&c.t.alpha, 7, 4), ..a.clone() });
    assert!(matches!(c.pair(), Err(PairSlices(w)) if w.contains("do not follow")), "{:?}", c.pair());
    // Only the dst slice shifted (the input tiles).
    let mut c = wide();
    c.replace(mv + 1, MulMatVec { dst: col(&c.t.alpha, 7, 4), ..a.clone() });
    assert!(matches!(c.pair(), Err(PairSlices(w)) if w.contains("do not follow")), "{:?}", c.pair());
    // Another input buffer for one slice.
    let mut c = wide();
    let cur = c.t.cur;
    let other = c.fresh(&cur);
    c.replace(mv + 1, MulMatVec { input: col(&other, 8, 4), ..a.clone() });
    assert!(matches!(c.pair(), Err(PairSlices(w)) if w.contains("buffer")), "{:?}", c.pair());
    // Input and dst slices of different widths.
    let mut c = wide();
    c.replace(mv + 1, MulMatVec { dst: col(&c.t.alpha, 8, 3), ..a.clone() });
    assert!(matches!(c.pair(), Err(PairSlices(w)) if w.contains("differ in columns")), "{:?}", c.pair());
    // A launch of another precision.
    let mut c = wide();
    c.replace(mv + 1, MulMatVec { precision: rgdn::ops::Precision::F32, ..a.clone() });
    assert!(matches!(c.pair(), Err(PairSlices(w)) if w.contains("precision")), "{:?}", c.pair());
    // A launch short of the last column: the tiles stop at 11 for alpha, 12 for beta.
    let mut c = wide();
    c.replace(mv + 1, MulMatVec { input: col(&c.t.cur, 8, 3), dst: col(&c.t.alpha, 8, 3), ..a.clone() });
    assert_eq!(c.pair(), Err(PairMismatch("the two mat-vecs read different inputs")));
    // A third launch of alpha repeating columns 8..12 (written twice).
    let mut c = wide();
    c.insert(mv + 2, a.clone());
    assert!(matches!(c.pair(), Err(PairSlices(w)) if w.contains("do not follow")), "{:?}", c.pair());
    // A slice of a strided view of the input (another column stride).
    let mut c = wide();
    let strided = a.input.view([64, 2, 1, 1], [4, 2 * a.input.layout.nb[1], 0, 0], 0);
    c.replace(mv + 1, MulMatVec { input: strided, dst: col(&c.t.alpha, 8, 2), ..a.clone() });
    assert!(matches!(c.pair(), Err(PairSlices(w)) if w.contains("strides")), "{:?}", c.pair());
}

#[test]
fn nodes_in_between_that_break_no_rule_are_fine() {
    // Reads and writes of unrelated buffers, reads of the ids and weights, writes of the
    // (dead) projection and of the weights, reads of the SiLU output and of the cache, between
    // the conv and the L2 norms: none of them trades places with anything it conflicts with
    // (the PR's rules refused several of these).
    let mut c = base();
    let at = 3 + c.k;
    let row = LayerTensors::cache_row(&c.t.conv_cache, 0);
    let ops: Vec<Stage> = vec![
        c.reader(c.t.source_rows),
        c.reader(c.t.conv_weight),
        c.writer(c.t.qkv_mixed),
        c.reader(c.t.cur),
        c.reader(c.t.conv_out),
        c.writer(c.t.conv_weight),
        c.reader(row),
        c.writer(row),
    ];
    for op in ops {
        c.insert(at, op);
    }
    assert_eq!(c.chain(), Ok(()));
}

/// ggml's allocator puts beta (SIGMOID's output) on the block of the layer input `cur`, dead
/// after the mat-vecs; the fused pair-with-gate would read `cur` while writing beta, which its
/// kernel cannot do: the check refuses, and fusion-aware planning avoids it.
#[test]
fn ggml_planning_can_defeat_a_fusion_and_fusion_aware_planning_does_not() {
    let spec = StackSpec { layers: vec![LayerSpec::new(TINY, Step::new(1, 0))], outputs: Outputs::Products };
    let b = layer::build(&spec, 1).unwrap();
    let (_, report) = fuse(b.fresh_nodes().unwrap(), &b.live_out(), Options::ALL);
    assert_eq!(report.layers[0].outcome("gate_pair"), Some(&Outcome::Refused(Refusal::FusedOverlap)), "{report}");
    let (cur, beta) = (b.value("L0.cur").unwrap(), b.value("L0.beta").unwrap());
    assert!(b.plan.shares_bytes(cur, beta));
    let b = sweep::build(&spec, 1, sweep::Planning::FusionAware).unwrap();
    assert!(!b.plan.shares_bytes(cur, beta));
    let (_, report) = fuse(b.fresh_nodes().unwrap(), &b.live_out(), Options::ALL);
    assert!(REGISTRY.iter().all(|f| report.fired(f.name) == usize::from((f.fires_on)(&spec.layers[0]))), "{report}");
    // Both plans run both graphs to the same bytes.
    for planning in [sweep::Planning::Ggml, sweep::Planning::FusionAware] {
        let r = sweep::off_on_cpu_planned(&spec, 1, &mut ExactMufu, planning).unwrap();
        assert!(r.identical(), "{planning:?}: {:?}", r.mismatches);
    }
}

#[test]
fn the_reference_prs_aliasing_layout_is_accepted() {
    let spec = sweep::case_spec(&sweep::shapes()[0], 4, 3, LayerLayout::PrAliasing);
    let b = layer::build(&spec, 3).unwrap();
    // The ssm-state GET_ROWS sits between the first and last node of the chain and writes into
    // the bytes the chain reads as the projection (the older check refused this).
    let (m, _) = try_fusion(&b.fresh_nodes().unwrap(), &b.live_out(), fusion("conv_chain").unwrap(), 0).unwrap();
    let (first, last) = (m.nodes[0], *m.nodes.last().unwrap());
    let qkv = Access::of(&b.layers[0].t.qkv_mixed).unwrap();
    let between: Vec<usize> = (first + 1..last).filter(|x| !m.nodes.contains(x)).collect();
    let nodes = b.fresh_nodes().unwrap();
    assert!(between.iter().any(|&x| nodes[x].op.name() == "GET_ROWS" && nodes[x].writes().iter().any(|w| w.overlaps(&qkv))));
    // And the fused graph equals the unfused one on the CPU reference.
    let r = off_on_cpu(&spec, 3, &mut ExactMufu).unwrap();
    assert!(r.identical(), "{:?}", r.mismatches);
    assert_eq!(sweep::check_case(&spec, &r).map(|_| ()), Ok(()), "{}", r.report);
}

/// Fusion off vs on on the CPU reference (same MUFU on both sides): a slice of the sweep on
/// both layouts (the GPU runs all of it), and a small 3-layer stack.
#[test]
fn fused_graphs_equal_unfused_ones_on_the_cpu() {
    let shapes = sweep::shapes();
    for layout in [LayerLayout::Ggml, LayerLayout::PrAliasing] {
        for (s, n_t, r) in [(0, 1, 0), (0, 16, 15), (1, 5, 7), (1, 9, 2), (2, 3, 3), (3, 8, 7), (4, 2, 0), (4, 13, 3)] {
            let spec = sweep::case_spec(&shapes[s], n_t, r, layout);
            let out = off_on_cpu(&spec, (s * 100 + n_t) as u64, &mut ExactMufu).unwrap();
            let verdict = sweep_check_without_launches(&spec, &out);
            assert!(verdict.is_ok(), "{layout:?} shape {s} n_t {n_t} R {r}: {verdict:?}\n{}", out.report);
        }
    }
    let stack = StackSpec {
        layers: (0..3)
            .map(|l| LayerSpec {
                layout: if l == 1 { LayerLayout::PrAliasing } else { LayerLayout::Ggml },
                ..LayerSpec::new(TINY, Step::new(4, 3))
            })
            .collect(),
        outputs: Outputs::Forward,
    };
    let out = off_on_cpu(&stack, 9, &mut ExactMufu).unwrap();
    assert!(out.identical(), "{:?}", out.mismatches);
    assert_eq!(sweep::check_case(&stack, &out).map(|_| ()), Ok(()), "{}", out.report);
}

fn sweep_check_without_launches(spec: &StackSpec, r: &sweep::OffOn) -> Result<(), String> {
    sweep::check_case(spec, r).map(|_| ())
}

#[test]
fn every_fusion_fires_where_the_registry_says() {
    // Unperturbed graphs: each fusion fires exactly where its `fires_on` says.
    for n_t in 1..=16 {
        for r in 0..=4 {
            let spec = StackSpec { layers: vec![LayerSpec::new(TINY, Step::new(n_t, r))], outputs: Outputs::Products };
            let b = sweep::build(&spec, 1, sweep::Planning::FusionAware).unwrap();
            let (_, report) = fuse(b.fresh_nodes().unwrap(), &b.live_out(), Options::ALL);
            for f in REGISTRY {
                assert_eq!(report.fired(f.name), usize::from((f.fires_on)(&spec.layers[0])), "n_t {n_t} R {r}: {report}");
            }
        }
    }
}

/// The whole sweep (800 cases: both layouts) off vs on on the CPU reference, and a whole
/// 24-layer 9B verify forward: ~25 s here, so run on demand (`cargo test --test fusion -- --ignored`).
#[test]
#[ignore]
fn the_whole_sweep_and_a_9b_forward_on_the_cpu() {
    for (i, (name, spec)) in sweep::cases().iter().enumerate() {
        let r = off_on_cpu(spec, i as u64, &mut ExactMufu).unwrap();
        assert_eq!(sweep_check_without_launches(spec, &r), Ok(()), "{name}");
    }
    let r = off_on_cpu(&sweep::forward_spec(GdnShape::QWEN35_9B, 24, 4, 3), 2, &mut ExactMufu).unwrap();
    assert!(r.identical(), "{:?}", r.mismatches);
    assert!(REGISTRY.iter().all(|f| r.report.fired(f.name) == 24), "{}", r.report);
    assert_eq!(sweep::check_case(&sweep::forward_spec(GdnShape::QWEN35_9B, 24, 4, 3), &r).map(|_| ()), Ok(()));
}

/// [hardening] An L2_NORM reading the SiLU output through a view whose head offsets overflow
/// (ne [2^62, 1, 1, 1], zero strides: `4·D` does not fit) is no conv chain — a named refusal
/// of the matcher, never a panic (the release profile checks overflow).
#[test]
fn an_l2_norm_whose_head_offsets_overflow_is_refused_not_a_panic() {
    let mut c = base();
    let q_at = c.k + 3;
    let l2 = c.nodes[q_at].get::<L2Norm>().expect("node 3+K is the q L2_NORM").clone();
    c.replace(q_at, L2Norm { src: l2.src.view([1 << 62, 1, 1, 1], [0; 4], 0), ..l2 });
    let live_out = c.live_out();
    let (_, report) = compile(c.nodes, &live_out, Options::ALL);
    assert_eq!(report.layers[0].outcome("conv_chain"), Some(&Outcome::Refused(Refusal::L2NotFound)), "{report}");
}

/// [hardening] The byte sets of a valid CPY_SNAPSHOTS with 65,535 (slot, sequence) rows — one
/// view per row in its `must_write` — are built in n log n: the whole pass takes well under a
/// second (it took 4–9 s when every view re-sorted the runs so far).
#[test]
fn a_65535_row_snapshot_copy_compiles_in_well_under_a_second() {
    let mut mem = HostMemory::new();
    let (d_conv, n_seqs) = (2, 65_535);
    let conv_input = mem.alloc_tensor(DType::F32, [d_conv, 1, n_seqs, 1]);
    // Rows 8 bytes apart, 4 written: one byte run per row (adjacent rows would merge).
    let padded = mem.alloc_tensor(DType::F32, [2 * (d_conv - 1), n_seqs, 1, 1]);
    let cache = padded.view([d_conv - 1, n_seqs, 1, 1], [4, 8, 8 * n_seqs, 8 * n_seqs], 0);
    let op = rgdn::ops::CpySnapshots { conv_input, cache, d_conv, first_row: 0, group_stride: n_seqs, n_slots: 1 };
    op.validate(&mem).expect("a valid CPY_SNAPSHOTS");
    assert_eq!(op.must_write().len(), n_seqs);
    let started = std::time::Instant::now();
    let (nodes, _) = compile(vec![Node::new(Box::new(op), Some(0))], &ByteSet::of(&cache, Bound::Over), Options::ALL);
    let took = started.elapsed();
    assert_eq!(nodes.len(), 1);
    assert!(took < std::time::Duration::from_millis(500), "compile took {took:?}");
}
