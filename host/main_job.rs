//! The project's main job (`cargo run --release` with no arguments): the Qwen3.5-9B verify step
//! (T = 4 tokens, R = 3 snapshots) run unfused and fused, every buffer compared bit for bit,
//! then the per-kernel time table.
//!
//! On a GPU: both chains run on the GPU from the same initial bytes and every buffer is
//! compared (except intermediates the fused chain no longer writes, which are listed); the
//! unfused GPU result is also compared with the CPU reference fed the GPU's own MUFU results;
//! then a quick bench of the same step prints the time table. Without a GPU it says so and runs
//! the CPU side of the same comparison: both chains' references (same software MUFU), bit for
//! bit. Until the fusion pass lands the fused chain is the unfused one again, and the output
//! says so.

use crate::bench::chain::{ChainBuilder, ChainConfig, ChainPair, default_builder, eliminated_buffers};
use crate::bench::{self, BenchArgs};
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::layer::{GdnShape, LayerInit, LayerTensors, Step};
use crate::memory::{DeviceMemory, HostMemory};
use crate::ops::Op;
use crate::reference::math::{ExactMufu, MufuTable};
use crate::tensor::BufferId;
use std::collections::{BTreeMap, BTreeSet};

/// The step the main job checks: Qwen3.5-9B, MTP K=3 verify.
pub fn config() -> ChainConfig {
    ChainConfig { shape: GdnShape::QWEN35_9B, step: Step::new(4, 3), init: LayerInit::default() }
}

/// Buffers of `a` and `b` that differ, skipping `skip`.
pub fn differing_buffers(a: &HostMemory, b: &HostMemory, skip: &BTreeSet<usize>) -> Vec<usize> {
    (0..a.n_buffers().max(b.n_buffers()))
        .filter(|i| !skip.contains(i))
        .filter(|&i| i >= a.n_buffers() || i >= b.n_buffers() || a.bytes(BufferId(i)) != b.bytes(BufferId(i)))
        .collect()
}

/// Each buffer's name for the output: the layer tensors it holds (`conv_cache`), or
/// `scratch buffer N` for one a chain builder allocated.
pub fn buffer_names(mem: &HostMemory, tensors: &LayerTensors) -> BTreeMap<usize, String> {
    let mut names: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
    for (name, t) in LayerTensors::NAMES.iter().zip(tensors.to_array()) {
        names.entry(t.buffer.0).or_default().push(name);
    }
    (0..mem.n_buffers()).map(|b| (b, names.get(&b).map_or_else(|| format!("scratch buffer {b}"), |n| n.join(" / ")))).collect()
}

/// What the comparison found.
#[derive(Debug)]
pub struct Outcome {
    pub on_gpu: bool,
    pub fusion_available: bool,
    pub compared: usize,
    pub eliminated: BTreeSet<usize>,
    /// Buffers where "on" differs from "off".
    pub differing: Vec<usize>,
    /// Buffers where the unfused GPU run differs from the CPU reference (GPU only).
    pub differing_from_reference: Vec<usize>,
    /// Each buffer's name ([`buffer_names`]), for the output.
    pub names: BTreeMap<usize, String>,
}

impl Outcome {
    pub fn passed(&self) -> bool {
        self.differing.is_empty() && self.differing_from_reference.is_empty()
    }
}

fn run_cpu(mem: &HostMemory, ops: &[Box<dyn Op>]) -> Result<HostMemory> {
    let mut out = mem.clone();
    for op in ops {
        op.reference(&mut out, &mut ExactMufu)?;
    }
    Ok(out)
}

fn run_gpu(gpu: &Gpu, mem: &HostMemory, ops: &[Box<dyn Op>]) -> Result<HostMemory> {
    let dev = DeviceMemory::upload(gpu, mem)?;
    for op in ops {
        op.launch(gpu, &dev)?;
    }
    gpu.synchronize()?;
    dev.download(gpu)
}

