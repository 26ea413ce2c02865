//! [overlap] The overlap pass (`fusion::overlap`, programmatic dependent launch) on the CPU:
//! where it lets launches start early, and that every launch it lets start early touches,
//! before its wait, no byte a grid that may still run beside it touches — restated pair by
//! pair from the forms it left in the plan (`tests/common/overlap_check.rs`), on
//! - the bench's replay layers (every tensor in a buffer of its own): the three launches of a
//!   replay step from 5 sequences on overlap wherever the products run as tiles;
//! - replay graphs planned by ggml's allocator, where a product may take the block of the conv
//!   chain's input once the chain is done with it (a write the overlap would race: refused), and
//!   by the fusion- and overlap-aware planner, which keeps the run's values apart (every
//!   candidate starts early).
//!
//! What the kernels touch before their waits is held to the ops' declarations by
//! `tests/kernel_emulation.rs`.

#[path = "common/overlap_check.rs"]
mod overlap_check;

use overlap_check::{check_overlaps, form_of};
use rgdn::bench::chain::{ChainConfig, replay_layer};
use rgdn::fusion::overlap::{OVERLAP, Refusal};
use rgdn::fusion::{Options, compile_for, sweep};
use rgdn::graph::Node;
use rgdn::graph::layer::{LayerSpec, Outputs, Rollback, StackSpec};
use rgdn::layer::{GdnShape, Step};
use rgdn::memory::HostMemory;
use rgdn::ops::overlap::Overlap;

/// The three launches of a replay step, in order.
const STEP: [&str; 3] = ["GDN_CONV_CHAIN", "MUL_MAT_VEC_PAIR_GATE", "GATED_DELTA_NET_REPLAY_VERIFY"];
const LETS: Overlap = Overlap { lets_next_start: true, starts_early: false };
const BOTH: Overlap = Overlap { lets_next_start: true, starts_early: true };
const EARLY: Overlap = Overlap { lets_next_start: false, starts_early: true };

#[test]
fn the_overlap_pass_is_an_option_off_by_default() {
    assert!(!Options::ON.allows(OVERLAP) && Options::ALL.allows(OVERLAP) && !Options::OFF.allows(OVERLAP));
    let with = Options::ON.with(OVERLAP);
    assert!(with.allows(OVERLAP) && with.names().last() == Some(&OVERLAP) && with.without(OVERLAP) == Options::ON);
    assert_eq!(Options::parse("replay_verify, overlap").unwrap(), Options::only(&["replay_verify"]).unwrap().with(OVERLAP));
    let err = Options::parse("overlapp").unwrap_err().to_string();
    assert!(err.contains("overlapp") && err.contains(OVERLAP), "{err}");
}

/// The bench's replay layers (`rgdn bench --replay`), 9B: from 5 sequences on, a step is three
/// launches; where the products run as tiles (n_t·n_s ≥ 32 columns) the chain lets the products
/// start, the products start early and let the replay-verify start, which starts early — up to
/// n_s = 32, whose overlapped replay-verify parks 32·32·4 = 4096 blocks on its wait
/// (`EARLY_START_MAX_PARKED_BLOCKS`); from 33 sequences on it is refused by that rule, by name,
/// and so the run before it stays plain too (`Refusal::RunEndsParked`). Below the tiles the
/// products have no overlap form, so nothing overlaps. With the defaults (no overlap pass) every
/// launch is plain.
#[test]
fn the_bench_replay_layers_overlap_where_the_products_run_as_tiles() {
    // (n_s, n_t, the forms with the pass)
    let cases = [
        (5, 4, [Overlap::NONE; 3]),
        (8, 4, [LETS, BOTH, EARLY]),
        (16, 2, [LETS, BOTH, EARLY]),
        (16, 4, [LETS, BOTH, EARLY]),
        (32, 4, [LETS, BOTH, EARLY]),
        (33, 4, [Overlap::NONE; 3]),
        (64, 1, [Overlap::NONE; 3]),
        (64, 4, [Overlap::NONE; 3]),
        (12, 16, [LETS, BOTH, EARLY]),
    ];
    for (n_s, n_t, with_pass) in cases {
        let cfg = ChainConfig { shape: GdnShape::QWEN35_9B, step: rgdn::bench::seqs_step(n_t, 0, n_s).unwrap(), init: Default::default() };
        for options in [Options::ON, Options::ON.with(OVERLAP)] {
            let mut mem = HostMemory::new();
            let ops = replay_layer(&mut mem, &cfg, n_t / 2, options).unwrap();
            let nodes: Vec<Node> = ops.into_iter().map(|op| Node::new(op, Some(0))).collect();
            let names: Vec<&str> = nodes.iter().map(|n| n.op.name()).collect();
            assert_eq!(names, STEP, "n_s {n_s}, T {n_t}");
            let forms: Vec<Overlap> = nodes.iter().map(form_of).collect();
            let want = if options.allows(OVERLAP) { with_pass } else { [Overlap::NONE; 3] };
            assert_eq!(forms, want, "n_s {n_s}, T {n_t}, {:?}", options.names());
            let pairs = check_overlaps(&nodes).unwrap();
            // The products beside the chain; the replay-verify beside both.
            let early = forms.iter().filter(|f| f.starts_early).count();
            assert_eq!(pairs, [0, 1, 3][early], "n_s {n_s}, T {n_t}");
        }
    }
}

