//! What a bench run found (every statistic, serialised to JSON) and its text table in the
//! reference PR's format, with the PR's published H200 figures as a labelled anchor column.

use super::stats::{Summary, geomean};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// Where the numbers came from.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Meta {
    pub date_utc: String,
    pub commit: String,
    pub gpu: String,
    pub driver: String,
    pub cuda_driver_api: String,
    /// SM clock and how it was read ("nvidia-smi clocks.sm after the run", or
    /// "cuDeviceGetAttribute(CLOCK_RATE): the maximum, not the clock seen").
    pub sm_clock_mhz: Option<f64>,
    pub sm_clock_source: String,
    pub l2_bytes: Option<u64>,
    /// "cupti" (kernel activity records) or "cuda-events" (one event pair around each launch).
    pub timing: String,
    pub timing_note: String,
    pub nvtx: String,
    pub preset: String,
    pub shape: String,
    pub weights: String,
    /// "warm" (every layer reuses one set of buffers) or "cold" (rotating sets beyond L2).
    pub cache: String,
    pub buffer_sets: usize,
    pub rounds: usize,
    pub layers_per_arm: usize,
    pub graph_layers: usize,
    pub graph_replays_per_arm: usize,
    pub fusion_available: bool,
    pub off_label: String,
    pub on_label: String,
}

/// One kernel of the layer chain (one row of the table).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KernelRow {
    /// `GET_ROWS#0`: op name and occurrence in the chain.
    pub key: String,
    pub role: Option<String>,
    /// The PTX entry launched.
    pub entry: String,
    pub off: Option<Summary>,
    pub on: Option<Summary>,
}

/// One arm's whole-chain and graph figures.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ArmStats {
    /// Sum of the kernel durations of one layer, per timed layer.
    pub chain_total: Option<Summary>,
    pub kernels_per_layer: usize,
    /// Span of one replay of the captured forward (all GDN layers), µs.
    pub graph_span: Option<Summary>,
    pub graph_kernels_per_forward: Option<usize>,
}

/// \[replay\] The replay arm of a mode (`rgdn bench --replay`): what it accepted and the bytes
/// it moves and keeps, beside the snapshot arm's.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct ReplayArm {
    /// The count a every sequence accepted of the logged step it replays.
    pub accepted: usize,
    /// Bytes of ssm state the replay step must move at least: each sequence's committed state
    /// read once, and written once when a > 0 (its floor, [`COPY_BYTES_PER_S`]).
    pub state_bytes: u64,
    /// Bytes one sequence keeps per layer in replay mode: one ssm row, one conv row and the two
    /// log sets (per token its conv inputs, k, v, g and β).
    pub memory_per_seq: u64,
    /// The same for the snapshot arm: 1 + R ssm rows and 1 + R conv rows.
    pub snapshot_memory_per_seq: u64,
}

/// One verify shape (decode, MTP, DFlash, T = 16).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ModeReport {
    pub mode: String,
    pub label: String,
    pub tokens: usize,
    pub rollback: usize,
    /// Sequences per step n_s (1 in reports written before multi-sequence steps).
    #[serde(default = "one_sequence")]
    pub seqs: usize,
    /// [seq-batch] Bytes of ssm state a step must move at least: each sequence's state read once
    /// and its min(T, 1 + R) snapshot states written once ([`floor_us`]).
    #[serde(default)]
    pub state_bytes: Option<u64>,
    /// \[replay\] With `rgdn bench --replay`: the replay-mode ("on") arm's count and its bytes.
    #[serde(default)]
    pub replay: Option<ReplayArm>,
    pub kernels: Vec<KernelRow>,
    pub off: ArmStats,
    pub on: ArmStats,
    /// \[overlap\] Whether the "on" arm's launches overlap (the overlap pass let some start
    /// early): its kernel times then include the time a grid waits for the ones before it, so
    /// its chain total is not its time, and only the graph span compares (absent in reports
    /// written before it).
    #[serde(default)]
    pub on_overlapped: bool,
    /// median(on chain total) / median(off chain total).
    pub chain_ratio: Option<f64>,
    pub graph_ratio: Option<f64>,
    /// chain-total ratio of each ABBA round (on/off of that round's medians).
    pub round_ratios: Vec<f64>,
    /// The path an engine runs (recorder and timing off): host time per step and the bytes
    /// (absent in reports written before it).
    #[serde(default)]
    pub host: Option<HostReport>,
}

