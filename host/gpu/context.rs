//! [`Gpu`]: context, stream, the rgdn PTX module, and the single launch path.

use super::probe::{GpuInfo, probe};
use crate::error::{Error, Result};
use crate::kernels::abi;
use cudarc::driver::{CudaContext, CudaEvent, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

/// One range of device memory: an allocation of rgdn's own, or memory the caller owns (bound by
/// [`crate::engine::CallerMemory`], which keeps the caller's borrow alive while it is in use).
/// Kernels address it through raw device pointers computed from views that ops validated
/// against [`DeviceBuffer::len`].
pub struct DeviceBuffer {
    storage: Storage,
    ptr: u64,
    len: usize,
}

enum Storage {
    /// rgdn's allocation (freed when the buffer drops).
    Owned(CudaSlice<u8>),
    /// The caller's memory: `len` bytes at `ptr`, never freed here.
    Caller,
}

impl DeviceBuffer {
    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Device address of the first byte.
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }

    /// `len` bytes of caller memory at `ptr`.
    ///
    /// # Safety
    /// `ptr..ptr + len` must be device memory of the [`Gpu`]'s context that stays allocated, and
    /// that nothing else writes while rgdn uses it, for as long as the buffer is used.
    pub(crate) unsafe fn caller(ptr: u64, len: usize) -> Self {
        DeviceBuffer { storage: Storage::Caller, ptr, len }
    }
}

/// A kernel parameter, pushed by value in declaration order.
// Arguments live on the stack for one launch and are never stored: the size of `Params` costs
// a copy, not memory.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy, Debug)]
pub enum KernelArg {
    /// A device address (`*const T` / `*mut T` in the kernel); 0 for an absent optional operand.
    Ptr(u64),
    /// `usize` in the kernel (element strides and counts).
    Usize(u64),
    /// A `u32` parameter.
    U32(u32),
    /// An `i32` parameter.
    I32(i32),
    /// An `f32` parameter.
    F32(f32),
    /// A kernel's whole parameter list as one `#[repr(C)]` struct declared in `abi.rs` (compiled
    /// into both the kernel and the host, so entry and launch cannot drift), passed by value.
    Params(ParamBlock),
}

/// [seq-batch] Dynamic shared memory a launch gets without raising the function's limit (CUDA's
/// default: 48 KiB).
const DEFAULT_SHARED_BYTES: u32 = 48 * 1024;

/// Capacity of a [`ParamBlock`] in bytes: CUDA's kernel-parameter limit before 12.1 (4 KiB),
/// which every driver we load takes. The largest struct, GDN_LAYER_STEP_REPLAY's, is 1088 bytes;
/// [`ParamBlock::of`] refuses a larger struct at compile time.
pub const PARAM_BLOCK_BYTES: usize = 4096;

/// The bytes of one by-value parameter struct. The driver copies exactly the parameter's
/// declared size (from the PTX signature) from this block, so a block larger than the struct is
/// fine; [`ParamBlock::of`] refuses a struct larger than the block.
#[derive(Clone, Copy)]
pub struct ParamBlock {
    words: [u64; PARAM_BLOCK_BYTES / 8],
    len: usize,
}

impl std::fmt::Debug for ParamBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ParamBlock({} bytes)", self.len)
    }
}

/// A parameter struct that may travel as raw bytes.
///
/// # Safety
/// The type must be `#[repr(C)]`, `Copy`, without padding bytes (so every byte is initialised),
/// alignment ≤ 8, and be exactly the type the kernel entry takes by value.
pub unsafe trait KernelParams: Copy + 'static {}

impl ParamBlock {
    /// The bytes of `params` (a struct larger than [`PARAM_BLOCK_BYTES`] or aligned above 8 does
    /// not compile).
    pub fn of<P: KernelParams>(params: &P) -> Result<Self> {
        // Every parameter struct a launch passes is checked when the launch is compiled (session
        // 25: a 1088-byte struct met a 1024-byte block only on the GPU).
        const {
            assert!(
                std::mem::size_of::<P>() <= PARAM_BLOCK_BYTES && std::mem::align_of::<P>() <= 8,
                "a parameter struct larger than PARAM_BLOCK_BYTES or aligned above 8"
            )
        };
        let len = std::mem::size_of::<P>();
        let mut words = [0u64; PARAM_BLOCK_BYTES / 8];
        // SAFETY: `P: KernelParams` has no padding, so all `len` bytes are initialised; the
        // destination holds PARAM_BLOCK_BYTES ≥ len bytes and cannot overlap a stack value.
        unsafe { std::ptr::copy_nonoverlapping(params as *const P as *const u8, words.as_mut_ptr() as *mut u8, len) };
        Ok(ParamBlock { words, len })
    }

