//! [layer-step] GDN_LAYER_STEP cases: a whole layer step of the Qwen3.5 presets in one launch.
//! Each case builds the unfused layer ([`ggml_layer_ops`]) and lets the fusion pass fuse it
//! (`conv_chain`, `pair`, `gate_pair`, `state_read`, then `layer_step`): what is left is a fresh
//! cell's SCALEs and one GDN_LAYER_STEP.
//!
//! - `GDN_LAYER_STEP`: the fused step on the GPU against its CPU reference (the three parts'
//!   references, exact math within the layer tolerance; the MUFU replay bit for bit);
//! - `GDN_LAYER_STEP_VS_CHAIN`: twins — the fused step and the three-kernel chain it replaces
//!   (GDN_CONV_CHAIN, MUL_MAT_VEC_PAIR_GATE, GATED_DELTA_NET_FROM_CACHE) from the same memory,
//!   every output and both caches byte for byte, every other buffer too;
//! - `GDN_LAYER_STEP_VS_UNFUSED`: twins against the whole unfused chain (every ggml kernel);
//! - refusals: seventeen tokens, a head dim other than 128, parts that are not linked, parts whose
//!   bytes meet across the kernel's phases.
//!
//! Shapes: 9B at n_t 1–16 with R 0–15 (over 8 tokens ggml's products are split launches, which
//! the `pair` fusion takes whole), the read row among the written rows (M = 2, cell 1 read
//! and written) and not (cell 0 read, cell 1 written), a fresh (zeroed) cell, a pending rollback
//! depth, BF16 / F16 (both precisions) weights, special values, 4B and 27B.

use super::layer::EXACT_MATH_TOLERANCE;
use crate::error::{Error, Result};
use crate::fusion::{Options, compile};
use crate::graph::layer::{LayerSpec, ggml_layer_ops};
use crate::graph::{Bound, ByteSet, Node};
use crate::layer::{GdnShape, LayerInit, LayerTensors, Step};
use crate::memory::HostMemory;
use crate::ops::{GdnLayerStep, Op, Precision};
use crate::suite::{Builder, Case, Equivalence, Expect, Scenario};
use crate::tensor::{DType, Tensor};

pub const GROUP: &str = "GDN_LAYER_STEP";
/// The fused step against the three-kernel chain it replaces, bitwise on the GPU.
pub const VS_CHAIN: &str = "GDN_LAYER_STEP_VS_CHAIN";
/// The fused step against the whole unfused chain, bitwise on the GPU.
pub const VS_UNFUSED: &str = "GDN_LAYER_STEP_VS_UNFUSED";

/// The fusions that make the three-kernel chain.
const CHAIN: [&str; 4] = ["conv_chain", "pair", "gate_pair", "state_read"];

#[derive(Clone, Copy, Debug)]
struct StepCase {
    preset: &'static str,
    step: Step,
    init: LayerInit,
}

/// One layer built from a case: its tensors, the unfused ops, and what the caller observes.
struct Layer {
    t: LayerTensors,
    unfused: Vec<Box<dyn Op>>,
}

impl Layer {
    /// Everything a verify step leaves behind: both caches, the conv and norm outputs, the
    /// products, β, the gate and the attention output.
    fn observed(&self) -> Vec<Tensor> {
        let t = &self.t;
        vec![t.conv_cache, t.ssm_cache, t.conv_out, t.q_norm, t.k_norm, t.alpha, t.beta_raw, t.beta, t.gate, t.attn_out]
    }

    /// The unfused ops after the fusion pass with `options`.
    fn fused(&self, options: Options) -> Vec<Box<dyn Op>> {
        let nodes: Vec<Node> = self.unfused.iter().map(|op| Node::new(op.clone(), Some(0))).collect();
        let (nodes, _) = compile(nodes, &ByteSet::of_all(&self.observed(), Bound::Over), options);
        nodes.into_iter().map(|n| n.op).collect()
    }
}

