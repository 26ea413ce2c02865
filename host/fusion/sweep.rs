//! The fusion pass's proof runs, kept in the library so `rgdn` can call them:
//!
//! - [`sweep`] (GPU): n_t 1–16 × R ∈ {0, 2, 3, 7, 15} × 5 shapes, and [seq-batch] n_s ∈ {2, 3, 5,
//!   16, 64} × 10 (n_t, R) × 5 shapes × distinct / shared source rows, on both layouts; each case
//!   runs its graph with fusion off and on from identical memory and compares every comparable
//!   value byte for byte (the L2 outputs, the SiLU output, the whole conv cache, both alpha/beta
//!   products, beta, the gate, and with the GDN tail its output and the ssm cache);
//! - [`forward`] (GPU): a whole verify forward of L GDN layers (the 9B preset has 24), every
//!   output and both caches off vs on, and the kernels per forward;
//! - [`off_on_cpu`]: the same comparison on the CPU reference (for CI).

use super::{Options, Outcome, REGISTRY, Report, compile};
use crate::error::Result;
use crate::gpu::Gpu;
use crate::graph::ByteSet;
use crate::graph::exec::{self, Launches};
use crate::graph::layer::{self, Built, LayerLayout, LayerSpec, Outputs, StackSpec};
use crate::layer::{GdnShape, Step};
use crate::memory::{DeviceMemory, HostMemory};
use crate::reference::math::Mufu;
use crate::tensor::DType;

/// The rollback depths of the sweep.
pub const ROLLBACKS: [usize; 5] = [0, 2, 3, 7, 15];

/// One sweep shape: sizes, weight type, and how the step reads and writes the cache.
#[derive(Clone, Copy, Debug)]
pub struct SweepShape {
    pub name: &'static str,
    pub shape: GdnShape,
    pub weights: DType,
    /// Cells M, the cell written, the cell read, whether the read row is among the written
    /// rows (rollback depth chosen accordingly), a fresh cell to zero.
    pub cells: usize,
    pub kv_head: usize,
    pub src_cell: usize,
    pub read_among_written: bool,
    pub zero_cell: Option<usize>,
}

impl SweepShape {
    pub fn step(&self, n_t: usize, r: usize) -> Step {
        let depth = if self.read_among_written { r.min(n_t.max(1)).min(2) } else { r.min(1) };
        Step {
            n_tokens: n_t,
            n_rollback: r,
            cells: self.cells,
            kv_head: self.kv_head,
            src_cell: self.src_cell,
            rollback_depth: depth,
            zero_cell: self.zero_cell,
            more_seqs: crate::layer::Sequences::NONE,
        }
    }
}

const fn shape(n_embd: usize, n_k_heads: usize, n_v_heads: usize, head_dim: usize, d_conv: usize) -> GdnShape {
    GdnShape { n_embd, n_k_heads, n_v_heads, head_dim, d_conv, eps: 1e-6 }
}

/// The five sweep shapes: d_conv 3/4/5, head dim 32/64/128 (C a multiple of 128), the read row among the written rows
/// and not (with M = 1 every row of the cell is written; with M > 1 and another cell read, none
/// is), F32/F16/BF16 weights. Head dim 128 shapes also run the GDN tail.
pub fn shapes() -> [SweepShape; 5] {
    let base = SweepShape {
        name: "",
        shape: shape(64, 1, 1, 32, 4),
        weights: DType::F32,
        cells: 1,
        kv_head: 0,
        src_cell: 0,
        read_among_written: true,
        zero_cell: None,
    };
    [
        SweepShape { name: "dconv3-d32-read-written", shape: shape(64, 2, 4, 32, 3), ..base },
        SweepShape {
            name: "dconv4-d64-read-other",
            shape: shape(128, 1, 2, 64, 4),
            weights: DType::F16,
            cells: 2,
            kv_head: 1,
            src_cell: 0,
            read_among_written: false,
            ..base
        },
        SweepShape { name: "dconv5-d128-read-written", shape: shape(64, 1, 2, 128, 5), ..base },
        SweepShape {
            name: "dconv4-d128-read-other-zeroed",
            shape: shape(256, 2, 4, 128, 4),
            cells: 3,
            kv_head: 2,
            src_cell: 1,
            read_among_written: false,
            zero_cell: Some(1),
            ..base
        },
        SweepShape { name: "dconv5-d64-read-written", shape: shape(96, 2, 2, 64, 5), weights: DType::BF16, ..base },
    ]
}

