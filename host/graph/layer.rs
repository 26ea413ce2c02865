//! The GDN layer as llama.cpp builds it (spec §1.3–1.4), as graph nodes: SCALE zeroing
//! (optional), GET_ROWS of the conv state, CONCAT, then K = 1 + R separate CPY nodes
//! `window(max(0, n_t − j)) → cache row j·M + kv_head` (W1/W2, in ggml's build order: slot K−1
//! first), SSM_CONV+SiLU, L2_NORM q, L2_NORM k, SCALE + GET_ROWS of the ssm state, the alpha
//! and beta MUL_MAT_VECs (⌈n_t/8⌉ launches each above 8 columns), SIGMOID, ADD, SOFTPLUS, MUL
//! and GATED_DELTA_NET writing the ssm cache rows.
//!
//! [`batch_snapshot_copies`] is the backend pass of ggml's #379: a run of snapshot CPYs that is
//! exactly the W2 pattern becomes one CPY_SNAPSHOTS launch (on by default, bit-identical), so
//! [`layer_ops`] is [`unfused_ops`], today's launch sequence.
//!
//! [`build`] makes a whole graph — one layer or a stack of L layers, each with its own caches,
//! weights and random inputs — with every intermediate planned in one arena across the stack
//! ([`super::plan`]).

use super::plan::{self, Pin, Plan, Role, ValueInfo};
use super::{Bound, ByteSet, Node, Stage};
use crate::error::{Error, Result};
use crate::inputs::{self, Values};
use crate::kernels::abi;
use crate::layer::{GdnShape, LAYER_TENSORS, LayerTensors, Step, TensorKind};
use crate::memory::HostMemory;
use crate::ops::{
    Binary, BinaryKind, ConcatDim0, Cpy, CpySnapshots, GatedDeltaNet, GatedDeltaNetReplay, GetRows, L2Norm, MulMatVec, Op, Precision,
    Scale, SsmConv, Unary, UnaryKind, UnaryMul,
};
use crate::reference::replay::TokenLog;
use crate::tensor::{BufferId, DType, Layout, Tensor};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const OP: &str = "GDN_GRAPH";
/// The op name in the errors of the layer's views and wiring (as the layer's tensors use).
const LAYER_OP: &str = "GDN_LAYER";

/// The largest column count one MUL_MAT_VEC launch takes (ggml's `MMVF_MAX_BATCH_SIZE`).
pub const MAT_VEC_MAX_COLS: usize = 8;

fn product(arg: &'static str, what: &str, factors: &[usize]) -> Result<usize> {
    crate::tensor::try_product(LAYER_OP, arg, what, factors)
}

fn checked_view(arg: &'static str, t: &Tensor, ne: [usize; 4], nb: [usize; 4], offset: usize) -> Result<Tensor> {
    t.try_view(LAYER_OP, arg, ne, nb, offset)
}

fn reshape(arg: &'static str, t: &Tensor, ne: [usize; 4]) -> Result<Tensor> {
    t.try_reshape(LAYER_OP, arg, ne)
}

/// Where a layer's values land and in which order the ssm-state read is built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LayerLayout {
    /// ggml's order (spec §1.4) and best-fit planning. With qkv dead after the CONCAT, the SiLU
    /// output usually takes its block (same size).
    #[default]
    Ggml,
    /// The reference PR's DFlash case: the ssm-state SCALE + GET_ROWS are built between
    /// SSM_CONV and the L2 norms (inside the conv chain's span), and the ssm-state GET_ROWS
    /// output is pinned onto the dead qkv projection block.
    PrAliasing,
}

/// Which values are graph outputs (never reused by the planner).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Outputs {
    /// Only the attention output (and the caches, which are never planned): a verify forward.
    #[default]
    Forward,
    /// Also the SiLU output, the L2 outputs, the alpha/beta products, beta and the gate — what
    /// the sweep compares.
    Products,
}

/// \[replay\] How a layer's verify step keeps what a rejected draft rolls back to
/// (`docs/rollback.md`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Rollback {
    /// ggml's scheme (spec §1.2–1.3): every step writes 1 + R snapshot groups of both caches
    /// (R = [`Step::n_rollback`]); the next step reads its initial state from the accepted
    /// group through its source row. Today's graph, bit for bit.
    #[default]
    Snapshots,
    /// Exact replay: one committed row of each cache per sequence (R = 0; sequence s's row is
    /// cell `kv_head + s`, which is also its source row) and two token-log sets used
    /// alternately. The step first replays the previous step's accepted tokens from log set
    /// `1 − log_set` (GATED_DELTA_NET_REPLAY with the per-sequence accepted counts, then the
    /// conv-window commit), then verifies its own tokens from the committed rows writing no
    /// cache row, and writes its log into set `log_set` (0 or 1). See [`replay_layer_ops`].
    Replay {
        /// The log set this step writes (0 or 1); it replays the other.
        log_set: usize,
    },
}

/// One layer of a graph.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerSpec {
    pub shape: GdnShape,
    pub step: Step,
    /// Type of the alpha/beta weights (F32, F16, BF16).
    pub weights: DType,
    pub precision: Precision,
    /// Build GATED_DELTA_NET (needs head_dim = 128); without it the layer ends at the gate.
    pub gdn_tail: bool,
    pub layout: LayerLayout,
    /// Salt inputs with special values.
    pub specials: bool,
    /// Snapshot rows (ggml's scheme, the default) or exact replay.
    pub rollback: Rollback,
}

impl LayerSpec {
    pub fn new(shape: GdnShape, step: Step) -> Self {
        LayerSpec {
            shape,
            step,
            weights: DType::F32,
            precision: Precision::Default,
            gdn_tail: shape.head_dim == abi::GDN_HEAD_DIM,
            layout: LayerLayout::Ggml,
            specials: false,
            rollback: Rollback::Snapshots,
        }
    }

    /// What the graph builder supports (wider than `GdnShape::validate`, which asks for the
    /// GDN tail's head dimension; without the tail, up to [`crate::layer::MAX_GRAPH_TOKENS`]
    /// tokens).
    pub fn validate(&self) -> Result<()> {
        let s = &self.shape;
        let bad = |what: String| Err(Error::Unsupported { op: OP, what });
        if self.gdn_tail {
            s.validate()?;
        } else {
            if !abi::SSM_CONV_WIDTHS.contains(&s.d_conv) {
                return bad(format!("d_conv = {}", s.d_conv));
            }
            if s.head_dim == 0 || s.head_dim >= abi::L2_NORM_MAX_COLS || s.n_k_heads == 0 || s.n_v_heads == 0 {
                return bad(format!("head_dim = {}, heads {} / {}", s.head_dim, s.n_k_heads, s.n_v_heads));
            }
            if s.n_embd == 0 || !s.n_embd.is_multiple_of(2) {
                return bad(format!("n_embd = {}", s.n_embd));
            }
            s.validate_sizes()?;
        }
        if !matches!(self.weights, DType::F32 | DType::F16 | DType::BF16) {
            return bad(format!("{:?} mat-vec weights", self.weights));
        }
        // GATED_DELTA_NET takes at most 16 tokens; the conv chain and projections alone more.
        self.step.validate_with_max_tokens(if self.gdn_tail { crate::layer::MAX_TOKENS } else { crate::layer::MAX_GRAPH_TOKENS })?;
        if let Rollback::Replay { log_set } = self.rollback {
            self.validate_replay(log_set)?;
        }
        Ok(())
    }

    /// \[replay\] The replay mode's rules on top of a valid step: the GDN tail (n_t ≤ 16, so the
    /// T + 1 windows of the commit fit CPY_SNAPSHOTS' 17 slots), ggml's layout, R = 0, no cell
    /// zeroed in the step, each sequence committed to (and reading) its own cell's row
    /// `kv_head + s`, log set 0 or 1.
    fn validate_replay(&self, log_set: usize) -> Result<()> {
        let step = &self.step;
        let unsupported = |what: String| Err(Error::Unsupported { op: OP, what });
        let invalid = |what: String| Err(Error::Invalid { op: OP, what });
        if !self.gdn_tail {
            return unsupported("replay rollback without the GATED_DELTA_NET tail".into());
        }
        if self.layout != LayerLayout::Ggml {
            return unsupported(format!("replay rollback with the {:?} layout", self.layout));
        }
        if log_set > 1 {
            return invalid(format!("replay log set {log_set} (a layer has two: 0 and 1)"));
        }
        if step.n_rollback != 0 {
            return invalid(format!("R = {} snapshot groups with replay rollback (one committed row per cell: R = 0)", step.n_rollback));
        }
        if let Some(cell) = step.zero_cell {
            return unsupported(format!("zeroing cell {cell} inside a replay step (a fresh cell is zeroed before its first step)"));
        }
        for s in 0..step.n_seqs() {
            let own = step.kv_head.saturating_add(s);
            if step.source(s) != Some((own, 0)) {
                return invalid(format!(
                    "sequence {s} reads {:?} (cell, depth): with replay rollback it reads and commits its own cell's row {own}",
                    step.source(s)
                ));
            }
        }
        Ok(())
    }
}

/// \[replay\] The tensors a replay-mode layer has besides [`LayerTensors`] (whose caches hold one
/// committed row per cell, R = 0): the two log sets, the accepted counts, and the unfused
/// graph's scratch values. `logs[i]` is [`TokenLog`], the reference's log set (each tensor
/// `[…, T, n_s]`, contiguous).
#[derive(Clone, Copy, Debug)]
pub struct ReplayTensors {
    /// The two log sets: step i writes `logs[log_set]` and replays `logs[1 − log_set]`.
    pub logs: [TokenLog; 2],
    /// I32 \[n_s\] (an index buffer): each sequence's accepted count of the previous step,
    /// 0 ..= T. Written with [`ReplayTensors::set_accepted`].
    pub accepted: Tensor,
    /// I32 \[n_s\] (an index buffer): `(T − accepted[s])·n_s + s`, the row of `windows` holding
    /// sequence s's window(accepted\[s\]); derived from the counts by
    /// [`ReplayTensors::set_accepted`], never written alone.
    pub window_rows: Tensor,
    /// F32 \[(K_c − 1)·C, n_s\]: the committed windows gathered before the commit.
    pub commit_states: Tensor,
    /// F32 \[K_c − 1 + T, C, n_s\]: [committed window ; logged conv inputs].
    pub commit_input: Tensor,
    /// F32 \[(K_c − 1)·C, (T + 1)·n_s\]: row j·n_s + s holds window(T − j) of sequence s's
    /// `commit_input` (CPY_SNAPSHOTS with T + 1 slots).
    pub windows: Tensor,
    /// F32 \[D·D·H_v, n_s\]: GATED_DELTA_NET's one state slot in the verify (it writes at
    /// least one; here a scratch value nothing reads, not a cache row).
    pub verify_states: Tensor,
}