    /// The struct's bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `words` holds PARAM_BLOCK_BYTES initialised bytes and len ≤ that.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr() as *const u8, self.len) }
    }
}

/// Grid, block and dynamic shared memory of one launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchDims {
    /// Blocks per grid (x, y, z).
    pub grid: (u32, u32, u32),
    /// Threads per block (x, y, z).
    pub block: (u32, u32, u32),
    /// Dynamic shared memory per block, in bytes.
    pub shared_bytes: u32,
}

impl LaunchDims {
    /// A launch shape without dynamic shared memory.
    pub fn new(grid: (u32, u32, u32), block: (u32, u32, u32)) -> Self {
        LaunchDims { grid, block, shared_bytes: 0 }
    }

    /// The same shape with `shared_bytes` of dynamic shared memory.
    pub fn with_shared_bytes(self, shared_bytes: u32) -> Self {
        LaunchDims { shared_bytes, ..self }
    }
}

/// How a kernel is launched. The op decides (it is part of its [`PreparedLaunch`]), never a
/// logging or timing switch: the path users run is the path tests run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LaunchKind {
    /// `cuLaunchKernel`: blocks are scheduled as resources free up.
    Plain,
    /// `cuLaunchCooperativeKernel`: every block of the grid is resident at once, or the launch
    /// is refused — what a grid whose blocks wait on each other needs. rgdn refuses a grid
    /// larger than the device's co-resident block count itself ([`Error::NotCoResident`])
    /// before the driver is asked.
    Cooperative,
    /// Not a kernel: a stream-ordered device-to-device copy (the graph's STAGE nodes). Never
    /// in the launch log.
    Copy,
    /// \[overlap\] `cuLaunchKernelEx` with programmatic stream serialization: the grid may start
    /// once every block of the stream's previous grid ran `griddepcontrol.launch_dependents`,
    /// before that grid completed; its kernel waits (`griddepcontrol.wait`) before it touches
    /// anything the previous grids may touch. Only the overlap pass (`fusion::overlap`), which
    /// proves that rule on the plan, makes an op launch so.
    Programmatic,
}

/// One kernel launch, prepared by an op's [`crate::ops::Op::prepare`] after its validation:
/// the function, the launch shape, the parameter block and the [`LaunchKind`] — everything
/// [`Gpu::run`] needs, so that a plan ([`crate::engine::StepPlan`]) validates once and then
/// only launches. Bound to the [`Gpu`] it was prepared on (its module, its readiness state).
#[derive(Clone, Debug)]
pub struct PreparedLaunch {
    work: Work,
    entry: &'static str,
    dims: LaunchDims,
    kind: LaunchKind,
    gpu: GpuKey,
}

#[derive(Clone, Debug)]
enum Work {
    /// `co_resident`: for a cooperative launch, the device's co-resident block count for this
    /// function, block size and shared memory, asked when the launch was prepared (it depends
    /// on nothing else: the launch runs only on the `Gpu` it was prepared on); 0 otherwise.
    Kernel {
        func: CudaFunction,
        args: Vec<KernelArg>,
        co_resident: u32,
    },
    Copy {
        dst: u64,
        src: u64,
        bytes: usize,
    },
}

impl PreparedLaunch {
    /// The PTX entry.
    pub fn entry(&self) -> &'static str {
        self.entry
    }

    /// The launch shape (all zeros for a [`LaunchKind::Copy`]).
    pub fn dims(&self) -> LaunchDims {
        self.dims
    }

    /// Plain or cooperative: decided by the op that prepared it.
    pub fn kind(&self) -> LaunchKind {
        self.kind
    }
}

/// Which [`Gpu`] a [`PreparedLaunch`] belongs to: its context and its readiness state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct GpuKey {
    ctx: usize,
    grid_sync: u64,
}

/// One launch as the log saw it; `elapsed_ms` is filled when timing was on.
#[derive(Clone, Debug)]
pub struct LaunchRecord {
    /// The PTX entry (or the label of a foreign function).
    pub entry: &'static str,
    /// Its launch shape.
    pub dims: LaunchDims,
    /// Event time of the launch in milliseconds, when timing was on.
    pub elapsed_ms: Option<f32>,
}

/// The opt-in launch recorder: off by default, so a long-running engine keeps no per-launch
/// state. While recording (or timing) is on, every launch is kept until [`Gpu::take_launches`].
#[derive(Default)]
struct LaunchLog {
    records: Vec<LaunchRecord>,
    pending_events: Vec<(usize, CudaEvent, CudaEvent)>,
    recording: bool,
    timing: bool,
}

