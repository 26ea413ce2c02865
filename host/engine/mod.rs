//! rgdn inside an inference engine: the layer step (fused or not) on the engine's own cudarc
//! context, stream and device buffers.
//!
//! 1. [`Gpu::from_stream`] loads the rgdn kernels into the engine's context and launches on its
//!    stream.
//! 2. [`CallerMemory`] binds the engine's buffers (`&CudaSlice`, `&mut CudaSlice`, `CudaView`,
//!    `CudaViewMut`, or raw device pointers with lengths) under [`BufferId`]s, in binding order
//!    from 0, without copying them. The borrow lasts as long as the binding.
//! 3. Tensors ([`Tensor`]: buffer id, byte offset, `ne`, `nb`) describe the views the ops read and
//!    write; [`layer_step`] builds one GDN layer's verify step over [`LayerTensors`], unfused or
//!    through the fusion pass.
//! 4. [`CallerMemory::enqueue`] validates every op against the bound lengths (the same checks as
//!    for rgdn's own memory: [`crate::ops::Op::validate`]), refuses any op that would write a
//!    buffer bound read-only, then launches them in order on the stream, without waiting and
//!    without keeping any per-launch state.
//!
//! # Row indices (`s_copy`, the source rows)
//! GET_ROWS and GDN_CONV_CHAIN read a source-row index from device memory. rgdn never launches
//! on an index it has not checked: index buffers hold **host values**, and rgdn itself writes
//! those values to the device ([`CallerMemory::indices`] into a small buffer of its own,
//! [`CallerMemory::bind_indices`] into the engine's buffer, [`CallerMemory::set_indices`] for the
//! next step). Validation checks the host copy against the source tensor's rows, and the device
//! bytes are that copy, byte for byte — so no caller can vouch for a value that is not there,
//! and no kernel carries a bounds check or an error flag the host would have to read back (a
//! read-back would cost a synchronisation per step, and an in-kernel check would change the
//! kernels, which must stay byte-identical to ggml's). The source rows are host data in
//! llama.cpp too (`s_copy` is set from the host's cell bookkeeping), so this costs one 4-byte
//! copy per step. No rgdn kernel writes an index buffer (validation refuses it).
//!
//! # Ordering
//! Every launch and copy goes to the `Gpu`'s stream. When the context tracks events (cudarc's
//! default), binding a `CudaSlice`/view makes the stream wait for the buffer's earlier work,
//! and dropping the [`CallerMemory`] records the buffer's use by everything enqueued through
//! it, so the engine's other streams are ordered after it. With event tracking off (as
//! [`Gpu::new`] sets on its own context), ordering across streams is the engine's.

pub mod hf;
mod plan;
pub mod replay;

use crate::error::{Error, Result};
use crate::gpu::{DeviceBuffer, Gpu};
use crate::graph::layer::unfused_ops;
use crate::layer::{GdnShape, LayerInit, LayerTensors, Step};
use crate::memory::{DeviceMemory, Memory};
use crate::ops::Op;
use crate::tensor::{BufferId, DType, Layout, Tensor};
use cudarc::driver::{CudaSlice, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, SyncOnDrop, sys};
pub use plan::{CapturedStep, StepPlan};

/// The engine's device buffers, bound under [`BufferId`]s (0, 1, … in binding order) for as
/// long as `'a` — the borrow of the buffers and of the [`Gpu`] they are used with.
pub struct CallerMemory<'a> {
    gpu: &'a Gpu,
    mem: DeviceMemory,
    /// Buffers bound through a shared borrow: no op may write them.
    read_only: Vec<bool>,
    /// cudarc's stream-ordering guards; dropped after everything was enqueued.
    _order: Vec<SyncOnDrop<'a>>,
}

const BIND: &str = "CallerMemory::bind";

impl<'a> CallerMemory<'a> {
    /// No buffers yet.
    pub fn new(gpu: &'a Gpu) -> Self {
        CallerMemory { gpu, mem: DeviceMemory::empty(), read_only: Vec::new(), _order: Vec::new() }
    }

