//! The GPU op suite (custom runner, `harness = false`): every case of `rgdn::suite::cases` on
//! the GPU against the CPU reference, the 2^32-input math parity sweep against nvcc, and the
//! MUFU bound check; prints an op / cases / passed table.
//!
//! Without a CUDA driver it prints that it SKIPPED and why, and exits 0 — unless
//! `RGDN_REQUIRE_GPU=1`, which makes a missing GPU a failure (the GPU bundle sets it).
//! `RGDN_OPS=SSM_CONV,L2` (or a first argument) runs only matching cases;
//! `RGDN_SKIP_PARITY=1` skips the 2^32 sweep.

use rgdn::gpu::Gpu;
use rgdn::reference::math::MufuTable;
use rgdn::suite::{self, CaseReport, parity};
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let require_gpu = std::env::var("RGDN_REQUIRE_GPU").is_ok_and(|v| v == "1");
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-')).or_else(|| std::env::var("RGDN_OPS").ok()).unwrap_or_default();
    let gpu = match Gpu::new() {
        Ok(gpu) => gpu,
        Err(e) => {
            let banner = "=".repeat(78);
            println!(
                "{banner}\nGPU SUITE SKIPPED: {e}\n{} GPU cases and the 2^32 math parity sweep did NOT run.",
                suite::cases::all().len()
            );
            println!("(set RGDN_REQUIRE_GPU=1 to make a missing GPU a failure)\n{banner}");
            return if require_gpu { ExitCode::FAILURE } else { ExitCode::SUCCESS };
        }
    };
    println!("GPU: {}", gpu.info());
    println!("PTX: {} ({} entries)", rgdn::kernels::PTX_ARCH, rgdn::kernels::ptx_entries().len());

    let started = Instant::now();
    let mut table = MufuTable::new();
    let mut reports: Vec<CaseReport> = Vec::new();
    // `RGDN_OPS_SHARD=j/n`: the j-th of n interleaved shards of the cases (n processes side by
    // side run every case once; the parity sweep and the launch-log check go with shard 0).
    let (shard, shards) = rgdn::fusion::sweep::shard_of(std::env::var("RGDN_OPS_SHARD").ok().as_deref());
    for case in suite::cases::filtered(&filter).into_iter().skip(shard).step_by(shards) {
        let t = Instant::now();
        let r = suite::run_case(&gpu, &case, &mut table);
        println!("  {} {} [{:.0} ms] {}", if r.passed { "ok  " } else { "FAIL" }, r.name, t.elapsed().as_secs_f64() * 1e3, r.detail);
        reports.push(r);
    }

    let parity_wanted = shard == 0
        && std::env::var("RGDN_SKIP_PARITY").is_err()
        && (filter.is_empty() || "MATH_PARITY".contains(&filter.to_ascii_uppercase()));
    if parity_wanted {
        let t = Instant::now();
        match parity::run(&gpu, 28) {
            Ok(parity::Parity::Ran(results)) => {
                for r in results {
                    let passed = r.mismatches == 0;
                    let detail = format!("{} of {} inputs differ from nvcc -use_fast_math `{}`", r.mismatches, r.inputs, r.expression);
                    println!("  {} MATH_PARITY({}) {}", if passed { "ok  " } else { "FAIL" }, r.function, detail);
                    reports.push(CaseReport { group: "MATH_PARITY", name: format!("MATH_PARITY({})", r.function), passed, detail });
                }
                println!("  (parity sweep took {:.1} s)", t.elapsed().as_secs_f64());
            }
            Ok(parity::Parity::Skipped(why)) => println!("  SKIPPED MATH_PARITY: {why}"),
            Err(e) => reports.push(CaseReport { group: "MATH_PARITY", name: "MATH_PARITY".into(), passed: false, detail: e.to_string() }),
        }
    }

    if filter.is_empty() && shard == 0 {
        let (passed, detail) = match launch_log_check(&gpu) {
            Ok(d) => (true, d),
            Err(d) => (false, d),
        };
        println!("  {} LAUNCH_LOG {}", if passed { "ok  " } else { "FAIL" }, detail);
        reports.push(CaseReport { group: "LAUNCH_LOG", name: "LAUNCH_LOG(count+time)".into(), passed, detail });
    }

    if !table.is_empty() {
        let (passed, detail) = match suite::check_mufu_bounds(&table) {
            Ok(worst) => (true, worst.iter().map(|(op, ulp, n)| format!("{op:?}: {n} inputs, ≤ {ulp} ulp")).collect::<Vec<_>>().join(", ")),
            Err(e) => (false, e),
        };
        println!("  {} MUFU_BOUND {}", if passed { "ok  " } else { "FAIL" }, detail);
        reports.push(CaseReport { group: "MUFU_BOUND", name: "MUFU_BOUND".into(), passed, detail });
    }

    println!();
    let failed: Vec<_> = reports.iter().filter(|r| !r.passed).collect();
    for r in &failed {
        println!("FAILED {}: {}", r.name, r.detail);
    }
    let all_passed = suite::summarize(&reports, &mut std::io::stdout()).unwrap_or(false);
    println!(
        "GPU suite: {} of {} passed in {:.1} s on {}",
        reports.len() - failed.len(),
        reports.len(),
        started.elapsed().as_secs_f64(),
        gpu.info()
    );
    if reports.is_empty() {
        println!("no case matched the filter {filter:?}");
        return ExitCode::FAILURE;
    }
    if all_passed { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// The launch path counts every launch and, with timing on, times each one with events.
fn launch_log_check(gpu: &Gpu) -> Result<String, String> {
    use rgdn::memory::{DeviceMemory, HostMemory};
    use rgdn::ops::{Op, Unary, UnaryKind};
    use rgdn::tensor::DType;
    let e = |e: rgdn::Error| e.to_string();
    let mut mem = HostMemory::new();
    let src = mem.alloc_tensor(DType::F32, [1 << 20, 1, 1, 1]);
    let op = Unary { kind: UnaryKind::Exp, src, dst: src };
    let dev = DeviceMemory::upload(gpu, &mem).map_err(e)?;
    gpu.take_launches().map_err(e)?;
    gpu.set_timing(true);
    let launched = (0..3).try_for_each(|_| op.launch(gpu, &dev));
    gpu.set_timing(false);
    launched.map_err(e)?;
    let records = gpu.take_launches().map_err(e)?;
    let times: Vec<f32> = records.iter().filter_map(|r| r.elapsed_ms).collect();
    if records.len() != 3 || times.len() != 3 || records.iter().any(|r| r.entry != "unary_exp_f32") {
        return Err(format!("expected 3 timed unary_exp_f32 launches, log has {records:?}"));
    }
    if times.iter().any(|t| !(*t > 0.0 && *t < 1000.0)) {
        return Err(format!("implausible event times {times:?} ms"));
    }
    Ok(format!("3 launches logged, event times {:?} µs", times.iter().map(|t| (t * 1e3).round()).collect::<Vec<_>>()))
}