/// The device, its stream and the rgdn kernels. Every launch of the library goes through one
/// path — [`Gpu::run`] of a [`PreparedLaunch`] (what [`Gpu::launch`] and the ops' launches do;
/// [`Gpu::launch_function`] for test oracles) — which launches as the op's [`LaunchKind`] says
/// and, only when the recorder is on ([`Gpu::set_recording`], [`Gpu::set_timing`]), also logs
/// and times the launch: no switch chooses another launch.
///
/// [`Gpu::new`] makes its own context and stream on device 0; [`Gpu::from_stream`] runs on an
/// engine's own context and stream instead.
pub struct Gpu {
    info: GpuInfo,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    module: Arc<CudaModule>,
    functions: Mutex<HashMap<&'static str, CudaFunction>>,
    log: Mutex<LaunchLog>,
    /// Co-resident block counts per (entry, block threads, shared bytes): the driver's
    /// occupancy query runs once per shape, not per cooperative launch.
    co_resident: Mutex<HashMap<(&'static str, u32, u32), u32>>,
    /// [seq-batch] The dynamic shared-memory limit set on each entry above the default 48 KiB
    /// (`CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`, one value per function): only ever
    /// raised, so that a shape asked for earlier, with more shared memory, still launches after a
    /// smaller one was asked for.
    shared_limit: Mutex<HashMap<&'static str, u32>>,
    /// [layer-step] The cross-block readiness state (`kernels-gpu/src/device/grid.rs`: `done`,
    /// `arrived` and the work-item flags, [`abi::GRID_SYNC_BYTES`]) for cooperative launches on
    /// this Gpu's one stream; zero at creation, and each launch that uses it leaves `done` =
    /// `arrived` for the next.
    grid_sync: DeviceBuffer,
}

impl Gpu {
    /// Probes for a driver and device (never panics), then creates a context on device 0 and
    /// loads the rgdn PTX module.
    pub fn new() -> Result<Self> {
        let info = probe()?;
        let ctx = CudaContext::new(0)?;
        // One stream, and ordering is the stream's: cudarc's per-buffer event tracking would
        // only add events (and break graph capture).
        // SAFETY: called before any allocation or launch on this context.
        unsafe { ctx.disable_event_tracking() };
        // [bench] A stream of our own, not the legacy NULL stream: CUDA refuses to capture the
        // NULL stream into a graph (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED), and the bench
        // replays captured forwards. All work still goes through this one stream, in order.
        let stream = ctx.new_stream()?;
        Self::on(info, stream)
    }

    /// Runs on the caller's stream (and its context, `stream.context()`): loads the rgdn PTX
    /// module into that context; every launch, copy and allocation of this `Gpu` is ordered on
    /// `stream`. The context's cudarc event tracking is left as the caller set it: with it on,
    /// buffers bound through [`crate::engine::CallerMemory`] are ordered against the caller's
    /// other streams by cudarc's events; with it off, ordering across streams is the caller's.
    pub fn from_stream(stream: Arc<CudaStream>) -> Result<Self> {
        let info = super::probe::probe_device(stream.context().ordinal())?;
        Self::on(info, stream)
    }

    fn on(info: GpuInfo, stream: Arc<CudaStream>) -> Result<Self> {
        let ctx = stream.context().clone();
        let module = ctx.load_module(Ptx::from_src(crate::kernels::PTX))?;
        // Allocated here, not lazily: an allocation during stream capture would fail.
        let grid_sync = Self::wrap(stream.alloc_zeros::<u8>(abi::GRID_SYNC_BYTES)?, abi::GRID_SYNC_BYTES, &stream);
        Ok(Gpu {
            info,
            ctx,
            stream,
            module,
            functions: Mutex::new(HashMap::new()),
            log: Mutex::new(LaunchLog::default()),
            co_resident: Mutex::new(HashMap::new()),
            shared_limit: Mutex::new(HashMap::new()),
            grid_sync,
        })
    }

    /// What the probe found about the device this `Gpu` runs on.
    pub fn info(&self) -> &GpuInfo {
        &self.info
    }

    /// The one stream every launch and copy goes to.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The context the module is loaded in.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// Loads another PTX module (test oracles compiled by nvcc).
    pub fn load_module(&self, ptx_src: &str) -> Result<Arc<CudaModule>> {
        Ok(self.ctx.load_module(Ptx::from_src(ptx_src))?)
    }

    /// A new zero-filled device buffer.
    pub fn alloc(&self, len: usize) -> Result<DeviceBuffer> {
        // A zero-byte allocation is refused by the driver; keep one byte behind empty buffers.
        let slice = self.stream.alloc_zeros::<u8>(len.max(1))?;
        Ok(Self::wrap(slice, len, &self.stream))
    }

