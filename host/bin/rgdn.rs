//! rgdn command line.
//!
//! - `rgdn check [FILTER]`: runs the op suite on the GPU (every case bit-exact against the CPU
//!   reference); without a GPU, says so and runs the CPU reference of every case instead.
//! - `rgdn info`: the GPU probe and the PTX entry points.

use rgdn::gpu::{Gpu, probe};
use rgdn::reference::math::MufuTable;
use rgdn::suite;
use std::process::ExitCode;

const USAGE: &str = "usage: rgdn <check [FILTER] | info>";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("check") => check(args.get(1).map(String::as_str).unwrap_or("")),
        Some("info") => info(),
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
