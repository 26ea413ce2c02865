//! rgdn on an engine's own context, stream and buffers (`rgdn::engine`), on the GPU (custom
//! runner, `harness = false`): the fused and unfused layer steps on caller-owned `CudaSlice`s
//! are bit-identical to each other and to the unfused step on rgdn's own memory; every refusal
//! (read-only buffer, out-of-range source row, raw range past its allocation, foreign pointer)
//! is typed and launches nothing; the launch recorder is off unless asked for.
//!
//! The path an engine runs (issue 27): a cooperative grid that cannot be co-resident is refused
//! with the recorder on and off; GDN_LAYER_STEP is prepared and launched cooperatively with the
//! recorder off; planned steps (validate once, then index rules and launches) equal unfused
//! steps for changing source rows and refuse a bad row before any launch; a captured step
//! replays with new source rows bit for bit; two layer steps at once on two streams of one
//! context (each `Gpu` its own readiness state) give the serial bytes, 200 times (a hang there
//! is reported as a failure by a watchdog).
//!
//! Without a CUDA driver it prints that it SKIPPED and exits 0 — unless `RGDN_REQUIRE_GPU=1`.

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rgdn::Error;
use rgdn::engine::{CallerMemory, StepPlan, layer_step, layer_step_with};
use rgdn::fusion::Options;
use rgdn::gpu::{Gpu, KernelArg, LaunchDims, LaunchKind, ParamBlock, probe};
use rgdn::kernels::abi;
use rgdn::layer::{GdnShape, LayerInit, LayerTensors, Step};
use rgdn::memory::{DeviceMemory, HostMemory, Memory};
use rgdn::ops::{Cpy, GetRows, Op};
use rgdn::tensor::{BufferId, DType, Layout, Tensor};
use std::process::ExitCode;
use std::sync::Arc;

type Check = Result<(), String>;