    /// A new device buffer holding `bytes`.
    pub fn upload(&self, bytes: &[u8]) -> Result<DeviceBuffer> {
        if bytes.is_empty() {
            return self.alloc(0);
        }
        let slice = self.stream.clone_htod(bytes)?;
        Ok(Self::wrap(slice, bytes.len(), &self.stream))
    }

    /// `bytes` into caller memory at `ptr`, in stream order: after every earlier launch on the
    /// stream (a step still reading the old index values), before every later one. No
    /// synchronisation (it would cost a stall per step and break graph capture).
    fn write_caller(&self, ptr: u64, bytes: &[u8]) -> Result<()> {
        self.ctx.bind_to_thread()?;
        // SAFETY: `ptr` addresses a caller buffer of at least `bytes.len()` bytes (`write`
        // checked the length; binding established the range). `bytes` is pageable host memory,
        // which the driver copies to staging memory before `cuMemcpyHtoDAsync` returns (CUDA's
        // documented behaviour, which cudarc's own `memcpy_htod` relies on too), so its borrow
        // may end at return.
        unsafe { cudarc::driver::result::memcpy_htod_async(ptr, bytes, self.stream.cu_stream()) }?;
        Ok(())
    }

    /// Overwrites a buffer with `bytes` (same length).
    pub fn write(&self, buf: &mut DeviceBuffer, bytes: &[u8]) -> Result<()> {
        if bytes.len() != buf.len {
            return Err(Error::Invalid { op: "Gpu::write", what: format!("buffer holds {} bytes, got {}", buf.len, bytes.len()) });
        }
        if bytes.is_empty() {
            return Ok(());
        }
        match &mut buf.storage {
            Storage::Owned(slice) => self.stream.memcpy_htod(bytes, slice)?,
            Storage::Caller => self.write_caller(buf.ptr, bytes)?,
        }
        Ok(())
    }

    /// Copies a buffer to the host (waits for all earlier work on the stream).
    pub fn download(&self, buf: &DeviceBuffer) -> Result<Vec<u8>> {
        let mut out = vec![0u8; buf.len];
        match &buf.storage {
            Storage::Owned(slice) => {
                let mut all = vec![0u8; slice.len()];
                self.stream.memcpy_dtoh(slice, &mut all)?;
                self.stream.synchronize()?;
                out.copy_from_slice(&all[..buf.len]);
            }
            Storage::Caller if buf.len > 0 => {
                self.ctx.bind_to_thread()?;
                // SAFETY: binding established that `buf.ptr..+buf.len` is live device memory;
                // `out` holds exactly `buf.len` bytes and outlives the copy (synchronized below).
                unsafe { cudarc::driver::result::memcpy_dtoh_async(&mut out, buf.ptr, self.stream.cu_stream()) }?;
                self.stream.synchronize()?;
            }
            Storage::Caller => {}
        }
        Ok(out)
    }

    fn wrap(slice: CudaSlice<u8>, len: usize, stream: &Arc<CudaStream>) -> DeviceBuffer {
        // With event tracking off the guard records nothing; drop it before moving the slice.
        let ptr = {
            let (ptr, _sync) = slice.device_ptr(stream);
            ptr
        };
        DeviceBuffer { storage: Storage::Owned(slice), ptr, len }
    }

    /// Waits for all launched work; reports any asynchronous kernel fault.
    pub fn synchronize(&self) -> Result<()> {
        Ok(self.stream.synchronize()?)
    }

    /// Launches `entry` of the rgdn module, plainly ([`LaunchKind::Plain`]).
    ///
    /// # Safety
    /// `args` must match the entry's parameter list in number, order and type, and every
    /// pointer with the extents the kernel will derive from the other arguments and `dims` must
    /// lie inside live device allocations (the op wrappers establish this by validation).
    pub unsafe fn launch(&self, entry: &'static str, dims: LaunchDims, args: &[KernelArg]) -> Result<()> {
        // SAFETY: forwarded to the caller.
        let launch = unsafe { self.prepare(entry, dims, args) }?;
        // SAFETY: prepared just now, on the caller's promise.
        unsafe { self.run(&launch) }
    }

    /// [layer-step] Launches `entry` cooperatively ([`LaunchKind::Cooperative`]): every block
    /// of the grid runs at once or the launch is refused, which blocks that wait on each other
    /// need. A grid above [`Gpu::co_resident_blocks`] is refused ([`Error::NotCoResident`]).
    ///
    /// # Safety
    /// As [`Gpu::launch`].
    pub unsafe fn launch_cooperative(&self, entry: &'static str, dims: LaunchDims, args: &[KernelArg]) -> Result<()> {
        // SAFETY: forwarded to the caller.
        let launch = unsafe { self.prepare_cooperative(entry, dims, args) }?;
        // SAFETY: prepared just now, on the caller's promise.
        unsafe { self.run(&launch) }
    }

