//! CPU tests of the GDN fusion pass (`rgdn::fusion`): fused graphs equal unfused ones on the
//! CPU reference; each matcher rule has a graph that breaks only it and is refused with it; the
//! reference PR's aliasing layout is accepted; a property test perturbs valid graphs at random
//! and never gets a graph accepted whose fused run differs from its unfused run.

use proptest::prelude::*;
use rgdn::fusion::sweep::{self, off_on_cpu};
use rgdn::fusion::{Options, Outcome, Refusal, compile, fuse, match_conv_chain, match_pair};
use rgdn::graph::layer::{self, LayerLayout, LayerSpec, Outputs, StackSpec, ggml_layer_ops, window};
use rgdn::graph::{Access, Node, Stage, exec};
use rgdn::layer::{GdnShape, LayerTensors, Step};
use rgdn::memory::HostMemory;
use rgdn::ops::{Cpy, L2Norm, MulMatVec, Op};
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
    fn chain(&self) -> Result<(), Refusal> {
        match_conv_chain(&self.nodes, 0).map(|_| ())
    }
    fn pair(&self) -> Result<(), Refusal> {
        match_pair(&self.nodes, 0).map(|_| ())
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
    let (nodes, report) = compile(c.nodes, Options::ON);
    assert_eq!(report.fused_counts(), (1, 1));
    let names: Vec<_> = nodes.iter().map(|n| n.op.name()).collect();
    assert_eq!(names, ["GDN_CONV_CHAIN", "GET_ROWS", "MUL_MAT_VEC_PAIR", "SIGMOID", "ADD", "SOFTPLUS", "MUL"]);
    // Off: the snapshot batching pass still runs, nothing else changes.
    let (nodes, report) = compile(base().nodes, Options::OFF);
    assert_eq!(report.layers[0].conv_chain, Outcome::Refused(Refusal::Off));
    assert_eq!(nodes.iter().filter(|n| n.op.name() == "CPY_SNAPSHOTS").count(), 1);
    assert_eq!(Options::from_env(), if std::env::var("RGDN_GDN_FUSION").as_deref() == Ok("1") { Options::ON } else { Options::OFF });
}

#[test]
fn the_fused_node_sits_at_the_concat_and_takes_its_rows_from_the_copies() {
    let step = Step { cells: 2, kv_head: 1, src_cell: 0, rollback_depth: 1, ..Step::new(5, 6) };
    let c = case(TINY, step);
    let m = match_conv_chain(&c.nodes, 0).unwrap();
    assert_eq!(m.at, 1);
    let rows: Vec<(usize, usize)> = m.op.snapshots.iter().map(|s| (s.row, s.offset)).collect();
    // Built slot K−1 first: slot j gets window(max(0, n_t − j)) into row j·M + kv_head.
    let want: Vec<(usize, usize)> = (0..7).rev().map(|j| (j * 2 + 1, 5usize.saturating_sub(j))).collect();
    assert_eq!(rows, want);
    assert_eq!((m.op.head_dim, m.op.n_k_heads), (32, 1));
}

