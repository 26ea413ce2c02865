// MERGE-SHIM: delete when work/convchain and work/mmvf land
//! Stand-in `impl Op` for the two fused ops, by composition of the unfused ops — semantically
//! what the fused kernels must equal — so that the fusion pass, its CPU tests and the sweep's
//! comparisons run before the real kernels are merged. Nothing outside this file depends on it.
//!
//! GDN_CONV_CHAIN: the fused kernel reads everything it needs before it writes, so the shim
//! copies the op's tensors (their byte spans) into a private scratch memory, runs GET_ROWS,
//! CONCAT, one CPY per snapshot row, SSM_CONV+SiLU and the two L2_NORMs there (scratch holds
//! the GET_ROWS and CONCAT outputs), and copies the written spans back. On the GPU the scratch
//! is a second `DeviceMemory` and the copies are stream-ordered device-to-device memcpys; the
//! launches are the unfused kernels (so launch counts show 5 + K kernels per fused node).
//!
//! MUL_MAT_VEC_PAIR: the two mat-vecs, one after the other.

use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::memory::{DeviceMemory, HostMemory, Memory};
use crate::ops::{ConcatDim0, Cpy, GdnConvChain, GetRows, L2Norm, MulMatVecPair, Op, SsmConv};
use crate::reference::math::Mufu;
use crate::tensor::{BufferId, DType, Layout, Tensor};
use std::ops::Range;

const CHAIN: &str = "GDN_CONV_CHAIN";
const PAIR: &str = "MUL_MAT_VEC_PAIR";

/// The op's tensors in scratch buffers, and the unfused ops over them.
struct Scratch {
    /// (main buffer, main byte span, scratch buffer, copied back?)
    spans: Vec<(BufferId, Range<usize>, BufferId, bool)>,
    host: HostMemory,
    ops: Vec<Box<dyn Op>>,
}

fn span(t: &Tensor, arg: &'static str) -> Result<Range<usize>> {
    t.layout.byte_range().ok_or(Error::Empty { op: CHAIN, arg, ne: t.ne() })
}

