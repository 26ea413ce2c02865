//! \[replay\] Exact replay in an engine's terms (`docs/engine.md`, "Exact replay in the engine";
//! `docs/rollback.md` for what replay is): the token log addressed **by cell**, so that a batch
//! may change between steps (sequences join, finish, are preempted, move).
//!
//! # What the engine passes, what the layer keeps
//!
//! - **Caches** of M rows each (R = 0): cell c's row is its committed conv window and ssm
//!   state. A step of n_s sequences runs cells `kv_head … kv_head + n_s − 1`; sequence s reads
//!   and commits cell `kv_head + s` (there is no source row: a state that must change cell is
//!   committed first and moved by the engine, see [`ReplayCells::commit_steps`]).
//! - **Per sequence, the accepted count** a of its cell's previous step (0 ..= T), T fixed per
//!   layer. A cell with no pending log (never stepped, zeroed, committed) takes a = 0 only;
//!   a = 0 on a cell with a pending log drops that log.
//! - **New cells** (a new sequence): zeroed in place before the step (SCALE by 0 of both rows,
//!   as the snapshot layer's `zero_cell`), no pending log, a = 0.
//! - **The logs** ([`LogLayout`]): two sets of per-cell buffers `[…, T, M]` (conv inputs, k, v,
//!   g, β) in one buffer of the layer's, and per cell the set holding its pending log
//!   ([`ReplayCells`]). A step's log views are these buffers at cell `kv_head`, `[…, T, n_s]`,
//!   contiguous: the replay graph's own shapes ([`ReplayTensors::conforms`] takes any offset),
//!   so every kernel and fusion is the proven one.
//! - **The set a step writes** ([`ReplayCells::prepare`]): one set p for the whole graph (the
//!   kernels take it as a step constant), the one fewer of the step's replaying cells (a > 0)
//!   hold their pending log in. A replaying cell whose log is in set p gets it moved to set
//!   1 − p first: five STAGE copies (device-to-device, stream-ordered, the same bytes) per run
//!   of adjacent such cells. The plan depends on p ([`replay_step_with`] builds the graph
//!   writing set p), so a shape has at most two plans.
//! - **Reading a state.** After a step a cell's committed row lags its sequence by the accepted
//!   tokens of that step until its next step. An engine that reads or moves a state commits it
//!   first: [`ReplayCells::commit_steps`] turns `(cells, accepted)` into steps of zero-valued
//!   tokens (one per run of adjacent cells with a > 0), whose replay and window commit write the
//!   rows and whose outputs are dropped; the cells then have no pending log.
//!
//! # What runs
//!
//! A step is [`ReplayStep::pre_ops`] (the log moves and the zeroing, plain ops validated and
//! launched as every op is) and then the plan of [`replay_step_with`]: the replay layer graph
//! (`graph::layer::replay_layer_ops`) through the fusion pass and its one legality check
//! (`fusion::compile_for`) against the memory it runs on, as [`super::layer_step_with`] plans a
//! snapshot step. The checks that cost (the graph, the fusion pass, every op's validation)
//! run once per plan; per step only the bookkeeping here (O(n_s)) and the index rules.

use super::hf::{Engine, GdnConfig, GdnLayer, GdnWeights, Plans, RawBuffers, StepRows, WeightLayout, engine_lengths, layer_tensors};
use super::{CallerMemory, CompiledStep, StepPlan};
use crate::error::{Error, Result};
use crate::fusion::{Options, Report};
use crate::gpu::Gpu;
use crate::graph::layer::{LayerSpec, ReplayTensors, Rollback, replay_layer_ops};
use crate::graph::{Bound, ByteSet, Node, Stage};
use crate::layer::{GdnShape, LayerInit, LayerTensors, Step};
use crate::memory::Memory;
use crate::ops::Precision;
use crate::ops::{Op, Scale};
use crate::reference::replay::TokenLog;
use crate::tensor::{BufferId, DType, Layout, Tensor};
use cudarc::driver::{CudaSlice, CudaView, CudaViewMut};

const OP: &str = "GdnLayer (replay)";

/// Buffer ids of a bound replay step past [`super::hf::ids`] (0 … 7, the same meaning; the
/// index buffer holds the source rows `kv_head + s`).
pub mod ids {
    use crate::tensor::BufferId;
    /// The layer's two log sets ([`super::LogLayout`]).
    pub const LOGS: BufferId = BufferId(8);
    /// I32 \[n_s\]: the accepted counts (an index buffer).
    pub const ACCEPTED: BufferId = BufferId(9);
    /// I32 \[n_s\]: the window rows `(T − a)·n_s + s` (an index buffer).
    pub const WINDOW_ROWS: BufferId = BufferId(10);
}

/// Where the layer's two log sets lie in its log buffer ([`ids::LOGS`]): per set and tensor a
/// contiguous `[…, T, M]` array (cell c's T tokens at `c·(bytes a cell)`), each aligned to 256
/// bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogLayout {
    /// T, the tokens of a step.
    pub n_tokens: usize,
    /// M, the cells.
    pub cells: usize,
    /// Per tensor, its first two dimensions (`[C, 1]` for the conv inputs, whose `ne` is
    /// `[C, T, n, 1]`; `[D, H_k]`, `[D, H_v]`, `[1, H_v]`, `[1, H_v]` for the others, `[…, T, n]`).
    heads: [[usize; 2]; 5],
    /// Per set and tensor, the byte offset of cell 0.
    offsets: [[usize; 5]; 2],
    /// Per tensor, the bytes of one cell (T tokens).
    per_cell: [usize; 5],
    /// The buffer's size.
    pub bytes: usize,
}