/// Each rule: a graph that breaks only it is refused with it.
#[test]
fn every_rule_refuses_the_graph_that_breaks_it() {
    use Refusal::*;
    // Scope.
    assert_eq!(case(TINY, Step::new(17, 0)).chain(), Err(TooManyTokens { n_tokens: 17 }));
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
    assert_eq!(c.chain(), Err(MultiSequence { sequences: 2 }));
    // Layout: an L2 output with padded rows.
    let mut c = base();
    let q = c.nodes[3 + c.k].get::<L2Norm>().unwrap().clone();
    let wide = c.mem.alloc_tensor(DType::F32, [64, 1, 4, 1]);
    c.replace(3 + c.k, L2Norm { dst: wide.view([32, 1, 4, 1], [4, 128, 256, 1024], 0), ..q });
    assert_eq!(c.chain(), Err(Layout("an L2 output is not contiguous [D, H_k, n_t]")));
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
    // … or a node overwrites it while SSM_CONV still reads it.
    let mut c = base();
    let row = c.t.conv_input.view([7, 1, 1, 1], c.t.conv_input.layout.nb, 7 * 4 * 5);
    let w = c.writer(row);
    c.insert(2 + c.k, w);
    assert_eq!(c.chain(), Err(ConcatOverwritten { node: 3 + c.k }));
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
    // Nodes in between (inserted between SSM_CONV and L2 q, node 3 + K).
    let mid = |c: &Case| 3 + c.k;
    let mut c = base();
    let r = c.reader(c.t.conv_out);
    c.insert(mid(&c), r);
    assert_eq!(c.chain(), Err(BetweenReadsEarlyOutput { node: mid(&c) }));
    let mut c = base();
    let w = c.writer(c.t.k_norm);
    c.insert(mid(&c), w);
    assert_eq!(c.chain(), Err(BetweenWritesEarlyOutput { node: mid(&c) }));
    let mut c = base();
    let row = LayerTensors::cache_row(&c.t.conv_cache, 0);
    let w = c.writer(row);
    c.insert(mid(&c), w);
    assert_eq!(c.chain(), Err(BetweenWritesCache { node: mid(&c) }));
    let mut c = base();
    let r = c.reader(row);
    c.insert(mid(&c), r);
    assert_eq!(c.chain(), Err(BetweenReadsCache { node: mid(&c) }));
    let mut c = base();
    let w = c.writer(c.t.conv_weight);
    c.insert(mid(&c), w);
    assert_eq!(c.chain(), Err(BetweenWritesWeights { node: mid(&c) }));
    let mut c = base();
    let w = c.writer(c.t.source_rows);
    c.insert(1, w);
    assert_eq!(c.chain(), Err(BetweenWritesIds { node: 1 }));
    // The fused node's own outputs over its inputs: q_norm on the (dead) projection.
    let mut c = base();
    let q = c.nodes[3 + c.k].get::<L2Norm>().unwrap().clone();
    let on_qkv = c.t.qkv_mixed.view(q.dst.ne(), q.dst.layout.nb, 0);
    c.replace(3 + c.k, L2Norm { dst: on_qkv, ..q });
    assert_eq!(c.chain(), Err(FusedAliasing { a: "q_norm", b: "qkv" }));

    // The pair.
    assert_eq!(case(TINY, Step::new(12, 0)).pair(), Err(PairTooWide { ncols: 12 }));
    assert_eq!(case(TINY, Step::new(12, 0)).chain(), Ok(()));
    let mut c = base();
    let mv = 6 + c.k;
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
    assert_eq!(c.pair(), Err(PairAliasing));
    let mut c = base();
    let w = c.writer(c.t.cur);
    c.insert(mv + 1, w);
    assert_eq!(c.pair(), Err(PairBetweenWritesInput { node: mv + 1 }));
    let mut c = base();
    let r = c.reader(c.t.beta_raw);
    c.insert(mv + 1, r);
    assert_eq!(c.pair(), Err(PairBetweenTouchesOutput { node: mv + 1 }));
}

#[test]
fn nodes_in_between_that_break_no_rule_are_fine() {
    // Reads and writes of unrelated buffers, reads of the ids and weights, and writes of the
    // (dead) projection between the conv and the L2 norms.
    let mut c = base();
    let at = 3 + c.k;
    let ops: Vec<Stage> = vec![c.reader(c.t.source_rows), c.reader(c.t.conv_weight), c.writer(c.t.qkv_mixed), c.reader(c.t.cur)];
    for op in ops {
        c.insert(at, op);
    }
    assert_eq!(c.chain(), Ok(()));
}

