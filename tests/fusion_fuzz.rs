//! The differential fuzzer of the fusion pass: random layer graphs from the builder, randomly
//! perturbed the way an adversarial user (or planner) would, executed on the CPU reference
//! unfused and after `fusion::compile(Options::ALL)`; every byte compared, except the bytes the
//! report says a rewrite left unwritten (and that nobody observes). Any difference after an
//! accepted rewrite fails.
//!
//! Perturbations: readers and writers (CPY, SCALE, an over-declaring test op) of dense,
//! strided, partial and single-element views of any value, at any position; operands of the
//! pattern's ops relocated onto other values' bytes; pattern nodes moved, duplicated or
//! removed; values added to what the caller observes. Both buffer layouts, ggml's allocator
//! and fusion-aware planning, 1–2 layers, with and without the GDN tail, n_t up to 16 (over 8
//! the alpha/beta products are split launches, which the pair takes whole), 1–5 sequences and
//! 1–4 more than the layer step's limit (its three launches), each
//! reading any cache row (their own, a shared one, or one another sequence writes), 1–8 in
//! replay layers.
//!
//! \[overlap\] `Options::ALL` runs the overlap pass too: on every compiled graph the launches it
//! lets start early are checked pair by pair against the grids that may run beside them
//! (`tests/common/overlap_check.rs`: no byte one touches before its wait is touched by the
//! other), and the test fails when no launch ever started early.
//!
//! `RGDN_FUZZ_CASES` (default 1000; 2000 with `RGDN_FULL_TESTS=1`) sets the number of cases, `RGDN_FUZZ_SEED`
//! the first seed: case k runs seed `first + k`, so a run of N cases covers seeds `first` …
//! `first + N − 1`, and a long run meant to add cases needs a first seed outside every earlier
//! run's range (sessions 30–36 took consecutive first seeds: their 20000-case runs shared all
//! but a few cases, `results/2026-12-07-local-fuzz/`). It prints how often each fusion fired and the refusals by reason: a fuzzer
//! that never fuses proves nothing, so the test also fails when a fusion fires in under 5 % of
//! the layer-cases in its scope (a fusion of replay layers only: of the replay layer-cases).

mod common;
#[path = "common/overlap_check.rs"]
mod overlap_check;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rgdn::error::Result;
use rgdn::fusion::{Options, Outcome, REGISTRY, compile, compile_for, sweep};
use rgdn::graph::layer::{Built, LayerLayout, LayerSpec, Outputs, Rollback, StackSpec};
use rgdn::graph::{Bound, ByteSet, Node, exec};
use rgdn::layer::{GdnShape, Step};
use rgdn::memory::{DeviceMemory, HostMemory, Memory};
use rgdn::ops::{ConcatDim0, Cpy, GatedDeltaNet, GdnConvChain, GdnLayerStep, GetRows, L2Norm, MulMatVec, Op, Scale, SsmConv};
use rgdn::reference::math::{ExactMufu, Mufu};
use rgdn::tensor::{DType, Layout, Tensor};
use std::collections::BTreeMap;

/// A test op that declares more than it writes: it may write `declared` but writes only
/// `written` (a sub-view), from `src`. What CPY_SNAPSHOTS and GATED_DELTA_NET do to their caches.
#[derive(Clone, Debug)]
struct OverDeclared {
    src: Tensor,
    written: Tensor,
    declared: Tensor,
}

