//! L2_NORM — kernel: `kernels-gpu/src/l2_norm.rs`, reference: [`crate::reference::l2_norm`],
//! spec §2.6.

use super::{Op, check};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, KernelArg, LaunchDims, ParamBlock, PreparedLaunch};
use crate::kernels::abi;
use crate::memory::{DeviceMemory, HostMemory, Memory};
use crate::reference::math::Mufu;
use crate::tensor::{DType, Tensor};

const OP: &str = "L2_NORM";

/// `dst = src · rsqrt(max(Σ src², eps²))` per row (dimension 0).
///
/// - `src`: F32 ne [n_cols, rows, channels, samples] with n_cols < 1024, rows contiguous (any
///   other strides: the q/k head views of the conv output);
/// - `dst`: F32, same shape, rows contiguous; either the very same elements as `src` or disjoint.
#[derive(Clone, Debug)]
pub struct L2Norm {
    pub src: Tensor,
    pub dst: Tensor,
    pub eps: f32,
}

impl L2Norm {
    /// Validates the op and returns `ne` of the rows.
    pub fn check(&self, mem: &dyn Memory) -> Result<[usize; 4]> {
        check::tensor(OP, "src", &self.src, DType::F32, mem)?;
        check::output(OP, "dst", &self.dst, DType::F32, mem)?;
        let ne = self.src.ne();
        check::shape(OP, "dst", &self.dst, ne)?;
        check::rows_contiguous(OP, "src", &self.src)?;
        check::rows_contiguous(OP, "dst", &self.dst)?;
        check::same_or_disjoint(OP, "dst", &self.dst, "src", &self.src)?;
        if ne[0] >= abi::L2_NORM_MAX_COLS {
            return Err(Error::Unsupported {
                op: OP,
                what: format!("rows of {} columns (the one-warp kernel takes < {})", ne[0], abi::L2_NORM_MAX_COLS),
            });
        }
        if ne[1] > u32::MAX as usize || ne[2] > 65535 || ne[3] > 65535 {
            return Err(Error::Unsupported { op: OP, what: format!("shape {ne:?}: grid is (ne1, ne2 ≤ 65535, ne3 ≤ 65535)") });
        }
        if !self.eps.is_finite() || self.eps < 0.0 {
            return Err(Error::Invalid { op: OP, what: format!("eps = {} (must be finite and ≥ 0)", self.eps) });
        }
        Ok(ne)
    }
}

impl Op for L2Norm {
    fn name(&self) -> &'static str {
        OP
    }

    fn validate(&self, mem: &dyn Memory) -> Result<()> {
        self.check(mem).map(|_| ())
    }

    fn prepare(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<PreparedLaunch> {
        let ne = self.check(mem)?;
        let [_, s1, s2, s3] = check::elem_strides(&self.src);
        let [_, d1, d2, d3] = check::elem_strides(&self.dst);
        let dims = LaunchDims::new((ne[1] as u32, ne[2] as u32, ne[3] as u32), (abi::L2_NORM_BLOCK, 1, 1));
        let params = abi::L2NormParams {
            src: mem.device_ptr(&self.src),
            src_row: s1,
            src_channel: s2,
            src_sample: s3,
            dst: mem.device_ptr(&self.dst),
            dst_row: d1,
            dst_channel: d2,
            dst_sample: d3,
            n_cols: ne[0] as u32,
            eps: self.eps,
        };
        // SAFETY: `check` proved both views lie inside their buffers for the grid (ne1, ne2,
        // ne3) and ne0 columns, that dst is src itself or disjoint from it, and `params` is the
        // struct the entry takes.
        unsafe { gpu.prepare(abi::L2_NORM_ENTRY, dims, &[KernelArg::Params(ParamBlock::of(&params)?)]) }
    }

    fn reference(&self, mem: &mut HostMemory, mufu: &mut dyn Mufu) -> Result<()> {
        let ne = self.check(mem)?;
        crate::reference::l2_norm::l2_norm(&self.src, &self.dst, self.eps, ne, mem, mufu)?;
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
