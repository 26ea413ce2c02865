//! `rgdn bench` (and `cargo bench`): what a fusion buys per GDN layer, on the user's GPU.
//!
//! For each verify shape (decode T=1, MTP K=3 T=4/R=3, DFlash-7 T=8/R=7, T=16/R=15) it runs
//! one layer's chain "off" (unfused) and "on" (fused; the unfused chain again, loudly labelled,
//! until the fusion pass lands — see [`chain::default_builder`]) in ABBA order over several
//! rounds in one process:
//! - per-kernel GPU durations over many timed layers (CUPTI kernel records; CUDA events when
//!   CUPTI is not there, and the report says which): median, p10, p90, the chain total and
//!   the kernels per layer;
//! - a forward of `graph_layers` layer chains captured as a CUDA graph and replayed: the
//!   median span and the kernels per forward;
//! - on/off ratios per mode and their geometric mean.
//!
//! It prints a table in the reference PR's format (with the PR's published H200 figures as an
//! anchor column) and writes `report.json` (every statistic), `report.txt`, `bench.png` and
//! `bench.svg` under `--out`. Without a GPU: [`Error::NoGpu`], never a panic.

pub mod chain;
pub mod cupti;
pub mod machine;
pub mod measure;
pub mod nvtx;
pub mod plot;
pub mod report;
pub mod stats;

use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::layer::{GdnShape, LayerInit, Step};
use crate::memory::DeviceMemory;
use crate::tensor::DType;
use chain::{ChainBuilder, ChainConfig, ChainPair, op_keys};
use measure::Timer;
use report::{ArmStats, KernelRow, Meta, ModeReport, Report, ratio};
use stats::{Arm, Summary, abba, summarize};
use std::collections::HashMap;
use std::path::PathBuf;

const OP: &str = "bench";

/// The verify shapes the bench knows by name: (name, label, T, R).
pub const MODES: [(&str, &str, usize, usize); 4] =
    [("decode", "decode", 1, 0), ("mtp3", "MTP K=3 verify", 4, 3), ("dflash7", "DFlash-7 verify", 8, 7), ("t16", "T=16 verify", 16, 15)];

/// Options of `rgdn bench` / `cargo bench`.
#[derive(clap::Args, Clone, Debug, PartialEq)]
pub struct BenchArgs {
    /// Model preset: qwen3.5-4b, qwen3.5-9b or qwen3.5-27b (also 4b, 9b, 27b).
    #[arg(long, default_value = "9b")]
    pub preset: String,
    /// Override the hidden size E of the preset.
    #[arg(long)]
    pub n_embd: Option<usize>,
    /// Override the key heads H_k.
    #[arg(long)]
    pub k_heads: Option<usize>,
    /// Override the value heads H_v.
    #[arg(long)]
    pub v_heads: Option<usize>,
    /// Override the conv width d_conv.
    #[arg(long)]
    pub d_conv: Option<usize>,
    /// Verify shapes, comma-separated: decode, mtp3, dflash7, t16, or T:R (e.g. 6:5).
    #[arg(long, value_delimiter = ',', default_value = "decode,mtp3,dflash7,t16")]
    pub modes: Vec<String>,
    /// Type of the alpha/beta mat-vec weights: f32, f16 or bf16.
    #[arg(long, default_value = "f32")]
    pub weights: String,
    /// Fusions of the "on" arm: `default` (the registry's default set), `all` (every registered
    /// fusion, also any outside the default set, and the overlap pass), `none`, or registered
    /// names (and `overlap`, the overlap pass), comma-separated, each adding to the set (e.g.
    /// `conv_chain,pair`, `default,overlap`).
    #[arg(long, default_value = "default")]
    pub fusions: String,
    /// Sequences per verify step, comma-separated (1 to 64): every mode runs at each n_s
    /// (sequence s writes and reads cache cell s).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub seqs: Vec<usize>,
    /// ABBA rounds (each round: off, on, on, off).
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Timed layers per arm run (off or on); per kernel, 2 × rounds × layers samples per arm.
    #[arg(long, default_value_t = 24)]
    pub layers: usize,
    /// Layers in the captured forward graph (0: no graph).
    #[arg(long, default_value_t = 24)]
    pub graph_layers: usize,
    /// Graph replays per arm run.
    #[arg(long, default_value_t = 20)]
    pub replays: usize,
    /// Untimed warm-up layers (and graph replays) per arm before the timed runs.
    #[arg(long, default_value_t = 8)]
    pub warmup: usize,
    /// Cold cache: rotate through copies of the layer's buffers totalling over 3× the L2 size
    /// (≥ graph_layers copies), so every layer reads from DRAM. Default: warm (one copy).
    #[arg(long)]
    pub cold: bool,
    /// A ~10-second smoke run: 1 round, 8 layers per arm, 5 replays, 2 warm-up.
    #[arg(long)]
    pub quick: bool,
    /// Time with CUDA events even when CUPTI is available.
    #[arg(long)]
    pub events: bool,
    /// Where report.json, report.txt, bench.png and bench.svg go.
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
    /// Seed of the random caches, inputs and weights.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
    /// \[replay\] Exact replay against snapshots (`half`: every sequence accepted a = T/2 of its
    /// logged step, `all`: a = T): each mode's "off" arm is the snapshot layer with the
    /// `--fusions` set, its "on" arm the replay-mode layer (R = 0) with every fusion. The arms
    /// compute different steps: nothing is compared between them.
    #[arg(long)]
    pub replay: Option<String>,
    /// \[replay\] With `--replay`: `snapshots` (the default) as above, or `fusions`: both arms
    /// replay-mode layers, the "off" arm with the `--fusions` set less `replay_verify`, the "on"
    /// arm with every fusion — what `replay_verify` buys; or `overlap`: both arms replay-mode
    /// layers with the `--fusions` set, the "on" arm with the overlap pass too (programmatic
    /// dependent launch of the step's three launches) — what the overlap buys.
    #[arg(long, default_value = "snapshots")]
    pub replay_arms: String,
    /// \[seq-batch\] Runs nothing (no GPU needed): draws the figures (bench.png, and
    /// bench-batch.png where a verify shape ran at two batch sizes) of saved report.json files
    /// into `--out`, their modes merged in the order given. The reports must agree on the
    /// preset, the GPU and the graph's layer count.
    #[arg(long, value_delimiter = ',')]
    pub plot_from: Vec<PathBuf>,
    /// Also write a CSV naming every kernel launch in order (mode, arm, op, kernel, columns,
    /// dtype): `scripts/ncu-kernels.sh` matches it with ncu's kernel IDs.
    #[arg(long)]
    pub manifest: Option<PathBuf>,
}

impl Default for BenchArgs {
    fn default() -> Self {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct P {
            #[command(flatten)]
            a: BenchArgs,
        }
        P::parse_from(["bench"]).a
    }
}

