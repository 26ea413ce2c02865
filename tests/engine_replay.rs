//! [replay] Exact replay in the engine's terms (`rgdn::engine::replay`, `docs/engine.md`
//! "Exact replay in the engine"), certified on the CPU references: episodes in the engine's
//! layout — a cache of M cells, each step a random batch on a random window of cells
//! `kv_head …`, sequences joining (new cells, zeroed), finishing (their cell left with a
//! pending log), moving and being preempted (committed, read, written back later into another
//! cell), cells idle for steps while others write the same log set (mixed log sets: moves),
//! commits between steps — against the sequential single-token decode and against the
//! snapshot path, bit for bit.
//!
//! The engine arm is what an engine runs, on the CPU: `ReplayCells` checks each step and picks
//! its log set and moves, `replay_tensors` lays the step out over the layer's buffers
//! (`engine::hf::ids` and `engine::replay::ids`), the pre-ops run, and `replay_step_with` is the
//! replay graph through the fusion pass and its legality check against that memory; every op
//! runs its CPU reference (MUFU by `ExactMufu`). The scratch buffer is refilled with random bits
//! before each step (a GPU layer's scratch holds the previous step's bytes). Three arms run the
//! same episode — every fusion (`Options::ALL`, the report checked as the graph certificate
//! checks it), the defaults (`Options::ON`) and unfused (`Options::OFF`) — and must agree on
//! every output, both caches and the whole log buffer after every step.
//!
//! The references: **sequential** — the layer graph at T = 1, R = 0 (`tests/common/episodes.rs`'
//! `SequentialPath`), one decode per accepted token, per sequence; **snapshots** — the layer
//! graph of ggml's snapshot step (R = T − 1) at the step's n_s, each sequence read from the
//! state the snapshot path keeps for it (slot T − a of its last step for a > 0). After every
//! step, every batch sequence's committed rows (its cell's, after the replay of its last count)
//! equal both references', every output of every token equals the snapshot step's, and every
//! output of every accepted token equals the single-token decode's; every state an engine
//! reads (a commit before a move, a preemption, a finish that reads, the episode's end) is
//! compared the same way.

mod common;
#[path = "common/episodes.rs"]
mod episodes;

use episodes::{Executor, LayerFields, LayerGraph, SequentialPath, WEIGHTS, Weights, check_replay_report_of, draw_accepted, part, same};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, RngCore, SeedableRng};
use rgdn::Error;
use rgdn::engine::hf::{HostWeights, StepRows, WeightLayout, engine_lengths, ids as hf_ids};
use rgdn::engine::replay::{LogLayout, ReplayCells, ReplayRows, ReplayStep, ids, replay_step_with, replay_tensors};
use rgdn::fusion::Options;
use rgdn::fusion::replay_step::REPLAY_STEP_MAX_SEQS;
use rgdn::inputs::{self, Values};
use rgdn::layer::{GdnShape, LayerInit, Step};
use rgdn::memory::HostMemory;
use rgdn::reference::math::ExactMufu;
use rgdn::tensor::DType;
use std::collections::HashMap;

/// One key head, two value heads: C = 512, a 128 KiB ssm row (`tests/replay.rs`'s shape).
const SHAPE: GdnShape = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 128, d_conv: 4, eps: 1e-6 };
/// Cells, M.
const CELLS: usize = 6;
/// The most sequences a step runs.
const MAX_BATCH: usize = 4;
/// Sequences alive at once at most (more than the cells: some wait preempted).
const MAX_LIVE: usize = 10;
/// Steps per episode.
const STEPS: usize = 60;

type Check<T> = Result<T, String>;
type RowPair = (Vec<u8>, Vec<u8>);
/// A snapshot step's outputs and, per sequence, its slots' rows.
type SnapshotRun = (Vec<Vec<u8>>, Vec<Vec<RowPair>>);

fn f32_bytes(v: &[u8]) -> Vec<f32> {
    v.chunks_exact(4).map(|w| f32::from_le_bytes(w.try_into().expect("4 bytes"))).collect()
}