impl StepCase {
    fn name(&self, group: &str) -> String {
        let s = &self.step;
        let mut name =
            format!("{group}({},n_t={},R={},M={},read={},write={}", self.preset, s.n_tokens, s.n_rollback, s.cells, s.src_cell, s.kv_head);
        if s.rollback_depth > 0 {
            name += &format!(",rs_idx={}", s.rollback_depth);
        }
        if s.n_seqs() > 1 {
            // [seq-batch] n_s and every further sequence's (src cell, rs_idx).
            let sources: Vec<String> = s.more_seqs.sources().iter().map(|(c, d)| format!("{c}:{d}")).collect();
            name += &format!(",n_s={}", s.n_seqs());
            if s.n_seqs() <= 5 {
                name += &format!(",src=[{}]", sources.join(" "));
            }
        }
        if s.zero_cell.is_some() {
            name += ",zeroed";
        }
        if self.init.mat_vec_weights != DType::F32 {
            name += &format!(",{:?}", self.init.mat_vec_weights);
        }
        if self.init.precision == Precision::F32 {
            name += ",f32acc";
        }
        if self.init.specials {
            name += ",specials";
        }
        name + ")"
    }

    fn layer(&self, b: &mut Builder) -> Result<Layer> {
        let shape = GdnShape::preset(self.preset).expect("known preset");
        let t = LayerTensors::alloc(&mut b.mem, &shape, &self.step, &self.init)?;
        t.fill_random(&mut b.mem, &shape, &mut b.rng, &self.init)?;
        // ggml's graph (separate snapshot CPYs): what the fusion pass matches.
        let spec = LayerSpec { weights: self.init.mat_vec_weights, precision: self.init.precision, ..LayerSpec::new(shape, self.step) };
        let unfused = ggml_layer_ops(&t, &spec)?;
        Ok(Layer { t, unfused })
    }

    /// The fused ops (SCALEs and one GDN_LAYER_STEP), or an error naming what else came out.
    /// Above the pass's default limit (`fusion::layer_step::max_seqs`) the pass leaves the three
    /// fused launches it would join; the op itself takes up to `abi::GDN_LAYER_STEP_MAX_SEQS`
    /// sequences, so the case joins the three as the matcher does (`GdnLayerStep` of the parts)
    /// and tests the op at every n_s.
    fn step_ops(layer: &Layer) -> Result<Vec<Box<dyn Op>>> {
        let ops = join_parts(layer.fused(Options::ALL));
        let names: Vec<&str> = ops.iter().map(|o| o.name()).collect();
        if names.iter().filter(|n| **n == GROUP).count() != 1 || names.iter().any(|n| *n != GROUP && *n != "SCALE") {
            return Err(Error::Invalid { op: GROUP, what: format!("the fusion pass did not make one layer step: {names:?}") });
        }
        Ok(ops)
    }

    fn match_case(self) -> Case {
        Case::seeded(GROUP, self.name(GROUP), move |mut b| {
            let layer = self.layer(&mut b)?;
            let ops = Self::step_ops(&layer)?;
            Ok(Expect::Match(Scenario { mem: b.mem, ops, tolerance: EXACT_MATH_TOLERANCE, exact_nan_payloads: false }))
        })
    }

    fn twin_case(self, group: &'static str) -> Case {
        Case::seeded(group, self.name(group), move |mut b| {
            let layer = self.layer(&mut b)?;
            let ops = Self::step_ops(&layer)?;
            // Options::OFF: the unfused chain as the backend runs it (snapshot CPYs batched).
            let other = if group == VS_CHAIN { layer.fused(Options::only(&CHAIN)?) } else { layer.fused(Options::OFF) };
            let compare = layer.observed().into_iter().map(|t| (t, t)).collect();
            Ok(Expect::Equivalent(Equivalence::new(b.mem, ops, other, compare)))
        })
    }
}

