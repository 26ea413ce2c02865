//! [replay] The exact-replay episode certificate (issue 26, `docs/rollback.md`) on the CPU
//! references.
//!
//! An episode is 20 verify steps of T tokens for n_s sequences, each sequence accepting a
//! random count a of every step's tokens: 0, all T, or in between (every sequence sees all
//! three in its first three steps, then a quarter 0, a quarter T, the rest uniform in 0 ..= T).
//! Three paths run the same episode from the same caches, weights and tokens:
//! - **replay** — the new reference ([`rgdn::reference::replay`]): one committed conv window
//!   and ssm state per sequence and a token log; each step is `replay_step` (replay the previous
//!   step's a accepted tokens, commit, verify its own T tokens from the committed state, writing
//!   no state slot), the gate path by its unfused references;
//! - **snapshots** — today's layer step (`graph::layer` on the CPU references, twice: ggml's
//!   unfused launch sequence, and fused, where the batched GDN_LAYER_STEP must fire) with
//!   1 + R snapshot rows, R = T − 1, and ggml's rollback: the next step reads the accepted
//!   state through its source row `s_copy = rs_idx·M + src0` with rs_idx = T − a;
//! - **sequential** — the same layer graph at T = 1, R = 0: a plain single-token decode of
//!   each sequence's accepted tokens, one step each.
//!
//! After every step (and once more after the last acceptance), bit for bit, per sequence:
//! (a) the replay path's committed ssm state and conv window equal both snapshot paths' accepted
//! rows, and every output of every token of the step (SiLU output, q and k norms, the alpha and
//! beta products, β, the gate, the attention output) equals both snapshot steps'; (b) the same
//! state and window equal the sequential decode's after the accepted tokens, and every output of
//! each accepted token equals the single-token step's.
//!
//! **Where the snapshot path keeps a = 0.** ggml's snapshot rows cannot hold the state from
//! before a step: with R = T − 1 there is no slot T, and the clamped rule (spec §1.3 W2) writes
//! no ssm slot j ≥ n_t even with R = T. So the snapshot path does what llama.cpp does when a
//! sequence's state must survive a step that writes its cell (`src0 ≠ kv_head`): the caches
//! have two banks of n_s cells (M = 2·n_s), steps alternately write bank 0 and bank 1 (sequence
//! s writes cell bank·n_s + s), and a sequence reads its accepted state from wherever it is,
//! `s_copy = (T − a)·M + cell` in the bank the previous step wrote when a > 0. A sequence that
//! accepted nothing still has its state in the bank about to be written: that one row pair is
//! first copied (bits) to group 0 of its cell in the other bank, and read from there.
//!
//! `RGDN_FULL_TESTS=1` adds the n_s = 64 episodes (minutes).

mod common;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rgdn::fusion::sweep::{self, Planning};
use rgdn::fusion::{Options, Outcome, Refusal, compile_for};
use rgdn::graph::Node;
use rgdn::graph::exec;
use rgdn::graph::layer::{self, Built, LayerSpec, Outputs, Rollback, StackSpec};
use rgdn::inputs::{self, Values};
use rgdn::layer::{GdnShape, LayerTensors, Step};
use rgdn::memory::HostMemory;
use rgdn::ops::{MulMatVec, Op, Precision};
use rgdn::reference::math::{self, ExactMufu};
use rgdn::reference::replay::{CommittedViews, TokenLog, VerifyViews, replay, replay_step};
use rgdn::reference::{binary::binary, unary::unary};
use rgdn::tensor::{DType, Tensor};

/// One key head, two value heads: C = 512, a 128 KiB ssm row, the CPU references fast.
const SHAPE: GdnShape = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 128, d_conv: 4, eps: 1e-6 };
/// Verify steps per episode.
const STEPS: usize = 20;
/// Draft lengths certified.
const TOKENS: [usize; 4] = [1, 4, 8, 16];
/// Every output a token has (the layer table's names), in the order compared.
const OUTPUTS: [&str; 8] = ["conv_out", "q_norm", "k_norm", "alpha", "beta_raw", "beta", "gate", "attn_out"];
/// The weights every path takes from the first snapshot graph.
const WEIGHTS: [&str; 5] = ["conv_weight", "alpha_weight", "beta_weight", "dt_bias", "ssm_a"];

fn bytes_of(mem: &HostMemory, t: &Tensor) -> Vec<u8> {
    let r = t.layout.byte_range().expect("a contiguous tensor");
    mem.bytes(t.buffer)[r].to_vec()
}

fn write_bytes(mem: &mut HostMemory, t: &Tensor, bytes: &[u8]) {
    let r = t.layout.byte_range().expect("a contiguous tensor");
    assert_eq!(r.len(), bytes.len(), "bytes for a tensor of {:?}", t.ne());
    mem.bytes_mut(t.buffer)[r].copy_from_slice(bytes);
}