    /// The `Gpu` the buffers are used with.
    pub fn gpu(&self) -> &'a Gpu {
        self.gpu
    }

    /// Number of bound buffers (ids `0..n_buffers()`).
    pub fn n_buffers(&self) -> usize {
        self.mem.n_buffers()
    }

    /// Binds a buffer that ops may read but never write.
    pub fn bind<T>(&mut self, slice: &'a CudaSlice<T>) -> Result<BufferId> {
        self.same_context(slice)?;
        let len = bytes_of::<T>(slice.len())?;
        let (ptr, order) = slice.device_ptr(self.gpu.stream());
        // SAFETY: cudarc's slice is `len` bytes of device memory of this context (checked
        // above), kept allocated by the `'a` borrow, which the binding holds.
        self.push(unsafe { DeviceBuffer::caller(ptr, len) }, order, true, None)
    }

    /// Binds a buffer that ops may read and write.
    pub fn bind_mut<T>(&mut self, slice: &'a mut CudaSlice<T>) -> Result<BufferId> {
        self.same_context(slice)?;
        let len = bytes_of::<T>(slice.len())?;
        let (ptr, order) = slice.device_ptr_mut(self.gpu.stream());
        // SAFETY: as `bind`; the exclusive borrow means nothing else writes it meanwhile.
        self.push(unsafe { DeviceBuffer::caller(ptr, len) }, order, false, None)
    }

    /// Binds a view (part of a buffer) that ops may read but never write.
    pub fn bind_view<T>(&mut self, view: CudaView<'a, T>) -> Result<BufferId> {
        let len = bytes_of::<T>(view.len())?;
        let (ptr, order) = view.view_ptr(self.gpu.stream());
        self.check_device(ptr, len, false)?;
        // SAFETY: cudarc's view is `len` bytes of device memory on this device (checked),
        // kept allocated by the `'a` borrow.
        self.push(unsafe { DeviceBuffer::caller(ptr, len) }, order, true, None)
    }

    /// Binds a view (part of a buffer) that ops may read and write.
    pub fn bind_view_mut<T>(&mut self, view: CudaViewMut<'a, T>) -> Result<BufferId> {
        let len = bytes_of::<T>(view.len())?;
        let (ptr, order) = view.view_ptr(self.gpu.stream());
        self.check_device(ptr, len, false)?;
        // SAFETY: as `bind_view`; the view is an exclusive borrow.
        self.push(unsafe { DeviceBuffer::caller(ptr, len) }, order, false, None)
    }

    /// Binds `len` bytes of device memory at `ptr` (memory from another allocator, an FFI
    /// tensor). The driver is asked which allocation `ptr` lies in: a range that is not device
    /// memory of this `Gpu`'s device, or that runs past its allocation, is refused.
    ///
    /// # Safety
    /// The memory must stay allocated for `'a`, and nothing else may write it (or, when
    /// `writable`, read it) while ops enqueued through this binding may run.
    pub unsafe fn bind_raw(&mut self, ptr: u64, len: usize, writable: bool) -> Result<BufferId> {
        self.check_device(ptr, len, true)?;
        // SAFETY: the range is inside one live allocation on this device (checked); the rest
        // is the caller's promise.
        self.push(unsafe { DeviceBuffer::caller(ptr, len) }, SyncOnDrop::Sync(None), !writable, None)
    }

    /// A contiguous I32 index tensor holding `values`, in a small device buffer of rgdn's own
    /// (freed with the binding); its host copy is what validation checks.
    pub fn indices(&mut self, values: &[i32]) -> Result<Tensor> {
        let bytes = index_bytes(values);
        let buffer = self.gpu.upload(&bytes)?;
        let id = self.push(buffer, SyncOnDrop::Sync(None), false, Some(bytes))?;
        Ok(Tensor::new(id, Layout::contiguous(DType::I32, [values.len(), 1, 1, 1])))
    }

    /// Binds the engine's own index buffer and writes `values` into its start (in stream
    /// order), so that its device bytes are the host values validation checks. The tensor is a
    /// contiguous I32 view of those `values.len()` elements.
    pub fn bind_indices(&mut self, slice: &'a mut CudaSlice<i32>, values: &[i32]) -> Result<Tensor> {
        self.same_context(slice)?;
        if values.len() > slice.len() {
            return Err(Error::Invalid {
                op: BIND,
                what: format!("{} index values do not fit an index buffer of {} elements", values.len(), slice.len()),
            });
        }
        let bytes = index_bytes(values);
        let (ptr, order) = slice.device_ptr_mut(self.gpu.stream());
        // SAFETY: as `bind_mut`; the buffer is reached only through this binding, as an index
        // buffer, which no kernel writes.
        let mut buffer = unsafe { DeviceBuffer::caller(ptr, bytes.len()) };
        self.gpu.write(&mut buffer, &bytes)?;
        let id = self.push(buffer, order, false, Some(bytes))?;
        Ok(Tensor::new(id, Layout::contiguous(DType::I32, [values.len(), 1, 1, 1])))
    }

    /// Replaces the values of an index buffer (the next step's source rows): same count.
    pub fn set_indices(&mut self, indices: &Tensor, values: &[i32]) -> Result<()> {
        if !self.mem.is_index_buffer(indices.buffer) {
            return Err(Error::Invalid {
                op: "CallerMemory::set_indices",
                what: format!("buffer {} is not an index buffer", indices.buffer.0),
            });
        }
        self.mem.write(self.gpu, indices.buffer, &index_bytes(values))
    }

    /// Validates every op (and refuses writes into read-only buffers) before launching any,
    /// then launches them in order on the `Gpu`'s stream. Returns when they are enqueued.
    pub fn enqueue(&self, ops: &[Box<dyn Op>]) -> Result<()> {
        for op in ops {
            self.check_op(op.as_ref())?;
        }
        for op in ops {
            op.launch(self.gpu, &self.mem)?;
        }
        Ok(())
    }

    /// Plans `step` (a [`CompiledStep`], or any op list) on these bindings: every op validated
    /// (and refused if it writes a buffer bound read-only) and its launch prepared, once. Run
    /// it with [`CallerMemory::run`] as often as wanted — on this memory, or on a later one
    /// bound to the same buffers the same way.
    pub fn plan(&self, step: impl Into<CompiledStep>) -> Result<StepPlan> {
        StepPlan::prepare(self.gpu, &self.mem, &self.read_only, step.into())
    }

    /// One step of `plan` on these bindings: they must be bound as when the plan was prepared
    /// (the same buffers, lengths, index and read-only flags); the ops that read the index
    /// buffers check their index rules on the values set now ([`CallerMemory::set_indices`]);
    /// then every prepared launch is enqueued. Microseconds of host time; nothing waits.
    pub fn run(&self, plan: &StepPlan) -> Result<()> {
        plan.launch_on(self.gpu, &self.mem, &self.read_only)
    }

    /// Captures one step of `plan` into a CUDA graph on the `Gpu`'s stream (see
    /// [`StepPlan`]'s docs); replay it with [`CallerMemory::replay`] after setting the next
    /// step's indices.
    pub fn capture(&self, plan: &StepPlan) -> Result<CapturedStep> {
        plan.capture_on(self.gpu, &self.mem, &self.read_only)
    }

    /// Replays a captured step after checking these bindings and the index values they hold.
    pub fn replay(&self, step: &CapturedStep) -> Result<()> {
        step.replay_on(&self.mem, &self.read_only)
    }

    /// [`CallerMemory::enqueue`] for one op.
    pub fn launch(&self, op: &dyn Op) -> Result<()> {
        self.check_op(op)?;
        op.launch(self.gpu, &self.mem)
    }

    /// The bytes of buffer `id` (waits for the stream): for tests and examples.
    pub fn download(&self, id: BufferId) -> Result<Vec<u8>> {
        self.mem.download_buffer(self.gpu, id)
    }

    fn check_op(&self, op: &dyn Op) -> Result<()> {
        op.validate(self)?;
        refuse_read_only_writes(op, &self.read_only)
    }

    /// Adds a binding; refuses a buffer whose first byte is not [`BIND_ALIGN`]-aligned (the ops
    /// check their views' alignment relative to the buffer's start).
    fn push(&mut self, buffer: DeviceBuffer, order: SyncOnDrop<'a>, read_only: bool, index: Option<Vec<u8>>) -> Result<BufferId> {
        check_aligned(buffer.device_ptr())?;
        self._order.push(order);
        self.read_only.push(read_only);
        Ok(self.mem.push(buffer, index))
    }

    fn same_context<T>(&self, slice: &CudaSlice<T>) -> Result<()> {
        if slice.context().cu_ctx() != self.gpu.context().cu_ctx() {
            return Err(Error::Invalid { op: BIND, what: "the buffer belongs to another CUDA context than the Gpu's".into() });
        }
        Ok(())
    }

    /// Asks the driver about `ptr`: on this device, and (when `check_range`) `len` bytes inside
    /// one allocation.
    fn check_device(&self, ptr: u64, len: usize, check_range: bool) -> Result<()> {
        self.gpu.context().bind_to_thread()?;
        let refuse = |what: String| Error::Invalid { op: BIND, what };
        let mut ordinal: i32 = -1;
        // SAFETY: cuPointerGetAttribute writes one `int` for DEVICE_ORDINAL into `ordinal`.
        unsafe {
            sys::cuPointerGetAttribute(
                &mut ordinal as *mut i32 as *mut _,
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                ptr,
            )
        }
        .result()
        .map_err(|e| refuse(format!("{ptr:#x} is not device memory the driver knows ({e})")))?;
        let want = self.gpu.context().ordinal();
        if usize::try_from(ordinal).ok() != Some(want) {
            return Err(refuse(format!("{ptr:#x} is memory of device {ordinal}, the Gpu runs on device {want}")));
        }
        if !check_range {
            return Ok(());
        }
        let (mut start, mut size): (u64, usize) = (0, 0);
        // SAFETY: RANGE_START_ADDR writes one CUdeviceptr (u64), RANGE_SIZE one size_t (usize).
        unsafe {
            sys::cuPointerGetAttribute(
                &mut start as *mut u64 as *mut _,
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                ptr,
            )
            .result()
            .and_then(|()| {
                sys::cuPointerGetAttribute(
                    &mut size as *mut usize as *mut _,
                    sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                    ptr,
                )
                .result()
            })
        }
        .map_err(|e| refuse(format!("the driver cannot tell the allocation of {ptr:#x} ({e})")))?;
        let end = ptr.checked_add(len as u64);
        let alloc_end = start.checked_add(size as u64);
        match (end, alloc_end) {
            (Some(end), Some(alloc_end)) if ptr >= start && end <= alloc_end => Ok(()),
            _ => Err(refuse(format!("{len} bytes at {ptr:#x} run past its allocation ({size} bytes at {start:#x})"))),
        }
    }
}

