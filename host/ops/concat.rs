//! CONCAT along dimension 0 — kernel: `kernels-gpu/src/concat.rs`, reference:
//! [`crate::reference::concat`], spec §2.2.

use super::{Op, check};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, KernelArg, LaunchDims, ParamBlock, PreparedLaunch};
use crate::kernels::abi;
use crate::memory::{DeviceMemory, HostMemory, Memory};
use crate::reference::math::Mufu;
use crate::tensor::{DType, Tensor};

const OP: &str = "CONCAT";

/// CONCAT along dim 0: a F32 ne [na, n1, n2, 1], b F32 ne [nb, n1, n2, 1] (ANY strides — in the
/// layer b is the transposed projection view, nb = [4·C, 4, 4·C·n_t]); dst F32 ne [na+nb, n1, n2,
/// 1], disjoint from a and b.
#[derive(Clone, Debug)]
pub struct ConcatDim0 {
    pub a: Tensor,
    pub b: Tensor,
    pub dst: Tensor,
}

/// The sizes a valid [`ConcatDim0`] runs with (declared beside the reference that iterates them).
pub use crate::reference::concat::ConcatShape;

impl ConcatDim0 {
    /// Validates the op and returns its sizes.
    pub fn check(&self, mem: &dyn Memory) -> Result<ConcatShape> {
        check::tensor(OP, "a", &self.a, DType::F32, mem)?;
        check::tensor(OP, "b", &self.b, DType::F32, mem)?;
        let [na, n1, n2, _] = self.a.ne();
        let nb = self.b.ne()[0];
        check::shape(OP, "a", &self.a, [na, n1, n2, 1])?;
        check::shape(OP, "b", &self.b, [nb, n1, n2, 1])?;
        check::output(OP, "dst", &self.dst, DType::F32, mem)?;
        let n_dst = check::sum(OP, "dst", "columns na + nb", &[na, nb])?;
        check::shape(OP, "dst", &self.dst, [n_dst, n1, n2, 1])?;
        check::disjoint(OP, "dst", &self.dst, "a", &self.a)?;
        check::disjoint(OP, "dst", &self.dst, "b", &self.b)?;
        if n1 > i32::MAX as usize || n2 > 65535 {
            return Err(Error::Unsupported { op: OP, what: format!("ne1 = {n1}, ne2 = {n2} (grid x ≤ 2^31 − 1, y ≤ 65535)") });
        }
        Ok(ConcatShape { na, nb, n1, n2 })
    }
}

// [speed] The flat kernel.
impl ConcatDim0 {
    /// True when dst's element count fits u32 (and its block count the grid): the launch then
    /// takes the flat kernel (`concat_flat_f32`, one thread per destination element, any
    /// strides) — ggml's contiguous path where ggml takes it (n_t = 1 in the layer), and in place
    /// of ggml's per-row kernel elsewhere: the same bits, moved by fewer, fuller blocks.
    pub fn takes_flat_path(&self, shape: &ConcatShape) -> bool {
        // A public struct: the sizes may be anything, so the total is checked (a total that
        // does not fit usize does not fit u32 either).
        let total =
            crate::tensor::checked_sum(&[shape.na, shape.nb]).and_then(|cols| crate::tensor::checked_product(&[cols, shape.n1, shape.n2]));
        total.is_some_and(|total| u32::try_from(total).is_ok() && total.div_ceil(abi::CONCAT_FLAT_BLOCK as usize) <= i32::MAX as usize)
    }

    fn launch_flat(&self, gpu: &Gpu, mem: &DeviceMemory, shape: &ConcatShape) -> Result<PreparedLaunch> {
        // `takes_flat_path` proved the total fits u32.
        let total = (shape.na + shape.nb) * shape.n1 * shape.n2;
        let strides = |t: &Tensor| {
            let s = check::elem_strides(t);
            [s[0], s[1], s[2]]
        };
        let params = abi::ConcatFlatParams {
            a: mem.device_ptr(&self.a),
            b: mem.device_ptr(&self.b),
            dst: mem.device_ptr(&self.dst),
            a_stride: strides(&self.a),
            b_stride: strides(&self.b),
            dst_stride: strides(&self.dst),
            na: shape.na as u32,
            nb: shape.nb as u32,
            n1: shape.n1 as u32,
            total: total as u32,
        };
        let dims = LaunchDims::new((total.div_ceil(abi::CONCAT_FLAT_BLOCK as usize) as u32, 1, 1), (abi::CONCAT_FLAT_BLOCK, 1, 1));
        // SAFETY: `check` proved the three views lie inside their buffers for (na, nb, n1, n2)
        // (na, nb, n1 ≥ 1: empty views are refused), dst addresses every element once and
        // overlaps neither source; `takes_flat_path` that total (hence na, nb, n1) fits u32;
        // the block is the entry's `ConcatFlatParams`.
        unsafe { gpu.prepare(abi::CONCAT_FLAT_ENTRY, dims, &[KernelArg::Params(ParamBlock::of(&params)?)]) }
    }
}

