//! Timing on the GPU: per-kernel durations of layer chains (CUPTI kernel records, or one CUDA
//! event pair around each launch), and a forward of many layers captured as a CUDA graph and
//! replayed. Every launch runs inside NVTX ranges (forward, layer, kernel).

use super::cupti::{Cupti, spans_by_launch};
use super::nvtx;
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::memory::DeviceMemory;
use crate::ops::Op;
use cudarc::driver::sys;

const OP: &str = "bench";

/// How kernel durations are read.
pub enum Timer {
    /// CUPTI kernel activity records: GPU start/end timestamps of each kernel.
    Cupti(Cupti),
    /// One CUDA event pair around each launch (`Gpu::set_timing`): includes the event overhead.
    Events { why: String },
}

impl Timer {
    pub fn name(&self) -> &'static str {
        match self {
            Timer::Cupti(_) => "cupti",
            Timer::Events { .. } => "cuda-events",
        }
    }

    pub fn note(&self) -> String {
        match self {
            Timer::Cupti(c) => format!("CUPTI kernel activity records (GPU timestamps), {}", c.path().display()),
            Timer::Events { why } => {
                format!(
                    "CUDA events around each launch (event overhead included; spans from events around each graph launch) — CUPTI unavailable: {why}"
                )
            }
        }
    }
}

/// Kernel durations of timed layers: `entries` of one layer, then µs per launch per layer.
pub struct LayerTimes {
    pub entries: Vec<&'static str>,
    pub layers: Vec<Vec<f64>>,
}

fn invalid(what: String) -> Error {
    Error::Invalid { op: OP, what }
}

/// Runs `n_layers` copies of the one-layer chain `ops` back to back, layer i on buffer set
/// `(first_set + i) % sets.len()`, and times each kernel.
pub fn time_layers(
    gpu: &Gpu,
    timer: &Timer,
    sets: &[DeviceMemory],
    first_set: usize,
    ops: &[Box<dyn Op>],
    n_layers: usize,
    label: &str,
) -> Result<LayerTimes> {
    let events = matches!(timer, Timer::Events { .. });
    gpu.synchronize()?;
    gpu.take_launches()?;
    if let Timer::Cupti(c) = timer {
        c.take().map_err(invalid)?; // drop records of earlier, untimed work
    }
    gpu.set_timing(events);
    let launched = (|| -> Result<()> {
        let _forward = nvtx::range(&format!("forward {label}"));
        for l in 0..n_layers {
            let mem = &sets[(first_set + l) % sets.len()];
            let _layer = nvtx::range(&format!("layer {l}"));
            for op in ops {
                let _kernel = nvtx::range(op.name());
                op.launch(gpu, mem)?;
            }
        }
        gpu.synchronize()
    })();
    gpu.set_timing(false);
    let launches = gpu.take_launches()?;
    launched?;
    if n_layers == 0 || launches.is_empty() || launches.len() % n_layers != 0 {
        return Err(invalid(format!("{} launches for {n_layers} layers", launches.len())));
    }
    let per_layer = launches.len() / n_layers;
    let entries: Vec<&'static str> = launches[..per_layer].iter().map(|l| l.entry).collect();
    let us: Vec<f64> = match timer {
        Timer::Events { .. } => launches.iter().map(|l| l.elapsed_ms.map_or(f64::NAN, |ms| ms as f64 * 1e3)).collect(),
        Timer::Cupti(c) => {
            let recs = c.take().map_err(invalid)?;
            if recs.len() != launches.len() {
                return Err(invalid(format!(
                    "CUPTI returned {} kernel records for {} launches (rerun with --events)",
                    recs.len(),
                    launches.len()
                )));
            }
            for (r, l) in recs.iter().zip(&launches) {
                if r.name != l.entry {
                    return Err(invalid(format!("CUPTI record `{}` where `{}` was launched (rerun with --events)", r.name, l.entry)));
                }
            }
            recs.iter().map(|r| r.duration_us()).collect()
        }
    };
    Ok(LayerTimes { entries, layers: us.chunks(per_layer).map(<[f64]>::to_vec).collect() })
}

/// A forward of `layers` layer chains captured as one CUDA graph.
pub struct Forward {
    graph: cudarc::driver::CudaGraph,
    pub kernels: usize,
}

