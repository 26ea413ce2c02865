//! [replay] The exact-replay episode certificate (issue 26, `docs/rollback.md`) on the GPU
//! (custom runner, `harness = false`). Every path runs on the GPU from identical memory, with
//! the launch recorder off (`graph::exec::run_gpu`, the engine's path):
//! - **replay** — the arm under test: the replay-mode layer graph (`Rollback::Replay`),
//!   compiled with every fusion and the opt-in overlap pass ([`Options::ALL`]); its report must
//!   show `replay_verify` fusing the replay and the verify into one
//!   GATED_DELTA_NET_REPLAY_VERIFY, the gate path's fusions and `state_read`; beside it the
//!   same graph with the defaults (every launch plain) and without `replay_verify`;
//! - **replay unfused** — the same graph unfused, compared with the fused one (every output,
//!   the log set each step wrote, the committed rows);
//! - **snapshots** — today's layer step with 1 + R = T snapshot rows and ggml's rollback, fused
//!   (every registered fusion fires exactly where its scope says, the batched GDN_LAYER_STEP
//!   among them) and, at the small shape, unfused too;
//! - **sequential** — the unfused T = 1, R = 0 layer graph: a plain single-token decode of each
//!   sequence's accepted tokens.
//!
//! The episodes, the draws and the comparisons are `tests/replay.rs`'s (`tests/common/
//! episodes.rs`, shared): 20 verify steps per sequence, random accepted counts (0, all, and in
//! between), and after every step, and once more after the last acceptance, bit for bit: the
//! replay graph's committed ssm state and conv window of every sequence equal the snapshot
//! paths' accepted rows and the sequential decode's; every output of every token (SiLU output,
//! q and k norms, the alpha and beta products, β, the gate, the attention output) equals the
//! snapshot steps' and, for the accepted tokens, the single-token steps'. Every path's MUFU
//! results are the hardware's, so no CPU reference takes part.
//!
//! Groups (seeds fixed; the small shape's are `tests/replay.rs`'s, so the same episodes):
//! 1. the small shape of `tests/replay.rs` (E 64, H_k 1, H_v 2, D 128, d_conv 4), n_s ∈ {1, 4,
//!    64} × T ∈ {1, 4, 8, 16};
//! 2. the 9B shape (E 4096, H_k 16, H_v 32, D 128, d_conv 4) at T = 4, n_s ∈ {4, 64}
//!    (`RGDN_REPLAY_9B=0` leaves it out, for slow tools such as compute-sanitizer;
//!    `RGDN_REPLAY_SEQS=64` keeps only the small shape's episodes at those sequence counts,
//!    `RGDN_REPLAY_SEQS=none` none of them);
//! 3. a planted bug that must fail: the fused replay graph told a − 1 accepted tokens (a
//!    test-only plant in what the test writes, `GraphPlant::AcceptedOffByOne`), n_s = 4, T = 4
//!    at the small shape. A plant in the kernel itself is a patch
//!    (`results/2026-12-02-local-replay-verify/plant-replay-verify-short.patch`).
//!
//! One line to grep: `REPLAY EPISODES (GPU, recorder off): P/N episodes identical …`; the exit
//! status is non-zero on any mismatch (the failure names the step, the sequence, the paths
//! and the field) or when the plant is not caught. Without a CUDA driver it prints that it
//! SKIPPED and exits 0 — unless `RGDN_REQUIRE_GPU=1`.

#[path = "common/episodes.rs"]
mod episodes;

use episodes::{Executor, GraphPlant, STEPS, Setup, TOKENS, Tally, graph_episode};
use rgdn::fusion::Options;
use rgdn::gpu::Gpu;
use rgdn::layer::GdnShape;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::process::ExitCode;
use std::time::Instant;

/// `tests/replay.rs`'s shape: C = 512, a 128 KiB ssm row.
const SMALL: GdnShape = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 128, d_conv: 4, eps: 1e-6 };
/// The sequence counts of the small shape's episodes.
const SEQUENCES: [usize; 3] = [1, 4, 64];
/// The 9B shape's episodes: (n_s, T).
const BIG: [(usize, usize); 2] = [(4, 4), (64, 4)];

/// One episode on the GPU: its verdict line; `Err` names the first differing byte. A panic
/// in the harness (a graph that does not build) is a failure of the episode, not of the run.
fn run(setup: &Setup, plant: GraphPlant, unfused: bool) -> Result<Tally, String> {
    match catch_unwind(AssertUnwindSafe(|| graph_episode(setup, plant, unfused))) {
        Ok(r) => r,
        Err(p) => Err(format!(
            "panicked: {}",
            p.downcast_ref::<String>().map(String::as_str).or(p.downcast_ref::<&str>().copied()).unwrap_or("(no message)")
        )),
    }
}

