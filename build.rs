//! Builds the device crate `kernels-gpu/` into one PTX module and hands its path to the host
//! crate (`RGDN_PTX_PATH`, embedded with `include_str!`).
//!
//! rustc's own `nvptx64-nvidia-cuda` backend: `-Zbuild-std=core` (no prebuilt std is served for
//! that target), fat LTO into a `cdylib`, `--emit=asm` (the `.s` file *is* the PTX), and a no-op
//! linker because the final link step wants `llvm-bitcode-linker`, which is not needed for PTX.
//! The device build uses its own target directory so it never waits on the host build's lock.
//!
//! `RGDN_CUDA_ARCH` picks the target (default `sm_90`).
//!
//! Stable Rust: the built PTX of each supported arch is committed, gzipped, as
//! `kernels-gpu/ptx/<arch>.ptx.gz` (12 MB of text as 1.7 MB: the whole tracked tree travels to
//! the GPU machine in every device call, under a 64 MiB limit).
//! When the kernel toolchain (a nightly rustc with `rust-src`) is absent — a downstream crate on
//! stable — build.rs embeds that file instead: silently on a stable or beta rustc (the documented
//! path for a downstream crate), with a `cargo:warning` on a nightly that cannot build the
//! kernels (no `rust-src`: probably a broken setup of this repository). `RGDN_PTX_FROM`
//! forces either way: `source` (build, or fail) or `committed`. The crate learns which
//! (`RGDN_PTX_ORIGIN` = `source` | `committed`); `tests/ptx_committed.rs` rebuilds from source
//! and fails when the committed file differs by one byte (`scripts/refresh-ptx.sh` refreshes it).

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const TOOLCHAIN_HINT: &str = "the pinned toolchain from rust-toolchain.toml: \
    `rustup toolchain install` (run in the repository root; it also installs rust-src)";

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let kernels = manifest_dir.join("kernels-gpu");
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let arch = env::var("RGDN_CUDA_ARCH").unwrap_or_else(|_| "sm_90".to_string());
    println!("cargo:rerun-if-changed=kernels-gpu/src");
    println!("cargo:rerun-if-changed=kernels-gpu/Cargo.toml");
    println!("cargo:rerun-if-env-changed=RGDN_CUDA_ARCH");
    println!("cargo:rerun-if-env-changed=RGDN_PTX_FROM");
    println!("cargo:rerun-if-changed=kernels-gpu/ptx");
    // The bench embeds the commit it was built from (scripts/gpu-bundle.sh sets it).
    println!("cargo:rerun-if-env-changed=RGDN_GIT_COMMIT");

    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let committed = manifest_dir.join("kernels-gpu/ptx").join(format!("{arch}.ptx.gz"));
    let from = env::var("RGDN_PTX_FROM").unwrap_or_default();
    let use_committed = match from.as_str() {
        "source" => {
            if let Err(why) = kernel_toolchain(&cargo) {
                fail(why.message());
            }
            false
        }
        "committed" => true,
        "" => match kernel_toolchain(&cargo) {
            Ok(()) => false,
            // A stable or beta rustc: the committed PTX is the documented path, nothing to say.
            Err(NoKernelToolchain::NotNightly(_)) => true,
            Err(why) => {
                println!(
                    "cargo:warning=rgdn: no kernel toolchain ({}); embedding the committed PTX {}",
                    why.message().lines().next().unwrap_or_default(),
                    committed.display()
                );
                true
            }
        },
        other => fail(&format!("RGDN_PTX_FROM is `{other}`; use `source`, `committed`, or leave it unset")),
    };
    if use_committed {
        embed_committed(&committed, &arch, &out_dir);
        return;
    }

    // Next to the host's own target dir, but separate (no lock contention).
    let target_dir = env::var("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|_| manifest_dir.join("target")).join("kernels-gpu");
    let ptx_out = out_dir.join("rgdn.ptx");

    let mut cmd = Command::new(&cargo);
    scrub_cargo_env(&mut cmd);
    cmd.current_dir(&kernels)
        .args(["rustc", "--release", "--target", "nvptx64-nvidia-cuda", "-Zbuild-std=core"])
        .arg("--target-dir")
        .arg(&target_dir)
        .args(["--", "-C"])
        .arg(format!("target-cpu={arch}"))
        .args(["-C", "linker=/bin/true"])
        .arg(format!("--emit=asm={}", ptx_out.display()));
    let output = cmd.output().unwrap_or_else(|e| fail(&format!("could not run `{cargo}`: {e}")));
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        fail(&format!("the device crate kernels-gpu/ did not build for nvptx64-nvidia-cuda ({arch}).\n{stderr}"));
    }
    let ptx = std::fs::read_to_string(&ptx_out)
        .unwrap_or_else(|e| fail(&format!("the device build succeeded but wrote no PTX at {}: {e}", ptx_out.display())));
    if !ptx.contains(".entry") {
        fail(&format!("{} holds no kernel entry point", ptx_out.display()));
    }
    // [mmvf-pair] launch bounds (rustc has no attribute for them): written into the PTX file.
    let ptx = with_launch_bounds(&ptx, abi::PTX_LAUNCH_BOUNDS);
    std::fs::write(&ptx_out, &ptx).unwrap_or_else(|e| fail(&format!("could not rewrite {}: {e}", ptx_out.display())));
    println!("cargo:rustc-env=RGDN_PTX_PATH={}", ptx_out.display());
    println!("cargo:rustc-env=RGDN_PTX_ARCH={arch}");
    println!("cargo:rustc-env=RGDN_PTX_ORIGIN=source");
}

