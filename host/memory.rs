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
    /// The values of an I32 view of an index buffer, in logical order.
    fn index_values(&self, t: &Tensor) -> Option<Vec<i32>>;
}

/// Byte-addressed host buffers.
#[derive(Clone, Debug, Default)]
pub struct HostMemory {
    buffers: Vec<Vec<u8>>,
    index_buffer: Vec<bool>,
}

impl HostMemory {
    pub fn new() -> Self {
        Self::default()
    }

    /// A zero-filled buffer of `bytes` bytes.
    pub fn alloc(&mut self, bytes: usize) -> BufferId {
        self.buffers.push(vec![0; bytes]);
        self.index_buffer.push(false);
        BufferId(self.buffers.len() - 1)
    }

    /// A new contiguous tensor in its own zero-filled buffer.
    pub fn alloc_tensor(&mut self, dtype: DType, ne: [usize; 4]) -> Tensor {
        let layout = Layout::contiguous(dtype, ne);
        let id = self.alloc(layout.n_elements() * dtype.size());
        Tensor::new(id, layout)
    }

    /// A contiguous I32 index tensor holding `values`, in an index buffer of its own.
    pub fn alloc_indices(&mut self, values: &[i32]) -> Tensor {
        let t = self.alloc_tensor(DType::I32, [values.len(), 1, 1, 1]);
        self.index_buffer[t.buffer.0] = true;
        for (i, v) in values.iter().enumerate() {
            self.write_u32(&t, [i, 0, 0, 0], *v as u32);
        }
        t
    }

    pub fn n_buffers(&self) -> usize {
        self.buffers.len()
    }

    pub fn bytes(&self, id: BufferId) -> &[u8] {
        &self.buffers[id.0]
    }

    pub fn bytes_mut(&mut self, id: BufferId) -> &mut [u8] {
        &mut self.buffers[id.0]
    }

    /// The 32-bit element of `t` at logical index `i` (F32 bits or I32).
    pub fn read_u32(&self, t: &Tensor, i: [usize; 4]) -> u32 {
        let o = t.layout.byte_offset(i);
        u32::from_le_bytes(self.buffers[t.buffer.0][o..o + 4].try_into().expect("4 bytes"))
    }

    pub fn write_u32(&mut self, t: &Tensor, i: [usize; 4], v: u32) {
        let o = t.layout.byte_offset(i);
        self.buffers[t.buffer.0][o..o + 4].copy_from_slice(&v.to_le_bytes());
    }

    /// The 16-bit element of `t` at logical index `i` (F16/BF16 bits).
    pub fn read_u16(&self, t: &Tensor, i: [usize; 4]) -> u16 {
        let o = t.layout.byte_offset(i);
        u16::from_le_bytes(self.buffers[t.buffer.0][o..o + 2].try_into().expect("2 bytes"))
    }

    pub fn write_u16(&mut self, t: &Tensor, i: [usize; 4], v: u16) {
        let o = t.layout.byte_offset(i);
        self.buffers[t.buffer.0][o..o + 2].copy_from_slice(&v.to_le_bytes());
    }

    pub fn read_f32(&self, t: &Tensor, i: [usize; 4]) -> f32 {
        f32::from_bits(self.read_u32(t, i))
    }

    pub fn write_f32(&mut self, t: &Tensor, i: [usize; 4], v: f32) {
        self.write_u32(t, i, v.to_bits())
    }

    /// All elements of an F32 view in logical order.
    pub fn to_f32_vec(&self, t: &Tensor) -> Vec<f32> {
        t.layout.indices().map(|i| self.read_f32(t, i)).collect()
    }

    /// Writes `values` (logical order) into an F32 view.
    pub fn fill_f32(&mut self, t: &Tensor, values: &[f32]) {
        assert_eq!(values.len(), t.layout.n_elements(), "fill_f32: value count must match the view");
        let idx: Vec<_> = t.layout.indices().collect();
        for (i, v) in idx.into_iter().zip(values) {
            self.write_f32(t, i, *v);
        }
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
        (self.is_index_buffer(t.buffer) && t.dtype() == DType::I32 && self.buffer_len(t.buffer).is_some())
            .then(|| t.layout.indices().map(|i| self.read_u32(t, i) as i32).collect())
    }
}

/// Device buffers with the same ids as the [`HostMemory`] they were uploaded from.
pub struct DeviceMemory {
    buffers: Vec<DeviceBuffer>,
    /// Host copies of index buffers (None for data buffers).
    index_shadow: Vec<Option<Vec<u8>>>,
}

impl DeviceMemory {
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

    /// Copies every buffer back into a new [`HostMemory`] (same ids, same index flags).
    pub fn download(&self, gpu: &Gpu) -> Result<HostMemory> {
        let mut host = HostMemory::new();
        for (i, b) in self.buffers.iter().enumerate() {
            let id = host.alloc(0);
            host.buffers[id.0] = gpu.download(b)?;
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

    /// Device address of element (0, 0, 0, 0) of `t`. Callers validate `t` first.
    pub fn device_ptr(&self, t: &Tensor) -> u64 {
        self.buffers[t.buffer.0].device_ptr() + t.layout.offset as u64
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
        t.layout
            .indices()
            .map(|i| {
                let o = t.layout.byte_offset(i);
                shadow.get(o..o + 4).map(|b| i32::from_le_bytes(b.try_into().expect("4 bytes")))
            })
            .collect()
    }
}