/// The comparison alone, on `gpu` when given, else on the CPU.
pub fn compare(builder: &dyn ChainBuilder, cfg: &ChainConfig, gpu: Option<&Gpu>, seed: u64) -> Result<Outcome> {
    let built = ChainPair::new(builder, cfg, seed)?;
    let eliminated = eliminated_buffers(&built.off, &built.on);
    let (off, on, differing_from_reference) = match gpu {
        Some(gpu) => {
            let off = run_gpu(gpu, &built.mem, &built.off)?;
            let on = run_gpu(gpu, &built.mem, &built.on)?;
            let mut table = MufuTable::new();
            let want = crate::suite::mufu_gpu::reference_with_hardware_mufu(gpu, &built.mem, &built.off, &mut table)?;
            let vs_ref = differing_buffers(&off, &want, &BTreeSet::new());
            (off, on, vs_ref)
        }
        None => (run_cpu(&built.mem, &built.off)?, run_cpu(&built.mem, &built.on)?, Vec::new()),
    };
    let differing = differing_buffers(&off, &on, &eliminated);
    let names = buffer_names(&built.mem, &built.tensors);
    Ok(Outcome {
        on_gpu: gpu.is_some(),
        fusion_available: builder.fusion_available(),
        compared: off.n_buffers() - eliminated.len(),
        eliminated,
        differing,
        differing_from_reference,
        names,
    })
}

impl Outcome {
    /// `buffers` by name: "conv_input, attn_out".
    fn named(&self, buffers: impl IntoIterator<Item = usize>) -> String {
        let name = |b: usize| self.names.get(&b).cloned().unwrap_or_else(|| format!("buffer {b}"));
        buffers.into_iter().map(name).collect::<Vec<_>>().join(", ")
    }
}

/// Prints what `compare` found.
pub fn describe(o: &Outcome) -> String {
    let side = if o.on_gpu { "GPU" } else { "CPU reference (software MUFU on both sides)" };
    let mut s = String::new();
    if !o.fusion_available {
        s.push_str("fusion not available: \"fused\" is the unfused chain again (the comparison below is unfused vs unfused)\n");
    }
    if o.differing.is_empty() {
        s.push_str(&format!("{side}: unfused vs fused — all {} compared buffers equal bit for bit", o.compared));
    } else {
        s.push_str(&format!(
            "{side}: unfused vs fused — {} of {} buffers DIFFER: {}",
            o.differing.len(),
            o.compared,
            o.named(o.differing.iter().copied())
        ));
    }
    if !o.eliminated.is_empty() {
        s.push_str(&format!(
            " ({} intermediates the fused chain no longer writes are not compared: {})",
            o.eliminated.len(),
            o.named(o.eliminated.iter().copied())
        ));
    }
    if o.on_gpu {
        if o.differing_from_reference.is_empty() {
            s.push_str("\nGPU unfused chain vs CPU reference (hardware MUFU results): every buffer equal bit for bit");
        } else {
            s.push_str(&format!("\nGPU unfused chain vs CPU reference: {} DIFFER", o.named(o.differing_from_reference.iter().copied())));
        }
    }
    s
}

/// The job's first line: the step, and the two chains it compares.
fn header(cfg: &ChainConfig, builder: &dyn ChainBuilder) -> String {
    format!(
        "rgdn main job: Qwen3.5-9B GDN layer, verify step T = {} tokens, R = {} snapshots — {} against {}",
        cfg.step.n_tokens,
        cfg.step.n_rollback,
        builder.label(false),
        builder.label(true)
    )
}

/// The main job. `Ok(true)` when every comparison held (and, on a GPU, the time table was
/// printed); `Ok(false)` when a buffer differed.
pub fn run(out: &mut dyn std::io::Write) -> Result<bool> {
    let cfg = config();
    let builder = default_builder();
    writeln!(out, "{}", header(&cfg, builder))?;
    let gpu = match Gpu::new() {
        Ok(gpu) => {
            writeln!(out, "GPU: {}", gpu.info())?;
            // The time table comes from the launch recorder.
            gpu.set_recording(true);
            Some(gpu)
        }
        Err(Error::NoGpu { reason }) => {
            writeln!(out, "no GPU ({reason}): running the CPU side of the comparison only; no times")?;
            None
        }
        Err(e) => return Err(e),
    };
    let outcome = compare(builder, &cfg, gpu.as_ref(), 1)?;
    writeln!(out, "{}", describe(&outcome))?;
    let Some(gpu) = gpu else {
        return Ok(outcome.passed());
    };
    drop(gpu); // the bench makes its own context user (CUPTI first)
    writeln!(out)?;
    let args = BenchArgs { modes: vec!["mtp3".into()], quick: true, out: "bench-out/main".into(), ..BenchArgs::default() };
    bench::run_with(&args, builder, out)?;
    Ok(outcome.passed())
}