impl Op for OverDeclared {
    fn name(&self) -> &'static str {
        "OVER_DECLARED"
    }
    fn validate(&self, mem: &dyn Memory) -> Result<()> {
        Cpy { src: self.src, dst: self.written }.validate(mem)
    }
    fn prepare(&self, _: &rgdn::gpu::Gpu, _: &DeviceMemory) -> Result<rgdn::gpu::PreparedLaunch> {
        unreachable!("CPU only")
    }
    fn reference(&self, mem: &mut HostMemory, mufu: &mut dyn Mufu) -> Result<()> {
        Cpy { src: self.src, dst: self.written }.reference(mem, mufu)
    }
    fn inputs(&self) -> Vec<Tensor> {
        vec![self.src]
    }
    fn outputs(&self) -> Vec<Tensor> {
        vec![self.declared]
    }
    fn must_write(&self) -> Vec<Tensor> {
        vec![self.written]
    }
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A random layer spec in the fused kernels' scope most of the time.
fn random_spec(rng: &mut StdRng) -> StackSpec {
    // [replay] One case in eight builds replay-mode layers (`docs/rollback.md`: the replay,
    // the window commit, the verify chain with no cache row written, the log copies).
    // `RGDN_FUZZ_REPLAY_ONLY=1`: replay layers only (to see a planted bug caught in them).
    if rng.random_bool(0.125) || env("RGDN_FUZZ_REPLAY_ONLY", 0) == 1 {
        return random_replay_spec(rng);
    }
    let tail = rng.random_bool(0.3);
    let d_conv = [3, 4, 5, 4][rng.random_range(0..4)];
    let shape = if tail {
        GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: rng.random_range(1..=2), head_dim: 128, d_conv, eps: 1e-6 }
    } else {
        let (hk, hv) = [(1, 2), (2, 4), (1, 6)][rng.random_range(0..3)];
        GdnShape { n_embd: 32 * rng.random_range(1..=3), n_k_heads: hk, n_v_heads: hv, head_dim: 32, d_conv, eps: 1e-6 }
    };
    // Over 8 tokens the products are split into ≤ 8-column launches that the pair takes whole
    // (the layer step then covers n_t ≤ 16): 9–16 in both lists.
    let n_t = if tail {
        [1, 2, 3, 4, 1, 2, 3, 4, 9, 12, 16][rng.random_range(0..11)]
    } else {
        [1, 2, 3, 4, 5, 8, 9, 11, 13, 16][rng.random_range(0..10)]
    };
    let r = rng.random_range(0..=4);
    // [seq-batch] A third of the cases verify 2–5 sequences, and a fifth of those 1–4 more than
    // the layer step's default limit (the three fused launches): sequence s writes cell
    // kv_head + s and reads any cell at any depth — its own row, a row another sequence reads,
    // or a row another sequence writes (which the fused ops must refuse by name).
    let above = rgdn::fusion::layer_step::LAYER_STEP_MAX_SEQS + 1;
    let n_s = match (rng.random_bool(0.35), rng.random_bool(0.2)) {
        (true, false) => rng.random_range(2..=5),
        (true, true) => rng.random_range(above..=above + 3),
        _ => 1,
    };
    let cells = rng.random_range(n_s..=n_s + 2);
    let kv_head = rng.random_range(0..=cells - n_s);
    // Mostly its own cell (the common case, which fuses), else any cell.
    let mut source = |s: usize| {
        let cell = if rng.random_bool(0.75) { kv_head + s } else { rng.random_range(0..cells) };
        (cell, rng.random_range(0..=r))
    };
    let (src_cell, rollback_depth) = source(0);
    let more: Vec<(usize, usize)> = (1..n_s).map(&mut source).collect();
    let step = Step {
        n_tokens: n_t,
        n_rollback: r,
        cells,
        kv_head,
        src_cell,
        rollback_depth,
        zero_cell: if rng.random_bool(0.2) { Some(rng.random_range(0..cells)) } else { None },
        more_seqs: rgdn::layer::Sequences::NONE,
    };
    let step = step.with_sequences(&more).expect("at most 12 sequences");
    let weights = [DType::F32, DType::F16, DType::BF16][rng.random_range(0..3)];
    let layers = rng.random_range(1..=2);
    let layers = (0..layers)
        .map(|_| {
            let layout = if rng.random_bool(0.5) { LayerLayout::PrAliasing } else { LayerLayout::Ggml };
            LayerSpec { weights, layout, gdn_tail: tail, ..LayerSpec::new(shape, step) }
        })
        .collect();
    StackSpec { layers, outputs: if rng.random_bool(0.5) { Outputs::Products } else { Outputs::Forward } }
}

/// [replay] A random replay-mode stack: what `LayerSpec::validate` takes for replay (the GDN tail,
/// ggml's layout, R = 0, each sequence reading and committing to its own cell, no cell zeroed),
/// 1–5 sequences, n_t 1–16, one or two layers writing log set 0 or 1.
fn random_replay_spec(rng: &mut StdRng) -> StackSpec {
    let d_conv = [3, 4, 5][rng.random_range(0..3)];
    let shape = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: rng.random_range(1..=2), head_dim: 128, d_conv, eps: 1e-6 };
    let n_t = [1, 2, 3, 4, 8, 16][rng.random_range(0..6)];
    // [overlap] Up to 8 sequences: from 5 on a replay step is three launches the overlap pass
    // may let run side by side (where the products run as tiles, n_t·n_s ≥ 32).
    let n_s = if rng.random_bool(0.5) { rng.random_range(2..=8) } else { 1 };
    let cells = rng.random_range(n_s..=n_s + 2);
    let kv_head = rng.random_range(0..=cells - n_s);
    let more: Vec<(usize, usize)> = (1..n_s).map(|s| (kv_head + s, 0)).collect();
    let step = Step { cells, kv_head, src_cell: kv_head, ..Step::new(n_t, 0) }.with_sequences(&more).expect("at most 8 sequences");
    let weights = [DType::F32, DType::F16, DType::BF16][rng.random_range(0..3)];
    let layers = (0..rng.random_range(1..=2))
        .map(|_| LayerSpec {
            weights,
            gdn_tail: true,
            rollback: Rollback::Replay { log_set: rng.random_range(0..2) },
            ..LayerSpec::new(shape, step)
        })
        .collect();
    StackSpec { layers, outputs: if rng.random_bool(0.5) { Outputs::Products } else { Outputs::Forward } }
}