impl LogLayout {
    /// The layout for `shape`'s logs of `n_tokens` tokens (1 ..= 16) on `cells` cells (≥ 1).
    pub fn of(shape: &GdnShape, n_tokens: usize, cells: usize) -> Result<Self> {
        if !(1..=crate::layer::MAX_TOKENS).contains(&n_tokens) {
            return Err(Error::Unsupported { op: OP, what: format!("T = {n_tokens} logged tokens (1 ..= {})", crate::layer::MAX_TOKENS) });
        }
        if cells == 0 {
            return Err(Error::Invalid { op: OP, what: "no cell: M = 0".into() });
        }
        let (c, d, hk, hv) = (shape.try_channels()?, shape.head_dim, shape.n_k_heads, shape.n_v_heads);
        let heads = [[c, 1], [d, hk], [d, hv], [1, hv], [1, hv]];
        let overflow = |what: &str| Error::Overflow { op: OP, arg: "logs", what: what.into() };
        let mut per_cell = [0usize; 5];
        for (p, [a, b]) in per_cell.iter_mut().zip(heads) {
            *p = crate::tensor::try_product(OP, "logs", "bytes a cell", &[a, b, n_tokens, 4])?;
        }
        let mut offsets = [[0usize; 5]; 2];
        let mut at = 0usize;
        for set in &mut offsets {
            for (o, &p) in set.iter_mut().zip(&per_cell) {
                *o = at;
                let bytes = p.checked_mul(cells).ok_or_else(|| overflow("bytes a tensor"))?;
                at = at.checked_add(bytes).and_then(|x| x.checked_next_multiple_of(256)).ok_or_else(|| overflow("buffer bytes"))?;
            }
        }
        Ok(LogLayout { n_tokens, cells, heads, offsets, per_cell, bytes: at })
    }

    /// Tensor `i`'s view of `n` cells from `first` in log set `set`.
    fn view(&self, set: usize, i: usize, first: usize, n: usize) -> Result<Tensor> {
        let [a, b] = self.heads[i];
        let ne = if i == 0 { [a, self.n_tokens, n, 1] } else { [a, b, self.n_tokens, n] };
        let contiguous = Layout::contiguous(DType::F32, ne);
        // Offsets below `bytes` for a layout of `of` (the callers' range check and `of`'s
        // arithmetic); checked, for one whose public fields were changed since.
        let offset = first.checked_mul(self.per_cell[i]).and_then(|o| o.checked_add(self.offsets[set][i]));
        let offset = offset.ok_or_else(|| Error::Overflow { op: OP, arg: "logs", what: format!("offset of cell {first}") })?;
        Ok(Tensor::new(ids::LOGS, contiguous.view(ne, contiguous.nb, offset)))
    }

    /// Refuses `n` cells from `first` that are not all below M (or none).
    fn check_cells(&self, arg: &'static str, first: usize, n: usize) -> Result<()> {
        match first.checked_add(n) {
            Some(end) if n > 0 && end <= self.cells => Ok(()),
            _ => Err(Error::IndexOutOfRange {
                op: OP,
                arg,
                position: 0,
                index: i64::try_from(first.saturating_add(n).saturating_sub(1)).unwrap_or(i64::MAX),
                rows: self.cells,
            }),
        }
    }

    /// Log set `set` (0 or 1) at cells `kv_head … kv_head + n_s − 1`: the step's `[…, T, n_s]`
    /// views.
    pub fn views(&self, set: usize, kv_head: usize, n_s: usize) -> Result<TokenLog> {
        check_set(set)?;
        self.check_cells("kv_head", kv_head, n_s)?;
        let v = |i| self.view(set, i, kv_head, n_s);
        Ok(TokenLog { qkv: v(0)?, k: v(1)?, v: v(2)?, g: v(3)?, beta: v(4)? })
    }

    /// The five STAGE copies moving the logs of `n` cells from `first` out of set `from` into
    /// the other set, at the same cells (the same bytes).
    pub fn moves(&self, from: usize, first: usize, n: usize) -> Result<Vec<Box<dyn Op>>> {
        check_set(from)?;
        self.check_cells("cells", first, n)?;
        (0..5)
            .map(|i| Ok(Box::new(Stage { src: self.view(from, i, first, n)?, dst: self.view(1 - from, i, first, n)? }) as Box<dyn Op>))
            .collect()
    }
}

fn check_set(set: usize) -> Result<()> {
    if set > 1 {
        return Err(Error::Invalid { op: OP, what: format!("log set {set} (a layer has two: 0 and 1)") });
    }
    Ok(())
}

/// One replay step of the engine: the cells `kv_head … kv_head + n_s − 1`, each with the
/// accepted count of its previous step, and the new cells among them.
#[derive(Clone, Copy, Debug)]
pub struct ReplayRows<'r> {
    /// The cell sequence 0 runs; sequence s runs `kv_head + s`.
    pub kv_head: usize,
    /// Per sequence, the accepted count of its cell's previous step (n_s = `accepted.len()`).
    pub accepted: &'r [usize],
    /// Cells of this step whose sequence is new: zeroed before the step; their count must be 0.
    pub new_cells: &'r [usize],
}

/// A checked step ([`ReplayCells::prepare`]): what to run and how the bookkeeping changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayStep {
    /// The cell of sequence 0.
    pub kv_head: usize,
    /// Per sequence, its accepted count (n_s = its length).
    pub accepted: Vec<usize>,
    /// The log set the step writes; it replays set 1 − `log_set`.
    pub log_set: usize,
    /// Runs of adjacent cells (first, count) whose pending log is moved from set `log_set` to
    /// set 1 − `log_set` before the step.
    pub moves: Vec<(usize, usize)>,
    /// Cells zeroed before the step, ascending.
    pub new_cells: Vec<usize>,
    /// T.
    pub n_tokens: usize,
    /// M.
    pub cells: usize,
}

impl ReplayStep {
    /// n_s.
    pub fn n_seqs(&self) -> usize {
        self.accepted.len()
    }

    /// A hand-built step with no accepted count has no sequence: an [`Error::Invalid`] (as
    /// [`ReplayCells::prepare`] says), not a one-sequence step.
    fn check_some_sequence(&self) -> Result<()> {
        if self.n_seqs() == 0 {
            return Err(Error::Invalid { op: OP, what: format!("0 sequences (1 ..= {})", crate::layer::MAX_SEQS) });
        }
        Ok(())
    }

    /// The ggml-view step: T tokens, R = 0, M cells, sequence s reading and committing cell
    /// `kv_head + s`.
    pub fn step(&self) -> Result<Step> {
        self.check_some_sequence()?;
        // Saturating: a hand-built step's cells past usize::MAX are refused by `validate`.
        let others: Vec<(usize, usize)> = (1..self.n_seqs()).map(|s| (self.kv_head.saturating_add(s), 0)).collect();
        let step = Step { cells: self.cells, kv_head: self.kv_head, src_cell: self.kv_head, ..Step::new(self.n_tokens, 0) }
            .with_sequences(&others)?;
        step.validate()?;
        Ok(step)
    }

