//! rgdn on an engine's own context, stream and buffers (`rgdn::engine`), on the GPU (custom
//! runner, `harness = false`): the fused and unfused layer steps on caller-owned `CudaSlice`s
//! are bit-identical to each other and to the unfused step on rgdn's own memory; every refusal
//! (read-only buffer, out-of-range source row, raw range past its allocation, foreign pointer)
//! is typed and launches nothing; the launch recorder is off unless asked for.
//!
//! Without a CUDA driver it prints that it SKIPPED and exits 0 — unless `RGDN_REQUIRE_GPU=1`.

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rgdn::Error;
use rgdn::engine::{CallerMemory, layer_step};
use rgdn::gpu::{Gpu, probe};
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
    t.fill_random(&mut mem, &shape, &mut StdRng::seed_from_u64(0xe1 + n_t as u64), &init);
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