/// A fresh F32 buffer of `n` random floats.
fn fresh(mem: &mut HostMemory, rng: &mut StdRng, n: usize) -> Tensor {
    let t = mem.alloc_tensor(DType::F32, [n, 1, 1, 1]);
    let bytes: Vec<u8> = (0..4 * n).map(|_| rng.random()).collect();
    mem.bytes_mut(t.buffer).copy_from_slice(&bytes);
    t
}

/// A random view of the F32 value `t` (contiguous): all of it, a contiguous part, a strided
/// part or one element.
fn sub_view(rng: &mut StdRng, t: &Tensor) -> Tensor {
    let n = t.layout.n_elements();
    let base =
        Tensor::new(t.buffer, Layout::contiguous(DType::F32, [n, 1, 1, 1]).view([n, 1, 1, 1], [4, 4 * n, 4 * n, 4 * n], t.layout.offset));
    match rng.random_range(0..4) {
        0 => *t,
        1 => {
            let start = rng.random_range(0..n);
            let len = rng.random_range(1..=n - start);
            base.view([len, 1, 1, 1], [4, 4 * len, 4 * len, 4 * len], 4 * start)
        }
        2 => {
            let stride = rng.random_range(2..=4);
            let start = rng.random_range(0..n);
            let len = (n - start).div_ceil(stride).max(1);
            let len = rng.random_range(1..=len);
            base.view([len, 1, 1, 1], [4 * stride, 4 * stride * len, 4 * stride * len, 4 * stride * len], 4 * start)
        }
        _ => base.view([1, 1, 1, 1], [4, 4, 4, 4], 4 * rng.random_range(0..n)),
    }
}

/// `t` moved onto the bytes of `onto` (same shape and strides), when it fits.
fn relocate(rng: &mut StdRng, t: &Tensor, onto: &Tensor) -> Option<Tensor> {
    let span = t.layout.byte_range()?.len();
    let room = onto.layout.byte_range()?.len().checked_sub(span)?;
    let offset = onto.layout.offset + t.dtype().size() * rng.random_range(0..=room / t.dtype().size());
    Some(Tensor::new(onto.buffer, Layout { offset, ..t.layout }))
}