fn setups() -> Vec<StepCase> {
    let f32w = LayerInit::default();
    // Two cells, reading and writing cell 1: the row read is among the rows written.
    let among = |n_tokens, n_rollback| Step { cells: 2, kv_head: 1, src_cell: 1, ..Step::new(n_tokens, n_rollback) };
    // Reading cell 0, writing cell 1: no row read is written.
    let other = |n_tokens, n_rollback| Step { cells: 2, kv_head: 1, src_cell: 0, ..Step::new(n_tokens, n_rollback) };
    let c = |step| StepCase { preset: "9b", step, init: f32w };
    let mut out = Vec::new();
    for (n_t, r) in [(1, 0), (2, 1), (3, 7), (4, 3), (5, 2), (6, 5), (7, 15), (8, 7), (8, 15), (1, 4)] {
        out.push(c(among(n_t, r)));
    }
    for (n_t, r) in [(1, 0), (4, 3), (8, 7)] {
        out.push(c(other(n_t, r)));
    }
    out.push(c(Step::new(4, 3)));
    out.push(c(Step { zero_cell: Some(1), ..among(4, 3) }));
    out.push(c(Step { zero_cell: Some(0), ..other(2, 2) }));
    out.push(c(Step { rollback_depth: 2, ..among(5, 3) }));
    for (weights, precision) in [(DType::BF16, Precision::Default), (DType::F16, Precision::Default), (DType::F16, Precision::F32)] {
        for (n_t, r) in [(1, 0), (4, 3), (8, 7)] {
            out.push(StepCase { preset: "9b", step: among(n_t, r), init: LayerInit { mat_vec_weights: weights, precision, ..f32w } });
        }
    }
    out.push(StepCase { preset: "9b", step: among(4, 3), init: LayerInit { specials: true, ..f32w } });
    out.push(StepCase { preset: "4b", step: among(4, 3), init: f32w });
    out.push(StepCase { preset: "4b", step: other(8, 7), init: LayerInit { mat_vec_weights: DType::BF16, ..f32w } });
    out.push(StepCase { preset: "27b", step: among(8, 7), init: f32w });
    out.push(StepCase { preset: "27b", step: among(1, 0), init: LayerInit { mat_vec_weights: DType::F16, ..f32w } });
    // [wide-pair] n_t 9–16 (a few: each case runs the 9B step's CPU reference, twice with its
    // twin): the read row among the written rows and not, a fresh cell with a pending rollback
    // depth, BF16 and F16 (f32 accumulation) weights, special values, 4B.
    out.push(c(among(9, 8)));
    out.push(c(among(16, 15)));
    out.push(c(other(13, 7)));
    out.push(c(Step { zero_cell: Some(1), rollback_depth: 3, ..among(12, 7) }));
    out.push(StepCase { preset: "9b", step: among(16, 15), init: LayerInit { mat_vec_weights: DType::BF16, ..f32w } });
    out.push(StepCase {
        preset: "9b",
        step: other(11, 2),
        init: LayerInit { mat_vec_weights: DType::F16, precision: Precision::F32, ..f32w },
    });
    out.push(StepCase { preset: "4b", step: among(14, 3), init: LayerInit { specials: true, ..f32w } });
    out
}

/// [seq-batch] A step of `n_s` sequences of `n_t` tokens writing cells 1 … n_s (sequence s: cell
/// 1 + s), each reading its own cell at rollback depth s mod (R + 1); cell 0 is read by nobody.
fn own_cells(n_t: usize, r: usize, n_s: usize) -> Step {
    let more: Vec<(usize, usize)> = (1..n_s).map(|s| (1 + s, s % (r + 1))).collect();
    Step { cells: n_s + 1, kv_head: 1, src_cell: 1, ..Step::new(n_t, r) }.with_sequences(&more).expect("at most 256 sequences")
}

/// [seq-batch] Batched steps: n_s 2–5 on the CPU-checked side (match cases and twins), with
/// sequences sharing a source row (cell 0, which no sequence writes), a fresh cell, every
/// weight kind, 27B; n_s 16 and 64 as GPU-only twins ([`batch_twins`]).
fn batch_setups() -> Vec<StepCase> {
    let f32w = LayerInit::default();
    let c = |step| StepCase { preset: "9b", step, init: f32w };
    let shared = Step { cells: 4, kv_head: 1, src_cell: 0, ..Step::new(4, 3) }.with_sequences(&[(0, 0), (3, 1)]).expect("3 sequences");
    vec![
        c(own_cells(1, 0, 2)),
        c(own_cells(4, 3, 3)),
        c(own_cells(8, 7, 5)),
        c(own_cells(16, 15, 2)),
        c(shared),
        c(Step { zero_cell: Some(2), ..own_cells(4, 3, 3) }),
        StepCase { preset: "9b", step: own_cells(4, 3, 2), init: LayerInit { mat_vec_weights: DType::BF16, ..f32w } },
        StepCase { preset: "9b", step: own_cells(3, 2, 3), init: LayerInit { mat_vec_weights: DType::F16, ..f32w } },
        StepCase {
            preset: "9b",
            step: own_cells(5, 4, 2),
            init: LayerInit { mat_vec_weights: DType::F16, precision: Precision::F32, ..f32w },
        },
        StepCase { preset: "27b", step: own_cells(4, 3, 3), init: f32w },
        StepCase { preset: "4b", step: own_cells(2, 1, 4), init: LayerInit { specials: true, ..f32w } },
    ]
}