/// One sweep case: a one-layer graph.
pub fn case_spec(s: &SweepShape, n_t: usize, r: usize, layout: LayerLayout) -> StackSpec {
    let layer = LayerSpec { weights: s.weights, layout, ..LayerSpec::new(s.shape, s.step(n_t, r)) };
    StackSpec { layers: vec![layer], outputs: Outputs::Products }
}

/// [seq-batch] The sequence counts of the batched sweep.
pub const SEQUENCES: [usize; 5] = [2, 3, 5, 16, 64];
/// [seq-batch] The (n_t, R) pairs of the batched sweep: short and long steps, R below, at and above
/// n_t − 1.
pub const BATCH_STEPS: [(usize, usize); 10] = [(1, 0), (2, 2), (3, 3), (4, 3), (5, 7), (6, 2), (8, 7), (9, 15), (16, 0), (16, 15)];

/// [seq-batch] How the further sequences of a batched sweep case read the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeqSources {
    /// Each sequence its own row: its own cell (at a rollback depth) where the shape reads the
    /// written cell, else a cell of its own that no sequence writes.
    Distinct,
    /// Every further sequence reads one row that no sequence writes (shared by all of them).
    Shared,
}

impl SweepShape {
    /// [seq-batch] This shape's step over `n_s` sequences: sequence s writes cell kv_head + s (the
    /// cells grow to hold them), sequence 0 reads as the shape says, the others as `sources`
    /// says. No sequence reads a row another one writes.
    pub fn batch_step(&self, n_t: usize, r: usize, n_s: usize, sources: SeqSources) -> Step {
        let first = self.step(n_t, r);
        // Cells: the written kv_head … kv_head + n_s − 1, then n_s cells nobody writes.
        let cells = self.kv_head + 2 * n_s + 1;
        let unwritten = |s: usize| self.kv_head + n_s + s;
        let depth = |s: usize| s % (r + 1);
        let more: Vec<(usize, usize)> = (1..n_s)
            .map(|s| match sources {
                SeqSources::Distinct if self.read_among_written => (self.kv_head + s, depth(s)),
                SeqSources::Distinct => (unwritten(s), depth(s)),
                SeqSources::Shared => (unwritten(0), r.min(1)),
            })
            .collect();
        // Sequence 0 reads another cell than the written one when the shape says so: one that
        // no sequence writes (the single-sequence shapes' src_cell may be cell kv_head + 1).
        let src_cell = if self.read_among_written { first.src_cell } else { unwritten(0) };
        Step { cells, src_cell, ..first }.with_sequences(&more).expect("at most 256 sequences")
    }
}

/// [seq-batch] One batched sweep case.
pub fn batch_case_spec(s: &SweepShape, n_t: usize, r: usize, n_s: usize, sources: SeqSources, layout: LayerLayout) -> StackSpec {
    let layer = LayerSpec { weights: s.weights, layout, ..LayerSpec::new(s.shape, s.batch_step(n_t, r, n_s, sources)) };
    StackSpec { layers: vec![layer], outputs: Outputs::Products }
}

/// Every sweep case: (name, graph) — one sequence: n_t 1–16 × R ∈ [`ROLLBACKS`] × 5 shapes (400
/// per layout); [seq-batch] several: n_s ∈ [`SEQUENCES`] × [`BATCH_STEPS`] × 5 shapes × distinct and
/// shared source rows (500 per layout).
pub fn cases() -> Vec<(String, StackSpec)> {
    let mut out = Vec::new();
    for layout in [LayerLayout::Ggml, LayerLayout::PrAliasing] {
        for s in shapes() {
            for r in ROLLBACKS {
                for n_t in 1..=16 {
                    out.push((format!("{layout:?}/{}/n_t={n_t}/R={r}", s.name), case_spec(&s, n_t, r, layout)));
                }
            }
        }
        for s in shapes() {
            for n_s in SEQUENCES {
                for sources in [SeqSources::Distinct, SeqSources::Shared] {
                    for (n_t, r) in BATCH_STEPS {
                        let name = format!("{layout:?}/{}/n_s={n_s}/{sources:?}/n_t={n_t}/R={r}", s.name);
                        out.push((name, batch_case_spec(&s, n_t, r, n_s, sources, layout)));
                    }
                }
            }
        }
    }
    out
}

