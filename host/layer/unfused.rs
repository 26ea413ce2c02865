//! The unfused GDN layer chain for one verify step of one sequence, exactly as ggml's CUDA
//! backend runs it (spec §1.3–§1.4): the ground truth every fusion must equal.

use super::shape::{GdnShape, Step};
use crate::error::{Error, Result};
use crate::inputs::{self, Values};
use crate::memory::HostMemory;
use crate::ops::{Op, Precision};
use crate::tensor::{BufferId, DType, Layout, Tensor, checked_product};
use rand::Rng;
use rand::rngs::StdRng;

const OP: &str = "GDN_LAYER";

/// The largest column count one MUL_MAT_VEC launch takes (ggml's `MMVF_MAX_BATCH_SIZE`).
pub const MAT_VEC_MAX_COLS: usize = 8;

/// Every tensor of one layer step, in one [`HostMemory`]. Views are built as ggml builds them.
#[derive(Clone, Debug)]
pub struct LayerTensors {
    // Caches (persist across steps).
    /// Conv state r_l: ne [(K_c−1)·C, M·(1+R)]; a row is \[C\]\[K_c−1\] (channel-major).
    pub conv_cache: Tensor,
    /// SSM state s_l: ne [D·D·H_v, M·(1+R)]; a row is [H_v][D col][D i].
    pub ssm_cache: Tensor,
    // Step inputs.
    /// `s_copy` for the one sequence: I32 \[1\], in an index buffer.
    pub source_rows: Tensor,
    /// The qkv projection of the step's tokens, ne [C, n_t] (its mat-mul is out of scope).
    pub qkv_mixed: Tensor,
    /// The attention-norm output, ne [E, n_t]: input of the alpha/beta mat-vecs.
    pub cur: Tensor,
    // Weights.
    /// SSM_CONV weights (K_c taps per channel).
    pub conv_weight: Tensor,
    /// Alpha projection weights (F32, F16 or BF16).
    pub alpha_weight: Tensor,
    /// Beta projection weights (F32, F16 or BF16).
    pub beta_weight: Tensor,
    /// `dt_bias`, one per value head.
    pub dt_bias: Tensor,
    /// `ssm_a`, one per value head.
    pub ssm_a: Tensor,
    // Intermediates, each in its own buffer (ggml's allocator would reuse some).
    /// The conv-state rows read for the step (GET_ROWS output).
    pub conv_states: Tensor,
    /// The conv input: states then the step's qkv (CONCAT output).
    pub conv_input: Tensor,
    /// SSM_CONV+SiLU output.
    pub conv_out: Tensor,
    /// L2-normalised q.
    pub q_norm: Tensor,
    /// L2-normalised k.
    pub k_norm: Tensor,
    /// The SSM state rows read for the step (GET_ROWS output).
    pub ssm_state: Tensor,
    /// Alpha mat-vec output.
    pub alpha: Tensor,
    /// Beta mat-vec output.
    pub beta_raw: Tensor,
    /// Sigmoid of the beta product.
    pub beta: Tensor,
    /// Alpha plus `dt_bias`.
    pub alpha_biased: Tensor,
    /// Softplus of the biased alpha.
    pub softplus: Tensor,
    /// The gate: softplus times `ssm_a`.
    pub gate: Tensor,
    /// Attention output, ne [D, H_v, n_t, 1].
    pub attn_out: Tensor,
}

/// How the layer's tensors are filled.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerInit {
    /// Type of the alpha/beta projection weights (F32, F16 or BF16).
    pub mat_vec_weights: DType,
    /// Accumulation precision of F16 mat-vecs.
    pub precision: Precision,
    /// Salt inputs with special values (±0, subnormals, ±Inf, NaN).
    pub specials: bool,
}

impl Default for LayerInit {
    fn default() -> Self {
        LayerInit { mat_vec_weights: DType::F32, precision: Precision::Default, specials: false }
    }
}