/// The largest `--rounds`, `--layers`, `--graph-layers`, `--replays` and `--warmup` (far above
/// any useful run; the run's products of a few of them stay far inside 64 bits).
pub const MAX_COUNT: usize = 1 << 16;

/// The numbers a run uses after `--quick`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub rounds: usize,
    pub layers: usize,
    pub graph_layers: usize,
    pub replays: usize,
    pub warmup: usize,
}

impl BenchArgs {
    pub fn plan(&self) -> Plan {
        if self.quick {
            Plan { rounds: 1, layers: 8, graph_layers: self.graph_layers, replays: 5, warmup: 2 }
        } else {
            Plan { rounds: self.rounds, layers: self.layers, graph_layers: self.graph_layers, replays: self.replays, warmup: self.warmup }
        }
    }

    /// The preset with any overrides, validated.
    pub fn shape(&self) -> Result<(String, GdnShape)> {
        let names: Vec<_> = GdnShape::PRESETS.iter().map(|p| p.0).collect();
        let mut s = GdnShape::preset(&self.preset)
            .ok_or_else(|| Error::Invalid { op: OP, what: format!("unknown preset {} (have {names:?})", self.preset) })?;
        let mut name = GdnShape::PRESETS.iter().find(|p| p.1 == s).map(|p| p.0.to_string()).unwrap_or_default();
        let custom = self.n_embd.is_some() || self.k_heads.is_some() || self.v_heads.is_some() || self.d_conv.is_some();
        s.n_embd = self.n_embd.unwrap_or(s.n_embd);
        s.n_k_heads = self.k_heads.unwrap_or(s.n_k_heads);
        s.n_v_heads = self.v_heads.unwrap_or(s.n_v_heads);
        s.d_conv = self.d_conv.unwrap_or(s.d_conv);
        if custom {
            name = format!("{name}, custom");
        }
        s.validate()?;
        Ok((name, s))
    }

    pub fn weights(&self) -> Result<DType> {
        match self.weights.as_str() {
            "f32" => Ok(DType::F32),
            "f16" => Ok(DType::F16),
            "bf16" => Ok(DType::BF16),
            w => Err(Error::Invalid { op: OP, what: format!("--weights {w}: expected f32, f16 or bf16") }),
        }
    }

    /// The sequence counts asked for, each in 1 ..= 64.
    pub fn seq_list(&self) -> Result<Vec<usize>> {
        if self.seqs.is_empty() {
            return Err(Error::Invalid { op: OP, what: "no --seqs value".into() });
        }
        if let Some(bad) = self.seqs.iter().find(|&&n| n == 0 || n > crate::layer::MAX_SEQS) {
            return Err(Error::Invalid { op: OP, what: format!("--seqs {bad}: 1 to {} sequences", crate::layer::MAX_SEQS) });
        }
        Ok(self.seqs.clone())
    }

    /// The modes asked for: (name, label, T, R), each step validated.
    pub fn mode_list(&self) -> Result<Vec<(String, String, usize, usize)>> {
        let mut out = Vec::new();
        for m in &self.modes {
            let m = m.trim();
            let mode = if let Some(&(n, l, t, r)) = MODES.iter().find(|x| x.0 == m) {
                (n.to_string(), l.to_string(), t, r)
            } else if let Some((t, r)) = m.split_once(':') {
                let parse = |x: &str| x.trim().parse::<usize>().map_err(|e| Error::Invalid { op: OP, what: format!("mode {m}: {e}") });
                let (t, r) = (parse(t)?, parse(r)?);
                (format!("t{t}r{r}"), format!("T={t}, R={r}"), t, r)
            } else {
                let names: Vec<_> = MODES.iter().map(|x| x.0).collect();
                return Err(Error::Invalid { op: OP, what: format!("unknown mode {m} (have {names:?} or T:R)") });
            };
            Step::new(mode.2, mode.3).validate()?;
            out.push(mode);
        }
        if out.is_empty() {
            return Err(Error::Invalid { op: OP, what: "no mode to run".into() });
        }
        Ok(out)
    }
}

/// Per-arm accumulation of one mode's timed layers.
#[derive(Default)]
struct Acc {
    keys: Vec<(String, Option<&'static str>, &'static str)>,
    per_key: HashMap<String, Vec<f64>>,
    totals: Vec<f64>,
    round_totals: Vec<Vec<f64>>,
    spans: Vec<f64>,
    graph_kernels: Option<usize>,
}

type Keys = Vec<(String, Option<&'static str>, &'static str)>;

/// Row keys of one layer's launches: op keys when ops and launches correspond one to one,
/// else keys from the entry names.
fn layer_keys(t: &measure::LayerTimes, ops: &[Box<dyn crate::ops::Op>]) -> Keys {
    let keys = if ops.len() == t.entries.len() {
        op_keys(ops)
    } else {
        chain::keys_for_names(&t.entries).into_iter().map(|(k, _)| (k, None)).collect()
    };
    keys.into_iter().zip(&t.entries).map(|((k, role), e)| (k, role, *e)).collect()
}

impl Acc {
    fn add(&mut self, t: &measure::LayerTimes, ops: &[Box<dyn crate::ops::Op>], round: usize) {
        if self.keys.is_empty() {
            self.keys = layer_keys(t, ops);
        }
        while self.round_totals.len() <= round {
            self.round_totals.push(Vec::new());
        }
        for layer in &t.layers {
            for ((key, _, _), us) in self.keys.iter().zip(layer) {
                self.per_key.entry(key.clone()).or_default().push(*us);
            }
            let total: f64 = layer.iter().sum();
            self.totals.push(total);
            self.round_totals[round].push(total);
        }
    }

    fn stats(&self) -> ArmStats {
        ArmStats {
            chain_total: summarize(&self.totals),
            kernels_per_layer: self.keys.len(),
            graph_span: summarize(&self.spans),
            graph_kernels_per_forward: self.graph_kernels,
        }
    }
}

/// Every kernel launch of a run in order, for matching with a profiler's kernel list.
#[derive(Default)]
pub struct Manifest {
    rows: Vec<String>,
}

impl Manifest {
    pub const HEADER: &'static str = "index,mode,n_t,rollback,arm,op,key,role,entry,columns,dtype";

    /// Appends `layers` layers of `keys` (mode name, step, arm label, weight type).
    #[allow(clippy::too_many_arguments)]
    fn push(&mut self, mode: &str, n_t: usize, r: usize, arm: &str, keys: &Keys, layers: usize, weights: DType) {
        for _ in 0..layers {
            for (key, role, entry) in keys {
                let op = key.split('#').next().unwrap_or(key);
                let dtype = if op.starts_with("MUL_MAT_VEC") { format!("{weights:?}").to_ascii_lowercase() } else { "f32".into() };
                let index = self.rows.len();
                self.rows.push(format!(
                    "{index},{mode},{n_t},{r},{arm},{op},{key},{},{entry},{},{dtype}",
                    role.unwrap_or(""),
                    entry_columns(entry).unwrap_or(n_t)
                ));
            }
        }
    }