// SAFETY: `ConcatFlatParams` is repr(C): twelve u64 then four u32 — no padding.
unsafe impl crate::gpu::KernelParams for abi::ConcatFlatParams {}

impl Op for ConcatDim0 {
    fn name(&self) -> &'static str {
        OP
    }

    fn validate(&self, mem: &dyn Memory) -> Result<()> {
        self.check(mem).map(|_| ())
    }

    fn prepare(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<PreparedLaunch> {
        let shape = self.check(mem)?;
        if self.takes_flat_path(&shape) {
            return self.launch_flat(gpu, mem, &shape);
        }
        self.launch_per_row(gpu, mem, &shape)
    }

    fn reference(&self, mem: &mut HostMemory, _mufu: &mut dyn Mufu) -> Result<()> {
        let shape = self.check(mem)?;
        crate::reference::concat::concat_dim0(&self.a, &self.b, &self.dst, &shape, mem)?;
        Ok(())
    }

    fn inputs(&self) -> Vec<Tensor> {
        vec![self.a, self.b]
    }

    fn outputs(&self) -> Vec<Tensor> {
        vec![self.dst]
    }

    fn must_write(&self) -> Vec<Tensor> {
        self.outputs()
    }
}

impl ConcatDim0 {
    /// ggml's per-row kernel (`concat_dim0_f32`): the launch for views [`ConcatDim0::takes_flat_path`]
    /// refuses, and through [`ConcatDim0PerRow`] for the suite.
    fn launch_per_row(&self, gpu: &Gpu, mem: &DeviceMemory, shape: &ConcatShape) -> Result<PreparedLaunch> {
        let [a0, a1, a2, _] = check::elem_strides(&self.a);
        let [b0, b1, b2, _] = check::elem_strides(&self.b);
        let [d0, d1, d2, _] = check::elem_strides(&self.dst);
        let dims = LaunchDims::new((shape.n1 as u32, shape.n2 as u32, 1), (abi::CONCAT_BLOCK, 1, 1));
        let params = abi::ConcatDim0Params {
            a: mem.device_ptr(&self.a),
            b: mem.device_ptr(&self.b),
            dst: mem.device_ptr(&self.dst),
            a_stride: [a0, a1, a2],
            b_stride: [b0, b1, b2],
            dst_stride: [d0, d1, d2],
            na: shape.na as u64,
            nb: shape.nb as u64,
        };
        // SAFETY: `check` proved that a, b and dst lie inside their buffers for the grid (n1,
        // n2) and their dimension-0 sizes, that dst addresses every element once and is
        // disjoint from a and b, and `params` is the struct the entry takes.
        unsafe { gpu.prepare(abi::CONCAT_DIM0_ENTRY, dims, &[KernelArg::Params(ParamBlock::of(&params)?)]) }
    }
}

/// \[speed\] [`ConcatDim0`] always launched with ggml's per-row kernel, whatever the views: keeps
/// that kernel in the GPU suite now that [`ConcatDim0`] takes the flat one for every view whose
/// element count fits u32.
#[derive(Clone, Debug)]
pub struct ConcatDim0PerRow(pub ConcatDim0);