impl LayerTensors {
    /// Allocates every tensor of the step (caches zeroed; call [`LayerTensors::fill_random`]).
    /// The whole step's bytes are computed (checked) and compared with `mem`'s budget before
    /// anything is allocated: a shape whose buffers cannot exist is a typed error
    /// ([`Error::Overflow`], [`Error::OutOfMemory`]), never an abort.
    pub fn alloc(mem: &mut HostMemory, shape: &GdnShape, step: &Step, init: &LayerInit) -> Result<Self> {
        let specs = Self::specs(shape, step, init.mat_vec_weights)?;
        let mut total = 0usize;
        for (name, dtype, ne) in specs {
            let bytes = Layout::contiguous_bytes(dtype, ne).ok_or_else(|| Error::Overflow {
                op: OP,
                arg: name,
                what: format!("bytes of {dtype:?} {ne:?}"),
            })?;
            total =
                total.checked_add(bytes).ok_or_else(|| Error::Overflow { op: OP, arg: name, what: "bytes of the layer step".into() })?;
        }
        mem.reserve_check(total.saturating_add(4))?;
        // Buffers in field order (source_rows third), as before the specs existed.
        let placeholder = Tensor::new(BufferId(usize::MAX), Layout::contiguous(DType::F32, [0; 4]));
        let (mut tensors, mut source_rows) = ([placeholder; 22], placeholder);
        for (i, (_, dtype, ne)) in specs.into_iter().enumerate() {
            if i == 2 {
                // source_row < cache rows ≤ 2^31 − 1 (validated).
                source_rows = mem.try_alloc_indices(&[step.source_row() as i32])?;
            }
            tensors[i] = mem.try_alloc_tensor(dtype, ne)?;
        }
        let [
            conv_cache,
            ssm_cache,
            qkv_mixed,
            cur,
            conv_weight,
            alpha_weight,
            beta_weight,
            dt_bias,
            ssm_a,
            conv_states,
            conv_input,
            conv_out,
            q_norm,
            k_norm,
            ssm_state,
            alpha,
            beta_raw,
            beta,
            alpha_biased,
            softplus,
            gate,
            attn_out,
        ] = tensors;
        Ok(LayerTensors {
            conv_cache,
            ssm_cache,
            source_rows,
            qkv_mixed,
            cur,
            conv_weight,
            alpha_weight,
            beta_weight,
            dt_bias,
            ssm_a,
            conv_states,
            conv_input,
            conv_out,
            q_norm,
            k_norm,
            ssm_state,
            alpha,
            beta_raw,
            beta,
            alpha_biased,
            softplus,
            gate,
            attn_out,
        })
    }