/// Tensors of a replay layer's [`ReplayTensors`], in [`ReplayTensors::NAMES`] order.
pub const REPLAY_TENSORS: usize = 16;

impl ReplayTensors {
    /// Field names, in order (the log sets' tensors as `log0.qkv` … `log1.beta`).
    pub const NAMES: [&'static str; REPLAY_TENSORS] = [
        "log0.qkv",
        "log0.k",
        "log0.v",
        "log0.g",
        "log0.beta",
        "log1.qkv",
        "log1.k",
        "log1.v",
        "log1.g",
        "log1.beta",
        "accepted",
        "window_rows",
        "commit_states",
        "commit_input",
        "windows",
        "verify_states",
    ];

    /// Name, type and contiguous shape of every tensor, in field order (checked arithmetic).
    pub fn table(shape: &GdnShape, step: &Step) -> Result<[(&'static str, DType, [usize; 4]); REPLAY_TENSORS]> {
        let (c, d, hk, hv, kc) = (shape.try_channels()?, shape.head_dim, shape.n_k_heads, shape.n_v_heads, shape.d_conv);
        let (n_t, n_s) = (step.n_tokens, step.n_seqs());
        let conv_row = product("conv_cache", "conv-state row (d_conv − 1)·C", &[kc.saturating_sub(1), c])?;
        let ssm_row = shape.try_ssm_row()?;
        let windows = product("windows", "rows (T + 1)·n_s", &[n_t.saturating_add(1), n_s])?;
        let log = [
            ([c, n_t, n_s, 1], DType::F32),
            ([d, hk, n_t, n_s], DType::F32),
            ([d, hv, n_t, n_s], DType::F32),
            ([1, hv, n_t, n_s], DType::F32),
            ([1, hv, n_t, n_s], DType::F32),
        ];
        let rest = [
            ([n_s, 1, 1, 1], DType::I32),
            ([n_s, 1, 1, 1], DType::I32),
            ([conv_row, n_s, 1, 1], DType::F32),
            ([kc.saturating_sub(1).saturating_add(n_t), c, n_s, 1], DType::F32),
            ([conv_row, windows, 1, 1], DType::F32),
            ([ssm_row, n_s, 1, 1], DType::F32),
        ];
        let all: Vec<_> = log.iter().chain(&log).chain(&rest).collect();
        Ok(std::array::from_fn(|i| (Self::NAMES[i], all[i].1, all[i].0)))
    }

    /// The tensors in field order.
    pub fn to_array(&self) -> [Tensor; REPLAY_TENSORS] {
        let [a, b] = self.logs;
        [
            a.qkv,
            a.k,
            a.v,
            a.g,
            a.beta,
            b.qkv,
            b.k,
            b.v,
            b.g,
            b.beta,
            self.accepted,
            self.window_rows,
            self.commit_states,
            self.commit_input,
            self.windows,
            self.verify_states,
        ]
    }

    /// The struct of the tensors in field order.
    pub fn from_array(t: [Tensor; REPLAY_TENSORS]) -> Self {
        let log = |i: usize| TokenLog { qkv: t[i], k: t[i + 1], v: t[i + 2], g: t[i + 3], beta: t[i + 4] };
        ReplayTensors {
            logs: [log(0), log(5)],
            accepted: t[10],
            window_rows: t[11],
            commit_states: t[12],
            commit_input: t[13],
            windows: t[14],
            verify_states: t[15],
        }
    }

    /// Checks that every tensor has its table type and shape and is contiguous (a log of
    /// another step's size, say, is an [`Error::Shape`] naming it), and that the two log sets
    /// share no byte.
    pub fn conforms(&self, shape: &GdnShape, step: &Step) -> Result<()> {
        for ((arg, dtype, ne), t) in Self::table(shape, step)?.into_iter().zip(self.to_array()) {
            if t.dtype() != dtype {
                return Err(Error::DType { op: LAYER_OP, arg, expected: format!("{dtype:?}"), got: t.dtype() });
            }
            if t.ne() != ne {
                return Err(Error::Shape { op: LAYER_OP, arg, expected: format!("{dtype:?} {ne:?} for this shape and step"), got: t.ne() });
            }
            if !t.layout.is_contiguous() {
                return Err(Error::Stride {
                    op: LAYER_OP,
                    arg,
                    nb: t.layout.nb,
                    offset: t.layout.offset,
                    reason: "a replay tensor is contiguous".into(),
                });
            }
        }
        let [a, b] = self.logs;
        let (a, b) = ([a.qkv, a.k, a.v, a.g, a.beta], [b.qkv, b.k, b.v, b.g, b.beta]);
        if a.iter().any(|x| b.iter().any(|y| x.overlaps(y))) {
            return Err(Error::Invalid { op: LAYER_OP, what: "the two replay log sets share bytes".into() });
        }
        Ok(())
    }

    /// T, the tokens of a logged step.
    pub fn n_tokens(&self) -> usize {
        self.logs[0].n_tokens()
    }

    /// Writes the previous step's accepted counts (one per sequence, each 0 ..= T) into
    /// `accepted`, and the window rows derived from them into `window_rows`. A wrong count of
    /// counts is an [`Error::Invalid`], a count above T an [`Error::IndexOutOfRange`] naming it
    /// (`rows` = T + 1); index tensors that are not I32 views inside `mem`, or a window row
    /// past I32, a typed error too; nothing is written then.
    pub fn set_accepted(&self, mem: &mut HostMemory, accepted: &[usize]) -> Result<()> {
        let (n_t, n_s) = (self.n_tokens(), self.accepted.ne()[0]);
        if accepted.len() != n_s {
            return Err(Error::Invalid { op: OP, what: format!("{} accepted counts for {n_s} sequences", accepted.len()) });
        }
        if let Some((position, &a)) = accepted.iter().enumerate().find(|(_, a)| **a > n_t) {
            return Err(Error::IndexOutOfRange {
                op: OP,
                arg: "accepted",
                position,
                index: i64::try_from(a).unwrap_or(i64::MAX),
                rows: n_t + 1,
            });
        }
        // [validation] both index tensors in `mem`, one I32 per sequence (tensors that do not
        // conform to a table — hand-built, or of another memory — are typed errors here).
        crate::ops::check::tensor(OP, "accepted", &self.accepted, DType::I32, mem)?;
        crate::ops::check::tensor(OP, "window_rows", &self.window_rows, DType::I32, mem)?;
        crate::ops::check::shape(OP, "window_rows", &self.window_rows, self.accepted.ne())?;
        // (T − a)·n_s + s < (T + 1)·n_s: the windows' rows are ≤ 17 × 256 for tensors of the
        // table; checked for any other.
        let mut rows = Vec::with_capacity(n_s);
        for (s, &a) in accepted.iter().enumerate() {
            let row = (n_t - a).checked_mul(n_s).and_then(|r| r.checked_add(s));
            let values = row.and_then(|r| Some((i32::try_from(a).ok()? as u32, i32::try_from(r).ok()? as u32)));
            rows.push(values.ok_or_else(|| Error::Overflow {
                op: OP,
                arg: "window_rows",
                what: format!("window row (T − a)·n_s + s = ({n_t} − {a})·{n_s} + {s} as an I32"),
            })?);
        }
        for (s, (a, row)) in rows.into_iter().enumerate() {
            mem.write_u32(&self.accepted, [s, 0, 0, 0], a)?;
            mem.write_u32(&self.window_rows, [s, 0, 0, 0], row)?;
        }
        Ok(())
    }

    /// \[replay\] A replay layer's tensors allocated in `mem` for `shape` and `step`, each its
    /// own contiguous buffer (the bench's replay arm; [`build`] plans them in a graph instead),
    /// the counts in index buffers, all 0.
    pub fn alloc(mem: &mut HostMemory, shape: &GdnShape, step: &Step) -> Result<ReplayTensors> {
        let table = Self::table(shape, step)?;
        // [validation] the fallible allocations: a size past the budget is a typed error.
        let mut t = [Tensor::new(BufferId(usize::MAX), Layout::contiguous(DType::F32, [0; 4])); REPLAY_TENSORS];
        for (t, (_, dtype, ne)) in t.iter_mut().zip(table) {
            *t = if dtype == DType::I32 { mem.try_alloc_indices(&vec![0; ne[0]])? } else { mem.try_alloc_tensor(dtype, ne)? };
        }
        let r = Self::from_array(t);
        r.set_accepted(mem, &vec![0; step.n_seqs()])?;
        Ok(r)
    }

    /// The accepted counts in `mem` (a typed error when `mem` does not hold the view).
    pub fn accepted_counts(&self, mem: &HostMemory) -> Result<Vec<usize>> {
        (0..self.accepted.ne()[0]).map(|s| mem.read_u32(&self.accepted, [s, 0, 0, 0]).map(|v| v as usize)).collect()
    }
}

/// The graph to build: its layers (in execution order) and its outputs.
#[derive(Clone, Debug, PartialEq)]
pub struct StackSpec {
    pub layers: Vec<LayerSpec>,
    pub outputs: Outputs,
}

/// `window(o)` of a conv input (spec §1.3): columns o … o+state_len−1 of every channel and
/// sequence (the offset saturates for an `o` whose byte offset does not fit: a view no op
/// accepts).
pub fn window(conv_input: &Tensor, state_len: usize, offset: usize) -> Tensor {
    let nb = conv_input.layout.nb;
    conv_input.view([state_len, conv_input.ne()[1], conv_input.ne()[2], 1], [4, nb[1], nb[2], nb[3]], offset.saturating_mul(4))
}

/// The nodes of one layer in llama.cpp's build order, separate snapshot CPYs (ggml's graph,
/// before the backend's passes). `t` holds the layer's tensors wherever they live; with the GDN
/// tail it must conform to the spec's shape and step ([`LayerTensors::conforms`]); every view is built
/// with checked arithmetic: anything else is a typed error, never a panic. This is the one
/// builder of the chain: [`unfused_ops`] is [`layer_ops`] over it.
///
/// A replay-mode spec ([`Rollback::Replay`]) needs its [`ReplayTensors`]: here it is an
/// [`Error::Invalid`] naming [`replay_layer_ops`].
pub fn ggml_layer_ops(t: &LayerTensors, spec: &LayerSpec) -> Result<Vec<Box<dyn Op>>> {
    if spec.rollback != Rollback::Snapshots {
        return Err(Error::Invalid {
            op: OP,
            what: "a replay layer's ops take its replay tensors (graph::layer::replay_layer_ops)".into(),
        });
    }
    chain_ops(t, None, spec)
}

/// \[replay\] The nodes of one replay-mode layer ([`Rollback::Replay`], `docs/rollback.md`
/// "Replay: one step"), unfused, in this order:
/// 1. **replay**: GATED_DELTA_NET_REPLAY over log set `1 − log_set` with the accepted counts,
///    from and into each sequence's committed ssm row (`source_rows`);
/// 2. **window commit**, existing ops: GET_ROWS of the committed conv rows, CONCAT with the
///    logged conv inputs, CPY_SNAPSHOTS of its T + 1 windows into `windows` (row j·n_s + s ←
///    window(T − j)), GET_ROWS of row `(T − a)·n_s + s` (`window_rows`) back over the committed
///    rows `kv_head + s`: window(a) of [committed window ; logged inputs 0 … a − 1], and with
///    a = 0 the committed window's own bits;
/// 3. **verify**: ggml's chain ([`ggml_layer_ops`]) from the committed rows with no snapshot
///    CPY and GATED_DELTA_NET's one state slot in `verify_states` (scratch), so no cache row is
///    written;
/// 4. **log** into set `log_set`: CPYs of the conv inputs (`qkv_mixed`, right after the CONCAT
///    reads them: the SiLU output may take their block) and of v after the conv and SiLU; k
///    after L2_NORM, g and β are written there by the ops that compute them (the layer's own
///    `k_norm`, `gate` and `beta` stay unwritten).
///
/// `t` and `r` must conform to the spec ([`LayerTensors::conforms`],
/// [`ReplayTensors::conforms`]); anything else is a typed error, never a panic.
pub fn replay_layer_ops(t: &LayerTensors, r: &ReplayTensors, spec: &LayerSpec) -> Result<Vec<Box<dyn Op>>> {
    if !matches!(spec.rollback, Rollback::Replay { .. }) {
        return Err(Error::Invalid { op: OP, what: "replay_layer_ops of a snapshot layer (graph::layer::ggml_layer_ops)".into() });
    }
    chain_ops(t, Some(r), spec)
}

/// The one builder of both modes: ggml's chain, and with `replay` the replay, commit and log
/// nodes around it (no snapshot CPY, no cache slot).
fn chain_ops(t: &LayerTensors, replay: Option<&ReplayTensors>, spec: &LayerSpec) -> Result<Vec<Box<dyn Op>>> {
    let (shape, step) = (&spec.shape, &spec.step);
    // The spec first, with or without the GDN tail: the step's token count bounds the
    // mat-vec loop below (n_t ≤ 16), d_conv ≥ 3 makes d_conv − 1 exact, and every size the
    // layer derives is representable.
    spec.validate()?;
    let replay = match (replay, spec.rollback) {
        (Some(r), Rollback::Replay { log_set }) => {
            t.conforms(shape, step)?;
            r.conforms(shape, step)?;
            Some((r, r.logs[1 - log_set], r.logs[log_set]))
        }
        (None, Rollback::Snapshots) => None,
        _ => return Err(Error::Invalid { op: OP, what: "replay tensors and the spec's rollback disagree".into() }),
    };
    // Conv-chain-only graphs (the fusion sweep and matcher tests) also take head dims and
    // widths the layer presets do not, which `conforms` refuses; every view below is still
    // built with checked arithmetic and validated by its op before anything runs.
    if spec.gdn_tail {
        t.conforms(shape, step)?;
    }
    // [replay] The step's g and β are written straight into the log set it keeps: `gate` and
    // `beta` ([H_v, n_t·n_s], contiguous) are the same bytes, in the same order, as the log's
    // [1, H_v, n_t, n_s], so no copy logs them; k after L2_NORM likewise (`k_norm` and the log's
    // k are both contiguous [D, H_k, n_t, n_s]). The layer's own gate, beta and k_norm stay
    // unwritten.
    let logged;
    let t = match replay {
        Some((_, _, log)) => {
            logged = LayerTensors {
                gate: reshape("log.g", &log.g, t.gate.ne())?,
                beta: reshape("log.beta", &log.beta, t.beta.ne())?,
                k_norm: reshape("log.k", &log.k, t.k_norm.ne())?,
                ..t.clone()
            };
            &logged
        }
        None => t,
    };
    let (c, n_t, kc, hv) = (shape.try_channels()?, step.n_tokens, shape.d_conv, shape.n_v_heads);
    // n_s sequences of n_t tokens (equal split); sequence s writes cell kv_head + s, so each
    // slot's rows are n_s consecutive cache rows. n_t·n_s columns ≤ MAX_GRAPH_TOKENS (validated).
    let (n_s, columns) = (step.n_seqs(), step.columns());
    let mut ops: Vec<Box<dyn Op>> = Vec::new();
    // SCALE zeroing of a fresh cell (C1), in place, before the row is read.
    let zero = |ops: &mut Vec<Box<dyn Op>>, arg: &'static str, cache: &Tensor| -> Result<()> {
        if let Some(z) = step.zero_cell {
            let row = LayerTensors::try_cache_row(arg, cache, z)?;
            ops.push(Box::new(Scale { src: row, dst: row, scale: 0.0, bias: 0.0 }));
        }
        Ok(())
    };
    let ssm_read = |ops: &mut Vec<Box<dyn Op>>| -> Result<()> {
        zero(ops, "ssm_cache", &t.ssm_cache)?;
        ops.push(Box::new(GetRows { src: t.ssm_cache, rows: t.source_rows, dst: t.ssm_state }));
        Ok(())
    };
    if let Some((r, previous, _)) = replay {
        // 1. Replay the previous step's accepted tokens; commit each state over its row.
        ops.push(Box::new(GatedDeltaNetReplay {
            k: previous.k,
            v: previous.v,
            g: previous.g,
            beta: previous.beta,
            ssm_cache: t.ssm_cache,
            source_rows: t.source_rows,
            dest_rows: t.source_rows,
            accepted: r.accepted,
        }));
        // 2. Commit the windows: window(a) of [committed ; logged inputs], through the T + 1
        // windows (slot j = T − a holds window(a)).
        ops.push(Box::new(GetRows { src: t.conv_cache, rows: t.source_rows, dst: r.commit_states }));
        let committed = reshape("commit_states", &r.commit_states, [kc - 1, c, n_s, 1])?;
        ops.push(Box::new(ConcatDim0 { a: committed, b: previous.qkv.transpose(), dst: r.commit_input }));
        ops.push(Box::new(CpySnapshots {
            conv_input: r.commit_input,
            cache: r.windows,
            d_conv: kc,
            first_row: 0,
            group_stride: n_s,
            n_slots: n_t + 1,
        }));
        let own_rows = LayerTensors::try_cache_rows("conv_cache", &t.conv_cache, step.kv_head, n_s)?;
        ops.push(Box::new(GetRows { src: r.windows, rows: r.window_rows, dst: own_rows }));
    }
    zero(&mut ops, "conv_cache", &t.conv_cache)?;
    ops.push(Box::new(GetRows { src: t.conv_cache, rows: t.source_rows, dst: t.conv_states }));
    let states = reshape("conv_states", &t.conv_states, [kc - 1, c, n_s, 1])?;
    ops.push(Box::new(ConcatDim0 { a: states, b: t.qkv_mixed.transpose(), dst: t.conv_input }));
    if let Some((_, _, log)) = replay {
        // 4. The log's conv inputs, a copy (the SiLU output may take qkv's block).
        ops.push(Box::new(Cpy { src: t.qkv_mixed, dst: log.qkv }));
    }
    // W1/W2: for t' = 1 … K, window(max(0, n_t − K + t')) → rows (K − t')·M + kv_head + s.
    // Replay writes no snapshot row.
    let k = if replay.is_some() { 0 } else { step.slots() };
    for tp in 1..=k {
        let slot = k - tp;
        let row = product("conv_cache", "snapshot row slot·M", &[slot, step.cells])?
            .checked_add(step.kv_head)
            .ok_or_else(|| crate::Error::Overflow { op: LAYER_OP, arg: "conv_cache", what: "snapshot row slot·M + kv_head".into() })?;
        let dst = LayerTensors::try_cache_rows("conv_cache", &t.conv_cache, row, n_s)?;
        ops.push(Box::new(Cpy { src: t.try_window(shape, (n_t + tp).saturating_sub(k))?, dst }));
    }
    ops.push(Box::new(SsmConv { conv_input: t.conv_input, weight: t.conv_weight, bias: None, dst: t.conv_out, apply_silu: true }));
    if spec.layout == LayerLayout::PrAliasing {
        ssm_read(&mut ops)?;
    }
    ops.push(Box::new(L2Norm { src: t.try_head_view(shape, 0)?, dst: t.q_norm, eps: shape.eps }));
    ops.push(Box::new(L2Norm { src: t.try_head_view(shape, 1)?, dst: t.k_norm, eps: shape.eps }));
    if spec.layout == LayerLayout::Ggml {
        ssm_read(&mut ops)?;
    }
    // alpha/beta: at most 8 columns (of the n_t·n_s, sequence-major) per mul_mat_vec_f launch.
    for (arg, weight, dst) in [("alpha", t.alpha_weight, t.alpha), ("beta_raw", t.beta_weight, t.beta_raw)] {
        let mut first = 0;
        while first < columns {
            let cols = MAT_VEC_MAX_COLS.min(columns - first);
            let offset = product("cur", "column offset", &[first, t.cur.layout.nb[1]])?;
            let input = checked_view("cur", &t.cur, [shape.n_embd, cols, 1, 1], t.cur.layout.nb, offset)?;
            let offset = product(arg, "column offset", &[first, dst.layout.nb[1]])?;
            let dst = checked_view(arg, &dst, [hv, cols, 1, 1], dst.layout.nb, offset)?;
            ops.push(Box::new(MulMatVec { weight, input, dst, precision: spec.precision }));
            first += cols;
        }
    }
    ops.push(Box::new(Unary { kind: UnaryKind::Sigmoid, src: t.beta_raw, dst: t.beta }));
    ops.push(Box::new(Binary { kind: BinaryKind::Add, a: t.alpha, b: t.dt_bias, dst: t.alpha_biased }));
    // SOFTPLUS then MUL by ssm_a; ggml's backend fuses the pair when the shapes are equal
    // (n_t·n_s = 1): one kernel, the same two roundings (spec §1.3 P4, §2.7).
    let softplus = Unary { kind: UnaryKind::Softplus, src: t.alpha_biased, dst: t.softplus };
    let mul = Binary { kind: BinaryKind::Mul, a: t.softplus, b: t.ssm_a, dst: t.gate };
    match UnaryMul::fuse(&softplus, &mul, false) {
        Some(fused) => ops.push(Box::new(fused)),
        None => {
            ops.push(Box::new(softplus));
            ops.push(Box::new(mul));
        }
    }
    if spec.gdn_tail {
        // GATED_DELTA_NET writing its state slots straight into the ssm cache rows (slot k of
        // sequence s → row k·M + kv_head + s; the CPY ggml fuses into the kernel).
        // Replay: its one slot in a scratch value, no cache row.
        let states = match replay {
            Some((r, ..)) => r.verify_states,
            None => {
                let row_bytes = t.ssm_cache.layout.nb[1];
                let group = product("ssm_cache", "group stride M·row bytes", &[step.cells, row_bytes])?;
                checked_view(
                    "ssm_cache",
                    &t.ssm_cache,
                    [shape.try_ssm_row()?, n_s, step.slots(), 1],
                    [4, row_bytes, group, product("ssm_cache", "slots·group stride", &[step.slots(), group])?],
                    product("ssm_cache", "row offset kv_head·row bytes", &[step.kv_head, row_bytes])?,
                )?
            }
        };
        let (v, g, beta) =
            (t.try_head_view(shape, 2)?, reshape("gate", &t.gate, [1, hv, n_t, n_s])?, reshape("beta", &t.beta, [1, hv, n_t, n_s])?);
        ops.push(Box::new(GatedDeltaNet {
            q: t.q_norm,
            k: t.k_norm,
            v,
            g,
            beta,
            state_in: reshape("ssm_state", &t.ssm_state, [shape.head_dim, shape.head_dim, hv, n_s])?,
            out: t.attn_out,
            states,
        }));
        if let Some((_, _, log)) = replay {
            // 4. The rest of the log: v after the conv and SiLU (k, g and β are already there:
            // the L2 norm and the products wrote them).
            ops.push(Box::new(Cpy { src: v, dst: log.v }));
        }
    }
    Ok(ops)
}