/// Embeds `kernels-gpu/ptx/<arch>.ptx.gz`, decompressed (a copy in OUT_DIR, so the crate reads one
/// path either way).
fn embed_committed(committed: &Path, arch: &str, out_dir: &Path) {
    use std::io::Read;
    let file = std::fs::File::open(committed).unwrap_or_else(|e| {
        fail(&format!(
            "no committed PTX for {arch} at {} ({e}); build with {TOOLCHAIN_HINT}, or pick a committed arch with RGDN_CUDA_ARCH",
            committed.display()
        ))
    });
    let mut ptx = String::new();
    if let Err(e) = flate2::read::GzDecoder::new(file).read_to_string(&mut ptx) {
        fail(&format!("{} is not a gzipped PTX text ({e}); refresh it with scripts/refresh-ptx.sh", committed.display()));
    }
    if !ptx.contains(".entry") {
        fail(&format!("{} holds no kernel entry point", committed.display()));
    }
    let ptx_out = out_dir.join("rgdn.ptx");
    std::fs::write(&ptx_out, &ptx).unwrap_or_else(|e| fail(&format!("could not write {}: {e}", ptx_out.display())));
    println!("cargo:rustc-env=RGDN_PTX_PATH={}", ptx_out.display());
    println!("cargo:rustc-env=RGDN_PTX_ARCH={arch}");
    println!("cargo:rustc-env=RGDN_PTX_ORIGIN=committed");
}

// [mmvf-pair] the shared constants, for the launch-bounds table.
#[allow(dead_code)]
#[path = "kernels-gpu/src/abi.rs"]
mod abi;

/// Adds `.maxntid N, 1, 1` and `.minnctapersm M` after the parameter list of every entry whose
/// name starts with a prefix of `bounds` ((prefix, N, M), first match wins). Without them ptxas
/// may budget a kernel's registers for full occupancy and issue its loads in several rounds.
fn with_launch_bounds(ptx: &str, bounds: &[(&str, u32, u32)]) -> String {
    let mut out = String::with_capacity(ptx.len() + 4096);
    let mut pending: Option<(u32, u32)> = None;
    for line in ptx.lines() {
        out.push_str(line);
        out.push('\n');
        if let Some(name) = line.strip_prefix(".visible .entry ") {
            pending = bounds.iter().find(|(prefix, ..)| name.starts_with(prefix)).map(|&(_, n, m)| (n, m));
        }
        if line == ")"
            && let Some((n, m)) = pending.take()
        {
            out.push_str(&format!(".maxntid {n}, 1, 1\n.minnctapersm {m}\n"));
        }
    }
    out
}

/// Whether the kernels can be built here: a nightly rustc (`-Zbuild-std`) whose `rust-src`
/// component is installed (`-Zbuild-std` compiles `core` from it). Says plainly what is missing
/// instead of letting cargo fail deep inside.
fn kernel_toolchain(cargo: &str) -> Result<(), NoKernelToolchain> {
    let rustc = Path::new(cargo).with_file_name("rustc");
    let rustc = if rustc.exists() { rustc } else { PathBuf::from("rustc") };
    let version = Command::new(&rustc)
        .arg("--version")
        .output()
        .map_err(|e| NoKernelToolchain::Broken(format!("could not run `{}`: {e}; install {TOOLCHAIN_HINT}", rustc.display())))?;
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    if !version.contains("nightly") {
        return Err(NoKernelToolchain::NotNightly(format!(
            "`{}` is `{version}`, but the device build needs nightly features; install {TOOLCHAIN_HINT}",
            rustc.display()
        )));
    }
    let sysroot = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .map_err(|e| NoKernelToolchain::Broken(format!("could not run `{}`: {e}; install {TOOLCHAIN_HINT}", rustc.display())))?;
    let sysroot = String::from_utf8_lossy(&sysroot.stdout).trim().to_string();
    let core_src = Path::new(&sysroot).join("lib/rustlib/src/rust/library/core");
    if !core_src.exists() {
        return Err(NoKernelToolchain::Broken(format!(
            "the toolchain at {sysroot} has no rust-src component (needed for -Zbuild-std=core).\n\
             Install it with `rustup component add rust-src --toolchain nightly-2026-05-20`, or {TOOLCHAIN_HINT}."
        )));
    }
    Ok(())
}

/// Why the kernels cannot be built with the rustc at hand.
enum NoKernelToolchain {
    /// A stable or beta rustc: a downstream crate's normal case (the committed PTX is embedded).
    NotNightly(String),
    /// A nightly that cannot build them, or no runnable rustc: worth a warning.
    Broken(String),
}

impl NoKernelToolchain {
    fn message(&self) -> &str {
        match self {
            NoKernelToolchain::NotNightly(m) | NoKernelToolchain::Broken(m) => m,
        }
    }
}

/// The nested cargo must not inherit the outer build's per-package settings (flags, target,
/// wrappers, jobserver-specific state), or it would build the device crate for the host.
fn scrub_cargo_env(cmd: &mut Command) {
    for (key, _) in env::vars_os() {
        let key = key.to_string_lossy().to_string();
        let keep =
            key == "CARGO_HOME" || key == "CARGO_NET_OFFLINE" || key.starts_with("CARGO_REGISTRIES") || key.starts_with("CARGO_HTTP");
        let drop = (key.starts_with("CARGO_") && !keep)
            || key.starts_with("RUSTC")
            || key.starts_with("RUSTDOC")
            || matches!(key.as_str(), "RUSTFLAGS" | "TARGET" | "HOST" | "OUT_DIR" | "OPT_LEVEL" | "PROFILE" | "DEBUG" | "NUM_JOBS");
        if drop {
            cmd.env_remove(&key);
        }
    }
}

fn fail(message: &str) -> ! {
    eprintln!("error: rgdn build.rs: {message}");
    std::process::exit(1);
}