/// Part `i` of `n` equal parts of `bytes` (a cache row, or a token column of an output whose
/// columns are sequence-major: part s·T + t is token t of sequence s).
fn part(bytes: &[u8], n: usize, i: usize) -> &[u8] {
    assert_eq!(bytes.len() % n, 0);
    let len = bytes.len() / n;
    &bytes[i * len..(i + 1) * len]
}

/// An error naming the first float where `x` and `y` differ.
fn same(ctx: &str, what: &str, x: &[u8], y: &[u8]) -> Result<(), String> {
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

/// A one-layer graph's memory, read and written by the layer table's field names (the snapshot
/// graph and the replay graph alike).
trait LayerFields {
    fn built(&self) -> &Built;
    fn mem(&self) -> &HostMemory;
    fn mem_mut(&mut self) -> &mut HostMemory;

    fn field(&self, name: &str) -> Tensor {
        let i = LayerTensors::index_of(name).expect("a field of the layer table");
        self.built().layers[0].t.to_array()[i]
    }

    fn get(&self, name: &str) -> Vec<u8> {
        bytes_of(self.mem(), &self.field(name))
    }

    fn set(&mut self, name: &str, bytes: &[u8]) {
        let t = self.field(name);
        write_bytes(self.mem_mut(), &t, bytes);
    }
}

impl LayerFields for LayerGraph {
    fn built(&self) -> &Built {
        &self.built
    }
    fn mem(&self) -> &HostMemory {
        &self.mem
    }
    fn mem_mut(&mut self) -> &mut HostMemory {
        &mut self.mem
    }
}

impl LayerFields for ReplayGraph {
    fn built(&self) -> &Built {
        &self.built
    }
    fn mem(&self) -> &HostMemory {
        &self.mem
    }
    fn mem_mut(&mut self) -> &mut HostMemory {
        &mut self.mem
    }
}

/// One layer graph (`graph::layer`, one layer, every product an output), compiled with
/// `options` ([`Options::OFF`]: today's unfused launch sequence; [`Options::ALL`]: the batched
/// layer step, which must fire), with a memory of its own that the caller's bytes are written
/// into before each run.
struct LayerGraph {
    built: Built,
    nodes: Vec<Node>,
    mem: HostMemory,
}

impl LayerGraph {
    fn new(step: Step, seed: u64, options: Options) -> LayerGraph {
        let spec = StackSpec { layers: vec![LayerSpec::new(SHAPE, step)], outputs: Outputs::Products };
        let built = sweep::build(&spec, seed, Planning::FusionAware).expect("the graph builds");
        let (nodes, report) = compile_for(built.fresh_nodes().expect("nodes"), &built.live_out(), options, Some(&built.mem));
        if options != Options::OFF {
            assert_eq!(report.fired("layer_step"), 1, "{step:?}: the batched layer step did not fire:\n{report}");
        }
        let mem = built.mem.clone();
        LayerGraph { built, nodes, mem }
    }

    /// Runs the step with the step inputs `qkv` ([C, T, n_s]) and `cur` ([E, T·n_s]), sequence
    /// s reading cache row `sources[s]`; every output's bytes, in [`OUTPUTS`] order.
    fn run(&mut self, qkv: &[u8], cur: &[u8], sources: &[usize]) -> Vec<Vec<u8>> {
        let v = self.built.layers[0].clone();
        write_bytes(&mut self.mem, &v.qkv_src, qkv);
        write_bytes(&mut self.mem, &v.cur_src, cur);
        assert_eq!(sources.len(), v.t.source_rows.ne()[0]);
        for (s, &row) in sources.iter().enumerate() {
            self.mem.write_u32(&v.t.source_rows, [s, 0, 0, 0], u32::try_from(row).expect("a cache row"));
        }
        exec::run_cpu(&self.nodes, &mut self.mem, &mut ExactMufu).expect("the graph runs");
        OUTPUTS.iter().map(|name| self.get(name)).collect()
    }
}

/// The weights of the episode, by field name.
type Weights = Vec<(&'static str, Vec<u8>)>;

/// Today's step with 1 + R = T snapshot rows, two banks of n_s cells (module docs).
struct SnapshotPath {
    name: &'static str,
    banks: [LayerGraph; 2],
    conv: Vec<u8>,
    ssm: Vec<u8>,
    /// Per sequence, where its accepted state is: (bank, group).
    at: Vec<(usize, usize)>,
    n_s: usize,
    n_t: usize,
    /// Copies made for sequences that accepted nothing from the bank about to be written.
    moves: usize,
}

impl SnapshotPath {
    fn new(n_s: usize, n_t: usize, seed: u64, options: Options) -> SnapshotPath {
        let cells = 2 * n_s;
        let step = |bank: usize| {
            let first = Step { cells, kv_head: bank * n_s, src_cell: (1 - bank) * n_s, ..Step::new(n_t, n_t - 1) };
            let others: Vec<(usize, usize)> = (1..n_s).map(|s| ((1 - bank) * n_s + s, 0)).collect();
            first.with_sequences(&others).expect("≤ 256 sequences")
        };
        let mut banks = [LayerGraph::new(step(0), seed, options), LayerGraph::new(step(1), seed, options)];
        let weights: Weights = WEIGHTS.iter().map(|w| (*w, banks[0].get(w))).collect();
        for (name, bytes) in &weights {
            banks[1].set(name, bytes);
        }
        let (conv, ssm) = (banks[0].get("conv_cache"), banks[0].get("ssm_cache"));
        // Every sequence starts from its cell in bank 1, live group: step 0 writes bank 0.
        let name = if options == Options::OFF { "snapshots unfused" } else { "snapshots fused" };
        SnapshotPath { name, banks, conv, ssm, at: vec![(1, 0); n_s], n_s, n_t, moves: 0 }
    }

    fn weights(&self) -> Weights {
        WEIGHTS.iter().map(|w| (*w, self.banks[0].get(w))).collect()
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
    fn committed(&self, s: usize) -> (&[u8], &[u8]) {
        let row = self.row_of(s, self.at[s]);
        (part(&self.conv, self.rows(), row), part(&self.ssm, self.rows(), row))
    }

    /// Step `i` (writing bank i mod 2) on the tokens `qkv`, `cur`: every output.
    fn step(&mut self, i: usize, qkv: &[u8], cur: &[u8]) -> Vec<Vec<u8>> {
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
        let (conv, ssm) = (std::mem::take(&mut self.conv), std::mem::take(&mut self.ssm));
        let graph = &mut self.banks[bank];
        graph.set("conv_cache", &conv);
        graph.set("ssm_cache", &ssm);
        let outputs = graph.run(qkv, cur, &sources);
        (self.conv, self.ssm) = (graph.get("conv_cache"), graph.get("ssm_cache"));
        outputs
    }

    /// ggml's rollback after step `i`: a sequence that accepted a > 0 tokens continues from
    /// snapshot slot T − a of its cell in the bank the step wrote; a = 0 keeps its state.
    fn accept(&mut self, i: usize, accepted: &[usize]) {
        for (s, &a) in accepted.iter().enumerate() {
            if a > 0 {
                self.at[s] = (i % 2, self.n_t - a);
            }
        }
    }
}

/// The replay reference's memory: committed rows, the two log sets, the step's views, and the
/// gate path's tensors.
struct ReplayPath {
    mem: HostMemory,
    committed: CommittedViews,
    logs: [TokenLog; 2],
    step: VerifyViews,
    cur: Tensor,
    alpha_weight: Tensor,
    beta_weight: Tensor,
    dt_bias: Tensor,
    ssm_a: Tensor,
    /// `[H_v, T·n_s]` each, sequence-major columns, as the layer's.
    alpha: Tensor,
    beta_raw: Tensor,
    beta: Tensor,
    alpha_biased: Tensor,
    softplus: Tensor,
    gate: Tensor,
    n_s: usize,
    n_t: usize,
}

impl ReplayPath {
    /// Sequence s's committed rows are rows s, holding `conv[s]`, `ssm[s]`.
    fn new(n_s: usize, n_t: usize, weights: &Weights, conv: &[&[u8]], ssm: &[&[u8]]) -> ReplayPath {
        let (c, e, hk, hv, d, kc) = (SHAPE.channels(), SHAPE.n_embd, SHAPE.n_k_heads, SHAPE.n_v_heads, SHAPE.head_dim, SHAPE.d_conv);
        let cols = n_t * n_s;
        let mut mem = HostMemory::new();
        let mut f32s = |ne: [usize; 4]| mem.alloc_tensor(DType::F32, ne);
        let committed = CommittedViews {
            conv_cache: f32s([(kc - 1) * c, n_s, 1, 1]),
            ssm_cache: f32s([d * d * hv, n_s, 1, 1]),
            weight: f32s([kc, c, 1, 1]),
            n_k_heads: hk,
            n_v_heads: hv,
            eps: SHAPE.eps,
        };
        let (beta, gate) = (f32s([hv, cols, 1, 1]), f32s([hv, cols, 1, 1]));
        let as_heads = |t: Tensor| t.reshape([1, hv, n_t, n_s]).expect("contiguous");
        let step = VerifyViews {
            qkv: f32s([c, n_t, n_s, 1]),
            g: as_heads(gate),
            beta: as_heads(beta),
            conv_out: f32s([c, n_t, n_s, 1]),
            q_norm: f32s([d, hk, n_t, n_s]),
            k_norm: f32s([d, hk, n_t, n_s]),
            out: f32s([d, hv, n_t, n_s]),
        };
        let mut path = ReplayPath {
            cur: f32s([e, cols, 1, 1]),
            alpha_weight: f32s([e, hv, 1, 1]),
            beta_weight: f32s([e, hv, 1, 1]),
            dt_bias: f32s([hv, 1, 1, 1]),
            ssm_a: f32s([hv, 1, 1, 1]),
            alpha: f32s([hv, cols, 1, 1]),
            beta_raw: f32s([hv, cols, 1, 1]),
            alpha_biased: f32s([hv, cols, 1, 1]),
            softplus: f32s([hv, cols, 1, 1]),
            beta,
            gate,
            committed,
            step,
            logs: [committed; 2].map(|v| TokenLog::alloc(&mut mem, &v, n_t, n_s).expect("a log")),
            mem,
            n_s,
            n_t,
        };
        for (name, bytes) in weights {
            let t = match *name {
                "conv_weight" => path.committed.weight,
                "alpha_weight" => path.alpha_weight,
                "beta_weight" => path.beta_weight,
                "dt_bias" => path.dt_bias,
                "ssm_a" => path.ssm_a,
                _ => unreachable!("{name}"),
            };
            write_bytes(&mut path.mem, &t, bytes);
        }
        let (cc, sc) = (path.committed.conv_cache, path.committed.ssm_cache);
        write_bytes(&mut path.mem, &cc, &conv.concat());
        write_bytes(&mut path.mem, &sc, &ssm.concat());
        path
    }

    /// The gate path, unchanged by replay: the alpha/beta products (≤ 8 columns per launch, as
    /// the layer splits them), SIGMOID, ADD, SOFTPLUS, MUL — the unfused references.
    fn gate_path(&mut self) {
        let (e, hv) = (SHAPE.n_embd, SHAPE.n_v_heads);
        let cols = self.n_t * self.n_s;
        for (weight, dst) in [(self.alpha_weight, self.alpha), (self.beta_weight, self.beta_raw)] {
            for first in (0..cols).step_by(layer::MAT_VEC_MAX_COLS) {
                let n = layer::MAT_VEC_MAX_COLS.min(cols - first);
                let input = self.cur.view([e, n, 1, 1], self.cur.layout.nb, first * self.cur.layout.nb[1]);
                let dst = dst.view([hv, n, 1, 1], dst.layout.nb, first * dst.layout.nb[1]);
                MulMatVec { weight, input, dst, precision: Precision::Default }
                    .reference(&mut self.mem, &mut ExactMufu)
                    .expect("a valid product");
            }
        }
        unary(math::sigmoid, &self.beta_raw, &self.beta, &mut self.mem, &mut ExactMufu);
        binary(math::add, &self.alpha, &self.dt_bias, &self.alpha_biased, &mut self.mem);
        unary(math::softplus, &self.alpha_biased, &self.softplus, &mut self.mem, &mut ExactMufu);
        binary(math::mul, &self.softplus, &self.ssm_a, &self.gate, &mut self.mem);
    }

    fn rows(&self) -> Vec<usize> {
        (0..self.n_s).collect()
    }

    /// Step `i`: replay the previous step's accepted tokens (`previous`: its accepted counts),
    /// commit, verify this step's tokens into log set i mod 2; every output.
    fn step(&mut self, i: usize, qkv: &[u8], cur: &[u8], previous: Option<&[usize]>, plant: Plant) -> Vec<Vec<u8>> {
        let (q, c) = (self.step.qkv, self.cur);
        write_bytes(&mut self.mem, &q, qkv);
        write_bytes(&mut self.mem, &c, cur);
        self.gate_path();
        let planted: Option<Vec<usize>> = previous.map(|a| plant.accepted(a));
        let previous = planted.as_deref().map(|a| (&self.logs[(i + 1) % 2], a));
        if let (Some((log, _)), Plant::NeighbourGate) = (previous, plant) {
            plant_neighbour_gate(&mut self.mem, log);
        }
        let scale = rgdn::ops::gated_delta_net::attention_scale();
        replay_step(&self.committed, &self.rows(), previous, &self.step, &self.logs[i % 2], scale, &mut self.mem, &mut ExactMufu)
            .expect("a valid replay step");
        let s = &self.step;
        let outs = [s.conv_out, s.q_norm, s.k_norm, self.alpha, self.beta_raw, self.beta, self.gate, s.out];
        outs.iter().map(|t| bytes_of(&self.mem, t)).collect()
    }

    /// The last step's acceptance alone (the episode's end: no further step to carry it).
    fn commit(&mut self, i: usize, accepted: &[usize], plant: Plant) {
        let accepted = plant.accepted(accepted);
        if plant == Plant::NeighbourGate {
            plant_neighbour_gate(&mut self.mem, &self.logs[i % 2]);
        }
        replay(&self.committed, &self.rows(), &self.logs[i % 2], &accepted, &mut self.mem, &mut ExactMufu).expect("a valid replay");
    }

    /// Sequence s's committed (conv row, ssm row).
    fn committed(&self, s: usize) -> (Vec<u8>, Vec<u8>) {
        let [conv, ssm] = [self.committed.conv_cache, self.committed.ssm_cache].map(|t| bytes_of(&self.mem, &t));
        (part(&conv, self.n_s, s).to_vec(), part(&ssm, self.n_s, s).to_vec())
    }
}

/// [replay] The replay mode's layer graph (`graph::layer` with [`Rollback::Replay`]: the
/// unfused GATED_DELTA_NET_REPLAY, the window commit, the verify chain with no cache row
/// written, the log copies) on the CPU references, compiled with `options`: sequence s commits
/// to cache row s (cells = n_s, R = 0), step i runs the nodes writing log set i mod 2.
struct ReplayGraph {
    name: &'static str,
    built: Built,
    /// The nodes writing log set 0 and 1.
    nodes: [Vec<Node>; 2],
    mem: HostMemory,
    n_s: usize,
    /// A bug planted in the graph path's per-step index (`GraphPlant::None` in CI).
    plant: GraphPlant,
}

/// A bug planted in the replay graph's inputs (the certificate must fail with it).
#[derive(Clone, Copy, Debug, PartialEq)]
enum GraphPlant {
    None,
    /// The window commit picks the window one token short (its `window_rows` one group later).
    WindowOffByOne,
}

impl ReplayGraph {
    /// The graph with the episode's weights and every sequence's starting rows.
    fn new(n_s: usize, n_t: usize, seed: u64, options: Options, weights: &Weights, conv: &[&[u8]], ssm: &[&[u8]]) -> ReplayGraph {
        let others: Vec<(usize, usize)> = (1..n_s).map(|s| (s, 0)).collect();
        let step = Step { cells: n_s, ..Step::new(n_t, 0) }.with_sequences(&others).expect("≤ 256 sequences");
        let layer = LayerSpec { rollback: Rollback::Replay { log_set: 0 }, ..LayerSpec::new(SHAPE, step) };
        let spec = StackSpec { layers: vec![layer], outputs: Outputs::Products };
        let built = sweep::build(&spec, seed, Planning::FusionAware).expect("the replay graph builds");
        let nodes = [0, 1].map(|set| {
            let nodes = built.replay_nodes(set).expect("nodes");
            let (nodes, report) = compile_for(nodes, &built.live_out(), options, Some(&built.mem));
            if options != Options::OFF {
                check_replay_report(&report).unwrap_or_else(|e| panic!("n_s {n_s}, T {n_t}, log set {set}: {e}\n{report}"));
            }
            nodes
        });
        let name = if options == Options::OFF { "replay graph unfused" } else { "replay graph fused" };
        let mem = built.mem.clone();
        let mut g = ReplayGraph { name, built, nodes, mem, n_s, plant: GraphPlant::None };
        for (name, bytes) in weights {
            g.set(name, bytes);
        }
        g.set("conv_cache", &conv.concat());
        g.set("ssm_cache", &ssm.concat());
        g
    }

    /// Step `i` on the tokens `qkv`, `cur`, replaying the previous step's `accepted` counts
    /// (all 0 before the first step); every output.
    fn step(&mut self, i: usize, qkv: &[u8], cur: &[u8], accepted: &[usize]) -> Vec<Vec<u8>> {
        let v = self.built.layers[0].clone();
        let r = v.replay.expect("a replay layer");
        write_bytes(&mut self.mem, &v.qkv_src, qkv);
        write_bytes(&mut self.mem, &v.cur_src, cur);
        r.set_accepted(&mut self.mem, accepted).expect("valid accepted counts");
        if self.plant == GraphPlant::WindowOffByOne {
            for (s, &a) in accepted.iter().enumerate() {
                let row = (r.n_tokens() - a.saturating_sub(1)) * self.n_s + s;
                self.mem.write_u32(&r.window_rows, [s, 0, 0, 0], row as u32);
            }
        }
        exec::run_cpu(&self.nodes[i % 2], &mut self.mem, &mut ExactMufu).expect("the replay graph runs");
        OUTPUTS.iter().map(|name| self.get(name)).collect()
    }

    /// Sequence s's committed (conv row, ssm row): cache rows s.
    fn committed(&self, s: usize) -> (Vec<u8>, Vec<u8>) {
        let [conv, ssm] = ["conv_cache", "ssm_cache"].map(|n| self.get(n));
        (part(&conv, self.n_s, s).to_vec(), part(&ssm, self.n_s, s).to_vec())
    }

    /// Log set `set`'s tensors (conv inputs, k, v, g, β).
    fn log(&self, set: usize) -> Vec<Vec<u8>> {
        let log = self.built.layers[0].replay.expect("a replay layer").logs[set];
        [log.qkv, log.k, log.v, log.g, log.beta].iter().map(|t| bytes_of(&self.mem, t)).collect()
    }
}

/// What the registry does with a replay layer: the gate path's fusions and `state_read` (the
/// verify's ssm GET_ROWS + GATED_DELTA_NET, its slot in scratch) fire through the one legality
/// check; `conv_chain` refuses by name (the layer's first CONCAT is the window commit's, read
/// by CPY_SNAPSHOTS and no SSM_CONV), and so the layer step does not fire; `replay_verify`
/// fuses the replay with the verify's GATED_DELTA_NET_FROM_CACHE (no scratch slot written).
fn check_replay_report(report: &rgdn::fusion::Report) -> Result<(), String> {
    let layer = report.layers.first().ok_or("no layer in the report")?;
    let outcome = |name: &str| layer.outcome(name).ok_or(format!("no outcome for {name}"));
    if !outcome("state_read")?.fused() {
        return Err("state_read did not fire".into());
    }
    if !outcome("gate_pair")?.fused() {
        return Err("gate_pair did not fire".into());
    }
    if !matches!(outcome("conv_chain")?, Outcome::Refused(Refusal::ConcatUsers { .. })) {
        return Err(format!("conv_chain: {} (expected its ConcatUsers refusal)", outcome("conv_chain")?));
    }
    if outcome("layer_step")?.fused() {
        return Err("layer_step fired on a replay layer".into());
    }
    // [replay] The replay and the verify's GATED_DELTA_NET_FROM_CACHE → one
    // GATED_DELTA_NET_REPLAY_VERIFY, its scratch slot (and nothing else) left unwritten.
    match outcome("replay_verify")? {
        Outcome::Fused(w)
            if w.fused_op == "GATED_DELTA_NET_REPLAY_VERIFY"
                && w.replaced_ops == ["GATED_DELTA_NET_REPLAY", "GATED_DELTA_NET_FROM_CACHE"] => {}
        o => return Err(format!("replay_verify: {o} (expected it to fuse the replay and the verify)")),
    }
    Ok(())
}

/// The reference's log set `set`.
fn reference_log(rep: &ReplayPath, set: usize) -> Vec<Vec<u8>> {
    let log = rep.logs[set];
    [log.qkv, log.k, log.v, log.g, log.beta].iter().map(|t| bytes_of(&rep.mem, t)).collect()
}

/// A bug planted in the replay path (the certificate must fail with each; `Plant::None` in CI).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Plant {
    None,
    /// The replay runs one token fewer than accepted (a − 1, at least 0).
    OffByOne,
    /// Every logged token's g is its next token's (the last keeps its own) when replayed.
    NeighbourGate,
}

impl Plant {
    fn accepted(self, a: &[usize]) -> Vec<usize> {
        match self {
            Plant::OffByOne => a.iter().map(|a| a.saturating_sub(1)).collect(),
            _ => a.to_vec(),
        }
    }
}

/// Overwrites the log's g of token t with token t + 1's (the last keeps its own).
fn plant_neighbour_gate(mem: &mut HostMemory, log: &TokenLog) {
    let [_, hv, n_t, n_s] = log.g.ne();
    for s in 0..n_s {
        for h in 0..hv {
            for t in 0..n_t.saturating_sub(1) {
                let next = mem.read_u32(&log.g, [0, h, t + 1, s]);
                mem.write_u32(&log.g, [0, h, t, s], next);
            }
        }
    }
}

/// The plain decode: one T = 1, R = 0 step per accepted token, each sequence on its own.
struct SequentialPath {
    graph: LayerGraph,
    /// Per sequence: (conv row, ssm row).
    rows: Vec<(Vec<u8>, Vec<u8>)>,
}

impl SequentialPath {
    fn new(weights: &Weights, start: Vec<(Vec<u8>, Vec<u8>)>, seed: u64) -> SequentialPath {
        let mut graph = LayerGraph::new(Step::new(1, 0), seed, Options::OFF);
        for (name, bytes) in weights {
            graph.set(name, bytes);
        }
        SequentialPath { graph, rows: start }
    }

    /// Decodes one token of sequence s (its qkv column [C], its cur column [E]); its outputs.
    fn decode(&mut self, s: usize, qkv: &[u8], cur: &[u8]) -> Vec<Vec<u8>> {
        let (conv, ssm) = &self.rows[s];
        self.graph.set("conv_cache", conv);
        self.graph.set("ssm_cache", ssm);
        let outputs = self.graph.run(qkv, cur, &[0]);
        self.rows[s] = (self.graph.get("conv_cache"), self.graph.get("ssm_cache"));
        outputs
    }
}

/// What an episode certified.
#[derive(Debug, Default)]
struct Tally {
    steps: usize,
    /// Per-sequence state comparisons (each: conv window and ssm state, against both paths).
    states: usize,
    /// Tokens whose outputs were compared against the snapshot paths (each), and against the
    /// sequential decode.
    snapshot_tokens: usize,
    decoded_tokens: usize,
    /// Tokens whose outputs and log were compared against each replay graph.
    graph_tokens: usize,
    /// Accepted counts drawn: 0, T, in between.
    none: usize,
    all: usize,
    some: usize,
    moves: usize,
}

/// The previous step of an episode: its inputs, the replay path's outputs, the accepted counts.
struct Previous {
    qkv: Vec<u8>,
    cur: Vec<u8>,
    outputs: Vec<Vec<u8>>,
    accepted: Vec<usize>,
}

/// The accepted count of sequence s at step i (module docs).
fn draw_accepted(rng: &mut StdRng, n_t: usize, i: usize, s: usize) -> usize {
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

/// One episode of `STEPS` steps of `n_t` tokens for `n_s` sequences: the replay path against
/// the snapshot path (unfused, and the batched layer step) and the sequential decode; the
/// first differing byte is an error naming the step, the sequence, the paths and the buffer.
fn episode(n_s: usize, n_t: usize, seed: u64, plant: Plant) -> Result<Tally, String> {
    episode_with(n_s, n_t, seed, plant, GraphPlant::None)
}

/// [`episode`] with a bug planted in the replay graphs' path too.
fn episode_with(n_s: usize, n_t: usize, seed: u64, plant: Plant, graph_plant: GraphPlant) -> Result<Tally, String> {
    let (c, e) = (SHAPE.channels(), SHAPE.n_embd);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut snaps = [SnapshotPath::new(n_s, n_t, seed, Options::OFF), SnapshotPath::new(n_s, n_t, seed, Options::ALL)];
    let weights = snaps[0].weights();
    let start: Vec<(Vec<u8>, Vec<u8>)> = (0..n_s)
        .map(|s| {
            let (conv, ssm) = snaps[0].committed(s);
            (conv.to_vec(), ssm.to_vec())
        })
        .collect();
    let (conv0, ssm0): (Vec<&[u8]>, Vec<&[u8]>) = start.iter().map(|(c, s)| (c.as_slice(), s.as_slice())).unzip();
    let mut rep = ReplayPath::new(n_s, n_t, &weights, &conv0, &ssm0);
    // The replay mode's layer graph, unfused and through the registry.
    let mut graphs = [Options::OFF, Options::ALL].map(|o| ReplayGraph::new(n_s, n_t, seed, o, &weights, &conv0, &ssm0));
    for g in &mut graphs {
        g.plant = graph_plant;
    }
    let mut seq = SequentialPath::new(&weights, start.clone(), seed);
    let mut tally = Tally::default();
    let to_bytes = |v: Vec<f32>| v.into_iter().flat_map(f32::to_le_bytes).collect::<Vec<u8>>();
    let cols = n_t * n_s;
    let mut previous: Option<Previous> = None;
    for i in 0..=STEPS {
        let ctx = |what: &str| format!("n_s {n_s}, T {n_t}, seed {seed:#x}, {plant:?}: step {i}: {what}");
        // Replay the previous step's acceptance and verify this step's tokens (after the last
        // step, replay its acceptance alone).
        let inputs = (i < STEPS).then(|| {
            let qkv = to_bytes(inputs::fill(&mut rng, c * cols, Values::Uniform(1.0)));
            (qkv, to_bytes(inputs::fill(&mut rng, e * cols, Values::Uniform(1.0))))
        });
        let outputs = match &inputs {
            Some((qkv, cur)) => Some(rep.step(i, qkv, cur, previous.as_ref().map(|p| p.accepted.as_slice()), plant)),
            None => {
                rep.commit(i - 1, &previous.as_ref().expect("STEPS ≥ 1").accepted, plant);
                None
            }
        };
        // The replay graphs' step i: every output and the log set it wrote against the
        // reference's (after the last step, a step on zero tokens: its replay commits the last
        // acceptance, and its verify writes no cache row).
        let none = vec![0; n_s];
        let accepted = previous.as_ref().map_or(none.as_slice(), |p| p.accepted.as_slice());
        for g in &mut graphs {
            let zeros = (vec![0u8; 4 * c * cols], vec![0u8; 4 * e * cols]);
            let (qkv, cur) = inputs.as_ref().unwrap_or(&zeros);
            let y = g.step(i, qkv, cur, accepted);
            if let Some(outs) = &outputs {
                for s in 0..n_s {
                    for t in 0..n_t {
                        let (col, ctx) = (s * n_t + t, ctx(&format!("sequence {s}, token {t}, reference vs {}", g.name)));
                        for ((name, x), y) in OUTPUTS.iter().zip(outs).zip(&y) {
                            same(&ctx, name, part(x, cols, col), part(y, cols, col))?;
                        }
                    }
                }
                let ctx = ctx(&format!("log set {}, reference vs {}", i % 2, g.name));
                for ((name, x), y) in ["qkv", "k", "v", "g", "beta"].iter().zip(reference_log(&rep, i % 2)).zip(g.log(i % 2)) {
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
                    let y = seq.decode(s, part(qkv, cols, col), part(cur, cols, col));
                    let ctx = ctx(&format!("sequence {s}, token {t} of the previous step, replay vs sequential"));
                    for ((name, x), y) in OUTPUTS.iter().zip(outs).zip(&y) {
                        same(&ctx, name, part(x, cols, col), y)?;
                    }
                    tally.decoded_tokens += 1;
                }
            }
        }
        // Every sequence's committed state: (a) the snapshot paths' accepted rows, (b) the
        // sequential decode's rows.
        for s in 0..n_s {
            let (conv, ssm) = rep.committed(s);
            let ctx = ctx(&format!("sequence {s}, committed"));
            for snap in &snaps {
                let (snap_conv, snap_ssm) = snap.committed(s);
                same(&ctx, &format!("conv window, replay vs {}", snap.name), &conv, snap_conv)?;
                same(&ctx, &format!("ssm state, replay vs {}", snap.name), &ssm, snap_ssm)?;
            }
            same(&ctx, "conv window, replay vs sequential", &conv, &seq.rows[s].0)?;
            for g in &graphs {
                let (g_conv, g_ssm) = g.committed(s);
                same(&ctx, &format!("conv window, replay vs {}", g.name), &conv, &g_conv)?;
                same(&ctx, &format!("ssm state, replay vs {}", g.name), &ssm, &g_ssm)?;
            }
            same(&ctx, "ssm state, replay vs sequential", &ssm, &seq.rows[s].1)?;
            tally.states += 1;
        }
        let (Some((qkv, cur)), Some(outs)) = (inputs, outputs) else { break };
        // (a) Every output of every token of this step, against the snapshot steps.
        for snap in &mut snaps {
            let y = snap.step(i, &qkv, &cur);
            for s in 0..n_s {
                for t in 0..n_t {
                    let (col, ctx) = (s * n_t + t, ctx(&format!("sequence {s}, token {t}, replay vs {}", snap.name)));
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
    assert!(tally.none >= n_s && tally.all >= n_s && (n_t == 1 || tally.some >= n_s), "{tally:?}");
    Ok(tally)
}

/// The episodes of `n_s` sequences at every T, with their tally printed.
fn certify(n_s: usize) {
    for (k, n_t) in TOKENS.into_iter().enumerate() {
        let start = std::time::Instant::now();
        let seed = 0x26_00 + (n_s * 16 + k) as u64;
        let t = episode(n_s, n_t, seed, Plant::None).unwrap_or_else(|e| panic!("{e}"));
        println!("replay episode n_s {n_s}, T {n_t}: {t:?} in {:.2?}", start.elapsed());
    }
}

#[test]
fn replay_episodes_of_one_sequence() {
    certify(1);
}

#[test]
fn replay_episodes_of_four_sequences() {
    certify(4);
}

/// n_s = 64 (minutes on the CPU): `RGDN_FULL_TESTS=1`.
#[test]
fn replay_episodes_of_64_sequences() {
    if !common::full_tests() {
        println!("replay episodes at n_s = 64: run with RGDN_FULL_TESTS=1");
        return;
    }
    certify(64);
}

/// The plants of issue 26 must fail the certificate: the replay path replaying one accepted
/// token fewer, and replaying each logged token with its neighbour's g (n_s = 4, T = 4; each
/// fails at the first step whose replay it changes).
#[test]
fn planted_bugs_fail_the_certificate() {
    for plant in [Plant::OffByOne, Plant::NeighbourGate] {
        let msg = episode(4, 4, 0x26_44, plant).expect_err("a planted bug must fail the certificate");
        assert!(msg.contains("differs at float"), "{plant:?} failed, but not on a differing byte: {msg}");
        println!("{plant:?} fails as it must: {msg}");
    }
}

/// [replay] A bug planted in the replay graph's path must fail the certificate: its window
/// commit picking window(a − 1) (the `window_rows` index one group later), n_s = 4, T = 4.
#[test]
fn a_window_commit_off_by_one_fails_the_graph_certificate() {
    let msg = episode_with(4, 4, 0x26_45, Plant::None, GraphPlant::WindowOffByOne).expect_err("a planted bug must fail");
    assert!(msg.contains("differs at float") && msg.contains("replay graph"), "not a replay graph's differing byte: {msg}");
    println!("the window commit off by one fails as it must: {msg}");
}