/// The latest node before `before` that writes any byte of `t`, with its index.
fn writer_of(nodes: &[Node], before: usize, t: &Tensor) -> Option<usize> {
    let a = super::Access::of(t)?;
    (0..before).rev().find(|&i| nodes[i].writes().iter().any(|w| w.overlaps(&a)))
}

/// ggml's #379 backend pass: a maximal run of K ≥ 2 consecutive CPY nodes that is exactly the
/// W2 pattern — copy t' (1 … K) writes `window(max(0, n_t − K + t'))` of a CONCAT output into
/// the whole row `(K − t')·M + h` (M ≥ 1) of the cache the CONCAT's GET_ROWS read — becomes one
/// CPY_SNAPSHOTS node (bit-identical: the same bytes land in the same rows) — when the batched
/// op's own structural rules ([`CpySnapshots::check_structure`]: distinct, non-overlapping
/// rows, cache disjoint from the conv input, …) accept it, so the pass never turns a running
/// graph into a refused one. Anything else is left alone.
pub fn batch_snapshot_copies(nodes: Vec<Node>) -> Vec<Node> {
    let mut out: Vec<Node> = Vec::with_capacity(nodes.len());
    let mut i = 0;
    let mut replaced: Vec<(usize, usize, Node)> = Vec::new();
    while i < nodes.len() {
        let mut j = i;
        while j < nodes.len() && nodes[j].get::<Cpy>().is_some() {
            j += 1;
        }
        if j - i >= 2
            && let Some(op) = snapshot_run(&nodes, i, j)
        {
            replaced.push((i, j, Node::new(Box::new(op), nodes[i].layer)));
        }
        i = j.max(i + 1);
    }
    let mut next = replaced.into_iter().peekable();
    for (i, node) in nodes.into_iter().enumerate() {
        match next.peek() {
            Some((start, end, _)) if i >= *start && i < *end => {
                if i + 1 == *end {
                    out.push(next.next().expect("peeked").2);
                }
            }
            _ => out.push(node),
        }
    }
    out
}