/// Captures `layers` copies of `ops` (layer i on set i % sets.len()) into a graph. The ops must
/// have run once before (module functions loaded), and timing must be off.
pub fn capture(gpu: &Gpu, sets: &[DeviceMemory], ops: &[Box<dyn Op>], layers: usize) -> Result<Forward> {
    gpu.synchronize()?;
    gpu.set_timing(false);
    gpu.take_launches()?;
    let stream = gpu.stream();
    stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    let mut launched = Ok(());
    'outer: for l in 0..layers {
        for op in ops {
            if let Err(e) = op.launch(gpu, &sets[l % sets.len()]) {
                launched = Err(e);
                break 'outer;
            }
        }
    }
    // Always end the capture, so the stream is usable whatever happened.
    let graph = stream.end_capture(sys::CUgraphInstantiate_flags(0));
    launched?;
    let graph = graph?.ok_or_else(|| invalid("stream capture produced no graph".into()))?;
    let kernels = gpu.take_launches()?.len();
    graph.upload()?;
    Ok(Forward { graph, kernels })
}

/// Replays the forward `n` times; the span of each replay in µs (CUPTI: first kernel start to
/// last kernel end; events: an event pair around each graph launch).
pub fn replay(gpu: &Gpu, timer: &Timer, fwd: &Forward, n: usize, label: &str) -> Result<Vec<f64>> {
    gpu.synchronize()?;
    let _range = nvtx::range(&format!("forward graph {label}"));
    match timer {
        Timer::Cupti(c) => {
            c.take().map_err(invalid)?;
            for _ in 0..n {
                fwd.graph.launch()?;
            }
            gpu.synchronize()?;
            let mut recs = c.take().map_err(invalid)?;
            let spans = spans_by_launch(&recs);
            if spans.len() == n && spans.iter().all(|(_, k)| *k == fwd.kernels) {
                return Ok(spans.into_iter().map(|(us, _)| us).collect());
            }
            // Graph nodes without their launch's correlation id: replays run back to back on
            // one stream, so consecutive runs of `kernels` records (by start time) are replays.
            if fwd.kernels == 0 || recs.len() != n * fwd.kernels {
                return Err(invalid(format!(
                    "CUPTI returned {} kernel records for {n} replays of {} kernels (rerun with --events)",
                    recs.len(),
                    fwd.kernels
                )));
            }
            recs.sort_by_key(|r| r.start_ns);
            Ok(recs
                .chunks(fwd.kernels)
                .map(|c| {
                    let start = c.iter().map(|r| r.start_ns).min().unwrap_or(0);
                    let end = c.iter().map(|r| r.end_ns).max().unwrap_or(0);
                    end.saturating_sub(start) as f64 / 1e3
                })
                .collect())
        }
        Timer::Events { .. } => {
            let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
            let mut pairs = Vec::with_capacity(n);
            for _ in 0..n {
                let start = gpu.stream().record_event(flags)?;
                fwd.graph.launch()?;
                let end = gpu.stream().record_event(flags)?;
                pairs.push((start, end));
            }
            gpu.synchronize()?;
            pairs.iter().map(|(s, e)| Ok(s.elapsed_ms(e)? as f64 * 1e3)).collect()
        }
    }
}

/// Host time of one layer step, and the step's bytes, on the path an engine runs: recorder
/// and timing off (as [`Gpu::new`] leaves them).
pub struct HostSteps {
    /// µs per step through a plan prepared once ([`crate::engine::StepPlan`]): the index write
    /// (`s_copy`, as every step writes it) and `StepPlan::launch` (binding check, index rules,
    /// the prepared launches).
    pub planned_us: Vec<f64>,
    /// µs per step without a plan: the index write and every op's `launch` (full validation
    /// and launch preparation each time).
    pub unplanned_us: Vec<f64>,
    /// [host-cost] A planned step in parts, µs per step from steps timed on their own: the
    /// index write, the plan's checks (binding check and index rules), its launches.
    pub planned_parts_us: Vec<[f64; 3]>,
    /// [host-cost] µs per layer of a step of [`CAPTURED_LAYERS`] layers captured once as one CUDA
    /// graph ([`crate::engine::StepPlan::capture`]), as an engine steps a whole model: per step
    /// the index write (one: every layer reads the same `s_copy`), the replay's checks (binding
    /// check, every layer's index rules) and the graph launch, divided by the layers. The
    /// layers run the same ops on the same buffers (what the bench's forward graph does).
    pub captured_us_per_layer: Vec<f64>,
    /// Every buffer after one planned step on a fresh copy of the layer.
    pub after_step: crate::memory::HostMemory,
}

