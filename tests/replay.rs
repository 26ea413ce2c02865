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
//!
//! The episode driver, the graphs of the snapshot path, the sequential decode and the replay
//! graph, the draws and the comparisons are `tests/common/episodes.rs`, shared with the GPU
//! certificate (`tests/gpu_replay.rs`); what is this file's own is the replay reference as the
//! arm under test, its plants, and the CPU run of the GPU certificate's own episode.

mod common;
#[path = "common/episodes.rs"]
mod episodes;

use episodes::{
    Arms, Check, Executor, GraphPlant, ReplayArm, ReplayGraph, Rows, STEPS, Setup, TOKENS, Tally, Weights, bytes_of, graph_episode, part,
    write_bytes,
};
use rgdn::fusion::Options;
use rgdn::graph::layer;
use rgdn::layer::GdnShape;
use rgdn::memory::HostMemory;
use rgdn::ops::{MulMatVec, Op, Precision};
use rgdn::reference::math::{self, ExactMufu};
use rgdn::reference::replay::{CommittedViews, TokenLog, VerifyViews, replay, replay_step};
use rgdn::reference::{binary::binary, unary::unary};
use rgdn::tensor::{DType, Tensor};

/// One key head, two value heads: C = 512, a 128 KiB ssm row, the CPU references fast.
const SHAPE: GdnShape = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 128, d_conv: 4, eps: 1e-6 };

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
    /// A bug planted in the reference's replay (`Plant::None` in CI's episodes).
    plant: Plant,
}

impl ReplayPath {
    /// Sequence s's committed rows are rows s, holding `start[s]`.
    fn new(n_s: usize, n_t: usize, weights: &Weights, start: &Rows, plant: Plant) -> ReplayPath {
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
            plant,
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
        let (conv, ssm): (Vec<&[u8]>, Vec<&[u8]>) = start.iter().map(|(c, s)| (c.as_slice(), s.as_slice())).unzip();
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
        unary(math::sigmoid, &self.beta_raw, &self.beta, &mut self.mem, &mut ExactMufu).expect("the layer's own views");
        binary(math::add, &self.alpha, &self.dt_bias, &self.alpha_biased, &mut self.mem).expect("the layer's own views");
        unary(math::softplus, &self.alpha_biased, &self.softplus, &mut self.mem, &mut ExactMufu).expect("the layer's own views");
        binary(math::mul, &self.softplus, &self.ssm_a, &self.gate, &mut self.mem).expect("the layer's own views");
    }

    fn rows(&self) -> Vec<usize> {
        (0..self.n_s).collect()
    }

    /// Step `i`: replay the previous step's accepted tokens (`previous`: its accepted counts),
    /// commit, verify this step's tokens into log set i mod 2; every output.
    fn verify(&mut self, i: usize, qkv: &[u8], cur: &[u8], previous: Option<&[usize]>) -> Vec<Vec<u8>> {
        let plant = self.plant;
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
    fn commit(&mut self, i: usize, accepted: &[usize]) {
        let plant = self.plant;
        let accepted = plant.accepted(accepted);
        if plant == Plant::NeighbourGate {
            plant_neighbour_gate(&mut self.mem, &self.logs[i % 2]);
        }
        replay(&self.committed, &self.rows(), &self.logs[i % 2], &accepted, &mut self.mem, &mut ExactMufu).expect("a valid replay");
    }

    /// Sequence s's committed (conv row, ssm row).
    fn rows_of(&self, s: usize) -> (Vec<u8>, Vec<u8>) {
        let [conv, ssm] = [self.committed.conv_cache, self.committed.ssm_cache].map(|t| bytes_of(&self.mem, &t));
        (part(&conv, self.n_s, s).to_vec(), part(&ssm, self.n_s, s).to_vec())
    }
}

impl ReplayArm for ReplayPath {
    fn name(&self) -> &str {
        "replay"
    }

    fn step(&mut self, i: usize, tokens: Option<(&[u8], &[u8])>, accepted: Option<&[usize]>) -> Check<Option<Vec<Vec<u8>>>> {
        Ok(match tokens {
            Some((qkv, cur)) => Some(self.verify(i, qkv, cur, accepted)),
            None => {
                self.commit(i - 1, accepted.expect("STEPS ≥ 1"));
                None
            }
        })
    }

    fn committed(&mut self, s: usize) -> Check<(Vec<u8>, Vec<u8>)> {
        Ok(self.rows_of(s))
    }