    pub fn to_csv(&self) -> String {
        let mut s = String::from(Self::HEADER);
        s.push('\n');
        for r in &self.rows {
            s.push_str(r);
            s.push('\n');
        }
        s
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Drops the launches after the first `n` (a mode measured again).
    pub fn truncate(&mut self, n: usize) {
        self.rows.truncate(n);
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

/// Column count a mat-vec entry is built for (`mul_mat_vec_f32_c4` → 4).
pub fn entry_columns(entry: &str) -> Option<usize> {
    entry.rsplit_once("_c").and_then(|(_, n)| n.parse().ok())
}

/// Builds the table rows: the off chain's kernels in launch order, then kernels only "on" has.
fn rows(off: &Acc, on: &Acc) -> Vec<KernelRow> {
    let mut rows: Vec<KernelRow> = Vec::new();
    for (acc, is_on) in [(off, false), (on, true)] {
        for (key, role, entry) in &acc.keys {
            let s = summarize(acc.per_key.get(key).map(Vec::as_slice).unwrap_or(&[]));
            match rows.iter_mut().find(|r| &r.key == key) {
                Some(r) if is_on => r.on = s,
                Some(_) => {}
                None => rows.push(KernelRow {
                    key: key.clone(),
                    role: role.map(String::from),
                    entry: entry.to_string(),
                    off: if is_on { None } else { s },
                    on: if is_on { s } else { None },
                }),
            }
        }
    }
    rows
}

/// A progress bar (drawn on stderr only when it is a terminal).
fn progress(total: u64, hidden: bool) -> indicatif::ProgressBar {
    if hidden {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(total);
    if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} {msg}") {
        bar.set_style(style);
    }
    bar
}

/// Runs the benchmark with the default chain builder.
pub fn run(args: &BenchArgs, out: &mut dyn std::io::Write) -> Result<Report> {
    if !args.plot_from.is_empty() {
        let report = merged_reports(&args.plot_from)?;
        let io = |what: &str, e: &dyn std::fmt::Display| Error::Invalid { op: OP, what: format!("{what}: {e}") };
        std::fs::create_dir_all(&args.out).map_err(|e| io(&format!("creating {}", args.out.display()), &e))?;
        plot::write_png(&args.out.join("bench.png"), &report).map_err(|e| io("drawing bench.png", &e))?;
        writeln!(out, "wrote {}/bench.png", args.out.display())?;
        write_batch_figure(&args.out, &report, out)?;
        return Ok(report);
    }
    let fusions = crate::fusion::Options::parse(&args.fusions)?;
    match &args.replay {
        Some(accept) => {
            let accept = chain::ReplayAccept::parse(accept)?;
            match args.replay_arms.trim() {
                "snapshots" => run_with(args, &chain::ReplayVsSnapshot { snapshots: fusions, accept }, out),
                "fusions" => run_with(args, &chain::ReplayFusions { fusions, accept }, out),
                "overlap" => run_with(args, &chain::ReplayOverlap { fusions, accept }, out),
                other => Err(Error::Invalid { op: OP, what: format!("--replay-arms `{other}` (snapshots, fusions or overlap)") }),
            }
        }
        None => run_with(args, &chain::Fused(fusions), out),
    }
}

/// Runs the benchmark with `builder`; writes the report files under `args.out` and prints the
/// table. `Err(Error::NoGpu)` without a GPU.
pub fn run_with(args: &BenchArgs, builder: &dyn ChainBuilder, out: &mut dyn std::io::Write) -> Result<Report> {
    let (preset, shape) = args.shape()?;
    let weights = args.weights()?;
    let modes = args.mode_list()?;
    let seqs = args.seq_list()?;
    // Every mode at every n_s (n_s = 1 keeps the mode's own name).
    let modes: Vec<(String, String, usize, usize, usize)> = seqs
        .iter()
        .flat_map(|&n_s| {
            modes.iter().map(move |(name, label, t, r)| {
                if n_s == 1 {
                    (name.clone(), label.clone(), *t, *r, 1)
                } else {
                    (format!("{name}-s{n_s}"), format!("{label}, n_s = {n_s}"), *t, *r, n_s)
                }
            })
        })
        .collect();
    let plan = args.plan();
    if plan.rounds == 0 || plan.layers == 0 {
        return Err(Error::Invalid { op: OP, what: "rounds and layers must be at least 1".into() });
    }
    // [validation] Before the GPU is probed: the run multiplies these counts (4·rounds arms,
    // replays·graph_layers launches per arm, …) and allocates by them, so a count near 2^64
    // would panic on overflow or abort on allocation once a GPU is there.
    for (flag, n) in [
        ("--rounds", plan.rounds),
        ("--layers", plan.layers),
        ("--graph-layers", plan.graph_layers),
        ("--replays", plan.replays),
        ("--warmup", plan.warmup),
    ] {
        if n > MAX_COUNT {
            return Err(Error::Invalid { op: OP, what: format!("{flag} {n}: at most {MAX_COUNT}") });
        }
    }
    // [validation] every mode at every n_s is a valid step (n_t·n_s token columns at most
    // MAX_GRAPH_TOKENS: `--seqs 256` with t16 is not) before the GPU is probed.
    for (_, _, t, r, n_s) in &modes {
        seqs_step(*t, *r, *n_s)?;
    }
    let gpu = Gpu::new()?;
    // The bench counts and times every launch: the recorder is on for its whole run.
    gpu.set_recording(true);
    let mut timer = if args.events {
        Timer::Events { why: "--events asked for events".into() }
    } else if std::env::var_os("CUDA_INJECTION64_PATH").is_some() {
        // nsys and ncu inject themselves this way and own CUPTI's activity buffers.
        Timer::Events { why: "a profiler is attached (CUDA_INJECTION64_PATH is set): CUPTI is left to it".into() }
    } else {
        match cupti::Cupti::start() {
            Ok(c) => Timer::Cupti(c),
            Err(why) => Timer::Events { why },
        }
    };
    let clocks = machine::ClockSampler::start();
    let l2 = gpu.context().attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE).ok().map(|b| b as u64);
    let init = LayerInit { mat_vec_weights: weights, ..LayerInit::default() };
    let graph_arms = if plan.graph_layers > 0 { 4 * plan.rounds } else { 0 };
    let bar = progress((modes.len() * (4 * plan.rounds + graph_arms)) as u64, args.no_progress);
    let mut reports = Vec::new();
    let mut sets_used = 1;
    let mut manifest = Manifest::default();
    let (mut off_label, mut on_label) = (String::new(), String::new());
    for (name, label, t, r, n_s) in &modes {
        bar.set_message(format!("{name} (T={t}, R={r}, n_s={n_s})"));
        let cfg = ChainConfig { shape, step: seqs_step(*t, *r, *n_s)?, init };
        let built = ChainPair::new(builder, &cfg, args.seed)?;
        off_label.clone_from(&built.off_label);
        on_label.clone_from(&built.on_label);
        let mode =
            ModeSpec { name, label, t: *t, r: *r, seqs: *n_s, weights, cold: args.cold, l2, replay_accepted: builder.replay_accepted(*t) };
        let rows_before = manifest.len();
        let measured = match measure_mode(&gpu, &timer, &built, &mode, &plan, &mut manifest, &bar) {
            // CUPTI loaded but its records do not add up: time everything with events instead
            // (only before any mode was reported, so that one run never mixes the two).
            Err(Error::Invalid { op: OP, what }) if reports.is_empty() && what.starts_with("CUPTI") && matches!(timer, Timer::Cupti(_)) => {
                timer = Timer::Events { why: format!("CUPTI was loaded but {what}") };
                manifest.truncate(rows_before);
                bar.set_position(0);
                measure_mode(&gpu, &timer, &built, &mode, &plan, &mut manifest, &bar)
            }
            other => other,
        };
        let (report, n_sets) = measured?;
        sets_used = sets_used.max(n_sets);
        // Each mode's line as soon as it is measured, so that a run cut by its time limit keeps
        // what it measured (the whole report comes at the end).
        bar.suspend(|| writeln!(out, "{}", report::mode_done_line(&report, plan.graph_layers)).and_then(|()| out.flush()))?;
        reports.push(report);
    }
    bar.finish_and_clear();
    let samples = clocks.finish();
    let smi = machine::nvidia_smi("name,driver_version");
    let (sm_clock_mhz, sm_clock_source) = match summarize(&samples) {
        Some(s) => (Some(s.median), format!("nvidia-smi clocks.sm, median of {} samples taken during the run", s.n)),
        None => {
            let khz = gpu.context().attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE).ok();
            (khz.map(|k| k as f64 / 1e3), "cuDeviceGetAttribute(CLOCK_RATE): the rated maximum, not the clock seen (no nvidia-smi)".into())
        }
    };
    let info = gpu.info();
    let v = info.driver_api_version;
    let (plan_layers, plan_rounds) = (plan.layers, plan.rounds);
    let meta = Meta {
        date_utc: machine::utc_now(),
        commit: machine::commit(),
        gpu: info.name.clone(),
        driver: smi.as_ref().and_then(|v| v.get(1).cloned()).unwrap_or_else(|| "unknown (no nvidia-smi)".into()),
        cuda_driver_api: format!("CUDA driver API {}.{}", v / 1000, (v % 1000) / 10),
        sm_clock_mhz,
        sm_clock_source,
        l2_bytes: l2,
        timing: timer.name().into(),
        timing_note: timer.note(),
        nvtx: nvtx::library()
            .map(|p| format!("ranges via {}", p.display()))
            .unwrap_or_else(|| "absent (no NVTX_INJECTION64_PATH tool, no libnvToolsExt)".into()),
        preset,
        shape: format!(
            "E {}, H_k {}, H_v {}, D {}, d_conv {}",
            shape.n_embd, shape.n_k_heads, shape.n_v_heads, shape.head_dim, shape.d_conv
        ),
        weights: format!("{weights:?}"),
        cache: if args.cold { "cold".into() } else { "warm".into() },
        buffer_sets: sets_used,
        rounds: plan_rounds,
        layers_per_arm: plan_layers,
        graph_layers: plan.graph_layers,
        graph_replays_per_arm: plan.replays,
        fusion_available: builder.fusion_available(),
        off_label,
        on_label,
    };
    let report = Report::new(meta, reports);
    let text = report::render_text(&report);
    writeln!(out, "{text}")?;
    write_outputs(&args.out, &report, &text, out)?;
    if let Some(path) = &args.manifest {
        std::fs::write(path, manifest.to_csv())
            .map_err(|e| Error::Invalid { op: OP, what: format!("writing the manifest {}: {e}", path.display()) })?;
        writeln!(out, "wrote {} ({} launches)", path.display(), manifest.len())?;
    }
    Ok(report)
}

