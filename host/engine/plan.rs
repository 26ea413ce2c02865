//! Plan once, step in microseconds: a [`StepPlan`] runs every op's full validation (the
//! fusion pass's legality check and GDN_LAYER_STEP's readiness proof ran when the step was
//! compiled) and prepares every launch ONCE, for one memory — its buffers' addresses and
//! lengths, which are index buffers, which are read-only. A step then only
//!
//! 1. checks that the memory it is given is bound exactly as at plan time (a comparison of a
//!    few dozen integers: the views validated then are inside the same live buffers now);
//! 2. runs, for each op that reads an index buffer, that op's index rules (the source rows in
//!    range, no written state slot on a row another sequence reads, …) against the host copies
//!    of the index values rgdn wrote — as prepared with the plan ([`Op::index_rules`]: what
//!    does not depend on the values, such as which rows each sequence may read, is worked out
//!    once), with [`Op::check_indices`]'s verdict; and
//! 3. launches the prepared kernels, each as its op decided ([`crate::gpu::LaunchKind`]).
//!
//! What changes between steps is only what lives in index buffers (the source rows
//! `s_copy`), written with [`super::CallerMemory::set_indices`] — rgdn writes the device bytes
//! from the host values it checks, as for every launch. Anything else that changes (a view, a
//! buffer, the token count) is another plan.
//!
//! A step can be captured into a CUDA graph ([`StepPlan::capture`]) and replayed
//! ([`CapturedStep::replay`]) with new index values: the replay runs steps 1 and 2 before it
//! launches the graph, so no replay reads an index rgdn did not check. The index writes stay
//! outside the graph (they are host-to-device copies of the values just checked).

use crate::error::{Error, Result};
use crate::fusion::Report;
use crate::gpu::{Gpu, PreparedLaunch};
use crate::memory::{DeviceMemory, Memory};
use crate::ops::{IndexRules, Op};
use cudarc::driver::CudaGraph;
use std::rc::Rc;

use super::CompiledStep;

const OP: &str = "StepPlan";

/// One buffer as a plan saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Binding {
    pub ptr: u64,
    pub len: usize,
    pub index: bool,
    pub read_only: bool,
}

/// A layer step (any list of ops) validated and prepared once for one memory; see the module
/// docs. Built by [`super::CallerMemory::plan`] (the engine's buffers) or
/// [`StepPlan::on_device`] (rgdn's own); run by [`super::CallerMemory::run`] /
/// [`StepPlan::launch`] as often as wanted.
#[derive(Clone, Debug)]
pub struct StepPlan {
    ops: Vec<Box<dyn Op>>,
    launches: Vec<PreparedLaunch>,
    /// The index rules of the ops that read an index buffer (prepared with the plan): they run
    /// before every step. Shared by the plan's clones (a captured step holds one).
    index_rules: Rc<[Box<dyn IndexRules>]>,
    bindings: Vec<Binding>,
    report: Report,
}

impl StepPlan {
    /// Validates every op of `step` on `mem` (refusing any that writes a buffer flagged
    /// read-only) and prepares its launch.
    pub(crate) fn prepare(gpu: &Gpu, mem: &DeviceMemory, read_only: &[bool], step: CompiledStep) -> Result<StepPlan> {
        let CompiledStep { ops, report } = step;
        let mut launches = Vec::with_capacity(ops.len());
        for op in &ops {
            super::refuse_read_only_writes(op.as_ref(), read_only)?;
            // `prepare` validates first.
            launches.push(op.prepare(gpu, mem)?);
        }
        let index_rules = index_readers(&ops, mem).into_iter().map(|i| ops[i].index_rules()).collect::<Vec<_>>().into();
        Ok(StepPlan { ops, launches, index_rules, bindings: bindings(mem, read_only), report })
    }

    /// A plan for rgdn's own memory (every buffer writable).
    pub fn on_device(gpu: &Gpu, mem: &DeviceMemory, step: impl Into<CompiledStep>) -> Result<StepPlan> {
        Self::prepare(gpu, mem, &[], step.into())
    }

