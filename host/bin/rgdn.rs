//! rgdn command line (`rgdn --help`).
//!
//! - `rgdn check [FILTER]`: runs the op suite on the GPU (every case bit-exact against the CPU
//!   reference); without a GPU, says so and runs the CPU reference of every case instead (its
//!   table then says what ran, never "passed": nothing was compared).
//! - `rgdn layer [PRESET] [--tokens N] [--rollback R] [--weights f32|f16|bf16] [--seed S]`: one
//!   unfused GDN layer step on random weights (default: qwen3.5-9b, 4 tokens, 3 snapshots); prints
//!   each kernel launch with its time and the launch count per kernel, then checks every buffer
//!   against the CPU reference. Without a GPU: runs the reference and lists the chain.
//! - `rgdn info`: the GPU probe and the PTX entry points.
//!
//! Arguments are parsed by clap: unknown options, extra positional arguments and arguments that
//! are not UTF-8 are usage errors (exit 2). Output goes through `writeln!`, so a closed pipe
//! (`rgdn info | head -c 10`) ends the program quietly with exit 0 and a full disk is an error
//! message (exit 1), never a panic.
//!
//! - `rgdn bench [...]`: the benchmark (`rgdn bench --help`; [`rgdn::bench`]).
//! - `rgdn` alone: the main job ([`rgdn::main_job`]).
//!
//! Adding a subcommand is one variant in [`Command`] and one arm in [`run`] (its name in
//! messages comes from clap; [`CliError`] converts from `rgdn::Error`, `std::io::Error` and
//! `String`).

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use rand::SeedableRng;
use rgdn::gpu::{Gpu, probe};
use rgdn::graph::layer::unfused_ops;
use rgdn::layer::{GdnShape, LayerInit, LayerTensors, Step};
use rgdn::memory::{DeviceMemory, HostMemory};
use rgdn::reference::math::{ExactMufu, MufuTable};
use rgdn::suite;
use rgdn::tensor::DType;
use std::io::{self, Write};
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "rgdn",
    version,
    about = "Exactness-preserving GPU kernels for Gated-DeltaNet layers",
    long_about = None,
    after_help = "Without a subcommand, rgdn runs the main job: the Qwen3.5-9B verify step (T = 4, R = 3) \
                  unfused and fused, every buffer compared bit for bit, then the per-kernel time table \
                  (without a GPU: the CPU side of the same comparison)."
)]
struct Cli {
    /// Without a subcommand: the main job — the 9B verify step (T=4, R=3) unfused and fused,
    /// every buffer compared bit for bit, and the per-kernel time table.
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs the op suite: on the GPU every case bit-exact vs the CPU reference; without a GPU
    /// only the CPU reference (nothing is compared).
    Check(CheckArgs),
    /// Prints the GPU probe and the PTX entry points.
    Info,
    /// Runs one unfused GDN layer step on random weights and checks it against the CPU reference.
    Layer(LayerArgs),
    /// Benchmarks one GDN layer's chain and a whole verify forward, fusion off and on.
    Bench(Box<rgdn::bench::BenchArgs>),
}

#[derive(Debug, clap::Args)]
struct CheckArgs {
    /// Runs only the cases whose group or name contains this (case-insensitive).
    filter: Option<String>,
}

/// Options of `rgdn layer`.
#[derive(Debug, clap::Args)]
struct LayerArgs {
    /// Qwen3.5 preset: qwen3.5-4b, qwen3.5-9b, qwen3.5-27b (or 4b, 9b, 27b).
    #[arg(default_value = "qwen3.5-9b")]
    preset: String,
    /// Tokens verified in the step (1..=16).
    #[arg(long, default_value_t = 4)]
    tokens: usize,
    /// Rollback snapshots kept (0..=16).
    #[arg(long, default_value_t = 3)]
    rollback: usize,
    /// Type of the alpha/beta projection weights.
    #[arg(long, value_enum, default_value_t = Weights::F32)]
    weights: Weights,
    /// Seed of the random weights and inputs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Weights {
    F32,
    F16,
    Bf16,
}

impl Weights {
    fn dtype(self) -> DType {
        match self {
            Weights::F32 => DType::F32,
            Weights::F16 => DType::F16,
            Weights::Bf16 => DType::BF16,
        }
    }
}

/// Why a command stopped early.
#[derive(Debug)]
enum CliError {
    /// Writing the output failed (a closed pipe is handled quietly by `main`).
    Io(io::Error),
    /// A refusal or failure to report to the user (no backtrace, exit 1).
    User(String),
    /// A usage error found after parsing (exit 2, like clap's).
    Usage(String),
}

