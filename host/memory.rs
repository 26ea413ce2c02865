//! Buffers that tensors live in: [`HostMemory`] (the CPU reference's) and [`DeviceMemory`] (the
//! GPU's), indexed by the same [`BufferId`]s so one op description runs on either.
//!
//! Row-index tensors (I32, written by the host, read by GET_ROWS) are *index buffers*: their
//! values are kept on the host side of a [`DeviceMemory`] too, so ops can check every index
//! against its source before a launch. No kernel may write an index buffer.

use crate::error::{Error, Result};
use crate::gpu::{DeviceBuffer, Gpu};
use crate::tensor::{BufferId, DType, Layout, Tensor};

/// What op validation needs to know about a memory, on either side.
pub trait Memory {
    /// Size in bytes of a buffer, `None` if it does not exist.
    fn buffer_len(&self, id: BufferId) -> Option<usize>;
    /// Whether the buffer holds row indices (host-known values).
    fn is_index_buffer(&self, id: BufferId) -> bool;
    /// The values of an I32 view of an index buffer, in logical order; `None` when `t` is not
    /// an I32 view of an index buffer, reaches past the buffer's bytes, or has more than
    /// [`MAX_INDEX_VALUES`] elements (a broadcast view with a huge count is refused, never
    /// copied).
    fn index_values(&self, t: &Tensor) -> Option<Vec<i32>>;
    /// [host-cost] The host-known bytes of index buffer `id` (`None` when it is not an index
    /// buffer, or the memory keeps no such copy): what a plan's per-step index rules read in
    /// place instead of copying the values out ([`crate::ops::IndexRules`]). Must be the bytes
    /// [`Memory::index_values`] decodes; the default (`None`) makes the rules use that.
    fn index_bytes(&self, id: BufferId) -> Option<&[u8]> {
        let _ = id;
        None
    }
    /// [seq-batch] The largest power of two (up to [`ALLOCATION_ALIGNMENT`]) dividing the device
    /// address of buffer `id`'s first byte: what a kernel reading it in wide pieces needs to
    /// know. rgdn's own buffers (and the host buffers that model them) start
    /// [`ALLOCATION_ALIGNMENT`]-aligned, as the driver's allocations do.
    fn base_alignment(&self, id: BufferId) -> usize {
        let _ = id;
        ALLOCATION_ALIGNMENT
    }
}

/// [seq-batch] The alignment of a driver allocation's start (cuMemAlloc: at least 256 bytes).
pub const ALLOCATION_ALIGNMENT: usize = 256;

/// The host memory budget of a new [`HostMemory`]: `RGDN_HOST_MEMORY_BUDGET` bytes when set
/// (a plain integer, or with a `K`/`M`/`G` suffix for KiB/MiB/GiB), else 16 GiB.
pub fn default_host_budget() -> usize {
    const DEFAULT: usize = 16 << 30;
    let Ok(v) = std::env::var("RGDN_HOST_MEMORY_BUDGET") else { return DEFAULT };
    let v = v.trim();
    let (digits, shift) = match v.as_bytes().last() {
        Some(b'K' | b'k') => (&v[..v.len() - 1], 10),
        Some(b'M' | b'm') => (&v[..v.len() - 1], 20),
        Some(b'G' | b'g') => (&v[..v.len() - 1], 30),
        _ => (v, 0),
    };
    digits.parse::<usize>().ok().and_then(|n| n.checked_mul(1 << shift)).unwrap_or(DEFAULT)
}

/// Byte-addressed host buffers, allocated within a budget (bytes in all buffers together): an
/// impossible or too large allocation is an [`Error::OutOfMemory`] or [`Error::Overflow`]
/// from the `try_` allocators, never an abort.
#[derive(Clone, Debug)]
pub struct HostMemory {
    buffers: Vec<Vec<u8>>,
    index_buffer: Vec<bool>,
    budget: usize,
    used: usize,
}

impl Default for HostMemory {
    fn default() -> Self {
        HostMemory::with_budget(default_host_budget())
    }
}

const ALLOC: &str = "HostMemory::alloc";

impl HostMemory {
    /// An empty memory with the [`default_host_budget`].
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty memory that holds at most `budget` bytes in all.
    pub fn with_budget(budget: usize) -> Self {
        HostMemory { buffers: Vec::new(), index_buffer: Vec::new(), budget, used: 0 }
    }

    /// The budget, and the bytes already allocated under it.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Bytes allocated so far.
    pub fn used_bytes(&self) -> usize {
        self.used
    }