/// What an engine arm did, over an episode.
#[derive(Debug, Default, Clone)]
struct Tally {
    steps: usize,
    commit_steps: usize,
    /// Cells whose log was moved to the other set before a step.
    moved_cells: usize,
    /// Steps writing set 0 and set 1.
    sets: [usize; 2],
    new_cells: usize,
    /// Plans in which the whole step fused into one launch (`replay_step`), and plans of at
    /// most `REPLAY_STEP_MAX_SEQS` sequences (its scope; a commit of adjacent cells may hold
    /// more).
    one_launch: usize,
    in_scope: usize,
}

/// The engine's replay layer on the CPU: its caches (M rows), its log buffer, its weights and
/// its bookkeeping, each step laid out and compiled as the library does it.
struct EngineArm {
    name: &'static str,
    fusions: Options,
    logs: LogLayout,
    book: ReplayCells,
    weight_layout: WeightLayout,
    weights: Vec<u8>,
    conv: Vec<u8>,
    ssm: Vec<u8>,
    log: Vec<u8>,
    rng: StdRng,
    tally: Tally,
}

impl EngineArm {
    fn new(name: &'static str, fusions: Options, n_t: usize, weights: &Weights, seed: u64) -> EngineArm {
        let get = |n: &str| weights.iter().find(|(w, _)| *w == n).map(|(_, b)| b.clone()).expect("a weight");
        let host = HostWeights {
            dtype: DType::F32,
            conv_weight: f32_bytes(&get("conv_weight")),
            alpha_weight: get("alpha_weight"),
            beta_weight: get("beta_weight"),
            dt_bias: f32_bytes(&get("dt_bias")),
            ssm_a: f32_bytes(&get("ssm_a")),
        };
        let weight_layout = WeightLayout::of(&SHAPE, DType::F32).expect("a layout");
        let logs = LogLayout::of(&SHAPE, n_t, CELLS).expect("a log layout");
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
        // The caches start with bits of a previous run (zeroing is the new cells' pre-op).
        let mut random = |n: usize| {
            let mut v = inputs::fill(&mut rng, n, Values::Uniform(0.5))
                .expect("a drawable range")
                .into_iter()
                .flat_map(f32::to_le_bytes)
                .collect::<Vec<u8>>();
            v.truncate(n * 4);
            v
        };
        let (conv, ssm, log) = (random(SHAPE.conv_row() * CELLS), random(SHAPE.ssm_row() * CELLS), random(logs.bytes / 4));
        EngineArm {
            name,
            fusions,
            logs,
            book: ReplayCells::new(n_t, CELLS).expect("a record"),
            weights: host.bytes(&weight_layout).expect("the weights fit their own layout"),
            weight_layout,
            conv,
            ssm,
            log,
            rng: StdRng::seed_from_u64(seed),
            tally: Tally::default(),
        }
    }

    fn row(&self, cell: usize) -> RowPair {
        (part(&self.conv, CELLS, cell).to_vec(), part(&self.ssm, CELLS, cell).to_vec())
    }

    /// The engine writes a state into a cell (a preempted sequence coming back, a move).
    fn set_row(&mut self, cell: usize, (conv, ssm): &RowPair) {
        let (c, s) = (conv.len(), ssm.len());
        self.conv[cell * c..(cell + 1) * c].copy_from_slice(conv);
        self.ssm[cell * s..(cell + 1) * s].copy_from_slice(ssm);
    }

    /// One step: the library's checks, then `run`; the attention output `[n_s][T][H_v][D]`.
    fn step(&mut self, rows: &ReplayRows, qkv: &[u8], cur: &[u8]) -> rgdn::Result<Vec<u8>> {
        let st = self.book.prepare(rows)?;
        let out = self.run(&st, qkv, cur)?;
        self.tally.steps += 1;
        Ok(out)
    }

    /// Commits `cells` (their counts `accepted`): the library's zero-token steps.
    fn commit(&mut self, cells: &[usize], accepted: &[usize]) -> rgdn::Result<()> {
        for st in self.book.commit_steps(cells, accepted)? {
            let cols = st.n_tokens * st.n_seqs();
            self.run(&st, &vec![0u8; 4 * SHAPE.channels() * cols], &vec![0u8; 4 * SHAPE.n_embd * cols])?;
            self.tally.commit_steps += 1;
            self.book.committed(&(st.kv_head..st.kv_head + st.n_seqs()).collect::<Vec<_>>());
        }
        self.book.committed(cells);
        Ok(())
    }