    /// A plain launch of `entry`, prepared to run later ([`Gpu::run`]): the function is looked
    /// up and the shape checked now.
    ///
    /// # Safety
    /// As [`Gpu::launch`], for as long as the launch may run.
    pub unsafe fn prepare(&self, entry: &'static str, dims: LaunchDims, args: &[KernelArg]) -> Result<PreparedLaunch> {
        self.prepared(entry, dims, args, LaunchKind::Plain)
    }

    /// [layer-step] A cooperative launch of `entry`, prepared to run later; a grid that
    /// cannot be co-resident is refused when it is run ([`Error::NotCoResident`]). The device's
    /// co-resident block count for it ([`Gpu::co_resident_blocks`]) is asked now, so that a run
    /// only compares.
    ///
    /// # Safety
    /// As [`Gpu::launch`], for as long as the launch may run.
    pub unsafe fn prepare_cooperative(&self, entry: &'static str, dims: LaunchDims, args: &[KernelArg]) -> Result<PreparedLaunch> {
        self.prepared(entry, dims, args, LaunchKind::Cooperative)
    }

    /// \[overlap\] A programmatic launch of `entry` ([`LaunchKind::Programmatic`]), prepared to run
    /// later: it may start before the stream's previous grid completed.
    ///
    /// # Safety
    /// As [`Gpu::launch`], and the overlap rule for the previous grids of the stream whenever it
    /// runs: what the entry touches before its `griddepcontrol.wait` is touched by no grid that
    /// may still run beside it (`fusion::overlap` proves it for a compiled plan).
    pub unsafe fn prepare_programmatic(&self, entry: &'static str, dims: LaunchDims, args: &[KernelArg]) -> Result<PreparedLaunch> {
        self.prepared(entry, dims, args, LaunchKind::Programmatic)
    }

    fn prepared(&self, entry: &'static str, dims: LaunchDims, args: &[KernelArg], kind: LaunchKind) -> Result<PreparedLaunch> {
        let func = self.function(entry)?;
        check_dims(entry, &dims)?;
        let co_resident = match kind {
            LaunchKind::Cooperative => self.co_resident_of(&func, entry, block_threads(&dims), dims.shared_bytes)?,
            LaunchKind::Plain | LaunchKind::Programmatic | LaunchKind::Copy => {
                self.raise_shared_limit(&func, entry, dims.shared_bytes)?;
                0
            }
        };
        Ok(PreparedLaunch { work: Work::Kernel { func, args: args.to_vec(), co_resident }, entry, dims, kind, gpu: self.key() })
    }

    /// A stream-ordered copy of `bytes` bytes from device address `src` to `dst`, prepared to
    /// run later; `label` names it in errors (copies are not logged).
    ///
    /// # Safety
    /// `src..src + bytes` and `dst..dst + bytes` lie in live device allocations of this
    /// context and do not overlap, for as long as the copy may run.
    pub unsafe fn prepare_copy(&self, label: &'static str, dst: u64, src: u64, bytes: usize) -> Result<PreparedLaunch> {
        let dims = LaunchDims::new((0, 0, 0), (0, 0, 0));
        Ok(PreparedLaunch { work: Work::Copy { dst, src, bytes }, entry: label, dims, kind: LaunchKind::Copy, gpu: self.key() })
    }

    /// Launches a prepared launch on this `Gpu`'s stream, as its [`LaunchKind`] says (whatever
    /// the recorder and timing switches say: they only log). A launch prepared on another
    /// `Gpu` is refused.
    ///
    /// # Safety
    /// What [`Gpu::prepare`] was promised must still hold: every buffer the launch addresses is
    /// still allocated with the length it was validated against, and every index the kernel
    /// reads holds a value its op's validation accepts
    /// ([`crate::ops::Op::check_indices`]).
    pub unsafe fn run(&self, launch: &PreparedLaunch) -> Result<()> {
        if launch.gpu != self.key() {
            return Err(Error::Invalid {
                op: launch.entry,
                what: "the launch was prepared on another Gpu (its module and readiness state are that Gpu's)".into(),
            });
        }
        match launch.work {
            // SAFETY: forwarded to the caller.
            Work::Kernel { ref func, ref args, co_resident } => unsafe {
                self.launch_with(func, launch.entry, launch.dims, args, launch.kind, co_resident)
            },
            Work::Copy { dst, src, bytes } => {
                // Raw driver calls do not bind the context themselves.
                self.ctx.bind_to_thread()?;
                // SAFETY: the caller's promise (`prepare_copy`): both ranges live, disjoint; the
                // copy is ordered on this Gpu's one stream.
                unsafe { cudarc::driver::result::memcpy_dtod_async(dst, src, bytes, self.stream.cu_stream()) }?;
                Ok(())
            }
        }
    }