/// \[speed\] The pass's cost rule names its refusal: the replay-verify of 33 sequences (9B) would
/// park 32·33·4 = 4224 blocks on its wait, one more sequence than the 4096 it takes; the
/// products before it, which could start early beside the chain, then stay plain by name too.
#[test]
fn an_early_start_that_would_park_many_blocks_is_refused_by_name() {
    use rgdn::fusion::overlap::{EARLY_START_MAX_PARKED_BLOCKS, plan};
    for (n_s, refused) in [(32, false), (33, true), (64, true)] {
        let cfg = ChainConfig { shape: GdnShape::QWEN35_9B, step: rgdn::bench::seqs_step(4, 0, n_s).unwrap(), init: Default::default() };
        let mut mem = HostMemory::new();
        let ops = replay_layer(&mut mem, &cfg, 2, Options::ON).unwrap();
        let nodes: Vec<Node> = ops.into_iter().map(|op| Node::new(op, Some(0))).collect();
        let (_, decisions) = plan(&nodes);
        let rv = decisions.iter().find(|d| d.op == "GATED_DELTA_NET_REPLAY_VERIFY").expect("a decision for the replay-verify");
        let blocks = 32 * n_s * 4;
        match &rv.outcome {
            Err(r @ Refusal::ManyParked { blocks: b, limit }) if refused => {
                assert_eq!((*b, *limit), (blocks, EARLY_START_MAX_PARKED_BLOCKS), "n_s {n_s}");
                assert!(r.to_string().contains(&format!("{blocks} of its blocks")), "{r}");
            }
            Ok(_) if !refused => {}
            o => panic!("n_s {n_s}: {o:?}"),
        }
        // The products start early only where the replay-verify does.
        let products = decisions.iter().find(|d| d.op == "MUL_MAT_VEC_PAIR_GATE").expect("a decision for the products");
        match &products.outcome {
            Err(r @ Refusal::RunEndsParked { at }) if refused => {
                assert_eq!(*at, rv.node, "n_s {n_s}");
                assert!(r.to_string().contains(&format!("node {}", rv.node)), "{r}");
            }
            Ok(_) if !refused => {}
            o => panic!("n_s {n_s}: the products {o:?}"),
        }
    }
}

/// \[speed\] The run rule speaks before the byte check. At the 9B's 64 sequences the
/// replay-verify is refused by the cost rule, so the fusion-aware planner keeps nothing of the
/// step apart and may put the products' outputs on the chain's inputs once the chain is done with
/// them (found by the GPU episode of that shape: the products were reported as a conflict). The
/// products are still refused by the run rule, by name, whatever their bytes: in that planned
/// graph, and in the bench's layer with the products' gate planted on the chain's input.
#[test]
fn the_run_rule_refuses_before_the_bytes_are_looked_at() {
    use rgdn::ops::{GdnConvChain, MulMatVecPairGate};
    use rgdn::tensor::Tensor;
    let expect = |decisions: &[rgdn::fusion::overlap::Decision], what: &str| {
        let [products, rv] = decisions else { panic!("{what}: two decisions expected: {decisions:?}") };
        assert_eq!((products.op, rv.op), ("MUL_MAT_VEC_PAIR_GATE", "GATED_DELTA_NET_REPLAY_VERIFY"), "{what}");
        assert!(matches!(rv.outcome, Err(Refusal::ManyParked { .. })), "{what}: {decisions:?}");
        assert_eq!(products.outcome, Err(Refusal::RunEndsParked { at: rv.node }), "{what}: {decisions:?}");
    };
    // The planned 9B graph, as `tests/gpu_replay.rs`'s episode plans it.
    let others: Vec<(usize, usize)> = (1..64).map(|s| (s, 0)).collect();
    let step = Step { cells: 64, ..Step::new(4, 0) }.with_sequences(&others).unwrap();
    let layer = LayerSpec { rollback: Rollback::Replay { log_set: 0 }, ..LayerSpec::new(GdnShape::QWEN35_9B, step) };
    let spec = StackSpec { layers: vec![layer], outputs: Outputs::Products };
    let built = sweep::build(&spec, 0x0e1b, sweep::Planning::FusionAware).unwrap();
    for set in [0, 1] {
        let nodes = built.replay_nodes(set).unwrap();
        let (compiled, report) = compile_for(nodes, &built.live_out(), Options::ALL, Some(&built.mem));
        check_overlaps(&compiled).unwrap();
        expect(&report.overlaps, &format!("planned 9B graph, log set {set}"));
    }
    // The bench's layer, the products' gate output planted on the chain's input (a write after
    // the chain's read: a conflict, were the run overlapped).
    let cfg = ChainConfig { shape: GdnShape::QWEN35_9B, step: rgdn::bench::seqs_step(4, 0, 64).unwrap(), init: Default::default() };
    let mut mem = HostMemory::new();
    let ops = replay_layer(&mut mem, &cfg, 2, Options::ON).unwrap();
    let chain = ops[0].downcast_ref::<GdnConvChain>().unwrap().clone();
    let pair = ops[1].downcast_ref::<MulMatVecPairGate>().unwrap().clone();
    let planted = MulMatVecPairGate { gate: Tensor { buffer: chain.qkv.buffer, ..pair.gate }, ..pair };
    let mut nodes: Vec<Node> = ops.into_iter().map(|op| Node::new(op, Some(0))).collect();
    nodes[1] = Node::new(Box::new(planted), Some(0));
    let (marked, decisions) = rgdn::fusion::overlap::mark(nodes);
    check_overlaps(&marked).unwrap();
    assert!(marked.iter().map(form_of).all(|f| f == Overlap::NONE), "{decisions:?}");
    expect(&decisions, "bench layer, products on the chain's input");
}

