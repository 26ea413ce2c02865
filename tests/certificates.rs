//! Certificates of invariance, unfused and fused (issue 16): on the CPU reference (CI), and the
//! same on the GPU's kernels (`…_on_the_gpu`, skipped without a driver).
//!
//! **Speculation invariance.** From a cache state, a verify step of T tokens followed by the
//! acceptance of a of them (1 ≤ a ≤ T; a < T means a rollback to the snapshot of a, the cache
//! rows the step wrote for slot T − a, read by the next step through `rollback_depth = T − a`)
//! must be indistinguishable from a plain single-token decode steps from the same state:
//! - every output of the accepted tokens (SiLU output, q and k norms, the alpha/beta products,
//!   beta, the gate, the attention output) is bit-identical to the output of the single step
//!   that computed that token;
//! - the state the sequence continues from (the conv row and the ssm row of slot T − a) is
//!   bit-identical to the live rows (slot 0) after the a single steps;
//! - a later verify step reading that state (through `rollback_depth`) produces bit-identical
//!   outputs and writes bit-identical cache rows as the same step after the single steps; no
//!   row of another cell changes in either history.
//!
//! **Batch invariance.** A sequence's outputs and cache rows are bit-identical alone and at
//! any position of a step of n_s sequences (other sequences reading random rows of any cell at
//! any depth, with random tokens). **Fusion invariance** for n_s > 1: fused ≡ unfused, the
//! fusions that cannot take several sequences refused by name.
//!
//! Where the arithmetic could depend on n_t or n_s, and why it does not here (spec §2):
//! - the alpha/beta MUL_MAT_VECs: every column is reduced on its own in the same order
//!   whatever the column count (1–8 per launch; n_t·n_s columns split into ⌈n_t·n_s/8⌉
//!   launches; the fused pair runs up to 16 columns as column groups of ≤ 8, each column's
//!   arithmetic the same). In llama.cpp on an H200 this is where invariance breaks: mul_mat_vec_f runs
//!   only for ≤ 3 columns (F32 weights) or 1 column (F16/BF16), wider products go to MMF or
//!   cuBLAS, other kernels with other numerics (spec §2.9 "dispatch"), so a token's alpha and
//!   beta may change with the number of columns its step has; rgdn runs
//!   mul_mat_vec_f for every column count (spec README decision 2), so the invariance holds by
//!   construction, at no cost;
//! - SOFTPLUS·MUL is one fused kernel at n_t·n_s = 1 and two kernels otherwise: the same two
//!   roundings (spec §1.5);
//! - SSM_CONV's long kernel (n_t > 32) is unreachable (n_t ≤ 16) and has the same arithmetic;
//! - GATED_DELTA_NET runs tokens in order with per-token arithmetic; K only picks the slots it
//!   stores. L2_NORM, SiLU, the gates and the copies are per element or per row.
//!
//! The two histories run separate graphs (different token counts) with one seed for weights:
//! the weights, the initial caches and every token's inputs (the qkv projection column and the
//! attention-norm column) are copied explicitly into each graph, so the only difference is how
//! the tokens are batched.

use rgdn::fusion::sweep::{self, Planning};
use rgdn::fusion::{Options, REGISTRY, compile_for};
use rgdn::gpu::Gpu;
use rgdn::graph::Node;
use rgdn::graph::exec;
use rgdn::graph::layer::{Built, LayerLayout, LayerSpec, LayerValues, Outputs, StackSpec};
use rgdn::layer::{GdnShape, Step};
use rgdn::memory::{DeviceMemory, HostMemory};
use rgdn::reference::math::ExactMufu;
use rgdn::tensor::{DType, Tensor};

const SEED: u64 = 16;

/// The bytes of a tensor (contiguous in its buffer).
fn bytes_of<'m>(mem: &'m HostMemory, t: &Tensor) -> &'m [u8] {
    let r = t.layout.byte_range().expect("a tensor of a built graph has a byte range");
    &mem.bytes(t.buffer)[r]
}

fn write_bytes(mem: &mut HostMemory, t: &Tensor, bytes: &[u8]) {
    let r = t.layout.byte_range().expect("a tensor of a built graph has a byte range");
    assert_eq!(r.len(), bytes.len(), "bytes for a tensor of {:?}", t.ne());
    mem.bytes_mut(t.buffer)[r].copy_from_slice(bytes);
}

/// Token `i` of a tensor whose outermost non-unit dimension is its `n_t` tokens.
fn token(bytes: &[u8], n_t: usize, i: usize) -> &[u8] {
    assert_eq!(bytes.len() % n_t, 0);
    let len = bytes.len() / n_t;
    &bytes[i * len..(i + 1) * len]
}

/// Both cache tensors of a layer, whole.
#[derive(Clone, Debug, PartialEq)]
struct Caches {
    conv: Vec<u8>,
    ssm: Vec<u8>,
}