#[test]
fn the_reference_prs_aliasing_layout_is_accepted() {
    let spec = sweep::case_spec(&sweep::shapes()[0], 4, 3, LayerLayout::PrAliasing);
    let b = layer::build(&spec, 3).unwrap();
    // The ssm-state GET_ROWS sits between the first and last node of the chain and writes into
    // the bytes the chain reads as the projection (the older check refused this).
    let m = match_conv_chain(&b.fresh_nodes().unwrap(), 0).unwrap();
    let (first, last) = (m.nodes[0], *m.nodes.last().unwrap());
    let qkv = Access::of(&b.layers[0].t.qkv_mixed).unwrap();
    let between: Vec<usize> = (first + 1..last).filter(|x| !m.nodes.contains(x)).collect();
    let nodes = b.fresh_nodes().unwrap();
    assert!(between.iter().any(|&x| nodes[x].op.name() == "GET_ROWS" && nodes[x].writes().iter().any(|w| w.overlaps(&qkv))));
    // And the fused graph equals the unfused one on the CPU reference.
    let r = off_on_cpu(&spec, 3, &mut ExactMufu).unwrap();
    assert!(r.identical(), "{:?}", r.mismatches);
    assert_eq!(r.report.fused_counts(), (1, 1));
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
    assert_eq!(out.report.fused_counts(), (3, 3));
}