/// [seq-batch] GPU-only twins of wide batches (their CPU references would take minutes): n_s 16
/// and 64, against the three-kernel chain and the unfused chain.
fn batch_twins() -> Vec<Case> {
    let f32w = LayerInit::default();
    let mut out = Vec::new();
    for (n_t, r, n_s) in [(4, 3, 16), (1, 0, 64), (4, 3, 64), (16, 15, 16)] {
        let case = StepCase { preset: "9b", step: own_cells(n_t, r, n_s), init: f32w };
        out.push(case.twin_case(VS_CHAIN).on_gpu_only());
        out.push(case.twin_case(VS_UNFUSED).on_gpu_only());
    }
    out
}

/// [seq-batch] Batch invariance: sequence `k` of a batch of `n_s` (the others random, writing their
/// own cells) comes out of the batched step with exactly the bits the single-sequence step
/// gives it alone — every output slice of the sequence and every cache row of its cell.
pub const BATCH_INVARIANT: &str = "GDN_LAYER_STEP_BATCH_INVARIANT";

/// One batch-invariance case (see [`BATCH_INVARIANT`]): chain `a` is the batched step over the
/// whole batch, chain `b` the single-sequence step built over sequence `k`'s views of the same
/// buffers (its tokens, its columns, its slices of every output, the same caches and weights,
/// its own source row) — compared on sequence k's slices and cache rows only.
fn invariance_case(preset: &'static str, n_t: usize, r: usize, n_s: usize, k: usize, gpu_only: bool) -> Case {
    let name = format!("{BATCH_INVARIANT}({preset},n_t={n_t},R={r},n_s={n_s},seq={k})");
    let case = Case::seeded(BATCH_INVARIANT, name, move |mut b| {
        let batch = StepCase { preset, step: own_cells(n_t, r, n_s), init: LayerInit::default() };
        let layer = batch.layer(&mut b)?;
        let ops_a = StepCase::step_ops(&layer)?;
        let shape = GdnShape::preset(preset).expect("known preset");
        let (src_cell, depth) = batch.step.source(k).expect("k < n_s");
        let step_k = Step {
            kv_head: batch.step.kv_head + k,
            src_cell,
            rollback_depth: depth,
            more_seqs: crate::layer::Sequences::NONE,
            ..batch.step
        };
        let t = &layer.t;
        // Sequence k's views of the batch's per-sequence tensors (sequence is the outermost
        // dimension of each, so every slice is contiguous); caches and weights whole.
        let seq_slice = |x: &Tensor| -> Tensor {
            let [n0, n1, n2, n3] = x.ne();
            let nb = x.layout.nb;
            let (ne, offset) = if n3 == n_s && n_s > 1 {
                ([n0, n1, n2, 1], k * nb[3])
            } else if n2 == n_s && n_s > 1 {
                ([n0, n1, 1, 1], k * nb[2])
            } else {
                // [rows, n_t·n_s] columns, sequence-major.
                ([n0, n_t, 1, 1], k * n_t * nb[1])
            };
            x.view(ne, crate::tensor::Layout::contiguous(x.dtype(), ne).nb, offset)
        };
        let fresh = |mem: &mut HostMemory, x: &Tensor, ne: [usize; 4]| mem.alloc_tensor(x.dtype(), ne);
        let single = LayerTensors::table(&shape, &step_k, DType::F32)?;
        let mut tk = t.clone();
        tk.source_rows = b.mem.alloc_indices(&step_k.source_rows_i32());
        for (qi, x) in [
            (&mut tk.qkv_mixed, t.qkv_mixed),
            (&mut tk.cur, t.cur),
            (&mut tk.conv_out, t.conv_out),
            (&mut tk.q_norm, t.q_norm),
            (&mut tk.k_norm, t.k_norm),
            (&mut tk.alpha, t.alpha),
            (&mut tk.beta_raw, t.beta_raw),
            (&mut tk.beta, t.beta),
            (&mut tk.gate, t.gate),
            (&mut tk.attn_out, t.attn_out),
        ] {
            *qi = seq_slice(&x);
        }
        // The unfused graph's intermediates of one sequence, in buffers of their own (the fused
        // step never touches them).
        for name in ["conv_states", "conv_input", "ssm_state", "alpha_biased", "softplus"] {
            let i = LayerTensors::index_of(name).expect("a table field");
            let mut all = tk.to_array();
            all[i] = fresh(&mut b.mem, &all[i], single[i].2);
            tk = LayerTensors::from_array(all);
        }
        let spec = LayerSpec { weights: batch.init.mat_vec_weights, precision: batch.init.precision, ..LayerSpec::new(shape, step_k) };
        let unfused = ggml_layer_ops(&tk, &spec)?;
        let single_layer = Layer { t: tk, unfused };
        let ops_b = StepCase::step_ops(&single_layer)?;
        // Compared: sequence k's output slices, and its cell's row of every group of both caches.
        let mut compare: Vec<(Tensor, Tensor)> = single_layer.observed()[2..].iter().map(|x| (*x, *x)).collect();
        for cache in [t.conv_cache, t.ssm_cache] {
            for group in 0..=r {
                let row = LayerTensors::try_cache_rows("cache", &cache, group * step_k.cells + step_k.kv_head, 1)?;
                compare.push((row, row));
            }
        }
        // Every buffer either chain writes holds other sequences' bytes too: only the listed
        // slices are compared.
        let written: std::collections::BTreeSet<_> = ops_a.iter().chain(&ops_b).flat_map(|op| op.outputs()).map(|x| x.buffer).collect();
        Ok(Expect::Equivalent(Equivalence { mem: b.mem, a: ops_a, b: ops_b, compare, private: written.into_iter().collect() }))
    });
    if gpu_only { case.on_gpu_only() } else { case }
}