/// \[overlap\] `op` (a launch that may start early) with one of the views it touches before its
/// wait moved onto `onto`'s bytes; None for another op or when nothing fits.
fn moved_before_wait(rng: &mut StdRng, op: &(dyn Op + 'static), onto: &Tensor) -> Option<Box<dyn Op>> {
    use rgdn::ops::{GatedDeltaNetReplayVerify, MulMatVecPairGate};
    if let Some(x) = op.downcast_ref::<GatedDeltaNetReplayVerify>() {
        let mut x = x.clone();
        let r = &mut x.replay;
        let fields = [&mut r.k, &mut r.v, &mut r.g, &mut r.beta, &mut r.ssm_cache];
        let k = rng.random_range(0..fields.len());
        *fields[k] = relocate(rng, fields[k], onto)?;
        return Some(Box::new(x));
    }
    let mut x = op.downcast_ref::<MulMatVecPairGate>()?.clone();
    let fields = [&mut x.gate, &mut x.beta, &mut x.pair.first.dst, &mut x.pair.second.dst, &mut x.pair.first.input];
    let k = rng.random_range(0..fields.len());
    *fields[k] = relocate(rng, fields[k], onto)?;
    Some(Box::new(x))
}

/// One perturbation of `nodes`.
fn perturb(rng: &mut StdRng, b: &mut Built, nodes: &mut Vec<Node>, live_out: &mut ByteSet) -> &'static str {
    let f32_values: Vec<Tensor> = b.value_tensors.iter().copied().filter(|t| t.dtype() == DType::F32).collect();
    let pick = |rng: &mut StdRng| f32_values[rng.random_range(0..f32_values.len())];
    let at = rng.random_range(0..=nodes.len());
    let layer = nodes.get(at.min(nodes.len() - 1)).and_then(|n| n.layer);
    match rng.random_range(0..10) {
        0 | 1 => {
            let view = {
                let v = pick(rng);
                sub_view(rng, &v)
            };
            let src = fresh(&mut b.mem, rng, view.layout.n_elements());
            nodes.insert(at, Node::new(Box::new(Cpy { src, dst: view }), layer));
            "writer"
        }
        2 | 3 => {
            let view = {
                let v = pick(rng);
                sub_view(rng, &v)
            };
            let dst = fresh(&mut b.mem, rng, view.layout.n_elements());
            nodes.insert(at, Node::new(Box::new(Cpy { src: view, dst }), layer));
            "reader"
        }
        4 => {
            let view = {
                let v = pick(rng);
                sub_view(rng, &v)
            };
            let view = if view.layout.is_contiguous() { view } else { pick(rng) };
            nodes.insert(at, Node::new(Box::new(Scale { src: view, dst: view, scale: 1.5, bias: 0.25 }), layer));
            "read-modify-write"
        }
        5 => {
            let declared = pick(rng);
            let written = sub_view(rng, &declared);
            let src = fresh(&mut b.mem, rng, written.layout.n_elements());
            nodes.insert(at, Node::new(Box::new(OverDeclared { src, written, declared }), layer));
            "over-declared writer"
        }
        6 | 7 => {
            // An operand of a pattern op onto another value's bytes (mostly a planned one).
            let movable: Vec<usize> = (0..nodes.len())
                .filter(|&i| {
                    let op = nodes[i].op.as_ref();
                    op.downcast_ref::<SsmConv>().is_some()
                        || op.downcast_ref::<ConcatDim0>().is_some()
                        || op.downcast_ref::<L2Norm>().is_some()
                        || op.downcast_ref::<GetRows>().is_some()
                        || op.downcast_ref::<Cpy>().is_some()
                        || op.downcast_ref::<MulMatVec>().is_some()
                        || op.downcast_ref::<GatedDeltaNet>().is_some()
                })
                .collect();
            let Some(&i) = movable.get(rng.random_range(0..movable.len().max(1))) else { return "relocated operand" };
            let planned: Vec<Tensor> = (0..b.values.len())
                .filter(|&v| b.plan.offsets[v].is_some() && b.value_tensors[v].dtype() == DType::F32)
                .map(|v| b.value_tensors[v])
                .collect();
            let onto = if rng.random_bool(0.7) && !planned.is_empty() { planned[rng.random_range(0..planned.len())] } else { pick(rng) };
            let op = nodes[i].op.as_ref();
            // One of an op's operands (`fields` of a clone), moved onto `onto`.
            macro_rules! moved {
                ($t:ty, $($field:ident),+) => {
                    op.downcast_ref::<$t>().and_then(|x| {
                        let mut x = x.clone();
                        let fields = [$(&mut x.$field),+];
                        let k = rng.random_range(0..fields.len());
                        let t = relocate(rng, fields[k], &onto)?;
                        *fields[k] = t;
                        Some(Box::new(x) as Box<dyn Op>)
                    })
                };
            }
            let moved: Option<Box<dyn Op>> = moved!(SsmConv, weight, dst)
                .or_else(|| moved!(ConcatDim0, a, b, dst))
                .or_else(|| moved!(L2Norm, src, dst))
                .or_else(|| moved!(GetRows, dst))
                .or_else(|| moved!(Cpy, src, dst))
                .or_else(|| moved!(MulMatVec, input, dst))
                .or_else(|| moved!(GatedDeltaNet, state_in, q, out));
            if let Some(op) = moved {
                nodes[i].op = op;
            }
            "relocated operand"
        }
        8 => {
            let i = rng.random_range(0..nodes.len());
            match rng.random_range(0..3) {
                0 => {
                    let n = nodes.remove(i);
                    nodes.insert(rng.random_range(0..=nodes.len()), n);
                    "moved node"
                }
                1 => {
                    let n = nodes[i].clone();
                    nodes.insert(rng.random_range(0..=nodes.len()), n);
                    "duplicated node"
                }
                _ => {
                    nodes.remove(i);
                    "removed node"
                }
            }
        }
        _ => {
            live_out.union_with(&ByteSet::of(
                &{
                    let v = pick(rng);
                    sub_view(rng, &v)
                },
                Bound::Over,
            ));
            "observed value"
        }
    }
}