    fn key(&self) -> GpuKey {
        GpuKey { ctx: self.ctx.cu_ctx() as usize, grid_sync: self.grid_sync.device_ptr() }
    }

    /// [layer-step] Device address of the cross-block readiness state (see the field's docs),
    /// for the kernels launched with [`Gpu::launch_cooperative`].
    pub fn grid_sync(&self) -> u64 {
        self.grid_sync.device_ptr()
    }

    /// [layer-step] How many blocks of `entry` with `block_threads` threads and `shared_bytes`
    /// of dynamic shared memory can be resident at once on the whole device (the driver's
    /// occupancy for the compiled kernel × the multiprocessor count): the largest grid a
    /// cooperative launch of it takes. Asked of the driver once per shape. [seq-batch] Above the 48
    /// KiB a launch gets without asking, the entry's dynamic shared-memory limit is raised to
    /// `shared_bytes` first (the driver refuses a request past the device's opt-in limit: a typed
    /// error).
    pub fn co_resident_blocks(&self, entry: &'static str, block_threads: u32, shared_bytes: u32) -> Result<u32> {
        let func = self.function(entry)?;
        self.co_resident_of(&func, entry, block_threads, shared_bytes)
    }

    /// Raises `entry`'s dynamic shared-memory limit to `shared_bytes` when that is above the
    /// default 48 KiB (a launch asking for more fails with CUDA_ERROR_INVALID_VALUE otherwise).
    fn raise_shared_limit(&self, func: &CudaFunction, entry: &'static str, shared_bytes: u32) -> Result<()> {
        if shared_bytes > DEFAULT_SHARED_BYTES {
            // The limit is the function's, not the shape's: lowering it for this shape would make
            // a cached larger shape's launch fail (CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE).
            let mut limits = self.shared_limit.lock().unwrap_or_else(|p| p.into_inner());
            if limits.get(entry).is_none_or(|&set| set < shared_bytes) {
                let bytes = i32::try_from(shared_bytes)
                    .map_err(|_| Error::Unsupported { op: entry, what: format!("{shared_bytes} bytes of dynamic shared memory") })?;
                func.set_attribute(cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes)?;
                limits.insert(entry, shared_bytes);
            }
        }
        Ok(())
    }

    /// The device's multiprocessor count (0 if the driver reported a negative one).
    pub fn multiprocessors(&self) -> Result<u32> {
        let sms = self.ctx.attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        Ok(u32::try_from(sms).unwrap_or(0))
    }

    fn co_resident_of(&self, func: &CudaFunction, entry: &'static str, block_threads: u32, shared_bytes: u32) -> Result<u32> {
        let key = (entry, block_threads, shared_bytes);
        if let Some(&n) = self.co_resident.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
            return Ok(n);
        }
        self.raise_shared_limit(func, entry, shared_bytes)?;
        let per_sm = func.occupancy_max_active_blocks_per_multiprocessor(block_threads, shared_bytes as usize, None)?;
        let n = per_sm.saturating_mul(self.multiprocessors()?);
        self.co_resident.lock().unwrap_or_else(|p| p.into_inner()).insert(key, n);
        Ok(n)
    }

    /// Launches a function of any loaded module, plainly; `label` names it in the launch log.
    ///
    /// # Safety
    /// As [`Gpu::launch`].
    pub unsafe fn launch_function(&self, func: &CudaFunction, label: &'static str, dims: LaunchDims, args: &[KernelArg]) -> Result<()> {
        check_dims(label, &dims)?;
        // SAFETY: forwarded to the caller.
        unsafe { self.launch_with(func, label, dims, args, LaunchKind::Plain, 0) }
    }

