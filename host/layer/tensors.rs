//! The tensors of one GDN layer step (data only): the table of every tensor, their allocation
//! and random fill, and the views ggml takes of them (cache rows, conv windows, head views),
//! built with the checked-view helpers of [`crate::tensor`]. The builders that wire them into
//! ops live in [`crate::graph::layer`].

use super::shape::{GdnShape, Step};
use crate::error::{Error, Result};
use crate::inputs::{self, Values};
use crate::memory::HostMemory;
use crate::ops::Precision;
use crate::tensor::{BufferId, DType, Layout, Tensor, checked_product};
use rand::Rng;
use rand::rngs::StdRng;

const OP: &str = "GDN_LAYER";

/// What a tensor of the layer is: graph builders derive a value's role from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorKind {
    /// Recurrent cache (persists across steps).
    Cache,
    /// Host-written row indices (an index buffer).
    Index,
    /// A step input produced outside the chain (qkv projection, attention norm).
    StepInput,
    /// A weight (read only).
    Weight,
    /// An intermediate no comparison looks at (GET_ROWS/CONCAT outputs, the gate's parts).
    Intermediate,
    /// An intermediate the fusion sweep compares (SiLU and L2 outputs, alpha/beta, beta, gate).
    Product,
    /// The layer's output.
    Output,
}

/// The sizes every tensor shape of a step is written in (checked when computed).
#[derive(Clone, Copy, Debug)]
pub struct TableDims {
    /// Conv channels C.
    pub c: usize,
    /// Tokens n_t.
    pub n_t: usize,
    /// Sequences n_s, and token columns n_t·n_s.
    pub n_s: usize,
    /// Token columns n_t·n_s.
    pub cols: usize,
    /// Embedding width E.
    pub e: usize,
    /// Head dimension D.
    pub d: usize,
    /// Key heads H_k.
    pub hk: usize,
    /// Value heads H_v.
    pub hv: usize,
    /// d_conv.
    pub kc: usize,
    /// Cache rows (cells · slots).
    pub rows: usize,
    /// Floats of one conv-cache row, (d_conv − 1)·C.
    pub conv_row: usize,
    /// Floats of one ssm-cache row, D·D·H_v.
    pub ssm_row: usize,
    /// d_conv − 1 + n_t: columns of the conv input.
    pub conv_cols: usize,
    /// Type of the alpha/beta weights.
    pub weights: DType,
}