/// Host time of one layer step with the recorder and timing off, and the production-path
/// comparison (`measure::host_steps`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct HostReport {
    /// µs per step through a plan prepared once (index write + `StepPlan::launch`), per arm.
    pub off_planned: Option<Summary>,
    pub on_planned: Option<Summary>,
    /// µs per step validating and preparing every launch (index write + each op's `launch`).
    pub off_unplanned: Option<Summary>,
    pub on_unplanned: Option<Summary>,
    /// Buffers the step hands on that were compared off vs on after one planned step each
    /// (the bench fails when any differs); 0 when the arms are different steps (\[replay\]
    /// `--replay`).
    pub identical_buffers: usize,
    /// [host-cost] A planned step in parts (steps timed on their own): µs of the index write,
    /// of the plan's checks (binding check and index rules), of its launches, per arm (absent
    /// in reports written before it).
    #[serde(default)]
    pub off_planned_parts: Option<[Summary; 3]>,
    #[serde(default)]
    pub on_planned_parts: Option<[Summary; 3]>,
    /// [host-cost] µs per layer of a `captured_layers`-layer step captured once as a CUDA graph
    /// and replayed (index write + replay checks + graph launch, over the layers), per arm
    /// (absent in reports written before it).
    #[serde(default)]
    pub off_captured_per_layer: Option<Summary>,
    #[serde(default)]
    pub on_captured_per_layer: Option<Summary>,
    #[serde(default)]
    pub captured_layers: usize,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    pub meta: Meta,
    pub modes: Vec<ModeReport>,
    pub geomean_chain_ratio: Option<f64>,
    pub geomean_graph_ratio: Option<f64>,
}

impl Report {
    pub fn new(meta: Meta, modes: Vec<ModeReport>) -> Self {
        let chain: Vec<f64> = modes.iter().filter_map(|m| m.chain_ratio).collect();
        let graph: Vec<f64> = modes.iter().filter_map(|m| m.graph_ratio).collect();
        Report { meta, geomean_chain_ratio: geomean(&chain), geomean_graph_ratio: geomean(&graph), modes }
    }
}

/// median(on) / median(off).
pub fn ratio(off: Option<&Summary>, on: Option<&Summary>) -> Option<f64> {
    match (off, on) {
        (Some(a), Some(b)) if a.median > 0.0 => Some(b.median / a.median),
        _ => None,
    }
}

/// The reference PR's published per-layer figures (H200, CUDA 12.8, nsys on a live 9B model):
/// base and fused µs per kernel, keyed like our rows.
pub struct Anchor {
    pub tokens: usize,
    pub off: &'static [(&'static str, f64)],
    pub on: &'static [(&'static str, f64)],
    pub off_total: (f64, usize),
    pub on_total: (f64, usize),
    /// Whole-model verify forward (not only the GDN chains): kernels and graph span µs.
    pub forward: ((usize, f64), (usize, f64)),
}

pub const ANCHORS: [Anchor; 2] = [
    Anchor {
        tokens: 4,
        off: &[
            ("GET_ROWS#0", 2.30),
            ("CONCAT#0", 2.53),
            ("CPY_SNAPSHOTS#0", 3.10),
            ("SSM_CONV#0", 3.10),
            ("L2_NORM#0", 3.26),
            ("MUL_MAT_VEC#0", 5.02),
            ("MUL_MAT_VEC#1", 5.95),
            ("GATED_DELTA_NET#0", 9.02),
        ],
        on: &[("GDN_CONV_CHAIN#0", 3.68), ("MUL_MAT_VEC_PAIR#0", 7.46), ("GATED_DELTA_NET#0", 8.67)],
        off_total: (34.3, 8),
        on_total: (19.8, 3),
        forward: ((946, 3857.0), (826, 3554.0)),
    },
    Anchor {
        tokens: 8,
        off: &[
            ("GET_ROWS#0", 2.30),
            ("CONCAT#0", 2.69),
            ("CPY_SNAPSHOTS#0", 4.74),
            ("SSM_CONV#0", 2.56),
            ("L2_NORM#0", 3.26),
            ("MUL_MAT_VEC#0", 8.26),
            ("MUL_MAT_VEC#1", 10.02),
            ("GATED_DELTA_NET#0", 15.46),
        ],
        on: &[("GDN_CONV_CHAIN#0", 4.50), ("MUL_MAT_VEC_PAIR#0", 11.84), ("GATED_DELTA_NET#0", 14.42)],
        off_total: (49.3, 8),
        on_total: (30.8, 3),
        forward: ((950, 5470.0), (830, 5032.0)),
    },
];

pub fn anchor(tokens: usize, rollback: usize) -> Option<&'static Anchor> {
    // The PR's shapes: T = 4 with 4 snapshot rows, T = 8 with 8 rows (R = T − 1).
    ANCHORS.iter().find(|a| a.tokens == tokens && rollback + 1 == tokens)
}

fn cell(s: Option<&Summary>) -> String {
    match s {
        Some(s) => format!("{:.2} ({:.2}–{:.2})", s.median, s.p10, s.p90),
        None => "–".into(),
    }
}