    /// The step on a memory bound as the layer binds its buffers (`hf::ids`, `replay::ids`).
    fn run(&mut self, st: &ReplayStep, qkv: &[u8], cur: &[u8]) -> rgdn::Result<Vec<u8>> {
        let step = st.step()?;
        // The engine's buffers against the step's lengths first, as the GPU layer checks them.
        let sources: Vec<u32> = (0..st.n_seqs()).map(|s| (st.kv_head + s) as u32).collect();
        let step_rows =
            StepRows { n_tokens: st.n_tokens, cells: CELLS, rollback: 0, kv_head: st.kv_head, sources: &sources, zero_cell: None };
        let [_, _, (_, qkv_len), (_, cur_len), _] = engine_lengths(&SHAPE, &step_rows)?;
        if (qkv.len(), cur.len()) != (4 * qkv_len, 4 * cur_len) {
            return Err(Error::Invalid { op: "test", what: format!("qkv, hidden of {} and {} bytes", qkv.len(), cur.len()) });
        }
        let (t, r, scratch) = replay_tensors(&SHAPE, &step, DType::F32, &self.weight_layout, &self.logs)?;
        let mut mem = HostMemory::new();
        let buffer = |mem: &mut HostMemory, bytes: &[u8]| {
            let id = mem.alloc(bytes.len());
            mem.bytes_mut(id).copy_from_slice(bytes);
            id
        };
        let out_len = 4 * SHAPE.head_dim * SHAPE.n_v_heads * step.columns();
        let mut poison = vec![0u8; scratch];
        self.rng.fill_bytes(&mut poison);
        let bound = [
            buffer(&mut mem, &self.conv),
            buffer(&mut mem, &self.ssm),
            buffer(&mut mem, qkv),
            buffer(&mut mem, cur),
            buffer(&mut mem, &vec![0u8; out_len]),
            buffer(&mut mem, &self.weights),
            buffer(&mut mem, &poison),
        ];
        let [sources, accepted, windows] = st.index_values()?;
        let index = mem.alloc_indices(&sources).buffer;
        let logs = buffer(&mut mem, &self.log);
        let (acc, win) = (mem.alloc_indices(&accepted).buffer, mem.alloc_indices(&windows).buffer);
        assert_eq!(bound[0], hf_ids::CONV_CACHE);
        assert_eq!((bound[6], index, logs, acc, win), (hf_ids::SCRATCH, hf_ids::INDEX, ids::LOGS, ids::ACCEPTED, ids::WINDOW_ROWS));
        // As `GdnReplayLayer` runs a step: the plan (compiled against this memory), then the
        // pre-ops, then the plan's ops.
        let compiled = replay_step_with(&t, &r, &SHAPE, &step, &LayerInit::default(), st.log_set, self.fusions, &mem)?;
        if self.fusions != Options::OFF
            && let Err(e) = check_replay_report_of(&compiled.report, self.fusions)
        {
            panic!("{}: n_s {}, kv_head {}: {e}\n{}", self.name, st.n_seqs(), st.kv_head, compiled.report);
        }
        self.tally.one_launch += compiled.report.fired("replay_step");
        self.tally.in_scope += usize::from(st.n_seqs() <= REPLAY_STEP_MAX_SEQS);
        for op in st.pre_ops(&self.logs, &t.conv_cache, &t.ssm_cache)? {
            op.validate(&mem)?;
            op.reference(&mut mem, &mut ExactMufu)?;
        }
        self.book.moved(st)?;
        for op in &compiled.ops {
            op.validate(&mem)?;
            op.reference(&mut mem, &mut ExactMufu)?;
        }
        self.book.stepped(st)?;
        self.tally.moved_cells += st.moves.iter().map(|m| m.1).sum::<usize>();
        self.tally.sets[st.log_set] += 1;
        self.tally.new_cells += st.new_cells.len();
        self.conv = mem.bytes(hf_ids::CONV_CACHE).to_vec();
        self.ssm = mem.bytes(hf_ids::SSM_CACHE).to_vec();
        self.log = mem.bytes(ids::LOGS).to_vec();
        Ok(mem.bytes(hf_ids::OUT).to_vec())
    }
}