impl Memory for CallerMemory<'_> {
    fn buffer_len(&self, id: BufferId) -> Option<usize> {
        self.mem.buffer_len(id)
    }

    fn is_index_buffer(&self, id: BufferId) -> bool {
        self.mem.is_index_buffer(id)
    }

    fn index_values(&self, t: &Tensor) -> Option<Vec<i32>> {
        self.mem.index_values(t)
    }

    fn index_bytes(&self, id: BufferId) -> Option<&[u8]> {
        self.mem.index_bytes(id)
    }

    fn base_alignment(&self, id: BufferId) -> usize {
        self.mem.base_alignment(id)
    }
}

/// Refuses an op that may write (any byte of [`Op::outputs`]) a buffer flagged in `read_only`.
fn refuse_read_only_writes(op: &dyn Op, read_only: &[bool]) -> Result<()> {
    match op.outputs().into_iter().find(|t| read_only.get(t.buffer.0).copied().unwrap_or(false)) {
        Some(t) => Err(Error::Invalid {
            op: op.name(),
            what: format!("writes buffer {}, which was bound read-only (bind it with `bind_mut`)", t.buffer.0),
        }),
        None => Ok(()),
    }
}

/// The alignment every bound buffer's first byte needs: the kernels' widest loads are element
/// pairs (8 bytes) and ops check views against the buffer's start, so the start itself must be
/// aligned (device allocations are 256-byte aligned; a view at an odd element is not).
pub const BIND_ALIGN: u64 = 16;

