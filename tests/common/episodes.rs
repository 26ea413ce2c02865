//! [replay] The exact-replay episode machinery (issue 26, `docs/rollback.md`) shared by the CPU
//! certificate (`tests/replay.rs`) and the GPU one (`tests/gpu_replay.rs`): the graphs of the
//! snapshot path, the sequential decode and the replay-mode layer, the accepted-count draws,
//! the snapshot path's bank and cell bookkeeping, and the episode driver with its bit-for-bit
//! comparisons. The executor is the variable: every graph runs on the CPU references
//! ([`Executor::Cpu`], MUFU by [`ExactMufu`]) or on the GPU ([`Executor::Gpu`], recorder off:
//! `graph::exec::run_gpu`, the engine's path), from the same built memory.
//!
//! Included by `#[path]` (not through `common/mod.rs`) so that the other test binaries do not
//! compile it.
#![allow(dead_code)]

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rgdn::fusion::sweep::{self, Planning};
use rgdn::fusion::{Options, Outcome, REGISTRY, Report, compile_for};
use rgdn::gpu::Gpu;
use rgdn::graph::Node;
use rgdn::graph::exec;
use rgdn::graph::layer::{Built, LayerSpec, Outputs, Rollback, StackSpec};
use rgdn::inputs::{self, Values};
use rgdn::layer::{GdnShape, LayerTensors, Step};
use rgdn::memory::{DeviceMemory, HostMemory};
use rgdn::reference::math::ExactMufu;
use rgdn::tensor::{BufferId, Tensor};

/// Verify steps per episode.
pub const STEPS: usize = 20;
/// Draft lengths certified.
pub const TOKENS: [usize; 4] = [1, 4, 8, 16];
/// Every output a token has (the layer table's names), in the order compared.
pub const OUTPUTS: [&str; 8] = ["conv_out", "q_norm", "k_norm", "alpha", "beta_raw", "beta", "gate", "attn_out"];
/// The weights every path takes from the first snapshot graph.
pub const WEIGHTS: [&str; 5] = ["conv_weight", "alpha_weight", "beta_weight", "dt_bias", "ssm_a"];
/// The log set's tensors, in the order [`ReplayArm::log`] gives them.
pub const LOG: [&str; 5] = ["qkv", "k", "v", "g", "beta"];

/// Failures are strings naming the step, the sequence, the paths and the buffer.
pub type Check<T> = Result<T, String>;

pub fn bytes_of(mem: &HostMemory, t: &Tensor) -> Vec<u8> {
    let r = t.layout.byte_range().expect("a contiguous tensor");
    mem.bytes(t.buffer)[r].to_vec()
}

pub fn write_bytes(mem: &mut HostMemory, t: &Tensor, bytes: &[u8]) {
    let r = t.layout.byte_range().expect("a contiguous tensor");
    assert_eq!(r.len(), bytes.len(), "bytes for a tensor of {:?}", t.ne());
    mem.bytes_mut(t.buffer)[r].copy_from_slice(bytes);
}

/// Part `i` of `n` equal parts of `bytes` (a cache row, or a token column of an output whose
/// columns are sequence-major: part s·T + t is token t of sequence s).
pub fn part(bytes: &[u8], n: usize, i: usize) -> &[u8] {
    assert_eq!(bytes.len() % n, 0);
    let len = bytes.len() / n;
    &bytes[i * len..(i + 1) * len]
}

/// An error naming the first float where `x` and `y` differ.
pub fn same(ctx: &str, what: &str, x: &[u8], y: &[u8]) -> Check<()> {
    if x.len() != y.len() {
        return Err(format!("{ctx}: {what}: {} bytes vs {}", x.len(), y.len()));
    }
    match x.iter().zip(y).position(|(p, q)| p != q) {
        Some(i) => {
            let f = |b: &[u8]| f32::from_le_bytes(b[i / 4 * 4..i / 4 * 4 + 4].try_into().expect("4 bytes"));
            Err(format!("{ctx}: {what} differs at float {} ({:e} vs {:e})", i / 4, f(x), f(y)))
        }
        None => Ok(()),
    }
}

/// Where the graphs run.
#[derive(Clone, Copy)]
pub enum Executor {
    /// The CPU references, every MUFU result by [`ExactMufu`] (`graph::exec::run_cpu`).
    Cpu,
    /// The GPU, as an engine runs it: `graph::exec::run_gpu` with the recorder as the caller
    /// left it (off in `tests/gpu_replay.rs`). MUFU results are the hardware's in every path.
    Gpu(&'static Gpu),
}

/// A graph's memory on its executor, read and written by tensor. On the GPU the host copy is a
/// mirror: a write marks its buffer for upload before the next run, a run marks every buffer
/// as newer on the device, and a read downloads its buffer first when it is (one download per
/// buffer and run, whatever is read from it).
pub struct GraphMemory {
    exec: Executor,
    host: HostMemory,
    device: Option<DeviceMemory>,
    /// Per buffer: the host copy is newer than the device's (upload before the next run).
    dirty: Vec<bool>,
    /// Per buffer: the device copy is newer than the host's (download before a read).
    stale: Vec<bool>,
}

impl GraphMemory {
    pub fn new(exec: Executor, host: HostMemory) -> Check<GraphMemory> {
        let n = host.n_buffers();
        let device = match exec {
            Executor::Cpu => None,
            Executor::Gpu(gpu) => Some(DeviceMemory::upload(gpu, &host).map_err(|e| format!("upload: {e}"))?),
        };
        Ok(GraphMemory { exec, host, device, dirty: vec![false; n], stale: vec![false; n] })
    }