    /// Name, type and shape of every tensor but `source_rows` (I32 \[1\]), in field order: what
    /// [`LayerTensors::alloc`] allocates (contiguous) and [`unfused_ops`] requires. Validates
    /// the shape and the step (every size representable).
    pub fn specs(shape: &GdnShape, step: &Step, weights: DType) -> Result<[(&'static str, DType, [usize; 4]); 22]> {
        shape.validate()?;
        step.validate()?;
        if !matches!(weights, DType::F32 | DType::F16 | DType::BF16) {
            return Err(Error::Unsupported { op: OP, what: format!("{weights:?} mat-vec weights") });
        }
        let (c, n_t, e, rows) = (shape.try_channels()?, step.n_tokens, shape.n_embd, step.try_cache_rows()?);
        let (d, hk, hv, kc) = (shape.head_dim, shape.n_k_heads, shape.n_v_heads, shape.d_conv);
        let (conv_row, ssm_row) = (shape.try_conv_row()?, shape.try_ssm_row()?);
        let f = DType::F32;
        Ok([
            ("conv_cache", f, [conv_row, rows, 1, 1]),
            ("ssm_cache", f, [ssm_row, rows, 1, 1]),
            ("qkv_mixed", f, [c, n_t, 1, 1]),
            ("cur", f, [e, n_t, 1, 1]),
            ("conv_weight", f, [kc, c, 1, 1]),
            ("alpha_weight", weights, [e, hv, 1, 1]),
            ("beta_weight", weights, [e, hv, 1, 1]),
            ("dt_bias", f, [hv, 1, 1, 1]),
            ("ssm_a", f, [hv, 1, 1, 1]),
            ("conv_states", f, [conv_row, 1, 1, 1]),
            // kc ≤ 15 and n_t ≤ 16 (validated).
            ("conv_input", f, [kc - 1 + n_t, c, 1, 1]),
            ("conv_out", f, [c, n_t, 1, 1]),
            ("q_norm", f, [d, hk, n_t, 1]),
            ("k_norm", f, [d, hk, n_t, 1]),
            ("ssm_state", f, [ssm_row, 1, 1, 1]),
            ("alpha", f, [hv, n_t, 1, 1]),
            ("beta_raw", f, [hv, n_t, 1, 1]),
            ("beta", f, [hv, n_t, 1, 1]),
            ("alpha_biased", f, [hv, n_t, 1, 1]),
            ("softplus", f, [hv, n_t, 1, 1]),
            ("gate", f, [hv, n_t, 1, 1]),
            ("attn_out", f, [d, hv, n_t, 1]),
        ])
    }

    /// The tensors in [`LayerTensors::specs`] order.
    fn by_spec(&self) -> [Tensor; 22] {
        [
            self.conv_cache,
            self.ssm_cache,
            self.qkv_mixed,
            self.cur,
            self.conv_weight,
            self.alpha_weight,
            self.beta_weight,
            self.dt_bias,
            self.ssm_a,
            self.conv_states,
            self.conv_input,
            self.conv_out,
            self.q_norm,
            self.k_norm,
            self.ssm_state,
            self.alpha,
            self.beta_raw,
            self.beta,
            self.alpha_biased,
            self.softplus,
            self.gate,
            self.attn_out,
        ]
    }

    /// Every tensor is what [`LayerTensors::alloc`] would allocate for this shape and step
    /// (type, shape, contiguous strides; any offset and buffer — the ops check those against
    /// the memory), the two mat-vec weights of one type. Typed errors naming the tensor.
    pub fn conforms(&self, shape: &GdnShape, step: &Step) -> Result<()> {
        let weights = self.alpha_weight.dtype();
        let specs = Self::specs(shape, step, weights)?;
        for ((arg, dtype, ne), t) in specs.into_iter().zip(self.by_spec()) {
            if t.dtype() != dtype {
                return Err(Error::DType { op: OP, arg, expected: format!("{dtype:?}"), got: t.dtype() });
            }
            if t.ne() != ne {
                return Err(Error::Shape { op: OP, arg, expected: format!("{ne:?} for this shape and step"), got: t.ne() });
            }
            if !t.layout.is_contiguous() {
                return Err(Error::Stride {
                    op: OP,
                    arg,
                    nb: t.layout.nb,
                    offset: t.layout.offset,
                    reason: "the layer's tensors are contiguous".into(),
                });
            }
        }
        let (dtype, ne) = (self.source_rows.dtype(), self.source_rows.ne());
        if dtype != DType::I32 || ne != [1, 1, 1, 1] {
            return Err(Error::Shape { op: OP, arg: "source_rows", expected: "I32 [1, 1, 1, 1]".into(), got: ne });
        }
        Ok(())
    }

    /// Random caches, inputs and weights in realistic ranges (the gate γ = exp(softplus(α + dt)·a)
    /// lands in (0, 1)); intermediates get random bits, so unwritten outputs show.
    pub fn fill_random(&self, mem: &mut HostMemory, shape: &GdnShape, rng: &mut StdRng, init: &LayerInit) {
        let vals = |scale: f32| if init.specials { Values::WithSpecials { scale, every: 997 } } else { Values::Uniform(scale) };
        let fill = |mem: &mut HostMemory, rng: &mut StdRng, t: &Tensor, v: Values| {
            let data = inputs::fill(rng, t.layout.n_elements(), v);
            mem.fill_f32(t, &data);
        };
        fill(mem, rng, &self.conv_cache, vals(1.0));
        fill(mem, rng, &self.ssm_cache, Values::Uniform(0.05));
        fill(mem, rng, &self.qkv_mixed, vals(1.0));
        fill(mem, rng, &self.cur, vals(1.0));
        fill(mem, rng, &self.conv_weight, Values::Uniform(0.5));
        let w_scale = 1.7 / (shape.n_embd as f32).sqrt();
        for w in [&self.alpha_weight, &self.beta_weight] {
            let data = inputs::fill(rng, w.layout.n_elements(), Values::Uniform(w_scale));
            let idx: Vec<_> = w.layout.indices().collect();
            for (i, x) in idx.into_iter().zip(data) {
                match w.dtype() {
                    DType::F16 => mem.write_u16(w, i, half::f16::from_f32(x).to_bits()),
                    DType::BF16 => mem.write_u16(w, i, half::bf16::from_f32(x).to_bits()),
                    _ => mem.write_f32(w, i, x),
                }
            }
        }
        fill(mem, rng, &self.dt_bias, Values::Uniform(1.0));
        let a: Vec<f32> = (0..shape.n_v_heads).map(|_| -(rng.random_range(-1.0f32..1.0).exp())).collect();
        mem.fill_f32(&self.ssm_a, &a);
        for t in self.intermediates() {
            fill(mem, rng, &t, Values::AnyBits);
        }
    }

    fn intermediates(&self) -> [Tensor; 13] {
        [
            self.conv_states,
            self.conv_input,
            self.conv_out,
            self.q_norm,
            self.k_norm,
            self.ssm_state,
            self.alpha,
            self.beta_raw,
            self.beta,
            self.alpha_biased,
            self.softplus,
            self.gate,
            self.attn_out,
        ]
    }

    /// Row `row` of a cache tensor as a [row_len, 1, 1, 1] view (saturating offset; see
    /// [`LayerTensors::try_cache_row`]).
    pub fn cache_row(cache: &Tensor, row: usize) -> Tensor {
        let nb = cache.layout.nb;
        cache.view([cache.ne()[0], 1, 1, 1], [nb[0], nb[1], nb[1], nb[1]], row.saturating_mul(nb[1]))
    }

    /// [`LayerTensors::cache_row`], or [`Error::Overflow`] when its offset does not fit.
    pub fn try_cache_row(arg: &'static str, cache: &Tensor, row: usize) -> Result<Tensor> {
        let nb = cache.layout.nb;
        let offset = product(arg, "cache row offset row·nb[1]", &[row, nb[1]])?;
        checked_view(arg, cache, [cache.ne()[0], 1, 1, 1], [nb[0], nb[1], nb[1], nb[1]], offset)
    }

    /// `window(o)` of the conv input (spec §1.3): columns o … o+K_c−2 of every channel, ne
    /// [K_c−1, C, 1, 1] — the conv state after the first `o` tokens (saturating; see
    /// [`LayerTensors::try_window`]).
    pub fn window(&self, shape: &GdnShape, offset: usize) -> Tensor {
        let nb = self.conv_input.layout.nb;
        self.conv_input.view([shape.d_conv.saturating_sub(1), shape.channels(), 1, 1], [4, nb[1], nb[2], nb[3]], offset.saturating_mul(4))
    }

    /// [`LayerTensors::window`] with checked arithmetic.
    pub fn try_window(&self, shape: &GdnShape, offset: usize) -> Result<Tensor> {
        let nb = self.conv_input.layout.nb;
        let ne = [shape.d_conv.saturating_sub(1), shape.try_channels()?, 1, 1];
        checked_view("conv_input", &self.conv_input, ne, [4, nb[1], nb[2], nb[3]], product("conv_input", "window offset", &[4, offset])?)
    }

    /// The q (`which = 0`), k (1) or v (2) heads of the SiLU'd conv output as ggml views them:
    /// ne [D, heads, n_t, 1], strides (4, 4·D, 4·C, 4·C·n_t) (saturating; see
    /// [`LayerTensors::try_head_view`]).
    pub fn head_view(&self, shape: &GdnShape, which: usize) -> Tensor {
        let (d, hk) = (shape.head_dim, shape.n_k_heads);
        let heads = if which == 2 { shape.n_v_heads } else { hk };
        let nb = self.conv_out.layout.nb;
        let offset = checked_product(&[4, which, hk, d]).unwrap_or(usize::MAX);
        self.conv_out.view([d, heads, self.conv_out.ne()[1], 1], [4, d.saturating_mul(4), nb[1], nb[2]], offset)
    }

    /// [`LayerTensors::head_view`] with checked arithmetic.
    pub fn try_head_view(&self, shape: &GdnShape, which: usize) -> Result<Tensor> {
        let (d, hk) = (shape.head_dim, shape.n_k_heads);
        let heads = if which == 2 { shape.n_v_heads } else { hk };
        let nb = self.conv_out.layout.nb;
        let offset = product("conv_out", "head view offset 4·which·H_k·D", &[4, which, hk, d])?;
        let row = product("conv_out", "head row bytes 4·D", &[4, d])?;
        checked_view("conv_out", &self.conv_out, [d, heads, self.conv_out.ne()[1], 1], [4, row, nb[1], nb[2]], offset)
    }
}

pub(crate) fn product(arg: &'static str, what: &str, factors: &[usize]) -> Result<usize> {
    crate::ops::check::product(OP, arg, what, factors)
}

pub(crate) fn checked_view(arg: &'static str, t: &Tensor, ne: [usize; 4], nb: [usize; 4], offset: usize) -> Result<Tensor> {
    t.checked_view(ne, nb, offset).ok_or_else(|| Error::Overflow {
        op: OP,
        arg,
        what: format!("view offset {} + {offset}", t.layout.offset),
    })
}

pub(crate) fn reshape(arg: &'static str, t: &Tensor, ne: [usize; 4]) -> Result<Tensor> {
    t.reshape(ne).ok_or_else(|| Error::Stride {
        op: OP,
        arg,
        nb: t.layout.nb,
        offset: t.layout.offset,
        reason: format!("must be contiguous with the element count of {ne:?} to be reshaped to it"),
    })
}

/// The op chain of spec §1.4 over `t`: what ggml's CUDA backend launches for one GDN layer of
/// one verify step (with its default fusions: SSM_CONV+SiLU, GATED_DELTA_NET writing the ssm
/// cache directly). Snapshot copies of the conv state run as one CPY_SNAPSHOTS launch (R > 0)
/// or one CPY (R = 0). The alpha/beta mat-vecs take at most 8 columns per launch; wider steps
/// run ⌈n_t/8⌉ launches, each column computed as mul_mat_vec_f computes it.
///
/// The tensors must conform to the shape and step ([`LayerTensors::conforms`]); anything else
/// is a typed error, never a panic, and every view is built with checked arithmetic.
pub fn unfused_ops(t: &LayerTensors, shape: &GdnShape, step: &Step, precision: Precision) -> Result<Vec<Box<dyn Op>>> {
    // One builder: ggml's graph of the layer (crate::graph::layer::ggml_layer_ops) after the
    // backend's snapshot batching pass.
    crate::graph::layer::layer_ops(t, shape, step, precision)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use crate::reference::math::ExactMufu;
    use rand::SeedableRng;

    /// A small layer (one key head, two value heads) that keeps the CPU tests fast.
    const SMALL: GdnShape = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 128, d_conv: 4, eps: 1e-6 };