fn check_aligned(ptr: u64) -> Result<()> {
    if !ptr.is_multiple_of(BIND_ALIGN) {
        return Err(Error::Invalid { op: BIND, what: format!("device address {ptr:#x} is not {BIND_ALIGN}-byte aligned") });
    }
    Ok(())
}

fn bytes_of<T>(elements: usize) -> Result<usize> {
    elements.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| Error::Overflow {
        op: BIND,
        arg: "slice",
        what: format!("bytes of {elements} elements of {} bytes", std::mem::size_of::<T>()),
    })
}

fn index_bytes(values: &[i32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// One layer step compiled for the memory it runs on: its ops in launch order, and what the
/// fusion pass decided for each registered fusion (which fired, which refused and why).
#[derive(Clone, Debug)]
pub struct CompiledStep {
    /// The ops, in launch order.
    pub ops: Vec<Box<dyn Op>>,
    /// The fusion pass's decisions ([`crate::fusion::Options::OFF`]: every fusion `Off`).
    pub report: crate::fusion::Report,
}

/// One GDN layer's verify step over `t` (its tensors in `mem`, the memory it will run on: the
/// engine's [`CallerMemory`], or rgdn's own), in launch order: ggml's unfused chain
/// (`fused = false`, the ground truth) or the same graph through the fusion pass (`fused =
/// true`: the default fusions wherever the matcher accepts them and `mem` admits the fused op;
/// what either refuses stays unfused). Both compute the same bytes in every buffer the fused
/// step writes, bit for bit.
pub fn layer_step(
    t: &LayerTensors,
    shape: &GdnShape,
    step: &Step,
    init: &LayerInit,
    fused: bool,
    mem: &dyn Memory,
) -> Result<Vec<Box<dyn Op>>> {
    let fusions = if fused { crate::fusion::Options::ON } else { crate::fusion::Options::OFF };
    Ok(layer_step_with(t, shape, step, init, fusions, mem)?.ops)
}

/// [`layer_step`] with the fusions in `fusions` (e.g. [`crate::fusion::Options::ALL`]);
/// [`crate::fusion::Options::OFF`] is the unfused chain. Planned against `mem`
/// ([`crate::fusion::compile_for`]): a fused op that `mem` would refuse (an operand on bytes
/// its kernel may not share, say) is refused by the pass ([`crate::fusion::Refusal::FusedInvalid`])
/// and its pattern stays unfused — so whatever runs unfused on `mem` also runs with fusions.
/// The report says what fused and why the rest did not.
pub fn layer_step_with(
    t: &LayerTensors,
    shape: &GdnShape,
    step: &Step,
    init: &LayerInit,
    fusions: crate::fusion::Options,
    mem: &dyn Memory,
) -> Result<CompiledStep> {
    if fusions == crate::fusion::Options::OFF {
        return Ok(CompiledStep { ops: unfused_ops(t, shape, step, init.precision)?, report: crate::fusion::Report::all_off(0) });
    }
    let spec = crate::graph::layer::LayerSpec {
        weights: init.mat_vec_weights,
        precision: init.precision,
        ..crate::graph::layer::LayerSpec::new(*shape, *step)
    };
    let nodes = crate::graph::layer::ggml_layer_ops(t, &spec)?.into_iter().map(|op| crate::graph::Node::new(op, Some(0))).collect();
    // What the step hands on: both caches, its products and the attention output (the
    // intermediates in between may be eliminated).
    let observed = [t.conv_cache, t.ssm_cache, t.conv_out, t.q_norm, t.k_norm, t.alpha, t.beta_raw, t.beta, t.gate, t.attn_out];
    let live_out = crate::graph::ByteSet::of_all(&observed, crate::graph::Bound::Over);
    let (nodes, report) = crate::fusion::compile_for(nodes, &live_out, fusions, Some(mem));
    Ok(CompiledStep { ops: nodes.into_iter().map(|n| n.op).collect(), report })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{Cpy, Scale};

    fn f32s(buffer: usize, n: usize) -> Tensor {
        Tensor::new(BufferId(buffer), Layout::contiguous(DType::F32, [n, 1, 1, 1]))
    }

    #[test]
    fn an_op_writing_a_read_only_buffer_is_refused_and_reading_one_is_not() {
        let copy = Cpy { src: f32s(0, 8), dst: f32s(1, 8) };
        // Source read-only, destination writable: fine.
        assert!(refuse_read_only_writes(&copy, &[true, false]).is_ok());
        // Destination read-only: refused, naming the buffer.
        let err = refuse_read_only_writes(&copy, &[false, true]).unwrap_err();
        assert!(matches!(&err, Error::Invalid { what, .. } if what.contains("buffer 1")), "{err}");
        // In-place op on a read-only buffer.
        let scale = Scale { src: f32s(2, 4), dst: f32s(2, 4), scale: 0.0, bias: 0.0 };
        assert!(refuse_read_only_writes(&scale, &[false, false, true]).is_err());
        // Ids past the flags (rgdn's own buffers) are writable.
        assert!(refuse_read_only_writes(&scale, &[]).is_ok());
    }

    /// [hardening] qkv placed in the conv cache's buffer, on a row the step never touches: the
    /// byte-level check accepts the conv chain, GDN_CONV_CHAIN's own rule (the cache taken
    /// whole) refuses it. Planned against the memory, the chain stays unfused (a named
    /// refusal), every op of the step validates, and its bytes equal the unfused step's.
    #[test]
    fn the_fused_step_is_planned_against_the_memory_it_runs_on() {
        use crate::fusion::{Options, Outcome, Refusal};
        use crate::memory::HostMemory;
        use crate::reference::math::ExactMufu;
        use rand::SeedableRng;
        let shape = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 128, d_conv: 4, eps: 1e-6 };
        // Two cells: the step reads and writes cell 0, row 1 of the conv cache is untouched.
        let step = Step { cells: 2, ..Step::new(2, 0) };
        let init = LayerInit::default();
        let mut mem = HostMemory::new();
        let mut t = LayerTensors::alloc(&mut mem, &shape, &step, &init).unwrap();
        t.fill_random(&mut mem, &shape, &mut rand::rngs::StdRng::seed_from_u64(27), &init).unwrap();
        let row = t.conv_cache.layout.nb[1];
        let qkv = Tensor::new(t.conv_cache.buffer, t.qkv_mixed.layout.view(t.qkv_mixed.ne(), t.qkv_mixed.layout.nb, row));
        let values = mem.to_f32_vec(&t.qkv_mixed).unwrap();
        mem.fill_f32(&qkv, &values).unwrap();
        t.qkv_mixed = qkv;

        let unfused = layer_step(&t, &shape, &step, &init, false, &mem).unwrap();
        let fused = layer_step_with(&t, &shape, &step, &init, Options::ALL, &mem).unwrap();
        let chain = fused.report.layers[0].outcome("conv_chain");
        assert!(matches!(chain, Some(Outcome::Refused(Refusal::FusedInvalid(_)))), "{}", fused.report);
        for op in &fused.ops {
            op.validate(&mem).unwrap_or_else(|e| panic!("{} refused on the memory it was planned for: {e}", op.name()));
        }
        assert!(fused.report.fired("pair") + fused.report.fired("gate_pair") > 0, "{}", fused.report);
        let run = |ops: &[Box<dyn Op>]| {
            let mut m = mem.clone();
            ops.iter().for_each(|op| op.reference(&mut m, &mut ExactMufu).unwrap());
            m
        };
        let (a, b) = (run(&unfused), run(&fused.ops));
        for x in [t.conv_cache, t.ssm_cache, t.conv_out, t.q_norm, t.k_norm, t.alpha, t.beta_raw, t.beta, t.gate, t.attn_out] {
            assert_eq!(a.bytes(x.buffer), b.bytes(x.buffer), "buffer {}", x.buffer.0);
        }
    }

    #[test]
    fn bound_buffers_start_aligned() {
        assert!(check_aligned(0x7f00_0000_0100).is_ok());
        assert!(check_aligned(0x7f00_0000_0110).is_ok());
        assert!(matches!(check_aligned(0x7f00_0000_0104), Err(Error::Invalid { .. })));
    }

    #[test]
    fn slice_byte_counts_are_checked() {
        assert_eq!(bytes_of::<f32>(3).unwrap(), 12);
        assert!(matches!(bytes_of::<u64>(usize::MAX / 4), Err(Error::Overflow { .. })));
        assert_eq!(index_bytes(&[1, -1]), vec![1, 0, 0, 0, 255, 255, 255, 255]);
    }
}