impl Caches {
    fn row(bytes: &[u8], rows: usize, row: usize) -> &[u8] {
        token(bytes, rows, row)
    }
}

/// What the two histories share: the weights (by field name) and every token's inputs.
struct Shared {
    weights: Vec<(&'static str, Vec<u8>)>,
    /// Per token: the qkv projection column [C], the attention-norm column [E].
    qkv: Vec<Vec<u8>>,
    cur: Vec<Vec<u8>>,
}

const WEIGHTS: [&str; 5] = ["conv_weight", "alpha_weight", "beta_weight", "dt_bias", "ssm_a"];

/// Every output a token has, by name (the attention output only with the GDN tail).
fn output_names(spec: &LayerSpec) -> Vec<&'static str> {
    let mut names = vec!["conv_out", "q_norm", "k_norm", "alpha", "beta_raw", "beta", "gate"];
    if spec.gdn_tail {
        names.push("attn_out");
    }
    names
}

fn field(v: &LayerValues, name: &str) -> Tensor {
    let i = rgdn::layer::LayerTensors::index_of(name).expect("a field of the layer table");
    v.t.to_array()[i]
}

/// Which graph runs where: the fusions allowed ([`Options::OFF`]: the unfused launch
/// sequence) and the executor (the CPU reference, or the GPU's kernels).
#[derive(Clone, Copy)]
struct Path<'g> {
    options: Options,
    gpu: Option<&'g Gpu>,
}

impl Path<'_> {
    fn name(&self) -> String {
        let on = if self.gpu.is_some() { "gpu" } else { "cpu" };
        if self.options == Options::OFF { format!("{on}, unfused") } else { format!("{on}, fused {:?}", self.options.names()) }
    }
}

const UNFUSED: Path<'static> = Path { options: Options::OFF, gpu: None };
const FUSED: Path<'static> = Path { options: Options::ALL, gpu: None };

/// One layer graph compiled for one path, run from caches and inputs the caller sets.
struct Runner<'g> {
    spec: LayerSpec,
    built: Built,
    nodes: Vec<Node>,
    gpu: Option<&'g Gpu>,
}

