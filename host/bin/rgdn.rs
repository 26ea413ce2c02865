//! rgdn command line.
//!
//! - `rgdn check [FILTER]`: runs the op suite on the GPU (every case bit-exact against the CPU
//!   reference); without a GPU, says so and runs the CPU reference of every case instead.
//! - `rgdn layer [PRESET] [--tokens N] [--rollback R] [--weights f32|f16|bf16] [--seed S]`: one
//!   unfused GDN layer step on random weights (default: qwen3.5-9b, 4 tokens, 3 snapshots); prints
//!   each kernel launch with its time and the launch count per kernel, then checks every buffer
//!   against the CPU reference. Without a GPU: runs the reference and lists the chain.
//! - `rgdn info`: the GPU probe and the PTX entry points.

use rand::SeedableRng;
use rgdn::gpu::{Gpu, probe};
use rgdn::layer::{GdnShape, LayerInit, LayerTensors, Step, unfused_ops};
use rgdn::memory::{DeviceMemory, HostMemory};
use rgdn::reference::math::{ExactMufu, MufuTable};
use rgdn::suite;
use rgdn::tensor::DType;
use std::process::ExitCode;

const USAGE: &str = "usage: rgdn <check [FILTER] | layer [PRESET] [--tokens N] [--rollback R] [--weights f32|f16|bf16] [--seed S] | info>";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("check") => check(args.get(1).map(String::as_str).unwrap_or("")),
        Some("info") => info(),
        Some("layer") => match layer(&args[1..]) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("rgdn layer: {e}");
                ExitCode::FAILURE
            }
        },
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn info() -> ExitCode {
    match probe() {
        Ok(i) => println!("GPU: {i}"),
        Err(e) => println!("GPU: none ({e})"),
    }
    let entries = rgdn::kernels::ptx_entries();
    println!("PTX: {} bytes for {}, {} entries:", rgdn::kernels::PTX.len(), rgdn::kernels::PTX_ARCH, entries.len());
    for e in entries {
        println!("  {e}");
    }
    ExitCode::SUCCESS
}

fn check(filter: &str) -> ExitCode {
    let cases = suite::cases::filtered(filter);
    if cases.is_empty() {
        eprintln!("no case matches {filter:?}");
        return ExitCode::from(2);
    }
    let reports: Vec<_> = match Gpu::new() {
        Ok(gpu) => {
            println!("GPU: {} — each case: GPU vs CPU reference, bit for bit", gpu.info());
            let mut table = MufuTable::new();
            cases.iter().map(|c| report(suite::run_case(&gpu, c, &mut table))).collect()
        }
        Err(e) => {
            println!("no GPU ({e}): running the CPU reference of each case only — nothing is compared");
            cases.iter().map(|c| report(suite::run_case_cpu(c))).collect()
        }
    };
    match suite::summarize(&reports, &mut std::io::stdout()) {
        Ok(true) => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    }
}

fn report(r: suite::CaseReport) -> suite::CaseReport {
    if !r.passed {
        println!("FAIL {}: {}", r.name, r.detail);
    }
    r
}

/// Options of `rgdn layer`.
struct LayerArgs {
    preset: String,
    tokens: usize,
    rollback: usize,
    weights: DType,
    seed: u64,
}

fn parse_layer_args(args: &[String]) -> Result<LayerArgs, String> {
    let mut a = LayerArgs { preset: "qwen3.5-9b".into(), tokens: 4, rollback: 3, weights: DType::F32, seed: 1 };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().cloned().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--tokens" => a.tokens = value("--tokens")?.parse().map_err(|e| format!("--tokens: {e}"))?,
            "--rollback" => a.rollback = value("--rollback")?.parse().map_err(|e| format!("--rollback: {e}"))?,
            "--seed" => a.seed = value("--seed")?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--weights" => {
                a.weights = match value("--weights")?.as_str() {
                    "f32" => DType::F32,
                    "f16" => DType::F16,
                    "bf16" => DType::BF16,
                    w => return Err(format!("--weights {w}: expected f32, f16 or bf16")),
                }
            }
            p if !p.starts_with('-') => a.preset = p.to_string(),
            other => return Err(format!("unknown option {other}\n{USAGE}")),
        }
    }
    Ok(a)
}