    fn log(&mut self, set: usize) -> Check<Vec<Vec<u8>>> {
        let log = self.logs[set];
        Ok([log.qkv, log.k, log.v, log.g, log.beta].iter().map(|t| bytes_of(&self.mem, t)).collect())
    }
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
                let next = mem.read_u32(&log.g, [0, h, t + 1, s]).unwrap();
                mem.write_u32(&log.g, [0, h, t, s], next).unwrap();
            }
        }
    }
}

/// One episode of `STEPS` steps of `n_t` tokens for `n_s` sequences: the replay reference
/// against the snapshot path (unfused, and the batched layer step) and the sequential decode;
/// the first differing byte is an error naming the step, the sequence, the paths and the
/// buffer.
fn episode(n_s: usize, n_t: usize, seed: u64, plant: Plant) -> Result<Tally, String> {
    episode_with(n_s, n_t, seed, plant, GraphPlant::None)
}

/// [`episode`] with a bug planted in the replay graphs' path too: the replay graph, unfused,
/// compiled without `replay_verify`, with the defaults and with every fusion (the opt-in
/// `replay_step` too), runs beside the reference, its outputs, log sets and committed
/// rows compared with the reference's after every step.
fn episode_with(n_s: usize, n_t: usize, seed: u64, plant: Plant, graph_plant: GraphPlant) -> Result<Tally, String> {
    let setup = Setup { exec: Executor::Cpu, shape: SHAPE, n_s, n_t, seed, snapshots: &[Options::OFF, Options::ALL] };
    let label = format!("{plant:?}");
    episodes::episode(&setup, &label, &mut |weights: &Weights, start: &Rows| {
        let rep = ReplayPath::new(n_s, n_t, weights, start, plant);
        let mut others: Vec<Box<dyn ReplayArm>> = Vec::new();
        for o in [Options::OFF, Options::ON.without("replay_verify"), Options::ON, Options::ALL] {
            let mut g = ReplayGraph::new(Executor::Cpu, SHAPE, (n_s, n_t, seed), o, weights, start)?;
            g.plant = graph_plant;
            others.push(Box::new(g));
        }
        Ok(Arms { primary: Box::new(rep), others })
    })
}

/// The episodes of `n_s` sequences at every T, with their tally printed.
fn certify(n_s: usize) {
    for (k, n_t) in TOKENS.into_iter().enumerate() {
        let start = std::time::Instant::now();
        let seed = 0x26_00 + (n_s * 16 + k) as u64;
        let t = episode(n_s, n_t, seed, Plant::None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.steps, STEPS);
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

/// [overlap] n_s = 8, T = 4: a step of three launches with the products as tiles (32 columns),
/// so the replay graph with every fusion runs with its launches overlapped (`Options::ALL` has
/// the overlap pass) beside the defaults' plain ones, and both equal the reference.
#[test]
fn replay_episodes_of_eight_sequences_cover_the_overlapped_step() {
    let t = episode(8, 4, 0x26_84, Plant::None).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(t.steps, STEPS);
    assert!(t.overlapped, "no arm ran overlapped: {t:?}");
    println!("replay episode n_s 8, T 4: {t:?}");
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

/// [replay] The GPU certificate's own episode (`tests/gpu_replay.rs`: the fused replay graph
/// under test, the unfused one beside it, the snapshot path fused, the sequential decode) run
/// on the CPU references, so that its driver is checked in CI where no GPU is: it passes, and
/// its test-only plant (the graph told a − 1 accepted tokens) fails it on a differing byte
/// (n_s = 4, T = 4).
#[test]
fn the_gpu_certificate_episode_passes_and_its_plant_fails_on_the_cpu() {
    let setup = |seed| Setup { exec: Executor::Cpu, shape: SHAPE, n_s: 4, n_t: 4, seed, snapshots: &[Options::ALL] };
    let t = graph_episode(&setup(0x26_46), GraphPlant::None, true).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(t.steps, STEPS);
    assert!(t.graph_tokens > 0 && t.decoded_tokens > 0, "{t:?}");
    let msg = graph_episode(&setup(0x26_46), GraphPlant::AcceptedOffByOne, true).expect_err("a planted bug must fail");
    assert!(msg.contains("differs at float") && msg.contains("replay graph fused vs"), "not the fused graph's differing byte: {msg}");
    println!("the graph told a − 1 accepted tokens fails as it must: {msg}");
}