/// Runs `nodes` on the CPU reference; `None` when the graph does not validate.
fn run(mem: &HostMemory, nodes: &[Node]) -> Option<HostMemory> {
    let mut mem = mem.clone();
    exec::run_cpu(nodes, &mut mem, &mut ExactMufu).ok().map(|_| mem)
}

/// The first byte where `x` and `y` differ outside `skip`, as (buffer, offset).
fn first_difference(x: &HostMemory, y: &HostMemory, skip: &ByteSet) -> Option<(usize, usize)> {
    for id in (0..x.n_buffers()).map(rgdn::tensor::BufferId) {
        let (a, b) = (x.bytes(id), y.bytes(id));
        if a.len() != b.len() {
            return Some((id.0, a.len().min(b.len())));
        }
        let mut pos = 0;
        while let Some(i) = a[pos..].iter().zip(&b[pos..]).position(|(p, q)| p != q).map(|i| i + pos) {
            match skip.run_containing(id, i) {
                Some(run) => pos = run.end.min(a.len()),
                None => return Some((id.0, i)),
            }
        }
    }
    None
}

#[derive(Default)]
struct Stats {
    cases: usize,
    invalid: usize,
    fused_cases: usize,
    fired: BTreeMap<&'static str, usize>,
    refusals: BTreeMap<String, usize>,
    perturbations: BTreeMap<&'static str, usize>,
    runtime_refused: usize,
    layer_cases: usize,
    /// [seq-batch] Layer-cases of several sequences, and those where the layer step fired.
    batched_layer_cases: usize,
    batched_layer_steps: usize,
    /// [seq-batch] Of those, the ones above the layer step's limit, and there the fired
    /// `layer_step`s (must stay 0) and `state_read`s (the three launches' GDN).
    wide_layer_cases: usize,
    wide_layer_steps: usize,
    wide_state_reads: usize,
    /// [replay] Layer-cases in replay mode.
    replay_layer_cases: usize,
    /// [overlap] Launches the overlap pass let start early, those it refused (by reason), and
    /// the (launch, grid beside it) pairs checked.
    overlap_early: usize,
    overlap_refused: BTreeMap<String, usize>,
    overlap_pairs: usize,
    overlap_twins: usize,
    overlap_twins_refused: usize,
    /// Time building, running unfused, compiling, running fused, comparing.
    seconds: [f64; 5],
}

fn refusal_kind(r: &rgdn::fusion::Refusal) -> String {
    let s = format!("{r:?}");
    s.split(['(', ' ', '{']).next().unwrap_or(&s).to_string()
}