/// The CPY_SNAPSHOTS node for the CPY run `nodes[start..end]`, if it is exactly W2.
fn snapshot_run(nodes: &[Node], start: usize, end: usize) -> Option<CpySnapshots> {
    let copies: Vec<&Cpy> = nodes[start..end].iter().map(|n| n.get::<Cpy>().expect("a run of CPYs")).collect();
    let concat_at = writer_of(nodes, start, &copies[0].src)?;
    let concat = nodes[concat_at].get::<ConcatDim0>()?;
    let gather = nodes[writer_of(nodes, concat_at, &concat.a)?].get::<GetRows>()?;
    let (conv_input, cache) = (concat.dst, gather.src);
    let state_len = copies[0].src.ne()[0];
    let n_t = conv_input.ne()[0].checked_sub(state_len)?;
    // Each copy writes one slot's rows of the n_s sequences: n_s consecutive cache rows.
    let n_s = conv_input.ne()[2];
    if state_len == 0 || cache.layout.nb[1] == 0 || n_s == 0 || conv_input.ne()[3] != 1 {
        return None;
    }
    let row_of = |dst: &Tensor| -> Option<usize> {
        let rel = dst.layout.offset.checked_sub(cache.layout.offset)?;
        let row = rel / cache.layout.nb[1];
        let rows = LayerTensors::try_cache_rows("conv_cache", &cache, row, n_s).ok()?;
        (rel % cache.layout.nb[1] == 0 && row < cache.ne()[1] && dst.buffer == cache.buffer && *dst == rows).then_some(row)
    };
    let k = copies.len();
    let h = row_of(&copies[k - 1].dst)?;
    let m = (row_of(&copies[0].dst)?.checked_sub(h)?) / (k - 1);
    if m == 0 {
        return None;
    }
    for (idx, cpy) in copies.iter().enumerate() {
        let tp = idx + 1;
        let want_row = (k - tp).checked_mul(m)?.checked_add(h)?;
        if cpy.src != window(&conv_input, state_len, n_t.saturating_add(tp).saturating_sub(k)) || row_of(&cpy.dst)? != want_row {
            return None;
        }
    }
    let op = CpySnapshots { conv_input, cache, d_conv: state_len.checked_add(1)?, first_row: h, group_stride: m, n_slots: k };
    // Only what the batched op accepts: the separate CPYs may run where it would be refused
    // (rows that share bytes, say), and then they stay.
    op.check_structure().ok()?;
    Some(op)
}

/// Today's unfused launch sequence of one layer (what [`unfused_ops`] returns): ggml's
/// graph ([`ggml_layer_ops`], ggml layout, GDN tail) after the snapshot batching pass.
pub fn layer_ops(t: &LayerTensors, shape: &GdnShape, step: &Step, precision: Precision) -> Result<Vec<Box<dyn Op>>> {
    shape.validate()?;
    step.validate()?;
    let spec = LayerSpec { precision, gdn_tail: true, ..LayerSpec::new(*shape, *step) };
    let nodes = ggml_layer_ops(t, &spec)?.into_iter().map(|op| Node::new(op, Some(0))).collect();
    Ok(batch_snapshot_copies(nodes).into_iter().map(|n| n.op).collect())
}

/// The op chain of spec §1.4 over `t`: what ggml's CUDA backend launches for one GDN layer of
/// one verify step (with its default fusions: SSM_CONV+SiLU, GATED_DELTA_NET writing the ssm
/// cache directly). Snapshot copies of the conv state run as one CPY_SNAPSHOTS launch (R > 0)
/// or one CPY (R = 0). The alpha/beta mat-vecs take at most 8 columns per launch; wider steps
/// run ⌈n_t/8⌉ launches, each column computed as mul_mat_vec_f computes it.
///
/// The tensors must conform to the shape and step ([`LayerTensors::conforms`]); anything else
/// is a typed error, never a panic, and every view is built with checked arithmetic.
pub fn unfused_ops(t: &LayerTensors, shape: &GdnShape, step: &Step, precision: Precision) -> Result<Vec<Box<dyn Op>>> {
    layer_ops(t, shape, step, precision)
}

/// A layer's tensors in a built graph: the unfused chain's [`LayerTensors`] (with `qkv_mixed`
/// and `cur` in the arena) plus the persistent inputs they are staged from.
#[derive(Clone, Debug)]
pub struct LayerValues {
    pub t: LayerTensors,
    pub qkv_src: Tensor,
    pub cur_src: Tensor,
    /// \[replay\] A replay-mode layer's log sets, accepted counts and scratch values.
    pub replay: Option<ReplayTensors>,
}

/// A value's type and shape (contiguous).
#[derive(Clone, Debug)]
struct ValueDef {
    info: ValueInfo,
    dtype: DType,
    ne: [usize; 4],
    /// The row indices of an index value (one per sequence).
    index: Option<Vec<i32>>,
}

/// Value ids of one layer: the layer's tensor table in field order, then `qkv_src`, `cur_src`.
const FIELDS: usize = LAYER_TENSORS + 2;

/// A built graph: nodes in ggml's order (separate snapshot CPYs), the initial memory, each
/// layer's tensors, every value and the plan.
pub struct Built {
    pub spec: StackSpec,
    pub nodes: Vec<Node>,
    pub mem: HostMemory,
    pub layers: Vec<LayerValues>,
    pub values: Vec<ValueInfo>,
    /// Each value's whole tensor in `mem`.
    pub value_tensors: Vec<Tensor>,
    pub plan: Plan,
    /// The arena buffer.
    pub arena: BufferId,
}

/// Declares one layer's values: the layer's tensor table ([`LayerTensors::table`], roles from
/// each tensor's [`TensorKind`]), then the two persistent inputs the step inputs are staged
/// from. Sizes are checked: a value whose bytes do not fit is an [`Error::Overflow`]; `spec`
/// is validated.
fn declare(defs: &mut Vec<ValueDef>, spec: &LayerSpec, layer: usize, outputs: Outputs) -> Result<[usize; FIELDS]> {
    let (shape, step) = (&spec.shape, &spec.step);
    let table = LayerTensors::table(shape, step, spec.weights)?;
    let role = |kind: TensorKind| match kind {
        TensorKind::Cache => Role::Cache,
        TensorKind::Index => Role::Index,
        TensorKind::StepInput => Role::Staged,
        TensorKind::Weight => Role::Weight,
        TensorKind::Intermediate => Role::Intermediate,
        TensorKind::Product if outputs == Outputs::Products => Role::Output,
        TensorKind::Product => Role::Intermediate,
        TensorKind::Output => Role::Output,
    };
    let staged_from = |name: &str| {
        let (_, dtype, ne) = table[LayerTensors::index_of(name).expect("a table field")];
        (dtype, ne)
    };
    let (qkv, cur) = (staged_from("qkv_mixed"), staged_from("cur"));
    let list = table
        .into_iter()
        .zip(LayerTensors::KINDS)
        .map(|((name, dtype, ne), kind)| (name, role(kind), dtype, ne))
        .chain([("qkv_src", Role::Input, qkv.0, qkv.1), ("cur_src", Role::Input, cur.0, cur.1)]);
    let mut ids = [0; FIELDS];
    for (id, (name, role, dtype, ne)) in ids.iter_mut().zip(list) {
        let bytes = Layout::contiguous_bytes(dtype, ne).ok_or_else(|| Error::Overflow {
            op: OP,
            arg: name,
            what: format!("bytes of layer {layer}'s {dtype:?} {ne:?}"),
        })?;
        // source rows < cache rows ≤ 2^31 − 1 (validated).
        let index = (role == Role::Index).then(|| step.source_rows_i32());
        defs.push(ValueDef { info: ValueInfo { name: format!("L{layer}.{name}"), role, bytes, layer: Some(layer) }, dtype, ne, index });
        *id = defs.len() - 1;
    }
    Ok(ids)
}