fn layer(args: &[String]) -> Result<ExitCode, String> {
    let a = parse_layer_args(args)?;
    let names: Vec<_> = GdnShape::PRESETS.iter().map(|p| p.0).collect();
    let shape = GdnShape::preset(&a.preset).ok_or(format!("unknown preset {} (have {names:?})", a.preset))?;
    let step = Step::new(a.tokens, a.rollback);
    let init = LayerInit { mat_vec_weights: a.weights, ..LayerInit::default() };
    let mut rng = rand::rngs::StdRng::seed_from_u64(a.seed);
    let mut mem = HostMemory::new();
    let t = LayerTensors::alloc(&mut mem, &shape, &step, &init).map_err(|e| e.to_string())?;
    t.fill_random(&mut mem, &shape, &mut rng, &init);
    let ops = unfused_ops(&t, &shape, &step, init.precision).map_err(|e| e.to_string())?;
    println!(
        "{} (E {}, C {}, H_k {}, H_v {}, D {}), n_t {}, R {}, {:?} alpha/beta weights: {} ops",
        a.preset,
        shape.n_embd,
        shape.channels(),
        shape.n_k_heads,
        shape.n_v_heads,
        shape.head_dim,
        a.tokens,
        a.rollback,
        a.weights,
        ops.len()
    );
    let gpu = match Gpu::new() {
        Ok(gpu) => gpu,
        Err(e) => {
            println!("no GPU ({e}): running the CPU reference of the chain only");
            for op in &ops {
                op.reference(&mut mem, &mut ExactMufu).map_err(|e| e.to_string())?;
                println!("  {}", op.name());
            }
            return Ok(ExitCode::SUCCESS);
        }
    };
    println!("GPU: {}", gpu.info());
    let dev = DeviceMemory::upload(&gpu, &mem).map_err(|e| e.to_string())?;
    // One untimed run first (module load, first-launch costs), then a timed one on fresh data.
    for op in &ops {
        op.launch(&gpu, &dev).map_err(|e| e.to_string())?;
    }
    gpu.synchronize().map_err(|e| e.to_string())?;
    gpu.take_launches().map_err(|e| e.to_string())?;
    let dev = DeviceMemory::upload(&gpu, &mem).map_err(|e| e.to_string())?;
    gpu.set_timing(true);
    for op in &ops {
        op.launch(&gpu, &dev).map_err(|e| e.to_string())?;
    }
    let launches = gpu.take_launches().map_err(|e| e.to_string())?;
    gpu.set_timing(false);
    println!("{:<28} {:>16} {:>12} {:>9}", "kernel", "grid", "block", "µs");
    let mut total = 0.0;
    for l in &launches {
        let us = l.elapsed_ms.unwrap_or(f32::NAN) * 1e3;
        total += us;
        println!("{:<28} {:>16} {:>12} {:>9.2}", l.entry, format!("{:?}", l.dims.grid), format!("{:?}", l.dims.block), us);
    }
    println!("{} launches, {:.2} µs summed (event timing, one run: not a benchmark)", launches.len(), total);
    let mut counts = std::collections::BTreeMap::new();
    for l in &launches {
        *counts.entry(l.entry).or_insert(0usize) += 1;
    }
    println!("launches per kernel:");
    for (k, n) in counts {
        println!("  {k:<28} {n}");
    }
    let got = dev.download(&gpu).map_err(|e| e.to_string())?;
    let mut table = MufuTable::new();
    let want = suite::mufu_gpu::reference_with_hardware_mufu(&gpu, &mem, &ops, &mut table).map_err(|e| e.to_string())?;
    let differing =
        (0..want.n_buffers()).filter(|b| got.bytes(rgdn::tensor::BufferId(*b)) != want.bytes(rgdn::tensor::BufferId(*b))).count();
    if differing == 0 {
        println!("every buffer (outputs, both caches, intermediates) equals the CPU reference bit for bit");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("{differing} buffer(s) differ from the CPU reference (`rgdn check GDN_LAYER` says where)");
        Ok(ExitCode::FAILURE)
    }
}