    /// \[overlap\] `cuLaunchKernelEx` of `func` on this stream with one attribute, programmatic
    /// stream serialization (cudarc's launch builder has no attribute list).
    ///
    /// # Safety
    /// As [`Gpu::prepare_programmatic`].
    unsafe fn launch_programmatic(&self, func: &CudaFunction, cfg: &LaunchConfig, args: &[KernelArg]) -> Result<()> {
        use cudarc::driver::sys;
        // Raw driver calls do not bind the context themselves.
        self.ctx.bind_to_thread()?;
        // The kernel's parameter list: one pointer to each argument's value, which `args`
        // holds for the whole call.
        let mut params: Vec<*mut std::ffi::c_void> = args
            .iter()
            .map(|a| match a {
                KernelArg::Ptr(v) | KernelArg::Usize(v) => v as *const u64 as *mut std::ffi::c_void,
                KernelArg::U32(v) => v as *const u32 as *mut std::ffi::c_void,
                KernelArg::I32(v) => v as *const i32 as *mut std::ffi::c_void,
                KernelArg::F32(v) => v as *const f32 as *mut std::ffi::c_void,
                KernelArg::Params(block) => block.words.as_ptr() as *mut std::ffi::c_void,
            })
            .collect();
        // SAFETY: an all-zero attribute value is a valid union value; the field set is the
        // attribute's.
        let mut value: sys::CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
        value.programmaticStreamSerializationAllowed = 1;
        let mut attribute = sys::CUlaunchAttribute {
            id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
            pad: [0; 4],
            value,
        };
        let config = sys::CUlaunchConfig {
            gridDimX: cfg.grid_dim.0,
            gridDimY: cfg.grid_dim.1,
            gridDimZ: cfg.grid_dim.2,
            blockDimX: cfg.block_dim.0,
            blockDimY: cfg.block_dim.1,
            blockDimZ: cfg.block_dim.2,
            sharedMemBytes: cfg.shared_mem_bytes,
            hStream: self.stream.cu_stream(),
            attrs: &mut attribute,
            numAttrs: 1,
        };
        // SAFETY: `config` and its one attribute live through the call; `params` holds one
        // pointer per kernel parameter, each to a value `args` keeps alive (the caller's promise
        // that they match the entry); the function is this context's.
        unsafe { sys::cuLaunchKernelEx(&config, func.cu_function(), params.as_mut_ptr(), std::ptr::null_mut()) }.result()?;
        Ok(())
    }

    /// The one launch path, for both kinds and every recorder state: the kind is the caller's
    /// (an op's), and the recorder and timing only add a record and events around the launch.
    /// `co_resident`: a cooperative launch's co-resident block count (see [`Work::Kernel`]).
    ///
    /// # Safety
    /// As [`Gpu::launch`].
    unsafe fn launch_with(
        &self,
        func: &CudaFunction,
        label: &'static str,
        dims: LaunchDims,
        args: &[KernelArg],
        kind: LaunchKind,
        co_resident: u32,
    ) -> Result<()> {
        let cfg = LaunchConfig { grid_dim: dims.grid, block_dim: dims.block, shared_mem_bytes: dims.shared_bytes };
        let mut builder = self.stream.launch_builder(func);
        for a in args {
            match a {
                KernelArg::Ptr(v) | KernelArg::Usize(v) => builder.arg(v),
                KernelArg::U32(v) => builder.arg(v),
                KernelArg::I32(v) => builder.arg(v),
                KernelArg::F32(v) => builder.arg(v),
                KernelArg::Params(block) => builder.arg(&block.words),
            };
        }
        let mut log = self.log();
        // Timing events need CU_EVENT_DEFAULT: cudarc's default flags disable timing.
        let timed = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = if log.timing { Some(self.stream.record_event(timed)?) } else { None };
        match kind {
            // SAFETY: the caller guarantees the argument list and extents (see `launch`).
            LaunchKind::Plain => unsafe { builder.launch(cfg) }?,
            // The co-residency check belongs to the cooperative launch itself (a comparison with
            // the count asked when it was prepared): any path that launched otherwise would
            // skip it too, and the GPU test that runs an oversize grid with the recorder on and
            // off would see that grid run.
            LaunchKind::Cooperative => {
                check_co_resident(label, &dims, co_resident)?;
                // SAFETY: as above; the grid fits the device at once (just checked).
                unsafe { builder.launch_cooperative(cfg) }?
            }
            LaunchKind::Programmatic => {
                // SAFETY: the caller guarantees the argument list and extents (see `launch`) and
                // the overlap rule (`prepare_programmatic`).
                unsafe { self.launch_programmatic(func, &cfg, args) }?;
                None
            }
            LaunchKind::Copy => return Err(Error::Invalid { op: label, what: "a copy is not a kernel launch".into() }),
        };
        if log.recording || log.timing {
            let index = log.records.len();
            log.records.push(LaunchRecord { entry: label, dims, elapsed_ms: None });
            if let Some(start) = start {
                let end = self.stream.record_event(timed)?;
                log.pending_events.push((index, start, end));
            }
        }
        Ok(())
    }

    fn function(&self, entry: &'static str) -> Result<CudaFunction> {
        let mut functions = self.functions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = functions.get(entry) {
            return Ok(f.clone());
        }
        let f = self.module.load_function(entry)?;
        functions.insert(entry, f.clone());
        Ok(f)
    }

    fn log(&self) -> MutexGuard<'_, LaunchLog> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Turns per-launch event timing on or off (off by default: events cost time). Timed
    /// launches are recorded whether or not [`Gpu::set_recording`] is on.
    pub fn set_timing(&self, on: bool) {
        self.log().timing = on;
    }

    /// Whether per-launch event timing is on.
    pub fn is_timing(&self) -> bool {
        self.log().timing
    }