/// Runs `ops` as one planned step on a fresh copy of `host` (its bytes after), then `steps`
/// timed planned steps, `steps` timed unplanned ones and `steps` planned ones timed in parts
/// (each timed alone; the stream is drained every 32 steps, untimed, so the launch queue never
/// blocks the host). `index`: the
/// step's index tensor (its values rewritten before every step, as an engine does).
/// [host-cost] Layers of the captured step whose host cost per layer the bench reports.
pub const CAPTURED_LAYERS: usize = 24;

/// [host-cost] Captured steps timed per arm (fewer than the planned steps: each replays
/// [`CAPTURED_LAYERS`] layers on the GPU).
pub const CAPTURED_STEPS: usize = 40;

pub fn host_steps(
    gpu: &Gpu,
    host: &crate::memory::HostMemory,
    ops: &[Box<dyn Op>],
    index: &crate::tensor::Tensor,
    steps: usize,
) -> Result<HostSteps> {
    let (recording, timing) = (gpu.set_recording(false), gpu.is_timing());
    gpu.set_timing(false);
    let measured = (|| -> Result<HostSteps> {
        let bytes = host.bytes(index.buffer).to_vec();
        let mut mem = DeviceMemory::upload(gpu, host)?;
        let plan = crate::engine::StepPlan::on_device(gpu, &mem, ops.to_vec())?;
        plan.launch(gpu, &mem)?;
        let after_step = mem.download(gpu)?;
        let time = |mem: &mut DeviceMemory, step: &dyn Fn(&DeviceMemory) -> Result<()>| -> Result<Vec<f64>> {
            let mut us = Vec::with_capacity(steps);
            for i in 0..steps {
                if i % 32 == 0 {
                    gpu.synchronize()?;
                }
                let t0 = std::time::Instant::now();
                mem.write(gpu, index.buffer, &bytes)?;
                step(mem)?;
                us.push(t0.elapsed().as_secs_f64() * 1e6);
            }
            gpu.synchronize()?;
            Ok(us)
        };
        let planned_us = time(&mut mem, &|m| plan.launch(gpu, m))?;
        let unplanned_us = time(&mut mem, &|m| ops.iter().try_for_each(|op| op.launch(gpu, m)))?;
        // The planned step again, each part timed (the same calls as `plan.launch`, with clock
        // reads between them).
        let mut planned_parts_us = Vec::with_capacity(steps);
        for i in 0..steps {
            if i % 32 == 0 {
                gpu.synchronize()?;
            }
            let t0 = std::time::Instant::now();
            mem.write(gpu, index.buffer, &bytes)?;
            let write = t0.elapsed();
            let [checks, launches] = plan.launch_timed(gpu, &mem)?;
            planned_parts_us.push([write, checks, launches].map(|d| d.as_secs_f64() * 1e6));
        }
        gpu.synchronize()?;
        // A step of CAPTURED_LAYERS layers, captured once, replayed with the index rewritten
        // before each replay (as `mem.replay` in an engine).
        let layers: Vec<Box<dyn Op>> = (0..CAPTURED_LAYERS).flat_map(|_| ops.iter().cloned()).collect();
        let captured = crate::engine::StepPlan::on_device(gpu, &mem, layers)?.capture(gpu, &mem)?;
        let mut captured_us_per_layer = Vec::with_capacity(CAPTURED_STEPS);
        for i in 0..CAPTURED_STEPS {
            if i % 4 == 0 {
                gpu.synchronize()?;
            }
            let t0 = std::time::Instant::now();
            mem.write(gpu, index.buffer, &bytes)?;
            captured.replay(&mem)?;
            captured_us_per_layer.push(t0.elapsed().as_secs_f64() * 1e6 / CAPTURED_LAYERS as f64);
        }
        gpu.synchronize()?;
        Ok(HostSteps { planned_us, unplanned_us, planned_parts_us, captured_us_per_layer, after_step })
    })();
    gpu.set_recording(recording);
    gpu.set_timing(timing);
    measured
}