/// The previous step of a sequence, until its count is resolved.
struct Pending {
    qkv: Vec<Vec<u8>>,
    cur: Vec<Vec<u8>>,
    /// The engine's attention output per token.
    out: Vec<Vec<u8>>,
    /// The snapshot step's rows per slot j (the state after T − j tokens).
    slots: Vec<RowPair>,
    accepted: usize,
}

struct Seq {
    /// Its cell, or None (new, or preempted: `swapped` holds its committed rows).
    cell: Option<usize>,
    swapped: Option<RowPair>,
    pending: Option<Pending>,
    snapshot: RowPair,
    steps: usize,
}

/// The snapshot step of n_s sequences on 2·n_s cells: sequence s reads row n_s + s (group 0)
/// and writes cell s's T slots.
struct Snapshots {
    graphs: HashMap<usize, LayerGraph>,
    weights: Weights,
    n_t: usize,
    seed: u64,
}

impl Snapshots {
    /// Every output ([`episodes::OUTPUTS`] order) and per sequence its T slots' rows.
    fn step(&mut self, states: &[RowPair], qkv: &[u8], cur: &[u8]) -> Check<SnapshotRun> {
        let (n_s, n_t) = (states.len(), self.n_t);
        let m = 2 * n_s;
        if !self.graphs.contains_key(&n_s) {
            let others: Vec<(usize, usize)> = (1..n_s).map(|s| (n_s + s, 0)).collect();
            let step = Step { cells: m, kv_head: 0, src_cell: n_s, ..Step::new(n_t, n_t - 1) }.with_sequences(&others).expect("a step");
            let mut g = LayerGraph::new(Executor::Cpu, SHAPE, step, self.seed, Options::OFF)?;
            for (name, bytes) in &self.weights {
                g.set(name, bytes)?;
            }
            self.graphs.insert(n_s, g);
        }
        let g = self.graphs.get_mut(&n_s).expect("built");
        let rows = m * n_t;
        let (conv_row, ssm_row) = (states[0].0.len(), states[0].1.len());
        let (mut conv, mut ssm) = (vec![0u8; conv_row * rows], vec![0u8; ssm_row * rows]);
        for (s, (c, h)) in states.iter().enumerate() {
            conv[(n_s + s) * conv_row..(n_s + s + 1) * conv_row].copy_from_slice(c);
            ssm[(n_s + s) * ssm_row..(n_s + s + 1) * ssm_row].copy_from_slice(h);
        }
        g.set("conv_cache", &conv)?;
        g.set("ssm_cache", &ssm)?;
        let sources: Vec<usize> = (0..n_s).map(|s| n_s + s).collect();
        let outputs = g.run(qkv, cur, &sources)?;
        let (conv, ssm) = (g.get("conv_cache")?, g.get("ssm_cache")?);
        let slots = (0..n_s)
            .map(|s| (0..n_t).map(|j| (part(&conv, rows, j * m + s).to_vec(), part(&ssm, rows, j * m + s).to_vec())).collect())
            .collect();
        Ok((outputs, slots))
    }
}

/// What one episode certified.
#[derive(Debug, Default)]
struct Certified {
    states: usize,
    decoded: usize,
    snapshot_tokens: usize,
    reads: usize,
    joins: usize,
    finishes: usize,
    preemptions: usize,
    resumes: usize,
    tally: Tally,
}