/// One layer's value ids: its table and staged inputs, and a replay layer's
/// [`ReplayTensors`] in their field order.
#[derive(Clone, Copy)]
struct LayerIds {
    fields: [usize; FIELDS],
    replay: Option<[usize; REPLAY_TENSORS]>,
}

/// \[replay\] Declares a replay layer's [`ReplayTensors`]: the log sets persistent (never
/// planned, observed), the accepted counts and window rows index buffers (counts 0: a first
/// step, the window rows T·n_s + s that go with them), the rest planned scratch.
fn declare_replay(defs: &mut Vec<ValueDef>, spec: &LayerSpec, layer: usize) -> Result<[usize; REPLAY_TENSORS]> {
    let (n_t, n_s) = (spec.step.n_tokens, spec.step.n_seqs());
    let mut ids = [0; REPLAY_TENSORS];
    for (id, (name, dtype, ne)) in ids.iter_mut().zip(ReplayTensors::table(&spec.shape, &spec.step)?) {
        let (role, index) = match name {
            "accepted" => (Role::Index, Some(vec![0; n_s])),
            // (T + 1)·n_s rows fit (the table's checked product; ≤ 17 × 256).
            "window_rows" => (Role::Index, Some((0..n_s).map(|s| (n_t * n_s + s) as i32).collect())),
            n if n.starts_with("log") => (Role::Cache, None),
            _ => (Role::Intermediate, None),
        };
        let bytes = Layout::contiguous_bytes(dtype, ne).ok_or_else(|| Error::Overflow {
            op: OP,
            arg: name,
            what: format!("bytes of layer {layer}'s replay {dtype:?} {ne:?}"),
        })?;
        defs.push(ValueDef {
            info: ValueInfo { name: format!("L{layer}.replay.{name}"), role, bytes, layer: Some(layer) },
            dtype,
            ne,
            index,
        });
        *id = defs.len() - 1;
    }
    Ok(ids)
}

fn layer_values(ids: &LayerIds, tensor: impl Fn(usize) -> Tensor) -> LayerValues {
    let f = ids.fields.map(&tensor);
    let (table, staged) = f.split_at(LAYER_TENSORS);
    LayerValues {
        t: LayerTensors::from_array(table.try_into().expect("the table's length")),
        qkv_src: staged[0],
        cur_src: staged[1],
        replay: ids.replay.map(|r| ReplayTensors::from_array(r.map(&tensor))),
    }
}

/// The index of a tensor of the layer's table (a name the table has).
fn field(name: &str) -> usize {
    LayerTensors::index_of(name).expect("a field of the layer's tensor table")
}

/// A layer's nodes: the two STAGE nodes of its inputs, then ggml's graph of the layer.
fn layer_nodes(v: &LayerValues, spec: &LayerSpec, layer: usize) -> Result<Vec<Node>> {
    let staged: [Box<dyn Op>; 2] =
        [Box::new(Stage { src: v.qkv_src, dst: v.t.qkv_mixed }), Box::new(Stage { src: v.cur_src, dst: v.t.cur })];
    let ops = match &v.replay {
        Some(r) => replay_layer_ops(&v.t, r, spec)?,
        None => ggml_layer_ops(&v.t, spec)?,
    };
    Ok(staged.into_iter().chain(ops).map(|op| Node::new(op, Some(layer))).collect())
}

/// Builds the graph of `spec`: values declared per layer, planned across the stack, placed in
/// one [`HostMemory`] (an arena buffer for planned values, one buffer for each other value)
/// and filled from `seed` (caches, inputs and weights in realistic ranges, the arena with
/// random bits). The memory has the [`crate::memory::default_host_budget`].
pub fn build(spec: &StackSpec, seed: u64) -> Result<Built> {
    build_with_budget(spec, seed, crate::memory::default_host_budget())
}

/// [`build`] into a memory of `budget` bytes: a graph that does not fit is an
/// [`Error::OutOfMemory`] before anything is allocated.
pub fn build_with_budget(spec: &StackSpec, seed: u64, budget: usize) -> Result<Built> {
    build_planned(spec, seed, budget, &|_, _| Vec::new())
}

/// Finds, on the symbolic graph (one buffer per value) and what the caller observes of it,
/// the node groups a later pass will fuse (e.g. `fusion::groups`).
pub type GroupsOf<'a> = dyn Fn(&[Node], &ByteSet) -> Vec<plan::Group> + 'a;

/// [`build_with_budget`] with fusion-aware planning: the planner widens the lifetimes of the
/// groups `groups` finds on the symbolic graph ([`plan::plan_with_groups`]), so that the fused
/// graph's nodes never read and write one block (the plan serves the unfused graph too).
pub fn build_planned(spec: &StackSpec, seed: u64, budget: usize, groups: &GroupsOf) -> Result<Built> {
    if spec.layers.is_empty() {
        return Err(Error::Invalid { op: OP, what: "no layers".into() });
    }
    let mut defs = Vec::new();
    let mut ids = Vec::new();
    for (l, ls) in spec.layers.iter().enumerate() {
        ls.validate()?;
        let fields = declare(&mut defs, ls, l, spec.outputs)?;
        let replay = match ls.rollback {
            Rollback::Replay { .. } => Some(declare_replay(&mut defs, ls, l)?),
            Rollback::Snapshots => None,
        };
        ids.push(LayerIds { fields, replay });
    }
    // The symbolic graph: value v is BufferId(v), contiguous at offset 0.
    let symbolic = |v: usize| Tensor::new(BufferId(v), Layout::contiguous(defs[v].dtype, defs[v].ne));
    let mut nodes = Vec::new();
    for (l, ls) in spec.layers.iter().enumerate() {
        nodes.extend(layer_nodes(&layer_values(&ids[l], symbolic), ls, l)?);
    }
    let pins: Vec<Pin> = spec
        .layers
        .iter()
        .zip(&ids)
        .filter(|(ls, _)| ls.layout == LayerLayout::PrAliasing)
        .map(|(_, id)| Pin { value: id.fields[field("ssm_state")], onto: id.fields[field("qkv_mixed")] })
        .collect();
    let values: Vec<ValueInfo> = defs.iter().map(|d| d.info.clone()).collect();
    let observed = ByteSet::of_all(
        (0..values.len()).filter(|&v| !values[v].role.planned() || values[v].role == Role::Output).map(symbolic).collect::<Vec<_>>().iter(),
        Bound::Over,
    );
    let groups = groups(&nodes, &observed);
    // [layer-step] A pin cannot hold when one group both reads the block's owner and writes the
    // pinned value (the group's values all live at its anchor): the layer step's group holds the
    // CONCAT reading qkv and the ssm-state GET_ROWS the PR layout puts on qkv. The fused graph
    // never writes the ssm state (`state_read` eliminated it), so that layer is planned without
    // the pin; every other pin is kept.
    let touches = |g: &plan::Group, v: usize, write: bool| {
        g.nodes.iter().any(|&i| {
            let ts = if write { nodes[i].op.outputs() } else { nodes[i].op.inputs() };
            ts.iter().any(|t| t.buffer.0 == v)
        })
    };
    let pins: Vec<Pin> =
        pins.into_iter().filter(|p| !groups.iter().any(|g| touches(g, p.value, true) && touches(g, p.onto, false))).collect();
    let plan = plan::plan_with_groups(&values, &nodes, &pins, &groups)?;

    // Everything through the budgeted allocators: the whole graph's bytes are summed
    // (checked) and compared with the budget before anything is allocated, so a spec whose
    // buffers cannot exist is an OutOfMemory or Overflow error, never an abort or a panic.
    let mut mem = HostMemory::with_budget(budget);
    let mut total = plan.arena_bytes;
    for (v, d) in defs.iter().enumerate() {
        if plan.offsets[v].is_none() {
            total = total.checked_add(d.info.bytes).ok_or_else(|| Error::Overflow {
                op: OP,
                arg: "spec",
                what: "bytes of the whole graph".into(),
            })?;
        }
    }
    mem.reserve_check(total)?;
    let arena = mem.try_alloc(plan.arena_bytes)?;
    let mut value_tensors = Vec::with_capacity(defs.len());
    for (v, d) in defs.iter().enumerate() {
        let t = match (plan.offsets[v], &d.index) {
            (Some(offset), _) => {
                // The planner placed the block inside the arena, whose size fits usize.
                let l = Layout::try_contiguous(d.dtype, d.ne).ok_or_else(|| Error::Overflow {
                    op: OP,
                    arg: "spec",
                    what: format!("strides of `{}`", d.info.name),
                })?;
                Tensor::new(arena, l.view(d.ne, l.nb, offset))
            }
            (None, Some(rows)) => mem.try_alloc_indices(rows)?,
            (None, None) => mem.try_alloc_tensor(d.dtype, d.ne)?,
        };
        value_tensors.push(t);
    }
    let mut rng = StdRng::seed_from_u64(seed);
    // The arena's random bits, drawn in place (as `inputs::poison` draws them).
    for b in mem.bytes_mut(arena) {
        *b = rng.random();
    }
    let mut layers = Vec::new();
    let mut real_nodes = Vec::new();
    for (l, ls) in spec.layers.iter().enumerate() {
        let lv = layer_values(&ids[l], |v| value_tensors[v]);
        fill(&mut mem, &lv, ls, &mut rng)?;
        real_nodes.extend(layer_nodes(&lv, ls, l)?);
        layers.push(lv);
    }
    debug_assert_eq!(real_nodes.len(), nodes.len());
    Ok(Built { spec: spec.clone(), nodes: real_nodes, mem, layers, values, value_tensors, plan, arena })
}

/// Writes `values` into a contiguous F32 tensor.
fn put(mem: &mut HostMemory, t: &Tensor, values: &[f32]) {
    let o = t.layout.offset;
    let bytes = &mut mem.bytes_mut(t.buffer)[o..o + 4 * values.len()];
    for (chunk, v) in bytes.chunks_exact_mut(4).zip(values) {
        chunk.copy_from_slice(&v.to_le_bytes());
    }
}