/// One replay-mode layer (R = 0, sequence s on cell s) of the small test shape.
fn replay_spec(n_s: usize, n_t: usize, layers: usize) -> StackSpec {
    let shape = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 128, d_conv: 4, eps: 1e-6 };
    let others: Vec<(usize, usize)> = (1..n_s).map(|s| (s, 0)).collect();
    let step = Step { cells: n_s, ..Step::new(n_t, 0) }.with_sequences(&others).unwrap();
    let layer = LayerSpec { rollback: Rollback::Replay { log_set: 0 }, ..LayerSpec::new(shape, step) };
    StackSpec { layers: vec![layer; layers], outputs: if layers == 1 { Outputs::Products } else { Outputs::Forward } }
}

/// Counts of the pass's decisions over a set of graphs.
#[derive(Default, Debug)]
struct Tally {
    graphs: usize,
    early: usize,
    conflicts: usize,
    other_refusals: usize,
    pairs: usize,
}

/// Replay graphs planned by ggml's allocator and by the fusion- and overlap-aware planner,
/// compiled with every fusion and the overlap pass: the restated property holds on every one,
/// and the aware planner lets every candidate start early (the run's values kept apart). On
/// ggml's plans `gate_pair` is refused (the gate path's values share blocks), so the plain
/// pair starts early beside the chain and the replay-verify, after SIGMOID … MUL, does not.
#[test]
fn planned_replay_graphs_overlap_only_where_no_byte_is_shared() {
    let mut tallies = Vec::new();
    for planning in [sweep::Planning::Ggml, sweep::Planning::FusionAware] {
        let mut t = Tally::default();
        for (n_s, n_t) in [(5, 8), (8, 4), (16, 2), (16, 4), (32, 1), (64, 1), (8, 16)] {
            for layers in [1, 2] {
                let spec = replay_spec(n_s, n_t, layers);
                let built = sweep::build(&spec, 0x0e1a + n_s as u64, planning).unwrap();
                for set in [0, 1] {
                    let nodes = built.replay_nodes(set).unwrap();
                    let (compiled, report) = compile_for(nodes, &built.live_out(), Options::ALL, Some(&built.mem));
                    let what = format!("{planning:?} n_s {n_s} T {n_t} layers {layers} log set {set}");
                    t.pairs += check_overlaps(&compiled).map_err(|e| format!("{what}: {e}\n{report}")).unwrap();
                    t.graphs += 1;
                    assert_eq!(report.overlaps.len(), 2 * layers, "{what}: the products and the replay-verify of each layer\n{report}");
                    for d in &report.overlaps {
                        match &d.outcome {
                            Ok(_) => t.early += 1,
                            Err(Refusal::Conflict { .. }) => t.conflicts += 1,
                            Err(_) => t.other_refusals += 1,
                        }
                    }
                }
            }
        }
        eprintln!("{planning:?}: {t:?}");
        tallies.push(t);
    }
    let (ggml, aware) = (&tallies[0], &tallies[1]);
    assert!(ggml.early > 0 && ggml.pairs > 0, "ggml's plans: {ggml:?}");
    // 7 shapes × (one layer + two) × 2 log sets, two candidates a layer.
    assert!(aware.conflicts == 0 && aware.other_refusals == 0 && aware.early == 7 * (2 + 4) * 2, "aware plans: {aware:?}");
}