/// One engine-layout episode at T = `n_t` (module docs).
fn episode(n_t: usize, seed: u64) -> Check<Certified> {
    let (c, e) = (SHAPE.channels(), SHAPE.n_embd);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut weights_graph = LayerGraph::new(Executor::Cpu, SHAPE, Step::new(1, 0), seed, Options::OFF)?;
    let weights: Weights = WEIGHTS.iter().map(|w| Ok((*w, weights_graph.get(w)?))).collect::<Check<_>>()?;
    let mut arms = [
        EngineArm::new("engine, every fusion", Options::ALL, n_t, &weights, seed),
        EngineArm::new("engine, default fusions", Options::ON, n_t, &weights, seed),
        EngineArm::new("engine, unfused", Options::OFF, n_t, &weights, seed),
    ];
    let zero: RowPair = (vec![0u8; 4 * SHAPE.conv_row()], vec![0u8; 4 * SHAPE.ssm_row()]);
    let mut seq = SequentialPath::new(Executor::Cpu, SHAPE, &weights, Vec::new(), seed)?;
    let mut snaps = Snapshots { graphs: HashMap::new(), weights: weights.clone(), n_t, seed };
    let mut seqs: Vec<Seq> = Vec::new();
    let mut live: Vec<usize> = Vec::new();
    let mut occupant: [Option<usize>; CELLS] = [None; CELLS];
    let mut done = Certified::default();

    // Resolves sequence `id`'s pending count: the sequential decode of its accepted tokens
    // (each output against the engine's), the snapshot path's accepted slot.
    let resolve = |id: usize, seqs: &mut Vec<Seq>, seq: &mut SequentialPath, done: &mut Certified, ctx: &str| -> Check<usize> {
        let Some(p) = seqs[id].pending.take() else { return Ok(0) };
        for t in 0..p.accepted {
            let y = seq.decode(id, &p.qkv[t], &p.cur[t])?;
            same(&format!("{ctx}: sequence {id}, token {t} of its last step"), "attn_out, engine vs sequential", &p.out[t], &y[7])?;
            done.decoded += 1;
        }
        if p.accepted > 0 {
            seqs[id].snapshot = p.slots[n_t - p.accepted].clone();
        }
        Ok(p.accepted)
    };
    // Sequence `id`'s committed rows (`rows`, from every arm) against both references.
    let check_state = |id: usize, rows: &[RowPair], seqs: &[Seq], seq: &SequentialPath, ctx: &str| -> Check<()> {
        let ctx = format!("{ctx}: sequence {id}, committed");
        for (arm, (conv, ssm)) in arms_names().iter().zip(rows) {
            same(&ctx, &format!("conv window, {arm} vs sequential"), conv, &seq.rows[id].0)?;
            same(&ctx, &format!("ssm state, {arm} vs sequential"), ssm, &seq.rows[id].1)?;
            same(&ctx, &format!("conv window, {arm} vs snapshots"), conv, &seqs[id].snapshot.0)?;
            same(&ctx, &format!("ssm state, {arm} vs snapshots"), ssm, &seqs[id].snapshot.1)?;
        }
        Ok(())
    };

    for i in 0..=STEPS {
        let ctx = format!("T {n_t}, seed {seed:#x}, step {i}");
        let last = i == STEPS;
        // Finishes: a sequence leaves; half the time the engine reads its final state first.
        if !last && live.len() > 1 && rng.random_range(0..4) == 0 {
            let id = live.swap_remove(rng.random_range(0..live.len()));
            if let Some(cell) = seqs[id].cell {
                if rng.random_bool(0.5) {
                    let a = seqs[id].pending.as_ref().map_or(0, |p| p.accepted);
                    for arm in &mut arms {
                        arm.commit(&[cell], &[a]).map_err(|e| format!("{ctx}: commit refused: {e}"))?;
                    }
                    resolve(id, &mut seqs, &mut seq, &mut done, &ctx)?;
                    let rows: Vec<RowPair> = arms.iter().map(|a| a.row(cell)).collect();
                    check_state(id, &rows, &seqs, &seq, &ctx)?;
                    done.reads += 1;
                }
                occupant[cell] = None;
            }
            done.finishes += 1;
        }
        // Joins.
        while !last && live.len() < MAX_LIVE && (live.is_empty() || rng.random_range(0..3) == 0) {
            seqs.push(Seq { cell: None, swapped: None, pending: None, snapshot: zero.clone(), steps: 0 });
            seq.rows.push(zero.clone());
            live.push(seqs.len() - 1);
            done.joins += 1;
        }
        // The batch: three times in four the sequences in a random window of cells, in place
        // (an empty cell takes a waiting sequence, else one from outside the window, else the
        // window ends there), else a random subset of the live sequences in random order on a
        // random window.
        let (kv_head, batch): (usize, Vec<usize>) = if last {
            (0, Vec::new())
        } else if rng.random_range(0..4) > 0 {
            let n = rng.random_range(1..=MAX_BATCH.min(live.len()));
            let kv_head = rng.random_range(0..=CELLS - n);
            let mut batch = Vec::new();
            for &here in &occupant[kv_head..kv_head + n] {
                let waiting = live.iter().copied().find(|&id| seqs[id].cell.is_none() && !batch.contains(&id));
                let outside = live
                    .iter()
                    .copied()
                    .find(|&id| seqs[id].cell.is_some_and(|c| !(kv_head..kv_head + n).contains(&c)) && !batch.contains(&id));
                match here.or(waiting).or(outside) {
                    Some(id) => batch.push(id),
                    None => break,
                }
            }
            (kv_head, batch)
        } else {
            let mut order = live.clone();
            order.shuffle(&mut rng);
            order.truncate(rng.random_range(1..=MAX_BATCH.min(live.len())));
            (rng.random_range(0..=CELLS - order.len()), order)
        };
        let n_s = batch.len();
        let window = kv_head..kv_head + n_s;
        // Who leaves a cell: batch sequences away from their target, other sequences in the
        // window. Their states are committed (one call), read and checked, and kept.
        let mut leaving: Vec<usize> = Vec::new();
        for (s, &id) in batch.iter().enumerate() {
            if seqs[id].cell.is_some_and(|cell| cell != kv_head + s) {
                leaving.push(id);
            }
        }
        for cell in window.clone() {
            if let Some(id) = occupant[cell]
                && !batch.contains(&id)
            {
                leaving.push(id);
            }
        }
        if last {
            leaving = live.iter().copied().filter(|&id| seqs[id].cell.is_some()).collect();
        }
        if !leaving.is_empty() {
            let cells: Vec<usize> = leaving.iter().map(|&id| seqs[id].cell.expect("in a cell")).collect();
            let counts: Vec<usize> = leaving.iter().map(|&id| seqs[id].pending.as_ref().map_or(0, |p| p.accepted)).collect();
            for arm in &mut arms {
                arm.commit(&cells, &counts).map_err(|e| format!("{ctx}: commit refused: {e}"))?;
            }
            for (&id, &cell) in leaving.iter().zip(&cells) {
                resolve(id, &mut seqs, &mut seq, &mut done, &ctx)?;
                let rows: Vec<RowPair> = arms.iter().map(|a| a.row(cell)).collect();
                check_state(id, &rows, &seqs, &seq, &ctx)?;
                done.reads += 1;
                seqs[id].swapped = Some(rows[0].clone());
                seqs[id].cell = None;
                occupant[cell] = None;
            }
        }
        if last {
            break;
        }
        // Sequences pushed out of the window move to a free cell outside it, else wait.
        for &id in &leaving {
            if batch.contains(&id) {
                continue;
            }
            let free: Vec<usize> = (0..CELLS).filter(|c| occupant[*c].is_none() && !window.contains(c)).collect();
            if let Some(&cell) = free.get(rng.random_range(0..free.len().max(1))) {
                let rows = seqs[id].swapped.take().expect("committed");
                arms.iter_mut().for_each(|a| a.set_row(cell, &rows));
                (seqs[id].cell, occupant[cell]) = (Some(cell), Some(id));
            } else {
                done.preemptions += 1;
            }
        }
        // The batch in place: resumed states written into their cells, new sequences zeroed by
        // the step; the counts of those that stayed.
        let mut accepted = vec![0usize; n_s];
        let mut new_cells = Vec::new();
        for (s, &id) in batch.iter().enumerate() {
            let cell = kv_head + s;
            if seqs[id].cell == Some(cell) {
                accepted[s] = resolve(id, &mut seqs, &mut seq, &mut done, &ctx)?;
            } else if let Some(rows) = seqs[id].swapped.take() {
                arms.iter_mut().for_each(|a| a.set_row(cell, &rows));
                done.resumes += 1;
            } else {
                new_cells.push(cell);
            }
            (seqs[id].cell, occupant[cell]) = (Some(cell), Some(id));
        }
        // A bad count is refused with nothing changed (the engine then passes the right ones).
        if let Some(&cell) = new_cells.first()
            && rng.random_range(0..4) == 0
        {
            let mut bad = accepted.clone();
            bad[cell - kv_head] = 1;
            let before = (arms[0].book.clone(), arms[0].conv.clone());
            match arms[0].step(&ReplayRows { kv_head, accepted: &bad, new_cells: &new_cells }, &[], &[]) {
                Err(Error::Invalid { .. }) => {}
                r => return Err(format!("{ctx}: a count on a new cell: {:?}", r.map(|_| ()))),
            }
            if (arms[0].book.clone(), arms[0].conv.clone()) != before {
                return Err(format!("{ctx}: a refused step changed the layer"));
            }
        }
        let cols = n_t * n_s;
        let to_bytes = |v: Vec<f32>| v.into_iter().flat_map(f32::to_le_bytes).collect::<Vec<u8>>();
        let qkv = to_bytes(inputs::fill(&mut rng, c * cols, Values::Uniform(1.0)).expect("a drawable range"));
        let cur = to_bytes(inputs::fill(&mut rng, e * cols, Values::Uniform(1.0)).expect("a drawable range"));
        let rows = ReplayRows { kv_head, accepted: &accepted, new_cells: &new_cells };
        let mut outs = Vec::new();
        for arm in &mut arms {
            outs.push(arm.step(&rows, &qkv, &cur).map_err(|e| format!("{ctx}: {} refused the step: {e}", arm.name))?);
        }
        // The arms agree on every byte they keep.
        for (arm, out) in arms.iter().zip(&outs).skip(1) {
            let ctx = format!("{ctx}: {} vs {}", arms[0].name, arm.name);
            same(&ctx, "out", &outs[0], out)?;
            same(&ctx, "conv cache", &arms[0].conv, &arm.conv)?;
            same(&ctx, "ssm cache", &arms[0].ssm, &arm.ssm)?;
            same(&ctx, "log buffer", &arms[0].log, &arm.log)?;
        }
        // Committed rows: after the replay of each count, before this step's tokens.
        for (s, &id) in batch.iter().enumerate() {
            let rows: Vec<RowPair> = arms.iter().map(|a| a.row(kv_head + s)).collect();
            check_state(id, &rows, &seqs, &seq, &ctx)?;
            done.states += 1;
        }
        // The snapshot step from the snapshot path's states: every token's attention output.
        let states: Vec<RowPair> = batch.iter().map(|&id| seqs[id].snapshot.clone()).collect();
        let (snap_out, slots) = snaps.step(&states, &qkv, &cur)?;
        for (s, id) in batch.iter().enumerate() {
            for t in 0..n_t {
                let col = s * n_t + t;
                same(
                    &format!("{ctx}: sequence {id}, token {t}"),
                    "attn_out, engine vs snapshots",
                    part(&outs[0], cols, col),
                    part(&snap_out[7], cols, col),
                )?;
                done.snapshot_tokens += 1;
            }
        }
        for ((s, &id), slots) in batch.iter().enumerate().zip(slots) {
            let a = draw_accepted(&mut rng, n_t, seqs[id].steps, s);
            seqs[id].steps += 1;
            let col = |v: &[u8], t: usize| part(v, cols, s * n_t + t).to_vec();
            seqs[id].pending = Some(Pending {
                qkv: (0..n_t).map(|t| col(&qkv, t)).collect(),
                cur: (0..n_t).map(|t| col(&cur, t)).collect(),
                out: (0..n_t).map(|t| col(&outs[0], t)).collect(),
                slots,
                accepted: a,
            });
        }
    }
    done.tally = arms[0].tally.clone();
    Ok(done)
}