/// Caches, inputs and weights as `LayerTensors::fill_random` draws them.
fn fill(mem: &mut HostMemory, v: &LayerValues, spec: &LayerSpec, rng: &mut StdRng) -> Result<()> {
    let vals = |scale: f32| if spec.specials { Values::WithSpecials { scale, every: 997 } } else { Values::Uniform(scale) };
    let f = |mem: &mut HostMemory, rng: &mut StdRng, t: &Tensor, values: Values| {
        let data = inputs::fill(rng, t.layout.n_elements(), values)?;
        put(mem, t, &data);
        Ok(())
    };
    fill_table(mem, v, spec, rng, vals, f)?;
    if let Some(r) = &v.replay {
        fill_replay(mem, r, rng)?;
    }
    Ok(())
}

/// \[replay\] A replay layer's log sets in realistic ranges (conv inputs ±1, k ±0.15, v ±2, g a
/// log decay, β in [0, 1)) and accepted counts drawn in 0 ..= T: a built graph replays a
/// random previous step. Callers of an episode write their own counts
/// ([`ReplayTensors::set_accepted`]).
fn fill_replay(mem: &mut HostMemory, r: &ReplayTensors, rng: &mut StdRng) -> Result<()> {
    for log in &r.logs {
        for (t, scale) in [(&log.qkv, 1.0), (&log.k, 0.15), (&log.v, 2.0)] {
            let data = inputs::fill(rng, t.layout.n_elements(), Values::Uniform(scale))?;
            put(mem, t, &data);
        }
        let n = log.g.layout.n_elements();
        let g: Vec<f32> = (0..n).map(|_| -rng.random_range(-6.0f32..2.08).exp()).collect();
        put(mem, &log.g, &g);
        let beta: Vec<f32> = (0..n).map(|_| rng.random_range(0.0f32..1.0)).collect();
        put(mem, &log.beta, &beta);
    }
    let n_t = r.n_tokens();
    let accepted: Vec<usize> = (0..r.accepted.ne()[0]).map(|_| rng.random_range(0..=n_t)).collect();
    r.set_accepted(mem, &accepted).expect("counts drawn in 0 ..= T, one per sequence");
    Ok(())
}

/// The layer table's caches, inputs and weights.
fn fill_table(
    mem: &mut HostMemory,
    v: &LayerValues,
    spec: &LayerSpec,
    rng: &mut StdRng,
    vals: impl Fn(f32) -> Values,
    f: impl Fn(&mut HostMemory, &mut StdRng, &Tensor, Values) -> Result<()>,
) -> Result<()> {
    let t = &v.t;
    f(mem, rng, &t.conv_cache, vals(1.0))?;
    f(mem, rng, &t.ssm_cache, Values::Uniform(0.05))?;
    f(mem, rng, &v.qkv_src, vals(1.0))?;
    f(mem, rng, &v.cur_src, vals(1.0))?;
    f(mem, rng, &t.conv_weight, Values::Uniform(0.5))?;
    let w_scale = 1.7 / (spec.shape.n_embd as f32).sqrt();
    for w in [&t.alpha_weight, &t.beta_weight] {
        let data = inputs::fill(rng, w.layout.n_elements(), Values::Uniform(w_scale))?;
        match w.dtype() {
            DType::F16 | DType::BF16 => {
                let o = w.layout.offset;
                let bytes = &mut mem.bytes_mut(w.buffer)[o..o + 2 * data.len()];
                for (chunk, x) in bytes.chunks_exact_mut(2).zip(data) {
                    let bits = if w.dtype() == DType::F16 { half::f16::from_f32(x).to_bits() } else { half::bf16::from_f32(x).to_bits() };
                    chunk.copy_from_slice(&bits.to_le_bytes());
                }
            }
            _ => put(mem, w, &data),
        }
    }
    f(mem, rng, &t.dt_bias, Values::Uniform(1.0))?;
    let a: Vec<f32> = (0..spec.shape.n_v_heads).map(|_| -(rng.random_range(-1.0f32..1.0).exp())).collect();
    put(mem, &t.ssm_a, &a);
    Ok(())
}

impl Built {
    /// The graph's nodes again (ggml's order, separate CPYs), for another compile of the same
    /// memory.
    pub fn fresh_nodes(&self) -> Result<Vec<Node>> {
        let mut nodes = Vec::with_capacity(self.nodes.len());
        for (l, ls) in self.spec.layers.iter().enumerate() {
            nodes.extend(layer_nodes(&self.layers[l], ls, l)?);
        }
        Ok(nodes)
    }

    /// \[replay\] The graph's nodes (ggml's order) with every replay layer writing log set
    /// `log_set` and replaying the other: the step after a step of this graph runs these with
    /// the other set. The values, and so the plan, are the same for both sets; snapshot layers
    /// are as [`Built::fresh_nodes`] builds them. A log set other than 0 or 1 is an
    /// [`Error::Invalid`].
    pub fn replay_nodes(&self, log_set: usize) -> Result<Vec<Node>> {
        let mut nodes = Vec::with_capacity(self.nodes.len());
        for (l, ls) in self.spec.layers.iter().enumerate() {
            let spec = match ls.rollback {
                Rollback::Replay { .. } => LayerSpec { rollback: Rollback::Replay { log_set }, ..*ls },
                Rollback::Snapshots => *ls,
            };
            nodes.extend(layer_nodes(&self.layers[l], &spec, l)?);
        }
        Ok(nodes)
    }

    /// What a caller observes after a run of this graph: every value that is not planned
    /// (inputs, weights, caches) and every graph output. The fusion pass may leave no stale
    /// byte there.
    pub fn live_out(&self) -> ByteSet {
        let observed = |v: usize| self.plan.offsets[v].is_none() || self.values[v].role == Role::Output;
        ByteSet::of_all((0..self.values.len()).filter(|&v| observed(v)).map(|v| &self.value_tensors[v]), Bound::Over)
    }

    /// Values whose final bytes can be compared between two runs that executed different
    /// rewrites of this graph: every value that is not planned (inputs, weights, caches) and
    /// every planned value no later block overwrites, except those holding bytes one of the
    /// rewrites left unwritten (`stale`: [`crate::fusion::Report::eliminated`]).
    pub fn comparable(&self, stale: &ByteSet) -> Vec<(String, Tensor)> {
        self.values
            .iter()
            .enumerate()
            .filter(|(v, _)| self.plan.offsets[*v].is_none() || self.plan.intact_at_end[*v])
            .filter(|(v, _)| !ByteSet::of(&self.value_tensors[*v], Bound::Over).intersects(stale))
            .map(|(v, info)| (info.name.clone(), self.value_tensors[v]))
            .collect()
    }

    /// The value id of `name` ("L3.conv_out").
    pub fn value(&self, name: &str) -> Option<usize> {
        self.values.iter().position(|v| v.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::LayerInit;

    const SMALL: GdnShape = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 128, d_conv: 4, eps: 1e-6 };

    /// [`unfused_ops`] is this builder plus the #379 batching: the launch sequence of spec
    /// §1.4 with one CPY (R = 0) or one CPY_SNAPSHOTS for the K = R + 1 slots, with the
    /// snapshot rows of the step's cell.
    #[test]
    fn layer_ops_is_the_unfused_launch_sequence() {
        for (n_t, r, cells, kv, src, depth, zero) in [
            (1, 0, 1, 0, 0, 0, None),
            (4, 3, 1, 0, 0, 0, None),
            (5, 6, 2, 1, 1, 2, Some(0)),
            (12, 0, 3, 2, 0, 0, None),
            (16, 16, 1, 0, 0, 16, Some(0)),
            (3, 7, 2, 0, 1, 5, None),
        ] {
            let step = Step {
                n_tokens: n_t,
                n_rollback: r,
                cells,
                kv_head: kv,
                src_cell: src,
                rollback_depth: depth,
                zero_cell: zero,
                ..Step::new(n_t, r)
            };
            let mut mem = HostMemory::new();
            let t = LayerTensors::alloc(&mut mem, &SMALL, &step, &LayerInit::default()).unwrap();
            let ops = unfused_ops(&t, &SMALL, &step, Precision::Default).unwrap();
            let scale: &[&str] = if zero.is_some() { &["SCALE"] } else { &[] };
            let copy = if r == 0 { "CPY" } else { "CPY_SNAPSHOTS" };
            let mut want: Vec<&str> =
                [scale, &["GET_ROWS", "CONCAT", copy, "SSM_CONV", "L2_NORM", "L2_NORM"], scale, &["GET_ROWS"]].concat();
            want.extend(std::iter::repeat_n("MUL_MAT_VEC", 2 * n_t.div_ceil(MAT_VEC_MAX_COLS)));
            // ggml fuses SOFTPLUS·MUL when the shapes are equal: n_t = 1.
            want.extend(if n_t == 1 {
                &["SIGMOID", "ADD", "UNARY_MUL", "GATED_DELTA_NET"][..]
            } else {
                &["SIGMOID", "ADD", "SOFTPLUS", "MUL", "GATED_DELTA_NET"]
            });
            assert_eq!(ops.iter().map(|o| o.name()).collect::<Vec<_>>(), want, "{step:?}");
            if let Some(c) = ops.iter().find_map(|o| o.as_ref().downcast_ref::<CpySnapshots>()) {
                assert_eq!((c.first_row, c.group_stride, c.n_slots, c.d_conv), (kv, cells, r + 1, SMALL.d_conv), "{step:?}");
            }
        }
    }

    #[test]
    fn batching_leaves_non_w2_runs_alone() {
        let mut mem = HostMemory::new();
        let step = Step::new(4, 3);
        let t = LayerTensors::alloc(&mut mem, &SMALL, &step, &LayerInit::default()).unwrap();
        let spec = LayerSpec::new(SMALL, step);
        let mut nodes: Vec<Node> = ggml_layer_ops(&t, &spec).unwrap().into_iter().map(|op| Node::new(op, Some(0))).collect();
        // Swap two copies: rows no longer descend by the group stride.
        nodes.swap(3, 4);
        let names: Vec<_> = batch_snapshot_copies(nodes).iter().map(|n| n.op.name()).collect();
        assert_eq!(names.iter().filter(|n| **n == "CPY").count(), 4);
        assert!(!names.contains(&"CPY_SNAPSHOTS"));
    }

    #[test]
    fn a_stack_is_planned_across_layers() {
        let small = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 1, head_dim: 32, d_conv: 4, eps: 1e-6 };
        let layer = LayerSpec::new(small, Step::new(3, 2));
        let spec = StackSpec { layers: vec![layer; 3], outputs: Outputs::Forward };
        let b = build(&spec, 1).unwrap();
        // Layer 1's values reuse blocks layer 0 gave back: the arena is far smaller than the sum.
        let planned: usize = (0..b.values.len()).filter(|&v| b.plan.offsets[v].is_some()).map(|v| b.plan.block_bytes[v]).sum();
        assert!(b.plan.arena_bytes < planned / 2, "arena {} of {planned}", b.plan.arena_bytes);
        // Every node validates against the built memory.
        for n in &b.nodes {
            n.op.validate(&b.mem).unwrap();
        }
        // With the ggml layout the SiLU output takes the dead qkv block.
        let (qkv, out) = (b.value("L1.qkv_mixed").unwrap(), b.value("L1.conv_out").unwrap());
        assert_eq!(b.plan.offsets[qkv], b.plan.offsets[out]);
    }

