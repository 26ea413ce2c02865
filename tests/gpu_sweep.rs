//! The GDN fusion pass on the GPU (custom runner, `harness = false`):
//!
//! 1. the sweep — n_t 1–16 × R ∈ {0, 2, 3, 7, 15} × 5 shapes, on the ggml layout and on the
//!    reference PR's aliasing layout (800 runs): each graph runs with fusion off and on from
//!    identical memory; the L2 outputs, SiLU output, whole conv cache, both alpha/beta products
//!    (and beta, the gate, the GDN output and ssm cache where built) must be byte-identical, the
//!    conv chain must run as one kernel and the pair as one launch (n_t ≤ 8; refused above);
//! 2. whole 24-layer verify forwards of the 9B preset (T = 4, R = 3 and T = 8, R = 7; 6 of 24
//!    layers in the aliasing layout): every output and both caches identical off/on, kernels
//!    per forward printed for both.
//!
//! Without a CUDA driver it prints that it SKIPPED and exits 0 — unless `RGDN_REQUIRE_GPU=1`.
//! `RGDN_SWEEP_STRIDE=k` runs every k-th sweep case, `RGDN_SWEEP_FORWARDS=0` skips the forwards.

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
            println!("{banner}\nGPU FUSION SWEEP SKIPPED: {e}\n{} sweep cases and 2 verify forwards did NOT run.", sweep::cases().len());
            println!("(set RGDN_REQUIRE_GPU=1 to make a missing GPU a failure)\n{banner}");
            return if require_gpu { ExitCode::FAILURE } else { ExitCode::SUCCESS };
        }
    };
    println!("GPU: {}", gpu.info());
    let mut ok = true;

    let t = Instant::now();
    let s = sweep::sweep(&gpu, &mut |line| println!("{line}"));
    for (layout, n, p) in &s.by_layout {
        println!("  {layout}: {p}/{n}");
    }
    println!(
        "SWEEP: {}/{} cases identical off/on (L2, SiLU, whole conv cache, alpha/beta products, …), conv chain fused as 1 kernel \
         in every case, alpha/beta pair 1 launch for n_t ≤ 8 (refused as too wide above) — both layouts ({:.1} s)",
        s.passed,
        s.cases,
        t.elapsed().as_secs_f64()
    );
    ok &= s.passed == s.cases;

    let layers = 24;
    // `RGDN_SWEEP_FORWARDS=0` skips the two 24-layer forwards (for slow tools such as
    // compute-sanitizer); `RGDN_SWEEP_STRIDE=k` runs every k-th sweep case.
    let forwards: &[(usize, usize)] = if std::env::var("RGDN_SWEEP_FORWARDS").is_ok_and(|v| v == "0") { &[] } else { &[(4, 3), (8, 7)] };
    for &(n_t, r) in forwards {
        let t = Instant::now();
        match sweep::forward(&gpu, GdnShape::QWEN35_9B, layers, n_t, r, 0xf0 + n_t as u64) {
            Ok(f) => {
                let (chain, pair) = f.report.fused_counts();
                let (off_total, off_chain) = sweep::chain_kernels(&f.off, layers);
                let (on_total, on_chain) = sweep::chain_kernels(&f.on, layers);
                let (k_chain, n_chain) = f.on.of("GDN_CONV_CHAIN");
                let (k_pair, n_pair) = f.on.of("MUL_MAT_VEC_PAIR");
                let launches_ok = k_chain == n_chain && k_pair == n_pair;
                let good = f.identical() && chain == layers && pair == layers && launches_ok;
                println!(
                    "FORWARD 9B × {layers} layers, T = {n_t}, R = {r}: {} ({} values, {} bytes compared); fused conv chain {chain}/{layers}, \
                     pair {pair}/{layers}; kernels per forward {off_total} → {on_total}, chain kernels per layer {} → {} ({:.1} s){}",
                    if f.identical() { "identical" } else { "DIFFERS" },
                    f.values.len(),
                    f.bytes,
                    off_chain as f64 / layers as f64,
                    on_chain as f64 / layers as f64,
                    t.elapsed().as_secs_f64(),
                    if launches_ok { String::new() } else { format!(" — fused nodes made {k_chain}+{k_pair} launches (want 1 + 1)") }
                );
                if !f.identical() {
                    println!("  differing values: {:?}", f.mismatches.iter().take(8).collect::<Vec<_>>());
                }
                if chain != layers || pair != layers {
                    print!("{}", f.report);
                }
                ok &= good;
            }
            Err(e) => {
                println!("FORWARD T = {n_t}, R = {r} FAILED to run: {e}");
                ok = false;
            }
        }
    }
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