    /// Brings the host copy of buffer `id` up to date.
    fn sync(&mut self, id: BufferId) -> Check<()> {
        if let (Executor::Gpu(gpu), Some(dev)) = (self.exec, &self.device)
            && self.stale[id.0]
        {
            let bytes = dev.download_buffer(gpu, id).map_err(|e| format!("download of buffer {}: {e}", id.0))?;
            self.host.bytes_mut(id).copy_from_slice(&bytes);
            self.stale[id.0] = false;
        }
        Ok(())
    }

    pub fn read(&mut self, t: &Tensor) -> Check<Vec<u8>> {
        self.sync(t.buffer)?;
        Ok(bytes_of(&self.host, t))
    }

    pub fn write(&mut self, t: &Tensor, bytes: &[u8]) -> Check<()> {
        // A write over the whole buffer needs no download of it first (the snapshot path's
        // caches: at 9B, n_s = 64, a GiB each way per step otherwise).
        let whole = t.layout.byte_range().is_some_and(|r| r.start == 0 && r.len() == self.host.bytes(t.buffer).len());
        if whole {
            self.stale[t.buffer.0] = false;
        }
        write_bytes(self.host_for(&[t.buffer])?, t, bytes);
        Ok(())
    }

    /// The host copy, for writes into `buffers` only (each brought up to date first, and
    /// uploaded before the next run).
    pub fn host_for(&mut self, buffers: &[BufferId]) -> Check<&mut HostMemory> {
        for &id in buffers {
            self.sync(id)?;
            self.dirty[id.0] = true;
        }
        Ok(&mut self.host)
    }

    /// Runs `nodes` on the executor. On the GPU, `fused` (an op the compilation must have put
    /// in the graph) must be one node that ran as one kernel launch, as the GPU sweep requires
    /// of every fused node.
    pub fn run(&mut self, nodes: &[Node], fused: Option<&str>) -> Check<()> {
        match (self.exec, &mut self.device) {
            (Executor::Gpu(gpu), Some(dev)) => {
                for (id, dirty) in self.dirty.iter_mut().enumerate().filter(|(_, d)| **d) {
                    dev.write(gpu, BufferId(id), self.host.bytes(BufferId(id))).map_err(|e| format!("upload of buffer {id}: {e}"))?;
                    *dirty = false;
                }
                let launches = exec::run_gpu(gpu, nodes, dev).map_err(|e| format!("the graph did not run on the GPU: {e}"))?;
                if let Some(op) = fused
                    && launches.of(op) != (1, 1)
                {
                    let (kernels, nodes) = launches.of(op);
                    return Err(format!("{op}: {nodes} node(s) made {kernels} launches on the GPU (want one node, one kernel)"));
                }
                // Any buffer may have been written (the graph's caches, outputs, logs).
                self.stale.fill(true);
            }
            _ => exec::run_cpu(nodes, &mut self.host, &mut ExactMufu).map_err(|e| format!("the graph did not run: {e}"))?,
        }
        Ok(())
    }
}

/// A one-layer graph's memory, read and written by the layer table's field names (the snapshot
/// graph and the replay graph alike).
pub trait LayerFields {
    fn built(&self) -> &Built;
    fn mem(&mut self) -> &mut GraphMemory;

    fn field(&self, name: &str) -> Tensor {
        let i = LayerTensors::index_of(name).expect("a field of the layer table");
        self.built().layers[0].t.to_array()[i]
    }

    fn get(&mut self, name: &str) -> Check<Vec<u8>> {
        let t = self.field(name);
        self.mem().read(&t)
    }

    fn set(&mut self, name: &str, bytes: &[u8]) -> Check<()> {
        let t = self.field(name);
        self.mem().write(&t, bytes)
    }
}

/// Builds `spec` (fusion-aware planning) and compiles `nodes(built)` with `options`; the
/// graph's memory is moved out of the build onto the executor.
fn build_and_compile(
    spec: &StackSpec,
    seed: u64,
    options: Options,
    nodes: &dyn Fn(&Built) -> Vec<Vec<Node>>,
) -> (Built, Vec<(Vec<Node>, Report)>, HostMemory) {
    let mut built = sweep::build(spec, seed, Planning::FusionAware).expect("the graph builds");
    let compiled = nodes(&built).into_iter().map(|n| compile_for(n, &built.live_out(), options, Some(&built.mem))).collect();
    let mem = std::mem::take(&mut built.mem);
    (built, compiled, mem)
}

/// Every registered fusion fired on the layer exactly where its scope (`fires_on`) says, as
/// the GPU sweep requires (`fusion::sweep::check_case`).
pub fn fired_where_scoped(spec: &LayerSpec, report: &Report) -> Check<()> {
    let layer = report.layers.first().ok_or("no layer in the report")?;
    for f in REGISTRY {
        let outcome = layer.outcome(f.name).ok_or(format!("{} not in the report", f.name))?;
        match (outcome, (f.fires_on)(spec)) {
            (Outcome::Fused(_), true) | (Outcome::Refused(_), false) => {}
            (o, want) => return Err(format!("{}: {o} (expected it to {})", f.name, if want { "fire" } else { "be refused" })),
        }
    }
    Ok(())
}

/// One layer graph (`graph::layer`, one layer, every product an output), compiled with
/// `options` ([`Options::OFF`]: today's unfused launch sequence; [`Options::ALL`]: the batched
/// layer step, which must fire up to `layer_step::max_seqs` sequences — the three fused
/// launches above — and every fusion exactly where its scope says), with a memory
/// of its own that the caller's bytes are written into before each run.
pub struct LayerGraph {
    built: Built,
    nodes: Vec<Node>,
    mem: GraphMemory,
    /// When compiled with fusions, the fused op that must run as one launch on the GPU:
    /// GDN_LAYER_STEP, or above its sequence limit the batched GATED_DELTA_NET_FROM_CACHE.
    fused: Option<&'static str>,
}

impl LayerFields for LayerGraph {
    fn built(&self) -> &Built {
        &self.built
    }
    fn mem(&mut self) -> &mut GraphMemory {
        &mut self.mem
    }
}

impl LayerGraph {
    pub fn new(exec: Executor, shape: GdnShape, step: Step, seed: u64, options: Options) -> Check<LayerGraph> {
        let spec = StackSpec { layers: vec![LayerSpec::new(shape, step)], outputs: Outputs::Products };
        let (built, mut compiled, host) = build_and_compile(&spec, seed, options, &|b| vec![b.fresh_nodes().expect("nodes")]);
        let (nodes, report) = compiled.pop().expect("one compilation");
        // Fused, the step is one GDN_LAYER_STEP up to `layer_step::max_seqs` sequences, and the
        // three fused launches above (the batched GATED_DELTA_NET_FROM_CACHE the one checked).
        let one_launch = step.n_seqs() <= rgdn::fusion::layer_step::max_seqs();
        if options != Options::OFF {
            let (fired, want) = (report.fired("layer_step"), usize::from(one_launch));
            if fired != want || report.fired("state_read") != 1 {
                return Err(format!("{step:?}: layer_step fired {fired} time(s), want {want} (and state_read once):\n{report}"));
            }
            if options == Options::ALL {
                fired_where_scoped(&spec.layers[0], &report).map_err(|e| format!("{step:?}: {e}\n{report}"))?;
            }
        }
        let fused = (options != Options::OFF).then_some(if one_launch { "GDN_LAYER_STEP" } else { "GATED_DELTA_NET_FROM_CACHE" });
        Ok(LayerGraph { built, nodes, mem: GraphMemory::new(exec, host)?, fused })
    }