fn lookup(table: &[(&str, f64)], key: &str) -> String {
    table.iter().find(|(k, _)| *k == key).map(|(_, v)| format!("{v:.2}")).unwrap_or_default()
}

/// The whole report as text: one table per mode, then the ratios.
fn one_sequence() -> usize {
    1
}

/// [seq-batch] The H200's copy bandwidth (a large device-to-device copy, bytes read plus written,
/// measured on this workplace's H200s: 4.3 TB/s): the rate of the memory floor.
pub const COPY_BYTES_PER_S: f64 = 4.3e12;

/// [seq-batch] The memory floor of one layer step in µs: its state bytes at [`COPY_BYTES_PER_S`].
pub fn floor_us(mode: &ModeReport) -> Option<f64> {
    mode.state_bytes.map(|b| b as f64 / COPY_BYTES_PER_S * 1e6)
}

/// A table cell: `x` with `p` decimals, or "–" when it was not measured.
fn fixed(x: Option<f64>, p: usize) -> String {
    x.map_or("–".into(), |v| format!("{v:.p$}"))
}

/// [seq-batch] One row of [`PEERS`]: n_s, T and each peer's µs.
pub type PeerRow = (usize, usize, &'static [(&'static str, f64)]);

/// [seq-batch] The peers' µs per layer verify step on the same H200, 9B F32 (SGLang 0.5.23, vLLM
/// 0.33, FlashInfer 0.7.2 with SGLang's conv update; fla 0.6.0, which writes the final state only):
/// `shared/reference/peers-h200.md` (measured 2026-12-02 in one device run with rgdn's c5ea5b2, a
/// CUDA graph of 20 calls each; not this run). (n_s, T, [(peer, µs)]).
pub const PEERS: &[PeerRow] = &[
    (1, 1, &[("SGLang", 4.45), ("vLLM", 6.77), ("fla*", 7.55)]),
    (1, 4, &[("SGLang", 8.13), ("vLLM", 12.73), ("FlashInfer", 9.41), ("fla*", 9.26)]),
    (1, 8, &[("SGLang", 13.01), ("vLLM", 21.74), ("FlashInfer", 13.58), ("fla*", 11.62)]),
    (1, 16, &[("SGLang", 25.39), ("vLLM", 44.75), ("FlashInfer", 28.49), ("fla*", 16.33)]),
    (4, 1, &[("SGLang", 7.51), ("vLLM", 9.17), ("fla*", 15.60)]),
    (4, 4, &[("SGLang", 23.91), ("vLLM", 18.13), ("FlashInfer", 17.17), ("fla*", 18.89)]),
    (4, 8, &[("SGLang", 42.01), ("vLLM", 35.77), ("FlashInfer", 30.23), ("fla*", 22.64)]),
    (4, 16, &[("SGLang", 77.11), ("vLLM", 63.43), ("FlashInfer", 65.19), ("fla*", 31.10)]),
    (16, 1, &[("SGLang", 25.88), ("vLLM", 20.77), ("fla*", 53.96)]),
    (16, 4, &[("SGLang", 59.31), ("vLLM", 62.25), ("FlashInfer", 59.45), ("fla*", 64.71)]),
    (16, 8, &[("SGLang", 107.22), ("vLLM", 107.10), ("FlashInfer", 106.73), ("fla*", 81.68)]),
    (16, 16, &[("SGLang", 202.85), ("vLLM", 196.97), ("FlashInfer", 207.61), ("fla*", 117.72)]),
    (64, 1, &[("SGLang", 92.69), ("vLLM", 84.89), ("fla*", 197.88)]),
    (64, 4, &[("SGLang", 213.95), ("vLLM", 201.13), ("FlashInfer", 212.61), ("fla*", 228.14)]),
    (64, 8, &[("SGLang", 389.04), ("vLLM", 359.80), ("FlashInfer", 395.12), ("fla*", 291.46)]),
];

/// [seq-batch] The fastest peer that keeps per-token states (fla, marked `*`, keeps only the final
/// state) at (n_s, T), from [`PEERS`].
pub fn best_state_keeping_peer(n_s: usize, t: usize) -> Option<(&'static str, f64)> {
    let (_, _, peers) = PEERS.iter().find(|(s, tt, _)| *s == n_s && *tt == t)?;
    peers.iter().filter(|(name, _)| !name.ends_with('*')).map(|&(n, us)| (n, us)).min_by(|a, b| a.1.total_cmp(&b.1))
}

/// Tokens verified per second by one replay of the captured forward (all its GDN layers):
/// T·n_s tokens per replay of median span `span` µs.
pub fn tokens_per_second(mode: &ModeReport, span: Option<&Summary>) -> Option<f64> {
    span.filter(|s| s.median > 0.0).map(|s| (mode.tokens * mode.seqs) as f64 / (s.median * 1e-6))
}