    /// The three index buffers' values: the source rows `kv_head + s` ([`super::hf::ids::INDEX`]),
    /// the accepted counts ([`ids::ACCEPTED`]) and the window rows `(T − a)·n_s + s`
    /// ([`ids::WINDOW_ROWS`], `ReplayTensors::set_accepted`'s rule).
    ///
    /// For a step of [`ReplayCells::prepare`] every value is below M ≤ i32::MAX
    /// ([`ReplayCells::new`]) or (T + 1)·n_s ≤ 17·256; a hand-built one (the fields are public)
    /// with a count above T or a value past I32 is a typed error.
    pub fn index_values(&self) -> Result<[Vec<i32>; 3]> {
        self.check_some_sequence()?;
        let n_s = self.n_seqs();
        let as_i32 = |arg: &'static str, what: &dyn Fn() -> String, v: Option<usize>| {
            v.and_then(|v| i32::try_from(v).ok()).ok_or_else(|| Error::Overflow { op: OP, arg, what: what() })
        };
        let mut sources = Vec::with_capacity(n_s);
        let mut accepted = Vec::with_capacity(n_s);
        let mut windows = Vec::with_capacity(n_s);
        for (s, &a) in self.accepted.iter().enumerate() {
            if a > self.n_tokens {
                let index = i64::try_from(a).unwrap_or(i64::MAX);
                return Err(Error::IndexOutOfRange { op: OP, arg: "accepted", position: s, index, rows: self.n_tokens + 1 });
            }
            sources.push(as_i32("kv_head", &|| format!("source row kv_head + {s} as an I32"), self.kv_head.checked_add(s))?);
            accepted.push(as_i32("accepted", &|| format!("accepted count {a} as an I32"), Some(a))?);
            let row = (self.n_tokens - a).checked_mul(n_s).and_then(|r| r.checked_add(s));
            windows.push(as_i32("window_rows", &|| format!("window row (T − a)·n_s + s of sequence {s} as an I32"), row)?);
        }
        Ok([sources, accepted, windows])
    }

    /// What runs before the step's plan, in this order: the log moves ([`LogLayout::moves`]
    /// out of set `log_set`), then each new cell's rows of both caches zeroed in place (SCALE
    /// by 0, as the snapshot layer zeroes its `zero_cell`).
    pub fn pre_ops(&self, logs: &LogLayout, conv_cache: &Tensor, ssm_cache: &Tensor) -> Result<Vec<Box<dyn Op>>> {
        let mut ops = Vec::new();
        for &(first, n) in &self.moves {
            ops.extend(logs.moves(self.log_set, first, n)?);
        }
        for &cell in &self.new_cells {
            for (arg, cache) in [("conv_cache", conv_cache), ("ssm_cache", ssm_cache)] {
                let row = LayerTensors::try_cache_row(arg, cache, cell)?;
                ops.push(Box::new(Scale { src: row, dst: row, scale: 0.0, bias: 0.0 }));
            }
        }
        Ok(ops)
    }
}

/// Per cell, the log set holding its pending log (the last step's, not yet replayed), if any:
/// the host's record, the only one (no kernel reads or writes it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayCells {
    n_tokens: usize,
    pending: Vec<Option<usize>>,
}

impl ReplayCells {
    /// M cells, none with a pending log; steps of `n_tokens` (T) tokens. T outside 1 ..= 16 is
    /// an [`Error::Unsupported`]; M = 0, or more cells than I32 index values address, an
    /// [`Error::Invalid`]; a record the host cannot allocate an [`Error::OutOfMemory`].
    pub fn new(n_tokens: usize, cells: usize) -> Result<Self> {
        if !(1..=crate::layer::MAX_TOKENS).contains(&n_tokens) {
            return Err(Error::Unsupported { op: OP, what: format!("T = {n_tokens} tokens a step (1 ..= {})", crate::layer::MAX_TOKENS) });
        }
        if cells == 0 || cells > i32::MAX as usize {
            return Err(Error::Invalid { op: OP, what: format!("M = {cells} cells (1 ..= {}: the rows are I32 index values)", i32::MAX) });
        }
        let mut pending = Vec::new();
        let bytes = cells.saturating_mul(std::mem::size_of::<Option<usize>>());
        pending.try_reserve_exact(cells).map_err(|_| Error::OutOfMemory { op: OP, requested: bytes, available: 0, budget: 0 })?;
        pending.resize(cells, None);
        Ok(ReplayCells { n_tokens, pending })
    }

    /// T.
    pub fn n_tokens(&self) -> usize {
        self.n_tokens
    }

    /// M.
    pub fn cells(&self) -> usize {
        self.pending.len()
    }

    /// The set holding cell `cell`'s pending log (None: none, or no such cell).
    pub fn pending(&self, cell: usize) -> Option<usize> {
        self.pending.get(cell).copied().flatten()
    }

    /// Checks one step and decides its log set and moves. Typed errors, nothing changed:
    /// no sequence or more than [`crate::layer::MAX_SEQS`] ([`Error::Invalid`]); cells past M
    /// ([`Error::IndexOutOfRange`], `kv_head`); a count above T ([`Error::IndexOutOfRange`],
    /// `accepted`, rows T + 1); a count above 0 on a cell with no pending log or on a new cell,
    /// a new cell outside the step or named twice ([`Error::Invalid`]).
    pub fn prepare(&self, rows: &ReplayRows) -> Result<ReplayStep> {
        let n_s = rows.accepted.len();
        if n_s == 0 || n_s > crate::layer::MAX_SEQS {
            return Err(Error::Invalid { op: OP, what: format!("{n_s} sequences (1 ..= {})", crate::layer::MAX_SEQS) });
        }
        let m = self.cells();
        if rows.kv_head.checked_add(n_s).is_none_or(|end| end > m) {
            return Err(Error::IndexOutOfRange {
                op: OP,
                arg: "kv_head",
                position: 0,
                index: i64::try_from(rows.kv_head.saturating_add(n_s - 1)).unwrap_or(i64::MAX),
                rows: m,
            });
        }
        let mut new_cells = rows.new_cells.to_vec();
        new_cells.sort_unstable();
        for (i, &cell) in new_cells.iter().enumerate() {
            if !(rows.kv_head..rows.kv_head + n_s).contains(&cell) {
                return Err(Error::Invalid {
                    op: OP,
                    what: format!("new cell {cell} is not one of the step's cells {} … {}", rows.kv_head, rows.kv_head + n_s - 1),
                });
            }
            if i > 0 && new_cells[i - 1] == cell {
                return Err(Error::Invalid { op: OP, what: format!("new cell {cell} named twice") });
            }
        }
        for (s, &a) in rows.accepted.iter().enumerate() {
            self.check_count(s, rows.kv_head + s, a, new_cells.binary_search(&(rows.kv_head + s)).is_ok())?;
        }
        let (log_set, moves) = self.choose(rows.kv_head, rows.accepted);
        Ok(ReplayStep {
            kv_head: rows.kv_head,
            accepted: rows.accepted.to_vec(),
            log_set,
            moves,
            new_cells,
            n_tokens: self.n_tokens,
            cells: m,
        })
    }