    /// Runs the step with the step inputs `qkv` ([C, T, n_s]) and `cur` ([E, T·n_s]), sequence
    /// s reading cache row `sources[s]`; every output's bytes, in [`OUTPUTS`] order.
    pub fn run(&mut self, qkv: &[u8], cur: &[u8], sources: &[usize]) -> Check<Vec<Vec<u8>>> {
        let v = self.built.layers[0].clone();
        self.mem.write(&v.qkv_src, qkv)?;
        self.mem.write(&v.cur_src, cur)?;
        assert_eq!(sources.len(), v.t.source_rows.ne()[0]);
        let host = self.mem.host_for(&[v.t.source_rows.buffer])?;
        for (s, &row) in sources.iter().enumerate() {
            host.write_u32(&v.t.source_rows, [s, 0, 0, 0], u32::try_from(row).expect("a cache row")).map_err(|e| e.to_string())?;
        }
        self.mem.run(&self.nodes, self.fused)?;
        OUTPUTS.iter().map(|name| self.get(name)).collect()
    }
}

/// The weights of the episode, by field name.
pub type Weights = Vec<(&'static str, Vec<u8>)>;
/// Per sequence: (conv window row, ssm state row).
pub type Rows = Vec<(Vec<u8>, Vec<u8>)>;

/// Today's step with 1 + R = T snapshot rows and ggml's rollback, on two banks of n_s cells
/// (`tests/replay.rs`'s module docs): step i writes bank i mod 2 (sequence s writes cell
/// bank·n_s + s); a sequence reads its accepted state through `s_copy = (T − a)·M + cell` in the
/// bank the previous step wrote; one that accepted nothing while its state sits in the bank
/// about to be written has that row pair copied (bits) to group 0 of its cell in the other bank.
pub struct SnapshotPath {
    pub name: &'static str,
    banks: [LayerGraph; 2],
    conv: Vec<u8>,
    ssm: Vec<u8>,
    /// Per sequence, where its accepted state is: (bank, group).
    at: Vec<(usize, usize)>,
    n_s: usize,
    n_t: usize,
    /// Copies made for sequences that accepted nothing from the bank about to be written.
    pub moves: usize,
}

impl SnapshotPath {
    pub fn new(exec: Executor, shape: GdnShape, n_s: usize, n_t: usize, seed: u64, options: Options) -> Check<SnapshotPath> {
        let cells = 2 * n_s;
        let step = |bank: usize| {
            let first = Step { cells, kv_head: bank * n_s, src_cell: (1 - bank) * n_s, ..Step::new(n_t, n_t - 1) };
            let others: Vec<(usize, usize)> = (1..n_s).map(|s| ((1 - bank) * n_s + s, 0)).collect();
            first.with_sequences(&others).expect("≤ 256 sequences")
        };
        let mut banks = [LayerGraph::new(exec, shape, step(0), seed, options)?, LayerGraph::new(exec, shape, step(1), seed, options)?];
        for name in WEIGHTS {
            let bytes = banks[0].get(name)?;
            banks[1].set(name, &bytes)?;
        }
        let (conv, ssm) = (banks[0].get("conv_cache")?, banks[0].get("ssm_cache")?);
        // Every sequence starts from its cell in bank 1, live group: step 0 writes bank 0.
        let name = if options == Options::OFF { "snapshots unfused" } else { "snapshots fused" };
        Ok(SnapshotPath { name, banks, conv, ssm, at: vec![(1, 0); n_s], n_s, n_t, moves: 0 })
    }

    pub fn weights(&mut self) -> Check<Weights> {
        WEIGHTS.iter().map(|w| Ok((*w, self.banks[0].get(w)?))).collect()
    }

    fn cells(&self) -> usize {
        2 * self.n_s
    }

    fn rows(&self) -> usize {
        self.cells() * self.n_t
    }

    fn row_of(&self, s: usize, (bank, group): (usize, usize)) -> usize {
        group * self.cells() + bank * self.n_s + s
    }

    /// Sequence s's accepted (conv row, ssm row).
    pub fn committed(&self, s: usize) -> (&[u8], &[u8]) {
        let row = self.row_of(s, self.at[s]);
        (part(&self.conv, self.rows(), row), part(&self.ssm, self.rows(), row))
    }

    /// Every sequence's accepted rows (the other paths' starting point).
    pub fn start(&self) -> Rows {
        (0..self.n_s)
            .map(|s| {
                let (conv, ssm) = self.committed(s);
                (conv.to_vec(), ssm.to_vec())
            })
            .collect()
    }

    /// Step `i` (writing bank i mod 2) on the tokens `qkv`, `cur`: every output.
    pub fn step(&mut self, i: usize, qkv: &[u8], cur: &[u8]) -> Check<Vec<Vec<u8>>> {
        let bank = i % 2;
        let rows = self.rows();
        for s in 0..self.n_s {
            if self.at[s].0 == bank {
                let (from, to) = (self.row_of(s, self.at[s]), self.row_of(s, (1 - bank, 0)));
                for cache in [&mut self.conv, &mut self.ssm] {
                    let len = cache.len() / rows;
                    cache.copy_within(from * len..(from + 1) * len, to * len);
                }
                self.at[s] = (1 - bank, 0);
                self.moves += 1;
            }
        }
        let sources: Vec<usize> = (0..self.n_s).map(|s| self.row_of(s, self.at[s])).collect();
        let graph = &mut self.banks[bank];
        graph.set("conv_cache", &self.conv)?;
        graph.set("ssm_cache", &self.ssm)?;
        let outputs = graph.run(qkv, cur, &sources)?;
        (self.conv, self.ssm) = (graph.get("conv_cache")?, graph.get("ssm_cache")?);
        Ok(outputs)
    }

    /// ggml's rollback after step `i`: a sequence that accepted a > 0 tokens continues from
    /// snapshot slot T − a of its cell in the bank the step wrote; a = 0 keeps its state.
    pub fn accept(&mut self, i: usize, accepted: &[usize]) {
        for (s, &a) in accepted.iter().enumerate() {
            if a > 0 {
                self.at[s] = (i % 2, self.n_t - a);
            }
        }
    }
}

/// The plain decode: one T = 1, R = 0 step per accepted token, each sequence on its own
/// (the unfused graph).
pub struct SequentialPath {
    graph: LayerGraph,
    /// Per sequence: (conv row, ssm row).
    pub rows: Rows,
}

impl SequentialPath {
    pub fn new(exec: Executor, shape: GdnShape, weights: &Weights, start: Rows, seed: u64) -> Check<SequentialPath> {
        let mut graph = LayerGraph::new(exec, shape, Step::new(1, 0), seed, Options::OFF)?;
        for (name, bytes) in weights {
            graph.set(name, bytes)?;
        }
        Ok(SequentialPath { graph, rows: start })
    }

    /// Decodes one token of sequence s (its qkv column [C], its cur column [E]); its outputs.
    pub fn decode(&mut self, s: usize, qkv: &[u8], cur: &[u8]) -> Check<Vec<Vec<u8>>> {
        let (conv, ssm) = &self.rows[s];
        self.graph.set("conv_cache", conv)?;
        self.graph.set("ssm_cache", ssm)?;
        let outputs = self.graph.run(qkv, cur, &[0])?;
        self.rows[s] = (self.graph.get("conv_cache")?, self.graph.get("ssm_cache")?);
        Ok(outputs)
    }
}

/// A path that keeps one committed row pair per sequence and a token log (the replay
/// reference, the replay-mode layer graph).
pub trait ReplayArm {
    fn name(&self) -> &str;
    /// Step `i`: replay the previous step's `accepted` counts (`None` before the first step)
    /// and commit; with `tokens` = (qkv, cur), verify them into log set i mod 2 and give every
    /// output ([`OUTPUTS`] order); with `None` (after the last step) commit alone.
    fn step(&mut self, i: usize, tokens: Option<(&[u8], &[u8])>, accepted: Option<&[usize]>) -> Check<Option<Vec<Vec<u8>>>>;
    /// Sequence s's committed (conv window row, ssm state row).
    fn committed(&mut self, s: usize) -> Check<(Vec<u8>, Vec<u8>)>;
    /// Log set `set`'s tensors ([`LOG`] order).
    fn log(&mut self, set: usize) -> Check<Vec<Vec<u8>>>;
}

/// What the registry does with a replay layer: the gate path's fusions and `state_read` (the
/// verify's ssm GET_ROWS + GATED_DELTA_NET, its slot in scratch) fire through the one legality
/// check; `conv_chain` fires with the window commit and the log copy of the inputs in front of
/// the chain (one GDN_CONV_CHAIN with a `ConvCommit`, no snapshot row); the layer step does not
/// fire (a replay layer is out of its scope); `replay_verify` fuses the replay with the
/// verify's GATED_DELTA_NET_FROM_CACHE (no scratch slot written).
pub fn check_replay_report(report: &Report) -> Check<()> {
    check_replay_report_of(report, Options::ALL)
}

/// [`check_replay_report`] for `options`: a set without `replay_verify` leaves the replay and the
/// verify apart (what [`Options::ON`], the defaults a user gets, did before `replay_verify`
/// joined them).
pub fn check_replay_report_of(report: &Report, options: Options) -> Check<()> {
    let layer = report.layers.first().ok_or("no layer in the report")?;
    let outcome = |name: &str| layer.outcome(name).ok_or(format!("no outcome for {name}"));
    if !outcome("state_read")?.fused() {
        return Err("state_read did not fire".into());
    }
    if !outcome("gate_pair")?.fused() {
        return Err("gate_pair did not fire".into());
    }
    // The commit (GET_ROWS, CONCAT, CPY_SNAPSHOTS, GET_ROWS), the verify's chain (GET_ROWS,
    // CONCAT, SSM_CONV, two L2_NORMs) and the log copies of the inputs and v (k is the log's
    // already: the L2 norm writes there) → one GDN_CONV_CHAIN.
    match outcome("conv_chain")? {
        Outcome::Fused(w)
            if w.fused_op == "GDN_CONV_CHAIN" && {
                let mut ops = w.replaced_ops.clone();
                ops.sort_unstable();
                ops == [
                    "CONCAT",
                    "CONCAT",
                    "CPY",
                    "CPY",
                    "CPY_SNAPSHOTS",
                    "GET_ROWS",
                    "GET_ROWS",
                    "GET_ROWS",
                    "L2_NORM",
                    "L2_NORM",
                    "SSM_CONV",
                ]
            } => {}
        o => return Err(format!("conv_chain: {o} (expected it to fuse the commit, the chain and two log copies)")),
    }
    if outcome("layer_step")?.fused() {
        return Err("layer_step fired on a replay layer".into());
    }
    if !options.allows("replay_verify") {
        return match outcome("replay_verify")? {
            Outcome::Fused(_) => Err("replay_verify fired though the options leave it out".into()),
            _ => Ok(()),
        };
    }
    // [replay] The replay and the verify's GATED_DELTA_NET_FROM_CACHE → one
    // GATED_DELTA_NET_REPLAY_VERIFY, its scratch slot (and nothing else) left unwritten.
    match outcome("replay_verify")? {
        Outcome::Fused(w)
            if w.fused_op == "GATED_DELTA_NET_REPLAY_VERIFY"
                && w.replaced_ops == ["GATED_DELTA_NET_REPLAY", "GATED_DELTA_NET_FROM_CACHE"] => {}
        o => return Err(format!("replay_verify: {o} (expected it to fuse the replay and the verify)")),
    }
    // [overlap] With the overlap pass, a step of three launches overlaps them wherever the
    // products run as tiles (the planner keeps the run's values apart: no conflict) and the
    // replay-verify's grid is small enough to start early (the pass's cost rule; where it is
    // not, the products stay plain by the run rule, whatever the planner placed); without it,
    // no decision.
    if !options.allows(rgdn::fusion::overlap::OVERLAP) && !report.overlaps.is_empty() {
        return Err("the overlap pass ran though the options leave it out".into());
    }
    for d in &report.overlaps {
        match &d.outcome {
            Ok(_) => {}
            Err(
                rgdn::fusion::overlap::Refusal::PreviousWaits { .. }
                | rgdn::fusion::overlap::Refusal::ManyParked { .. }
                | rgdn::fusion::overlap::Refusal::RunEndsParked { .. },
            ) => {}
            Err(r) => return Err(format!("node {} ({}) did not start early: {r}", d.node, d.op)),
        }
    }
    // [replay] The three fused parts → one GDN_LAYER_STEP_REPLAY where its scope holds (up to
    // `REPLAY_STEP_MAX_SEQS` sequences within the readiness flags); refused by that name above.
    match outcome("replay_step")? {
        Outcome::Fused(_) if !options.allows("replay_step") => Err("replay_step fired though the options leave it out".into()),
        Outcome::Fused(w)
            if w.fused_op == "GDN_LAYER_STEP_REPLAY"
                && w.replaced_ops == ["GDN_CONV_CHAIN", "MUL_MAT_VEC_PAIR_GATE", "GATED_DELTA_NET_REPLAY_VERIFY"] =>
        {
            Ok(())
        }
        Outcome::Refused(rgdn::fusion::Refusal::TooManySequences { .. } | rgdn::fusion::Refusal::Off) => Ok(()),
        _ if !options.allows("replay_step") => Ok(()),
        o => Err(format!("replay_step: {o} (expected it to fuse the three parts, or to refuse more sequences than it takes)")),
    }
}

/// A bug planted in the replay graph's inputs (the certificate must fail with each;
/// `GraphPlant::None` everywhere else). Test-only: it changes what the test writes into the
/// graph's index buffers, not the library.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum GraphPlant {
    None,
    /// The window commit picks the window one token short (its `window_rows` one group later);
    /// the ssm replay is right.
    WindowOffByOne,
    /// The graph is told one accepted token fewer (a − 1, at least 0): its replay and its
    /// window commit both stop a token short, consistently.
    AcceptedOffByOne,
}

/// [replay] The replay mode's layer graph (`graph::layer` with [`Rollback::Replay`]: the
/// unfused GATED_DELTA_NET_REPLAY, the window commit, the verify chain with no cache row
/// written, the log copies), compiled with `options` (with [`Options::ALL`] the report is
/// checked: `replay_verify` fused the replay and the verify): sequence s commits to cache row s
/// (cells = n_s, R = 0), step i runs the nodes writing log set i mod 2.
pub struct ReplayGraph {
    name: &'static str,
    built: Built,
    /// The nodes writing log set 0 and 1.
    nodes: [Vec<Node>; 2],
    mem: GraphMemory,
    /// The fused op whose one launch per run the GPU checks: GDN_LAYER_STEP_REPLAY where
    /// `replay_step` fired, else GATED_DELTA_NET_REPLAY_VERIFY (or GDN_CONV_CHAIN without
    /// `replay_verify`).
    fused: Option<&'static str>,
    n_s: usize,
    /// A bug planted in the graph path's per-step index (`GraphPlant::None` unless a test
    /// plants one).
    pub plant: GraphPlant,
    /// Both caches as the last step left them, read once per step for every sequence's
    /// [`ReplayArm::committed`] (on the GPU at the 9B's n_s = 64 a cache is 128 MiB: read per
    /// sequence, 32 GiB a step, the episode never finished).
    caches: Option<(Vec<u8>, Vec<u8>)>,
}

impl LayerFields for ReplayGraph {
    fn built(&self) -> &Built {
        &self.built
    }
    fn mem(&mut self) -> &mut GraphMemory {
        &mut self.mem
    }
}

impl ReplayGraph {
    /// The graph with the episode's weights and every sequence's starting rows.
    pub fn new(
        exec: Executor,
        shape: GdnShape,
        (n_s, n_t, seed): (usize, usize, u64),
        options: Options,
        weights: &Weights,
        start: &Rows,
    ) -> Check<ReplayGraph> {
        let others: Vec<(usize, usize)> = (1..n_s).map(|s| (s, 0)).collect();
        let step = Step { cells: n_s, ..Step::new(n_t, 0) }.with_sequences(&others).expect("≤ 256 sequences");
        let layer = LayerSpec { rollback: Rollback::Replay { log_set: 0 }, ..LayerSpec::new(shape, step) };
        let spec = StackSpec { layers: vec![layer], outputs: Outputs::Products };
        let (built, compiled, host) =
            build_and_compile(&spec, seed, options, &|b| [0, 1].map(|set| b.replay_nodes(set).expect("nodes")).to_vec());
        let mut nodes = [Vec::new(), Vec::new()];
        // The launch the GPU checks for: the whole step's (`replay_step`, where it fired), else
        // the fused replay and verify, or in a set without `replay_verify` the commit chain's.
        let mut fused_op = "GDN_CONV_CHAIN";
        // [overlap] Whether the pass let the replay-verify start early (both log sets alike).
        let mut overlapped = false;
        for (set, (n, report)) in compiled.into_iter().enumerate() {
            overlapped |= report.overlaps.iter().any(|d| d.op == "GATED_DELTA_NET_REPLAY_VERIFY" && d.outcome.is_ok());
            if options != Options::OFF {
                check_replay_report_of(&report, options).map_err(|e| format!("n_s {n_s}, T {n_t}, log set {set}: {e}\n{report}"))?;
            }
            if report.fired("replay_step") == 1 {
                fused_op = "GDN_LAYER_STEP_REPLAY";
            } else if report.fired("replay_verify") == 1 {
                fused_op = "GATED_DELTA_NET_REPLAY_VERIFY";
            }
            nodes[set] = n;
        }
        let (name, fused) = match options {
            Options::OFF => ("replay graph unfused", None),
            o if !o.allows("replay_verify") => ("replay graph fused without replay_verify", Some(fused_op)),
            _ if overlapped => ("replay graph fused, its launches overlapped", Some(fused_op)),
            _ => ("replay graph fused", Some(fused_op)),
        };
        let mut g =
            ReplayGraph { name, built, nodes, mem: GraphMemory::new(exec, host)?, fused, n_s, plant: GraphPlant::None, caches: None };
        for (name, bytes) in weights {
            g.set(name, bytes)?;
        }
        let (conv, ssm): (Vec<&[u8]>, Vec<&[u8]>) = start.iter().map(|(c, s)| (c.as_slice(), s.as_slice())).unzip();
        g.set("conv_cache", &conv.concat())?;
        g.set("ssm_cache", &ssm.concat())?;
        Ok(g)
    }
}

impl ReplayArm for ReplayGraph {
    fn name(&self) -> &str {
        self.name
    }

