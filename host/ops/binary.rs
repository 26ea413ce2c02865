//! Broadcast ADD / MUL — kernel: `kernels-gpu/src/binary.rs`, reference:
//! [`crate::reference::binary`], spec §2.8.

use super::{Op, check};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, KernelArg, LaunchDims, ParamBlock, PreparedLaunch};
use crate::kernels::abi::{self, binary_kind};
use crate::memory::{DeviceMemory, HostMemory, Memory};
use crate::reference::math::Mufu;
use crate::tensor::{DType, Tensor};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryKind {
    Add,
    Mul,
}

impl BinaryKind {
    pub fn name(self) -> &'static str {
        match self {
            BinaryKind::Add => "ADD",
            BinaryKind::Mul => "MUL",
        }
    }

    fn kernel_id(self) -> u32 {
        match self {
            BinaryKind::Add => binary_kind::ADD,
            BinaryKind::Mul => binary_kind::MUL,
        }
    }
}

/// `dst = a ∘ b`, `b` repeated over `a` (ggml's broadcast: `ne_a[d] % ne_b[d] == 0`, element
/// `i` of `a` meets element `i mod ne_b` of `b`). All F32 with dimension 0 contiguous; `dst` has
/// `a`'s shape and is `a` itself, `b` itself (same shape), or disjoint from both.
#[derive(Clone, Debug)]
pub struct Binary {
    pub kind: BinaryKind,
    pub a: Tensor,
    pub b: Tensor,
    pub dst: Tensor,
}

impl Binary {
    /// Validates the op and returns the destination shape.
    pub fn check(&self, mem: &dyn Memory) -> Result<[usize; 4]> {
        let op = self.kind.name();
        check::tensor(op, "a", &self.a, DType::F32, mem)?;
        check::tensor(op, "b", &self.b, DType::F32, mem)?;
        check::output(op, "dst", &self.dst, DType::F32, mem)?;
        let (ne, ne_b) = (self.a.ne(), self.b.ne());
        if (0..4).any(|d| ne[d] % ne_b[d] != 0) {
            return Err(Error::Shape { op, arg: "b", expected: format!("a shape that divides a's {ne:?}"), got: ne_b });
        }
        check::shape(op, "dst", &self.dst, ne)?;
        for (arg, t) in [("a", &self.a), ("b", &self.b), ("dst", &self.dst)] {
            check::rows_contiguous(op, arg, t)?;
        }
        check::same_or_disjoint(op, "dst", &self.dst, "a", &self.a)?;
        check::same_or_disjoint(op, "dst", &self.dst, "b", &self.b)?;
        check::fits_u32(op, "blocks", self.a.layout.n_elements().div_ceil(abi::BINARY_BLOCK as usize))?;
        Ok(ne)
    }
}

impl Op for Binary {
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn validate(&self, mem: &dyn Memory) -> Result<()> {
        self.check(mem).map(|_| ())
    }

    fn prepare(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<PreparedLaunch> {
        let ne = self.check(mem)?;
        let entry = abi::binary_entry(self.kind.kernel_id()).expect("every kind has an entry");
        let [_, a1, a2, a3] = check::elem_strides(&self.a);
        let [_, b1, b2, b3] = check::elem_strides(&self.b);
        let [_, d1, d2, d3] = check::elem_strides(&self.dst);
        let n = self.a.layout.n_elements();
        let dims = LaunchDims::new((n.div_ceil(abi::BINARY_BLOCK as usize) as u32, 1, 1), (abi::BINARY_BLOCK, 1, 1));
        let params = abi::BinaryParams {
            a: mem.device_ptr(&self.a),
            a_stride: [a1, a2, a3],
            b: mem.device_ptr(&self.b),
            b_stride: [b1, b2, b3],
            b_ne: self.b.ne().map(|n| n as u64),
            dst: mem.device_ptr(&self.dst),
            dst_stride: [d1, d2, d3],
            ne: ne.map(|n| n as u64),
        };
        // SAFETY: `check` proved a and dst cover shape `ne`, b covers `ne_b` (which divides ne),
        // dimension 0 is contiguous in all three, dst aliases an input only element for element,
        // and `params` is the struct every binary entry takes.
        unsafe { gpu.prepare(entry, dims, &[KernelArg::Params(ParamBlock::of(&params)?)]) }
    }

    fn reference(&self, mem: &mut HostMemory, _mufu: &mut dyn Mufu) -> Result<()> {
        self.check(mem)?;
        let f = match self.kind {
            BinaryKind::Add => crate::reference::math::add,
            BinaryKind::Mul => crate::reference::math::mul,
        };
        crate::reference::binary::binary(f, &self.a, &self.b, &self.dst, mem)?;
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