    #[test]
    fn the_pr_layout_puts_the_ssm_state_on_the_dead_qkv_block() {
        let small = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 1, head_dim: 32, d_conv: 4, eps: 1e-6 };
        let layer = LayerSpec { layout: LayerLayout::PrAliasing, ..LayerSpec::new(small, Step::new(3, 2)) };
        let b = build(&StackSpec { layers: vec![layer; 2], outputs: Outputs::Products }, 1).unwrap();
        for l in 0..2 {
            let (qkv, state, out) = (
                b.value(&format!("L{l}.qkv_mixed")).unwrap(),
                b.value(&format!("L{l}.ssm_state")).unwrap(),
                b.value(&format!("L{l}.conv_out")).unwrap(),
            );
            assert_eq!(b.plan.offsets[qkv], b.plan.offsets[state]);
            assert!(!b.plan.shares_bytes(out, qkv));
        }
    }
}

/// The unfused chain's tests (moved here with its builder from `layer/`).
#[cfg(test)]
mod chain_tests {
    use super::*;
    use crate::layer::LayerInit;
    use crate::reference::math::ExactMufu;
    use rand::SeedableRng;

    /// A small layer (one key head, two value heads) that keeps the CPU tests fast.
    const SMALL: GdnShape = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 128, d_conv: 4, eps: 1e-6 };

    fn names(shape: &GdnShape, step: &Step) -> Vec<&'static str> {
        let mut mem = HostMemory::new();
        let t = LayerTensors::alloc(&mut mem, shape, step, &LayerInit::default()).unwrap();
        unfused_ops(&t, shape, step, Precision::Default).unwrap().iter().map(|op| op.name()).collect()
    }

    #[test]
    fn the_chain_is_ggmls_launch_order() {
        let chain = ["GET_ROWS", "CONCAT", "CPY", "SSM_CONV", "L2_NORM", "L2_NORM", "GET_ROWS", "MUL_MAT_VEC", "MUL_MAT_VEC"];
        let tail = ["SIGMOID", "ADD", "SOFTPLUS", "MUL", "GATED_DELTA_NET"];
        assert_eq!(names(&SMALL, &Step::new(4, 0)), [&chain[..], &tail[..]].concat());
        // Snapshots: one batched launch instead of the single CPY.
        let with_snapshots = names(&SMALL, &Step::new(4, 3));
        assert_eq!(with_snapshots[2], "CPY_SNAPSHOTS");
        assert_eq!(with_snapshots.len(), chain.len() + tail.len());
        // A fresh cell: both of its cache rows are zeroed in place before they are read.
        let zeroed = names(&SMALL, &Step { zero_cell: Some(0), ..Step::new(2, 1) });
        assert_eq!(&zeroed[..2], &["SCALE", "GET_ROWS"]);
        assert_eq!(&zeroed[7..9], &["SCALE", "GET_ROWS"]);
        // 12 tokens: each mat-vec runs as 8 + 4 columns.
        assert_eq!(names(&SMALL, &Step::new(12, 0)).iter().filter(|n| **n == "MUL_MAT_VEC").count(), 4);
    }

    /// n_s sequences per step (spec §1.2–1.4): one GET_ROWS of the n_s source rows, one
    /// CPY_SNAPSHOTS for the n_s·K rows, ⌈n_t·n_s/8⌉ launches per mat-vec; on the CPU, each
    /// sequence's snapshot rows (slot j·M + kv_head + s) hold the windows of its own conv input
    /// (its source row's state, then its tokens), and GATED_DELTA_NET wrote the min(n_t, K)
    /// newest ssm slots of each sequence's cell and nothing of the others.
    #[test]
    fn several_sequences_are_wired_as_llama_cpp_builds_them() {
        let shape = SMALL;
        let (n_t, r, kc, c) = (3, 4, shape.d_conv, shape.channels());
        let step =
            Step { cells: 6, kv_head: 2, src_cell: 5, rollback_depth: 1, ..Step::new(n_t, r) }.with_sequences(&[(2, 0), (0, 4)]).unwrap();
        let n_s = step.n_seqs();
        assert_eq!((n_s, step.source_rows()), (3, vec![6 + 5, 2, 4 * 6]));
        let init = LayerInit::default();
        let mut mem = HostMemory::new();
        let t = LayerTensors::alloc(&mut mem, &shape, &step, &init).unwrap();
        t.fill_random(&mut mem, &shape, &mut StdRng::seed_from_u64(8), &init).unwrap();
        let ops = unfused_ops(&t, &shape, &step, init.precision).unwrap();
        let names: Vec<_> = ops.iter().map(|o| o.name()).collect();
        assert_eq!(names.iter().filter(|n| **n == "MUL_MAT_VEC").count(), 2 * (n_t * n_s).div_ceil(MAT_VEC_MAX_COLS));
        let snapshots = ops.iter().find_map(|o| o.as_ref().downcast_ref::<CpySnapshots>()).expect("one batched snapshot copy");
        assert_eq!((snapshots.first_row, snapshots.group_stride, snapshots.n_slots, snapshots.conv_input.ne()[2]), (2, 6, r + 1, n_s));
        let before = mem.clone();
        for op in &ops {
            op.reference(&mut mem, &mut ExactMufu).unwrap();
        }
        let sources = step.source_rows();
        for (s, &src) in sources.iter().enumerate() {
            for j in 0..step.slots() {
                let row = j * step.cells + step.kv_head + s;
                let o = n_t.saturating_sub(j);
                for ch in [0, 1, c / 2, c - 1] {
                    for jj in 0..kc - 1 {
                        let col = o + jj;
                        let want = if col < kc - 1 {
                            before.read_f32(&t.conv_cache, [ch * (kc - 1) + col, src, 0, 0]).unwrap()
                        } else {
                            before.read_f32(&t.qkv_mixed, [ch, col - (kc - 1), s, 0]).unwrap()
                        };
                        let got = mem.read_f32(&t.conv_cache, [ch * (kc - 1) + jj, row, 0, 0]).unwrap();
                        assert_eq!(got.to_bits(), want.to_bits(), "sequence {s}, slot {j}, channel {ch}, column {jj}");
                    }
                }
            }
        }
        // ssm rows: slot j of cell kv_head + s written for j < min(n_t, K); every other row kept.
        for row in 0..step.cache_rows() {
            let (group, cell) = (row / step.cells, row % step.cells);
            let written = (2..2 + n_s).contains(&cell) && group < n_t.min(step.slots());
            let changed = mem.read_f32(&t.ssm_cache, [5, row, 0, 0]).unwrap().to_bits()
                != before.read_f32(&t.ssm_cache, [5, row, 0, 0]).unwrap().to_bits();
            assert_eq!(changed, written, "ssm row {row}");
            let conv_written = (2..2 + n_s).contains(&cell);
            if !conv_written {
                assert_eq!(
                    mem.read_f32(&t.conv_cache, [7, row, 0, 0]).unwrap().to_bits(),
                    before.read_f32(&t.conv_cache, [7, row, 0, 0]).unwrap().to_bits()
                );
            }
        }
    }

    /// Inconsistent multi-sequence steps are typed errors naming the problem.
    #[test]
    fn inconsistent_sequences_are_typed_errors() {
        let invalid = |step: Step| matches!(step.validate(), Err(Error::Invalid { op: "GDN_LAYER", .. }));
        let base = Step { cells: 4, ..Step::new(2, 1) };
        // Sequence s writes cell kv_head + s: three sequences from cell 2 need 5 cells.
        assert!(invalid(Step { kv_head: 2, ..base }.with_sequences(&[(0, 0), (1, 0)]).unwrap()));
        assert!(Step { kv_head: 1, ..base }.with_sequences(&[(0, 0), (1, 1)]).unwrap().validate().is_ok());
        // A further sequence reading outside the cells, or deeper than the snapshots kept.
        assert!(invalid(base.with_sequences(&[(4, 0)]).unwrap()));
        assert!(invalid(base.with_sequences(&[(1, 2)]).unwrap()));
        // More than 256 sequences; more token columns than a graph takes.
        assert!(matches!(base.with_sequences(&[(0, 0); crate::layer::MAX_SEQS]), Err(Error::Unsupported { .. })));
        assert!(base.with_sequences(&[(0, 0); crate::layer::MAX_SEQS - 1]).is_ok());
        let wide = Step { cells: 64, ..Step::new(1000, 0) }.with_sequences(&[(0, 0); 1]).unwrap();
        assert!(matches!(wide.validate_with_max_tokens(crate::layer::MAX_GRAPH_TOKENS), Err(Error::Unsupported { .. })));
        // The layer's tensors are sized for n_s: one of another step's size does not conform.
        let mut mem = HostMemory::new();
        let two = Step { cells: 2, ..Step::new(2, 1) }.with_sequences(&[(0, 1)]).unwrap();
        let t = LayerTensors::alloc(&mut mem, &SMALL, &Step { cells: 2, ..Step::new(2, 1) }, &LayerInit::default()).unwrap();
        assert!(matches!(unfused_ops(&t, &SMALL, &two, Precision::Default), Err(Error::Shape { .. })));
    }

    /// Runs the chain's CPU references on a small layer and checks the wiring against the
    /// spec's definitions, independently of the op implementations.
    #[test]
    fn the_cpu_chain_wires_views_as_the_spec_defines_them() {
        let shape = SMALL;
        let (n_t, r, kc, c) = (5, 6, shape.d_conv, shape.channels());
        let step = Step { cells: 2, kv_head: 1, src_cell: 1, ..Step::new(n_t, r) };
        let init = LayerInit::default();
        let mut mem = HostMemory::new();
        let t = LayerTensors::alloc(&mut mem, &shape, &step, &init).unwrap();
        t.fill_random(&mut mem, &shape, &mut StdRng::seed_from_u64(7), &init).unwrap();
        let before = mem.clone();
        for op in unfused_ops(&t, &shape, &step, init.precision).unwrap() {
            op.reference(&mut mem, &mut ExactMufu).unwrap();
        }
        let old_row = step.source_row();
        // Snapshot slot j of cell kv_head holds window(max(0, n_t − j)): column jj of channel ch
        // is conv_input column o + jj — the old state's column below K_c−1, a token above.
        for j in 0..step.slots() {
            let row = j * step.cells + step.kv_head;
            let o = n_t.saturating_sub(j);
            for ch in [0, 1, c / 2, c - 1] {
                for jj in 0..kc - 1 {
                    let col = o + jj;
                    let want = if col < kc - 1 {
                        before.read_f32(&t.conv_cache, [ch * (kc - 1) + col, old_row, 0, 0]).unwrap()
                    } else {
                        before.read_f32(&t.qkv_mixed, [ch, col - (kc - 1), 0, 0]).unwrap()
                    };
                    let got = mem.read_f32(&t.conv_cache, [ch * (kc - 1) + jj, row, 0, 0]).unwrap();
                    assert_eq!(got.to_bits(), want.to_bits(), "slot {j}, channel {ch}, column {jj}");
                }
            }
        }
        // Rows of other cells are untouched.
        for g in 0..step.slots() {
            let row = g * step.cells;
            assert_eq!(
                mem.read_f32(&t.conv_cache, [7, row, 0, 0]).unwrap().to_bits(),
                before.read_f32(&t.conv_cache, [7, row, 0, 0]).unwrap().to_bits()
            );
        }
        // q and k are L2-normalised heads of the conv output: unit length.
        for (x, name) in [(&t.q_norm, "q"), (&t.k_norm, "k")] {
            for tok in 0..n_t {
                let ss: f64 = (0..shape.head_dim).map(|i| (mem.read_f32(x, [i, 0, tok, 0]).unwrap() as f64).powi(2)).sum();
                assert!((ss - 1.0).abs() < 1e-5, "{name} token {tok}: |x|² = {ss}");
            }
        }
        // The gate is softplus(alpha + dt_bias)·ssm_a with ssm_a < 0, and beta is in (0, 1).
        for i in t.gate.layout.indices() {
            assert!(mem.read_f32(&t.gate, i).unwrap() < 0.0);
            let b = mem.read_f32(&t.beta, i).unwrap();
            assert!(b > 0.0 && b < 1.0);
        }
        // GATED_DELTA_NET wrote min(n_t, K) state slots into the ssm cache rows of cell kv_head.
        for j in 0..step.slots() {
            let row = j * step.cells + step.kv_head;
            let changed = mem.read_f32(&t.ssm_cache, [5, row, 0, 0]).unwrap().to_bits()
                != before.read_f32(&t.ssm_cache, [5, row, 0, 0]).unwrap().to_bits();
            assert_eq!(changed, j < n_t.min(step.slots()), "ssm slot {j}");
        }
    }
}