/// One fuzz case; `Err` describes an unsafe accept.
fn case(seed: u64, stats: &mut Stats) -> std::result::Result<(), String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let spec = random_spec(&mut rng);
    // ggml's allocator (adversarial placements the check must refuse) or fusion-aware
    // planning (every fusion in scope can fire), half and half.
    let planning = if rng.random_bool(0.5) { sweep::Planning::Ggml } else { sweep::Planning::FusionAware };
    let t0 = std::time::Instant::now();
    let built = sweep::build(&spec, seed, planning);
    stats.seconds[0] += t0.elapsed().as_secs_f64();
    let Ok(mut b) = built else {
        stats.invalid += 1;
        return Ok(());
    };
    // [replay] Each replay layer's accepted counts (and the window rows derived from them):
    // random, 0 and T included.
    for l in 0..b.layers.len() {
        if let Some(r) = b.layers[l].replay {
            let n_t = r.n_tokens();
            let counts: Vec<usize> = (0..spec.layers[l].step.n_seqs()).map(|_| rng.random_range(0..=n_t)).collect();
            r.set_accepted(&mut b.mem, &counts).map_err(|e| format!("seed {seed}: accepted counts {counts:?}: {e}"))?;
            stats.replay_layer_cases += 1;
        }
    }
    let mut nodes = b.fresh_nodes().map_err(|e| e.to_string())?;
    let mut live_out = b.live_out();
    let n_perturb = [0, 1, 1, 2, 2, 3, 4][rng.random_range(0..7)];
    let mut applied = Vec::new();
    // [replay] One replay layer in four: the verify's ssm-state GET_ROWS reads through another
    // index buffer, its rows rotated by one sequence (the same rows with one sequence). The
    // verify then reads other rows than the replay commits to, or the same through another
    // index view: `replay_verify` fuses only through the replay's own index, and must refuse.
    // (Drawn only in replay cases: every other case's stream is as before.)
    for l in 0..b.layers.len() {
        if b.layers[l].replay.is_none() || !rng.random_bool(0.25) {
            continue;
        }
        let (cache, source_rows) = (b.layers[l].t.ssm_cache, b.layers[l].t.source_rows);
        let Some(i) = nodes.iter().position(|n| n.get::<GetRows>().is_some_and(|g| g.src == cache && g.rows == source_rows)) else {
            continue;
        };
        let Some(rows) = b.mem.index_values(&source_rows) else { continue };
        let rotated: Vec<i32> = (0..rows.len()).map(|s| rows[(s + 1) % rows.len()]).collect();
        let rows = b.mem.alloc_indices(&rotated);
        let Some(gather) = nodes[i].get::<GetRows>().cloned() else { continue };
        nodes[i].op = Box::new(GetRows { rows, ..gather });
        *stats.perturbations.entry("rerouted ssm index").or_default() += 1;
        applied.push("rerouted ssm index");
    }
    for _ in 0..n_perturb {
        let what = perturb(&mut rng, &mut b, &mut nodes, &mut live_out);
        *stats.perturbations.entry(what).or_default() += 1;
        applied.push(what);
    }
    stats.cases += 1;
    stats.layer_cases += spec.layers.len();
    // [replay] Replay layers are counted on their own (the layer step does not take them).
    let batched = spec.layers[0].step.n_seqs() > 1 && spec.layers[0].rollback == Rollback::Snapshots;
    let wide = batched && spec.layers[0].step.n_seqs() > rgdn::fusion::layer_step::max_seqs();
    if batched {
        stats.batched_layer_cases += spec.layers.len();
    }
    if wide {
        stats.wide_layer_cases += spec.layers.len();
    }
    let t0 = std::time::Instant::now();
    let (off_nodes, _) = compile(nodes.clone(), &live_out, Options::OFF);
    let off = run(&b.mem, &off_nodes);
    stats.seconds[1] += t0.elapsed().as_secs_f64();
    let Some(off) = off else {
        stats.invalid += 1;
        return Ok(());
    };
    let t0 = std::time::Instant::now();
    let (on_nodes, report) = compile_for(nodes, &live_out, Options::ALL, Some(&b.mem));
    stats.seconds[2] += t0.elapsed().as_secs_f64();
    // [overlap] What may run side by side touches no common byte (before the waits).
    stats.overlap_pairs += overlap_check::check_overlaps(&on_nodes)
        .map_err(|e| format!("seed {seed}: an unsafe overlap: {e}\nperturbations {applied:?}\n{report}"))?;
    for d in &report.overlaps {
        match &d.outcome {
            Ok(_) => stats.overlap_early += 1,
            Err(r) => *stats.overlap_refused.entry(format!("{r:?}").split([' ', '{']).next().unwrap_or("").to_string()).or_default() += 1,
        }
    }
    // [overlap] An adversarial twin of a graph where a launch started early: one view that launch
    // touches before its wait moved onto a view of a grid beside it (what a planner reusing a
    // block would do), the pass rerun on the twin; the property must hold on what it decides.
    if let Some(Ok(beside)) = report.overlaps.iter().map(|d| d.outcome.as_ref().map(|b| (d.node, b.clone()))).find(|o| o.is_ok()) {
        let (i, beside) = beside;
        let mut twin: Vec<Node> = on_nodes
            .iter()
            .map(|n| match n.get::<rgdn::ops::Overlapped>() {
                Some(o) => Node::new(o.op.clone(), n.layer),
                None => n.clone(),
            })
            .collect();
        let j = beside[rng.random_range(0..beside.len())];
        let theirs: Vec<Tensor> = twin[j].op.inputs().into_iter().chain(twin[j].op.outputs()).collect();
        let onto = theirs[rng.random_range(0..theirs.len())];
        if let Some(op) = moved_before_wait(&mut rng, twin[i].op.as_ref(), &onto) {
            twin[i].op = op;
            let (marked, decisions) = rgdn::fusion::overlap::mark(twin);
            overlap_check::check_overlaps(&marked)
                .map_err(|e| format!("seed {seed}: an unsafe overlap on a twin (node {i} moved onto node {j}): {e}\n{report}"))?;
            stats.overlap_twins += 1;
            let refused = |d: &rgdn::fusion::overlap::Decision| {
                d.node == i && matches!(d.outcome, Err(rgdn::fusion::overlap::Refusal::Conflict { .. }))
            };
            stats.overlap_twins_refused += usize::from(decisions.iter().any(refused));
        }
    }
    let mut any = false;
    for l in &report.layers {
        for (name, o) in &l.outcomes {
            match o {
                Outcome::Fused(_) => {
                    any = true;
                    *stats.fired.entry(name).or_default() += 1;
                    stats.batched_layer_steps += usize::from(batched && *name == "layer_step");
                    stats.wide_layer_steps += usize::from(wide && *name == "layer_step");
                    stats.wide_state_reads += usize::from(wide && *name == "state_read");
                }
                Outcome::Refused(r) => *stats.refusals.entry(format!("{name}: {}", refusal_kind(r))).or_default() += 1,
            }
        }
    }
    if !any {
        return Ok(());
    }
    // [seq-batch] A fused conv chain runs the sequences at once: where one reads a conv row
    // another writes, that is a race the CPU references (sequences in order) cannot show, so a
    // fused node doing that is an unsafe accept in itself. Stated on each fused node as built
    // (its source rows and the rows its snapshot writes cover; perturbations may have removed
    // some of the builder's copies), independently of the op's own check.
    for node in &on_nodes {
        let chain = node.get::<GdnConvChain>().or_else(|| node.get::<GdnLayerStep>().map(|step| &step.chain));
        let Some(chain) = chain else { continue };
        let Some(rows) = b.mem.index_values(&chain.source_row) else { continue };
        let n_s = chain.n_seqs();
        let written_by = |row: usize| chain.snapshots.iter().find_map(|w| (row >= w.row && row - w.row < n_s).then(|| row - w.row));
        if let Some(s) = (0..n_s.min(rows.len())).find(|&s| written_by(rows[s] as usize).is_some_and(|writer| writer != s)) {
            return Err(format!(
                "seed {seed}: a fused conv chain's sequence {s} reads row {} that another sequence writes (rows {rows:?})\n{report}",
                rows[s]
            ));
        }
    }
    stats.fused_cases += 1;
    let mut on = b.mem.clone();
    let t0 = std::time::Instant::now();
    let ran = exec::run_cpu(&on_nodes, &mut on, &mut ExactMufu);
    stats.seconds[3] += t0.elapsed().as_secs_f64();
    if let Err(e) = ran {
        stats.runtime_refused += 1;
        eprintln!("seed {seed}: the fused graph was refused at run time: {e}\nperturbations {applied:?}\n{report}");
        return Ok(());
    }
    // Bytes a rewrite left unwritten and nobody observes may differ; nothing else.
    let skip = report.eliminated().minus(&live_out);
    if std::env::var("RGDN_FUZZ_VERBOSE").is_ok() {
        for (i, n) in off_nodes.iter().enumerate() {
            eprintln!("off {i}: {} reads {:?} writes {:?}", n.op.name(), n.effects().reads, n.effects().may_write);
        }
        for (i, n) in on_nodes.iter().enumerate() {
            eprintln!("on  {i}: {} reads {:?} writes {:?}", n.op.name(), n.effects().reads, n.effects().may_write);
        }
        for (v, info) in b.values.iter().enumerate() {
            eprintln!(
                "value {v} {} {:?} at {:?}",
                info.name,
                info.role,
                b.value_tensors[v].layout.byte_range().map(|r| (b.value_tensors[v].buffer.0, r))
            );
        }
        eprintln!("stale {:?}", report.eliminated());
        let (x, y) = (off.bytes(rgdn::tensor::BufferId(0)), on.bytes(rgdn::tensor::BufferId(0)));
        let diff: Vec<usize> = (0..x.len()).filter(|&i| x[i] != y[i]).collect();
        eprintln!("buffer 0 differs at {} bytes: first {:?} last {:?}", diff.len(), diff.first(), diff.last());
    }
    let t0 = std::time::Instant::now();
    let diff = first_difference(&off, &on, &skip);
    stats.seconds[4] += t0.elapsed().as_secs_f64();
    match diff {
        None => Ok(()),
        Some((buffer, byte)) => Err(format!(
            "seed {seed}: accepted an unsafe rewrite — buffer {buffer} byte {byte} differs\nperturbations {applied:?}\n{report}"
        )),
    }
}