fn arms_names() -> [&'static str; 3] {
    ["engine, every fusion", "engine, default fusions", "engine, unfused"]
}

#[test]
fn engine_layout_replay_episodes_are_exact() {
    for (n_t, seed) in [(1, 0xe1), (4, 0xe4), (4, 0xe5), (8, 0xe8)] {
        let done = episode(n_t, seed).unwrap_or_else(|e| panic!("{e}"));
        eprintln!("T {n_t}: {done:?}");
        let t = &done.tally;
        // The episode exercised what it claims: log moves between sets, both sets written, new
        // cells, commits, reads, moves, preemptions and resumptions, accepted tokens decoded.
        assert!(t.moved_cells > 0 && t.sets[0] > 0 && t.sets[1] > 0, "T {n_t}: {t:?}");
        // The arm under test ran every step and commit step of at most four sequences in one
        // launch (`replay_step`'s scope; the report check names any other refusal).
        assert!(t.in_scope > 0 && t.one_launch == t.in_scope, "T {n_t}: {t:?}");
        assert!(t.new_cells > 0 && t.commit_steps > 0 && done.reads > 0 && done.decoded > 0, "T {n_t}: {done:?}");
        assert!(done.joins > CELLS && done.finishes > 0 && done.resumes > 0 && done.preemptions > 0, "T {n_t}: {done:?}");
    }
}

