//! `cargo bench`: the same code as `rgdn bench` (own runner, `harness = false`).
//!
//! `cargo bench -- --quick`, `cargo bench -- --preset 27b --modes mtp3 --cold`; every option of
//! `rgdn bench` works (`cargo bench -- --help`). Without a GPU it says SKIPPED loudly and exits 0,
//! as the GPU tests do (`RGDN_REQUIRE_GPU=1`: exit 2).

use clap::Parser;
use rgdn::bench::BenchArgs;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "cargo bench --bench gdn --", about = "GDN layer chain: per-kernel and graph times, fusion off vs on")]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
}

fn main() -> ExitCode {
    // cargo passes `--bench` to every bench target; it means nothing here.
    let args = std::env::args().filter(|a| a != "--bench");
    // Help and version exit 0, bad options 2 (clap's own exit).
    let cli = Cli::parse_from(args);
    let stdout = std::io::stdout();
    match rgdn::bench::run_bench_target(&cli.bench, &mut stdout.lock()) {
        Ok(code) => code,
        // A closed pipe ends the run quietly; another write failure is reported.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cargo bench: cannot write the output: {e}");
            ExitCode::FAILURE
        }
    }
}