/// Adversarial placements of the bench's replay step (small shape, 16 sequences, T = 4: the
/// products as tiles), each a graph that runs correctly in launch order but would race if the
/// launches overlapped: the pass refuses exactly the launch that would race, naming the grid
/// beside it, and the restated property holds on what it leaves.
#[test]
fn a_launch_that_would_race_its_neighbours_is_refused() {
    use rgdn::ops::{GatedDeltaNetReplayVerify, GdnConvChain, MulMatVecPairGate};
    use rgdn::tensor::Tensor;
    let shape = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 128, d_conv: 4, eps: 1e-6 };
    let cfg = ChainConfig { shape, step: rgdn::bench::seqs_step(4, 0, 16).unwrap(), init: Default::default() };
    let mut mem = HostMemory::new();
    let ops = replay_layer(&mut mem, &cfg, 2, Options::ON).unwrap();
    let chain = ops[0].downcast_ref::<GdnConvChain>().unwrap().clone();
    let pair = ops[1].downcast_ref::<MulMatVecPairGate>().unwrap().clone();
    let rv = ops[2].downcast_ref::<GatedDeltaNetReplayVerify>().unwrap().clone();
    // `t`'s layout on the first bytes of `onto`'s buffer.
    let on = |t: Tensor, onto: Tensor| Tensor { buffer: onto.buffer, ..t };
    type Case = (&'static str, GdnConvChain, MulMatVecPairGate, GatedDeltaNetReplayVerify, [Overlap; 3], Option<(usize, usize)>);
    let cases: Vec<Case> = vec![
        // As built: the replay-verify may start early although its verify reads the products'
        // outputs (g and β) and the chain's (q, k, v): it reads them after its wait.
        ("as built", chain.clone(), pair.clone(), rv.clone(), [LETS, BOTH, EARLY], None),
        // The products' gate output on the chain's input (qkv): a write after the chain's read.
        (
            "products write the chain's input",
            chain.clone(),
            MulMatVecPairGate { gate: on(pair.gate, chain.qkv), ..pair.clone() },
            rv.clone(),
            [Overlap::NONE, LETS, EARLY],
            Some((1, 0)),
        ),
        // The products read what the chain writes (their input on the conv output).
        (
            "products read the chain's output",
            chain.clone(),
            MulMatVecPairGate {
                pair: rgdn::ops::MulMatVecPair {
                    first: rgdn::ops::MulMatVec { input: on(pair.pair.first.input, chain.conv_out), ..pair.pair.first },
                    ..pair.pair.clone()
                },
                ..pair.clone()
            },
            rv.clone(),
            [Overlap::NONE, LETS, EARLY],
            Some((1, 0)),
        ),
        // The replay's log on the bytes the chain logs into (its k norm, which a replay layer
        // writes into the log set it keeps): the replay would read before the chain's write lands.
        (
            "replay reads what the chain writes",
            chain.clone(),
            pair.clone(),
            GatedDeltaNetReplayVerify {
                replay: rgdn::ops::GatedDeltaNetReplay { k: on(rv.replay.k, chain.k_norm), ..rv.replay },
                ..rv.clone()
            },
            [LETS, EARLY, Overlap::NONE],
            Some((2, 0)),
        ),
        // The replay's commit on the products' input: a write before the products' read.
        (
            "replay writes what the products read",
            chain.clone(),
            pair.clone(),
            GatedDeltaNetReplayVerify {
                replay: rgdn::ops::GatedDeltaNetReplay { ssm_cache: on(rv.replay.ssm_cache, pair.pair.first.input), ..rv.replay },
                ..rv.clone()
            },
            [LETS, EARLY, Overlap::NONE],
            Some((2, 1)),
        ),
    ];
    for (what, c, p, r, want, refused) in cases {
        let nodes = vec![Node::new(Box::new(c), Some(0)), Node::new(Box::new(p), Some(0)), Node::new(Box::new(r), Some(0))];
        let (marked, decisions) = rgdn::fusion::overlap::mark(nodes);
        // The property first (the pass's own decisions aside), then the decisions.
        check_overlaps(&marked).unwrap_or_else(|e| panic!("{what}: {e}"));
        let forms: Vec<Overlap> = marked.iter().map(form_of).collect();
        assert_eq!(forms, want, "{what}: {decisions:?}");
        let conflicts: Vec<(usize, usize)> = decisions
            .iter()
            .filter_map(|d| match d.outcome {
                Err(Refusal::Conflict { with, .. }) => Some((d.node, with)),
                _ => None,
            })
            .collect();
        assert_eq!(conflicts, refused.into_iter().collect::<Vec<_>>(), "{what}: {decisions:?}");
    }
}