    /// Sequence `position`'s count `a` on `cell`: 0 ..= T, and 0 unless the cell has a pending
    /// log (and is not new).
    fn check_count(&self, position: usize, cell: usize, a: usize, new: bool) -> Result<()> {
        if a > self.n_tokens {
            return Err(Error::IndexOutOfRange {
                op: OP,
                arg: "accepted",
                position,
                index: i64::try_from(a).unwrap_or(i64::MAX),
                rows: self.n_tokens + 1,
            });
        }
        if a > 0 && new {
            return Err(Error::Invalid {
                op: OP,
                what: format!("sequence {position}: new cell {cell} has no log to accept {a} tokens of"),
            });
        }
        if a > 0 && self.pending(cell).is_none() {
            return Err(Error::Invalid {
                op: OP,
                what: format!("sequence {position}: cell {cell} has no pending log (never stepped, or committed) to accept {a} tokens of"),
            });
        }
        Ok(())
    }

    /// The set p to write for cells `kv_head …` with counts `accepted`: 1 − p is the set most
    /// replaying cells (a > 0) hold their log in (ties: p = 1). The moves: runs of adjacent
    /// replaying cells whose log is in set p.
    fn choose(&self, kv_head: usize, accepted: &[usize]) -> (usize, Vec<(usize, usize)>) {
        let replaying = |s: usize| accepted[s] > 0;
        let in_set = |set: usize| (0..accepted.len()).filter(|&s| replaying(s) && self.pending(kv_head + s) == Some(set)).count();
        let log_set = if in_set(0) >= in_set(1) { 1 } else { 0 };
        let mut moves: Vec<(usize, usize)> = Vec::new();
        for s in (0..accepted.len()).filter(|&s| replaying(s) && self.pending(kv_head + s) == Some(log_set)) {
            let cell = kv_head + s;
            match moves.last_mut() {
                Some((first, n)) if *first + *n == cell => *n += 1,
                _ => moves.push((cell, 1)),
            }
        }
        (log_set, moves)
    }

    /// The cells `first … first + n − 1` of this book, or a typed error naming `arg` (a
    /// hand-built step: [`ReplayStep`]'s fields are public).
    fn cell_range(&self, arg: &'static str, first: usize, n: usize) -> Result<std::ops::Range<usize>> {
        match first.checked_add(n) {
            Some(end) if end <= self.cells() => Ok(first..end),
            _ => Err(Error::IndexOutOfRange {
                op: OP,
                arg,
                position: 0,
                index: i64::try_from(first).unwrap_or(i64::MAX),
                rows: self.cells(),
            }),
        }
    }

    /// Records that `step`'s moves were enqueued: their cells' logs are in set 1 − p. Cells
    /// past M or a set other than 0 and 1 (a hand-built step) are a typed error, nothing recorded.
    pub fn moved(&mut self, step: &ReplayStep) -> Result<()> {
        check_set(step.log_set)?;
        let ranges = step.moves.iter().map(|&(first, n)| self.cell_range("moves", first, n)).collect::<Result<Vec<_>>>()?;
        for r in ranges {
            self.pending[r].fill(Some(1 - step.log_set));
        }
        Ok(())
    }

    /// Records that `step` was enqueued: each of its cells' pending log is the one it wrote.
    /// Cells past M or a set other than 0 and 1 (a hand-built step) are a typed error, nothing
    /// recorded.
    pub fn stepped(&mut self, step: &ReplayStep) -> Result<()> {
        check_set(step.log_set)?;
        let r = self.cell_range("kv_head", step.kv_head, step.n_seqs())?;
        self.pending[r].fill(Some(step.log_set));
        Ok(())
    }

    /// The steps of zero-valued tokens that commit `cells` (each with the accepted count of
    /// its previous step): one per run of adjacent cells with a > 0, in ascending cell order.
    /// Run each (its pre-ops, its plan, on zero-valued qkv and hidden inputs, its outputs
    /// dropped), recording [`ReplayCells::committed`] for its cells as it is enqueued (its log,
    /// the zero tokens', must never be replayed), and then for all of `cells`. Typed errors, nothing changed: counts and
    /// cells of different lengths, a cell past M or named twice, a count above T or above 0 on
    /// a cell with no pending log.
    pub fn commit_steps(&self, cells: &[usize], accepted: &[usize]) -> Result<Vec<ReplayStep>> {
        if cells.len() != accepted.len() {
            return Err(Error::Invalid { op: OP, what: format!("{} accepted counts for {} cells", accepted.len(), cells.len()) });
        }
        let mut order: Vec<(usize, usize, usize)> = cells.iter().zip(accepted).enumerate().map(|(i, (&c, &a))| (c, a, i)).collect();
        order.sort_unstable();
        for (j, &(cell, a, position)) in order.iter().enumerate() {
            if cell >= self.cells() {
                return Err(Error::IndexOutOfRange {
                    op: OP,
                    arg: "cells",
                    position,
                    index: i64::try_from(cell).unwrap_or(i64::MAX),
                    rows: self.cells(),
                });
            }
            if j > 0 && order[j - 1].0 == cell {
                return Err(Error::Invalid { op: OP, what: format!("cell {cell} named twice") });
            }
            self.check_count(position, cell, a, false)?;
        }
        let mut runs: Vec<(usize, Vec<usize>)> = Vec::new();
        for &(cell, a, _) in order.iter().filter(|(_, a, _)| *a > 0) {
            match runs.last_mut() {
                Some((first, counts)) if *first + counts.len() == cell && counts.len() < crate::layer::MAX_SEQS => counts.push(a),
                _ => runs.push((cell, vec![a])),
            }
        }
        runs.into_iter().map(|(kv_head, accepted)| self.prepare(&ReplayRows { kv_head, accepted: &accepted, new_cells: &[] })).collect()
    }