impl Scratch {
    fn new(op: &GdnConvChain, mem: &dyn Memory) -> Result<Scratch> {
        use crate::ops::check;
        check::tensor(CHAIN, "conv_cache", &op.conv_cache, DType::F32, mem)?;
        check::output(CHAIN, "conv_cache", &op.conv_cache, DType::F32, mem)?;
        check::tensor(CHAIN, "source_row", &op.source_row, DType::I32, mem)?;
        check::tensor(CHAIN, "qkv", &op.qkv, DType::F32, mem)?;
        check::tensor(CHAIN, "weight", &op.weight, DType::F32, mem)?;
        for (arg, t) in [("conv_out", &op.conv_out), ("q_norm", &op.q_norm), ("k_norm", &op.k_norm)] {
            check::output(CHAIN, arg, t, DType::F32, mem)?;
        }
        // What the fused kernel cannot do: outputs overlapping inputs or each other, except
        // conv_out == qkv element for element (and snapshot rows == the row read).
        let outs = [("conv_cache", op.conv_cache), ("conv_out", op.conv_out), ("q_norm", op.q_norm), ("k_norm", op.k_norm)];
        let ins = [("qkv", op.qkv), ("weight", op.weight), ("source_row", op.source_row)];
        for (i, (a, ta)) in outs.iter().enumerate() {
            for (b, tb) in ins.iter().chain(&outs[i + 1..]) {
                if ta.overlaps(tb) && !(*a == "conv_out" && *b == "qkv" && ta.same_elements(tb)) {
                    return Err(Error::Aliasing { op: CHAIN, a, b, why: "the fused kernel reads and writes them together" });
                }
            }
        }
        let rows = mem
            .index_values(&op.source_row)
            .ok_or_else(|| Error::Invalid { op: CHAIN, what: "`source_row` is not an index buffer".into() })?;
        if op.snapshots.is_empty() || op.snapshots.len() > 16 {
            return Err(Error::Unsupported { op: CHAIN, what: format!("{} snapshot rows (1 to 16)", op.snapshots.len()) });
        }
        for (i, a) in op.snapshots.iter().enumerate() {
            if op.snapshots[i + 1..].iter().any(|b| b.row == a.row) {
                return Err(Error::Aliasing { op: CHAIN, a: "snapshots", b: "snapshots", why: "a cache row is written twice" });
            }
        }
        let [c, n_t, ..] = op.qkv.ne();
        let d_conv = op.weight.ne()[0];
        // The fused kernel's scope.
        if !(3..=5).contains(&d_conv) || n_t > 16 || !c.is_multiple_of(128) || ![32, 64, 128].contains(&op.head_dim) {
            return Err(Error::Unsupported { op: CHAIN, what: format!("d_conv {d_conv}, n_t {n_t}, C {c}, head dim {}", op.head_dim) });
        }
        let mut host = HostMemory::new();
        let mut spans = Vec::new();
        let mut rebase = |host: &mut HostMemory, t: &Tensor, arg: &'static str, back: bool| -> Result<Tensor> {
            let r = span(t, arg)?;
            let id = host.alloc(r.len());
            spans.push((t.buffer, r.clone(), id, back));
            Ok(Tensor::new(id, Layout { offset: t.layout.offset - r.start, ..t.layout }))
        };
        let cache = rebase(&mut host, &op.conv_cache, "conv_cache", true)?;
        let qkv = rebase(&mut host, &op.qkv, "qkv", false)?;
        let weight = rebase(&mut host, &op.weight, "weight", false)?;
        let conv_out = rebase(&mut host, &op.conv_out, "conv_out", true)?;
        let q_norm = rebase(&mut host, &op.q_norm, "q_norm", true)?;
        let k_norm = rebase(&mut host, &op.k_norm, "k_norm", true)?;
        let ids = host.alloc_indices(&rows);
        let states = host.alloc_tensor(DType::F32, [(d_conv - 1) * c, 1, 1, 1]);
        let conv_input = host.alloc_tensor(DType::F32, [d_conv - 1 + n_t, c, 1, 1]);
        let mut ops: Vec<Box<dyn Op>> = vec![
            Box::new(GetRows { src: cache, rows: ids, dst: states }),
            Box::new(ConcatDim0 { a: states.reshape([d_conv - 1, c, 1, 1]).expect("contiguous"), b: qkv.transpose(), dst: conv_input }),
        ];
        for s in &op.snapshots {
            let src = crate::graph::layer::window(&conv_input, d_conv - 1, s.offset);
            ops.push(Box::new(Cpy { src, dst: crate::layer::LayerTensors::cache_row(&cache, s.row) }));
        }
        ops.push(Box::new(SsmConv { conv_input, weight, bias: None, dst: conv_out, apply_silu: true }));
        let (d, hk) = (op.head_dim, op.n_k_heads);
        let nb = conv_out.layout.nb;
        for (which, dst) in [(0, q_norm), (1, k_norm)] {
            let src = conv_out.view([d, hk, n_t, 1], [4, 4 * d, nb[1], nb[2]], 4 * which * hk * d);
            ops.push(Box::new(L2Norm { src, dst, eps: op.eps }));
        }
        for o in &ops {
            o.validate(&host)?;
        }
        Ok(Scratch { spans, host, ops })
    }
}