impl Op for ConcatDim0PerRow {
    fn name(&self) -> &'static str {
        OP
    }

    fn validate(&self, mem: &dyn Memory) -> Result<()> {
        self.0.validate(mem)
    }

    fn prepare(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<PreparedLaunch> {
        let shape = self.0.check(mem)?;
        self.0.launch_per_row(gpu, mem, &shape)
    }

    fn reference(&self, mem: &mut HostMemory, mufu: &mut dyn Mufu) -> Result<()> {
        self.0.reference(mem, mufu)
    }

    fn inputs(&self) -> Vec<Tensor> {
        self.0.inputs()
    }

    fn outputs(&self) -> Vec<Tensor> {
        self.0.outputs()
    }

    fn must_write(&self) -> Vec<Tensor> {
        self.0.must_write()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(mem: &mut HostMemory, na: usize, nb: usize) -> ConcatDim0 {
        let a = mem.alloc_tensor(DType::F32, [na, 5, 2, 1]);
        let b = mem.alloc_tensor(DType::F32, [nb, 5, 2, 1]);
        let dst = mem.alloc_tensor(DType::F32, [na + nb, 5, 2, 1]);
        ConcatDim0 { a, b, dst }
    }

    #[test]
    fn a_valid_concat_passes_with_a_transposed_b() {
        let mut mem = HostMemory::new();
        let mut o = op(&mut mem, 3, 4);
        // b as the layer builds it: the transpose of a [C = 5, n_t = 4, n_s = 2] projection.
        let proj = mem.alloc_tensor(DType::F32, [5, 4, 2, 1]);
        o.b = proj.transpose();
        assert_eq!(o.b.layout.nb, [20, 4, 80, 160]);
        assert_eq!(o.check(&mem).unwrap(), ConcatShape { na: 3, nb: 4, n1: 5, n2: 2 });
    }

    #[test]
    fn shapes_must_agree() {
        let mut mem = HostMemory::new();
        let mut o = op(&mut mem, 3, 4);
        o.b = mem.alloc_tensor(DType::F32, [4, 6, 2, 1]);
        assert!(matches!(o.check(&mem), Err(Error::Shape { op: OP, arg: "b", .. })));
        let mut o = op(&mut mem, 3, 4);
        o.dst = mem.alloc_tensor(DType::F32, [6, 5, 2, 1]);
        assert!(matches!(o.check(&mem), Err(Error::Shape { arg: "dst", .. })));
        let mut o = op(&mut mem, 3, 4);
        o.a = mem.alloc_tensor(DType::F32, [3, 5, 1, 2]);
        assert!(matches!(o.check(&mem), Err(Error::Shape { arg: "a", .. })));
        let mut o = op(&mut mem, 3, 4);
        o.a = mem.alloc_tensor(DType::I32, [3, 5, 2, 1]);
        assert!(matches!(o.check(&mem), Err(Error::DType { arg: "a", .. })));
    }

    #[test]
    fn the_destination_must_not_overlap_an_input_or_itself() {
        let mut mem = HostMemory::new();
        let mut o = op(&mut mem, 3, 4);
        // b = the last four columns of dst's own rows.
        o.dst = mem.alloc_tensor(DType::F32, [7, 5, 2, 1]);
        o.b = o.dst.view([4, 5, 2, 1], o.dst.layout.nb, 12);
        assert!(matches!(o.check(&mem), Err(Error::Aliasing { op: OP, a: "dst", b: "b", .. })));
        let mut o = op(&mut mem, 3, 4);
        o.dst = o.dst.view([7, 5, 2, 1], [4, 28, 0, 0], 0);
        assert!(matches!(o.check(&mem), Err(Error::Aliasing { a: "dst", b: "dst", .. })));
    }

    #[test]
    fn more_planes_than_grid_y_allows_are_refused() {
        let mut mem = HostMemory::new();
        let a = mem.alloc_tensor(DType::F32, [1, 1, 65536, 1]);
        let b = mem.alloc_tensor(DType::F32, [1, 1, 65536, 1]);
        let dst = mem.alloc_tensor(DType::F32, [2, 1, 65536, 1]);
        assert!(matches!(ConcatDim0 { a, b, dst }.check(&mem), Err(Error::Unsupported { op: OP, .. })));
        let dst = dst.view([2, 1, 65535, 1], dst.layout.nb, 0);
        let (a, b) = (a.view([1, 1, 65535, 1], a.layout.nb, 0), b.view([1, 1, 65535, 1], b.layout.nb, 0));
        assert!(ConcatDim0 { a, b, dst }.check(&mem).is_ok());
    }

    #[test]
    fn views_whose_count_fits_u32_take_the_flat_path() {
        let mut mem = HostMemory::new();
        let o = op(&mut mem, 3, 4);
        assert!(o.takes_flat_path(&o.check(&mem).unwrap()));
        // The layer's transposed projection (strided at n_t > 1) too.
        let mut o = op(&mut mem, 3, 4);
        o.b = mem.alloc_tensor(DType::F32, [5, 4, 2, 1]).transpose();
        assert!(o.takes_flat_path(&o.check(&mem).unwrap()));
        // More than u32::MAX destination elements: ggml's per-row kernel.
        let shape = ConcatShape { na: 1 << 16, nb: 1 << 16, n1: 1 << 15, n2: 1 };
        assert!(!o.takes_flat_path(&shape));
    }

    #[test]
    fn the_flat_parameter_block_has_no_padding() {
        assert_eq!(std::mem::size_of::<abi::ConcatFlatParams>(), 12 * 8 + 4 * 4);
    }

    #[test]
    fn empty_inputs_are_refused() {
        let mut mem = HostMemory::new();
        let mut o = op(&mut mem, 3, 4);
        o.a = o.a.view([0, 5, 2, 1], o.a.layout.nb, 0);
        assert!(matches!(o.check(&mem), Err(Error::Empty { arg: "a", .. })));
    }
}