    /// Records that `cells` were committed (their commit steps enqueued): no pending log; their
    /// next step takes a = 0.
    pub fn committed(&mut self, cells: &[usize]) {
        for &c in cells {
            if let Some(p) = self.pending.get_mut(c) {
                *p = None;
            }
        }
    }
}

/// A replay step's tensors over the buffers [`super::hf::ids`] and [`ids`] name: the layer's
/// ([`layer_tensors`]: the engine's five, the weights, the intermediates in the scratch buffer,
/// the source rows), and the replay tensors — the log sets' views at cell `kv_head`, the counts
/// and window rows in their index buffers, the commit's and the verify's scratch values after
/// the layer's in the scratch buffer. Returns them and the scratch bytes they need.
pub fn replay_tensors(
    shape: &GdnShape,
    step: &Step,
    dtype: DType,
    weights: &WeightLayout,
    logs: &LogLayout,
) -> Result<(LayerTensors, ReplayTensors, usize)> {
    let (t, mut scratch) = layer_tensors(shape, step, dtype, weights)?;
    if step.n_tokens != logs.n_tokens || step.cells != logs.cells {
        return Err(Error::Invalid {
            op: OP,
            what: format!("a step of T = {}, M = {} on logs of T = {}, M = {}", step.n_tokens, step.cells, logs.n_tokens, logs.cells),
        });
    }
    let n_s = step.n_seqs();
    let table = ReplayTensors::table(shape, step)?;
    let mut all = [Tensor::new(BufferId(usize::MAX), Layout::contiguous(DType::F32, [0; 4])); crate::graph::layer::REPLAY_TENSORS];
    let sets = [logs.views(0, step.kv_head, n_s)?, logs.views(1, step.kv_head, n_s)?];
    for (set, log) in sets.iter().enumerate() {
        for (i, t) in [log.qkv, log.k, log.v, log.g, log.beta].into_iter().enumerate() {
            all[set * 5 + i] = t;
        }
    }
    for (i, (name, dt, ne)) in table.into_iter().enumerate().skip(10) {
        let contiguous = Layout::contiguous(dt, ne);
        all[i] = match name {
            "accepted" => Tensor::new(ids::ACCEPTED, contiguous),
            "window_rows" => Tensor::new(ids::WINDOW_ROWS, contiguous),
            _ => {
                let at = scratch;
                let over = || Error::Overflow { op: OP, arg: name, what: "scratch".into() };
                let bytes = Layout::contiguous_bytes(dt, ne).ok_or_else(over)?;
                scratch = at.checked_add(bytes).and_then(|x| x.checked_next_multiple_of(256)).ok_or_else(over)?;
                Tensor::new(super::hf::ids::SCRATCH, contiguous.view(ne, contiguous.nb, at))
            }
        };
    }
    let r = ReplayTensors::from_array(all);
    r.conforms(shape, step)?;
    Ok((t, r, scratch))
}

/// One replay step's graph writing log set `log_set` over `t` and `r` (in `mem`, the memory it
/// will run on), in launch order: the unfused replay graph (`graph::layer::replay_layer_ops`)
/// with [`Options::OFF`], otherwise that graph through the fusion pass and its legality check
/// against `mem` (`fusion::compile_for`), as [`super::layer_step_with`] plans a snapshot step.
/// What the step hands on: both caches, both log sets at the step's cells, its products and the
/// attention output.
#[allow(clippy::too_many_arguments)]
pub fn replay_step_with(
    t: &LayerTensors,
    r: &ReplayTensors,
    shape: &GdnShape,
    step: &Step,
    init: &LayerInit,
    log_set: usize,
    fusions: Options,
    mem: &dyn Memory,
) -> Result<CompiledStep> {
    check_set(log_set)?;
    let spec = LayerSpec {
        weights: init.mat_vec_weights,
        precision: init.precision,
        rollback: Rollback::Replay { log_set },
        ..LayerSpec::new(*shape, *step)
    };
    let ops = replay_layer_ops(t, r, &spec)?;
    if fusions == Options::OFF {
        return Ok(CompiledStep { ops, report: crate::fusion::Report::all_off(0) });
    }
    let nodes: Vec<Node> = ops.into_iter().map(|op| Node::new(op, Some(0))).collect();
    let logs = r.logs.iter().flat_map(|l| [l.qkv, l.k, l.v, l.g, l.beta]);
    let observed: Vec<Tensor> =
        [t.conv_cache, t.ssm_cache, t.conv_out, t.q_norm, t.alpha, t.beta_raw, t.attn_out].into_iter().chain(logs).collect();
    let live_out = ByteSet::of_all(&observed, Bound::Over);
    let (nodes, report) = crate::fusion::compile_for(nodes, &live_out, fusions, Some(mem));
    Ok(CompiledStep { ops: nodes.into_iter().map(|n| n.op).collect(), report })
}

/// What selects a replay plan besides the buffers: the step's shape, the set it writes, the
/// `Gpu` it runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ReplayKey {
    gpu: (usize, u64),
    n_seqs: usize,
    kv_head: usize,
    log_set: usize,
    fusions: Options,
}

/// What a replay step's plan was laid out over: the layer's views, the log's, the scratch size.
type ReplayLayout = (LayerTensors, ReplayTensors, usize);

/// One GDN layer on the GPU whose rollback is exact replay (the module docs): a
/// [`GdnLayer`]'s weights, scratch and conventions (`engine::hf`'s module docs; caches of M rows,
/// R = 0), the two log sets of T tokens for M cells, and the cells' bookkeeping. Its steps take
/// [`ReplayRows`]; [`GdnReplayLayer::commit`] writes the states an engine is about to read or
/// move.
pub struct GdnReplayLayer {
    layer: GdnLayer,
    logs: LogLayout,
    log_buffer: CudaSlice<u8>,
    accepted: CudaSlice<i32>,
    window_rows: CudaSlice<i32>,
    /// Zero-valued qkv and hidden inputs of a commit step (never written: bound read-only).
    zeros: Option<CudaSlice<f32>>,
    book: ReplayCells,
    plans: Plans<ReplayKey, ReplayLayout>,
}