fn sweep_check_without_launches(spec: &StackSpec, r: &sweep::OffOn) -> Result<(), String> {
    if !r.identical() {
        return Err(format!("differs: {:?}", r.mismatches));
    }
    for want in ["conv_cache", "conv_out", "q_norm", "k_norm", "alpha", "beta_raw"] {
        if !r.values.iter().any(|v| v.ends_with(&format!(".{want}"))) {
            return Err(format!("`{want}` not compared"));
        }
    }
    let n_t = spec.layers[0].step.n_tokens;
    let l = &r.report.layers[0];
    let pair_ok =
        if n_t <= 8 { matches!(l.pair, Outcome::Fused { .. }) } else { l.pair == Outcome::Refused(Refusal::PairTooWide { ncols: n_t }) };
    if !matches!(l.conv_chain, Outcome::Fused { .. }) || !pair_ok {
        return Err(format!("{}", r.report));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Property test: random perturbations of valid planned graphs (both layouts), inserted mostly
// inside the conv chain's span. Checked by hand: with any one of the rules on the cache, the
// weights, the early outputs, the CONCAT's users/overwrites, the GET_ROWS output's users, the
// copies' windows, rows written twice, or the pair's in-between nodes disabled, this test
// fails. (No op may write an index buffer, so the ids rule is covered by the rule test only;
// the fused node's own aliasing rule likewise, as no perturbation here moves an output.)

#[derive(Clone, Copy, Debug)]
enum Mutation {
    ReadCacheRow(usize),
    WriteCacheRow(usize),
    WriteWeights,
    ReadEarly(usize),
    WriteEarly(usize),
    ReadConvStates,
    ReadConcat,
    OverwriteConcatChannel(usize),
    DuplicateRow(usize, usize),
    WindowOffset(usize, usize),
    WriteQkv,
    ReadQkv,
    WriteCur,
    ReadBetaRaw,
    WriteUnrelated,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    use Mutation::*;
    prop_oneof![
        (0..8usize).prop_map(ReadCacheRow),
        (0..8usize).prop_map(WriteCacheRow),
        Just(WriteWeights),
        (0..3usize).prop_map(ReadEarly),
        (0..3usize).prop_map(WriteEarly),
        Just(ReadConvStates),
        Just(ReadConcat),
        (0..96usize).prop_map(OverwriteConcatChannel),
        (0..8usize, 0..8usize).prop_map(|(a, b)| DuplicateRow(a, b)),
        (0..8usize, 0..20usize).prop_map(|(a, o)| WindowOffset(a, o)),
        Just(WriteQkv),
        Just(ReadQkv),
        Just(WriteCur),
        Just(ReadBetaRaw),
        Just(WriteUnrelated),
    ]
}

/// Applies `m` at node `at` (insertions) of a built one-layer graph.
fn apply(b: &mut layer::Built, nodes: &mut Vec<Node>, m: Mutation, at: usize) {
    use Mutation::*;
    let t = b.layers[0].t.clone();
    let step = b.spec.layers[0].step;
    let rows = step.cache_rows();
    let fresh = |b: &mut layer::Built, like: &Tensor| {
        let f = b.mem.alloc_tensor(like.dtype(), like.ne());
        let n = b.mem.bytes(f.buffer).len();
        let bytes: Vec<u8> = (0..n).map(|i| (i * 37 % 251) as u8).collect();
        b.mem.bytes_mut(f.buffer).copy_from_slice(&bytes);
        f
    };
    // Mostly inside the conv chain's span (up to the node after the last L2_NORM).
    let last_l2 = (0..nodes.len()).rev().find(|&i| nodes[i].get::<L2Norm>().is_some()).unwrap_or(nodes.len());
    let at = if at < 30 { at % (last_l2 + 2) } else { at % (nodes.len() + 1) };
    let insert = Some;
    let early = [t.conv_out, t.q_norm, t.k_norm];
    let copies: Vec<usize> = (0..nodes.len()).filter(|&i| nodes[i].get::<Cpy>().is_some()).collect();
    let new: Option<Stage> = match m {
        ReadCacheRow(r) => {
            let row = LayerTensors::cache_row(&t.conv_cache, r % rows);
            insert(Stage { src: row, dst: fresh(b, &row) })
        }
        WriteCacheRow(r) => {
            let row = LayerTensors::cache_row(&t.conv_cache, r % rows);
            insert(Stage { src: fresh(b, &row), dst: row })
        }
        WriteWeights => insert(Stage { src: fresh(b, &t.conv_weight), dst: t.conv_weight }),
        ReadEarly(i) => insert(Stage { src: early[i], dst: fresh(b, &early[i]) }),
        WriteEarly(i) => insert(Stage { src: fresh(b, &early[i]), dst: early[i] }),
        ReadConvStates => insert(Stage { src: t.conv_states, dst: fresh(b, &t.conv_states) }),
        ReadConcat => insert(Stage { src: t.conv_input, dst: fresh(b, &t.conv_input) }),
        OverwriteConcatChannel(ch) => {
            let cols = t.conv_input.ne()[0];
            let dense = rgdn::tensor::Layout::contiguous(DType::F32, [cols, 1, 1, 1]);
            let row = t.conv_input.view([cols, 1, 1, 1], dense.nb, (ch % t.conv_input.ne()[1]) * t.conv_input.layout.nb[1]);
            insert(Stage { src: fresh(b, &row), dst: row })
        }
        DuplicateRow(i, j) => {
            if copies.len() >= 2 {
                let (i, j) = (copies[i % copies.len()], copies[j % copies.len()]);
                let dst = nodes[j].get::<Cpy>().unwrap().dst;
                let src = nodes[i].get::<Cpy>().unwrap().src;
                nodes[i] = Node::new(Box::new(Cpy { src, dst }), Some(0));
            }
            None
        }
        WindowOffset(i, o) => {
            let i = copies[i % copies.len()];
            let dst = nodes[i].get::<Cpy>().unwrap().dst;
            nodes[i] = Node::new(Box::new(Cpy { src: window(&t.conv_input, b.spec.layers[0].shape.d_conv - 1, o), dst }), Some(0));
            None
        }
        WriteQkv => insert(Stage { src: fresh(b, &t.qkv_mixed), dst: t.qkv_mixed }),
        ReadQkv => insert(Stage { src: t.qkv_mixed, dst: fresh(b, &t.qkv_mixed) }),
        WriteCur => insert(Stage { src: fresh(b, &t.cur), dst: t.cur }),
        ReadBetaRaw => insert(Stage { src: t.beta_raw, dst: fresh(b, &t.beta_raw) }),
        WriteUnrelated => {
            let x = fresh(b, &t.alpha);
            insert(Stage { src: fresh(b, &t.alpha), dst: x })
        }
    };
    if let Some(op) = new {
        nodes.insert(at, Node::new(Box::new(op), Some(0)));
    }
}

/// Runs `nodes` on the CPU reference; `None` when the graph does not validate.
fn run(b: &layer::Built, nodes: &[Node]) -> Option<HostMemory> {
    let mut mem = b.mem.clone();
    exec::run_cpu(nodes, &mut mem, &mut ExactMufu).ok().map(|_| mem)
}

/// Everything that must agree: every buffer but the arena, whole; in the arena, every value no
/// later block overwrites (except the chain's internal GET_ROWS/CONCAT outputs).
fn same(b: &layer::Built, x: &HostMemory, y: &HostMemory) -> bool {
    let buffers_equal = (0..x.n_buffers()).map(rgdn::tensor::BufferId).filter(|&id| id != b.arena).all(|id| x.bytes(id) == y.bytes(id));
    buffers_equal
        && b.comparable().iter().all(|(_, t)| {
            let r = t.layout.byte_range().unwrap();
            x.bytes(t.buffer)[r.clone()] == y.bytes(t.buffer)[r]
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, failure_persistence: None, ..ProptestConfig::default() })]

    /// Safety, defined independently of the matcher: whenever the pass fuses a perturbed graph,
    /// running it gives the same bytes as running the perturbed graph unfused.
    #[test]
    fn perturbed_graphs_are_never_fused_unsafely(
        n_t in 1usize..=16,
        r in 0usize..=4,
        pr_layout in any::<bool>(),
        muts in proptest::collection::vec((mutation(), 0usize..40), 1..=3),
        seed in 0u64..1000,
    ) {
        let layout = if pr_layout { LayerLayout::PrAliasing } else { LayerLayout::Ggml };
        let spec = StackSpec { layers: vec![LayerSpec { layout, ..LayerSpec::new(TINY, Step::new(n_t, r)) }], outputs: Outputs::Products };
        let mut b = layer::build(&spec, seed).unwrap();
        let mut nodes = b.fresh_nodes().unwrap();
        for (m, at) in &muts {
            apply(&mut b, &mut nodes, *m, *at);
        }
        let off_nodes = compile(rebuild(&nodes), Options::OFF).0;
        let off = run(&b, &off_nodes);
        prop_assume!(off.is_some());
        let (on_nodes, report) = compile(nodes, Options::ON);
        let (chain, pair) = report.fused_counts();
        if chain + pair > 0 {
            let on = run(&b, &on_nodes);
            prop_assert!(on.is_some(), "the fused graph did not run: {report}");
            prop_assert!(same(&b, &off.unwrap(), &on.unwrap()), "accepted an unsafe graph ({muts:?}):\n{report}");
        }
    }
}

/// A copy of a node list (ops are cloned through their concrete types).
fn rebuild(nodes: &[Node]) -> Vec<Node> {
    nodes.iter().map(|n| Node::new(clone_op(n.op.as_ref()), n.layer)).collect()
}

fn clone_op(op: &(dyn Op + 'static)) -> Box<dyn Op> {
    macro_rules! try_clone {
        ($($t:ty),*) => { $( if let Some(x) = op.downcast_ref::<$t>() { return Box::new(x.clone()); } )* };
    }
    use rgdn::ops::*;
    try_clone!(Stage, Scale, GetRows, ConcatDim0, Cpy, CpySnapshots, SsmConv, L2Norm, MulMatVec, Unary, UnaryMul, Binary, GatedDeltaNet);
    panic!("clone_op: unknown op {}", op.name())
}

#[test]
fn the_unperturbed_property_graphs_fuse() {
    // The property test is not vacuous: its unperturbed graphs fuse at every n_t and R.
    for n_t in 1..=16 {
        for r in 0..=4 {
            let spec = StackSpec { layers: vec![LayerSpec::new(TINY, Step::new(n_t, r))], outputs: Outputs::Products };
            let b = layer::build(&spec, 1).unwrap();
            let (_, report) = fuse(b.fresh_nodes().unwrap(), Options::ON);
            assert_eq!(report.fused_counts(), (1, usize::from(n_t <= 8)), "n_t {n_t} R {r}: {report}");
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
    assert_eq!(r.report.fused_counts(), (24, 24));
}