#[test]
fn fusion_never_changes_an_observed_byte() {
    let cases = env("RGDN_FUZZ_CASES", if common::full_tests() { 2000 } else { 1000 });
    let first = env("RGDN_FUZZ_SEED", 0x00f0_5e00);
    let mut stats = Stats::default();
    let mut failures = Vec::new();
    for seed in first..first + cases {
        if let Err(e) = case(seed, &mut stats) {
            failures.push(e);
            if failures.len() >= 5 {
                break;
            }
        }
    }
    let valid = stats.layer_cases;
    eprintln!(
        "fusion fuzzer: {} cases ({} did not validate unfused), {} with a rewrite; fused graphs refused at run time: {}",
        stats.cases, stats.invalid, stats.fused_cases, stats.runtime_refused
    );
    for f in REGISTRY {
        let fired = stats.fired.get(f.name).copied().unwrap_or(0);
        eprintln!(
            "  {:<12} fired in {:>6} layer-cases ({:.1} % of layer-cases)",
            f.name,
            fired,
            100.0 * fired as f64 / valid.max(1) as f64
        );
    }
    eprintln!(
        "  [seq-batch] layer_step fired in {} of {} layer-cases of several sequences; above its limit of {} ({} layer-cases): layer_step {}, state_read {}",
        stats.batched_layer_steps,
        stats.batched_layer_cases,
        rgdn::fusion::layer_step::max_seqs(),
        stats.wide_layer_cases,
        stats.wide_layer_steps,
        stats.wide_state_reads
    );
    eprintln!("  [replay] {} layer-cases in replay mode", stats.replay_layer_cases);
    eprintln!(
        "  [overlap] {} launches started early ({} pairs with a grid beside them checked), refused: {:?}; {} adversarial twins, {} of them refused by name",
        stats.overlap_early, stats.overlap_pairs, stats.overlap_refused, stats.overlap_twins, stats.overlap_twins_refused
    );
    eprintln!("  perturbations: {:?}", stats.perturbations);
    let s = stats.seconds;
    eprintln!("  seconds: build {:.1}, unfused run {:.1}, compile {:.1}, fused run {:.1}, compare {:.1}", s[0], s[1], s[2], s[3], s[4]);
    let mut refusals: Vec<_> = stats.refusals.iter().collect();
    refusals.sort_by(|a, b| b.1.cmp(a.1));
    for (r, n) in refusals {
        eprintln!("  refused {n:>6}× {r}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(stats.overlap_early > 0, "the overlap pass never let a launch start early: the fuzzer proves nothing about it");
    if env("RGDN_FUZZ_REPLAY_ONLY", 0) == 1 {
        // Replay layers alone: the conv chain and the layer step refuse them by name (NOTES,
        // docs/rollback.md), so the coverage floors below do not apply.
        assert_eq!(stats.runtime_refused, 0, "fused graphs refused at run time");
        return;
    }
    // [replay] A fusion that never fires on a snapshot layer (`fires_on`) is held to the floor
    // over the replay layer-cases, its scope; the others over every layer-case.
    let snapshot_layer =
        LayerSpec::new(GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 128, d_conv: 4, eps: 1e-6 }, Step::new(4, 3));
    for f in REGISTRY {
        let fired = stats.fired.get(f.name).copied().unwrap_or(0);
        let (scope, what) =
            if (f.fires_on)(&snapshot_layer) { (valid, "layer-cases") } else { (stats.replay_layer_cases, "replay layer-cases") };
        assert!(fired * 20 >= scope, "{} fired in only {fired} of {scope} {what}: the fuzzer proves nothing about it", f.name);
    }
    assert!(
        stats.batched_layer_steps * 50 >= stats.batched_layer_cases.max(1),
        "the batched layer step fired in only {} of {} batched layer-cases",
        stats.batched_layer_steps,
        stats.batched_layer_cases
    );
    assert_eq!(stats.wide_layer_steps, 0, "the layer step fired above its sequence limit");
    assert!(
        stats.wide_state_reads > 0,
        "no layer-case above the layer step's limit fused its GDN ({} such layer-cases): the fuzzer proves nothing about the three launches there",
        stats.wide_layer_cases
    );
    assert!(stats.replay_layer_cases * 20 >= valid, "only {} of {valid} layer-cases in replay mode", stats.replay_layer_cases);
    // The fused graphs the fuzzer accepts run: a rewrite never turns a running graph into one
    // its own validation refuses.
    assert_eq!(stats.runtime_refused, 0, "fused graphs refused at run time");
}