impl GdnReplayLayer {
    /// [`GdnLayer::new`]'s checks and upload, and the log sets for steps of `n_tokens` (T,
    /// 1 ..= 16: the engine's draft length + 1) on `cells` (M) cells, zeroed, no cell pending.
    pub fn new(gpu: &Gpu, config: GdnConfig, weights: &GdnWeights, fusions: Options, n_tokens: usize, cells: usize) -> Result<Self> {
        let layer = GdnLayer::new(gpu, config, weights, fusions)?;
        let logs = LogLayout::of(&layer.shape, n_tokens, cells)?;
        let stream = gpu.stream();
        Ok(GdnReplayLayer {
            log_buffer: stream.alloc_zeros::<u8>(logs.bytes)?,
            accepted: stream.alloc_zeros::<i32>(crate::layer::MAX_SEQS)?,
            window_rows: stream.alloc_zeros::<i32>(crate::layer::MAX_SEQS)?,
            zeros: None,
            book: ReplayCells::new(n_tokens, cells)?,
            logs,
            layer,
            plans: Plans::new(),
        })
    }

    /// The cells' bookkeeping (which set holds each cell's pending log).
    pub fn cells(&self) -> &ReplayCells {
        &self.book
    }

    /// What the fusion pass decided for the last step's plan; None before the first step.
    pub fn report(&self) -> Option<&Report> {
        self.last_plan().map(StepPlan::report)
    }

    /// The plan the last step ran.
    pub fn last_plan(&self) -> Option<&StepPlan> {
        self.plans.last_plan()
    }

    /// How many step shapes (and log sets) the layer holds plans for (at most 16).
    pub fn planned_shapes(&self) -> usize {
        self.plans.len()
    }