/// What one run observed: both caches after it, and each output per token.
struct Observed {
    caches: Caches,
    /// Per output name: the bytes of each token.
    outputs: Vec<(&'static str, Vec<Vec<u8>>)>,
}

impl<'g> Runner<'g> {
    fn new(spec: LayerSpec, path: Path<'g>) -> Runner<'g> {
        let options = path.options;
        let stack = StackSpec { layers: vec![spec], outputs: Outputs::Products };
        let built = sweep::build(&stack, SEED, Planning::FusionAware).expect("the graph builds");
        // Planned against the memory it runs on (as an engine plans): a fused op that the memory
        // refuses (a sequence reading another sequence's row) stays unfused.
        let (nodes, report) = compile_for(built.fresh_nodes().expect("nodes"), &built.live_out(), options, Some(&built.mem));
        // The fused path must really be fused: every fusion in scope fired.
        for f in REGISTRY {
            let want = usize::from(options.allows(f.name) && (f.fires_on)(&spec));
            assert_eq!(report.fired(f.name), want, "{} on {:?}:\n{report}", f.name, spec.step);
        }
        Runner { spec, built, nodes, gpu: path.gpu }
    }

    fn values(&self) -> &LayerValues {
        &self.built.layers[0]
    }

    /// This graph's own weights and the inputs of its tokens.
    fn shared(&self) -> Shared {
        let (mem, v) = (&self.built.mem, self.values());
        let n_t = self.spec.step.n_tokens;
        let cols = |t: &Tensor| (0..n_t).map(|i| token(bytes_of(mem, t), n_t, i).to_vec()).collect();
        Shared {
            weights: WEIGHTS.iter().map(|w| (*w, bytes_of(mem, &field(v, w)).to_vec())).collect(),
            qkv: cols(&v.qkv_src),
            cur: cols(&v.cur_src),
        }
    }

    fn initial_caches(&self) -> Caches {
        let (mem, v) = (&self.built.mem, self.values());
        Caches { conv: bytes_of(mem, &v.t.conv_cache).to_vec(), ssm: bytes_of(mem, &v.t.ssm_cache).to_vec() }
    }

    /// Runs the graph from `caches` with `weights` and the whole step inputs `qkv`, `cur`;
    /// the memory after the run.
    fn exec(&self, caches: &Caches, weights: &[(&'static str, Vec<u8>)], qkv: &[u8], cur: &[u8]) -> HostMemory {
        let v = self.values();
        let mut mem = self.built.mem.clone();
        write_bytes(&mut mem, &v.t.conv_cache, &caches.conv);
        write_bytes(&mut mem, &v.t.ssm_cache, &caches.ssm);
        for (name, bytes) in weights {
            write_bytes(&mut mem, &field(v, name), bytes);
        }
        write_bytes(&mut mem, &v.qkv_src, qkv);
        write_bytes(&mut mem, &v.cur_src, cur);
        match self.gpu {
            None => {
                exec::run_cpu(&self.nodes, &mut mem, &mut ExactMufu).expect("the graph runs");
                mem
            }
            Some(gpu) => {
                let dev = DeviceMemory::upload(gpu, &mem).expect("upload");
                exec::run_gpu(gpu, &self.nodes, &dev).expect("the graph runs");
                dev.download(gpu).expect("download")
            }
        }
    }

    /// Both caches and every output after a run, each output cut into `parts` equal chunks
    /// (tokens, or sequences).
    fn observe(&self, mem: &HostMemory, parts: usize) -> Observed {
        let v = self.values();
        let outputs = output_names(&self.spec)
            .into_iter()
            .map(|name| {
                let b = bytes_of(mem, &field(v, name));
                (name, (0..parts).map(|i| token(b, parts, i).to_vec()).collect())
            })
            .collect();
        Observed { caches: Caches { conv: bytes_of(mem, &v.t.conv_cache).to_vec(), ssm: bytes_of(mem, &v.t.ssm_cache).to_vec() }, outputs }
    }

    /// Runs the (one-sequence) graph from `caches` with `shared`'s weights and its tokens
    /// `first ..`; outputs per token.
    fn run(&self, caches: &Caches, shared: &Shared, first: usize) -> Observed {
        let n_t = self.spec.step.n_tokens;
        let join = |cols: &[Vec<u8>]| cols[first..first + n_t].concat();
        let mem = self.exec(caches, &shared.weights, &join(&shared.qkv), &join(&shared.cur));
        self.observe(&mem, n_t)
    }
}

/// Panics naming the first byte where `x` and `y` differ (and the f32 values around it).
fn same(ctx: &str, what: &str, x: &[u8], y: &[u8]) {
    assert_eq!(x.len(), y.len(), "{ctx}: {what}: lengths");
    if let Some(i) = x.iter().zip(y).position(|(p, q)| p != q) {
        let f = |b: &[u8]| f32::from_le_bytes(b[i / 4 * 4..i / 4 * 4 + 4].try_into().expect("4 bytes"));
        panic!("{ctx}: {what} differs at float {} ({:e} vs {:e})", i / 4, f(x), f(y));
    }
}

/// One speculation case: a layer, the cache geometry, how the first step reads (the state
/// the histories start from) and the verify step's T and R.
#[derive(Clone, Copy, Debug)]
struct Case {
    shape: GdnShape,
    weights: DType,
    cells: usize,
    kv_head: usize,
    src_cell: usize,
    depth: usize,
    zero_cell: Option<usize>,
    n_tokens: usize,
    n_rollback: usize,
    /// Salt caches and inputs with ±0, subnormals, ±Inf and NaN.
    specials: bool,
}

/// Tokens of the later verify step that reads the accepted state.
const FOLLOW_UP_TOKENS: usize = 3;

impl Case {
    /// The sweep shape `s` (its cells, written cell, read cell, zeroed cell, weight type), T, R;
    /// the first read one snapshot back where R > 0 and the shape reads among the written rows.
    fn sweep(s: &sweep::SweepShape, n_tokens: usize, n_rollback: usize) -> Case {
        Case {
            shape: s.shape,
            weights: s.weights,
            cells: s.cells,
            kv_head: s.kv_head,
            src_cell: s.src_cell,
            depth: n_rollback.min(1),
            zero_cell: s.zero_cell,
            n_tokens,
            n_rollback,
            specials: false,
        }
    }

    fn spec(&self, n_tokens: usize, src_cell: usize, rollback_depth: usize, zero_cell: Option<usize>) -> LayerSpec {
        let step = Step {
            n_tokens,
            n_rollback: self.n_rollback,
            cells: self.cells,
            kv_head: self.kv_head,
            src_cell,
            rollback_depth,
            zero_cell,
            ..Step::new(n_tokens, 0)
        };
        LayerSpec { weights: self.weights, specials: self.specials, ..LayerSpec::new(self.shape, step) }
    }

    /// The accepted counts a rollback can reach: a ≥ T − R (the snapshot of a is slot T − a).
    fn accepted(&self) -> std::ops::RangeInclusive<usize> {
        self.n_tokens.saturating_sub(self.n_rollback).max(1)..=self.n_tokens
    }
}

/// The speculation-invariance certificate of `case` on `path`; returns
/// the accepted counts certified.
fn certify_speculation(case: &Case, path: Path) -> Vec<usize> {
    let (t, m, h) = (case.n_tokens, case.cells, case.kv_head);
    let ctx = |what: &str| format!("{case:?} [{}] {what}", path.name());
    let verify = Runner::new(case.spec(t, case.src_cell, case.depth, case.zero_cell), path);
    let tail = verify.spec.gdn_tail;
    // Weights, initial caches and the first T tokens from the verify graph's seed; the
    // follow-up step's tokens from its own graph.
    let follow_plain = Runner::new(case.spec(FOLLOW_UP_TOKENS, h, 0, None), path);
    let mut shared = verify.shared();
    let follow_inputs = follow_plain.shared();
    shared.qkv.extend(follow_inputs.qkv);
    shared.cur.extend(follow_inputs.cur);
    let state0 = verify.initial_caches();
    let verified = verify.run(&state0, &shared, 0);

    // The plain history: one single-token step per token, the first reading as the verify
    // step reads, the others the live row of the written cell.
    let first = Runner::new(case.spec(1, case.src_cell, case.depth, case.zero_cell), path);
    let rest = Runner::new(case.spec(1, h, 0, None), path);
    let mut plain_states = vec![state0];
    for i in 0..t {
        let runner = if i == 0 { &first } else { &rest };
        let o = runner.run(plain_states.last().expect("the initial state"), &shared, i);
        // The verify step's outputs do not depend on a: token i is checked once for every
        // a > i.
        for ((name, plain), (_, spec)) in o.outputs.iter().zip(&verified.outputs) {
            same(&ctx(&format!("token {i}")), name, &spec[i], &plain[0]);
        }
        plain_states.push(o.caches);
    }

    let rows = m * (1 + case.n_rollback);
    let slots = 1 + case.n_rollback;
    let mut certified = Vec::new();
    for a in case.accepted() {
        let d = t - a;
        let plain = &plain_states[a];
        let ctx = ctx(&format!("a = {a}"));
        // The state the sequence continues from.
        same(&ctx, "conv state", Caches::row(&verified.caches.conv, rows, d * m + h), Caches::row(&plain.conv, rows, h));
        if tail {
            same(&ctx, "ssm state", Caches::row(&verified.caches.ssm, rows, d * m + h), Caches::row(&plain.ssm, rows, h));
        }
        // A later step reading it: through the rollback depth after speculation, the live row
        // after the plain steps.
        let follow_rolled = Runner::new(case.spec(FOLLOW_UP_TOKENS, h, d, None), path);
        let x = follow_rolled.run(&verified.caches, &shared, t);
        let y = follow_plain.run(plain, &shared, t);
        for ((name, x), (_, y)) in x.outputs.iter().zip(&y.outputs) {
            same(&ctx, &format!("follow-up {name}"), &x.concat(), &y.concat());
        }
        // Every row of another cell, and every row of the written cell the follow-up wrote
        // (all K conv slots; the min(n_t, K) newest ssm slots). The older ssm slots of the
        // written cell keep what each history left there, which differs by design.
        for row in 0..rows {
            let (group, cell) = (row / m, row % m);
            let other = cell != h;
            if other || group < slots {
                same(
                    &ctx,
                    &format!("follow-up conv row {row}"),
                    Caches::row(&x.caches.conv, rows, row),
                    Caches::row(&y.caches.conv, rows, row),
                );
            }
            if other || (tail && group < slots.min(FOLLOW_UP_TOKENS)) {
                same(
                    &ctx,
                    &format!("follow-up ssm row {row}"),
                    Caches::row(&x.caches.ssm, rows, row),
                    Caches::row(&y.caches.ssm, rows, row),
                );
            }
        }
        certified.push(a);
    }
    certified
}

/// Both paths: the unfused launch sequence, and every registered fusion (each one in scope
/// must fire, [`Runner::new`] checks).
const PATHS: [Path<'static>; 2] = [UNFUSED, FUSED];

fn over_the_sweep_shapes(path: Path, cases: &[(usize, usize)], adapt: impl Fn(Case) -> Case) -> Vec<(Case, Vec<usize>)> {
    let mut out = Vec::new();
    for s in sweep::shapes() {
        for &(t, r) in cases {
            let case = adapt(Case::sweep(&s, t, r));
            let certified = certify_speculation(&case, path);
            assert_eq!(certified, case.accepted().collect::<Vec<_>>());
            out.push((case, certified));
        }
    }
    out
}

/// Every sweep shape (d_conv 3/4/5, head dim 32/64/128 — 128 with the GDN tail —, F32/F16/BF16
/// weights, the read row among the written rows or another cell's, a zeroed cell), drafts
/// short and long against the snapshots kept, every reachable a.
const SPECULATION_CASES: [(usize, usize); 4] = [(4, 3), (6, 2), (9, 11), (16, 15)];

#[test]
fn speculation_invariance_unfused() {
    over_the_sweep_shapes(UNFUSED, &SPECULATION_CASES, |c| c);
}

#[test]
fn speculation_invariance_fused() {
    over_the_sweep_shapes(FUSED, &SPECULATION_CASES, |c| c);
}

/// a = 1: only the verified token is kept, no draft — the rollback to the deepest slot a step
/// of T tokens reaches (T − 1 = R: exactly the snapshots it needs).
#[test]
fn speculation_invariance_when_no_draft_is_accepted() {
    for path in PATHS {
        for (case, certified) in over_the_sweep_shapes(path, &[(2, 1), (3, 2), (5, 4), (8, 7)], |c| c) {
            assert!(certified.contains(&1), "{case:?}");
        }
    }
}

/// T = 1: a one-token verify step is a plain decode step (a = 1, no rollback), with and
/// without snapshots kept.
#[test]
fn speculation_invariance_of_a_one_token_step() {
    for path in PATHS {
        for (case, certified) in over_the_sweep_shapes(path, &[(1, 0), (1, 1), (1, 5)], |c| c) {
            assert_eq!(certified, [1], "{case:?}");
        }
    }
}

/// R = 0: no snapshot is kept, so the only acceptance is a = T (the whole draft).
#[test]
fn speculation_invariance_without_snapshots() {
    for path in PATHS {
        for (case, certified) in over_the_sweep_shapes(path, &[(2, 0), (5, 0), (12, 0)], |c| c) {
            assert_eq!(certified, [case.n_tokens], "{case:?}");
        }
    }
}

/// A fresh sequence: its cell is zeroed in place (`zero_cell`) and read by the verify step and
/// by the first plain step; every a.
#[test]
fn speculation_invariance_from_a_fresh_cell() {
    for path in PATHS {
        let fresh = |c: Case| Case { src_cell: c.kv_head, depth: 0, zero_cell: Some(c.kv_head), ..c };
        for (case, certified) in over_the_sweep_shapes(path, &[(4, 3), (5, 0), (7, 9)], fresh) {
            assert_eq!(certified, case.accepted().collect::<Vec<_>>(), "{case:?}");
        }
    }
}

/// Caches and inputs salted with ±0, subnormals, ±Inf and NaN: the bits still match
/// (NaN payloads included).
#[test]
fn speculation_invariance_with_special_values() {
    for path in PATHS {
        over_the_sweep_shapes(path, &[(5, 4), (11, 3)], |c| Case { specials: true, ..c });
    }
}

/// **Batch invariance.** One sequence (sequence X: the cell it writes, the row it reads, its
/// tokens) runs alone, and at position `p` of a step of `n_s` sequences whose other sequences
/// read random rows (of any cell, at any depth) and verify random tokens. X's outputs (its
/// chunk of every output) and every cache row of its cell are bit-identical, and so is every
/// row of the cells no sequence of the batch writes.
fn certify_batch(case: &Case, n_s: usize, p: usize, others_seed: u64, path: Path) {
    use rand::{Rng, SeedableRng};
    let (m, r) = (case.cells, case.n_rollback);
    assert!(p < n_s && n_s <= m, "{case:?}: a batch of {n_s} needs as many cells");
    let x = case.kv_head;
    let alone = Runner::new(case.spec(case.n_tokens, case.src_cell, case.depth, case.zero_cell), path);
    let first_cell = x.checked_sub(p).expect("the batch's first cell");
    assert!(first_cell + n_s <= m);
    let mut rng = rand::rngs::StdRng::seed_from_u64(others_seed);
    // [seq-batch] On the fused path the others read only rows no other sequence writes (their own
    // cell, or a cell outside the batch), so that the batched layer step fires (a step where a
    // sequence reads another's row stays unfused: the unfused path covers those).
    let fused = path.options != Options::OFF;
    let allowed = |cell: usize, s: usize| !fused || !(first_cell..first_cell + n_s).contains(&cell) || cell == first_cell + s;
    let sources: Vec<(usize, usize)> = (0..n_s)
        .map(|s| {
            if s == p {
                return (case.src_cell, case.depth);
            }
            loop {
                let cell = rng.random_range(0..m);
                if allowed(cell, s) {
                    break (cell, rng.random_range(0..=r));
                }
            }
        })
        .collect();
    let batch_case = Case { kv_head: first_cell, ..*case };
    let step = batch_case
        .spec(case.n_tokens, sources[0].0, sources[0].1, case.zero_cell)
        .step
        .with_sequences(&sources[1..])
        .expect("≤ 256 sequences");
    let batch = Runner::new(LayerSpec { step, ..batch_case.spec(case.n_tokens, 0, 0, None) }, path);
    assert_eq!(batch.spec.step.n_seqs(), n_s);

    let shared = alone.shared();
    let state0 = alone.initial_caches();
    let (qkv_x, cur_x) = (shared.qkv.concat(), shared.cur.concat());
    let y = alone.observe(&alone.exec(&state0, &shared.weights, &qkv_x, &cur_x), 1);
    // The batch's own random inputs for the other sequences, X's at block p.
    let bv = batch.values();
    let with_x = |t: &Tensor, x: &[u8]| {
        let mut b = bytes_of(&batch.built.mem, t).to_vec();
        let len = b.len() / n_s;
        b[p * len..(p + 1) * len].copy_from_slice(x);
        b
    };
    let (qkv_b, cur_b) = (with_x(&bv.qkv_src, &qkv_x), with_x(&bv.cur_src, &cur_x));
    let b = batch.observe(&batch.exec(&state0, &shared.weights, &qkv_b, &cur_b), n_s);

    let ctx = format!("{case:?} [{}] n_s {n_s} at {p}, sources {sources:?}", path.name());
    for ((name, alone), (_, batched)) in y.outputs.iter().zip(&b.outputs) {
        same(&ctx, name, &batched[p], &alone[0]);
    }
    let rows = m * (1 + r);
    for row in 0..rows {
        let cell = row % m;
        if cell == x || !(first_cell..first_cell + n_s).contains(&cell) {
            let what = |c: &str| format!("{c} row {row} (cell {cell})");
            same(&ctx, &what("conv"), Caches::row(&b.caches.conv, rows, row), Caches::row(&y.caches.conv, rows, row));
            same(&ctx, &what("ssm"), Caches::row(&b.caches.ssm, rows, row), Caches::row(&y.caches.ssm, rows, row));
        }
    }
}

/// Batch sizes and positions: first, middle, last; the sequence's cell among M = n_s + 2.
fn over_batches(path: Path, n_ss: &[usize], adapt: impl Fn(Case) -> Case) {
    let mut seed = 0;
    for s in sweep::shapes() {
        for &(t, r) in &[(1, 0), (3, 2), (5, 7)] {
            for &n_s in n_ss {
                for p in [0, n_s / 2, n_s - 1] {
                    let cells = n_s + 2;
                    // X writes cell p + 1 (the batch starts at cell 1), reads a cell no sequence
                    // writes (cell 0 or n_s + 1) one snapshot back where R > 0.
                    let base = Case::sweep(&s, t, r);
                    let src_cell = if p % 2 == 0 { 0 } else { n_s + 1 };
                    let case = adapt(Case { cells, kv_head: p + 1, src_cell, zero_cell: None, ..base });
                    seed += 1;
                    certify_batch(&case, n_s, p, seed, path);
                }
            }
        }
    }
}

#[test]
fn batch_invariance_unfused() {
    over_batches(UNFUSED, &[2, 5], |c| c);
}

#[test]
fn batch_invariance_fused() {
    over_batches(FUSED, &[2, 5], |c| c);
}

/// The sequence starts fresh (its cell zeroed and read), the others read anything — the
/// zeroed row included.
#[test]
fn batch_invariance_of_a_fresh_sequence() {
    for path in PATHS {
        over_batches(path, &[3], |c| Case { src_cell: c.kv_head, depth: 0, zero_cell: Some(c.kv_head), ..c });
    }
}

/// The sequence reads its own live row (no pending rollback), in a batch of 256 (the most a
/// step takes): position 0, 127, 255.
#[test]
fn batch_invariance_in_the_largest_batch() {
    let s = sweep::shapes()[2];
    for path in PATHS {
        for p in [0, 127, 255] {
            let case = Case { cells: 258, kv_head: p + 1, src_cell: p + 1, depth: 0, ..Case::sweep(&s, 3, 2) };
            certify_batch(&case, 256, p, p as u64, path);
        }
    }
}

/// A one-layer graph of sweep shape `s` whose step has n_s sequences: cells 1 … n_s of
/// M = n_s + 1 written, sequence 0 reading cell 0 one snapshot back, the others cells of the
/// batch (their own or another's: read among the written rows) at depths 0 … R; the shape's
/// fresh cell becomes cell 0.
fn multi_sequence_spec(s: &sweep::SweepShape, n_t: usize, r: usize, n_s: usize, layout: LayerLayout) -> StackSpec {
    let cells = n_s + 1;
    let sources: Vec<(usize, usize)> = (1..n_s).map(|i| ((i * 2) % cells, i % (r + 1))).collect();
    let step = Step { cells, kv_head: 1, src_cell: 0, rollback_depth: r.min(1), zero_cell: s.zero_cell.map(|_| 0), ..Step::new(n_t, r) }
        .with_sequences(&sources)
        .expect("≤ 256 sequences");
    StackSpec { layers: vec![LayerSpec { weights: s.weights, layout, ..LayerSpec::new(s.shape, step) }], outputs: Outputs::Products }
}

/// What a multi-sequence off/on run must show: identical bytes and the registry's scope
/// ([`sweep::check_case`]); [seq-batch] where a sequence reads a row another one writes, the
/// sequence-bound fusions refused by name (the fused op's own refusal on the memory), else
/// fired; the pair fired exactly when its n_t·n_s columns are within the pair's limit (over
/// 8, ggml's split launches taken whole).
fn check_multi_sequence(spec: &StackSpec, out: &sweep::OffOn) -> Result<(), String> {
    use rgdn::fusion::{Outcome, Refusal};
    sweep::check_case(spec, out).map(|_| ())?;
    let (step, layer) = (&spec.layers[0].step, &out.report.layers[0]);
    let refused_by_the_op =
        |name: &str| matches!(layer.outcome(name), Some(Outcome::Refused(Refusal::FusedInvalid(why))) if why.contains("another sequence"));
    if step.reads_another_sequences_row(step.slots()) && !refused_by_the_op("conv_chain") {
        return Err(format!("a sequence reading another's conv row did not refuse the conv chain by name:\n{}", out.report));
    }
    if out.report.fired("pair") != usize::from(step.columns() <= rgdn::fusion::pair::MAX_COLS) {
        return Err(format!("the pair did not follow its column scope:\n{}", out.report));
    }
    Ok(())
}

/// **Fusion invariance** (fused ≡ unfused) for steps of several sequences, on both layouts:
/// every fusion fires where its scope says (the batched kernels), a step whose sequences read
/// each other's rows stays unfused by the fused ops' own named refusal, every observed byte
/// equal.
#[test]
fn fusion_invariance_with_several_sequences() {
    for layout in [LayerLayout::Ggml, LayerLayout::PrAliasing] {
        for s in sweep::shapes() {
            for (n_t, r, n_s) in [(1, 0, 2), (2, 3, 4), (4, 2, 5), (3, 7, 2), (3, 2, 4), (5, 3, 3), (9, 0, 2)] {
                let spec = multi_sequence_spec(&s, n_t, r, n_s, layout);
                let out = sweep::off_on_cpu(&spec, (n_t * 10 + n_s) as u64, &mut ExactMufu).unwrap();
                assert_eq!(check_multi_sequence(&spec, &out), Ok(()), "{layout:?} {} n_t {n_t} R {r} n_s {n_s}", s.name);
            }
        }
    }
}

/// The same on the GPU's kernels: the sweep (n_t 1–16 × R ∈ the sweep's rollbacks × 5 shapes ×
/// both layouts) at n_s ∈ {1, 2, 5}.
#[test]
fn fusion_invariance_with_several_sequences_on_the_gpu() {
    let Some(gpu) = gpu_or_skip("the multi-sequence fusion sweep") else { return };
    let mut cases = 0;
    for layout in [LayerLayout::Ggml, LayerLayout::PrAliasing] {
        for s in sweep::shapes() {
            for r in sweep::ROLLBACKS {
                for n_t in 1..=16 {
                    for n_s in [1, 2, 5] {
                        let spec = multi_sequence_spec(&s, n_t, r, n_s, layout);
                        let out = sweep::off_on_gpu(&gpu, &spec, cases).unwrap();
                        assert_eq!(check_multi_sequence(&spec, &out), Ok(()), "{layout:?} {} n_t {n_t} R {r} n_s {n_s}", s.name);
                        cases += 1;
                    }
                }
            }
        }
    }
    println!("multi-sequence fusion sweep on the GPU: {cases} cases identical off/on");
}

/// The GPU, or `None` (and a banner saying what did not run) without a CUDA driver — a failure
/// with `RGDN_REQUIRE_GPU=1`.
fn gpu_or_skip(what: &str) -> Option<Gpu> {
    match Gpu::new() {
        Ok(gpu) => Some(gpu),
        Err(e) => {
            assert!(!std::env::var("RGDN_REQUIRE_GPU").is_ok_and(|v| v == "1"), "RGDN_REQUIRE_GPU=1 but no GPU: {e}");
            println!("{}\nGPU CERTIFICATES SKIPPED ({what}): {e}\n{}", "=".repeat(78), "=".repeat(78));
            None
        }
    }
}

/// The speculation certificate on the GPU's kernels, unfused and fused, over the sweep shapes:
/// T ∈ {1, 2, 3, 4, 5, 8, 9, 12, 16} × R ∈ the sweep's rollbacks, every reachable a, and the
/// fresh-cell case.
#[test]
fn speculation_invariance_on_the_gpu() {
    let Some(gpu) = gpu_or_skip("speculation invariance") else { return };
    let mut certified = 0;
    for options in [Options::OFF, Options::ALL] {
        let path = Path { options, gpu: Some(&gpu) };
        for t in [1, 2, 3, 4, 5, 8, 9, 12, 16] {
            for r in sweep::ROLLBACKS {
                certified += over_the_sweep_shapes(path, &[(t, r)], |c| c).len();
            }
        }
        certified +=
            over_the_sweep_shapes(path, &[(4, 3), (16, 15)], |c| Case { src_cell: c.kv_head, depth: 0, zero_cell: Some(c.kv_head), ..c })
                .len();
    }
    println!("speculation invariance on the GPU: {certified} cases (every reachable a each) hold");
}

/// The batch certificate on the GPU's kernels, unfused and fused: n_s ∈ {2, 5, 16, 64}, the
/// sequence first, in the middle and last.
#[test]
fn batch_invariance_on_the_gpu() {
    let Some(gpu) = gpu_or_skip("batch invariance") else { return };
    for options in [Options::OFF, Options::ALL] {
        over_batches(Path { options, gpu: Some(&gpu) }, &[2, 5, 16, 64], |c| c);
    }
    println!("batch invariance on the GPU: n_s 2, 5, 16, 64 hold");
}

/// The GPU tests' parameter sets on the CPU reference (minutes here: on demand, `cargo test
/// --test certificates -- --ignored`).
#[test]
#[ignore]
fn the_gpu_certificates_on_the_cpu() {
    for path in PATHS {
        for t in [1, 2, 3, 4, 5, 8, 9, 12, 16] {
            for r in sweep::ROLLBACKS {
                over_the_sweep_shapes(path, &[(t, r)], |c| c);
            }
        }
        over_batches(path, &[2, 5, 16, 64], |c| c);
    }
    for layout in [LayerLayout::Ggml, LayerLayout::PrAliasing] {
        for s in sweep::shapes() {
            for r in sweep::ROLLBACKS {
                for n_t in 1..=16 {
                    for n_s in [1, 2, 5] {
                        let spec = multi_sequence_spec(&s, n_t, r, n_s, layout);
                        let out = sweep::off_on_cpu(&spec, 7, &mut ExactMufu).unwrap();
                        assert_eq!(check_multi_sequence(&spec, &out), Ok(()), "{layout:?} {} n_t {n_t} R {r} n_s {n_s}", s.name);
                    }
                }
            }
        }
    }
}

/// A verify forward of `layers` layers (every fourth in the aliasing layout, as
/// [`sweep::forward_spec`]) whose steps carry n_s = 4 sequences: cells 1 … 4 of M = 6, reading
/// their own live rows, another cell's, and snapshots 1 and 2 back.
fn forward_with_4_sequences(shape: GdnShape, layers: usize, n_t: usize, r: usize) -> StackSpec {
    let mut spec = sweep::forward_spec(shape, layers, n_t, r);
    for l in &mut spec.layers {
        l.step = Step { cells: 6, kv_head: 1, src_cell: 1, ..l.step }.with_sequences(&[(2, 1.min(r)), (0, 0), (4, 2.min(r))]).unwrap();
    }
    spec
}

/// Fusion invariance of a 3-layer stack with 4 sequences per step on the CPU reference.
#[test]
fn fusion_invariance_of_a_stack_with_4_sequences() {
    let tiny = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 128, d_conv: 4, eps: 1e-6 };
    // 8, 16 and 20 columns: one launch per product, ggml's two (the pair takes them whole),
    // over the pair's 16.
    for (n_t, r) in [(2, 3), (4, 2), (5, 2)] {
        let spec = forward_with_4_sequences(tiny, 3, n_t, r);
        let out = sweep::off_on_cpu(&spec, 44, &mut ExactMufu).unwrap();
        assert_eq!(sweep::check_case(&spec, &out).map(|_| ()), Ok(()), "n_t {n_t} R {r}\n{}", out.report);
        assert_eq!(out.report.fired("pair"), if n_t * 4 <= rgdn::fusion::pair::MAX_COLS { 3 } else { 0 });
    }
}

/// The 24-layer Qwen3.5-9B verify forward at n_s = 4 (T = 4, R = 3), fused vs unfused, on the
/// CPU reference (a minute here: on demand).
#[test]
#[ignore]
fn fusion_invariance_of_a_9b_forward_with_4_sequences_on_the_cpu() {
    let spec = forward_with_4_sequences(GdnShape::QWEN35_9B, 24, 4, 3);
    let out = sweep::off_on_cpu(&spec, 4, &mut ExactMufu).unwrap();
    assert_eq!(sweep::check_case(&spec, &out).map(|_| ()), Ok(()), "{}", out.report);
}

/// The same forward (T = 4, R = 3 and T = 2, R = 1) on the GPU's kernels.
#[test]
fn fusion_invariance_of_a_9b_forward_with_4_sequences_on_the_gpu() {
    let Some(gpu) = gpu_or_skip("24-layer forwards at n_s = 4") else { return };
    for (n_t, r) in [(4, 3), (2, 1)] {
        let spec = forward_with_4_sequences(GdnShape::QWEN35_9B, 24, n_t, r);
        let out = sweep::off_on_gpu(&gpu, &spec, 0x40 + n_t as u64).unwrap();
        assert_eq!(sweep::check_case(&spec, &out).map(|_| ()), Ok(()), "n_t {n_t} R {r}\n{}", out.report);
        println!("9B forward, 24 layers, n_s 4, T {n_t}, R {r}: identical; kernels off {} / on {}", out.off.total(), out.on.total());
    }
}