/// The one list of the layer's tensors: each field's doc, kind, type and contiguous shape (in
/// terms of [`TableDims`] `d`). It generates the struct, its name/kind tables, the shapes
/// ([`LayerTensors::table`]) and the conversions to and from an array in field order.
macro_rules! layer_tensor_table {
    (|$d:ident| { $( $(#[$doc:meta])* $name:ident : $kind:ident, $dtype:expr, $ne:expr; )* }) => {
        /// Every tensor of one layer step, in one [`HostMemory`]. Views are built as ggml builds
        /// them. Field order is the table order of [`LayerTensors::NAMES`].
        #[derive(Clone, Debug)]
        pub struct LayerTensors {
            $( $(#[$doc])* pub $name: Tensor, )*
        }

        impl LayerTensors {
            /// Field names, in order.
            pub const NAMES: [&'static str; LAYER_TENSORS] = [$(stringify!($name)),*];
            /// Field kinds, in order.
            pub const KINDS: [TensorKind; LAYER_TENSORS] = [$(TensorKind::$kind),*];

            /// Name, type and contiguous shape of every tensor, in field order, for sizes
            /// computed with checked arithmetic.
            pub fn table_for($d: &TableDims) -> [(&'static str, DType, [usize; 4]); LAYER_TENSORS] {
                [$((stringify!($name), $dtype, $ne)),*]
            }

            /// The tensors in field order.
            pub fn to_array(&self) -> [Tensor; LAYER_TENSORS] {
                [$(self.$name),*]
            }

            /// The struct of the tensors in field order.
            pub fn from_array(tensors: [Tensor; LAYER_TENSORS]) -> Self {
                let [$($name),*] = tensors;
                LayerTensors { $($name),* }
            }
        }
    };
}

/// Tensors of one layer step.
pub const LAYER_TENSORS: usize = 23;

const F32: DType = DType::F32;

layer_tensor_table!(|d| {
    /// Conv state r_l: ne \[(K_c−1)·C, M·(1+R)\]; a row is \[C\]\[K_c−1\] (channel-major).
    conv_cache: Cache, F32, [d.conv_row, d.rows, 1, 1];
    /// SSM state s_l: ne [D·D·H_v, M·(1+R)]; a row is [H_v][D col][D i].
    ssm_cache: Cache, F32, [d.ssm_row, d.rows, 1, 1];
    /// `s_copy` of each sequence: I32 \[n_s\], in an index buffer.
    source_rows: Index, DType::I32, [d.n_s, 1, 1, 1];
    /// The qkv projection of the step's tokens, ne [C, n_t, n_s] (its mat-mul is out of scope).
    qkv_mixed: StepInput, F32, [d.c, d.n_t, d.n_s, 1];
    /// The attention-norm output, ne [E, n_t·n_s] (sequence-major columns): input of the
    /// alpha/beta mat-vecs.
    cur: StepInput, F32, [d.e, d.cols, 1, 1];
    /// ssm_conv1d weight [d_conv, C].
    conv_weight: Weight, F32, [d.kc, d.c, 1, 1];
    /// alpha projection weight [E, H_v].
    alpha_weight: Weight, d.weights, [d.e, d.hv, 1, 1];
    /// beta projection weight [E, H_v].
    beta_weight: Weight, d.weights, [d.e, d.hv, 1, 1];
    /// dt bias \[H_v\] (ADD).
    dt_bias: Weight, F32, [d.hv, 1, 1, 1];
    /// A \[H_v\] (MUL of the gate).
    ssm_a: Weight, F32, [d.hv, 1, 1, 1];
    /// Intermediates (in [`LayerTensors::alloc`] each in its own buffer; a graph plans them).
    conv_states: Intermediate, F32, [d.conv_row, d.n_s, 1, 1];
    /// CONCAT output.
    conv_input: Intermediate, F32, [d.conv_cols, d.c, d.n_s, 1];
    /// SSM_CONV+SiLU output.
    conv_out: Product, F32, [d.c, d.n_t, d.n_s, 1];
    /// L2-normalised q heads.
    q_norm: Product, F32, [d.d, d.hk, d.n_t, d.n_s];
    /// L2-normalised k heads.
    k_norm: Product, F32, [d.d, d.hk, d.n_t, d.n_s];
    /// The ssm-state GET_ROWS output.
    ssm_state: Intermediate, F32, [d.ssm_row, d.n_s, 1, 1];
    /// The alpha/beta products and the gate path, ne [H_v, n_t·n_s] (sequence-major columns).
    alpha: Product, F32, [d.hv, d.cols, 1, 1];
    /// beta product.
    beta_raw: Product, F32, [d.hv, d.cols, 1, 1];
    /// SIGMOID(beta_raw).
    beta: Product, F32, [d.hv, d.cols, 1, 1];
    /// alpha + dt_bias.
    alpha_biased: Intermediate, F32, [d.hv, d.cols, 1, 1];
    /// SOFTPLUS(alpha + dt_bias).
    softplus: Intermediate, F32, [d.hv, d.cols, 1, 1];
    /// softplus · A: the gate.
    gate: Product, F32, [d.hv, d.cols, 1, 1];
    /// Attention output, ne [D, H_v, n_t, n_s].
    attn_out: Output, F32, [d.d, d.hv, d.n_t, d.n_s];
});

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
        mem.reserve_check(total)?;
        // Buffers in field order.
        let placeholder = Tensor::new(BufferId(usize::MAX), Layout::contiguous(DType::F32, [0; 4]));
        let mut tensors = [placeholder; LAYER_TENSORS];
        for ((t, (_, dtype, ne)), kind) in tensors.iter_mut().zip(specs).zip(Self::KINDS) {
            *t = match kind {
                // source_row < cache rows ≤ 2^31 − 1 (validated).
                // source rows < cache rows ≤ 2^31 − 1 (validated).
                TensorKind::Index => mem.try_alloc_indices(&step.source_rows_i32())?,
                _ => mem.try_alloc_tensor(dtype, ne)?,
            };
        }
        Ok(Self::from_array(tensors))
    }

    /// The sizes of `shape` and `step` the table is written in, every one computed with
    /// checked arithmetic (no kernel limits: a graph without the GDN tail takes shapes that
    /// [`GdnShape::validate`] refuses).
    pub fn dims(shape: &GdnShape, step: &Step, weights: DType) -> Result<TableDims> {
        let n_t = step.n_tokens;
        let conv_cols = shape.d_conv.checked_sub(1).and_then(|s| s.checked_add(n_t)).ok_or_else(|| Error::Overflow {
            op: OP,
            arg: "d_conv",
            what: format!("conv input columns d_conv − 1 + n_t ({} − 1 + {n_t})", shape.d_conv),
        })?;
        let n_s = step.n_seqs();
        let cols = n_t.checked_mul(n_s).ok_or_else(|| Error::Overflow { op: OP, arg: "step", what: "token columns n_t·n_s".into() })?;
        Ok(TableDims {
            c: shape.try_channels()?,
            n_t,
            n_s,
            cols,
            e: shape.n_embd,
            d: shape.head_dim,
            hk: shape.n_k_heads,
            hv: shape.n_v_heads,
            kc: shape.d_conv,
            rows: step.try_cache_rows()?,
            conv_row: shape.try_conv_row()?,
            ssm_row: shape.try_ssm_row()?,
            conv_cols,
            weights,
        })
    }

    /// [`LayerTensors::table_for`] the sizes of `shape` and `step` ([`LayerTensors::dims`]).
    pub fn table(shape: &GdnShape, step: &Step, weights: DType) -> Result<[(&'static str, DType, [usize; 4]); LAYER_TENSORS]> {
        Ok(Self::table_for(&Self::dims(shape, step, weights)?))
    }

    /// The index of field `name` in the table.
    pub fn index_of(name: &str) -> Option<usize> {
        Self::NAMES.iter().position(|n| *n == name)
    }

    /// Name, type and shape of every tensor in field order, for a shape and step the kernels
    /// support: what [`LayerTensors::alloc`] allocates (contiguous) and
    /// `graph::layer::unfused_ops` requires. Validates the shape and the step (every size
    /// representable).
    pub fn specs(shape: &GdnShape, step: &Step, weights: DType) -> Result<[(&'static str, DType, [usize; 4]); LAYER_TENSORS]> {
        shape.validate()?;
        step.validate()?;
        if !matches!(weights, DType::F32 | DType::F16 | DType::BF16) {
            return Err(Error::Unsupported { op: OP, what: format!("{weights:?} mat-vec weights") });
        }
        Self::table(shape, step, weights)
    }

    /// Every tensor is what [`LayerTensors::alloc`] would allocate for this shape and step
    /// (type, shape, contiguous strides; any offset and buffer — the ops check those against
    /// the memory), the two mat-vec weights of one type. Typed errors naming the tensor.
    pub fn conforms(&self, shape: &GdnShape, step: &Step) -> Result<()> {
        let weights = self.alpha_weight.dtype();
        let specs = Self::specs(shape, step, weights)?;
        for ((arg, dtype, ne), t) in specs.into_iter().zip(self.to_array()) {
            if t.dtype() != dtype {
                return Err(Error::DType { op: OP, arg, expected: format!("{dtype:?}"), got: t.dtype() });
            }
            if t.ne() != ne {
                return Err(Error::Shape { op: OP, arg, expected: format!("{dtype:?} {ne:?} for this shape and step"), got: t.ne() });
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
        Ok(())
    }

    /// Random caches, inputs and weights in realistic ranges (the gate γ = exp(softplus(α + dt)·a)
    /// lands in (0, 1)); intermediates get random bits, so unwritten outputs show. A typed error
    /// when `mem` does not hold the tensors (then some may have been filled).
    pub fn fill_random(&self, mem: &mut HostMemory, shape: &GdnShape, rng: &mut StdRng, init: &LayerInit) -> Result<()> {
        let vals = |scale: f32| if init.specials { Values::WithSpecials { scale, every: 997 } } else { Values::Uniform(scale) };
        let fill = |mem: &mut HostMemory, rng: &mut StdRng, t: &Tensor, v: Values| {
            let data = inputs::fill(rng, t.layout.n_elements(), v)?;
            mem.fill_f32(t, &data)
        };
        fill(mem, rng, &self.conv_cache, vals(1.0))?;
        fill(mem, rng, &self.ssm_cache, Values::Uniform(0.05))?;
        fill(mem, rng, &self.qkv_mixed, vals(1.0))?;
        fill(mem, rng, &self.cur, vals(1.0))?;
        fill(mem, rng, &self.conv_weight, Values::Uniform(0.5))?;
        let w_scale = 1.7 / (shape.n_embd as f32).sqrt();
        for w in [&self.alpha_weight, &self.beta_weight] {
            let data = inputs::fill(rng, w.layout.n_elements(), Values::Uniform(w_scale))?;
            let idx: Vec<_> = w.layout.indices().collect();
            for (i, x) in idx.into_iter().zip(data) {
                match w.dtype() {
                    DType::F16 => mem.write_u16(w, i, half::f16::from_f32(x).to_bits())?,
                    DType::BF16 => mem.write_u16(w, i, half::bf16::from_f32(x).to_bits())?,
                    _ => mem.write_f32(w, i, x)?,
                }
            }
        }
        fill(mem, rng, &self.dt_bias, Values::Uniform(1.0))?;
        let a: Vec<f32> = (0..shape.n_v_heads).map(|_| -(rng.random_range(-1.0f32..1.0).exp())).collect();
        mem.fill_f32(&self.ssm_a, &a)?;
        for t in self.intermediates() {
            fill(mem, rng, &t, Values::AnyBits)?;
        }
        Ok(())
    }

    /// The tensors the chain computes (intermediates, products and the output).
    fn intermediates(&self) -> impl Iterator<Item = Tensor> {
        self.to_array()
            .into_iter()
            .zip(Self::KINDS)
            .filter(|(_, k)| matches!(k, TensorKind::Intermediate | TensorKind::Product | TensorKind::Output))
            .map(|(t, _)| t)
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
        cache.try_view(OP, arg, [cache.ne()[0], 1, 1, 1], [nb[0], nb[1], nb[1], nb[1]], offset)
    }

    /// `n` consecutive rows of a cache tensor from row `first`, as a [row_len, n, 1, 1] view
    /// (what a step of n sequences writes for one slot), or [`Error::Overflow`].
    pub fn try_cache_rows(arg: &'static str, cache: &Tensor, first: usize, n: usize) -> Result<Tensor> {
        let nb = cache.layout.nb;
        let offset = product(arg, "cache row offset row·nb[1]", &[first, nb[1]])?;
        let all = product(arg, "cache rows bytes n·nb[1]", &[n, nb[1]])?;
        cache.try_view(OP, arg, [cache.ne()[0], n, 1, 1], [nb[0], nb[1], all, all], offset)
    }

    /// `window(o)` of the conv input (spec §1.3): columns o … o+K_c−2 of every channel and
    /// sequence, ne [K_c−1, C, n_s, 1] — the conv states after the first `o` tokens
    /// (saturating; see [`LayerTensors::try_window`]).
    pub fn window(&self, shape: &GdnShape, offset: usize) -> Tensor {
        let nb = self.conv_input.layout.nb;
        let ne = [shape.d_conv.saturating_sub(1), shape.channels(), self.conv_input.ne()[2], 1];
        self.conv_input.view(ne, [4, nb[1], nb[2], nb[3]], offset.saturating_mul(4))
    }

    /// [`LayerTensors::window`] with checked arithmetic.
    pub fn try_window(&self, shape: &GdnShape, offset: usize) -> Result<Tensor> {
        let nb = self.conv_input.layout.nb;
        let ne = [shape.d_conv.saturating_sub(1), shape.try_channels()?, self.conv_input.ne()[2], 1];
        self.conv_input.try_view(OP, "conv_input", ne, [4, nb[1], nb[2], nb[3]], product("conv_input", "window offset", &[4, offset])?)
    }

    /// The q (`which = 0`), k (1) or v (2) heads of the SiLU'd conv output as ggml views them:
    /// ne [D, heads, n_t, n_s], strides (4, 4·D, 4·C, 4·C·n_t) (saturating; see
    /// [`LayerTensors::try_head_view`]).
    pub fn head_view(&self, shape: &GdnShape, which: usize) -> Tensor {
        let (d, hk) = (shape.head_dim, shape.n_k_heads);
        let heads = if which == 2 { shape.n_v_heads } else { hk };
        let nb = self.conv_out.layout.nb;
        let offset = checked_product(&[4, which, hk, d]).unwrap_or(usize::MAX);
        self.conv_out.view([d, heads, self.conv_out.ne()[1], self.conv_out.ne()[2]], [4, d.saturating_mul(4), nb[1], nb[2]], offset)
    }

    /// [`LayerTensors::head_view`] with checked arithmetic.
    pub fn try_head_view(&self, shape: &GdnShape, which: usize) -> Result<Tensor> {
        let (d, hk) = (shape.head_dim, shape.n_k_heads);
        let heads = if which == 2 { shape.n_v_heads } else { hk };
        let nb = self.conv_out.layout.nb;
        let offset = product("conv_out", "head view offset 4·which·H_k·D", &[4, which, hk, d])?;
        let row = product("conv_out", "head row bytes 4·D", &[4, d])?;
        self.conv_out.try_view(OP, "conv_out", [d, heads, self.conv_out.ne()[1], self.conv_out.ne()[2]], [4, row, nb[1], nb[2]], offset)
    }
}

fn product(arg: &'static str, what: &str, factors: &[usize]) -> Result<usize> {
    crate::tensor::try_product(OP, arg, what, factors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    /// A small layer (one key head, two value heads) that keeps the CPU tests fast.
    const SMALL: GdnShape = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 128, d_conv: 4, eps: 1e-6 };

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
}