    /// One step into a buffer of the layer's own; returns its view, `[n_s][T][H_v][D]` F32.
    /// `conv_cache` and `ssm_cache` are M rows each; `qkv` and `hidden` hold T tokens of each of
    /// the n_s = `rows.accepted.len()` sequences.
    pub fn step<'s>(
        &'s mut self,
        gpu: &Gpu,
        conv_cache: CudaViewMut<'_, f32>,
        ssm_cache: CudaViewMut<'_, f32>,
        qkv: CudaView<'_, f32>,
        hidden: CudaView<'_, f32>,
        rows: &ReplayRows,
    ) -> Result<CudaView<'s, f32>> {
        let st = self.book.prepare(rows)?;
        let out_len = self.own_output(gpu, &st)?;
        self.run(gpu, Engine::Views { conv_cache, ssm_cache, qkv, hidden, out: None }, &st)?;
        Ok(self.layer.output.slice(0..out_len))
    }

    /// One step writing the engine's `out` (`[n_s][T][H_v][D]` F32, exactly that long).
    #[allow(clippy::too_many_arguments)]
    pub fn step_into(
        &mut self,
        gpu: &Gpu,
        conv_cache: CudaViewMut<'_, f32>,
        ssm_cache: CudaViewMut<'_, f32>,
        qkv: CudaView<'_, f32>,
        hidden: CudaView<'_, f32>,
        out: CudaViewMut<'_, f32>,
        rows: &ReplayRows,
    ) -> Result<()> {
        let st = self.book.prepare(rows)?;
        self.run(gpu, Engine::Views { conv_cache, ssm_cache, qkv, hidden, out: Some(out) }, &st)
    }

    /// One step on buffers the engine names by address ([`GdnLayer::step_raw`]'s checks).
    ///
    /// # Safety
    /// As [`GdnLayer::step_raw`]: every range stays allocated until the step has run on
    /// `gpu`'s stream, and while it may run nothing else writes any of them, nor reads
    /// `conv_cache`, `ssm_cache` or `out`.
    pub unsafe fn step_raw(&mut self, gpu: &Gpu, buffers: RawBuffers, rows: &ReplayRows) -> Result<()> {
        let st = self.book.prepare(rows)?;
        self.run(gpu, Engine::Raw(buffers), &st)
    }

    /// Commits `cells`, each with the accepted count of its previous step, before the engine
    /// reads or moves their states ([`ReplayCells::commit_steps`]: steps of zero-valued tokens,
    /// one per run of adjacent cells with a > 0, their outputs dropped). Afterwards the cells
    /// have no pending log: row `c` of each cache is cell c's whole state, and its next step
    /// takes a = 0. Typed errors (nothing launched) as [`ReplayCells::commit_steps`] says.
    pub fn commit(
        &mut self,
        gpu: &Gpu,
        mut conv_cache: CudaViewMut<'_, f32>,
        mut ssm_cache: CudaViewMut<'_, f32>,
        cells: &[usize],
        accepted: &[usize],
    ) -> Result<()> {
        let (c, e) = (self.layer.shape.try_channels()?, self.layer.shape.n_embd);
        for st in self.book.commit_steps(cells, accepted)? {
            let cols = st.n_tokens * st.n_seqs();
            let need = c.max(e) * cols;
            let zeros = match self.zeros.take() {
                Some(z) if z.len() >= need => z,
                _ => gpu.stream().alloc_zeros::<f32>(need)?,
            };
            let ran = self.own_output(gpu, &st).and_then(|_| {
                let (qkv, hidden) = (zeros.slice(0..c * cols), zeros.slice(0..e * cols));
                let engine =
                    Engine::Views { conv_cache: conv_cache.slice_mut(..), ssm_cache: ssm_cache.slice_mut(..), qkv, hidden, out: None };
                self.run(gpu, engine, &st)
            });
            self.zeros = Some(zeros);
            ran?;
            // This run's cells are committed now, whatever a later run does: their pending log
            // is the zero tokens', which must never be replayed.
            self.book.committed(&(st.kv_head..st.kv_head + st.n_seqs()).collect::<Vec<_>>());
        }
        self.book.committed(cells);
        Ok(())
    }

    /// Grows the layer's own output buffer to the step's output; its length.
    fn own_output(&mut self, gpu: &Gpu, st: &ReplayStep) -> Result<usize> {
        let out_len = crate::tensor::try_product(
            OP,
            "out",
            "f32 elements",
            &[self.layer.shape.head_dim, self.layer.shape.n_v_heads, st.n_tokens, st.n_seqs()],
        )?;
        if self.layer.output.len() < out_len {
            self.layer.output = gpu.stream().alloc_zeros::<f32>(out_len)?;
        }
        Ok(out_len)
    }

    /// Checks the engine's buffers, binds them with the layer's own (`hf::ids`, then [`ids`]),
    /// finds (or makes) the plan for this shape, set and these addresses, enqueues the step's
    /// pre-ops and runs the plan; the bookkeeping follows what was enqueued.
    fn run(&mut self, gpu: &Gpu, engine: Engine<'_>, st: &ReplayStep) -> Result<()> {
        if gpu.context().cu_ctx() as usize != self.layer.ctx {
            return Err(Error::Invalid { op: OP, what: "the Gpu runs on another CUDA context than the layer's weights".into() });
        }
        let step = st.step()?;
        let [sources, accepted, windows] = st.index_values()?;
        let rows: Vec<u32> = sources.iter().map(|&v| v as u32).collect();
        let step_rows =
            StepRows { n_tokens: st.n_tokens, cells: st.cells, rollback: 0, kv_head: st.kv_head, sources: &rows, zero_cell: None };
        let lengths = engine_lengths(&self.layer.shape, &step_rows)?;
        engine.check_lengths(&lengths)?;
        let key = ReplayKey {
            gpu: (gpu.context().cu_ctx() as usize, gpu.grid_sync()),
            n_seqs: st.n_seqs(),
            kv_head: st.kv_head,
            log_set: st.log_set,
            fusions: self.layer.fusions,
        };
        let (tensors, replay, scratch_bytes) = match self.plans.layout(&key) {
            Some(layout) => layout,
            None => replay_tensors(&self.layer.shape, &step, self.layer.dtype, &self.layer.weight_layout, &self.logs)?,
        };
        if self.layer.scratch.len() < scratch_bytes {
            self.layer.scratch = gpu.stream().alloc_zeros::<u8>(scratch_bytes)?;
        }
        let GdnReplayLayer { layer, logs, log_buffer, accepted: accepted_buf, window_rows, book, plans, .. } = self;
        let GdnLayer { shape, dtype, weights, scratch, output, index, .. } = layer;
        let mut mem = CallerMemory::new(gpu);
        engine.bind(&mut mem, output, lengths[4].1)?;
        mem.bind(&*weights)?;
        mem.bind_mut(scratch)?;
        mem.bind_indices(index, &sources)?;
        mem.bind_mut(log_buffer)?;
        mem.bind_indices(accepted_buf, &accepted)?;
        mem.bind_indices(window_rows, &windows)?;
        // A new shape or set, or the same on other buffers: planned once.
        let make = |key: &ReplayKey| -> Result<(ReplayLayout, StepPlan)> {
            let init = LayerInit { mat_vec_weights: *dtype, precision: Precision::Default, specials: false };
            let compiled = replay_step_with(&tensors, &replay, shape, &step, &init, key.log_set, key.fusions, &mem)?;
            Ok(((tensors.clone(), replay, scratch_bytes), mem.plan(compiled)?))
        };
        let at = plans.plan(key, &mem, &make)?;
        // The moves and the zeroing: validated and launched as every op is, on the same stream,
        // so the plan's launches run after them. What `moved` and `stepped` record was checked
        // before (the sequences' cells by `st.step()`, the set by the plan, the moves' cells by
        // `pre_ops`), so neither fails after a launch.
        mem.enqueue(&st.pre_ops(logs, &tensors.conv_cache, &tensors.ssm_cache)?)?;
        book.moved(st)?;
        // As `GdnLayer`'s step: a fused op's index rules stricter than the unfused chain's
        // refuse before any launch, and the step runs unfused.
        let unfused = (key.fusions != Options::OFF).then_some(ReplayKey { fusions: Options::OFF, ..key });
        plans.run(at, &mem, unfused, &make)?;
        book.stepped(st)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: GdnShape = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 128, d_conv: 4, eps: 1e-6 };

    #[test]
    fn log_views_are_the_cells_columns() {
        let logs = LogLayout::of(&SHAPE, 4, 6).unwrap();
        let a = logs.views(1, 2, 3).unwrap();
        let whole = logs.views(1, 0, 6).unwrap();
        // Cell 2's first byte of g is two cells into set 1's g.
        assert_eq!(a.g.layout.offset, whole.g.layout.offset + 2 * 2 * 4 * 4);
        assert_eq!(a.qkv.ne(), [SHAPE.channels(), 4, 3, 1]);
        assert!(a.k.layout.is_contiguous());
        // The two sets share no byte.
        let b = logs.views(0, 0, 6).unwrap();
        for x in [whole.qkv, whole.k, whole.v, whole.g, whole.beta] {
            for y in [b.qkv, b.k, b.v, b.g, b.beta] {
                assert!(!x.overlaps(&y));
            }
        }
        assert!(matches!(logs.views(0, 4, 3), Err(Error::IndexOutOfRange { arg: "kv_head", .. })));
        assert!(matches!(logs.views(2, 0, 1), Err(Error::Invalid { .. })));
        assert!(matches!(LogLayout::of(&SHAPE, 17, 6), Err(Error::Unsupported { .. })));
    }

    #[test]
    fn the_set_is_the_one_most_replaying_cells_do_not_hold() {
        let mut book = ReplayCells::new(4, 8).unwrap();
        // First step: nothing pending; p = 1 (a tie), no move.
        let s = book.prepare(&ReplayRows { kv_head: 0, accepted: &[0, 0, 0, 0], new_cells: &[0, 1, 2, 3] }).unwrap();
        assert_eq!((s.log_set, s.moves.clone()), (1, vec![]));
        book.stepped(&s).unwrap();
        // Cells 2, 3 step alone into set 0 (their log in set 1 is replayed).
        let s = book.prepare(&ReplayRows { kv_head: 2, accepted: &[1, 2], new_cells: &[] }).unwrap();
        assert_eq!((s.log_set, s.moves.clone()), (0, vec![]));
        book.stepped(&s).unwrap();
        // Cells 0, 1 hold set 1, cells 2, 3 set 0; replaying (a > 0): 0 in set 1, 2 and 3 in
        // set 0 → p = 1, cell 0's log moves to set 0; cell 1 (a = 0) needs none.
        let s = book.prepare(&ReplayRows { kv_head: 0, accepted: &[3, 0, 4, 1], new_cells: &[] }).unwrap();
        assert_eq!((s.log_set, s.moves.clone()), (1, vec![(0, 1)]));
        book.moved(&s).unwrap();
        assert_eq!(book.pending(0), Some(0));
        book.stepped(&s).unwrap();
        assert_eq!((0..4).map(|c| book.pending(c)).collect::<Vec<_>>(), vec![Some(1); 4]);
    }

    #[test]
    fn bad_steps_are_typed_errors() {
        assert!(matches!(ReplayCells::new(0, 4), Err(Error::Unsupported { .. })));
        assert!(matches!(ReplayCells::new(17, 4), Err(Error::Unsupported { .. })));
        assert!(matches!(ReplayCells::new(4, 0), Err(Error::Invalid { .. })));
        assert!(matches!(ReplayCells::new(4, usize::MAX), Err(Error::Invalid { .. })));
        let mut book = ReplayCells::new(4, 4).unwrap();
        let rows = |kv_head, accepted: &'static [usize], new_cells: &'static [usize]| ReplayRows { kv_head, accepted, new_cells };
        assert!(matches!(book.prepare(&rows(0, &[], &[])), Err(Error::Invalid { .. })));
        assert!(matches!(book.prepare(&rows(3, &[0, 0], &[])), Err(Error::IndexOutOfRange { arg: "kv_head", rows: 4, .. })));
        assert!(matches!(book.prepare(&rows(usize::MAX, &[0], &[])), Err(Error::IndexOutOfRange { arg: "kv_head", .. })));
        // Nothing pending yet: a > 0 is refused, by position.
        assert!(matches!(book.prepare(&rows(0, &[0, 1], &[])), Err(Error::Invalid { what, .. }) if what.contains("sequence 1")));
        let s = book.prepare(&rows(0, &[0, 0], &[0, 1])).unwrap();
        book.stepped(&s).unwrap();
        assert!(matches!(book.prepare(&rows(0, &[5, 0], &[])), Err(Error::IndexOutOfRange { arg: "accepted", index: 5, rows: 5, .. })));
        assert!(matches!(book.prepare(&rows(0, &[2, 0], &[0])), Err(Error::Invalid { what, .. }) if what.contains("new cell 0")));
        assert!(matches!(book.prepare(&rows(0, &[0, 0], &[1, 1])), Err(Error::Invalid { what, .. }) if what.contains("twice")));
        assert!(matches!(book.prepare(&rows(0, &[0, 0], &[2])), Err(Error::Invalid { .. })));
        assert!(book.prepare(&rows(0, &[4, 4], &[])).is_ok());
        // Hand-built steps (the fields are public): typed errors, nothing recorded.
        let good = book.prepare(&rows(0, &[4, 4], &[])).unwrap();
        let hostile = [
            ReplayStep { kv_head: 3, ..good.clone() },
            ReplayStep { kv_head: usize::MAX, ..good.clone() },
            ReplayStep { moves: vec![(3, 2)], ..good.clone() },
            ReplayStep { moves: vec![(usize::MAX, 2)], ..good.clone() },
            ReplayStep { log_set: 2, ..good.clone() },
        ];
        for h in &hostile {
            let (mut m, mut st) = (book.clone(), book.clone());
            let (moved, stepped) = (m.moved(h), st.stepped(h));
            assert!(moved.is_err() || stepped.is_err(), "{h:?}");
            assert!(moved.is_ok() || m == book, "{h:?}: a refused move recorded something");
            assert!(stepped.is_ok() || st == book, "{h:?}: a refused step recorded something");
        }
        assert!(matches!(
            ReplayStep { accepted: vec![5, 0], ..good.clone() }.index_values(),
            Err(Error::IndexOutOfRange { arg: "accepted", index: 5, rows: 5, .. })
        ));
        assert!(matches!(ReplayStep { kv_head: usize::MAX, ..good.clone() }.index_values(), Err(Error::Overflow { arg: "kv_head", .. })));
        assert!(matches!(ReplayStep { kv_head: i32::MAX as usize, ..good.clone() }.index_values(), Err(Error::Overflow { .. })));
        assert_eq!(good.index_values().unwrap(), [vec![0, 1], vec![4, 4], vec![0, 1]]);
        // A hand-built step with no sequence: not a one-sequence step, and no index values.
        let empty = ReplayStep { accepted: vec![], ..good.clone() };
        assert!(matches!(empty.step(), Err(Error::Invalid { what, .. }) if what.contains("0 sequences")), "{:?}", empty.step());
        assert!(matches!(empty.index_values(), Err(Error::Invalid { what, .. }) if what.contains("0 sequences")));
        // Commits: lengths, range, duplicates, counts.
        assert!(matches!(book.commit_steps(&[0], &[]), Err(Error::Invalid { .. })));
        assert!(matches!(book.commit_steps(&[0, 4], &[1, 0]), Err(Error::IndexOutOfRange { arg: "cells", position: 1, .. })));
        assert!(matches!(book.commit_steps(&[1, 1], &[1, 1]), Err(Error::Invalid { what, .. }) if what.contains("twice")));
        assert!(matches!(book.commit_steps(&[2], &[1]), Err(Error::Invalid { .. })));
        assert!(matches!(book.commit_steps(&[1], &[5]), Err(Error::IndexOutOfRange { arg: "accepted", .. })));
        // Cells 1, 0 with counts 2, 0: one step of cell 1 alone.
        let steps = book.commit_steps(&[1, 0], &[2, 0]).unwrap();
        assert_eq!(steps.len(), 1);
        assert_eq!((steps[0].kv_head, steps[0].accepted.clone()), (1, vec![2]));
        book.committed(&[1, 0]);
        assert_eq!((book.pending(0), book.pending(1)), (None, None));
        assert!(book.prepare(&rows(0, &[1, 0], &[])).is_err());
    }
}