/// \[replay\] The replay mode's builder: its node order, and its typed refusals.
#[cfg(test)]
mod replay_tests {
    use super::*;
    use crate::memory::Memory;

    const SMALL: GdnShape = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 128, d_conv: 4, eps: 1e-6 };

    fn replay_step(n_t: usize, n_s: usize) -> Step {
        let others: Vec<(usize, usize)> = (1..n_s).map(|s| (s, 0)).collect();
        Step { cells: n_s, ..Step::new(n_t, 0) }.with_sequences(&others).unwrap()
    }

    fn replay_spec(step: Step, log_set: usize) -> LayerSpec {
        LayerSpec { rollback: Rollback::Replay { log_set }, ..LayerSpec::new(SMALL, step) }
    }

    fn built(spec: LayerSpec) -> Built {
        build(&StackSpec { layers: vec![spec], outputs: Outputs::Products }, 3).unwrap()
    }

    #[test]
    fn a_replay_layer_is_replay_commit_verify_log() {
        let b = built(replay_spec(replay_step(4, 2), 0));
        let names: Vec<_> = b.nodes.iter().map(|n| n.op.name()).collect();
        let want = [
            "STAGE",
            "STAGE",
            "GATED_DELTA_NET_REPLAY",
            "GET_ROWS",
            "CONCAT",
            "CPY_SNAPSHOTS",
            "GET_ROWS",
            "GET_ROWS",
            "CONCAT",
            "CPY",
            "SSM_CONV",
            "L2_NORM",
            "L2_NORM",
            "GET_ROWS",
            "MUL_MAT_VEC",
            "MUL_MAT_VEC",
            "SIGMOID",
            "ADD",
            "SOFTPLUS",
            "MUL",
            "GATED_DELTA_NET",
            "CPY",
        ];
        assert_eq!(names, want);
        // The other parity reads the log set this one writes, and writes the one it reads.
        let r = b.layers[0].replay.unwrap();
        let other = b.replay_nodes(1).unwrap();
        let replay_of = |nodes: &[Node]| nodes.iter().find_map(|n| n.get::<GatedDeltaNetReplay>().map(|o| o.k)).unwrap();
        assert_eq!(replay_of(&b.nodes), r.logs[1].k);
        assert_eq!(replay_of(&other), r.logs[0].k);
        let log_v = |nodes: &[Node]| nodes.last().unwrap().op.outputs()[0];
        assert_eq!(log_v(&b.nodes), r.logs[0].v);
        assert_eq!(log_v(&other), r.logs[1].v);
        // k, g and β: the L2 norm and the products write the log set this parity keeps (no copy).
        let writes = |nodes: &[Node], name: &str, t: Tensor| {
            nodes.iter().any(|n| {
                n.op.name() == name && n.op.outputs().iter().any(|o| o.buffer == t.buffer && o.layout.byte_range() == t.layout.byte_range())
            })
        };
        assert!(writes(&b.nodes, "SIGMOID", r.logs[0].beta) && writes(&b.nodes, "MUL", r.logs[0].g));
        assert!(writes(&other, "SIGMOID", r.logs[1].beta) && writes(&other, "MUL", r.logs[1].g));
        assert!(writes(&b.nodes, "L2_NORM", r.logs[0].k) && writes(&other, "L2_NORM", r.logs[1].k));
        // The verify reads k where the norm wrote it.
        let gdn_k = |nodes: &[Node]| nodes.iter().find_map(|n| n.get::<GatedDeltaNet>().map(|o| o.k)).unwrap();
        assert!(gdn_k(&b.nodes).same_elements(&r.logs[0].k) && gdn_k(&other).same_elements(&r.logs[1].k));
        // No node writes a cache row but the replay and the commit's last GET_ROWS.
        let t = &b.layers[0].t;
        for (i, n) in b.nodes.iter().enumerate() {
            let writes_cache = n.op.outputs().iter().any(|o| o.buffer == t.conv_cache.buffer || o.buffer == t.ssm_cache.buffer);
            assert_eq!(writes_cache, i == 2 || i == 6, "node {i} {}", n.op.name());
        }
        // Every node validates on the built memory.
        for n in &b.nodes {
            n.op.validate(&b.mem).unwrap();
        }
    }

    #[test]
    fn replay_specs_that_do_not_fit_are_typed_errors() {
        let ok = replay_spec(replay_step(4, 2), 1);
        assert!(ok.validate().is_ok());
        let invalid = |spec: LayerSpec| matches!(spec.validate(), Err(Error::Invalid { op: OP, .. }));
        let unsupported = |spec: LayerSpec| matches!(spec.validate(), Err(Error::Unsupported { op: OP, .. }));
        assert!(invalid(replay_spec(replay_step(4, 2), 2)));
        assert!(invalid(LayerSpec { step: Step { n_rollback: 3, ..ok.step }, ..ok }));
        // A sequence reading another cell, or a rollback depth.
        assert!(invalid(LayerSpec { step: Step { cells: 3, ..ok.step }.with_sequences(&[(2, 0)]).unwrap(), ..ok }));
        assert!(invalid(LayerSpec { step: Step { cells: 3, src_cell: 1, ..ok.step }, ..ok }));
        assert!(unsupported(LayerSpec { step: Step { zero_cell: Some(0), ..ok.step }, ..ok }));
        assert!(unsupported(LayerSpec { layout: LayerLayout::PrAliasing, ..ok }));
        assert!(unsupported(LayerSpec { gdn_tail: false, ..ok }));
        // The snapshot builder refuses a replay spec, the replay builder a snapshot spec.
        let b = built(ok);
        let v = &b.layers[0];
        assert!(matches!(ggml_layer_ops(&v.t, &ok), Err(Error::Invalid { .. })));
        let snapshot = LayerSpec { rollback: Rollback::Snapshots, ..ok };
        assert!(matches!(replay_layer_ops(&v.t, &v.replay.unwrap(), &snapshot), Err(Error::Invalid { .. })));
        // A graph build refuses what validate refuses.
        assert!(build(&StackSpec { layers: vec![replay_spec(replay_step(4, 2), 2)], outputs: Outputs::Forward }, 1).is_err());
    }

    #[test]
    fn logs_and_counts_that_do_not_fit_are_typed_errors() {
        let spec = replay_spec(replay_step(4, 2), 0);
        let mut b = built(spec);
        let v = b.layers[0].clone();
        let r = v.replay.unwrap();
        // A log set of another step's size, or the two sets on the same bytes.
        let short = TokenLog { k: r.logs[0].k.view([128, 1, 3, 2], r.logs[0].k.layout.nb, 0), ..r.logs[0] };
        let bad = ReplayTensors { logs: [short, r.logs[1]], ..r };
        assert!(matches!(replay_layer_ops(&v.t, &bad, &spec), Err(Error::Shape { arg: "log0.k", .. })));
        let same = ReplayTensors { logs: [r.logs[0], r.logs[0]], ..r };
        assert!(matches!(replay_layer_ops(&v.t, &same, &spec), Err(Error::Invalid { .. })));
        // Counts: one per sequence, each 0 ..= T; nothing written on a refusal.
        let before = (r.accepted_counts(&b.mem).unwrap(), b.mem.index_values(&r.window_rows));
        assert!(matches!(r.set_accepted(&mut b.mem, &[1]), Err(Error::Invalid { .. })));
        let err = r.set_accepted(&mut b.mem, &[2, 5]).unwrap_err();
        assert!(matches!(err, Error::IndexOutOfRange { arg: "accepted", position: 1, index: 5, rows: 5, .. }), "{err}");
        assert_eq!((r.accepted_counts(&b.mem).unwrap(), b.mem.index_values(&r.window_rows)), before);
        r.set_accepted(&mut b.mem, &[0, 4]).unwrap();
        assert_eq!(b.mem.index_values(&r.accepted), Some(vec![0, 4]));
        // (T − a)·n_s + s.
        assert_eq!(b.mem.index_values(&r.window_rows), Some(vec![8, 1]));
        // A count the op sees out of range (written around the setter) is its typed refusal.
        b.mem.write_u32(&r.accepted, [0, 0, 0, 0], 5).unwrap();
        let replay = b.nodes.iter().find(|n| n.get::<GatedDeltaNetReplay>().is_some()).unwrap();
        assert!(matches!(replay.op.validate(&b.mem), Err(Error::IndexOutOfRange { arg: "accepted", .. })));
    }
}