impl From<io::Error> for CliError {
    fn from(e: io::Error) -> Self {
        CliError::Io(e)
    }
}

impl From<rgdn::Error> for CliError {
    fn from(e: rgdn::Error) -> Self {
        CliError::User(e.to_string())
    }
}

impl From<String> for CliError {
    fn from(e: String) -> Self {
        CliError::User(e)
    }
}

fn main() -> ExitCode {
    let parsed =
        Cli::command().try_get_matches().and_then(|m| Ok((m.subcommand_name().unwrap_or("").to_owned(), Cli::from_arg_matches(&m)?)));
    let (name, cli) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => {
            // Help and version go to stdout (exit 0), usage errors to stderr (exit 2). A closed
            // stdout is not an error worth a message.
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let stdout = io::stdout();
    let mut out = stdout.lock();
    match run(cli.command, &mut out).and_then(|code| out.flush().map(|_| code).map_err(CliError::Io)) {
        Ok(code) => code,
        Err(CliError::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(CliError::Io(e)) => {
            let _ = writeln!(io::stderr(), "rgdn {name}: cannot write the output: {e}");
            ExitCode::FAILURE
        }
        Err(CliError::User(e)) => {
            let _ = writeln!(io::stderr(), "rgdn {name}: {e}");
            ExitCode::FAILURE
        }
        Err(CliError::Usage(e)) => {
            let _ = writeln!(io::stderr(), "rgdn {name}: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(command: Option<Command>, out: &mut dyn Write) -> Result<ExitCode, CliError> {
    match command {
        None => Ok(rgdn::main_job::run_cli(out)?),
        Some(Command::Check(a)) => check(a.filter.as_deref().unwrap_or(""), out),
        Some(Command::Info) => info(out),
        Some(Command::Layer(a)) => layer(&a, out),
        Some(Command::Bench(a)) => Ok(rgdn::bench::run_cli(&a, out)?),
    }
}

fn info(out: &mut dyn Write) -> Result<ExitCode, CliError> {
    match probe() {
        Ok(i) => writeln!(out, "GPU: {i}")?,
        Err(e) => writeln!(out, "GPU: none ({e})")?,
    }
    let entries = rgdn::kernels::ptx_entries();
    writeln!(out, "PTX: {} bytes for {}, {} entries:", rgdn::kernels::PTX.len(), rgdn::kernels::PTX_ARCH, entries.len())?;
    for e in entries {
        writeln!(out, "  {e}")?;
    }
    Ok(ExitCode::SUCCESS)
}

fn check(filter: &str, out: &mut dyn Write) -> Result<ExitCode, CliError> {
    let cases = suite::cases::filtered(filter);
    if cases.is_empty() {
        return Err(CliError::Usage(format!("no case matches {filter:?}")));
    }
    let all_ok = match Gpu::new() {
        Ok(gpu) => {
            writeln!(out, "GPU: {} — each case: GPU vs CPU reference, bit for bit", gpu.info())?;
            let mut table = MufuTable::new();
            let mut reports = Vec::with_capacity(cases.len());
            for c in &cases {
                reports.push(report(suite::run_case(&gpu, c, &mut table), out)?);
            }
            suite::summarize(&reports, out)?
        }
        Err(rgdn::Error::NoGpu { reason }) => {
            writeln!(out, "no GPU ({reason}): running the CPU reference of each case only — nothing is compared")?;
            let reports = run_cpu_with_progress(&cases, out)?;
            suite::summarize_cpu(&reports, out)?
        }
        Err(e) => return Err(e.into()),
    };
    Ok(if all_ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The CPU references of `cases`, with a line per op group as it finishes (the whole suite
/// takes minutes on a small machine): its cases, its time, and how far the run is.
fn run_cpu_with_progress(cases: &[suite::Case], out: &mut dyn Write) -> io::Result<Vec<suite::CaseReport>> {
    let n_groups = {
        let mut groups: Vec<&str> = cases.iter().map(|c| c.group).collect();
        groups.dedup();
        groups.len()
    };
    writeln!(out, "{} cases in {n_groups} groups (the whole suite takes minutes here; `rgdn check FILTER` runs a part):", cases.len())?;
    let mut reports = Vec::with_capacity(cases.len());
    let mut done_groups = 0;
    let mut start = (0, std::time::Instant::now());
    for (i, c) in cases.iter().enumerate() {
        reports.push(report(suite::run_case_cpu(c), out)?);
        if cases.get(i + 1).is_none_or(|next| next.group != c.group) {
            done_groups += 1;
            let (first, t) = start;
            writeln!(out, "  [{done_groups}/{n_groups}] {}: {} cases, {:.1} s", c.group, i + 1 - first, t.elapsed().as_secs_f64())?;
            out.flush()?;
            start = (i + 1, std::time::Instant::now());
        }
    }
    Ok(reports)
}

fn report(r: suite::CaseReport, out: &mut dyn Write) -> io::Result<suite::CaseReport> {
    if !r.passed {
        writeln!(out, "FAIL {}: {}", r.name, r.detail)?;
    }
    Ok(r)
}

fn layer(a: &LayerArgs, out: &mut dyn Write) -> Result<ExitCode, CliError> {
    let names: Vec<_> = GdnShape::PRESETS.iter().map(|p| p.0).collect();
    let shape = GdnShape::preset(&a.preset).ok_or(format!("unknown preset {} (have {names:?})", a.preset))?;
    let step = Step::new(a.tokens, a.rollback);
    let init = LayerInit { mat_vec_weights: a.weights.dtype(), ..LayerInit::default() };
    let mut rng = rand::rngs::StdRng::seed_from_u64(a.seed);
    let mut mem = HostMemory::new();
    let t = LayerTensors::alloc(&mut mem, &shape, &step, &init)?;
    t.fill_random(&mut mem, &shape, &mut rng, &init)?;
    let ops = unfused_ops(&t, &shape, &step, init.precision)?;
    writeln!(
        out,
        "{} (E {}, C {}, H_k {}, H_v {}, D {}), n_t {}, R {}, {:?} alpha/beta weights: {} ops",
        a.preset,
        shape.n_embd,
        shape.channels(),
        shape.n_k_heads,
        shape.n_v_heads,
        shape.head_dim,
        a.tokens,
        a.rollback,
        init.mat_vec_weights,
        ops.len()
    )?;
    let gpu = match Gpu::new() {
        Ok(gpu) => gpu,
        Err(rgdn::Error::NoGpu { reason }) => {
            writeln!(out, "no GPU ({reason}): running the CPU reference of the chain only")?;
            for op in &ops {
                op.reference(&mut mem, &mut ExactMufu)?;
                writeln!(out, "  {}", op.name())?;
            }
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) => return Err(e.into()),
    };
    writeln!(out, "GPU: {}", gpu.info())?;
    let dev = DeviceMemory::upload(&gpu, &mem)?;
    // One untimed run first (module load, first-launch costs), then a timed one on fresh data.
    for op in &ops {
        op.launch(&gpu, &dev)?;
    }
    gpu.synchronize()?;
    gpu.take_launches()?;
    let dev = DeviceMemory::upload(&gpu, &mem)?;
    gpu.set_timing(true);
    for op in &ops {
        op.launch(&gpu, &dev)?;
    }
    let launches = gpu.take_launches()?;
    gpu.set_timing(false);
    writeln!(out, "{:<28} {:>16} {:>12} {:>9}", "kernel", "grid", "block", "µs")?;
    let mut total = 0.0;
    for l in &launches {
        let us = l.elapsed_ms.unwrap_or(f32::NAN) * 1e3;
        total += us;
        writeln!(out, "{:<28} {:>16} {:>12} {:>9.2}", l.entry, format!("{:?}", l.dims.grid), format!("{:?}", l.dims.block), us)?;
    }
    writeln!(out, "{} launches, {:.2} µs summed (event timing, one run: not a benchmark)", launches.len(), total)?;
    let mut counts = std::collections::BTreeMap::new();
    for l in &launches {
        *counts.entry(l.entry).or_insert(0usize) += 1;
    }
    writeln!(out, "launches per kernel:")?;
    for (k, n) in counts {
        writeln!(out, "  {k:<28} {n}")?;
    }
    let got = dev.download(&gpu)?;
    let mut table = MufuTable::new();
    let want = suite::mufu_gpu::reference_with_hardware_mufu(&gpu, &mem, &ops, &mut table)?;
    let differing =
        (0..want.n_buffers()).filter(|b| got.bytes(rgdn::tensor::BufferId(*b)) != want.bytes(rgdn::tensor::BufferId(*b))).count();
    if differing == 0 {
        writeln!(out, "every buffer (outputs, both caches, intermediates) equals the CPU reference bit for bit")?;
        Ok(ExitCode::SUCCESS)
    } else {
        writeln!(out, "{differing} buffer(s) differ from the CPU reference (`rgdn check GDN_LAYER` says where)")?;
        Ok(ExitCode::FAILURE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
