//! The GDN fusion pass on the GPU (custom runner, `harness = false`):
//!
//! 1. the sweep — n_t 1–16 × R ∈ {0, 2, 3, 7, 15} × 5 shapes, on the ggml layout and on the
//!    reference PR's aliasing layout (800 runs), and batches of n_s ∈ {2, 3, 5, 16, 64}
//!    sequences (distinct and shared source rows, 1000 runs): each graph runs with fusion off and on from
//!    identical memory (fusion-aware planning); every observed value (caches, the products, the
//!    GDN output) and every intermediate no rewrite left stale must be byte-identical, and every
//!    registered fusion must fire where its scope says (`fusion::sweep::check_case`) and run as
//!    one kernel per fused node;
//! 2. whole 24-layer verify forwards of the 9B preset (T = 4, R = 3 and T = 8, R = 7, each with
//!    the launch recorder off and on; 16 sequences at T = 4, R = 3 and T = 1, R = 0; 6 of 24
//!    layers in the aliasing layout): every output and both caches identical off/on, kernels
//!    per forward printed for both.
//!
//! The sweep runs with the recorder off, as an engine runs (the launches each node made come
//! from its prepared launch, `graph::exec::run_gpu`).
//!
//! Without a CUDA driver it prints that it SKIPPED and exits 0 — unless `RGDN_REQUIRE_GPU=1`.
//! `RGDN_SWEEP_STRIDE=k` runs every k-th sweep case, `RGDN_SWEEP_SHARD=j/n` the j-th of n
//! interleaved shards; `RGDN_SWEEP_FORWARDS=0` skips the forwards, `=only` runs them alone.

use rgdn::fusion::sweep;
use rgdn::gpu::Gpu;
use rgdn::layer::GdnShape;
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let require_gpu = std::env::var("RGDN_REQUIRE_GPU").is_ok_and(|v| v == "1");
    let gpu = match Gpu::new() {
        Ok(gpu) => gpu,
        Err(e) => {
            let banner = "=".repeat(78);
            println!("{banner}\nGPU FUSION SWEEP SKIPPED: {e}\n{} sweep cases and 4 verify forwards did NOT run.", sweep::cases().len());
            println!("(set RGDN_REQUIRE_GPU=1 to make a missing GPU a failure)\n{banner}");
            return if require_gpu { ExitCode::FAILURE } else { ExitCode::SUCCESS };
        }
    };
    println!("GPU: {}", gpu.info());
    let mut ok = true;

    let forwards_only = std::env::var("RGDN_SWEEP_FORWARDS").is_ok_and(|v| v == "only");
    let t = Instant::now();
    let s = if forwards_only { sweep::SweepSummary::default() } else { sweep::sweep(&gpu, &mut |line| println!("{line}")) };
    for (layout, n, p) in &s.by_layout {
        println!("  {layout}: {p}/{n}");
    }
    println!(
        "SWEEP (recorder off, the engine's path): {}/{} cases identical off/on (every observed value and every intact intermediate), every registered fusion \
         fired where its scope says and ran as one kernel per fused node — both layouts ({:.1} s)",
        s.passed,
        s.cases,
        t.elapsed().as_secs_f64()
    );
    ok &= s.passed == s.cases;

    let layers = 24;
    // `RGDN_SWEEP_FORWARDS=0` skips the four 24-layer forwards (for slow tools such as
    // compute-sanitizer); `RGDN_SWEEP_STRIDE=k` runs every k-th sweep case.
    // [seq-batch] (n_t, R, n_s, recorder): the two single-sequence forwards, each with the recorder
    // off (the engine's path) and on (the launch log checked against every node's prepared
    // launch), and two of 16 sequences, one each way; the sweep above ran with it off.
    let forwards: &[(usize, usize, usize, bool)] = if std::env::var("RGDN_SWEEP_FORWARDS").is_ok_and(|v| v == "0") {
        &[]
    } else {
        &[(4, 3, 1, false), (4, 3, 1, true), (8, 7, 1, false), (8, 7, 1, true), (4, 3, 16, false), (1, 0, 16, true)]
    };
    for &(n_t, r, n_s, recording) in forwards {
        gpu.set_recording(recording);
        let t = Instant::now();
        match sweep::forward_seqs(&gpu, GdnShape::QWEN35_9B, layers, n_t, r, n_s, 0xf0 + n_t as u64) {
            Ok(f) => {
                let spec = sweep::forward_spec_seqs(GdnShape::QWEN35_9B, layers, n_t, r, n_s);
                let verdict = sweep::check_case(&spec, &f);
                let fired: Vec<String> =
                    rgdn::fusion::REGISTRY.iter().map(|x| format!("{} {}/{layers}", x.name, f.report.fired(x.name))).collect();
                println!(
                    "FORWARD 9B × {layers} layers, n_s = {n_s}, T = {n_t}, R = {r}, recorder {}: {} ({} values, {} bytes compared); fused: {}; kernels per forward {} → {} \
                     ({:.1} → {:.1} per layer) ({:.1} s)",
                    if recording { "on" } else { "off" },
                    if f.identical() { "identical" } else { "DIFFERS" },
                    f.values.len(),
                    f.bytes,
                    fired.join(", "),
                    f.off.total(),
                    f.on.total(),
                    f.off.total() as f64 / layers as f64,
                    f.on.total() as f64 / layers as f64,
                    t.elapsed().as_secs_f64(),
                );
                if let Err(e) = &verdict {
                    println!("  FAILED: {e}");
                    print!("{}", f.report);
                }
                ok &= verdict.is_ok();
            }
            Err(e) => {
                println!("FORWARD n_s = {n_s}, T = {n_t}, R = {r} FAILED to run: {e}");
                ok = false;
            }
        }
    }
    gpu.set_recording(false);
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