/// The result of running one graph with fusion off and on.
#[derive(Debug)]
pub struct OffOn {
    pub report: Report,
    pub off: Launches,
    pub on: Launches,
    /// Values compared, and their bytes.
    pub values: Vec<String>,
    pub bytes: usize,
    /// Values that differ (name, first differing byte).
    pub mismatches: Vec<(String, usize)>,
}

impl OffOn {
    pub fn identical(&self) -> bool {
        self.mismatches.is_empty()
    }
}

/// Compares the comparable values of `b` in two memories (`stale`: bytes a rewrite left
/// unwritten).
fn compare(b: &Built, stale: &ByteSet, off: &HostMemory, on: &HostMemory) -> (Vec<String>, usize, Vec<(String, usize)>) {
    let mut names = Vec::new();
    let mut bytes = 0;
    let mut mismatches = Vec::new();
    for (name, t) in b.comparable(stale) {
        let Some(r) = t.layout.byte_range() else { continue };
        let (x, y) = (&off.bytes(t.buffer)[r.clone()], &on.bytes(t.buffer)[r.clone()]);
        if let Some(i) = x.iter().zip(y).position(|(p, q)| p != q) {
            mismatches.push((name.clone(), i));
        }
        bytes += r.len();
        names.push(name);
    }
    // Every observed value (caches, graph outputs) must be comparable: a rewrite that left one
    // stale would be a legality-check failure.
    for (v, info) in b.values.iter().enumerate() {
        let observed = b.plan.offsets[v].is_none() || info.role == crate::graph::plan::Role::Output;
        if observed && !names.contains(&info.name) {
            mismatches.push((format!("{} (observed, not comparable)", info.name), 0));
        }
    }
    (names, bytes, mismatches)
}

/// The graph of `b` compiled with fusion off and with `options`.
pub fn compile_off_on(b: &Built, options: Options) -> Result<(Vec<crate::graph::Node>, Vec<crate::graph::Node>, Report)> {
    let live_out = b.live_out();
    let (off, _) = compile(b.fresh_nodes()?, &live_out, Options::OFF);
    let (on, report) = super::compile_for(b.fresh_nodes()?, &live_out, options, Some(&b.mem));
    Ok((off, on, report))
}

/// Builds `spec` from `seed`, runs it on the GPU with fusion off and on (each from a fresh
/// upload of the same memory) and compares.
pub fn off_on_gpu(gpu: &Gpu, spec: &StackSpec, seed: u64) -> Result<OffOn> {
    off_on_gpu_planned(gpu, spec, seed, Planning::FusionAware)
}

/// How a sweep graph's values are placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Planning {
    /// ggml's allocator on the unfused graph: a fusion may then be refused where the plan put
    /// one of its outputs on the bytes of one of its inputs (the check decides).
    Ggml,
    /// The same allocator with the lifetimes of what the pass will fuse widened
    /// ([`crate::graph::plan::plan_with_groups`]): every fusion in scope fires.
    FusionAware,
}

/// Builds `spec` from `seed` with `planning`.
pub fn build(spec: &StackSpec, seed: u64, planning: Planning) -> Result<Built> {
    match planning {
        Planning::Ggml => layer::build(spec, seed),
        Planning::FusionAware => layer::build_planned(spec, seed, crate::memory::default_host_budget(), &|nodes, live_out| {
            super::groups(nodes, live_out, Options::ALL)
        }),
    }
}

/// [`off_on_gpu`] with a choice of planning.
pub fn off_on_gpu_planned(gpu: &Gpu, spec: &StackSpec, seed: u64, planning: Planning) -> Result<OffOn> {
    let b = build(spec, seed, planning)?;
    let (off_nodes, on_nodes, report) = compile_off_on(&b, Options::ALL)?;
    let run = |nodes| -> Result<(HostMemory, Launches)> {
        let dev = DeviceMemory::upload(gpu, &b.mem)?;
        let launches = exec::run_gpu(gpu, nodes, &dev)?;
        Ok((dev.download(gpu)?, launches))
    };
    let (off_mem, off) = run(&off_nodes)?;
    let (on_mem, on) = run(&on_nodes)?;
    let (values, bytes, mismatches) = compare(&b, &report.eliminated(), &off_mem, &on_mem);
    Ok(OffOn { report, off, on, values, bytes, mismatches })
}

