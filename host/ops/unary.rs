//! Unary SIGMOID / SOFTPLUS / SILU / EXP — kernel: `kernels-gpu/src/unary.rs`, reference:
//! [`crate::reference::unary`], spec §2.7.

use super::{Op, check};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, KernelArg, LaunchDims, ParamBlock, PreparedLaunch};
use crate::kernels::abi::{self, unary_kind};
use crate::memory::{DeviceMemory, HostMemory, Memory};
use crate::reference::math::{self, Mufu};
use crate::reference::unary::UnaryFn;
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

    /// The function's CPU reference, as the kernel computes it (fast-math mirrors).
    pub fn reference_fn(self) -> UnaryFn {
        match self {
            UnaryKind::Sigmoid => math::sigmoid,
            UnaryKind::Softplus => math::softplus,
            UnaryKind::Silu => math::silu,
            UnaryKind::Exp => math::exp,
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

    fn prepare(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<PreparedLaunch> {
        let n = self.check(mem)?;
        let entry = abi::unary_entry(self.kind.kernel_id()).expect("every kind has an entry");
        let dims = LaunchDims::new((n.div_ceil(abi::UNARY_BLOCK as usize) as u32, 1, 1), (abi::UNARY_BLOCK, 1, 1));
        let params = abi::UnaryParams { src: mem.device_ptr(&self.src), dst: mem.device_ptr(&self.dst), n: n as u64 };
        // SAFETY: `check` proved both views are contiguous runs of n f32 inside their buffers and
        // dst is src itself or disjoint; `params` is the struct every unary entry takes.
        unsafe { gpu.prepare(entry, dims, &[KernelArg::Params(ParamBlock::of(&params)?)]) }
    }

    fn reference(&self, mem: &mut HostMemory, mufu: &mut dyn Mufu) -> Result<()> {
        self.check(mem)?;
        crate::reference::unary::unary(self.kind.reference_fn(), &self.src, &self.dst, mem, mufu)?;
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

// ---- [speed] fused UNARY→MUL ----

/// ggml's name for the fused pair (one launch of `op(src)·mul`).
const UNARY_MUL: &str = "UNARY_MUL";

/// Fused UNARY→MUL (spec §1.5, §2.7): `dst = f(src) · mul` element-wise — one kernel with the
/// same bits as `Unary { kind, src, dst: tmp }` then `Binary { Mul, a: tmp, b: mul, dst }`.
/// ggml's CUDA backend fuses them only when the unary result and `mul` have the same shape: in
/// the layer's gate path (`softplus(α + dt_bias) · a`, [H_v, n_t] times [H_v, 1]) that is
/// n_t = 1. Ours also takes `mul` as a leading block that MUL broadcasts over the higher
/// dimensions (the gate's `a` at n_t > 1): MUL reads it at `i mod |mul|`, and so does the kernel
/// — the same bits again. `src`, `mul`, `dst` are F32 and contiguous, `dst` of `src`'s shape;
/// `dst` is `src` (or an equal-shape `mul`) itself or disjoint from each. Only SOFTPLUS has a
/// kernel (the others are [`Error::Unsupported`]).
#[derive(Clone, Debug)]
pub struct UnaryMul {
    pub kind: UnaryKind,
    pub src: Tensor,
    pub mul: Tensor,
    pub dst: Tensor,
}

impl UnaryMul {
    /// The fused op replacing `unary` followed by `mul`: `mul` is a MUL whose first operand is
    /// the unary's output and whose second has that output's shape (ggml's condition: the gate
    /// at n_t = 1) or, with `broadcast`, is a leading block of it (the gate at any n_t); all
    /// operands contiguous. The caller must know the intermediate is read by nothing else.
    pub fn fuse(unary: &Unary, mul: &super::Binary, broadcast: bool) -> Option<UnaryMul> {
        (mul.kind == super::BinaryKind::Mul
            && mul.a.same_elements(&unary.dst)
            && (mul.b.ne() == unary.dst.ne() || (broadcast && broadcasts_as_block(mul.b.ne(), unary.dst.ne())))
            && unary.kind == UnaryKind::Softplus
            && [unary.src, mul.b, mul.dst].iter().all(|t| t.layout.is_contiguous()))
        .then_some(UnaryMul { kind: unary.kind, src: unary.src, mul: mul.b, dst: mul.dst })
    }

    /// Validates the op and returns the element count.
    pub fn check(&self, mem: &dyn Memory) -> Result<usize> {
        if self.kind != UnaryKind::Softplus {
            return Err(Error::Unsupported { op: UNARY_MUL, what: format!("{}·MUL (only SOFTPLUS·MUL is fused)", self.kind.name()) });
        }
        check::tensor(UNARY_MUL, "src", &self.src, DType::F32, mem)?;
        check::tensor(UNARY_MUL, "mul", &self.mul, DType::F32, mem)?;
        if !broadcasts_as_block(self.mul.ne(), self.src.ne()) {
            return Err(Error::Shape {
                op: UNARY_MUL,
                arg: "mul",
                expected: format!("{:?}, or a leading block of it with ones above (MUL's broadcast)", self.src.ne()),
                got: self.mul.ne(),
            });
        }
        check::output(UNARY_MUL, "dst", &self.dst, DType::F32, mem)?;
        check::shape(UNARY_MUL, "dst", &self.dst, self.src.ne())?;
        for (arg, t) in [("src", &self.src), ("mul", &self.mul), ("dst", &self.dst)] {
            if !t.layout.is_contiguous() {
                return Err(Error::Stride {
                    op: UNARY_MUL,
                    arg,
                    nb: t.layout.nb,
                    offset: t.layout.offset,
                    reason: "must be contiguous".into(),
                });
            }
        }
        check::same_or_disjoint(UNARY_MUL, "dst", &self.dst, "src", &self.src)?;
        check::same_or_disjoint(UNARY_MUL, "dst", &self.dst, "mul", &self.mul)?;
        let n = self.src.layout.n_elements();
        check::fits_u32(UNARY_MUL, "elements", n)?;
        Ok(n)
    }
}

/// `mul` of ne `m` read by MUL's modulo broadcast over ne `x` is one contiguous block read at
/// `i mod |m|`: `m` equals `x` on dimensions 0 … k−1 and is 1 from k on (any k, 0 … 4).
fn broadcasts_as_block(m: [usize; 4], x: [usize; 4]) -> bool {
    let k = (0..4).find(|&d| m[d] != x[d]).unwrap_or(4);
    (k..4).all(|d| m[d] == 1)
}

// SAFETY: `UnaryMulParams` is repr(C): three u64 then two u32 — no padding.
unsafe impl crate::gpu::KernelParams for abi::UnaryMulParams {}

impl Op for UnaryMul {
    fn name(&self) -> &'static str {
        UNARY_MUL
    }

    fn validate(&self, mem: &dyn Memory) -> Result<()> {
        self.check(mem).map(|_| ())
    }

    fn prepare(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<PreparedLaunch> {
        let n = self.check(mem)?;
        let params = abi::UnaryMulParams {
            x: mem.device_ptr(&self.src),
            m: mem.device_ptr(&self.mul),
            y: mem.device_ptr(&self.dst),
            n: n as u32,
            n_mul: self.mul.layout.n_elements() as u32,
        };
        let dims = LaunchDims::new((n.div_ceil(abi::UNARY_BLOCK as usize) as u32, 1, 1), (abi::UNARY_BLOCK, 1, 1));
        // SAFETY: `check` proved the three views are contiguous runs of n f32 inside their
        // buffers (n fits u32) and dst is src or mul itself or disjoint from each; the block is
        // the entry's `UnaryMulParams`.
        unsafe { gpu.prepare(abi::UNARY_SOFTPLUS_MUL_ENTRY, dims, &[KernelArg::Params(ParamBlock::of(&params)?)]) }
    }

    fn reference(&self, mem: &mut HostMemory, mufu: &mut dyn Mufu) -> Result<()> {
        self.check(mem)?;
        crate::reference::unary::unary_mul(self.kind.reference_fn(), &self.src, &self.mul, &self.dst, mem, mufu)?;
        Ok(())
    }

    fn inputs(&self) -> Vec<Tensor> {
        vec![self.src, self.mul]
    }

    fn outputs(&self) -> Vec<Tensor> {
        vec![self.dst]
    }

    fn must_write(&self) -> Vec<Tensor> {
        self.outputs()
    }
}

#[cfg(test)]
mod unary_mul_tests {
    use super::*;
    use crate::ops::{Binary, BinaryKind};

    fn op(mem: &mut HostMemory, ne: [usize; 4]) -> UnaryMul {
        let (src, mul, dst) = (mem.alloc_tensor(DType::F32, ne), mem.alloc_tensor(DType::F32, ne), mem.alloc_tensor(DType::F32, ne));
        UnaryMul { kind: UnaryKind::Softplus, src, mul, dst }
    }

    #[test]
    fn the_parameter_block_has_no_padding() {
        assert_eq!(std::mem::size_of::<abi::UnaryMulParams>(), 3 * 8 + 2 * 4);
    }

    #[test]
    fn shapes_must_match_and_only_softplus_is_fused() {
        let mut mem = HostMemory::new();
        assert_eq!(op(&mut mem, [32, 1, 1, 1]).check(&mem).unwrap(), 32);
        // A leading block broadcasts (MUL's modulo), any other shape is refused.
        let mut o = op(&mut mem, [32, 4, 1, 1]);
        o.mul = mem.alloc_tensor(DType::F32, [32, 1, 1, 1]);
        assert_eq!(o.check(&mem).unwrap(), 128);
        o.mul = mem.alloc_tensor(DType::F32, [1, 1, 1, 1]);
        assert!(o.check(&mem).is_ok());
        o.mul = mem.alloc_tensor(DType::F32, [1, 4, 1, 1]);
        assert!(matches!(o.check(&mem), Err(Error::Shape { op: UNARY_MUL, arg: "mul", .. })));
        o.mul = mem.alloc_tensor(DType::F32, [32, 2, 1, 1]);
        assert!(matches!(o.check(&mem), Err(Error::Shape { op: UNARY_MUL, arg: "mul", .. })));
        let mut o = op(&mut mem, [32, 1, 1, 1]);
        o.kind = UnaryKind::Sigmoid;
        assert!(matches!(o.check(&mem), Err(Error::Unsupported { op: UNARY_MUL, .. })));
        let mut o = op(&mut mem, [4, 4, 1, 1]);
        o.src = o.src.transpose();
        assert!(matches!(o.check(&mem), Err(Error::Stride { arg: "src", .. })));
        // In place over either input is fine; a partial overlap is not.
        let mut o = op(&mut mem, [32, 1, 1, 1]);
        o.dst = o.mul;
        assert!(o.check(&mem).is_ok());
        let mut o = op(&mut mem, [32, 1, 1, 1]);
        let big = mem.alloc_tensor(DType::F32, [33, 1, 1, 1]);
        let nb = crate::tensor::Layout::contiguous(DType::F32, [32, 1, 1, 1]).nb;
        o.src = big.view([32, 1, 1, 1], nb, 0);
        o.dst = big.view([32, 1, 1, 1], nb, 4);
        assert!(matches!(o.check(&mem), Err(Error::Aliasing { .. })));
    }

    #[test]
    fn fuse_applies_only_where_ggml_fuses() {
        let mut mem = HostMemory::new();
        // The gate path at n_t = 1: softplus [H_v, 1] · a [H_v, 1].
        let (x, sp, a, gate) = (
            mem.alloc_tensor(DType::F32, [32, 1, 1, 1]),
            mem.alloc_tensor(DType::F32, [32, 1, 1, 1]),
            mem.alloc_tensor(DType::F32, [32, 1, 1, 1]),
            mem.alloc_tensor(DType::F32, [32, 1, 1, 1]),
        );
        let unary = Unary { kind: UnaryKind::Softplus, src: x, dst: sp };
        let fused = UnaryMul::fuse(&unary, &Binary { kind: BinaryKind::Mul, a: sp, b: a, dst: gate }, false).unwrap();
        assert_eq!((fused.src, fused.mul, fused.dst), (x, a, gate));
        // n_t = 4: a [H_v, 1] broadcasts over [H_v, 4]: not ggml's fusion, ours with `broadcast`.
        let (x4, sp4, gate4) = (
            mem.alloc_tensor(DType::F32, [32, 4, 1, 1]),
            mem.alloc_tensor(DType::F32, [32, 4, 1, 1]),
            mem.alloc_tensor(DType::F32, [32, 4, 1, 1]),
        );
        let unary4 = Unary { kind: UnaryKind::Softplus, src: x4, dst: sp4 };
        let mul4 = Binary { kind: BinaryKind::Mul, a: sp4, b: a, dst: gate4 };
        assert!(UnaryMul::fuse(&unary4, &mul4, false).is_none());
        let fused4 = UnaryMul::fuse(&unary4, &mul4, true).unwrap();
        assert_eq!(fused4.check(&mem).unwrap(), 128);
        // A broadcast that is not a leading block (a [1, 4] over [32, 4]): never fused.
        let col = mem.alloc_tensor(DType::F32, [1, 4, 1, 1]);
        assert!(UnaryMul::fuse(&unary4, &Binary { kind: BinaryKind::Mul, a: sp4, b: col, dst: gate4 }, true).is_none());
        // Not the unary's output, not a MUL, not SOFTPLUS.
        assert!(UnaryMul::fuse(&unary, &Binary { kind: BinaryKind::Mul, a, b: sp, dst: gate }, true).is_none());
        assert!(UnaryMul::fuse(&unary, &Binary { kind: BinaryKind::Add, a: sp, b: a, dst: gate }, true).is_none());
        // A strided `a`: not fused.
        let a2 = mem.alloc_tensor(DType::F32, [64, 1, 1, 1]);
        let strided = a2.view([32, 1, 1, 1], [8, 256, 256, 256], 0);
        assert!(UnaryMul::fuse(&unary, &Binary { kind: BinaryKind::Mul, a: sp, b: strided, dst: gate }, true).is_none());
        let sig = Unary { kind: UnaryKind::Sigmoid, src: x, dst: sp };
        assert!(UnaryMul::fuse(&sig, &Binary { kind: BinaryKind::Mul, a: sp, b: a, dst: gate }, true).is_none());
    }
}