/// For a command line: [`run`] as an exit code (0 when every comparison held). A failed write
/// to `out` (a closed pipe) comes back as the error, for the caller to end quietly.
pub fn run_cli(out: &mut dyn std::io::Write) -> std::io::Result<std::process::ExitCode> {
    match run(out) {
        Ok(true) => Ok(std::process::ExitCode::SUCCESS),
        Ok(false) => Ok(std::process::ExitCode::FAILURE),
        Err(Error::Io(e)) => Err(e),
        Err(e) => {
            eprintln!("rgdn: {e}");
            Ok(std::process::ExitCode::FAILURE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::chain::UnfusedOnly;

    const SMALL: GdnShape = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 128, d_conv: 4, eps: 1e-6 };

    #[test]
    fn the_cpu_side_compares_every_buffer() {
        let cfg = ChainConfig { shape: SMALL, step: Step::new(4, 3), init: LayerInit::default() };
        let o = compare(&UnfusedOnly, &cfg, None, 3).unwrap();
        assert!(o.passed() && !o.on_gpu && !o.fusion_available);
        assert!(o.eliminated.is_empty());
        assert!(o.compared > 20);
        assert!(describe(&o).contains("fusion not available"));
    }

    /// A "fusion" that drops the last op (GATED_DELTA_NET) must be caught: its outputs differ.
    struct Broken;
    impl ChainBuilder for Broken {
        fn fusion_available(&self) -> bool {
            true
        }
        fn label(&self, fusion: bool) -> String {
            format!("broken {fusion}")
        }
        fn layer_ops(
            &self,
            mem: &mut HostMemory,
            t: &crate::layer::LayerTensors,
            cfg: &ChainConfig,
            fusion: bool,
        ) -> Result<Vec<Box<dyn Op>>> {
            let mut ops = UnfusedOnly.layer_ops(mem, t, cfg, false)?;
            if fusion {
                // Keep the GDN op but skip the gate MUL before it: the gate buffer is then
                // "eliminated", and the attention output / ssm cache differ.
                let mul = ops.iter().rposition(|o| o.name() == "MUL").unwrap();
                ops.remove(mul);
            }
            Ok(ops)
        }
    }

    #[test]
    fn a_wrong_fusion_is_caught() {
        let cfg = ChainConfig { shape: SMALL, step: Step::new(2, 1), init: LayerInit::default() };
        let o = compare(&Broken, &cfg, None, 3).unwrap();
        assert!(!o.passed());
        assert_eq!(o.eliminated.len(), 1);
        let text = describe(&o);
        assert!(text.contains("DIFFER"));
        // Buffers are named by the tensors they hold, not by number: the skipped MUL's output
        // (the gate) is the eliminated one, and the GDN's outputs differ.
        assert!(text.contains("not compared: gate)"), "{text}");
        assert!(text.contains("attn_out") && text.contains("ssm_cache"), "{text}");
    }

    #[test]
    fn the_header_names_the_step_and_both_chains() {
        let h = header(&config(), default_builder());
        assert!(h.contains("T = 4 tokens, R = 3 snapshots"), "{h}");
        assert!(h.contains("— unfused against fused (conv_chain + "), "{h}");
        assert!(!h.contains("unfused = unfused"), "{h}");
    }

    /// The whole main job on a machine without a GPU: the 9B step's CPU-side comparison.
    #[test]
    fn the_main_job_runs_without_a_gpu() {
        if crate::gpu::probe().is_ok() {
            // On a GPU machine the job also runs the GPU bench (minutes): `rgdn` itself
            // exercises that path; this CPU-only check cannot run here.
            crate::report_skipped(
                "main_job::the_main_job_runs_without_a_gpu",
                "a GPU is present, so the job would run the GPU bench; run `rgdn` for that path",
            );
            return;
        }
        assert!(run(&mut std::io::sink()).unwrap());
    }

    #[test]
    fn differing_buffers_skips_and_sees_size_changes() {
        let mut a = HostMemory::new();
        a.alloc(4);
        a.alloc(4);
        let mut b = a.clone();
        b.bytes_mut(BufferId(1))[0] = 1;
        assert_eq!(differing_buffers(&a, &b, &BTreeSet::new()), vec![1]);
        assert!(differing_buffers(&a, &b, &[1].into_iter().collect()).is_empty());
        b.alloc(1);
        assert_eq!(differing_buffers(&a, &b, &[1].into_iter().collect()), vec![2]);
    }
}