/// The bench's step of `n_s` sequences of T tokens, R snapshots: M = n_s cells, sequence s
/// writes cell s and reads its own live row (a decode server's steady state).
pub fn seqs_step(t: usize, r: usize, n_s: usize) -> Result<Step> {
    let sources: Vec<(usize, usize)> = (1..n_s).map(|s| (s, 0)).collect();
    let step = Step { cells: n_s.max(1), ..Step::new(t, r) }.with_sequences(&sources)?;
    step.validate()?;
    Ok(step)
}

/// One mode's shape and options, for [`measure_mode`].
struct ModeSpec<'a> {
    name: &'a str,
    label: &'a str,
    t: usize,
    r: usize,
    seqs: usize,
    weights: DType,
    cold: bool,
    l2: Option<u64>,
    /// \[replay\] The "on" arm's accepted count when it is a replay-mode layer.
    replay_accepted: Option<usize>,
}

/// Times one mode: warm-up, ABBA layer runs, graph capture and ABBA replays. Returns the
/// mode's report and the number of buffer sets it used.
fn measure_mode(
    gpu: &Gpu,
    timer: &Timer,
    built: &ChainPair,
    mode: &ModeSpec,
    plan: &Plan,
    manifest: &mut Manifest,
    bar: &indicatif::ProgressBar,
) -> Result<(ModeReport, usize)> {
    let ModeSpec { name, label, t, r, weights, .. } = *mode;
    let (t, r) = (&t, &r);
    let n_sets = if mode.cold {
        let l2 = mode.l2.unwrap_or(60 << 20) as usize;
        plan.graph_layers.max(1).max((3 * l2).div_ceil(built.footprint_bytes().max(1)))
    } else {
        1
    };
    let sets: Vec<DeviceMemory> = (0..n_sets).map(|_| DeviceMemory::upload(gpu, &built.mem)).collect::<Result<_>>()?;
    let mut acc: [Acc; 2] = Default::default();
    let mut cursor = 0;
    // Warm-up: module functions loaded, clocks up, caches as they will be.
    let warm = plan.warmup.max(1);
    let mut keys: [Keys; 2] = Default::default();
    for arm in [Arm::Off, Arm::On] {
        let ops = built.ops(arm.fused());
        let times = measure::time_layers(gpu, timer, &sets, cursor, ops, warm, &format!("warm-up {}", arm.label()))?;
        cursor += warm;
        keys[arm.fused() as usize] = layer_keys(&times, ops);
        manifest.push(name, *t, *r, &format!("warmup-{}", arm.label()), &keys[arm.fused() as usize], warm, weights);
    }
    for (i, arm) in abba(plan.rounds).into_iter().enumerate() {
        let ops = built.ops(arm.fused());
        let times = measure::time_layers(gpu, timer, &sets, cursor, ops, plan.layers, &format!("{name} {}", arm.label()))?;
        cursor += plan.layers;
        acc[arm.fused() as usize].add(&times, ops, i / 4);
        manifest.push(name, *t, *r, arm.label(), &keys[arm.fused() as usize], plan.layers, weights);
        bar.inc(1);
    }
    if plan.graph_layers > 0 {
        let fwd = [
            measure::capture(gpu, &sets, built.ops(false), plan.graph_layers)?,
            measure::capture(gpu, &sets, built.ops(true), plan.graph_layers)?,
        ];
        for arm in [Arm::Off, Arm::On] {
            let k = &keys[arm.fused() as usize];
            measure::replay(gpu, timer, &fwd[arm.fused() as usize], warm, "warm-up")?;
            manifest.push(name, *t, *r, &format!("graph-warmup-{}", arm.label()), k, warm * plan.graph_layers, weights);
        }
        for arm in abba(plan.rounds) {
            let label = format!("{name} {}", arm.label());
            let spans = measure::replay(gpu, timer, &fwd[arm.fused() as usize], plan.replays, &label)?;
            let a = &mut acc[arm.fused() as usize];
            a.spans.extend(spans);
            a.graph_kernels = Some(fwd[arm.fused() as usize].kernels);
            let k = &keys[arm.fused() as usize];
            manifest.push(name, *t, *r, &format!("graph-{}", arm.label()), k, plan.replays * plan.graph_layers, weights);
            bar.inc(1);
        }
    }
    let host = host_report(gpu, built)?;
    let [off, on] = acc;
    let (ssm_row, conv_row) = (built.tensors.ssm_cache.ne()[0] * 4, built.tensors.conv_cache.ne()[0] * 4);
    let round_ratios =
        off.round_totals.iter().zip(&on.round_totals).filter_map(|(a, b)| ratio(summarize(a).as_ref(), summarize(b).as_ref())).collect();
    let (off_s, on_s) = (off.stats(), on.stats());
    let report = ModeReport {
        mode: name.to_string(),
        label: label.to_string(),
        tokens: *t,
        rollback: *r,
        seqs: mode.seqs,
        // [seq-batch] The state floor: one ssm state read and min(T, 1 + R) written per sequence.
        state_bytes: Some((ssm_row * mode.seqs * (1 + (*t).min(*r + 1))) as u64),
        replay: mode.replay_accepted.map(|a| report::ReplayArm {
            accepted: a,
            state_bytes: (ssm_row * mode.seqs * (1 + usize::from(a > 0))) as u64,
            memory_per_seq: (ssm_row + conv_row + 2 * *t * replay_log_token_bytes(built)) as u64,
            snapshot_memory_per_seq: ((1 + *r) * (ssm_row + conv_row)) as u64,
        }),
        kernels: rows(&off, &on),
        on_overlapped: overlapped(built.ops(true)),
        chain_ratio: ratio(off_s.chain_total.as_ref(), on_s.chain_total.as_ref()),
        graph_ratio: ratio(off_s.graph_span.as_ref(), on_s.graph_span.as_ref()),
        off: off_s,
        on: on_s,
        round_ratios,
        host: Some(host),
    };
    Ok((report, n_sets))
}