    /// After the last step, a step on zero tokens: its replay commits the last acceptance, and
    /// its verify writes no cache row (its outputs are not looked at).
    fn step(&mut self, i: usize, tokens: Option<(&[u8], &[u8])>, accepted: Option<&[usize]>) -> Check<Option<Vec<Vec<u8>>>> {
        let v = self.built.layers[0].clone();
        let r = v.replay.expect("a replay layer");
        let zeros = (
            vec![0u8; v.qkv_src.layout.byte_range().expect("contiguous").len()],
            vec![0u8; v.cur_src.layout.byte_range().expect("contiguous").len()],
        );
        let (qkv, cur) = tokens.unwrap_or((&zeros.0, &zeros.1));
        self.mem.write(&v.qkv_src, qkv)?;
        self.mem.write(&v.cur_src, cur)?;
        let none = vec![0; self.n_s];
        let accepted = accepted.unwrap_or(&none);
        let told: Vec<usize> = match self.plant {
            GraphPlant::AcceptedOffByOne => accepted.iter().map(|a| a.saturating_sub(1)).collect(),
            _ => accepted.to_vec(),
        };
        let host = self.mem.host_for(&[r.accepted.buffer, r.window_rows.buffer])?;
        r.set_accepted(host, &told).map_err(|e| format!("accepted counts refused: {e}"))?;
        if self.plant == GraphPlant::WindowOffByOne {
            for (s, &a) in told.iter().enumerate() {
                let row = (r.n_tokens() - a.saturating_sub(1)) * self.n_s + s;
                host.write_u32(&r.window_rows, [s, 0, 0, 0], row as u32).map_err(|e| e.to_string())?;
            }
        }
        self.caches = None;
        self.mem.run(&self.nodes[i % 2], self.fused)?;
        if tokens.is_none() {
            return Ok(None);
        }
        // The step's k, g and β are its log set's (the L2 norm and the products write them
        // there).
        let log = r.logs[i % 2];
        let output = |g: &mut Self, name: &str| match name {
            "k_norm" => g.mem.read(&log.k),
            "gate" => g.mem.read(&log.g),
            "beta" => g.mem.read(&log.beta),
            _ => g.get(name),
        };
        Ok(Some(OUTPUTS.iter().map(|name| output(self, name)).collect::<Check<_>>()?))
    }

