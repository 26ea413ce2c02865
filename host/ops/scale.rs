//! SCALE — kernel: `kernels-gpu/src/scale.rs`, reference: [`crate::reference::scale`], spec §2.4.

use super::{Op, check};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, KernelArg, LaunchDims, ParamBlock, PreparedLaunch};
use crate::kernels::abi;
use crate::memory::{DeviceMemory, HostMemory, Memory};
use crate::reference::math::Mufu;
use crate::tensor::{DType, Tensor};

const OP: &str = "SCALE";

/// SCALE: dst = fma.rn.ftz(scale, src, bias) element-wise (the zeroing of a fresh state row uses
/// 0, 0: +0 for finite x, NaN for Inf/NaN). src/dst F32 contiguous, same shape, same elements (in
/// place) or disjoint.
#[derive(Clone, Debug)]
pub struct Scale {
    pub src: Tensor,
    pub dst: Tensor,
    pub scale: f32,
    pub bias: f32,
}

impl Scale {
    /// Validates the op and returns its element count.
    pub fn check(&self, mem: &dyn Memory) -> Result<usize> {
        check::tensor(OP, "src", &self.src, DType::F32, mem)?;
        check::output(OP, "dst", &self.dst, DType::F32, mem)?;
        check::shape(OP, "dst", &self.dst, self.src.ne())?;
        for (arg, t) in [("src", &self.src), ("dst", &self.dst)] {
            if !t.layout.is_contiguous() {
                return Err(Error::Stride { op: OP, arg, nb: t.layout.nb, offset: t.layout.offset, reason: "must be contiguous".into() });
            }
        }
        check::same_or_disjoint(OP, "dst", &self.dst, "src", &self.src)?;
        Ok(self.src.layout.n_elements())
    }
}

impl Op for Scale {
    fn name(&self) -> &'static str {
        OP
    }

    fn validate(&self, mem: &dyn Memory) -> Result<()> {
        self.check(mem).map(|_| ())
    }

    fn prepare(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<PreparedLaunch> {
        let n = self.check(mem)?;
        let blocks = n.div_ceil(abi::SCALE_BLOCK as usize).min(abi::SCALE_MAX_BLOCKS as usize) as u32;
        let dims = LaunchDims::new((blocks, 1, 1), (abi::SCALE_BLOCK, 1, 1));
        let params = abi::ScaleParams {
            src: mem.device_ptr(&self.src),
            dst: mem.device_ptr(&self.dst),
            n: n as u64,
            scale: self.scale,
            bias: self.bias,
        };
        // SAFETY: `check` proved that src and dst are contiguous runs of n f32 inside their
        // buffers, either the very same elements or disjoint, and `params` is the struct the
        // entry takes.
        unsafe { gpu.prepare(abi::SCALE_ENTRY, dims, &[KernelArg::Params(ParamBlock::of(&params)?)]) }
    }

    fn reference(&self, mem: &mut HostMemory, _mufu: &mut dyn Mufu) -> Result<()> {
        self.check(mem)?;
        crate::reference::scale::scale(&self.src, &self.dst, self.scale, self.bias, mem)?;
        Ok(())
    }

    fn inputs(&self) -> Vec<Tensor> {
        vec![self.src]
    }

    fn outputs(&self) -> Vec<Tensor> {
        vec![self.dst]
    }

    fn must_write(&self) -> Vec<Tensor> {
        self.outputs()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_place_and_disjoint_pass_partial_overlap_does_not() {
        let mut mem = HostMemory::new();
        let cache = mem.alloc_tensor(DType::F32, [8, 4, 1, 1]);
        // Row 2 of the cache, in place (the layer's state zeroing).
        let row = cache.view([8, 1, 1, 1], [4, 32, 32, 32], 64);
        assert_eq!(Scale { src: row, dst: row, scale: 0.0, bias: 0.0 }.check(&mem).unwrap(), 8);
        let other = mem.alloc_tensor(DType::F32, [8, 1, 1, 1]);
        assert!(Scale { src: row, dst: other, scale: 2.0, bias: 1.0 }.check(&mem).is_ok());
        let shifted = cache.view([8, 1, 1, 1], [4, 32, 32, 32], 68);
        assert!(matches!(Scale { src: row, dst: shifted, scale: 0.0, bias: 0.0 }.check(&mem), Err(Error::Aliasing { op: OP, .. })));
    }

    #[test]
    fn strided_or_mismatched_views_are_refused() {
        let mut mem = HostMemory::new();
        let cache = mem.alloc_tensor(DType::F32, [8, 4, 1, 1]);
        let column = cache.view([4, 1, 1, 1], [32, 128, 128, 128], 0);
        let dst = mem.alloc_tensor(DType::F32, [4, 1, 1, 1]);
        assert!(matches!(Scale { src: column, dst, scale: 1.0, bias: 0.0 }.check(&mem), Err(Error::Stride { arg: "src", .. })));
        let dst = mem.alloc_tensor(DType::F32, [4, 2, 1, 1]);
        assert!(matches!(Scale { src: cache, dst, scale: 1.0, bias: 0.0 }.check(&mem), Err(Error::Shape { arg: "dst", .. })));
        let src = mem.alloc_tensor(DType::F16, [4, 2, 1, 1]);
        assert!(matches!(Scale { src, dst, scale: 1.0, bias: 0.0 }.check(&mem), Err(Error::DType { arg: "src", .. })));
    }
}