    /// Bytes that can still be allocated.
    pub fn available_bytes(&self) -> usize {
        self.budget - self.used
    }

    /// Refuses (typed) when `bytes` more would not fit the budget.
    pub fn reserve_check(&self, bytes: usize) -> Result<()> {
        if bytes > self.available_bytes() {
            return Err(Error::OutOfMemory { op: ALLOC, requested: bytes, available: self.available_bytes(), budget: self.budget });
        }
        Ok(())
    }

    /// A zero-filled buffer of `bytes` bytes, or a typed error when it exceeds the budget or the
    /// allocator refuses it.
    pub fn try_alloc(&mut self, bytes: usize) -> Result<BufferId> {
        self.reserve_check(bytes)?;
        let mut buf = Vec::new();
        buf.try_reserve_exact(bytes).map_err(|_| Error::OutOfMemory {
            op: ALLOC,
            requested: bytes,
            available: self.available_bytes(),
            budget: self.budget,
        })?;
        buf.resize(bytes, 0);
        self.used += bytes;
        self.buffers.push(buf);
        self.index_buffer.push(false);
        Ok(BufferId(self.buffers.len() - 1))
    }

    /// A zero-filled buffer of `bytes` bytes. Panics (with the typed error's message, never an
    /// abort) when [`HostMemory::try_alloc`] refuses.
    pub fn alloc(&mut self, bytes: usize) -> BufferId {
        self.try_alloc(bytes).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A new contiguous tensor in its own zero-filled buffer, or a typed error when its size
    /// does not fit in `usize` ([`Error::Overflow`]) or in the budget.
    pub fn try_alloc_tensor(&mut self, dtype: DType, ne: [usize; 4]) -> Result<Tensor> {
        let overflow = || Error::Overflow { op: ALLOC, arg: "ne", what: format!("bytes of a contiguous {dtype:?} tensor of shape {ne:?}") };
        let layout = Layout::try_contiguous(dtype, ne).ok_or_else(overflow)?;
        let bytes = Layout::contiguous_bytes(dtype, ne).ok_or_else(overflow)?;
        let id = self.try_alloc(bytes)?;
        Ok(Tensor::new(id, layout))
    }

    /// A new contiguous tensor in its own zero-filled buffer. Panics (with the typed error's
    /// message, never an abort) when [`HostMemory::try_alloc_tensor`] refuses.
    pub fn alloc_tensor(&mut self, dtype: DType, ne: [usize; 4]) -> Tensor {
        self.try_alloc_tensor(dtype, ne).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A contiguous I32 index tensor holding `values`, in an index buffer of its own.
    pub fn try_alloc_indices(&mut self, values: &[i32]) -> Result<Tensor> {
        let t = self.try_alloc_tensor(DType::I32, [values.len(), 1, 1, 1])?;
        self.index_buffer[t.buffer.0] = true;
        for (w, v) in self.buffers[t.buffer.0].chunks_exact_mut(4).zip(values) {
            w.copy_from_slice(&v.to_le_bytes());
        }
        Ok(t)
    }

    /// [`HostMemory::try_alloc_indices`], panicking on refusal.
    pub fn alloc_indices(&mut self, values: &[i32]) -> Tensor {
        self.try_alloc_indices(values).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Number of buffers (ids `0..n_buffers()`).
    pub fn n_buffers(&self) -> usize {
        self.buffers.len()
    }

    /// The bytes of buffer `id` (panics on a bad id).
    pub fn bytes(&self, id: BufferId) -> &[u8] {
        &self.buffers[id.0]
    }

    /// The bytes of buffer `id`, writable (panics on a bad id).
    pub fn bytes_mut(&mut self, id: BufferId) -> &mut [u8] {
        &mut self.buffers[id.0]
    }

    /// The bytes of element `i` of `t` (`size` bytes from its byte offset), or a typed error
    /// naming `op`: [`Error::Shape`] when `i` lies outside the view's `ne`, [`Error::Overflow`]
    /// when its offset does not fit, [`Error::OutOfBounds`] when its bytes lie outside the
    /// buffer (or the buffer does not exist: `len` 0).
    fn element(&self, op: &'static str, t: &Tensor, i: [usize; 4], size: usize) -> Result<std::ops::Range<usize>> {
        let ne = t.ne();
        if (0..4).any(|d| i[d] >= ne[d]) {
            return Err(Error::Shape { op, arg: "t", expected: format!("a shape holding element {i:?}"), got: ne });
        }
        let overflow = || Error::Overflow { op, arg: "t", what: format!("end of element {i:?}") };
        let start = t.layout.checked_byte_offset(i).ok_or_else(overflow)?;
        let end = start.checked_add(size).ok_or_else(overflow)?;
        let len = self.buffer_len(t.buffer).unwrap_or(0);
        if end > len {
            return Err(Error::OutOfBounds { op, arg: "t", buffer: t.buffer.0, start, end, len });
        }
        Ok(start..end)
    }

    /// Refuses (typed, naming `op`) a view whose bytes are not all inside its buffer: what the
    /// bulk accessors check once before touching any element.
    fn check_view(&self, op: &'static str, t: &Tensor) -> Result<()> {
        let range = t.layout.checked_byte_range().map_err(|o| Error::Overflow { op, arg: "t", what: o.what.into() })?;
        let len = self.buffer_len(t.buffer).unwrap_or(0);
        match range {
            Some(r) if r.end > len => Err(Error::OutOfBounds { op, arg: "t", buffer: t.buffer.0, start: r.start, end: r.end, len }),
            _ => Ok(()),
        }
    }

    fn read_bytes<const N: usize>(&self, op: &'static str, t: &Tensor, i: [usize; 4]) -> Result<[u8; N]> {
        let r = self.element(op, t, i, N)?;
        let mut b = [0; N];
        b.copy_from_slice(&self.buffers[t.buffer.0][r]);
        Ok(b)
    }

    fn write_bytes<const N: usize>(&mut self, op: &'static str, t: &Tensor, i: [usize; 4], b: [u8; N]) -> Result<()> {
        let r = self.element(op, t, i, N)?;
        self.buffers[t.buffer.0][r].copy_from_slice(&b);
        Ok(())
    }

    /// The 32-bit element of `t` at logical index `i` (F32 bits or I32), or a typed error when
    /// `i` is outside the view or the element's bytes outside its buffer (never a panic).
    pub fn read_u32(&self, t: &Tensor, i: [usize; 4]) -> Result<u32> {
        self.read_bytes("HostMemory::read_u32", t, i).map(u32::from_le_bytes)
    }

    /// Writes the 32-bit element of `t` at logical index `i` (refusals as
    /// [`HostMemory::read_u32`]'s; nothing is written then).
    pub fn write_u32(&mut self, t: &Tensor, i: [usize; 4], v: u32) -> Result<()> {
        self.write_bytes("HostMemory::write_u32", t, i, v.to_le_bytes())
    }

    /// The 16-bit element of `t` at logical index `i` (F16/BF16 bits); refusals as
    /// [`HostMemory::read_u32`]'s.
    pub fn read_u16(&self, t: &Tensor, i: [usize; 4]) -> Result<u16> {
        self.read_bytes("HostMemory::read_u16", t, i).map(u16::from_le_bytes)
    }

    /// Writes the 16-bit element of `t` at logical index `i`; refusals as
    /// [`HostMemory::read_u32`]'s.
    pub fn write_u16(&mut self, t: &Tensor, i: [usize; 4], v: u16) -> Result<()> {
        self.write_bytes("HostMemory::write_u16", t, i, v.to_le_bytes())
    }

    /// The F32 element of `t` at logical index `i`; refusals as [`HostMemory::read_u32`]'s.
    pub fn read_f32(&self, t: &Tensor, i: [usize; 4]) -> Result<f32> {
        self.read_bytes("HostMemory::read_f32", t, i).map(f32::from_le_bytes)
    }

    /// Writes the F32 element of `t` at logical index `i`; refusals as
    /// [`HostMemory::read_u32`]'s.
    pub fn write_f32(&mut self, t: &Tensor, i: [usize; 4], v: f32) -> Result<()> {
        self.write_bytes("HostMemory::write_f32", t, i, v.to_le_bytes())
    }

    /// All elements of an F32 view in logical order, or a typed error: the view's bytes outside
    /// its buffer ([`Error::OutOfBounds`]), or more values than the memory's whole budget holds
    /// ([`Error::OutOfMemory`]: a broadcast view, zero strides and a huge count, is refused
    /// instead of allocated).
    pub fn to_f32_vec(&self, t: &Tensor) -> Result<Vec<f32>> {
        const OP: &str = "HostMemory::to_f32_vec";
        self.check_view(OP, t)?;
        let n = t.layout.n_elements();
        let bytes = n.saturating_mul(4);
        let oom = || Error::OutOfMemory { op: OP, requested: bytes, available: self.budget, budget: self.budget };
        if bytes > self.budget {
            return Err(oom());
        }
        let mut out = Vec::new();
        out.try_reserve_exact(n).map_err(|_| oom())?;
        for i in t.layout.indices() {
            out.push(self.read_bytes(OP, t, i).map(f32::from_le_bytes)?);
        }
        Ok(out)
    }

    /// Writes `values` (logical order) into an F32 view, or a typed error (nothing written
    /// then): a count other than the view's ([`Error::Invalid`]), or the view's bytes outside
    /// its buffer ([`Error::OutOfBounds`]).
    pub fn fill_f32(&mut self, t: &Tensor, values: &[f32]) -> Result<()> {
        const OP: &str = "HostMemory::fill_f32";
        let n = t.layout.n_elements();
        if values.len() != n {
            return Err(Error::Invalid { op: OP, what: format!("{} values for a view of {n} elements ({:?})", values.len(), t.ne()) });
        }
        self.check_view(OP, t)?;
        for (i, v) in t.layout.indices().zip(values) {
            self.write_bytes(OP, t, i, v.to_le_bytes())?;
        }
        Ok(())
    }
}

impl Memory for HostMemory {
    fn buffer_len(&self, id: BufferId) -> Option<usize> {
        self.buffers.get(id.0).map(Vec::len)
    }

    fn is_index_buffer(&self, id: BufferId) -> bool {
        self.index_buffer.get(id.0).copied().unwrap_or(false)
    }

    fn index_values(&self, t: &Tensor) -> Option<Vec<i32>> {
        let bytes = self.buffers.get(t.buffer.0)?;
        (self.is_index_buffer(t.buffer) && t.dtype() == DType::I32).then_some(())?;
        read_i32s(bytes, t)
    }

    fn index_bytes(&self, id: BufferId) -> Option<&[u8]> {
        self.buffers.get(id.0).filter(|_| self.is_index_buffer(id)).map(Vec::as_slice)
    }
}

/// Device buffers with the same ids as the [`HostMemory`] they were uploaded from.
pub struct DeviceMemory {
    buffers: Vec<DeviceBuffer>,
    /// Host copies of index buffers (None for data buffers).
    index_shadow: Vec<Option<Vec<u8>>>,
}

impl DeviceMemory {
    /// No buffers yet ([`crate::engine::CallerMemory`] binds the caller's buffers into one).
    pub(crate) fn empty() -> Self {
        DeviceMemory { buffers: Vec::new(), index_shadow: Vec::new() }
    }

    /// Adds `buffer` under the next id; `index_values` are the host copy of an index buffer's
    /// bytes (then they must be the buffer's device contents, byte for byte).
    pub(crate) fn push(&mut self, buffer: DeviceBuffer, index_values: Option<Vec<u8>>) -> BufferId {
        self.buffers.push(buffer);
        self.index_shadow.push(index_values);
        BufferId(self.buffers.len() - 1)
    }

    /// Number of buffers (ids `0..n_buffers()`).
    pub fn n_buffers(&self) -> usize {
        self.buffers.len()
    }

    /// (id, device address, length, index buffer?) of every buffer: what a plan was prepared
    /// on ([`crate::engine::StepPlan`]).
    pub(crate) fn bindings(&self) -> impl Iterator<Item = (usize, u64, usize, bool)> + '_ {
        self.buffers.iter().zip(&self.index_shadow).enumerate().map(|(i, (b, shadow))| (i, b.device_ptr(), b.len(), shadow.is_some()))
    }

    /// Allocates one device buffer per host buffer and copies the contents.
    pub fn upload(gpu: &Gpu, host: &HostMemory) -> Result<Self> {
        let mut buffers = Vec::with_capacity(host.n_buffers());
        let mut index_shadow = Vec::with_capacity(host.n_buffers());
        for (i, bytes) in host.buffers.iter().enumerate() {
            buffers.push(gpu.upload(bytes)?);
            index_shadow.push(host.index_buffer[i].then(|| bytes.clone()));
        }
        Ok(DeviceMemory { buffers, index_shadow })
    }

    /// Copies buffer `id` to the host (waits for all earlier work on the stream).
    pub fn download_buffer(&self, gpu: &Gpu, id: BufferId) -> Result<Vec<u8>> {
        let buffer =
            self.buffers.get(id.0).ok_or_else(|| Error::Invalid { op: "DeviceMemory::download", what: format!("no buffer {}", id.0) })?;
        gpu.download(buffer)
    }

    /// Copies every buffer back into a new [`HostMemory`] (same ids, same index flags).
    pub fn download(&self, gpu: &Gpu) -> Result<HostMemory> {
        let mut host = HostMemory::with_budget(usize::MAX);
        for (i, b) in self.buffers.iter().enumerate() {
            let id = host.try_alloc(0)?;
            host.buffers[id.0] = gpu.download(b)?;
            host.used += host.buffers[id.0].len();
            host.index_buffer[i] = self.index_shadow[i].is_some();
        }
        Ok(host)
    }

    /// Overwrites buffer `id` (which must keep its size) with `bytes`; keeps the index shadow in step.
    pub fn write(&mut self, gpu: &Gpu, id: BufferId, bytes: &[u8]) -> Result<()> {
        let len = self.buffer_len(id).ok_or_else(|| Error::Invalid { op: "DeviceMemory::write", what: format!("no buffer {}", id.0) })?;
        if len != bytes.len() {
            return Err(Error::Invalid {
                op: "DeviceMemory::write",
                what: format!("buffer {} holds {len} bytes, got {}", id.0, bytes.len()),
            });
        }
        gpu.write(&mut self.buffers[id.0], bytes)?;
        if let Some(shadow) = &mut self.index_shadow[id.0] {
            shadow.copy_from_slice(bytes);
        }
        Ok(())
    }

    /// Device address of element (0, 0, 0, 0) of `t`. Callers validate `t` first (then the
    /// sum is inside the buffer; it saturates instead of wrapping otherwise).
    pub fn device_ptr(&self, t: &Tensor) -> u64 {
        self.buffers[t.buffer.0].device_ptr().saturating_add(t.layout.offset as u64)
    }
}

/// Where a view's element (0, 0, 0, 0) lies for a kernel: a device address for a launch
/// ([`DeviceMemory`]), or a host address where a test runs a kernel's own source on the CPU
/// (`tests/kernel_emulation.rs`). The ops' parameter blocks are built through it, so both take
/// the same parameters.
pub trait KernelAddresses {
    /// Address of element (0, 0, 0, 0) of `t`. Callers validate `t` first.
    fn address(&self, t: &Tensor) -> u64;
}

impl KernelAddresses for DeviceMemory {
    fn address(&self, t: &Tensor) -> u64 {
        self.device_ptr(t)
    }
}

impl Memory for DeviceMemory {
    fn buffer_len(&self, id: BufferId) -> Option<usize> {
        self.buffers.get(id.0).map(DeviceBuffer::len)
    }

    fn is_index_buffer(&self, id: BufferId) -> bool {
        matches!(self.index_shadow.get(id.0), Some(Some(_)))
    }

    fn index_values(&self, t: &Tensor) -> Option<Vec<i32>> {
        let shadow = self.index_shadow.get(t.buffer.0)?.as_ref()?;
        if t.dtype() != DType::I32 {
            return None;
        }
        read_i32s(shadow, t)
    }

    fn index_bytes(&self, id: BufferId) -> Option<&[u8]> {
        self.index_shadow.get(id.0)?.as_deref()
    }

    fn base_alignment(&self, id: BufferId) -> usize {
        // A caller's view may start anywhere; rgdn's allocations start 256-aligned.
        self.buffers.get(id.0).map_or(1, |b| 1usize << b.device_ptr().trailing_zeros().min(ALLOCATION_ALIGNMENT.trailing_zeros()))
    }
}

/// The most values an index view may have: [`Memory::index_values`] copies them, and a
/// broadcast view (element stride 0) of a few bytes can name any count. 2^30 (a 4 GiB copy) is
/// far above any index view the ops take (one value a sequence, token or row).
pub const MAX_INDEX_VALUES: usize = 1 << 30;

/// The I32 elements of `t` in `bytes`, in logical order; `None` when the view's exact byte
/// range is not representable or not inside `bytes`, or it has more than [`MAX_INDEX_VALUES`]
/// elements (a broadcast view: refused before anything is allocated). Never panics, whatever
/// the view.
fn read_i32s(bytes: &[u8], t: &Tensor) -> Option<Vec<i32>> {
    let range = t.layout.checked_byte_range().ok()?;
    if range.is_some_and(|r| r.end > bytes.len()) || t.layout.checked_n_elements()? > MAX_INDEX_VALUES {
        return None;
    }
    t.layout
        .indices()
        .map(|i| {
            let o = t.layout.checked_byte_offset(i)?;
            let b = bytes.get(o..o.checked_add(4)?)?;
            Some(i32::from_le_bytes(b.try_into().ok()?))
        })
        .collect()
}