    /// Turns the launch recorder on or off and returns its previous state. Off by default: an
    /// engine stepping for hours keeps no per-launch bookkeeping. While on, every launch is kept
    /// (entry, shape) until [`Gpu::take_launches`] takes it; the op suite, the bench and
    /// [`crate::graph::exec::run_gpu`] turn it on.
    pub fn set_recording(&self, on: bool) -> bool {
        std::mem::replace(&mut self.log().recording, on)
    }

    /// Whether the launch recorder is on.
    pub fn is_recording(&self) -> bool {
        self.log().recording
    }

    /// Runs `f` with the recorder `on` (and timing off), then puts both back as they were:
    /// how tests run one check in both recorder states.
    pub fn with_recorder<T>(&self, on: bool, f: impl FnOnce() -> T) -> T {
        let (recording, timing) = {
            let mut log = self.log();
            (std::mem::replace(&mut log.recording, on), std::mem::replace(&mut log.timing, false))
        };
        let out = f();
        let mut log = self.log();
        (log.recording, log.timing) = (recording, timing);
        out
    }

    /// Takes the launch log (waits for timed launches to finish first); empty when nothing was
    /// recorded.
    pub fn take_launches(&self) -> Result<Vec<LaunchRecord>> {
        let mut log = self.log();
        if !log.pending_events.is_empty() {
            self.stream.synchronize()?;
        }
        let pending = std::mem::take(&mut log.pending_events);
        for (i, start, end) in pending {
            log.records[i].elapsed_ms = Some(start.elapsed_ms(&end)?);
        }
        Ok(std::mem::take(&mut log.records))
    }

    /// Launches recorded so far per entry, without clearing the log (empty while the recorder
    /// is off).
    pub fn launch_counts(&self) -> BTreeMap<&'static str, usize> {
        let mut counts = BTreeMap::new();
        for r in &self.log().records {
            *counts.entry(r.entry).or_default() += 1;
        }
        counts
    }
}

/// Threads per block of `dims` (saturating: `check_dims` refuses more than 1024).
fn block_threads(dims: &LaunchDims) -> u32 {
    let (bx, by, bz) = dims.block;
    bx.saturating_mul(by).saturating_mul(bz)
}

/// Refuses a cooperative grid larger than `co_resident`, the blocks of `entry` that fit the
/// device at once.
fn check_co_resident(entry: &'static str, dims: &LaunchDims, co_resident: u32) -> Result<()> {
    let (gx, gy, gz) = dims.grid;
    // Saturating: `check_dims` bounds y and z, but this check does not rely on it.
    let grid = (gx as u64).saturating_mul(gy as u64).saturating_mul(gz as u64);
    if grid > co_resident as u64 {
        return Err(Error::NotCoResident { entry, grid, co_resident });
    }
    Ok(())
}

/// The hardware limits a launch shape must respect (checked here, not left to the driver, so
/// the error names the kernel).
fn check_dims(label: &'static str, d: &LaunchDims) -> Result<()> {
    let (bx, by, bz) = d.block;
    let (gx, gy, gz) = d.grid;
    let threads = bx as u64 * by as u64 * bz as u64;
    let why = if threads == 0 || gx == 0 || gy == 0 || gz == 0 {
        Some("an empty grid or block")
    } else if threads > 1024 || bz > 64 {
        Some("a block larger than the device allows")
    } else if gy > 65535 || gz > 65535 {
        Some("a grid y/z dimension above 65535")
    } else {
        None
    };
    match why {
        Some(why) => Err(Error::Unsupported { op: label, what: format!("launch shape grid {:?} block {:?}: {why}", d.grid, d.block) }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The comparison every cooperative launch makes with the count asked at prepare time:
    /// the whole grid (x·y·z, saturating) against it, refusal naming both.
    #[test]
    fn a_cooperative_grid_above_the_co_resident_count_is_refused() {
        let dims = |grid| LaunchDims::new(grid, (128, 1, 1));
        assert!(check_co_resident("E", &dims((2, 3, 1)), 6).is_ok());
        assert!(matches!(
            check_co_resident("E", &dims((2, 3, 2)), 11),
            Err(Error::NotCoResident { entry: "E", grid: 12, co_resident: 11 })
        ));
        let huge = (u32::MAX, u32::MAX, 2);
        assert!(matches!(check_co_resident("E", &dims(huge), u32::MAX), Err(Error::NotCoResident { grid: u64::MAX, .. })));
        assert_eq!(block_threads(&LaunchDims::new((1, 1, 1), (32, 4, 2))), 256);
        assert_eq!(block_threads(&LaunchDims::new((1, 1, 1), (u32::MAX, 2, 1))), u32::MAX);
    }
}