/// \[overlap\] Whether any launch of `ops` overlaps another (the overlap pass gave it a form).
fn overlapped(ops: &[Box<dyn crate::ops::Op>]) -> bool {
    ops.iter().any(|op| {
        op.as_any().downcast_ref::<crate::ops::overlap::Overlapped>().is_some_and(|o| o.overlap != crate::ops::overlap::Overlap::NONE)
    })
}

/// \[replay\] Bytes one token of one sequence adds to a replay log set: its conv inputs (C floats),
/// k (D·H_k), v (D·H_v), g and β (H_v each) — `docs/rollback.md`'s "what a sequence keeps".
fn replay_log_token_bytes(built: &ChainPair) -> usize {
    let t = &built.tensors;
    let (c, [d, h_k, ..], [_, h_v, ..]) = (t.conv_out.ne()[0], t.k_norm.ne(), t.attn_out.ne());
    4 * (c + d * h_k + d * h_v + 2 * h_v)
}

/// Steps timed per arm for the host-cost rows.
const HOST_STEPS: usize = 256;

/// The path an engine runs, recorder and timing off: host µs per step through a plan and
/// without one, per arm; and one planned step per arm from identical memory, every buffer the
/// step hands on compared bit for bit (an error if any differs).
fn host_report(gpu: &Gpu, built: &ChainPair) -> Result<report::HostReport> {
    let index = built.tensors.source_rows;
    let off = measure::host_steps(gpu, &built.mem, built.ops(false), &index, HOST_STEPS)?;
    let on = measure::host_steps(gpu, &built.mem, built.ops(true), &index, HOST_STEPS)?;
    let t = &built.tensors;
    let observed = [t.conv_cache, t.ssm_cache, t.conv_out, t.q_norm, t.k_norm, t.alpha, t.beta_raw, t.beta, t.gate, t.attn_out];
    // [replay] Arms of two different steps (replay against snapshots) are not compared.
    let observed: &[crate::tensor::Tensor] = if built.equivalent { &observed } else { &[] };
    if let Some(x) = observed.iter().find(|x| off.after_step.bytes(x.buffer) != on.after_step.bytes(x.buffer)) {
        return Err(Error::Invalid {
            op: OP,
            what: format!("recorder off: buffer {} differs between the fused and the unfused step", x.buffer.0),
        });
    }
    let parts = |steps: &measure::HostSteps| -> Option<[Summary; 3]> {
        let part = |i: usize| summarize(&steps.planned_parts_us.iter().map(|p| p[i]).collect::<Vec<_>>());
        Some([part(0)?, part(1)?, part(2)?])
    };
    Ok(report::HostReport {
        off_planned_parts: parts(&off),
        on_planned_parts: parts(&on),
        off_captured_per_layer: summarize(&off.captured_us_per_layer),
        on_captured_per_layer: summarize(&on.captured_us_per_layer),
        captured_layers: measure::CAPTURED_LAYERS,
        off_planned: summarize(&off.planned_us),
        on_planned: summarize(&on.planned_us),
        off_unplanned: summarize(&off.unplanned_us),
        on_unplanned: summarize(&on.unplanned_us),
        identical_buffers: observed.len(),
    })
}