/// Bad input to the engine's replay layer is a typed error, and a refused step or commit
/// changes nothing (bookkeeping, caches, logs).
#[test]
fn bad_input_is_a_typed_error_and_changes_nothing() {
    let n_t = 4;
    let mut g = LayerGraph::new(Executor::Cpu, SHAPE, Step::new(1, 0), 7, Options::OFF).expect("a graph");
    let weights: Weights = WEIGHTS.iter().map(|w| (*w, g.get(w).expect("a weight"))).collect();
    let mut arm = EngineArm::new("engine", Options::ON, n_t, &weights, 7);
    let inputs = |n_s: usize| (vec![0u8; 4 * SHAPE.channels() * n_t * n_s], vec![0u8; 4 * SHAPE.n_embd * n_t * n_s]);
    let (q2, c2) = inputs(2);
    arm.step(&ReplayRows { kv_head: 0, accepted: &[0, 0], new_cells: &[0, 1] }, &q2, &c2).expect("a first step");
    let state = |a: &EngineArm| (a.book.clone(), a.conv.clone(), a.ssm.clone(), a.log.clone());
    let before = state(&arm);
    let rows = |kv_head, accepted: &'static [usize], new_cells: &'static [usize]| ReplayRows { kv_head, accepted, new_cells };
    let refusals: Vec<(&str, rgdn::Result<()>)> = vec![
        ("a count on a new cell", arm.step(&rows(0, &[2, 0], &[0]), &q2, &c2).map(|_| ())),
        ("a count above T", arm.step(&rows(0, &[5, 0], &[]), &q2, &c2).map(|_| ())),
        ("a count on a cell never stepped", arm.step(&rows(2, &[1, 0], &[]), &q2, &c2).map(|_| ())),
        ("cells past M", arm.step(&rows(CELLS - 1, &[0, 0], &[]), &q2, &c2).map(|_| ())),
        ("a new cell named twice", arm.step(&rows(0, &[0, 0], &[1, 1]), &q2, &c2).map(|_| ())),
        ("a new cell outside the step", arm.step(&rows(0, &[0, 0], &[3]), &q2, &c2).map(|_| ())),
        ("no sequence", arm.step(&rows(0, &[], &[]), &q2, &c2).map(|_| ())),
        ("qkv of another step's size", arm.step(&rows(0, &[1], &[]), &q2, &c2).map(|_| ())),
        ("a commit of a cell past M", arm.commit(&[0, CELLS], &[1, 0])),
        ("a commit naming a cell twice", arm.commit(&[1, 0, 1], &[1, 1, 1])),
        ("a commit with a count on a cell never stepped", arm.commit(&[0, 3], &[1, 1])),
        ("a commit with a count above T", arm.commit(&[0], &[n_t + 1])),
        ("a commit with counts and cells of different lengths", arm.commit(&[0, 1], &[1])),
    ];
    for (what, r) in refusals {
        match r {
            Err(Error::Invalid { .. } | Error::IndexOutOfRange { .. }) => {}
            r => panic!("{what}: {r:?}"),
        }
        assert!(state(&arm) == before, "{what}: the refused call changed the layer");
    }
    // A committed cell takes a = 0 only.
    arm.commit(&[1], &[3]).expect("a commit");
    assert!(matches!(arm.step(&rows(0, &[1, 1], &[]), &q2, &c2), Err(Error::Invalid { what, .. }) if what.contains("cell 1")));
    arm.step(&rows(0, &[1, 0], &[]), &q2, &c2).expect("cell 0 replays one token, cell 1 none");
}