fn main() -> ExitCode {
    let require_gpu = std::env::var("RGDN_REQUIRE_GPU").is_ok_and(|v| v == "1");
    if let Err(e) = probe() {
        let banner = "=".repeat(78);
        println!("{banner}\nGPU ENGINE TESTS SKIPPED: {e}\n(set RGDN_REQUIRE_GPU=1 to make a missing GPU a failure)\n{banner}");
        return if require_gpu { ExitCode::FAILURE } else { ExitCode::SUCCESS };
    }
    let setup = || -> Result<(Arc<CudaStream>, Gpu), Error> {
        let ctx = CudaContext::new(0)?;
        let stream = ctx.new_stream()?;
        let gpu = Gpu::from_stream(stream.clone())?;
        Ok((stream, gpu))
    };
    let (stream, gpu) = match setup() {
        Ok(s) => s,
        Err(e) => {
            println!("FAILED: no Gpu on the engine's stream: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut failed = 0;
    let mut run = |name: &str, check: Check| match check {
        Ok(()) => println!("ok      {name}"),
        Err(e) => {
            failed += 1;
            println!("FAILED  {name}: {e}");
        }
    };
    for (n_t, r) in [(1, 0), (4, 3), (8, 7), (16, 15)] {
        run(&format!("layer step T={n_t} R={r}: fused = unfused = rgdn-owned unfused"), layer_steps_agree(&stream, &gpu, n_t, r));
    }
    run("read-only buffers are never written", read_only_refused(&stream, &gpu));
    run("an out-of-range source row is refused before any launch", index_refused(&stream, &gpu));
    run("raw ranges are checked against the driver's allocation", raw_ranges_checked(&stream, &gpu));
    run("the launch recorder is off unless asked for", recorder_opt_in(&stream, &gpu));
    run("views (CudaView, CudaViewMut) bind their own range only", views_bind_their_range(&stream, &gpu));
    for on in [false, true] {
        run(
            &format!("a cooperative grid that cannot be co-resident is refused, recorder {}", if on { "on" } else { "off" }),
            gpu.with_recorder(on, || oversize_cooperative_grid_refused(&gpu)),
        );
    }
    run("a shape asked for with more shared memory still launches after a smaller one of the same entry", shared_limit_never_lowered(&gpu));
    run("GDN_LAYER_STEP is prepared cooperative and runs so with the recorder off", layer_step_is_cooperative(&gpu));
    run("planned steps with new source rows = unfused steps; a bad row refused before any launch", planned_steps(&stream, &gpu));
    run("a plan refuses a memory bound otherwise", plan_refuses_other_bindings(&stream, &gpu));
    run("a captured step replayed with new source rows = planned steps; a bad row refused", captured_steps(&gpu));
    run("two layer steps at once on two streams of one context, 200 times = serial", two_streams(&stream));
    run("engine::hf::GdnLayer from Hugging Face tensors: fused = unfused over steps; refusals name the buffer", hf_layer(&stream, &gpu));
    run(
        "engine::replay::GdnReplayLayer: new cells, a log move, commits: fused = unfused = sequential decode; refusals typed",
        hf_replay_layer(&stream, &gpu),
    );
    if failed > 0 {
        println!("{failed} engine check(s) FAILED");
        return ExitCode::FAILURE;
    }
    println!("all engine checks passed");
    ExitCode::SUCCESS
}

fn e(err: impl std::fmt::Display) -> String {
    err.to_string()
}

struct Plan {
    mem: HostMemory,
    t: LayerTensors,
    shape: GdnShape,
    step: Step,
    init: LayerInit,
}

fn plan(n_t: usize, r: usize) -> Result<Plan, String> {
    let (shape, step, init) = (GdnShape::QWEN35_9B, Step::new(n_t, r), LayerInit::default());
    let mut mem = HostMemory::new();
    let t = LayerTensors::alloc(&mut mem, &shape, &step, &init).map_err(e)?;
    t.fill_random(&mut mem, &shape, &mut StdRng::seed_from_u64(0xe1 + n_t as u64), &init).map_err(e)?;
    Ok(Plan { mem, t, shape, step, init })
}

fn upload_all(stream: &Arc<CudaStream>, mem: &HostMemory) -> Result<Vec<CudaSlice<u8>>, String> {
    (0..mem.n_buffers()).map(|i| stream.clone_htod(mem.bytes(BufferId(i))).map_err(e)).collect()
}

/// Binds every plan buffer in id order (the source rows as host values); returns all buffers'
/// bytes after the step.
fn run_on_caller(stream: &Arc<CudaStream>, gpu: &Gpu, p: &Plan, fused: bool) -> Result<Vec<Vec<u8>>, String> {
    let mut slices = upload_all(stream, &p.mem)?;
    let rows = p.mem.index_values(&p.t.source_rows).ok_or("no source rows")?;
    let mut mem = CallerMemory::new(gpu);
    for (i, s) in slices.iter_mut().enumerate() {
        let id = if i == p.t.source_rows.buffer.0 { mem.indices(&rows).map_err(e)?.buffer } else { mem.bind_mut(s).map_err(e)? };
        if id.0 != i {
            return Err(format!("buffer {i} bound as {}", id.0));
        }
    }
    let ops = layer_step(&p.t, &p.shape, &p.step, &p.init, fused, &mem).map_err(e)?;
    mem.enqueue(&ops).map_err(e)?;
    (0..mem.n_buffers()).map(|i| mem.download(BufferId(i)).map_err(e)).collect()
}

fn layer_steps_agree(stream: &Arc<CudaStream>, gpu: &Gpu, n_t: usize, r: usize) -> Check {
    let p = plan(n_t, r)?;
    let unfused = run_on_caller(stream, gpu, &p, false)?;
    let fused = run_on_caller(stream, gpu, &p, true)?;
    // rgdn's own memory, same ops: the engine path must not change a byte.
    let dev = DeviceMemory::upload(gpu, &p.mem).map_err(e)?;
    for op in layer_step(&p.t, &p.shape, &p.step, &p.init, false, &dev).map_err(e)? {
        op.launch(gpu, &dev).map_err(e)?;
    }
    let owned = dev.download(gpu).map_err(e)?;
    for (i, bytes) in unfused.iter().enumerate() {
        if bytes.as_slice() != owned.bytes(BufferId(i)) {
            return Err(format!("buffer {i}: the unfused step on caller memory differs from rgdn-owned memory"));
        }
    }
    let t = &p.t;
    let observed = [t.conv_cache, t.ssm_cache, t.conv_out, t.q_norm, t.k_norm, t.alpha, t.beta_raw, t.beta, t.gate, t.attn_out];
    match observed.iter().find(|x| unfused[x.buffer.0] != fused[x.buffer.0]) {
        Some(x) => Err(format!("buffer {}: fused differs from unfused", x.buffer.0)),
        None => Ok(()),
    }
}

fn f32s(buffer: BufferId, n: usize) -> Tensor {
    Tensor::new(buffer, Layout::contiguous(DType::F32, [n, 1, 1, 1]))
}

fn read_only_refused(stream: &Arc<CudaStream>, gpu: &Gpu) -> Check {
    let src = stream.clone_htod(&[1.5f32; 64]).map_err(e)?;
    let mut dst = stream.alloc_zeros::<f32>(64).map_err(e)?;
    let mut mem = CallerMemory::new(gpu);
    let a = mem.bind(&src).map_err(e)?;
    let b = mem.bind_mut(&mut dst).map_err(e)?;
    // Writing the read-only buffer: refused.
    match mem.launch(&Cpy { src: f32s(b, 64), dst: f32s(a, 64) }) {
        Err(Error::Invalid { what, .. }) if what.contains("read-only") => {}
        other => return Err(format!("a write into a read-only buffer gave {other:?}")),
    }
    // Reading it: fine, and the copy arrives.
    mem.launch(&Cpy { src: f32s(a, 64), dst: f32s(b, 64) }).map_err(e)?;
    let out = mem.download(b).map_err(e)?;
    let src_after = mem.download(a).map_err(e)?;
    drop(mem);
    if out.chunks_exact(4).any(|w| f32::from_le_bytes(w.try_into().unwrap()) != 1.5) || src_after.len() != 256 {
        return Err("the copy from a read-only buffer did not arrive".into());
    }
    Ok(())
}

fn index_refused(stream: &Arc<CudaStream>, gpu: &Gpu) -> Check {
    let src = stream.clone_htod(&[0f32; 4 * 8]).map_err(e)?;
    let mut dst = stream.alloc_zeros::<f32>(8).map_err(e)?;
    let mut engine_rows = stream.alloc_zeros::<i32>(4).map_err(e)?;
    let mut mem = CallerMemory::new(gpu);
    let s = mem.bind(&src).map_err(e)?;
    let d = mem.bind_mut(&mut dst).map_err(e)?;
    let rows_src = Tensor::new(s, Layout::contiguous(DType::F32, [8, 4, 1, 1]));
    let dst_t = Tensor::new(d, Layout::contiguous(DType::F32, [8, 1, 1, 1]));
    let was = gpu.set_recording(true);
    gpu.take_launches().map_err(e)?;
    let bad = mem.indices(&[4]).map_err(e)?;
    let refused = mem.launch(&GetRows { src: rows_src, rows: bad, dst: dst_t });
    let good = mem.bind_indices(&mut engine_rows, &[3]).map_err(e)?;
    let accepted = mem.launch(&GetRows { src: rows_src, rows: good, dst: dst_t });
    mem.set_indices(&good, &[7]).map_err(e)?;
    let refused_after_set = mem.launch(&GetRows { src: rows_src, rows: good, dst: dst_t });
    let launched = gpu.take_launches().map_err(e)?.len();
    gpu.set_recording(was);
    if !matches!(refused, Err(Error::IndexOutOfRange { index: 4, .. })) {
        return Err(format!("row 4 of 4 gave {refused:?}"));
    }
    if !matches!(refused_after_set, Err(Error::IndexOutOfRange { index: 7, .. })) {
        return Err(format!("row 7 of 4 (set_indices) gave {refused_after_set:?}"));
    }
    accepted.map_err(e)?;
    if launched != 1 {
        return Err(format!("{launched} launches recorded, expected only the valid one"));
    }
    // The engine's index buffer holds the values rgdn validated.
    drop(mem);
    let mut rows = [0i32; 4];
    stream.memcpy_dtoh(&engine_rows, &mut rows).map_err(e)?;
    stream.synchronize().map_err(e)?;
    if rows[0] != 7 {
        return Err(format!("the engine's index buffer holds {rows:?}, expected 7 first"));
    }
    Ok(())
}

fn raw_ranges_checked(stream: &Arc<CudaStream>, gpu: &Gpu) -> Check {
    let buf = stream.alloc_zeros::<u8>(4096).map_err(e)?;
    let ptr = {
        let (ptr, _order) = buf.device_ptr(stream);
        ptr
    };
    let mut mem = CallerMemory::new(gpu);
    // SAFETY: `buf` outlives `mem` and nothing else uses it meanwhile.
    unsafe {
        mem.bind_raw(ptr + 1024, 1024, true).map_err(e)?;
        if !matches!(mem.bind_raw(ptr + 1024, 4096, true), Err(Error::Invalid { .. })) {
            return Err("a raw range past its allocation was accepted".into());
        }
        let host = [0u8; 64];
        if !matches!(mem.bind_raw(host.as_ptr() as u64, 64, false), Err(Error::Invalid { .. })) {
            return Err("a host pointer was accepted as device memory".into());
        }
    }
    if mem.n_buffers() != 1 {
        return Err(format!("{} buffers bound, expected 1", mem.n_buffers()));
    }
    Ok(())
}

fn recorder_opt_in(stream: &Arc<CudaStream>, gpu: &Gpu) -> Check {
    let src = stream.clone_htod(&[2f32; 16]).map_err(e)?;
    let mut dst = stream.alloc_zeros::<f32>(16).map_err(e)?;
    let mut mem = CallerMemory::new(gpu);
    let a = mem.bind(&src).map_err(e)?;
    let b = mem.bind_mut(&mut dst).map_err(e)?;
    let copy: Box<dyn Op> = Box::new(Cpy { src: f32s(a, 16), dst: f32s(b, 16) });
    let was = gpu.set_recording(false);
    gpu.take_launches().map_err(e)?;
    mem.enqueue(std::slice::from_ref(&copy)).map_err(e)?;
    let unrecorded = gpu.take_launches().map_err(e)?.len();
    gpu.set_recording(true);
    mem.enqueue(std::slice::from_ref(&copy)).map_err(e)?;
    let recorded = gpu.take_launches().map_err(e)?.len();
    gpu.set_recording(was);
    gpu.synchronize().map_err(e)?;
    if (unrecorded, recorded) != (0, 1) {
        return Err(format!("recorder off kept {unrecorded} launches, on kept {recorded}; expected 0 and 1"));
    }
    Ok(())
}

fn views_bind_their_range(stream: &Arc<CudaStream>, gpu: &Gpu) -> Check {
    let src = stream.clone_htod(&[3f32; 64]).map_err(e)?;
    let mut dst = stream.alloc_zeros::<f32>(128).map_err(e)?;
    {
        let mut mem = CallerMemory::new(gpu);
        let a = mem.bind_view(src.slice(0..64)).map_err(e)?;
        let b = mem.bind_view_mut(dst.slice_mut(64..128)).map_err(e)?;
        // The view holds 64 elements (256 bytes): 64 elements from byte 4 on reach past it.
        let shifted = f32s(b, 64).view([64, 1, 1, 1], [4, 256, 256, 256], 4);
        if !matches!(mem.launch(&Cpy { src: f32s(a, 64), dst: shifted }), Err(Error::OutOfBounds { .. })) {
            return Err("a copy past the end of a view was not refused".into());
        }
        mem.launch(&Cpy { src: f32s(a, 64), dst: f32s(b, 64) }).map_err(e)?;
        gpu.synchronize().map_err(e)?;
    }
    let mut out = [0f32; 128];
    stream.memcpy_dtoh(&dst, &mut out).map_err(e)?;
    stream.synchronize().map_err(e)?;
    if out[..64].iter().any(|&v| v != 0.0) || out[64..].iter().any(|&v| v != 3.0) {
        return Err("the copy did not land exactly in the bound view".into());
    }
    Ok(())
}

/// Every buffer of a layer's rgdn-owned memory after `ops` ran once from `p`'s bytes with
/// source rows `rows` (recorder off, as an engine runs).
fn run_owned(gpu: &Gpu, p: &Plan, ops: &[Box<dyn Op>], rows: &[i32]) -> Result<Vec<Vec<u8>>, String> {
    let mut dev = DeviceMemory::upload(gpu, &p.mem).map_err(e)?;
    dev.write(gpu, p.t.source_rows.buffer, &i32_bytes(rows)).map_err(e)?;
    gpu.with_recorder(false, || ops.iter().try_for_each(|op| op.launch(gpu, &dev))).map_err(e)?;
    all_buffers(gpu, &dev)
}

fn all_buffers(gpu: &Gpu, dev: &DeviceMemory) -> Result<Vec<Vec<u8>>, String> {
    (0..dev.n_buffers()).map(|i| dev.download_buffer(gpu, BufferId(i)).map_err(e)).collect()
}

fn i32_bytes(values: &[i32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn observed(t: &LayerTensors) -> [Tensor; 10] {
    [t.conv_cache, t.ssm_cache, t.conv_out, t.q_norm, t.k_norm, t.alpha, t.beta_raw, t.beta, t.gate, t.attn_out]
}

fn same_observed(t: &LayerTensors, a: &[Vec<u8>], b: &[Vec<u8>], what: &str) -> Check {
    match observed(t).iter().find(|x| a[x.buffer.0] != b[x.buffer.0]) {
        Some(x) => Err(format!("{what}: buffer {} differs", x.buffer.0)),
        None => Ok(()),
    }
}

/// SCALE launched cooperatively (its plain launch would be harmless: no block waits on
/// another) with one block more than fit the device at once: refused with
/// `Error::NotCoResident`, nothing launched; the largest co-resident grid runs. A launch path
/// that let the recorder choose a plain launch would run the oversize grid.
fn oversize_cooperative_grid_refused(gpu: &Gpu) -> Check {
    let n = 1024usize;
    let buf = gpu.upload(&vec![0u8; 4 * n]).map_err(e)?;
    let params = abi::ScaleParams { src: buf.device_ptr(), dst: buf.device_ptr(), n: n as u64, scale: 1.0, bias: 0.0 };
    let args = [KernelArg::Params(ParamBlock::of(&params).map_err(e)?)];
    let co = gpu.co_resident_blocks(abi::SCALE_ENTRY, abi::SCALE_BLOCK, 0).map_err(e)?;
    let dims = |grid: u32| LaunchDims::new((grid, 1, 1), (abi::SCALE_BLOCK, 1, 1));
    let recording = gpu.is_recording();
    gpu.take_launches().map_err(e)?;
    // SAFETY: `buf` holds n f32 (in place: src = dst, as SCALE allows); the kernel loops over n
    // elements whatever the grid.
    let refused = unsafe { gpu.launch_cooperative(abi::SCALE_ENTRY, dims(co + 1), &args) };
    let logged = gpu.take_launches().map_err(e)?.len();
    match refused {
        Err(Error::NotCoResident { grid, co_resident, .. }) if grid == co as u64 + 1 && co_resident == co => {}
        other => return Err(format!("a cooperative grid of {} blocks ({co} co-resident) gave {other:?}", co + 1)),
    }
    if logged != 0 {
        return Err(format!("the refused launch left {logged} log records"));
    }
    // SAFETY: as above.
    unsafe { gpu.launch_cooperative(abi::SCALE_ENTRY, dims(co), &args) }.map_err(e)?;
    gpu.synchronize().map_err(e)?;
    let want = usize::from(recording);
    let logged = gpu.take_launches().map_err(e)?.len();
    if logged != want {
        return Err(format!("the co-resident launch left {logged} log records, expected {want}"));
    }
    Ok(())
}

/// [seq-batch] The dynamic shared-memory limit is one value per function: asking for a smaller
/// shape after a larger one must not lower it under the larger shape's cached co-resident grid
/// (it did once: CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE for the batched layer step in the GPU
/// suite, results/2026-12-02-h200-pipeline/).
fn shared_limit_never_lowered(gpu: &Gpu) -> Check {
    let (large, small) = (100 * 1024u32, 60 * 1024u32);
    let n = 1024usize;
    let buf = gpu.upload(&vec![0u8; 4 * n]).map_err(e)?;
    let params = abi::ScaleParams { src: buf.device_ptr(), dst: buf.device_ptr(), n: n as u64, scale: 1.0, bias: 0.0 };
    let args = [KernelArg::Params(ParamBlock::of(&params).map_err(e)?)];
    let co_large = gpu.co_resident_blocks(abi::SCALE_ENTRY, abi::SCALE_BLOCK, large).map_err(e)?;
    let co_small = gpu.co_resident_blocks(abi::SCALE_ENTRY, abi::SCALE_BLOCK, small).map_err(e)?;
    if co_large == 0 || co_small < co_large {
        return Err(format!("co-resident blocks: {co_large} with {large} shared bytes, {co_small} with {small}"));
    }
    let dims = LaunchDims::new((co_large, 1, 1), (abi::SCALE_BLOCK, 1, 1)).with_shared_bytes(large);
    // SAFETY: `buf` holds n f32 (in place: src = dst, as SCALE allows); the kernel loops over n
    // elements whatever the grid and reads no shared memory.
    unsafe { gpu.launch_cooperative(abi::SCALE_ENTRY, dims, &args) }.map_err(e)?;
    gpu.synchronize().map_err(e)
}

fn layer_step_is_cooperative(gpu: &Gpu) -> Check {
    let p = plan(4, 3)?;
    let dev = DeviceMemory::upload(gpu, &p.mem).map_err(e)?;
    let fused = layer_step_with(&p.t, &p.shape, &p.step, &p.init, Options::ALL, &dev).map_err(e)?;
    let plan = StepPlan::on_device(gpu, &dev, fused).map_err(e)?;
    let kinds: Vec<(&str, LaunchKind)> = plan.launches().iter().map(|l| (l.entry(), l.kind())).collect();
    let [(entry, LaunchKind::Cooperative)] = kinds.as_slice() else {
        return Err(format!("the fused step prepared {kinds:?}, expected one cooperative GDN_LAYER_STEP launch"));
    };
    if !entry.starts_with("gdn_layer_step") {
        return Err(format!("the fused step launches {entry}"));
    }
    let unfused_ops = layer_step(&p.t, &p.shape, &p.step, &p.init, false, &dev).map_err(e)?;
    gpu.with_recorder(false, || plan.launch(gpu, &dev)).map_err(e)?;
    let fused = all_buffers(gpu, &dev)?;
    let unfused = run_owned(gpu, &p, &unfused_ops, &p.step.source_rows_i32())?;
    same_observed(&p.t, &unfused, &fused, "the cooperative layer step vs the unfused chain")
}

/// Binds every buffer of `p` in id order, the source rows as the engine's own index buffer
/// (`idx`, so that the binding is the same address in every memory bound this way).
fn bind_all<'a>(
    gpu: &'a Gpu,
    p: &Plan,
    slices: &'a mut [CudaSlice<u8>],
    idx: &'a mut CudaSlice<i32>,
    rows: &[i32],
) -> Result<(CallerMemory<'a>, Tensor), String> {
    let mut mem = CallerMemory::new(gpu);
    let mut index = None;
    let mut idx = Some(idx);
    for (i, s) in slices.iter_mut().enumerate() {
        let id = if i == p.t.source_rows.buffer.0 {
            let t = mem.bind_indices(idx.take().ok_or("one index buffer")?, rows).map_err(e)?;
            index = Some(t);
            t.buffer
        } else {
            mem.bind_mut(s).map_err(e)?
        };
        if id.0 != i {
            return Err(format!("buffer {i} bound as {}", id.0));
        }
    }
    Ok((mem, index.ok_or("no index buffer")?))
}

fn planned_steps(stream: &Arc<CudaStream>, gpu: &Gpu) -> Check {
    let p = plan(8, 7)?;
    let rows_seq: [i32; 5] = [3, 0, 7, 5, 1];
    // Unfused, one enqueue per step (full validation each time).
    let mut slices = upload_all(stream, &p.mem)?;
    let mut idx = stream.alloc_zeros::<i32>(4).map_err(e)?;
    let (mut mem, index) = bind_all(gpu, &p, &mut slices, &mut idx, &p.step.source_rows_i32())?;
    let unfused = layer_step(&p.t, &p.shape, &p.step, &p.init, false, &mem).map_err(e)?;
    for r in rows_seq {
        mem.set_indices(&index, &[r]).map_err(e)?;
        mem.enqueue(&unfused).map_err(e)?;
    }
    let want: Vec<Vec<u8>> = (0..mem.n_buffers()).map(|i| mem.download(BufferId(i)).map_err(e)).collect::<Result<_, _>>()?;
    drop(mem);
    // Fused, planned once.
    let mut slices = upload_all(stream, &p.mem)?;
    let mut idx = stream.alloc_zeros::<i32>(4).map_err(e)?;
    let (mut mem, index) = bind_all(gpu, &p, &mut slices, &mut idx, &p.step.source_rows_i32())?;
    let plan = mem.plan(layer_step_with(&p.t, &p.shape, &p.step, &p.init, Options::ON, &mem).map_err(e)?).map_err(e)?;
    if plan.report().fired("layer_step") != 1 {
        return Err(format!("the default fusions did not make one layer step:\n{}", plan.report()));
    }
    for r in rows_seq {
        mem.set_indices(&index, &[r]).map_err(e)?;
        mem.run(&plan).map_err(e)?;
    }
    let got: Vec<Vec<u8>> = (0..mem.n_buffers()).map(|i| mem.download(BufferId(i)).map_err(e)).collect::<Result<_, _>>()?;
    same_observed(&p.t, &want, &got, "five planned fused steps vs five unfused enqueues")?;
    // A row past the cache: refused by the index rules, nothing launched, nothing changed.
    mem.set_indices(&index, &[p.step.cache_rows() as i32]).map_err(e)?;
    let (refused, logged) = gpu.with_recorder(true, || {
        let _ = gpu.take_launches();
        (mem.run(&plan), gpu.take_launches().map(|l| l.len()))
    });
    if !matches!(refused, Err(Error::IndexOutOfRange { .. })) {
        return Err(format!("a source row past the cache gave {refused:?}"));
    }
    if logged.map_err(e)? != 0 {
        return Err("the refused step launched".into());
    }
    let after: Vec<Vec<u8>> = (0..mem.n_buffers()).map(|i| mem.download(BufferId(i)).map_err(e)).collect::<Result<_, _>>()?;
    same_observed(&p.t, &got, &after, "a refused step changed memory")
}

fn plan_refuses_other_bindings(stream: &Arc<CudaStream>, gpu: &Gpu) -> Check {
    let p = plan(4, 3)?;
    let rows = p.step.source_rows_i32();
    let mut slices = upload_all(stream, &p.mem)?;
    let mut idx = stream.alloc_zeros::<i32>(4).map_err(e)?;
    let plan = {
        let (mem, _) = bind_all(gpu, &p, &mut slices, &mut idx, &rows)?;
        mem.plan(layer_step(&p.t, &p.shape, &p.step, &p.init, true, &mem).map_err(e)?).map_err(e)?
    };
    // The same buffers bound the same way in a new memory: the plan runs.
    {
        let (mem, _) = bind_all(gpu, &p, &mut slices, &mut idx, &rows)?;
        mem.run(&plan).map_err(|err| format!("the same bindings were refused: {err}"))?;
        gpu.synchronize().map_err(e)?;
    }
    // The conv cache moved to another allocation: refused.
    let cache = p.t.conv_cache.buffer.0;
    let mut moved = upload_all(stream, &p.mem)?;
    std::mem::swap(&mut slices[cache], &mut moved[cache]);
    let refused = {
        let (mem, _) = bind_all(gpu, &p, &mut slices, &mut idx, &rows)?;
        mem.run(&plan)
    };
    if !matches!(&refused, Err(Error::Invalid { what, .. }) if what.contains("not bound as")) {
        return Err(format!("a plan run on other buffers gave {refused:?}"));
    }
    Ok(())
}

fn captured_steps(gpu: &Gpu) -> Check {
    let p = plan(4, 3)?;
    let rows_seq: [i32; 4] = [3, 0, 2, 1];
    let index = p.t.source_rows.buffer;
    let steps = |capture: bool| -> Result<(Vec<Vec<u8>>, DeviceMemory, StepPlan), String> {
        let mut dev = DeviceMemory::upload(gpu, &p.mem).map_err(e)?;
        let plan =
            StepPlan::on_device(gpu, &dev, layer_step_with(&p.t, &p.shape, &p.step, &p.init, Options::ALL, &dev).map_err(e)?).map_err(e)?;
        // Functions loaded, the readiness state settled: a first step from these bytes is
        // what both arms' first steps redo below.
        let graph = if capture { Some(plan.capture(gpu, &dev).map_err(e)?) } else { None };
        for r in rows_seq {
            dev.write(gpu, index, &i32_bytes(&[r])).map_err(e)?;
            match &graph {
                Some(g) => g.replay(&dev).map_err(e)?,
                None => plan.launch(gpu, &dev).map_err(e)?,
            }
        }
        if let Some(g) = &graph {
            dev.write(gpu, index, &i32_bytes(&[p.step.cache_rows() as i32])).map_err(e)?;
            let before = all_buffers(gpu, &dev)?;
            if !matches!(g.replay(&dev), Err(Error::IndexOutOfRange { .. })) {
                return Err("a replay with a source row past the cache was not refused".into());
            }
            gpu.synchronize().map_err(e)?;
            same_observed(&p.t, &before, &all_buffers(gpu, &dev)?, "a refused replay changed memory")?;
            dev.write(gpu, index, &i32_bytes(&[rows_seq[3]])).map_err(e)?;
        }
        Ok((all_buffers(gpu, &dev)?, dev, plan))
    };
    let (planned, ..) = gpu.with_recorder(false, || steps(false))?;
    let (replayed, ..) = gpu.with_recorder(false, || steps(true))?;
    same_observed(&p.t, &planned, &replayed, "four graph replays vs four planned steps")
}

/// Two engines' batches at once: two `Gpu`s on two streams of one context (each its own
/// readiness state), each stepping a fused 9B layer (T = 4 and T = 16), launched back to back
/// without a wait between, 200 times, recorder off. Cooperative launches keep every block of
/// each grid resident; plain launches could leave one step's blocks spinning on flags of blocks
/// the other step keeps off the SMs — a hang, which the watchdog reports as a failure.
fn two_streams(stream: &Arc<CudaStream>) -> Check {
    use std::sync::atomic::{AtomicBool, Ordering};
    let ctx = stream.context().clone();
    let g1 = Gpu::from_stream(ctx.new_stream().map_err(e)?).map_err(e)?;
    let g2 = Gpu::from_stream(ctx.new_stream().map_err(e)?).map_err(e)?;
    if g1.grid_sync() == g2.grid_sync() || g1.is_recording() || g2.is_recording() {
        return Err("two Gpus must have their own readiness state and start with the recorder off".into());
    }
    let (pa, pb) = (plan(4, 3)?, plan(16, 15)?);
    let setup = |g: &Gpu, p: &Plan| -> Result<(DeviceMemory, StepPlan), String> {
        let dev = DeviceMemory::upload(g, &p.mem).map_err(e)?;
        let step = layer_step_with(&p.t, &p.shape, &p.step, &p.init, Options::ALL, &dev).map_err(e)?;
        let plan = StepPlan::on_device(g, &dev, step).map_err(e)?;
        if plan.launches().iter().map(|l| l.kind()).collect::<Vec<_>>() != [LaunchKind::Cooperative] {
            return Err("the fused step is not one cooperative launch".into());
        }
        Ok((dev, plan))
    };
    let ((mut da, fa), (mut db, fb)) = (setup(&g1, &pa)?, setup(&g2, &pb)?);
    let reset = |g: &Gpu, dev: &mut DeviceMemory, p: &Plan| -> Check {
        (0..p.mem.n_buffers()).try_for_each(|i| dev.write(g, BufferId(i), p.mem.bytes(BufferId(i))).map_err(e))
    };
    // Serial: one step, then the other.
    fa.launch(&g1, &da).map_err(e)?;
    g1.synchronize().map_err(e)?;
    fb.launch(&g2, &db).map_err(e)?;
    g2.synchronize().map_err(e)?;
    let (want_a, want_b) = (all_buffers(&g1, &da)?, all_buffers(&g2, &db)?);
    let done = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let done = done.clone();
        std::thread::spawn(move || {
            for _ in 0..600 {
                std::thread::sleep(std::time::Duration::from_millis(500));
                if done.load(Ordering::Relaxed) {
                    return;
                }
            }
            println!("FAILED  two layer steps at once on two streams: no progress in 300 s (a hang)");
            std::process::exit(1);
        })
    };
    let result = (|| -> Check {
        for i in 0..200 {
            reset(&g1, &mut da, &pa)?;
            reset(&g2, &mut db, &pb)?;
            g1.synchronize().map_err(e)?;
            g2.synchronize().map_err(e)?;
            fa.launch(&g1, &da).map_err(e)?;
            fb.launch(&g2, &db).map_err(e)?;
            g1.synchronize().map_err(e)?;
            g2.synchronize().map_err(e)?;
            same_observed(&pa.t, &want_a, &all_buffers(&g1, &da)?, &format!("iteration {i}, stream 1 (T = 4)"))?;
            same_observed(&pb.t, &want_b, &all_buffers(&g2, &db)?, &format!("iteration {i}, stream 2 (T = 16)"))?;
        }
        Ok(())
    })();
    done.store(true, Ordering::Relaxed);
    let _ = watchdog.join();
    result
}

/// The layer an engine builds from its checkpoint (`engine::hf`), fused (one GDN_LAYER_STEP
/// where it applies) and unfused, on the engine's own cudarc buffers: three steps with changing
/// source rows, for one sequence (T = 4) and for two (T = 2; the second step's sequence 0 reads
/// row 3, which sequence 1 writes: a fused op that refuses that index falls back to the unfused
/// plan for the step): every output and both caches bit for bit; the fused plan's report says the layer step fired; a plan per shape; a buffer of
/// the wrong length or at an unaligned address is refused, naming it.
fn hf_layer(stream: &Arc<CudaStream>, gpu: &Gpu) -> Check {
    use rgdn::engine::hf::{GdnConfig, GdnLayer, KeyHeads, StepRows};
    let cfg = GdnConfig::qwen3_5_9b(KeyHeads::Modulo);
    let shape = cfg.shape().map_err(e)?;
    let (c, en) = (shape.channels(), shape.n_embd);
    let mut rng = StdRng::seed_from_u64(0x27);
    let ck = Checkpoint::new(&shape, &mut rng);
    let weights = ck.weights();
    let mut floats = |n: usize, scale: f32| -> Vec<f32> { (0..n).map(|_| rng.random_range(-scale..scale)).collect() };
    let mut fused = GdnLayer::new(gpu, cfg, &weights, Options::ON).map_err(e)?;
    let mut unfused = GdnLayer::new(gpu, cfg, &weights, Options::OFF).map_err(e)?;
    let (cells, rollback) = (2usize, 3usize);
    let cache_rows = cells * (1 + rollback);
    for (n_t, sources) in [(4usize, vec![vec![0u32], vec![5], vec![2]]), (2, vec![vec![0, 1], vec![3, 6], vec![7, 4]])] {
        let n_s = sources[0].len();
        let conv0 = floats(shape.conv_row() * cache_rows, 1.0);
        let ssm0 = floats(shape.ssm_row() * cache_rows, 0.05);
        let qkv = floats(c * n_t * n_s, 1.0);
        let hidden = floats(en * n_t * n_s, 1.0);
        let mut results = Vec::new();
        for layer in [&mut fused, &mut unfused] {
            let mut conv = stream.clone_htod(&conv0).map_err(e)?;
            let mut ssm = stream.clone_htod(&ssm0).map_err(e)?;
            let (q, h) = (stream.clone_htod(&qkv).map_err(e)?, stream.clone_htod(&hidden).map_err(e)?);
            let mut outs = Vec::new();
            for src in &sources {
                let rows = StepRows { n_tokens: n_t, cells, rollback, kv_head: 0, sources: src, zero_cell: None };
                let out = layer.step(gpu, conv.slice_mut(..), ssm.slice_mut(..), q.slice(..), h.slice(..), &rows).map_err(e)?;
                let mut host = vec![0f32; out.len()];
                stream.memcpy_dtoh(&out, &mut host).map_err(e)?;
                outs.push(host);
            }
            let mut caches = (vec![0f32; conv0.len()], vec![0f32; ssm0.len()]);
            stream.memcpy_dtoh(&conv, &mut caches.0).map_err(e)?;
            stream.memcpy_dtoh(&ssm, &mut caches.1).map_err(e)?;
            stream.synchronize().map_err(e)?;
            results.push((outs, caches));
        }
        let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        let (f, u) = (&results[0], &results[1]);
        for (i, (fo, uo)) in f.0.iter().zip(&u.0).enumerate() {
            if bits(fo) != bits(uo) {
                return Err(format!("n_t = {n_t}, n_s = {n_s}: step {i}'s output differs fused vs unfused"));
            }
        }
        if bits(&f.1.0) != bits(&u.1.0) || bits(&f.1.1) != bits(&u.1.1) {
            return Err(format!("n_t = {n_t}, n_s = {n_s}: the caches differ fused vs unfused"));
        }
        let report = fused.report().ok_or("no report after a step")?;
        if n_s == 1 && report.fired("layer_step") != 1 {
            return Err(format!("the fused layer's report:\n{report}"));
        }
    }
    // [seq-batch] The two-sequence steps with rows [3, 6] and [7, 4] read a row the other sequence
    // writes (2 cells, 1 + 3 snapshot slots: sequence s writes rows s, s + 2, s + 4, s + 6): the
    // fused ops' index rules refuse that (Aliasing) before any launch, so those steps ran on
    // an unfused plan of the same shape — a third plan in the fused layer, its report the
    // unfused one (the last step was [7, 4]) — and still equal the unfused layer (above).
    if (fused.planned_shapes(), unfused.planned_shapes()) != (3, 2) {
        return Err(format!(
            "{} and {} plans for two shapes (the fused layer: two fused, one unfused fallback)",
            fused.planned_shapes(),
            unfused.planned_shapes()
        ));
    }
    let last = fused.report().ok_or("no report after a step")?;
    if rgdn::fusion::REGISTRY.iter().any(|f| last.fired(f.name) != 0) {
        return Err(format!("the rows [7, 4] step should have run unfused:\n{last}"));
    }
    // Refusals name the engine's buffer.
    let rows = StepRows { n_tokens: 1, cells, rollback, kv_head: 0, sources: &[0], zero_cell: None };
    let mut conv = stream.alloc_zeros::<f32>(shape.conv_row() * cache_rows + 1).map_err(e)?;
    let mut ssm = stream.alloc_zeros::<f32>(shape.ssm_row() * cache_rows).map_err(e)?;
    let (q, h) = (stream.alloc_zeros::<f32>(c).map_err(e)?, stream.alloc_zeros::<f32>(en).map_err(e)?);
    let long = fused.step(gpu, conv.slice_mut(..), ssm.slice_mut(..), q.slice(..), h.slice(..), &rows).map(|_| ());
    if !matches!(&long, Err(Error::Invalid { what, .. }) if what.contains("conv_cache")) {
        return Err(format!("a conv cache one float too long gave {long:?}"));
    }
    let unaligned = fused.step(gpu, conv.slice_mut(1..), ssm.slice_mut(..), q.slice(..), h.slice(..), &rows).map(|_| ());
    if !matches!(&unaligned, Err(Error::Invalid { what, .. }) if what.contains("conv_cache") && what.contains("aligned")) {
        return Err(format!("a conv cache at an unaligned address gave {unaligned:?}"));
    }
    Ok(())
}

/// A Qwen3.5-9B layer's checkpoint tensors, random (b and a in BF16), as Hugging Face names them.
struct Checkpoint {
    conv1d: Vec<f32>,
    b: Vec<half::bf16>,
    a: Vec<half::bf16>,
    dt_bias: Vec<f32>,
    a_log: Vec<f32>,
    shapes: ([usize; 3], [usize; 2], [usize; 1]),
}

impl Checkpoint {
    fn new(shape: &GdnShape, rng: &mut StdRng) -> Checkpoint {
        use half::bf16;
        let (c, k, en, hv) = (shape.channels(), shape.d_conv, shape.n_embd, shape.n_v_heads);
        let mut floats = |n: usize, scale: f32| -> Vec<f32> { (0..n).map(|_| rng.random_range(-scale..scale)).collect() };
        let conv1d = floats(c * k, 0.5);
        let b: Vec<bf16> = floats(hv * en, 0.05).into_iter().map(bf16::from_f32).collect();
        let a: Vec<bf16> = floats(hv * en, 0.05).into_iter().map(bf16::from_f32).collect();
        let (dt_bias, a_log) = (floats(hv, 1.0), floats(hv, 1.0));
        Checkpoint { conv1d, b, a, dt_bias, a_log, shapes: ([c, 1, k], [hv, en], [hv]) }
    }

    fn weights(&self) -> rgdn::engine::hf::GdnWeights<'_> {
        use rgdn::engine::hf::{BetaAlpha, Decay, Floats, GdnWeights, HfTensor};
        let (s_conv, s_proj, s_head) = (&self.shapes.0, &self.shapes.1, &self.shapes.2);
        GdnWeights {
            conv1d_weight: HfTensor { data: Floats::F32(&self.conv1d), shape: s_conv },
            beta_alpha: BetaAlpha::Split {
                in_proj_b: HfTensor { data: Floats::BF16(&self.b), shape: s_proj },
                in_proj_a: HfTensor { data: Floats::BF16(&self.a), shape: s_proj },
            },
            dt_bias: HfTensor { data: Floats::F32(&self.dt_bias), shape: s_head },
            decay: Decay::ALog(HfTensor { data: Floats::F32(&self.a_log), shape: s_head }),
        }
    }
}

/// After a call of the replay script: its output (a step's; empty for a commit), the conv and
/// ssm caches.
type AfterCall = (Vec<f32>, Vec<f32>, Vec<f32>);

/// One call of the replay script: a step on cells `kv_head …` with these counts and new cells,
/// or a commit of cells with their counts.
enum Call {
    Step(usize, &'static [usize], &'static [usize]),
    Commit(&'static [usize], &'static [usize]),
}

/// [replay] `engine::replay::GdnReplayLayer` at 9B, T = 4, M = 4, on caches that start with
/// random bits: a script of steps and commits — new cells (zeroed by the layer), a step whose
/// replaying cells hold their logs in both sets (cell 0's log moves), commits of non-adjacent
/// cells (two commit steps), a step after a commit, a final commit of every cell. The fused
/// layer (defaults: `replay_verify` must fire) and the unfused one agree bit for bit on every
/// output and both caches after every call; every output of every accepted token, and every
/// cell's state after the final commit, equal a sequential decode of the accepted tokens (a
/// `GdnLayer` snapshot step of one token on the cell's own row, unfused, from a zero state).
/// Bad counts are typed errors. The CPU certificate of the same layer in many more
/// compositions is `tests/engine_replay.rs`.
fn hf_replay_layer(stream: &Arc<CudaStream>, gpu: &Gpu) -> Check {
    use rgdn::engine::hf::{GdnConfig, GdnLayer, KeyHeads, StepRows};
    use rgdn::engine::replay::{GdnReplayLayer, ReplayRows};
    let cfg = GdnConfig::qwen3_5_9b(KeyHeads::Modulo);
    let shape = cfg.shape().map_err(e)?;
    let (c, en, hvd) = (shape.channels(), shape.n_embd, shape.n_v_heads * shape.head_dim);
    let (n_t, cells) = (4usize, 4usize);
    let mut rng = StdRng::seed_from_u64(0x26);
    let ck = Checkpoint::new(&shape, &mut rng);
    let weights = ck.weights();
    let mut floats = |n: usize, scale: f32| -> Vec<f32> { (0..n).map(|_| rng.random_range(-scale..scale)).collect() };
    let script = [
        Call::Step(0, &[0, 0], &[0, 1]),
        Call::Step(1, &[2, 0], &[2]),
        Call::Step(0, &[3, 4, 1], &[]),
        Call::Commit(&[2, 0], &[4, 2]),
        Call::Step(0, &[0, 3, 0, 0], &[3]),
        Call::Commit(&[0, 1, 2, 3], &[4, 1, 0, 2]),
    ];
    let inputs: Vec<(Vec<f32>, Vec<f32>)> = script
        .iter()
        .map(|call| match call {
            Call::Step(_, a, _) => (floats(c * n_t * a.len(), 1.0), floats(en * n_t * a.len(), 1.0)),
            Call::Commit(..) => (Vec::new(), Vec::new()),
        })
        .collect();
    let conv0 = floats(shape.conv_row() * cells, 1.0);
    let ssm0 = floats(shape.ssm_row() * cells, 0.05);
    let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let download = |x: &cudarc::driver::CudaView<'_, f32>| -> Result<Vec<f32>, String> {
        let mut host = vec![0f32; x.len()];
        stream.memcpy_dtoh(x, &mut host).map_err(e)?;
        stream.synchronize().map_err(e)?;
        Ok(host)
    };
    // Per layer: every call's output (steps) and both caches after it.
    let mut runs: Vec<Vec<AfterCall>> = Vec::new();
    for fusions in [Options::ON, Options::OFF] {
        let mut layer = GdnReplayLayer::new(gpu, cfg, &weights, fusions, n_t, cells).map_err(e)?;
        let mut conv = stream.clone_htod(&conv0).map_err(e)?;
        let mut ssm = stream.clone_htod(&ssm0).map_err(e)?;
        let mut calls = Vec::new();
        for (i, (call, (qkv, hidden))) in script.iter().zip(&inputs).enumerate() {
            let out = match call {
                Call::Step(kv_head, accepted, new_cells) => {
                    let (q, h) = (stream.clone_htod(qkv).map_err(e)?, stream.clone_htod(hidden).map_err(e)?);
                    let rows = ReplayRows { kv_head: *kv_head, accepted, new_cells };
                    // A count on a new cell, or above T, is refused before anything runs.
                    if let Some(&cell) = new_cells.first() {
                        let mut bad = accepted.to_vec();
                        bad[cell - kv_head] = 1;
                        let r = layer.step(
                            gpu,
                            conv.slice_mut(..),
                            ssm.slice_mut(..),
                            q.slice(..),
                            h.slice(..),
                            &ReplayRows { accepted: &bad, ..rows },
                        );
                        if !matches!(r, Err(Error::Invalid { .. })) {
                            return Err(format!("call {i}: a count on new cell {cell} gave {:?}", r.map(|_| ())));
                        }
                    }
                    let big = vec![n_t + 1; accepted.len()];
                    let r = layer.step(
                        gpu,
                        conv.slice_mut(..),
                        ssm.slice_mut(..),
                        q.slice(..),
                        h.slice(..),
                        &ReplayRows { accepted: &big, new_cells: &[], ..rows },
                    );
                    if !matches!(r, Err(Error::IndexOutOfRange { arg: "accepted", .. })) {
                        return Err(format!("call {i}: counts above T gave {:?}", r.map(|_| ())));
                    }
                    let out = layer
                        .step(gpu, conv.slice_mut(..), ssm.slice_mut(..), q.slice(..), h.slice(..), &rows)
                        .map_err(|x| format!("call {i}: {x}"))?;
                    let out = download(&out)?;
                    if fusions == Options::ON {
                        let report = layer.report().ok_or("no report after a step")?;
                        if report.fired("replay_verify") != 1 {
                            return Err(format!("call {i}: replay_verify did not fire:\n{report}"));
                        }
                    }
                    out
                }
                Call::Commit(cells, accepted) => {
                    layer.commit(gpu, conv.slice_mut(..), ssm.slice_mut(..), cells, accepted).map_err(|x| format!("call {i}: {x}"))?;
                    Vec::new()
                }
            };
            calls.push((out, download(&conv.slice(..))?, download(&ssm.slice(..))?));
        }
        runs.push(calls);
    }
    for (i, (f, u)) in runs[0].iter().zip(&runs[1]).enumerate() {
        if bits(&f.0) != bits(&u.0) || bits(&f.1) != bits(&u.1) || bits(&f.2) != bits(&u.2) {
            return Err(format!("call {i}: the fused and unfused replay layers differ (output, conv or ssm cache)"));
        }
    }
    // The sequential decode: per cell, its tokens pending until their count is given.
    let mut seq = GdnLayer::new(gpu, cfg, &weights, Options::OFF).map_err(e)?;
    let mut conv = stream.alloc_zeros::<f32>(shape.conv_row() * cells).map_err(e)?;
    let mut ssm = stream.alloc_zeros::<f32>(shape.ssm_row() * cells).map_err(e)?;
    // Per cell: (call, position in it) of its last step.
    let mut pending: Vec<Option<(usize, usize)>> = vec![None; cells];
    let mut decoded = 0;
    let mut resolve = |cell: usize, a: usize, pending: &mut Vec<Option<(usize, usize)>>| -> Check {
        let Some((call, s)) = pending[cell].take() else { return Ok(()) };
        let (qkv, hidden) = &inputs[call];
        for t in 0..a {
            let col = s * n_t + t;
            let (q, h) = (
                stream.clone_htod(&qkv[col * c..(col + 1) * c]).map_err(e)?,
                stream.clone_htod(&hidden[col * en..(col + 1) * en]).map_err(e)?,
            );
            let sources = [cell as u32];
            let rows = StepRows { n_tokens: 1, cells, rollback: 0, kv_head: cell, sources: &sources, zero_cell: None };
            let out = download(&seq.step(gpu, conv.slice_mut(..), ssm.slice_mut(..), q.slice(..), h.slice(..), &rows).map_err(e)?)?;
            if bits(&out) != bits(&runs[0][call].0[col * hvd..(col + 1) * hvd]) {
                return Err(format!("call {call}: cell {cell}, token {t}: the replay layer's output differs from the sequential decode"));
            }
            decoded += 1;
        }
        Ok(())
    };
    for (i, call) in script.iter().enumerate() {
        match call {
            Call::Step(kv_head, accepted, _) => {
                for (s, &a) in accepted.iter().enumerate() {
                    resolve(kv_head + s, a, &mut pending)?;
                    pending[kv_head + s] = Some((i, s));
                }
            }
            Call::Commit(cs, accepted) => {
                for (&cell, &a) in cs.iter().zip(accepted.iter()) {
                    resolve(cell, a, &mut pending)?;
                }
            }
        }
    }
    let (last_conv, last_ssm) = (&runs[0].last().ok_or("no call")?.1, &runs[0].last().ok_or("no call")?.2);
    if bits(&download(&conv.slice(..))?) != bits(last_conv) || bits(&download(&ssm.slice(..))?) != bits(last_ssm) {
        return Err("after the final commit the caches differ from the sequential decode's".into());
    }
    // Every count above 0 in the script is on a cell with a pending log (the layer refuses
    // any other), so each of those tokens was decoded and compared.
    let counts: usize = script
        .iter()
        .map(|call| match call {
            Call::Step(_, a, _) | Call::Commit(_, a) => a.iter().sum::<usize>(),
        })
        .sum();
    if decoded != counts {
        return Err(format!("{decoded} tokens decoded of {counts} accepted"));
    }
    Ok(())
}