    fn names(shape: &GdnShape, step: &Step) -> Vec<&'static str> {
        let mut mem = HostMemory::new();
        let t = LayerTensors::alloc(&mut mem, shape, step, &LayerInit::default()).unwrap();
        unfused_ops(&t, shape, step, Precision::Default).unwrap().iter().map(|op| op.name()).collect()
    }

    #[test]
    fn presets_have_the_spec_sizes() {
        let s = GdnShape::QWEN35_9B;
        assert_eq!((s.channels(), s.conv_row(), s.ssm_row()), (8192, 24576, 524_288));
        let s = GdnShape::QWEN35_27B;
        assert_eq!((s.channels(), s.conv_row(), s.ssm_row()), (10240, 30720, 786_432));
        assert_eq!(GdnShape::preset("4b"), Some(GdnShape::QWEN35_4B));
        assert_eq!(GdnShape::preset("qwen3.5-27b"), Some(GdnShape::QWEN35_27B));
        assert_eq!(GdnShape::preset("7b"), None);
    }

    #[test]
    fn the_chain_is_ggmls_launch_order() {
        let chain = ["GET_ROWS", "CONCAT", "CPY", "SSM_CONV", "L2_NORM", "L2_NORM", "GET_ROWS", "MUL_MAT_VEC", "MUL_MAT_VEC"];
        let tail = ["SIGMOID", "ADD", "SOFTPLUS", "MUL", "GATED_DELTA_NET"];
        assert_eq!(names(&SMALL, &Step::new(4, 0)), [&chain[..], &tail[..]].concat());
        // Snapshots: one batched launch instead of the single CPY.
        let with_snapshots = names(&SMALL, &Step::new(4, 3));
        assert_eq!(with_snapshots[2], "CPY_SNAPSHOTS");
        assert_eq!(with_snapshots.len(), chain.len() + tail.len());
        // A fresh cell: both of its cache rows are zeroed in place before they are read.
        let zeroed = names(&SMALL, &Step { zero_cell: Some(0), ..Step::new(2, 1) });
        assert_eq!(&zeroed[..2], &["SCALE", "GET_ROWS"]);
        assert_eq!(&zeroed[7..9], &["SCALE", "GET_ROWS"]);
        // 12 tokens: each mat-vec runs as 8 + 4 columns.
        assert_eq!(names(&SMALL, &Step::new(12, 0)).iter().filter(|n| **n == "MUL_MAT_VEC").count(), 4);
    }

    #[test]
    fn bad_shapes_and_steps_are_typed_errors() {
        let mut mem = HostMemory::new();
        let alloc =
            |mem: &mut HostMemory, shape: &GdnShape, step: &Step| LayerTensors::alloc(mem, shape, step, &LayerInit::default()).map(|_| ());
        let unsupported = |r: Result<()>| matches!(r, Err(Error::Unsupported { op: "GDN_LAYER", .. }));
        let invalid = |r: Result<()>| matches!(r, Err(Error::Invalid { op: "GDN_LAYER", .. }));
        assert!(unsupported(alloc(&mut mem, &GdnShape { head_dim: 64, ..SMALL }, &Step::new(1, 0))));
        assert!(unsupported(alloc(&mut mem, &GdnShape { d_conv: 6, ..SMALL }, &Step::new(1, 0))));
        assert!(unsupported(alloc(&mut mem, &GdnShape { n_embd: 63, ..SMALL }, &Step::new(1, 0))));
        assert!(unsupported(alloc(&mut mem, &SMALL, &Step::new(0, 0))));
        assert!(unsupported(alloc(&mut mem, &SMALL, &Step::new(17, 0))));
        assert!(unsupported(alloc(&mut mem, &SMALL, &Step::new(4, 17))));
        assert!(invalid(alloc(&mut mem, &SMALL, &Step { rollback_depth: 2, ..Step::new(4, 1) })));
        assert!(invalid(alloc(&mut mem, &SMALL, &Step { kv_head: 1, ..Step::new(4, 1) })));
        assert!(invalid(alloc(&mut mem, &SMALL, &Step { zero_cell: Some(3), cells: 2, ..Step::new(4, 1) })));
        assert!(alloc(&mut mem, &SMALL, &Step::new(16, 16)).is_ok());
        let init = LayerInit { mat_vec_weights: DType::I32, ..LayerInit::default() };
        assert!(matches!(LayerTensors::alloc(&mut mem, &SMALL, &Step::new(1, 0), &init), Err(Error::Unsupported { .. })));
    }

    /// Runs the chain's CPU references on a small layer and checks the wiring against the
    /// spec's definitions, independently of the op implementations.
    #[test]
    fn the_cpu_chain_wires_views_as_the_spec_defines_them() {
        let shape = SMALL;
        let (n_t, r, kc, c) = (5, 6, shape.d_conv, shape.channels());
        let step = Step { cells: 2, kv_head: 1, src_cell: 1, ..Step::new(n_t, r) };
        let init = LayerInit::default();
        let mut mem = HostMemory::new();
        let t = LayerTensors::alloc(&mut mem, &shape, &step, &init).unwrap();
        t.fill_random(&mut mem, &shape, &mut StdRng::seed_from_u64(7), &init);
        let before = mem.clone();
        for op in unfused_ops(&t, &shape, &step, init.precision).unwrap() {
            op.reference(&mut mem, &mut ExactMufu).unwrap();
        }
        let old_row = step.source_row();
        // Snapshot slot j of cell kv_head holds window(max(0, n_t − j)): column jj of channel ch
        // is conv_input column o + jj — the old state's column below K_c−1, a token above.
        for j in 0..step.slots() {
            let row = j * step.cells + step.kv_head;
            let o = n_t.saturating_sub(j);
            for ch in [0, 1, c / 2, c - 1] {
                for jj in 0..kc - 1 {
                    let col = o + jj;
                    let want = if col < kc - 1 {
                        before.read_f32(&t.conv_cache, [ch * (kc - 1) + col, old_row, 0, 0])
                    } else {
                        before.read_f32(&t.qkv_mixed, [ch, col - (kc - 1), 0, 0])
                    };
                    let got = mem.read_f32(&t.conv_cache, [ch * (kc - 1) + jj, row, 0, 0]);
                    assert_eq!(got.to_bits(), want.to_bits(), "slot {j}, channel {ch}, column {jj}");
                }
            }
        }
        // Rows of other cells are untouched.
        for g in 0..step.slots() {
            let row = g * step.cells;
            assert_eq!(mem.read_f32(&t.conv_cache, [7, row, 0, 0]).to_bits(), before.read_f32(&t.conv_cache, [7, row, 0, 0]).to_bits());
        }
        // q and k are L2-normalised heads of the conv output: unit length.
        for (x, name) in [(&t.q_norm, "q"), (&t.k_norm, "k")] {
            for tok in 0..n_t {
                let ss: f64 = (0..shape.head_dim).map(|i| (mem.read_f32(x, [i, 0, tok, 0]) as f64).powi(2)).sum();
                assert!((ss - 1.0).abs() < 1e-5, "{name} token {tok}: |x|² = {ss}");
            }
        }
        // The gate is softplus(alpha + dt_bias)·ssm_a with ssm_a < 0, and beta is in (0, 1).
        for i in t.gate.layout.indices() {
            assert!(mem.read_f32(&t.gate, i) < 0.0);
            let b = mem.read_f32(&t.beta, i);
            assert!(b > 0.0 && b < 1.0);
        }
        // GATED_DELTA_NET wrote min(n_t, K) state slots into the ssm cache rows of cell kv_head.
        for j in 0..step.slots() {
            let row = j * step.cells + step.kv_head;
            let changed = mem.read_f32(&t.ssm_cache, [5, row, 0, 0]).to_bits() != before.read_f32(&t.ssm_cache, [5, row, 0, 0]).to_bits();
            assert_eq!(changed, j < n_t.min(step.slots()), "ssm slot {j}");
        }
    }
}