/// The same on the CPU reference, with one MUFU for both runs.
pub fn off_on_cpu(spec: &StackSpec, seed: u64, mufu: &mut dyn Mufu) -> Result<OffOn> {
    off_on_cpu_planned(spec, seed, mufu, Planning::FusionAware)
}

/// [`off_on_cpu`] with a choice of planning.
pub fn off_on_cpu_planned(spec: &StackSpec, seed: u64, mufu: &mut dyn Mufu, planning: Planning) -> Result<OffOn> {
    let b = build(spec, seed, planning)?;
    let (off_nodes, on_nodes, report) = compile_off_on(&b, Options::ALL)?;
    let mut off_mem = b.mem.clone();
    exec::run_cpu(&off_nodes, &mut off_mem, mufu)?;
    let mut on_mem = b.mem.clone();
    exec::run_cpu(&on_nodes, &mut on_mem, mufu)?;
    let (values, bytes, mismatches) = compare(&b, &report.eliminated(), &off_mem, &on_mem);
    Ok(OffOn { report, off: Launches::default(), on: Launches::default(), values, bytes, mismatches })
}

/// What every sweep case must show besides identical bytes, derived from the registry: every
/// observed value (caches, graph outputs) was compared; every registered fusion whose
/// `fires_on` holds for the layer fired, and each fused node ran as one kernel; the others
/// were refused.
pub fn check_case(spec: &StackSpec, r: &OffOn) -> std::result::Result<String, String> {
    if !r.identical() {
        return Err(format!("differs: {:?}", r.mismatches));
    }
    for (l, layer) in spec.layers.iter().enumerate() {
        let report = r.report.layers.iter().find(|x| x.layer == l).ok_or(format!("layer {l} not in the report"))?;
        for f in REGISTRY {
            let outcome = report.outcome(f.name).ok_or(format!("{} not in the report", f.name))?;
            match (outcome, (f.fires_on)(layer)) {
                (Outcome::Fused(_), true) | (Outcome::Refused(_), false) => {}
                (o, want) => return Err(format!("layer {l}: {} {o} (expected to {})", f.name, if want { "fire" } else { "be refused" })),
            }
        }
    }
    let mut fused_ops: Vec<&str> = r
        .report
        .layers
        .iter()
        .flat_map(|l| l.outcomes.iter())
        .filter_map(|(_, o)| match o {
            Outcome::Fused(w) => Some(w.fused_op),
            Outcome::Refused(_) => None,
        })
        .collect();
    fused_ops.sort_unstable();
    fused_ops.dedup();
    for op in fused_ops {
        let (kernels, nodes) = r.on.of(op);
        if r.on.total() > 0 && kernels != nodes {
            return Err(format!("{op}: {nodes} node(s) made {kernels} launches (want one kernel each)"));
        }
    }
    Ok(format!("{} values, {} bytes identical; kernels {} → {}", r.values.len(), r.bytes, r.off.total(), r.on.total()))
}

/// The sweep's outcome.
#[derive(Debug, Default)]
pub struct SweepSummary {
    pub cases: usize,
    pub passed: usize,
    /// Per layout: (layout, cases, passed).
    pub by_layout: Vec<(String, usize, usize)>,
    pub failures: Vec<(String, String)>,
}

/// `j/n` with j < n → (j, n); anything else (unset, malformed) → the one shard (0, 1).
pub fn shard_of(spec: Option<&str>) -> (usize, usize) {
    let parsed =
        spec.and_then(|s| s.split_once('/')).and_then(|(j, n)| Some((j.trim().parse::<usize>().ok()?, n.trim().parse::<usize>().ok()?)));
    parsed.filter(|&(j, n)| j < n).unwrap_or((0, 1))
}