/// Writes report.json, report.txt, bench.png and bench.svg under `dir`.
pub fn write_outputs(dir: &std::path::Path, report: &Report, text: &str, out: &mut dyn std::io::Write) -> Result<()> {
    let io = |what: &str, e: &dyn std::fmt::Display| Error::Invalid { op: OP, what: format!("{what}: {e}") };
    std::fs::create_dir_all(dir).map_err(|e| io(&format!("creating {}", dir.display()), &e))?;
    let json = serde_json::to_string_pretty(report).map_err(|e| io("serialising the report", &e))?;
    std::fs::write(dir.join("report.json"), json).map_err(|e| io("writing report.json", &e))?;
    std::fs::write(dir.join("report.txt"), text).map_err(|e| io("writing report.txt", &e))?;
    plot::write_png(&dir.join("bench.png"), report).map_err(|e| io("drawing bench.png", &e))?;
    plot::write_svg(&dir.join("bench.svg"), report).map_err(|e| io("drawing bench.svg", &e))?;
    writeln!(out, "wrote {0}/report.json, {0}/report.txt, {0}/bench.png, {0}/bench.svg", dir.display())?;
    write_batch_figure(dir, report, out)
}

/// \[seq-batch\] The reports at `paths` as one (`rgdn bench --plot-from`): the first one's run
/// description with every distinct commit named, and every report's modes in order. A file that
/// cannot be read or parsed, one whose figures cannot be drawn ([`plot::check_drawable`]), or
/// reports of different presets, GPUs or graph layer counts (whose numbers a figure must not put
/// side by side) are typed errors.
pub fn merged_reports(paths: &[std::path::PathBuf]) -> Result<Report> {
    let mut merged: Option<Report> = None;
    let mut commits: Vec<String> = Vec::new();
    for path in paths {
        let bad = |what: String| Error::Invalid { op: OP, what: format!("--plot-from {}: {what}", path.display()) };
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let r: Report = serde_json::from_str(&text).map_err(|e| bad(format!("not a bench report ({e})")))?;
        // [validation] Before anything is drawn or written (a file can say anything).
        plot::check_drawable(&r).map_err(|e| bad(format!("not drawable: {e}")))?;
        let commit = r.meta.commit.split_whitespace().next().unwrap_or("?").to_string();
        if !commits.contains(&commit) {
            commits.push(commit);
        }
        match &mut merged {
            None => merged = Some(r),
            Some(m) => {
                let (a, b) = (&m.meta, &r.meta);
                if a.preset != b.preset || a.gpu != b.gpu || a.graph_layers != b.graph_layers {
                    return Err(bad(format!(
                        "its run ({}, {}, {} graph layers) differs from the first report's ({}, {}, {})",
                        b.preset, b.gpu, b.graph_layers, a.preset, a.gpu, a.graph_layers
                    )));
                }
                m.modes.extend(r.modes);
            }
        }
    }
    let mut report = merged.ok_or_else(|| Error::Invalid { op: OP, what: "--plot-from names no report".into() })?;
    report.meta.commit = commits.join(" + ");
    Ok(report)
}

/// \[seq-batch\] bench-batch.png and bench-batch.svg under `dir` when the report has a verify
/// shape at two batch sizes or more ([`plot::draw_batch`]); nothing otherwise.
fn write_batch_figure(dir: &std::path::Path, report: &Report, out: &mut dyn std::io::Write) -> Result<()> {
    if plot::batch_panels(report).is_empty() {
        return Ok(());
    }
    let io = |what: &str, e: &dyn std::fmt::Display| Error::Invalid { op: OP, what: format!("{what}: {e}") };
    plot::write_batch_png(&dir.join("bench-batch.png"), report).map_err(|e| io("drawing bench-batch.png", &e))?;
    plot::write_batch_svg(&dir.join("bench-batch.svg"), report).map_err(|e| io("drawing bench-batch.svg", &e))?;
    writeln!(out, "wrote {0}/bench-batch.png, {0}/bench-batch.svg", dir.display())?;
    Ok(())
}

/// For a command line: runs, writing to `out`, and maps the outcome to an exit code (no GPU: a
/// message and 2; another error: the message and 1). Never panics on a machine without a GPU.
/// A failed write to `out` (a closed pipe) comes back as the error, for the caller to end quietly.
pub fn run_cli(args: &BenchArgs, out: &mut dyn std::io::Write) -> std::io::Result<std::process::ExitCode> {
    exit_code("rgdn bench", run(args, out).map(drop), NoGpu::Exit2)
}

/// For `cargo bench` (`benches/gdn.rs`): [`run_cli`], except that a machine without a GPU is a
/// loud skip with exit 0, as for the GPU tests (`RGDN_REQUIRE_GPU=1` makes it exit 2).
pub fn run_bench_target(args: &BenchArgs, out: &mut dyn std::io::Write) -> std::io::Result<std::process::ExitCode> {
    let require_gpu = std::env::var("RGDN_REQUIRE_GPU").is_ok_and(|v| v == "1");
    exit_code("cargo bench", run(args, out).map(drop), if require_gpu { NoGpu::Exit2 } else { NoGpu::Skip })
}

/// What a missing GPU means for the exit code.
enum NoGpu {
    Exit2,
    Skip,
}