    /// Cache rows s.
    fn committed(&mut self, s: usize) -> Check<(Vec<u8>, Vec<u8>)> {
        if self.caches.is_none() {
            self.caches = Some((self.get("conv_cache")?, self.get("ssm_cache")?));
        }
        let (conv, ssm) = self.caches.as_ref().expect("read above");
        Ok((part(conv, self.n_s, s).to_vec(), part(ssm, self.n_s, s).to_vec()))
    }

    fn log(&mut self, set: usize) -> Check<Vec<Vec<u8>>> {
        let log = self.built.layers[0].replay.expect("a replay layer").logs[set];
        [log.qkv, log.k, log.v, log.g, log.beta].iter().map(|t| self.mem.read(t)).collect()
    }
}

/// What an episode certified.
#[derive(Debug, Default)]
pub struct Tally {
    pub steps: usize,
    /// Per-sequence state comparisons (each: conv window and ssm state, against every path).
    pub states: usize,
    /// Tokens whose outputs were compared against the snapshot paths (each), and against the
    /// sequential decode.
    pub snapshot_tokens: usize,
    pub decoded_tokens: usize,
    /// Tokens whose outputs and log were compared against each further replay arm.
    pub graph_tokens: usize,
    /// Accepted counts drawn: 0, T, in between.
    pub none: usize,
    pub all: usize,
    pub some: usize,
    pub moves: usize,
    /// [overlap] An arm's launches overlapped (the overlap pass let its replay-verify start
    /// early), so the certificate covers that form of the step.
    pub overlapped: bool,
}

/// The previous step of an episode: its inputs, the replay path's outputs, the accepted counts.
struct Previous {
    qkv: Vec<u8>,
    cur: Vec<u8>,
    outputs: Vec<Vec<u8>>,
    accepted: Vec<usize>,
}

/// The accepted count of sequence s at step i: every sequence sees 0, T and one in between in
/// its first three steps, then a quarter 0, a quarter T, the rest uniform in 0 ..= T.
pub fn draw_accepted(rng: &mut StdRng, n_t: usize, i: usize, s: usize) -> usize {
    let between = |rng: &mut StdRng| if n_t > 1 { rng.random_range(1..n_t) } else { rng.random_range(0..=1) };
    if i < 3 {
        return match (i + s) % 3 {
            0 => 0,
            1 => n_t,
            _ => between(rng),
        };
    }
    match rng.random_range(0..4) {
        0 => 0,
        1 => n_t,
        _ => rng.random_range(0..=n_t),
    }
}

/// One episode's sizes, executor and snapshot compilations.
#[derive(Clone, Copy)]
pub struct Setup {
    pub exec: Executor,
    pub shape: GdnShape,
    pub n_s: usize,
    pub n_t: usize,
    pub seed: u64,
    /// The snapshot path's compilations: [`Options::OFF`] (ggml's launch sequence) and/or
    /// [`Options::ALL`] (the batched layer step).
    pub snapshots: &'static [Options],
}

/// The replay arms of an episode: the one under test, whose outputs and committed rows every
/// other path must equal, and further arms compared with it (outputs, log sets, rows).
pub struct Arms {
    pub primary: Box<dyn ReplayArm>,
    pub others: Vec<Box<dyn ReplayArm>>,
}

/// One episode of [`STEPS`] steps of T tokens for n_s sequences: the replay arms against the
/// snapshot paths and the sequential decode (`arms` builds them from the weights and every
/// sequence's starting rows, both taken from the first snapshot graph). After every step, and
/// once more after the last acceptance, bit for bit: every further arm's outputs, log set and
/// committed rows equal the primary's; (a) the primary's committed rows equal every snapshot
/// path's accepted rows, and every output of every token equals every snapshot step's; (b) the
/// same rows equal the sequential decode's after the accepted tokens, and every output of each
/// accepted token equals the single-token step's. The first differing byte is an error naming
/// the step, the sequence, the paths and the buffer (`label` names the episode's variant).
pub fn episode(setup: &Setup, label: &str, arms: &mut dyn FnMut(&Weights, &Rows) -> Check<Arms>) -> Check<Tally> {
    let Setup { exec, shape, n_s, n_t, seed, .. } = *setup;
    let (c, e) = (shape.channels(), shape.n_embd);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut snaps: Vec<SnapshotPath> =
        setup.snapshots.iter().map(|&o| SnapshotPath::new(exec, shape, n_s, n_t, seed, o)).collect::<Check<_>>()?;
    let weights = snaps[0].weights()?;
    let start = snaps[0].start();
    let Arms { mut primary, mut others } = arms(&weights, &start)?;
    let mut seq = SequentialPath::new(exec, shape, &weights, start, seed)?;
    let overlapped = primary.name().contains("overlapped") || others.iter().any(|g| g.name().contains("overlapped"));
    let mut tally = Tally { overlapped, ..Tally::default() };
    let to_bytes = |v: Vec<f32>| v.into_iter().flat_map(f32::to_le_bytes).collect::<Vec<u8>>();
    let cols = n_t * n_s;
    let mut previous: Option<Previous> = None;
    for i in 0..=STEPS {
        let ctx = |what: &str| format!("n_s {n_s}, T {n_t}, seed {seed:#x}, {label}: step {i}: {what}");
        // Replay the previous step's acceptance and verify this step's tokens (after the last
        // step, replay its acceptance alone).
        let inputs = (i < STEPS).then(|| {
            let qkv = to_bytes(inputs::fill(&mut rng, c * cols, Values::Uniform(1.0)).expect("a drawable range"));
            (qkv, to_bytes(inputs::fill(&mut rng, e * cols, Values::Uniform(1.0)).expect("a drawable range")))
        });
        let tokens = inputs.as_ref().map(|(q, c)| (q.as_slice(), c.as_slice()));
        let accepted = previous.as_ref().map(|p| p.accepted.as_slice());
        let outputs = primary.step(i, tokens, accepted)?;
        // The further arms' step i: every output and the log set it wrote against the primary's.
        for g in &mut others {
            let y = g.step(i, tokens, accepted)?;
            if let (Some(outs), Some(y)) = (&outputs, y) {
                for s in 0..n_s {
                    for t in 0..n_t {
                        let (col, ctx) = (s * n_t + t, ctx(&format!("sequence {s}, token {t}, {} vs {}", primary.name(), g.name())));
                        for ((name, x), y) in OUTPUTS.iter().zip(outs).zip(&y) {
                            same(&ctx, name, part(x, cols, col), part(y, cols, col))?;
                        }
                    }
                }
                let ctx = ctx(&format!("log set {}, {} vs {}", i % 2, primary.name(), g.name()));
                for ((name, x), y) in LOG.iter().zip(primary.log(i % 2)?).zip(g.log(i % 2)?) {
                    same(&ctx, &format!("log {name}"), &x, &y)?;
                }
                tally.graph_tokens += cols;
            }
        }
        // (b) The sequential decode of the previous step's accepted tokens: every output of
        // each.
        if let Some(Previous { qkv, cur, outputs: outs, accepted }) = &previous {
            for (s, &a) in accepted.iter().enumerate() {
                for t in 0..a {
                    let col = s * n_t + t;
                    let y = seq.decode(s, part(qkv, cols, col), part(cur, cols, col))?;
                    let ctx = ctx(&format!("sequence {s}, token {t} of the previous step, {} vs sequential", primary.name()));
                    for ((name, x), y) in OUTPUTS.iter().zip(outs).zip(&y) {
                        same(&ctx, name, part(x, cols, col), y)?;
                    }
                    tally.decoded_tokens += 1;
                }
            }
        }
        // Every sequence's committed state: (a) the snapshot paths' accepted rows, (b) the
        // sequential decode's rows, and the further arms' rows.
        for s in 0..n_s {
            let (conv, ssm) = primary.committed(s)?;
            let (ctx, p) = (ctx(&format!("sequence {s}, committed")), primary.name().to_string());
            for snap in &snaps {
                let (snap_conv, snap_ssm) = snap.committed(s);
                same(&ctx, &format!("conv window, {p} vs {}", snap.name), &conv, snap_conv)?;
                same(&ctx, &format!("ssm state, {p} vs {}", snap.name), &ssm, snap_ssm)?;
            }
            same(&ctx, &format!("conv window, {p} vs sequential"), &conv, &seq.rows[s].0)?;
            for g in &mut others {
                let (g_conv, g_ssm) = g.committed(s)?;
                same(&ctx, &format!("conv window, {p} vs {}", g.name()), &conv, &g_conv)?;
                same(&ctx, &format!("ssm state, {p} vs {}", g.name()), &ssm, &g_ssm)?;
            }
            same(&ctx, &format!("ssm state, {p} vs sequential"), &ssm, &seq.rows[s].1)?;
            tally.states += 1;
        }
        let (Some((qkv, cur)), Some(outs)) = (inputs, outputs) else { break };
        // (a) Every output of every token of this step, against the snapshot steps.
        for snap in &mut snaps {
            let y = snap.step(i, &qkv, &cur)?;
            for s in 0..n_s {
                for t in 0..n_t {
                    let (col, ctx) = (s * n_t + t, ctx(&format!("sequence {s}, token {t}, {} vs {}", primary.name(), snap.name)));
                    for ((name, x), y) in OUTPUTS.iter().zip(&outs).zip(&y) {
                        same(&ctx, name, part(x, cols, col), part(y, cols, col))?;
                    }
                }
            }
        }
        tally.snapshot_tokens += cols;
        let accepted: Vec<usize> = (0..n_s).map(|s| draw_accepted(&mut rng, n_t, i, s)).collect();
        for &a in &accepted {
            match a {
                0 => tally.none += 1,
                a if a == n_t => tally.all += 1,
                _ => tally.some += 1,
            }
        }
        for snap in &mut snaps {
            snap.accept(i, &accepted);
        }
        previous = Some(Previous { qkv, cur, outputs: outs, accepted });
        tally.steps += 1;
    }
    tally.moves = snaps[0].moves;
    // Every sequence saw a = 0, a = T and (T > 1) one in between.
    if !(tally.none >= n_s && tally.all >= n_s && (n_t == 1 || tally.some >= n_s)) {
        return Err(format!("n_s {n_s}, T {n_t}: the draws missed 0, T or a count between: {tally:?}"));
    }
    Ok(tally)
}

/// The GPU certificate's episode (`tests/gpu_replay.rs`), on any executor: the replay-mode
/// layer graph compiled with every fusion (`replay_verify` among them: the report is checked)
/// is the arm under test, with `plant` planted in it; the unfused replay graph is compared
/// with it when `unfused` says so.
pub fn graph_episode(setup: &Setup, plant: GraphPlant, unfused: bool) -> Check<Tally> {
    let (shape, dims, exec) = (setup.shape, (setup.n_s, setup.n_t, setup.seed), setup.exec);
    let label = format!("replay graph fused is the arm under test, plant {plant:?}");
    episode(setup, &label, &mut |weights, start| {
        let mut fused = ReplayGraph::new(exec, shape, dims, Options::ALL, weights, start)?;
        fused.plant = plant;
        let mut others: Vec<Box<dyn ReplayArm>> = Vec::new();
        if unfused {
            others.push(Box::new(ReplayGraph::new(exec, shape, dims, Options::OFF, weights, start)?));
        }
        // Beside every fusion and the overlap pass (`Options::ALL`; up to 4 sequences
        // `replay_step`'s one launch) the defaults (`Options::ON`: the step as three launches)
        // and the set without `replay_verify` (the replay and the verify's recurrence as two
        // launches).
        others.push(Box::new(ReplayGraph::new(exec, shape, dims, Options::ON, weights, start)?));
        others.push(Box::new(ReplayGraph::new(exec, shape, dims, Options::ON.without("replay_verify"), weights, start)?));
        Ok(Arms { primary: Box::new(fused), others })
    })
}