pub fn render_text(r: &Report) -> String {
    let m = &r.meta;
    let mut o = String::new();
    let _ = writeln!(o, "rgdn bench — {} ({}), {} weights, commit {}", m.preset, m.shape, m.weights, m.commit);
    let _ = writeln!(
        o,
        "GPU: {} | driver {} | {} | SM clock {} ({})",
        m.gpu,
        m.driver,
        m.cuda_driver_api,
        mhz(m.sm_clock_mhz),
        m.sm_clock_source
    );
    let _ = writeln!(o, "timing: {} — {}", m.timing, m.timing_note);
    let _ = writeln!(
        o,
        "cache: {} ({} buffer set(s)), ABBA × {} rounds, {} timed layers per arm, graph of {} layers × {} replays per arm; NVTX: {}",
        m.cache, m.buffer_sets, m.rounds, m.layers_per_arm, m.graph_layers, m.graph_replays_per_arm, m.nvtx
    );
    let _ = writeln!(o, "off = {} | on = {}", m.off_label, m.on_label);
    if !m.fusion_available {
        let _ = writeln!(
            o,
            "*** FUSION NOT AVAILABLE: the \"on\" columns run the unfused chain again (an A/A run: ratios show noise, not a fusion) ***"
        );
    }
    for mode in &r.modes {
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "{} — T = {} tokens, {} snapshot rows (R = {}), {} sequence(s)",
            mode.label,
            mode.tokens,
            mode.rollback + 1,
            mode.rollback,
            mode.seqs
        );
        // The PR's figures are single-sequence.
        let a = if mode.seqs == 1 { anchor(mode.tokens, mode.rollback) } else { None };
        let _ = write!(o, "{:<52} {:>30} {:>30}", "kernel", "off µs med (p10–p90)", "on µs med (p10–p90)");
        if a.is_some() {
            let _ = write!(o, " {:>12} {:>12}", "PR base µs", "PR fused µs");
        }
        let _ = writeln!(o);
        for k in &mode.kernels {
            let name = match &k.role {
                Some(role) => format!("{} ({}, {role})", k.entry, k.key),
                None => format!("{} ({})", k.entry, k.key),
            };
            let _ = write!(o, "{:<52} {:>30} {:>30}", name, cell(k.off.as_ref()), cell(k.on.as_ref()));
            if let Some(a) = a {
                let _ = write!(o, " {:>12} {:>12}", lookup(a.off, &k.key), lookup(a.on, &k.key));
            }
            let _ = writeln!(o);
        }
        let total = |s: &ArmStats| format!("{} [{} k]", cell(s.chain_total.as_ref()), s.kernels_per_layer);
        let _ = write!(o, "{:<52} {:>30} {:>30}", "chain total [kernels per layer]", total(&mode.off), total(&mode.on));
        if let Some(a) = a {
            let _ = write!(
                o,
                " {:>12} {:>12}",
                format!("{:.1} [{} k]", a.off_total.0, a.off_total.1),
                format!("{:.1} [{} k]", a.on_total.0, a.on_total.1)
            );
        }
        let _ = writeln!(o);
        let graph = |s: &ArmStats| match (&s.graph_span, s.graph_kernels_per_forward) {
            (Some(g), Some(k)) => format!("{} [{k} k]", cell(Some(g))),
            _ => "–".into(),
        };
        let _ = write!(
            o,
            "{:<52} {:>30} {:>30}",
            format!("graph span, {} layers [kernels]", m.graph_layers),
            graph(&mode.off),
            graph(&mode.on)
        );
        if let Some(a) = a {
            let ((k0, s0), (k1, s1)) = a.forward;
            let _ = write!(o, " {:>12} {:>12}", format!("{s0:.0} [{k0}]*"), format!("{s1:.0} [{k1}]*"));
        }
        let _ = writeln!(o);
        let rate = |s: &ArmStats| tokens_per_second(mode, s.graph_span.as_ref()).map_or("–".into(), |x| format!("{x:.0}"));
        let _ = writeln!(
            o,
            "{:<52} {:>30} {:>30}",
            format!("tokens verified / s, {}-layer graph", m.graph_layers),
            rate(&mode.off),
            rate(&mode.on)
        );
        if let Some(h) = &mode.host {
            let _ = writeln!(
                o,
                "{:<52} {:>30} {:>30}",
                "host µs per step, plan once (recorder off)",
                cell(h.off_planned.as_ref()),
                cell(h.on_planned.as_ref())
            );
            let parts = |p: Option<&[Summary; 3]>| {
                p.map_or("–".into(), |[w, c, l]| format!("{:.2} / {:.2} / {:.2}", w.median, c.median, l.median))
            };
            let _ = writeln!(
                o,
                "{:<52} {:>30} {:>30}",
                "  of which index write / checks / launches",
                parts(h.off_planned_parts.as_ref()),
                parts(h.on_planned_parts.as_ref())
            );
            if h.captured_layers > 0 {
                let _ = writeln!(
                    o,
                    "{:<52} {:>30} {:>30}",
                    format!("host µs per layer, {}-layer step as one CUDA graph", h.captured_layers),
                    cell(h.off_captured_per_layer.as_ref()),
                    cell(h.on_captured_per_layer.as_ref())
                );
            }
            let _ = writeln!(
                o,
                "{:<52} {:>30} {:>30}",
                "host µs per step, validating every launch",
                cell(h.off_unplanned.as_ref()),
                cell(h.on_unplanned.as_ref())
            );
            let _ = if h.identical_buffers > 0 {
                writeln!(o, "recorder off (the engine's path): fused = unfused in all {} buffers the step hands on", h.identical_buffers)
            } else {
                // [replay] Replay against snapshots: two different steps.
                writeln!(o, "recorder off (the engine's path): the arms are different steps, not compared")
            };
        }
        let _ = writeln!(
            o,
            "on/off: chain {} | graph {} | per ABBA round: {}",
            ratio_text(mode.chain_ratio),
            ratio_text(mode.graph_ratio),
            mode.round_ratios.iter().map(|x| format!("{x:.3}")).collect::<Vec<_>>().join(" ")
        );
        if mode.on_overlapped {
            let _ = writeln!(
                o,
                "on: launches overlapped — a kernel's time includes its wait for the grids before it, so the chain total is not \
                 the step's time: compare the graph span"
            );
        }
    }
    // [replay] Replay against snapshots: both arms per layer step, each against its own floor
    // and with its memory per sequence.
    if r.modes.iter().any(|m| m.replay.is_some()) && m.graph_layers > 0 {
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "per layer step (graph span / {} layers), replay (on) against snapshots (off); floors = ssm bytes moved at {:.1} TB/s; MiB = state kept per sequence and layer:",
            m.graph_layers,
            COPY_BYTES_PER_S / 1e12
        );
        let _ = writeln!(
            o,
            "{:>4} {:>3} {:>3} {:>10} {:>10} {:>8} {:>10} {:>10} {:>8} {:>8} {:>12}",
            "n_s", "T", "a", "snap µs", "floor µs", "snap MiB", "replay µs", "floor µs", "× floor", "rep MiB", "replay/snap"
        );
        let mib = |b: u64| format!("{:.2}", b as f64 / (1 << 20) as f64);
        for mode in &r.modes {
            let Some(rep) = mode.replay else { continue };
            let per_layer = |a: &ArmStats| a.graph_span.as_ref().map(|g| g.median / m.graph_layers as f64);
            let (snap, replay) = (per_layer(&mode.off), per_layer(&mode.on));
            let rep_floor = rep.state_bytes as f64 / COPY_BYTES_PER_S * 1e6;
            let _ = writeln!(
                o,
                "{:>4} {:>3} {:>3} {:>10} {:>10} {:>8} {:>10} {:>10} {:>8} {:>8} {:>12}",
                mode.seqs,
                mode.tokens,
                rep.accepted,
                fixed(snap, 2),
                fixed(floor_us(mode), 2),
                mib(rep.snapshot_memory_per_seq),
                fixed(replay, 2),
                format!("{rep_floor:.2}"),
                fixed(replay.map(|x| x / rep_floor), 2),
                mib(rep.memory_per_seq),
                fixed(replay.zip(snap).map(|(a, b)| a / b), 2),
            );
        }
    }
    // [seq-batch] Per layer step against the memory floor and beside the peers.
    if r.modes.iter().any(|m| m.state_bytes.is_some() && m.replay.is_none()) && m.graph_layers > 0 {
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "per layer step (\"on\" graph span / {} layers) against the state floor (ssm bytes moved at {:.1} TB/s) and the peers (peers-h200.md, another run):",
            m.graph_layers,
            COPY_BYTES_PER_S / 1e12
        );
        let _ = writeln!(
            o,
            "{:>4} {:>3} {:>4} {:>12} {:>10} {:>10} {:>8} {:>22} {:>10}",
            "n_s", "T", "R", "state MiB", "on µs", "floor µs", "× floor", "best state-keeping peer", "on / peer"
        );
        for mode in r.modes.iter().filter(|m| m.replay.is_none()) {
            let per_layer = mode.on.graph_span.as_ref().map(|g| g.median / m.graph_layers as f64);
            let floor = floor_us(mode);
            let peer = best_state_keeping_peer(mode.seqs, mode.tokens);
            let _ = writeln!(
                o,
                "{:>4} {:>3} {:>4} {:>12} {:>10} {:>10} {:>8} {:>22} {:>10}",
                mode.seqs,
                mode.tokens,
                mode.rollback,
                fixed(mode.state_bytes.map(|b| b as f64 / (1 << 20) as f64), 1),
                fixed(per_layer, 2),
                fixed(floor, 2),
                fixed(per_layer.zip(floor).map(|(a, b)| a / b), 2),
                peer.map_or("–".into(), |(n, us)| format!("{n} {us:.2}")),
                fixed(per_layer.zip(peer).map(|(a, (_, b))| a / b), 2),
            );
        }
    }
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "geometric mean of on/off ratios over modes: chain {} | graph {}",
        ratio_text(r.geomean_chain_ratio),
        ratio_text(r.geomean_graph_ratio)
    );
    if r.modes.iter().any(|m| m.seqs == 1 && anchor(m.tokens, m.rollback).is_some()) {
        let _ = writeln!(
            o,
            "PR columns: the reference PR's published H200 figures (nsys, live 9B model, CUDA 12.8) — an anchor, not this run; \
             * = its whole-model verify forward (attention, FFN, …), not comparable with our GDN-only graph."
        );
    }
    o
}