    /// One step on rgdn's own memory: the binding check, the index rules, then every prepared
    /// launch, in order on `gpu`'s stream (nothing waits).
    pub fn launch(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<()> {
        self.launch_on(gpu, mem, &[])
    }

    /// One step: the binding check, the index rules, then every prepared launch, in order on
    /// `gpu`'s stream (nothing waits).
    pub(crate) fn launch_on(&self, gpu: &Gpu, mem: &DeviceMemory, read_only: &[bool]) -> Result<()> {
        self.check_step(mem, read_only)?;
        // SAFETY: `check_step` passed just now on `mem`, which stays borrowed until we return.
        unsafe { self.launch_checked(gpu) }
    }

    /// [bench] One step on rgdn's own memory as [`StepPlan::launch`] runs it, returning the host
    /// time of its checks (steps 1 and 2 of the module docs) and of its launches.
    #[cfg(feature = "bench")]
    pub(crate) fn launch_timed(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<[std::time::Duration; 2]> {
        let t0 = std::time::Instant::now();
        self.check_step(mem, &[])?;
        let t1 = std::time::Instant::now();
        // SAFETY: `check_step` passed just now on `mem`, which stays borrowed until we return.
        unsafe { self.launch_checked(gpu) }?;
        Ok([t1 - t0, t1.elapsed()])
    }

    /// Every prepared launch, in order on `gpu`'s stream.
    ///
    /// # Safety
    /// [`StepPlan::check_step`] passed on the memory the launches address, and that memory is
    /// still borrowed, unchanged, by the caller.
    unsafe fn launch_checked(&self, gpu: &Gpu) -> Result<()> {
        for launch in &self.launches {
            // SAFETY: every launch was prepared (after its op's full validation) on a memory
            // bound exactly as the caller's is (`check_step`: same addresses, lengths, index and
            // read-only flags — and the caller's borrow keeps those buffers alive), and every
            // op that reads an index passed its index rules on the values that memory holds
            // now, which are the device bytes (rgdn writes them from these host copies).
            unsafe { gpu.run(launch) }?;
        }
        Ok(())
    }

    /// Steps 1 and 2 of the module docs: the memory is the one the plan was prepared on, and
    /// its index values pass every reading op's index rules.
    fn check_step(&self, mem: &DeviceMemory, read_only: &[bool]) -> Result<()> {
        if !same_bindings(&self.bindings, mem, read_only) {
            return Err(Error::Invalid {
                op: OP,
                what: "the memory is not bound as when the plan was prepared (buffers, lengths, index or read-only flags differ): \
                       prepare a plan for it"
                    .into(),
            });
        }
        self.index_rules.iter().try_for_each(|rules| rules.check(mem))
    }

    /// Captures one step's launches into a CUDA graph on `gpu`'s stream (nothing runs). The
    /// binding check and the index rules run now and before every [`CapturedStep::replay`].
    /// Timing must be off ([`Gpu::set_timing`]): its events have no place in a graph.
    pub(crate) fn capture_on(&self, gpu: &Gpu, mem: &DeviceMemory, read_only: &[bool]) -> Result<CapturedStep> {
        if gpu.is_timing() {
            return Err(Error::Invalid { op: OP, what: "capturing a step with launch timing on (Gpu::set_timing(false) first)".into() });
        }
        self.check_step(mem, read_only)?;
        let stream = gpu.stream();
        stream.begin_capture(cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
        let launched = self.launches.iter().try_for_each(|launch| {
            // SAFETY: as in `launch_on` (checked just above); nothing runs until a replay,
            // which repeats the checks.
            unsafe { gpu.run(launch) }
        });
        // Always end the capture, so the stream is usable whatever happened.
        let graph = stream.end_capture(cudarc::driver::sys::CUgraphInstantiate_flags(0));
        launched?;
        let graph = graph?.ok_or_else(|| Error::Invalid { op: OP, what: "stream capture produced no graph".into() })?;
        Ok(CapturedStep { graph, plan: self.clone() })
    }

    /// Captures one step's launches on rgdn's own memory into a CUDA graph on `gpu`'s stream
    /// (nothing runs); the binding check and the index rules run now and before every
    /// [`CapturedStep::replay`]. Timing must be off ([`Gpu::set_timing`]).
    pub fn capture(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<CapturedStep> {
        self.capture_on(gpu, mem, &[])
    }

    /// Whether `mem` is bound exactly as the memory the plan was prepared on (then
    /// [`super::CallerMemory::run`] takes it; else a plan for it must be prepared).
    pub fn fits(&self, mem: &super::CallerMemory) -> bool {
        same_bindings(&self.bindings, &mem.mem, &mem.read_only)
    }

    /// The ops, in launch order.
    pub fn ops(&self) -> &[Box<dyn Op>] {
        &self.ops
    }

    /// The prepared launches, one per op, in order.
    pub fn launches(&self) -> &[PreparedLaunch] {
        &self.launches
    }

    /// What the fusion pass decided when the step was compiled (empty for a plain op list).
    pub fn report(&self) -> &Report {
        &self.report
    }
}

/// One planned step captured as a CUDA graph: replayed with whatever index values the memory
/// holds, each replay checked first ([`CapturedStep::replay`]).
pub struct CapturedStep {
    graph: CudaGraph,
    plan: StepPlan,
}

impl CapturedStep {
    /// Replays the graph on rgdn's own memory after checking its bindings and the index values
    /// it holds, as a step of the plan would.
    pub fn replay(&self, mem: &DeviceMemory) -> Result<()> {
        self.replay_on(mem, &[])
    }

    /// Checks the memory's bindings and index values as a step of the plan would, then
    /// launches the graph (on the stream it was captured on).
    pub(crate) fn replay_on(&self, mem: &DeviceMemory, read_only: &[bool]) -> Result<()> {
        self.plan.check_step(mem, read_only)?;
        Ok(self.graph.launch()?)
    }

    /// The plan the graph was captured from.
    pub fn plan(&self) -> &StepPlan {
        &self.plan
    }
}

impl std::fmt::Debug for CapturedStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapturedStep").field("plan", &self.plan).finish_non_exhaustive()
    }
}

/// The ops that read an index buffer (whose index rules a step re-runs).
fn index_readers(ops: &[Box<dyn Op>], mem: &DeviceMemory) -> Vec<usize> {
    (0..ops.len()).filter(|&i| ops[i].inputs().iter().any(|t| mem.is_index_buffer(t.buffer))).collect()
}

fn bindings(mem: &DeviceMemory, read_only: &[bool]) -> Vec<Binding> {
    mem.bindings().map(|(i, ptr, len, index)| Binding { ptr, len, index, read_only: read_only.get(i).copied().unwrap_or(false) }).collect()
}

fn same_bindings(planned: &[Binding], mem: &DeviceMemory, read_only: &[bool]) -> bool {
    planned.len() == mem.n_buffers()
        && mem.bindings().zip(planned).all(|((i, ptr, len, index), b)| {
            b.ptr == ptr && b.len == len && b.index == index && b.read_only == read_only.get(i).copied().unwrap_or(false)
        })
}

impl From<Vec<Box<dyn Op>>> for CompiledStep {
    /// A plain op list: no fusion pass ran (an empty report).
    fn from(ops: Vec<Box<dyn Op>>) -> Self {
        CompiledStep { ops, report: Report::default() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::DeviceBuffer;
    use crate::ops::{GetRows, Scale};
    use crate::tensor::{BufferId, DType, Layout, Tensor};

    /// A device memory of buffers at made-up addresses (nothing here dereferences or launches):
    /// a 4-row source at 0x1000, the row index at 0x2000 (host values `rows`), a destination
    /// row at 0x3000.
    fn memory(rows: i32, dst_at: u64) -> DeviceMemory {
        let mut mem = DeviceMemory::empty();
        // SAFETY: these buffers are never read or written: the test only validates views
        // against their lengths and compares their addresses.
        unsafe {
            mem.push(DeviceBuffer::caller(0x1000, 4 * 8 * 4), None);
            mem.push(DeviceBuffer::caller(0x2000, 4), Some(rows.to_le_bytes().to_vec()));
            mem.push(DeviceBuffer::caller(dst_at, 4 * 8), None);
        }
        mem
    }

    fn gather() -> GetRows {
        let f32s = |b, ne| Tensor::new(BufferId(b), Layout::contiguous(DType::F32, ne));
        GetRows {
            src: f32s(0, [8, 4, 1, 1]),
            rows: Tensor::new(BufferId(1), Layout::contiguous(DType::I32, [1, 1, 1, 1])),
            dst: f32s(2, [8, 1, 1, 1]),
        }
    }

    fn plan(mem: &DeviceMemory, read_only: &[bool]) -> StepPlan {
        let scale = Scale { src: gather().dst, dst: gather().dst, scale: 0.0, bias: 0.0 };
        let ops: Vec<Box<dyn Op>> = vec![Box::new(scale), Box::new(gather())];
        ops.iter().for_each(|op| op.validate(mem).unwrap());
        let index_ops = index_readers(&ops, mem);
        assert_eq!(index_ops, [1], "only the gather reads an index");
        let index_rules = index_ops.into_iter().map(|i| ops[i].index_rules()).collect::<Vec<_>>().into();
        StepPlan { ops, launches: Vec::new(), index_rules, bindings: bindings(mem, read_only), report: Report::default() }
    }

    #[test]
    fn a_step_checks_the_bindings_and_the_index_rules_before_any_launch() {
        let planned = memory(1, 0x3000);
        let p = plan(&planned, &[]);
        assert!(p.check_step(&planned, &[]).is_ok());
        // The same bindings with another row in range: fine; out of range: refused.
        assert!(p.check_step(&memory(3, 0x3000), &[]).is_ok());
        assert!(matches!(p.check_step(&memory(4, 0x3000), &[]), Err(Error::IndexOutOfRange { index: 4, .. })));
        assert!(matches!(p.check_step(&memory(-1, 0x3000), &[]), Err(Error::IndexOutOfRange { index: -1, .. })));
        // Another destination address, or a buffer now read-only: not the planned memory.
        let other = |e: Result<()>| matches!(e, Err(Error::Invalid { what, .. }) if what.contains("not bound as"));
        assert!(other(p.check_step(&memory(1, 0x4000), &[])));
        assert!(other(p.check_step(&planned, &[false, false, true])));
        // A plan made with a read-only flag needs it again.
        let q = plan(&planned, &[true]);
        assert!(other(q.check_step(&planned, &[])));
        assert!(q.check_step(&planned, &[true]).is_ok());
    }
}