/// A fused 9B step (n_t = 4, R = 3) for the refusals to spoil, in `b`'s memory.
fn plain_step(b: &mut Builder) -> Result<GdnLayerStep> {
    let case = StepCase { preset: "9b", step: Step::new(4, 3), init: LayerInit::default() };
    let layer = case.layer(b)?;
    StepCase::step_ops(&layer)?
        .iter()
        .find_map(|o| o.as_ref().downcast_ref::<GdnLayerStep>().cloned())
        .ok_or_else(|| Error::Invalid { op: GROUP, what: "no layer step".into() })
}

/// A case the op must refuse with the error `predicate` accepts.
fn refusal(name: &str, edit: fn(&mut GdnLayerStep, &mut HostMemory), predicate: fn(&Error) -> bool, expected: &'static str) -> Case {
    Case::seeded(GROUP, format!("{GROUP}(refuse:{name})"), move |mut b| {
        let mut op = plain_step(&mut b)?;
        edit(&mut op, &mut b.mem);
        let scenario = Scenario { mem: b.mem, ops: vec![Box::new(op)], tolerance: EXACT_MATH_TOLERANCE, exact_nan_payloads: false };
        Ok(Expect::Refusal { scenario, predicate, expected })
    })
}

fn not_linked(e: &Error) -> bool {
    matches!(e, Error::Invalid { op: GROUP, what } if what.contains("not linked"))
}