/// Runs every sweep case on the GPU; `log` gets one line per failure. A case that does not
/// run (an op refused at launch) is a failure, not the end of the sweep.
///
/// `RGDN_SWEEP_STRIDE=k` runs every k-th case only (for slow tools such as compute-sanitizer);
/// `RGDN_SWEEP_SHARD=j/n` runs the j-th of n interleaved shards of those (n processes side by
/// side cover every case once: the CPU references are the sweep's long pole).
pub fn sweep(gpu: &Gpu, log: &mut dyn FnMut(&str)) -> SweepSummary {
    let stride = std::env::var("RGDN_SWEEP_STRIDE").ok().and_then(|v| v.parse::<usize>().ok()).filter(|k| *k >= 1).unwrap_or(1);
    let (shard, shards) = shard_of(std::env::var("RGDN_SWEEP_SHARD").ok().as_deref());
    let mut s = SweepSummary::default();
    let all = cases();
    let (n, started) = (all.len(), std::time::Instant::now());
    for (i, (name, spec)) in all.into_iter().enumerate().filter(|(i, _)| i % stride == 0 && (i / stride) % shards == shard) {
        if i > 0 && i % 200 == 0 {
            log(&format!("  … case {i} of {n}, {} passed ({:.1} s)", s.passed, started.elapsed().as_secs_f64()));
        }
        let layout = format!("{:?}", spec.layers[0].layout);
        let verdict = match off_on_gpu(gpu, &spec, 0x5eed_0000 + i as u64) {
            Ok(r) => check_case(&spec, &r),
            Err(e) => Err(format!("did not run: {e}")),
        };
        s.cases += 1;
        let passed = verdict.is_ok();
        match s.by_layout.iter_mut().find(|(l, ..)| *l == layout) {
            Some(entry) => {
                entry.1 += 1;
                entry.2 += passed as usize;
            }
            None => s.by_layout.push((layout, 1, passed as usize)),
        }
        match verdict {
            Ok(_) => s.passed += 1,
            Err(e) => {
                log(&format!("  FAIL {name}: {e}"));
                s.failures.push((name, e));
            }
        }
    }
    s
}

/// A whole verify forward: `layers` GDN layers of `shape`, n_t tokens, R snapshots; every
/// fourth layer (from layer 1) in the reference PR's aliasing layout (6 of 24).
pub fn forward_spec(shape: GdnShape, layers: usize, n_t: usize, r: usize) -> StackSpec {
    forward_spec_seqs(shape, layers, n_t, r, 1)
}

/// [seq-batch] [`forward_spec`] over `n_s` sequences: sequence s writes cell s and reads its own cell
/// (sequence s at rollback depth s mod (R + 1)).
pub fn forward_spec_seqs(shape: GdnShape, layers: usize, n_t: usize, r: usize, n_s: usize) -> StackSpec {
    let more: Vec<(usize, usize)> = (1..n_s).map(|s| (s, s % (r + 1))).collect();
    let step = Step { cells: n_s, ..Step::new(n_t, r) }.with_sequences(&more).expect("at most 256 sequences");
    let layers = (0..layers)
        .map(|l| {
            let layout = if l % 4 == 1 { LayerLayout::PrAliasing } else { LayerLayout::Ggml };
            LayerSpec { layout, ..LayerSpec::new(shape, step) }
        })
        .collect();
    StackSpec { layers, outputs: Outputs::Forward }
}

/// Runs [`forward_spec`] off and on on the GPU.
pub fn forward(gpu: &Gpu, shape: GdnShape, layers: usize, n_t: usize, r: usize, seed: u64) -> Result<OffOn> {
    off_on_gpu(gpu, &forward_spec(shape, layers, n_t, r), seed)
}

/// [seq-batch] Runs [`forward_spec_seqs`] off and on on the GPU.
pub fn forward_seqs(gpu: &Gpu, shape: GdnShape, layers: usize, n_t: usize, r: usize, n_s: usize, seed: u64) -> Result<OffOn> {
    off_on_gpu(gpu, &forward_spec_seqs(shape, layers, n_t, r, n_s), seed)
}

/// \[replay\] For the matchers' unit tests: a one-layer replay graph (a small 9B-like shape, two
/// sequences of `n_t` tokens in their own cells), the nodes of log set 1 unfused, and what the
/// caller observes.
#[cfg(test)]
pub(crate) fn small_replay_layer(n_t: usize) -> (Vec<crate::graph::Node>, ByteSet) {
    const SMALL: GdnShape = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 128, d_conv: 4, eps: 1e-6 };
    let step = Step { cells: 2, ..Step::new(n_t, 0) }.with_sequences(&[(1, 0)]).expect("two sequences");
    let layer = LayerSpec { rollback: layer::Rollback::Replay { log_set: 0 }, ..LayerSpec::new(SMALL, step) };
    let spec = StackSpec { layers: vec![layer], outputs: Outputs::Products };
    let b = build(&spec, 5, Planning::FusionAware).expect("a replay layer");
    (b.replay_nodes(1).expect("nodes"), b.live_out())
}