/// The exit code of a run named `who` (the prefix of its messages on stderr).
fn exit_code(who: &str, result: Result<()>, no_gpu: NoGpu) -> std::io::Result<std::process::ExitCode> {
    use std::process::ExitCode;
    match result {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(Error::Io(e)) => Err(e),
        Err(Error::NoGpu { reason }) => match no_gpu {
            NoGpu::Exit2 => {
                eprintln!("{who}: no GPU ({reason}): nothing was measured");
                Ok(ExitCode::from(2))
            }
            NoGpu::Skip => {
                let banner = "=".repeat(78);
                eprintln!("{banner}\nSKIPPED {who}: no GPU ({reason}): nothing was measured.\n{banner}");
                Ok(ExitCode::SUCCESS)
            }
        },
        // The bench's own refusals carry its name already: "rgdn bench: unknown preset 3b".
        Err(Error::Invalid { op: OP, what }) => {
            eprintln!("{who}: {what}");
            Ok(ExitCode::FAILURE)
        }
        Err(e) => {
            eprintln!("{who}: {e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn parse(args: &[&str]) -> BenchArgs {
        Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).unwrap().bench
    }

    #[test]
    fn plot_from_merges_saved_reports_and_refuses_what_it_cannot_put_side_by_side() {
        let dir = std::env::temp_dir().join(format!("rgdn-plot-from-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, r: &Report| {
            let path = dir.join(name);
            std::fs::write(&path, serde_json::to_string(r).unwrap()).unwrap();
            path
        };
        let mut a = report::tests::synthetic(true);
        a.meta.commit = "aaaaaaa (embedded at build time)".into();
        let mut b = report::tests::synthetic(true);
        b.meta.commit = "bbbbbbb (embedded at build time)".into();
        for m in &mut b.modes {
            m.seqs = 4;
        }
        let (pa, pb) = (write("a.json", &a), write("b.json", &b));
        let merged = merged_reports(&[pa.clone(), pb.clone(), pa.clone()]).unwrap();
        assert_eq!(merged.meta.commit, "aaaaaaa + bbbbbbb");
        assert_eq!(merged.modes.len(), 3 * a.modes.len());
        // Drawn: both figures, from the command line, with no GPU.
        let out_dir = dir.join("figures");
        let args = parse(&["--plot-from", &format!("{},{}", pa.display(), pb.display()), "--out", out_dir.to_str().unwrap()]);
        let mut text = Vec::new();
        run(&args, &mut text).unwrap();
        assert!(out_dir.join("bench.png").is_file() && out_dir.join("bench-batch.png").is_file());
        // Typed refusals, each naming the file.
        let mut other_gpu = b.clone();
        other_gpu.meta.gpu = "another GPU".into();
        let po = write("o.json", &other_gpu);
        let missing = dir.join("missing.json");
        let junk = dir.join("junk.json");
        std::fs::write(&junk, "{}").unwrap();
        for (paths, says) in [(vec![pa.clone(), po.clone()], "o.json"), (vec![missing], "missing.json"), (vec![junk], "not a bench report")]
        {
            match merged_reports(&paths) {
                Err(Error::Invalid { what, .. }) => assert!(what.contains(says), "{what}"),
                other => panic!("{paths:?}: {other:?}"),
            }
        }
        assert!(matches!(merged_reports(&[]), Err(Error::Invalid { .. })));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn defaults_are_the_9b_preset_and_the_four_modes() {
        let a = BenchArgs::default();
        assert_eq!(a.shape().unwrap().1, GdnShape::QWEN35_9B);
        let modes: Vec<_> = a.mode_list().unwrap().into_iter().map(|m| (m.2, m.3)).collect();
        assert_eq!(modes, [(1, 0), (4, 3), (8, 7), (16, 15)]);
        let p = a.plan();
        // At least 200 timed layers per arm and kernel: 2 arm runs per round.
        assert!(2 * p.rounds * p.layers >= 200, "{p:?}");
        assert_eq!(a.weights().unwrap(), DType::F32);
    }

    /// \[replay\] `--replay half|all` picks the replay-against-snapshots arms; anything else is
    /// refused by name before a GPU is looked for.
    #[test]
    fn replay_takes_half_or_all() {
        assert_eq!(parse(&[]).replay, None);
        assert_eq!(parse(&["--replay", "half"]).replay.as_deref(), Some("half"));
        let e = run(&parse(&["--replay", "most"]), &mut Vec::new()).unwrap_err().to_string();
        assert!(e.contains("--replay most"), "{e}");
        // The arms: snapshots by default, or the replay layer without and with every fusion.
        assert_eq!(parse(&[]).replay_arms, "snapshots");
        assert_eq!(parse(&["--replay", "half", "--replay-arms", "fusions"]).replay_arms, "fusions");
        let e = run(&parse(&["--replay", "half", "--replay-arms", "both"]), &mut Vec::new()).unwrap_err().to_string();
        assert!(e.contains("--replay-arms `both`"), "{e}");
    }

    #[test]
    fn flags_pick_presets_shapes_and_modes() {
        let a = parse(&["--preset", "27b", "--modes", "mtp3,6:5", "--weights", "bf16", "--quick", "--cold"]);
        assert_eq!(a.shape().unwrap().1, GdnShape::QWEN35_27B);
        let modes = a.mode_list().unwrap();
        assert_eq!((modes[1].2, modes[1].3), (6, 5));
        assert_eq!(a.weights().unwrap(), DType::BF16);
        assert_eq!(a.plan().rounds, 1);
        let custom = parse(&["--preset", "4b", "--v-heads", "8", "--n-embd", "512"]);
        let (name, s) = custom.shape().unwrap();
        assert_eq!((s.n_v_heads, s.n_embd, s.n_k_heads), (8, 512, 16));
        assert!(name.contains("custom"));
    }

    /// `--seqs 1,4,16,64`: every mode at each n_s, each step llama.cpp's equal split over
    /// cells 0 … n_s − 1; out-of-range counts are typed errors.
    #[test]
    fn seqs_run_every_mode_at_each_sequence_count() {
        assert_eq!(BenchArgs::default().seq_list().unwrap(), [1]);
        assert_eq!(parse(&["--seqs", "1,4,16,64"]).seq_list().unwrap(), [1, 4, 16, 64]);
        assert!(matches!(parse(&["--seqs", "0"]).seq_list(), Err(Error::Invalid { .. })));
        assert!(matches!(parse(&["--seqs", "4,257"]).seq_list(), Err(Error::Invalid { .. })));
        for (t, r, n_s) in [(1, 0, 1), (4, 3, 4), (8, 7, 16), (16, 15, 64)] {
            let step = seqs_step(t, r, n_s).unwrap();
            assert_eq!((step.n_seqs(), step.cells, step.kv_head), (n_s, n_s, 0));
            assert_eq!(step.source_rows(), (0..n_s).collect::<Vec<_>>());
        }
    }

    #[test]
    fn bad_options_are_typed_errors() {
        assert!(matches!(parse(&["--preset", "7b"]).shape(), Err(Error::Invalid { .. })));
        assert!(matches!(parse(&["--d-conv", "6"]).shape(), Err(Error::Unsupported { .. })));
        assert!(matches!(parse(&["--modes", "17:0"]).mode_list(), Err(Error::Unsupported { .. })));
        assert!(matches!(parse(&["--modes", "fast"]).mode_list(), Err(Error::Invalid { .. })));
        assert!(matches!(parse(&["--weights", "q4"]).weights(), Err(Error::Invalid { .. })));
    }

    #[test]
    fn without_a_gpu_the_bench_says_so() {
        if crate::gpu::probe().is_ok() {
            crate::report_skipped(
                "bench::without_a_gpu_the_bench_says_so",
                "a GPU is present, so there is no NoGpu error to see; `rgdn bench --quick` runs the GPU path",
            );
            return;
        }
        let a = parse(&["--quick", "--modes", "decode", "--out", std::env::temp_dir().join("rgdn-nogpu").to_str().unwrap()]);
        assert!(matches!(run(&a, &mut std::io::sink()), Err(Error::NoGpu { .. })));
        assert_eq!(run_cli(&a, &mut std::io::sink()).unwrap(), std::process::ExitCode::from(2));
        // `cargo bench` skips loudly instead, as the GPU tests do (unless RGDN_REQUIRE_GPU=1).
        assert_eq!(
            exit_code("cargo bench", run(&a, &mut std::io::sink()).map(drop), NoGpu::Skip).unwrap(),
            std::process::ExitCode::SUCCESS
        );
    }

    #[test]
    fn the_manifest_names_every_launch() {
        let mut m = Manifest::default();
        let keys: Keys =
            vec![("GET_ROWS#0".into(), Some("conv state"), "get_rows_f32"), ("MUL_MAT_VEC#0".into(), Some("alpha"), "mul_mat_vec_f32_c4")];
        m.push("mtp3", 4, 3, "off", &keys, 2, DType::BF16);
        let csv = m.to_csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines[0], Manifest::HEADER);
        assert_eq!(lines[1], "0,mtp3,4,3,off,GET_ROWS,GET_ROWS#0,conv state,get_rows_f32,4,f32");
        assert_eq!(lines[4], "3,mtp3,4,3,off,MUL_MAT_VEC,MUL_MAT_VEC#0,alpha,mul_mat_vec_f32_c4,4,bf16");
        assert_eq!(m.len(), 4);
        assert_eq!(entry_columns("mul_mat_vec_bf16_c8"), Some(8));
        assert_eq!(entry_columns("get_rows_f32"), None);
    }

    /// `scripts/ncu_summary.py` reads the manifest this module writes, next to a CSV shaped like
    /// ncu's (`--csv --print-units base`), and writes the CSV (SKIPPED loudly without
    /// python3; a failure then with `RGDN_REQUIRE_PYTHON=1`).
    #[test]
    fn the_ncu_summary_script_matches_the_manifest() {
        let python = std::process::Command::new("python3").arg("--version").output();
        if !python.as_ref().is_ok_and(|o| o.status.success()) {
            let why = "python3 is not runnable here, so scripts/ncu_summary.py was NOT checked against the manifest";
            if std::env::var("RGDN_REQUIRE_PYTHON").is_ok_and(|v| v == "1") {
                panic!("{why} (and RGDN_REQUIRE_PYTHON=1)");
            }
            crate::report_skipped("bench::the_ncu_summary_script_matches_the_manifest", why);
            return;
        }
        let dir = std::env::temp_dir().join(format!("rgdn-ncu-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut m = Manifest::default();
        let k = |n_t: usize| -> Keys {
            vec![
                ("GET_ROWS#0".into(), Some("conv state"), "get_rows_f32"),
                ("MUL_MAT_VEC#0".into(), Some("alpha"), if n_t == 1 { "mul_mat_vec_f32_c1" } else { "mul_mat_vec_f32_c4" }),
            ]
        };
        m.push("decode", 1, 0, "warmup-off", &k(1), 1, DType::F32);
        m.push("decode", 1, 0, "off", &k(1), 3, DType::F32);
        m.push("mtp3", 4, 3, "on", &k(4), 2, DType::F32);
        let mut ncu = String::from("==PROF== Connected to process\n");
        ncu.push_str("\"ID\",\"Process ID\",\"Kernel Name\",\"Block Size\",\"Metric Name\",\"Metric Unit\",\"Metric Value\"\n");
        let entries = ["get_rows_f32", "mul_mat_vec_f32_c1"].repeat(4).into_iter().chain(["get_rows_f32", "mul_mat_vec_f32_c4"].repeat(2));
        for (i, e) in entries.enumerate() {
            let ns = 1000 * (i + 1);
            ncu.push_str(&format!(
                "\"{i}\",\"42\",\"{e}\",\"(256, 1, 1)\",\"gpu__time_duration.sum\",\"nsecond\",\"{},{:03}\"\n",
                ns / 1000,
                ns % 1000
            ));
        }
        std::fs::write(dir.join("raw.csv"), ncu).unwrap();
        std::fs::write(dir.join("manifest.csv"), m.to_csv()).unwrap();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/ncu_summary.py");
        let out = std::process::Command::new("python3")
            .arg(script)
            .args(["raw.csv", "manifest.csv", "ncu.csv", "table.md"].map(|f| dir.join(f)))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let csv = std::fs::read_to_string(dir.join("ncu.csv")).unwrap();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines[0], "op,config,n_t,columns,dtype,kernel,median_us,samples");
        // decode off: GET_ROWS launches 2, 4, 6 (IDs 2, 4, 6 → 3, 5, 7 µs): median 5 µs.
        assert_eq!(lines[1], "GET_ROWS,GET_ROWS#0 conv state R=0 off,1,1,f32,get_rows_f32,5.000,3");
        assert_eq!(lines[4], "MUL_MAT_VEC,MUL_MAT_VEC#0 alpha R=3 on,4,4,f32,mul_mat_vec_f32_c4,11.000,2");
        let table = std::fs::read_to_string(dir.join("table.md")).unwrap();
        assert!(table.contains("| op (one launch unless said) | n_t = 1 | 4 |"), "{table}");
        // A manifest that does not match ncu's kernels is refused.
        std::fs::write(dir.join("manifest.csv"), Manifest::default().to_csv()).unwrap();
        let bad = std::process::Command::new("python3")
            .arg(script)
            .args(["raw.csv", "manifest.csv", "ncu.csv", "table.md"].map(|f| dir.join(f)))
            .output()
            .unwrap();
        assert!(!bad.status.success());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn rows_merge_both_arms_in_chain_order() {
        let mut off = Acc::default();
        let mut on = Acc::default();
        let t = |entries: Vec<&'static str>, us: Vec<f64>| measure::LayerTimes { entries, layers: vec![us] };
        let none: Vec<Box<dyn crate::ops::Op>> = Vec::new();
        off.add(&t(vec!["get_rows_f32", "concat_dim0_f32", "gated_delta_net_f32_d128"], vec![2.0, 3.0, 9.0]), &none, 0);
        on.add(&t(vec!["fused_chain", "gated_delta_net_f32_d128"], vec![4.0, 8.0]), &none, 0);
        let r = rows(&off, &on);
        let keys: Vec<_> = r.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(keys, ["get_rows_f32#0", "concat_dim0_f32#0", "gated_delta_net_f32_d128#0", "fused_chain#0"]);
        assert_eq!(r[2].on.unwrap().median, 8.0);
        assert!(r[0].on.is_none() && r[3].off.is_none());
        assert_eq!(off.stats().chain_total.unwrap().median, 14.0);
        assert_eq!(on.stats().kernels_per_layer, 2);
    }

    /// \[overlap\] The report's `on_overlapped`: the bench's replay layer with the overlap pass
    /// (16 sequences, T = 4: the three launches overlap) is, without it, or below the tiles
    /// (5 sequences), is not.
    #[test]
    fn a_replay_layer_with_the_overlap_pass_reads_as_overlapped() {
        use crate::fusion::{Options, overlap::OVERLAP};
        for (n_s, with_pass, want) in [(16, true, true), (16, false, false), (5, true, false)] {
            let cfg = chain::ChainConfig { shape: GdnShape::QWEN35_9B, step: seqs_step(4, 0, n_s).unwrap(), init: Default::default() };
            let options = if with_pass { Options::ON.with(OVERLAP) } else { Options::ON };
            let ops = chain::replay_layer(&mut crate::memory::HostMemory::new(), &cfg, 2, options).unwrap();
            assert_eq!(overlapped(&ops), want, "n_s {n_s}, pass {with_pass}");
        }
    }
}
