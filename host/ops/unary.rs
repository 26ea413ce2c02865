//! Unary SIGMOID / SOFTPLUS / SILU / EXP — kernel: `kernels-gpu/src/unary.rs`, reference:
//! [`crate::reference::unary`], spec §2.7.

use super::{Op, check};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, KernelArg, LaunchDims};
use crate::kernels::abi::{self, unary_kind};
use crate::memory::{DeviceMemory, HostMemory, Memory};
use crate::reference::math::Mufu;
use crate::tensor::{DType, Tensor};

/// Which function (ggml's fast-math forms, spec §2.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnaryKind {
    /// `1 / (1 + expf(-x))`
    Sigmoid,
    /// `x > 20 ? x : logf(1 + expf(x))`
    Softplus,
    /// `x / (1 + expf(-x))`
    Silu,
    /// `expf(x)`
    Exp,
}

impl UnaryKind {
    pub const ALL: [UnaryKind; 4] = [UnaryKind::Sigmoid, UnaryKind::Softplus, UnaryKind::Silu, UnaryKind::Exp];

    /// ggml's op name.
    pub fn name(self) -> &'static str {
        match self {
            UnaryKind::Sigmoid => "SIGMOID",
            UnaryKind::Softplus => "SOFTPLUS",
            UnaryKind::Silu => "SILU",
            UnaryKind::Exp => "EXP",
        }
    }

    fn kernel_id(self) -> u32 {
        match self {
            UnaryKind::Sigmoid => unary_kind::SIGMOID,
            UnaryKind::Softplus => unary_kind::SOFTPLUS,
            UnaryKind::Silu => unary_kind::SILU,
            UnaryKind::Exp => unary_kind::EXP,
        }
    }
}

/// `dst = f(src)` element-wise; `src` and `dst` F32, contiguous, same shape, the same elements
/// (in place) or disjoint.
#[derive(Clone, Debug)]
pub struct Unary {
    pub kind: UnaryKind,
    pub src: Tensor,
    pub dst: Tensor,
}

impl Unary {
    /// Validates the op and returns the element count.
    pub fn check(&self, mem: &dyn Memory) -> Result<usize> {
        let op = self.kind.name();
        check::tensor(op, "src", &self.src, DType::F32, mem)?;
        check::output(op, "dst", &self.dst, DType::F32, mem)?;
        check::shape(op, "dst", &self.dst, self.src.ne())?;
        for (arg, t) in [("src", &self.src), ("dst", &self.dst)] {
            if !t.layout.is_contiguous() {
                return Err(Error::Stride { op, arg, nb: t.layout.nb, offset: t.layout.offset, reason: "must be contiguous".into() });
            }
        }
        check::same_or_disjoint(op, "dst", &self.dst, "src", &self.src)?;
        let n = self.src.layout.n_elements();
        check::fits_u32(op, "blocks", n.div_ceil(abi::UNARY_BLOCK as usize))?;
        Ok(n)
    }
}

impl Op for Unary {
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn validate(&self, mem: &dyn Memory) -> Result<()> {
        self.check(mem).map(|_| ())
    }

    fn launch(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<()> {
        let n = self.check(mem)?;
        let entry = abi::unary_entry(self.kind.kernel_id()).expect("every kind has an entry");
        let dims = LaunchDims::new((n.div_ceil(abi::UNARY_BLOCK as usize) as u32, 1, 1), (abi::UNARY_BLOCK, 1, 1));
        let args = [KernelArg::Ptr(mem.device_ptr(&self.src)), KernelArg::Ptr(mem.device_ptr(&self.dst)), KernelArg::Usize(n as u64)];
        // SAFETY: `check` proved both views are contiguous runs of n f32 inside their buffers and
        // dst is src itself or disjoint; the arguments match the entry's (src, dst, n).
        unsafe { gpu.launch(entry, dims, &args) }
    }

    fn reference(&self, mem: &mut HostMemory, mufu: &mut dyn Mufu) -> Result<()> {
        self.check(mem)?;
        crate::reference::unary::unary(self, mem, mufu);
        Ok(())
    }

    fn inputs(&self) -> Vec<Tensor> {
        vec![self.src]
    }

    fn outputs(&self) -> Vec<Tensor> {
        vec![self.dst]
    }
}