pub fn cases() -> Vec<Case> {
    let setups: Vec<StepCase> = setups().into_iter().chain(batch_setups()).collect();
    let mut cases: Vec<Case> = setups.iter().map(|s| s.match_case()).collect();
    cases.extend(setups.iter().map(|s| s.twin_case(VS_CHAIN)));
    cases.extend(setups.iter().step_by(3).map(|s| s.twin_case(VS_UNFUSED)));
    // [seq-batch] Wide batches (GPU only) and batch invariance: a sequence alone, first, last and in
    // the middle of batches of 2, 4, 64 and 256.
    cases.extend(batch_twins());
    for (preset, n_t, r, n_s, k, gpu_only) in [
        ("9b", 4, 3, 2, 1, false),
        ("9b", 1, 0, 4, 0, false),
        ("9b", 8, 7, 4, 3, false),
        ("27b", 4, 3, 4, 2, false),
        ("9b", 4, 3, 64, 37, true),
        ("9b", 1, 0, 256, 255, true),
        ("9b", 16, 15, 16, 9, true),
    ] {
        cases.push(invariance_case(preset, n_t, r, n_s, k, gpu_only));
    }
    cases.push(refusal(
        "n_t=17",
        |o, m| o.chain.qkv = m.alloc_tensor(DType::F32, [o.chain.qkv.ne()[0], 17, 1, 1]),
        |e| matches!(e, Error::Unsupported { op: GROUP, what } if what.contains("n_t = 17") && what.contains("GDN_LAYER_STEP_MAX_TOKENS")),
        "Unsupported (n_t = 17)",
    ));
    cases.push(refusal(
        "head_dim=64",
        |o, _| o.chain.head_dim = 64,
        |e| matches!(e, Error::Unsupported { op: GROUP, what } if what.contains("head_dim = 64")),
        "Unsupported (head_dim 64)",
    ));
    cases.push(refusal("q_elsewhere", |o, m| o.gdn.q = m.alloc_tensor(DType::F32, o.gdn.q.ne()), not_linked, "Invalid (q not q_norm)"));
    cases.push(refusal(
        "v_from_k_channels",
        |o, _| {
            let nb = o.chain.conv_out.layout.nb;
            let (d, h_k) = (o.chain.head_dim, o.chain.n_k_heads);
            o.gdn.v = o.chain.conv_out.view(o.gdn.v.ne(), [4, 4 * d, nb[1], nb[2]], 4 * h_k * d);
        },
        not_linked,
        "Invalid (v not the v channels)",
    ));
    cases.push(refusal("beta_is_gate", |o, _| o.gdn.beta = o.gdn.g, not_linked, "Invalid (beta not the pair's beta)"));
    cases.push(refusal(
        "out_over_cur",
        |o, m| {
            let (cur, out) = (o.gate.pair.first.input, o.gdn.out);
            let n_cur = cur.layout.n_elements();
            let shared = m.alloc_tensor(DType::F32, [n_cur + out.layout.n_elements(), 1, 1, 1]);
            let cur = shared.view(cur.ne(), cur.layout.nb, 0);
            o.gate.pair.first.input = cur;
            o.gate.pair.second.input = cur;
            o.gdn.out = shared.view(out.ne(), out.layout.nb, 4 * (n_cur - 1));
        },
        |e| matches!(e, Error::Aliasing { op: GROUP, a: "out", b: "cur", .. }),
        "Aliasing (out, cur)",
    ));
    cases.push(refusal(
        "alpha_over_conv_weight",
        |o, m| {
            let (w, alpha) = (o.chain.weight, o.gate.pair.first.dst);
            let n_w = w.layout.n_elements();
            let shared = m.alloc_tensor(DType::F32, [n_w + alpha.layout.n_elements(), 1, 1, 1]);
            o.chain.weight = shared.view(w.ne(), w.layout.nb, 0);
            o.gate.pair.first.dst = shared.view(alpha.ne(), alpha.layout.nb, 4 * (n_w - 1));
        },
        |e| matches!(e, Error::Aliasing { op: GROUP, a: "alpha", b: "conv_weight", .. }),
        "Aliasing (alpha, conv_weight)",
    ));
    cases
}

/// `ops` with GDN_CONV_CHAIN, MUL_MAT_VEC_PAIR_GATE and GATED_DELTA_NET_FROM_CACHE (each once, in
/// that order: the three launches of a batch above the layer step's default limit) replaced by
/// their GDN_LAYER_STEP at the chain's place; anything else unchanged.
fn join_parts(ops: Vec<Box<dyn Op>>) -> Vec<Box<dyn Op>> {
    use crate::ops::{GatedDeltaNetFromCache, GdnConvChain, MulMatVecPairGate};
    let at = |name: &str| {
        let found: Vec<usize> = (0..ops.len()).filter(|&i| ops[i].name() == name).collect();
        (found.len() == 1).then(|| found[0])
    };
    let (Some(c), Some(g), Some(n)) = (at("GDN_CONV_CHAIN"), at("MUL_MAT_VEC_PAIR_GATE"), at("GATED_DELTA_NET_FROM_CACHE")) else {
        return ops;
    };
    let (Some(chain), Some(gate), Some(gdn)) = (
        ops[c].downcast_ref::<GdnConvChain>(),
        ops[g].downcast_ref::<MulMatVecPairGate>(),
        ops[n].downcast_ref::<GatedDeltaNetFromCache>(),
    ) else {
        return ops;
    };
    if !(c < g && g < n) {
        return ops;
    }
    let step = GdnLayerStep { chain: chain.clone(), gate: gate.clone(), gdn: gdn.clone() };
    let mut out: Vec<Box<dyn Op>> = Vec::with_capacity(ops.len() - 2);
    let mut step = Some(step);
    for (i, op) in ops.into_iter().enumerate() {
        if i == c {
            out.push(Box::new(step.take().expect("once")));
        } else if i != g && i != n {
            out.push(op);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_passes_on_the_cpu() {
        crate::suite::assert_cpu_passes(cases());
    }

    #[test]
    fn every_setup_has_a_chain_twin_and_the_refusals_are_there() {
        let cases = cases();
        let count = |g: &str| cases.iter().filter(|c| c.group == g && !c.name.contains("refuse:")).count();
        assert_eq!(count(GROUP), count(VS_CHAIN) - batch_twins().len() / 2);
        assert!(count(VS_UNFUSED) >= 8);
        assert_eq!(cases.iter().filter(|c| c.name.contains("refuse:")).count(), 7);
    }
}