fn main() -> ExitCode {
    let require_gpu = std::env::var("RGDN_REQUIRE_GPU").is_ok_and(|v| v == "1");
    let with_9b = !std::env::var("RGDN_REPLAY_9B").is_ok_and(|v| v == "0");
    // `RGDN_REPLAY_SEQS=64`: the small shape's episodes of those sequence counts only (comma-
    // separated; e.g. the overlapped ones, for compute-sanitizer); `none`: none of them (the 9B
    // episodes alone). Unset: all of them.
    let seqs_filter = std::env::var("RGDN_REPLAY_SEQS").ok();
    let small_seqs: Vec<usize> = match &seqs_filter {
        None => SEQUENCES.to_vec(),
        Some(list) if list.trim() == "none" => Vec::new(),
        Some(list) => {
            let wanted: Vec<&str> = list.split(',').map(str::trim).collect();
            let kept: Vec<usize> = SEQUENCES.into_iter().filter(|n| wanted.contains(&n.to_string().as_str())).collect();
            if kept.len() != wanted.len() {
                println!("RGDN_REPLAY_SEQS=`{list}`: each entry must be one of the small shape's sequence counts {SEQUENCES:?}, or `none`");
                return ExitCode::FAILURE;
            }
            kept
        }
    };
    let episodes = small_seqs.len() * TOKENS.len() + if with_9b { BIG.len() } else { 0 };
    let gpu = match Gpu::new() {
        Ok(gpu) => gpu,
        Err(e) => {
            let banner = "=".repeat(78);
            println!("{banner}\nGPU REPLAY EPISODES SKIPPED: {e}\n{episodes} replay episodes and the planted-bug check did NOT run.");
            println!("(set RGDN_REQUIRE_GPU=1 to make a missing GPU a failure)\n{banner}");
            return if require_gpu { ExitCode::FAILURE } else { ExitCode::SUCCESS };
        }
    };
    println!("GPU: {}", gpu.info());
    // The engine's path: no launch log (the graphs' launches come from their prepared launches).
    gpu.set_recording(false);
    // Every graph of every episode borrows the one Gpu for the whole run.
    let gpu: &'static Gpu = Box::leak(Box::new(gpu));
    let exec = Executor::Gpu(gpu);
    let started = Instant::now();
    let (mut passed, mut ran, mut failures) = (0, 0, Vec::new());
    let mut report = |name: String, r: Result<Tally, String>, t: Instant| {
        ran += 1;
        match r {
            Ok(tally) if tally.steps == STEPS => {
                passed += 1;
                println!("  ok   {name}: {tally:?} ({:.1} s)", t.elapsed().as_secs_f64());
            }
            Ok(tally) => failures.push(format!("{name}: {} steps of {STEPS}: {tally:?}", tally.steps)),
            Err(e) => {
                println!("  FAIL {name}: {e}");
                failures.push(format!("{name}: {e}"));
            }
        }
    };

    // 1. The small shape, every (n_s, T), both snapshot compilations, the unfused replay graph
    //    beside the fused one. Seeds: tests/replay.rs's `certify`.
    let group = Instant::now();
    for n_s in small_seqs {
        for (k, n_t) in TOKENS.into_iter().enumerate() {
            let t = Instant::now();
            let seed = 0x26_00 + (n_s * 16 + k) as u64;
            let setup = Setup { exec, shape: SMALL, n_s, n_t, seed, snapshots: &[Options::ALL, Options::OFF] };
            report(format!("small shape n_s {n_s}, T {n_t}"), run(&setup, GraphPlant::None, true), t);
        }
    }
    println!("group small shape (E 64, H_v 2): {:.1} s", group.elapsed().as_secs_f64());

    // 2. The 9B shape at T = 4: the snapshot path fused only (its unfused twin is certified at
    //    the small shape; at n_s = 64 each snapshot graph's caches are 1 GiB moved per step).
    if with_9b {
        let group = Instant::now();
        for (n_s, n_t) in BIG {
            let t = Instant::now();
            let setup = Setup { exec, shape: GdnShape::QWEN35_9B, n_s, n_t, seed: 0x26_9b00 + n_s as u64, snapshots: &[Options::ALL] };
            report(format!("9B shape n_s {n_s}, T {n_t}"), run(&setup, GraphPlant::None, true), t);
        }
        println!("group 9B shape (E 4096, H_v 32): {:.1} s", group.elapsed().as_secs_f64());
    }

    // 3. The plant must fail on a differing byte.
    let t = Instant::now();
    let setup = Setup { exec, shape: SMALL, n_s: 4, n_t: 4, seed: 0x26_46, snapshots: &[Options::ALL] };
    let caught = match run(&setup, GraphPlant::AcceptedOffByOne, false) {
        Err(e) if e.contains("differs at float") => {
            println!("  ok   plant (the fused replay graph told a − 1 accepted tokens) fails as it must: {e}");
            true
        }
        Err(e) => {
            println!("  FAIL plant: failed, but not on a differing byte: {e}");
            false
        }
        Ok(tally) => {
            println!("  FAIL plant: the fused replay graph told a − 1 accepted tokens PASSED the certificate: {tally:?}");
            false
        }
    };
    println!("group plant: {:.1} s", t.elapsed().as_secs_f64());

    let ok = passed == ran && caught;
    println!(
        "REPLAY EPISODES (GPU, recorder off): {passed}/{ran} episodes identical ({STEPS} steps each; the fused replay graph with \
         replay_verify vs the unfused one, the snapshot steps fused (and unfused at the small shape) and the sequential T=1 \
         decode: committed states, conv windows, every output), planted a−1 {} ({:.1} s)",
        if caught { "caught" } else { "NOT CAUGHT" },
        started.elapsed().as_secs_f64()
    );
    for f in &failures {
        println!("  FAILED: {f}");
    }
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