impl Op for GdnConvChain {
    fn name(&self) -> &'static str {
        CHAIN
    }

    fn validate(&self, mem: &dyn Memory) -> Result<()> {
        Scratch::new(self, mem).map(|_| ())
    }

    fn launch(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<()> {
        let s = Scratch::new(self, mem)?;
        let dev = DeviceMemory::upload(gpu, &s.host)?;
        let stream = gpu.stream().cu_stream();
        gpu.context().bind_to_thread()?;
        let at = |buffer: BufferId, offset: usize| {
            Tensor::new(buffer, Layout::contiguous(DType::F32, [1, 1, 1, 1]).view([1, 1, 1, 1], [4; 4], offset))
        };
        for (main, r, id, _) in &s.spans {
            // SAFETY: validation proved the span lies in the main buffer; the scratch buffer
            // was allocated with exactly its length; both live until the stream has run the
            // copy (the scratch memory is dropped after stream-ordered work only).
            unsafe {
                cudarc::driver::result::memcpy_dtod_async(dev.device_ptr(&at(*id, 0)), mem.device_ptr(&at(*main, r.start)), r.len(), stream)
            }?;
        }
        for o in &s.ops {
            o.launch(gpu, &dev)?;
        }
        for (main, r, id, back) in &s.spans {
            if *back {
                // SAFETY: as above, in the other direction.
                unsafe {
                    cudarc::driver::result::memcpy_dtod_async(
                        mem.device_ptr(&at(*main, r.start)),
                        dev.device_ptr(&at(*id, 0)),
                        r.len(),
                        stream,
                    )
                }?;
            }
        }
        gpu.synchronize()
    }

    fn reference(&self, mem: &mut HostMemory, mufu: &mut dyn Mufu) -> Result<()> {
        let mut s = Scratch::new(self, mem)?;
        for (main, r, id, _) in &s.spans {
            let bytes = mem.bytes(*main)[r.clone()].to_vec();
            s.host.bytes_mut(*id).copy_from_slice(&bytes);
        }
        for o in &s.ops {
            o.reference(&mut s.host, mufu)?;
        }
        for (main, r, id, back) in &s.spans {
            if *back {
                let bytes = s.host.bytes(*id).to_vec();
                mem.bytes_mut(*main)[r.clone()].copy_from_slice(&bytes);
            }
        }
        Ok(())
    }

    fn inputs(&self) -> Vec<Tensor> {
        vec![self.conv_cache, self.source_row, self.qkv, self.weight]
    }

    fn outputs(&self) -> Vec<Tensor> {
        vec![self.conv_cache, self.conv_out, self.q_norm, self.k_norm]
    }
}

impl MulMatVecPair {
    fn check(&self, mem: &dyn Memory) -> Result<()> {
        self.first.validate(mem)?;
        self.second.validate(mem)?;
        if !self.first.input.same_elements(&self.second.input) {
            return Err(Error::Invalid { op: PAIR, what: "the two mat-vecs read different inputs".into() });
        }
        for (a, ta, b, tb) in [
            ("first.dst", self.first.dst, "second.dst", self.second.dst),
            ("first.dst", self.first.dst, "second.weight", self.second.weight),
            ("second.dst", self.second.dst, "first.weight", self.first.weight),
        ] {
            if ta.overlaps(&tb) {
                return Err(Error::Aliasing { op: PAIR, a, b, why: "the pair reads and writes them together" });
            }
        }
        Ok(())
    }
}

impl Op for MulMatVecPair {
    fn name(&self) -> &'static str {
        PAIR
    }

    fn validate(&self, mem: &dyn Memory) -> Result<()> {
        self.check(mem)
    }

    fn launch(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<()> {
        self.check(mem)?;
        self.first.launch(gpu, mem)?;
        self.second.launch(gpu, mem)
    }

    fn reference(&self, mem: &mut HostMemory, mufu: &mut dyn Mufu) -> Result<()> {
        self.check(mem)?;
        self.first.reference(mem, mufu)?;
        self.second.reference(mem, mufu)
    }

    fn inputs(&self) -> Vec<Tensor> {
        vec![self.first.weight, self.second.weight, self.first.input]
    }

    fn outputs(&self) -> Vec<Tensor> {
        vec![self.first.dst, self.second.dst]
    }
}
