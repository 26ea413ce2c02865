// rgdn from an engine: the engine owns the CUDA context, the stream and every device buffer
// (cudarc `CudaSlice`s, as candle and mistral.rs hold their tensors); rgdn runs one Qwen3.5-9B
// GDN layer's verify step (4 tokens, 3 rollback snapshots) on them — unfused, then fused —
// and the example checks that both wrote the same bytes into every buffer the step hands on.
//
// `cargo run --release --example fused_step`; without a GPU it prints SKIPPED and exits 0.
// `tests/downstream/` builds this same file on stable Rust against rgdn with
// `default-features = false`.

use cudarc::driver::{CudaContext, CudaSlice};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rgdn::engine::{CallerMemory, layer_step_with};
use rgdn::fusion::Options;
use rgdn::gpu::{Gpu, probe};
use rgdn::layer::{GdnShape, LayerInit, LayerTensors, Step};
use rgdn::memory::{HostMemory, Memory};
use rgdn::tensor::BufferId;
use std::collections::BTreeSet;
use std::process::ExitCode;

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("fused_step: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<bool, Box<dyn std::error::Error>> {
    if let Err(e) = probe() {
        println!("SKIPPED: {e} (the fused step needs an NVIDIA GPU)");
        return Ok(true);
    }
    // The engine's context and stream (cudarc's defaults: event tracking on).
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    // rgdn's kernels, loaded into that context, launching on that stream.
    let gpu = Gpu::from_stream(stream.clone())?;
    println!("GPU: {}", gpu.info());

    // The layer's tensors: views (buffer id, offset, ne, nb) over buffers 0..n. Here a host
    // "plan" with seeded random contents gives the sizes and the initial bytes; an engine
    // describes its own buffers the same way.
    let (shape, step, init) = (GdnShape::QWEN35_9B, Step::new(4, 3), LayerInit::default());
    let mut plan = HostMemory::new();
    let t = LayerTensors::alloc(&mut plan, &shape, &step, &init)?;
    t.fill_random(&mut plan, &shape, &mut StdRng::seed_from_u64(0x5eed), &init)?;
    // Inputs and weights are lent read-only: rgdn refuses any op that would write them.
    let read_only: BTreeSet<usize> =
        [t.qkv_mixed, t.cur, t.conv_weight, t.alpha_weight, t.beta_weight, t.dt_bias, t.ssm_a].iter().map(|x| x.buffer.0).collect();
    // The source row (`s_copy`) is host data: rgdn writes it to the device itself, so the value
    // it validated is the value the kernel reads.
    let source_rows = plan.index_values(&t.source_rows).ok_or("the plan has no source-row values")?;
    // What the step hands on (caches, products, the attention output): compared bit for bit.
    let observed = [t.conv_cache, t.ssm_cache, t.conv_out, t.q_norm, t.k_norm, t.alpha, t.beta_raw, t.beta, t.gate, t.attn_out];

    let mut results = Vec::new();
    for fused in [false, true] {
        // The engine's own allocations, filled with the same initial bytes for both runs.
        let mut slices: Vec<CudaSlice<u8>> =
            (0..plan.n_buffers()).map(|i| stream.clone_htod(plan.bytes(BufferId(i)))).collect::<Result<_, _>>()?;
        let mut mem = CallerMemory::new(&gpu);
        for (i, slice) in slices.iter_mut().enumerate() {
            let id = if i == t.source_rows.buffer.0 {
                mem.indices(&source_rows)?.buffer
            } else if read_only.contains(&i) {
                mem.bind(&*slice)?
            } else {
                mem.bind_mut(slice)?
            };
            // Ids follow the binding order, so they match the plan's.
            if id.0 != i {
                return Err(format!("buffer {i} was bound as {}", id.0).into());
            }
        }
        // Compiled against the bound buffers (what a fusion cannot take there stays unfused),
        // then planned once: every op validated, every launch prepared. A step is then the
        // binding check, the source-row check and the launches — an engine runs the same plan
        // every step, after `mem.set_indices` with the step's source rows.
        let fusions = if fused { Options::ON } else { Options::OFF };
        let plan = mem.plan(layer_step_with(&t, &shape, &step, &init, fusions, &mem)?)?;
        mem.run(&plan)?;
        let bytes = observed.iter().map(|x| mem.download(x.buffer)).collect::<Result<Vec<_>, _>>()?;
        println!("{}: {} launches on the engine's stream", if fused { "fused" } else { "unfused" }, plan.launches().len());
        if fused {
            print!("{}", plan.report());
        }
        results.push(bytes);
    }
    let differing: Vec<usize> =
        observed.iter().enumerate().filter(|&(k, _)| results[0][k] != results[1][k]).map(|(_, x)| x.buffer.0).collect();
    if differing.is_empty() {
        println!("fused vs unfused: all {} buffers the step hands on are identical, bit for bit", observed.len());
        Ok(true)
    } else {
        println!("fused vs unfused: buffers {differing:?} DIFFER");
        Ok(false)
    }
}