fn mhz(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.0} MHz")).unwrap_or_else(|| "unknown".into())
}

fn ratio_text(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.3}")).unwrap_or_else(|| "–".into())
}

/// One line for a mode as soon as it is measured, before the whole report: a run cut by its
/// time limit (a device call's `timeout`) keeps what it measured. The graph span per layer step
/// of each arm, median (p10–p90), and their ratio; `graph_layers` the captured forward's layers.
pub fn mode_done_line(mode: &ModeReport, graph_layers: usize) -> String {
    let per_step = |s: &ArmStats| match (&s.graph_span, graph_layers) {
        (Some(g), n) if n > 0 => {
            let n = n as f64;
            format!("{:.2} ({:.2}–{:.2})", g.median / n, g.p10 / n, g.p90 / n)
        }
        _ => "–".into(),
    };
    format!(
        "measured {} (T = {}, R = {}, n_s = {}): graph span / {graph_layers} layers, µs: off {}, on {}; graph on/off {}{}",
        mode.mode,
        mode.tokens,
        mode.rollback,
        mode.seqs,
        per_step(&mode.off),
        per_step(&mode.on),
        ratio_text(mode.graph_ratio),
        if mode.on_overlapped { " (on: overlapped)" } else { "" }
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::bench::stats::summarize;

    /// The line a scripted run gets per mode: each arm's graph span per layer step and the ratio.
    #[test]
    fn a_measured_mode_reads_as_one_line() {
        let report = synthetic(true);
        let m = &report.modes[1];
        let line = mode_done_line(m, 24);
        let off = m.off.graph_span.as_ref().unwrap().median / 24.0;
        assert!(line.starts_with("measured mtp3 (T = 4, R = 3, n_s = 1)"), "{line}");
        assert!(
            line.contains(&format!("off {off:.2} (")) && line.contains(&format!("graph on/off {:.3}", m.graph_ratio.unwrap())),
            "{line}"
        );
        assert!(!line.contains("overlapped") && !line.contains('\n'), "{line}");
        // No captured forward: no per-step figure, never a division by zero.
        assert!(mode_done_line(m, 0).contains("off –, on –"), "{}", mode_done_line(m, 0));
    }

    /// A report from made-up numbers (also used by the plot test).
    pub(crate) fn synthetic(fusion: bool) -> Report {
        let s = |base: f64| summarize(&(0..200).map(|i| base + (i % 10) as f64 * 0.01).collect::<Vec<_>>());
        let modes =
            [("decode", "decode", 1, 0), ("mtp3", "MTP K=3 verify", 4, 3), ("dflash7", "DFlash-7 verify", 8, 7), ("t16", "T=16", 16, 15)]
                .iter()
                .map(|&(mode, label, t, r)| {
                    let scale = 1.0 + t as f64 / 8.0;
                    let row = |key: &str, role: Option<&str>, entry: &str, off: f64, on: Option<f64>| KernelRow {
                        key: key.into(),
                        role: role.map(String::from),
                        entry: entry.into(),
                        off: s(off * scale),
                        on: on.and_then(|v| s(v * scale)),
                    };
                    let on_k = |v: f64| if fusion { None } else { Some(v) };
                    let mut kernels = vec![
                        row("GET_ROWS#0", Some("conv state"), "get_rows_f32", 2.3, on_k(2.3)),
                        row("CONCAT#0", None, "concat_dim0_f32", 2.5, on_k(2.5)),
                        row("SSM_CONV#0", None, "ssm_conv_f32_d4_silu", 3.1, on_k(3.1)),
                        row("GATED_DELTA_NET#0", None, "gated_delta_net_f32_d128", 9.0, Some(8.7)),
                    ];
                    if fusion {
                        kernels.push(row("GDN_CONV_CHAIN#0", None, "gdn_conv_chain_f32", 0.0, None));
                        kernels.last_mut().unwrap().off = None;
                        kernels.last_mut().unwrap().on = s(3.7 * scale);
                    }
                    let off = ArmStats {
                        chain_total: s(17.0 * scale),
                        kernels_per_layer: 4,
                        graph_span: s(400.0 * scale),
                        graph_kernels_per_forward: Some(96),
                    };
                    let on_total = if fusion { 12.4 } else { 17.0 };
                    let on = ArmStats {
                        chain_total: s(on_total * scale),
                        kernels_per_layer: if fusion { 2 } else { 4 },
                        graph_span: s(on_total / 17.0 * 400.0 * scale),
                        graph_kernels_per_forward: Some(if fusion { 48 } else { 96 }),
                    };
                    ModeReport {
                        mode: mode.into(),
                        label: label.into(),
                        tokens: t,
                        rollback: r,
                        seqs: 1,
                        state_bytes: Some(((1 + t.min(r + 1)) as u64 * 2) << 20),
                        replay: None,
                        kernels,
                        on_overlapped: false,
                        chain_ratio: ratio(off.chain_total.as_ref(), on.chain_total.as_ref()),
                        graph_ratio: ratio(off.graph_span.as_ref(), on.graph_span.as_ref()),
                        off,
                        on,
                        round_ratios: vec![1.0, 0.99],
                        host: Some(HostReport {
                            off_planned: s(3.0),
                            on_planned: s(1.5),
                            off_unplanned: s(90.0),
                            on_unplanned: s(30.0),
                            identical_buffers: 10,
                            off_planned_parts: Some([1.0, 0.5, 1.5].map(exactly)),
                            on_planned_parts: Some([1.0, 0.25, 0.25].map(exactly)),
                            off_captured_per_layer: s(0.5),
                            on_captured_per_layer: s(0.25),
                            captured_layers: 24,
                        }),
                    }
                })
                .collect();
        let meta = Meta {
            gpu: "NVIDIA H200".into(),
            timing: "cupti".into(),
            preset: "qwen3.5-9b".into(),
            fusion_available: fusion,
            off_label: "unfused".into(),
            on_label: if fusion { "fused".into() } else { "fusion not available: the unfused chain again".into() },
            graph_layers: 24,
            ..Meta::default()
        };
        Report::new(meta, modes)
    }

    /// A summary of one sample `x`.
    fn exactly(x: f64) -> Summary {
        Summary { n: 1, median: x, p10: x, p90: x, min: x, max: x, mean: x }
    }

    /// Tokens verified per second: T·n_s tokens per replay of the forward.
    #[test]
    fn throughput_counts_every_sequence() {
        let span = Summary { n: 3, median: 500.0, p10: 490.0, p90: 510.0, min: 480.0, max: 520.0, mean: 500.0 };
        let mode = ModeReport {
            mode: "mtp3-s16".into(),
            label: "".into(),
            tokens: 4,
            rollback: 3,
            seqs: 16,
            state_bytes: None,
            replay: None,
            kernels: vec![],
            off: ArmStats::default(),
            on: ArmStats::default(),
            on_overlapped: false,
            chain_ratio: None,
            graph_ratio: None,
            round_ratios: vec![],
            host: None,
        };
        assert_eq!(tokens_per_second(&mode, Some(&span)), Some(64.0 / 500e-6));
        assert_eq!(tokens_per_second(&mode, None), None);
        // A report written before n_s existed reads as single-sequence.
        let mut json = serde_json::to_value(&mode).unwrap();
        json.as_object_mut().unwrap().remove("seqs");
        assert_eq!(serde_json::from_value::<ModeReport>(json).unwrap().seqs, 1);
    }

    #[test]
    fn the_table_has_every_kernel_the_totals_and_the_anchor() {
        let text = render_text(&synthetic(false));
        assert!(text.contains("FUSION NOT AVAILABLE"), "{text}");
        assert!(text.contains("get_rows_f32 (GET_ROWS#0, conv state)"));
        assert!(text.contains("chain total [kernels per layer]"));
        // The PR's anchor appears for T = 4 (34.3 µs, 8 kernels) and T = 8 only.
        assert!(text.contains("34.3 [8 k]") && text.contains("49.3 [8 k]") && text.contains("19.8 [3 k]"));
        assert_eq!(text.matches("PR base µs").count(), 2);
        assert!(text.contains("geometric mean of on/off ratios over modes: chain 1.000"));
        let fused = render_text(&synthetic(true));
        assert!(!fused.contains("FUSION NOT AVAILABLE"));
        assert!(fused.contains("gdn_conv_chain_f32 (GDN_CONV_CHAIN#0)"));
        // The engine's path: host µs per step with and without a plan, and the bytes.
        assert!(fused.contains("host µs per step, plan once (recorder off)"), "{fused}");
        assert!(fused.contains("host µs per step, validating every launch"));
        // The planned step in parts, medians: write / checks / launches.
        assert!(fused.contains("  of which index write / checks / launches"), "{fused}");
        assert!(fused.contains("host µs per layer, 24-layer step as one CUDA graph"), "{fused}");
        assert!(fused.contains("1.00 / 0.50 / 1.50") && fused.contains("1.00 / 0.25 / 0.25"), "{fused}");
        assert!(fused.contains("recorder off (the engine's path): fused = unfused in all 10 buffers"));
    }

    /// \[overlap\] An "on" arm whose launches overlap says that its kernel times include the
    /// waits and that only the graph span compares; a report without the field reads as not
    /// overlapped.
    #[test]
    fn an_overlapped_arm_says_its_chain_total_does_not_compare() {
        const NOTE: &str = "on: launches overlapped";
        let mut r = synthetic(true);
        assert!(!render_text(&r).contains(NOTE));
        r.modes[0].on_overlapped = true;
        let text = render_text(&r);
        assert_eq!(text.matches(NOTE).count(), 1, "{text}");
        assert!(text.contains("compare the graph span"), "{text}");
        let mut json = serde_json::to_value(&r.modes[0]).unwrap();
        json.as_object_mut().unwrap().remove("on_overlapped");
        assert!(!serde_json::from_value::<ModeReport>(json).unwrap().on_overlapped);
    }

    /// \[replay\] With a replay arm the per-layer table shows both arms, each against its own
    /// floor, and the state kept per sequence; the snapshot-only table is not printed.
    #[test]
    fn a_replay_report_has_both_arms_floors_and_memory() {
        let mut r = synthetic(true);
        for mode in &mut r.modes {
            // a = T/2: 2 MiB read + 2 MiB written when a > 0; 3 MiB kept per sequence.
            let a = mode.tokens / 2;
            let moved = if a > 0 { 4u64 << 20 } else { 2 << 20 };
            mode.replay = Some(ReplayArm { accepted: a, state_bytes: moved, memory_per_seq: 3 << 20, snapshot_memory_per_seq: 8 << 20 });
        }
        let text = render_text(&r);
        assert!(text.contains("replay (on) against snapshots (off)"), "{text}");
        assert!(!text.contains("best state-keeping peer"), "{text}");
        let row = text.lines().find(|l| l.trim_start().starts_with("1   4   2")).unwrap_or_else(|| panic!("{text}"));
        let cells: Vec<&str> = row.split_whitespace().collect();
        // n_s T a | snap µs, its floor (1 + 4 states of 2 MiB), MiB | replay µs, floor, × floor, MiB | ratio
        assert_eq!(cells[4], format!("{:.2}", (10u64 << 20) as f64 / COPY_BYTES_PER_S * 1e6), "{row}");
        assert_eq!((cells[5], cells[9]), ("8.00", "3.00"), "{row}");
        assert_eq!(cells[7], format!("{:.2}", (4u64 << 20) as f64 / COPY_BYTES_PER_S * 1e6), "{row}");
        let (snap, replay): (f64, f64) = (cells[3].parse().unwrap(), cells[6].parse().unwrap());
        assert_eq!(cells[10], format!("{:.2}", replay / snap), "{row}");
        // One table, a row per mode.
        assert_eq!(text.lines().filter(|l| l.contains("replay (on)")).count(), 1);
        assert!(text.lines().any(|l| l.trim_start().starts_with("1   1   0")), "{text}");
    }

    #[test]
    fn ratios_and_their_geometric_mean() {
        let r = synthetic(true);
        let m = &r.modes[1];
        let want = m.on.chain_total.unwrap().median / m.off.chain_total.unwrap().median;
        assert!((m.chain_ratio.unwrap() - want).abs() < 1e-12);
        assert!(r.geomean_chain_ratio.unwrap() < 1.0);
        assert_eq!(ratio(None, m.on.chain_total.as_ref()), None);
    }

    #[test]
    fn the_json_round_trips_every_statistic() {
        let r = synthetic(true);
        let json = serde_json::to_string_pretty(&r).unwrap();
        let back: Report = serde_json::from_str(&json).unwrap();
        assert_eq!(back.modes.len(), 4);
        assert_eq!(back.modes[2].kernels[0].off, r.modes[2].kernels[0].off);
        assert_eq!(back.geomean_graph_ratio, r.geomean_graph_ratio);
        assert!(json.contains("\"p10\"") && json.contains("\"p90\"") && json.contains("\"median\""));
    }

    #[test]
    fn anchors_exist_only_for_the_prs_shapes() {
        assert!(anchor(4, 3).is_some() && anchor(8, 7).is_some());
        assert!(anchor(4, 0).is_none() && anchor(1, 0).is_none() && anchor(16, 15).is_none());
    }
}
