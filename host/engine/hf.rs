//! A Qwen3.5 / Qwen3-Next Gated-DeltaNet layer in an engine's own terms: built once from the
//! checkpoint's tensors as Hugging Face names and lays them out, owning its weights and its
//! scratch; each step takes the engine's caches and activations (cudarc views, no copy) and
//! the cache rows of each sequence, and writes the attention output. The ggml-view layer
//! underneath ([`crate::layer::LayerTensors`], [`super::layer_step_with`]) stays what the
//! fusion experiments use; this module only wires the engine's buffers into it, plans each
//! step shape once ([`super::StepPlan`]) and runs the plan.
//!
//! # Conventions (every one of them checked or stated here)
//!
//! **Weights** (Hugging Face `…linear_attn.*`, any of F32, F16, BF16 unless stated):
//! - `conv1d.weight` \[C, 1, K\] (or \[C, K\]), C = 2·H_k·D + H_v·D channels in the order q
//!   (H_k heads), k (H_k heads), v (H_v heads); tap 0 multiplies the oldest column, as
//!   PyTorch's causal `conv1d` with padding K − 1 does. Converted to F32 (exact).
//! - Qwen3.5: `in_proj_b.weight` and `in_proj_a.weight`, each \[H_v, E\] ([`BetaAlpha::Split`]);
//!   Qwen3-Next: `in_proj_ba.weight` \[2·H_v, E\], grouped by key head — rows k·2r … k·2r + r − 1
//!   are b of value heads k·r …, the next r rows their a, r = H_v / H_k ([`BetaAlpha::Fused`],
//!   as Hugging Face's `fix_query_key_value_ordering` splits it). Both of one type; kept in it.
//! - `dt_bias` \[H_v\]: converted to F32 (exact).
//! - The decay: `A_log` \[H_v\] ([`Decay::ALog`]); rgdn computes `ssm_a = −exp(A_log)` — each
//!   value widened to f64 (exact), `f64::exp`, negated, rounded once to the nearest f32. That
//!   is the correctly rounded f32 of −exp(A_log) unless the exact value lies within f64's exp
//!   error (< 1 ulp of f64, 2⁻²⁹ of an f32 ulp) of a rounding boundary between two f32. It
//!   matches llama.cpp's converter (`-torch.exp(A_log)` in F32) and Hugging Face's runtime
//!   (`-A_log.float().exp()`) to within their own exp's error, not necessarily bit for bit: an
//!   engine that needs a GGUF's exact bits passes its `ssm_a` instead ([`Decay::SsmA`], F32).
//!
//! **Key heads** ([`KeyHeads`]): value head h reads key head h mod H_k (ggml's broadcast;
//! GGUF files are converted to it — llama.cpp reorders the value heads from grouped to tiled
//! order) or ⌊h / r⌋ (Hugging Face's `repeat_interleave`, the checkpoints' own order). The two
//! coincide when H_v = H_k. [`KeyHeads::Interleaved`] with H_v > H_k is refused
//! ([`Error::Unsupported`]) until the layer permutes the heads host-side (the kernels keep
//! ggml's mapping); convert such weights as llama.cpp does and pass [`KeyHeads::Modulo`].
//!
//! **Caches** (the engine's, F32, `(1 + R)·M` rows; row `g·M + c` holds cell c's state g tokens
//! back — g = 0 the live state — as llama.cpp's rollback groups):
//! - conv cache rows of (K − 1)·C floats, channel-major: channel c's K − 1 columns (oldest
//!   first) at c·(K − 1) (ggml's and vLLM's layout; Hugging Face's cache keeps K columns);
//! - ssm cache rows of H_v·D·D floats, `[H_v][D_v][D_k]`: element (k, v) of head h at
//!   (h·D + v)·D + k — the transpose of Hugging Face's `recurrent_states` `[H_v][D_k][D_v]`.
//!
//! **Activations** (the engine's, F32, contiguous, sequence-major): `qkv` = the in_proj_qkv
//! output \[n_s\]\[n_t\]\[C\] in the conv's channel order (for Qwen3-Next, after
//! `fix_query_key_value_ordering`: q | k | v); `hidden` = the layer input in_proj_b/a read
//! (the attention-norm output) \[n_s\]\[n_t\]\[E\]; `out` = the core attention output before the
//! gated norm, \[n_s\]\[n_t\]\[H_v\]\[D\] — Hugging Face's `core_attn_out`.
//!
//! **Numerics**: ggml's CUDA kernels, bit for bit (its `-use_fast_math` float-op order); the q/k
//! L2 norm is ggml's, `x·rsqrt(max(Σx², eps²))` with eps = [`GdnConfig::eps`] (llama.cpp
//! passes `rms_norm_eps`; Hugging Face's `l2norm` adds 1e-6 to Σx² instead), q is scaled by
//! 1/√D inside the kernel. Fused and unfused steps are bit-identical.
//!
//! **A step** ([`StepRows`]): n_s sequences of n_t tokens; sequence s reads its state from
//! row `sources[s]` (`s_copy`: depth·M + cell, any row of the caches) and writes cell
//! `kv_head + s`: its conv rows and its first min(n_t, 1 + R) ssm slots `g·M + kv_head + s`.
//! The source rows change every step at no planning cost; the shape (n_t, n_s, M, R, kv_head,
//! the zeroed cell) and the buffers' addresses select a plan, made once. Where a fused op's
//! index rule is stricter than the unfused chain's (a sequence reading a row another sequence
//! writes this step), that step runs the unfused plan instead: refused before any launch, then
//! run unfused — the same bytes either way.

use super::{CallerMemory, StepPlan, layer_step_with};
use crate::error::{Error, Result};
use crate::fusion::{Options, Report};
use crate::gpu::Gpu;
use crate::layer::{GdnShape, LAYER_TENSORS, LayerInit, LayerTensors, Step, TensorKind};
use crate::ops::Precision;
use crate::tensor::{BufferId, DType, Layout, Tensor};
use cudarc::driver::{CudaSlice, CudaView, CudaViewMut};
use half::{bf16, f16};

const OP: &str = "GdnLayer";

/// Which key head a value head reads when H_v = r·H_k (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyHeads {
    /// Value head h reads key head h mod H_k (ggml; GGUF-converted weights).
    Modulo,
    /// Value head h reads key head ⌊h / r⌋ (Hugging Face's `repeat_interleave`).
    Interleaved,
}

/// The layer's sizes, as a Hugging Face `config.json` names them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GdnConfig {
    /// `hidden_size` (E).
    pub hidden_size: usize,
    /// `linear_num_key_heads` (H_k).
    pub num_key_heads: usize,
    /// `linear_num_value_heads` (H_v, a multiple of H_k).
    pub num_value_heads: usize,
    /// `linear_key_head_dim` (D; the kernels take 128).
    pub key_head_dim: usize,
    /// `linear_value_head_dim` (must equal the key head dim).
    pub value_head_dim: usize,
    /// `linear_conv_kernel_dim` (K: 3, 4 or 5 for the fused kernels; 9, 15 unfused too).
    pub conv_kernel: usize,
    /// The q/k L2-norm epsilon (ggml's form, see the module docs): llama.cpp uses
    /// `rms_norm_eps`, 1e-6 for Qwen3.5.
    pub eps: f32,
    /// How value heads map to key heads.
    pub key_heads: KeyHeads,
}

impl GdnConfig {
    /// Qwen3.5-9B's linear-attention layers (E 4096, H_k 16, H_v 32, D 128, K 4), with the
    /// key-head mapping of the weights at hand.
    pub fn qwen3_5_9b(key_heads: KeyHeads) -> Self {
        GdnConfig {
            hidden_size: 4096,
            num_key_heads: 16,
            num_value_heads: 32,
            key_head_dim: 128,
            value_head_dim: 128,
            conv_kernel: 4,
            eps: 1e-6,
            key_heads,
        }
    }

    /// The ggml-view shape, or a typed error naming the config field that does not fit.
    pub fn shape(&self) -> Result<GdnShape> {
        let bad = |what: String| Err(Error::Unsupported { op: OP, what });
        if self.key_head_dim != self.value_head_dim {
            return bad(format!("linear_key_head_dim = {} ≠ linear_value_head_dim = {}", self.key_head_dim, self.value_head_dim));
        }
        if self.num_key_heads == 0 || !self.num_value_heads.is_multiple_of(self.num_key_heads) {
            return bad(format!(
                "linear_num_value_heads = {} is not a multiple of linear_num_key_heads = {}",
                self.num_value_heads, self.num_key_heads
            ));
        }
        if self.key_heads == KeyHeads::Interleaved && self.num_value_heads != self.num_key_heads {
            // TODO(key heads): the kernels keep ggml's h mod H_k (no mapping parameter, by the
            // lead's decision: the Hugging Face mapping stays host-side). Taking Interleaved here
            // means permuting host-side: the weights' value heads grouped → tiled at load (as
            // llama.cpp's converter does: conv1d's v channels, b, a, dt_bias, A_log), the qkv
            // activations' v channels likewise before the step and the output's heads back
            // after it (two strided CPYs), and stating the caches' head order as tiled.
            return bad(format!(
                "KeyHeads::Interleaved (Hugging Face's repeat_interleave) with H_v = {} > H_k = {}: the GATED_DELTA_NET \
                 kernels read key head h mod H_k; pass GGUF-ordered weights with KeyHeads::Modulo",
                self.num_value_heads, self.num_key_heads
            ));
        }
        let shape = GdnShape {
            n_embd: self.hidden_size,
            n_k_heads: self.num_key_heads,
            n_v_heads: self.num_value_heads,
            head_dim: self.key_head_dim,
            d_conv: self.conv_kernel,
            eps: self.eps,
        };
        shape.validate()?;
        Ok(shape)
    }
}

/// A tensor of the checkpoint, in one of the types rgdn takes.
#[derive(Clone, Copy, Debug)]
pub enum Floats<'w> {
    /// IEEE binary32.
    F32(&'w [f32]),
    /// IEEE binary16.
    F16(&'w [f16]),
    /// bfloat16.
    BF16(&'w [bf16]),
}

impl Floats<'_> {
    fn len(&self) -> usize {
        match self {
            Floats::F32(x) => x.len(),
            Floats::F16(x) => x.len(),
            Floats::BF16(x) => x.len(),
        }
    }

    fn dtype(&self) -> DType {
        match self {
            Floats::F32(_) => DType::F32,
            Floats::F16(_) => DType::F16,
            Floats::BF16(_) => DType::BF16,
        }
    }

    /// Element `i` widened to f32 (exact for every type).
    fn get(&self, i: usize) -> f32 {
        match self {
            Floats::F32(x) => x[i],
            Floats::F16(x) => x[i].to_f32(),
            Floats::BF16(x) => x[i].to_f32(),
        }
    }

    /// Element `i`'s bytes, little-endian, in its own type.
    fn bytes(&self, i: usize) -> Vec<u8> {
        match self {
            Floats::F32(x) => x[i].to_le_bytes().to_vec(),
            Floats::F16(x) => x[i].to_le_bytes().to_vec(),
            Floats::BF16(x) => x[i].to_le_bytes().to_vec(),
        }
    }
}

/// A checkpoint tensor and its shape as stored (PyTorch order, outermost first).
#[derive(Clone, Copy, Debug)]
pub struct HfTensor<'w> {
    /// The elements, row-major.
    pub data: Floats<'w>,
    /// The shape, outermost first.
    pub shape: &'w [usize],
}

/// The b and a projections (β = sigmoid(b), the gate from a).
#[derive(Clone, Copy, Debug)]
pub enum BetaAlpha<'w> {
    /// Qwen3.5: `in_proj_b.weight` and `in_proj_a.weight`, each \[H_v, E\].
    Split {
        /// `linear_attn.in_proj_b.weight`.
        in_proj_b: HfTensor<'w>,
        /// `linear_attn.in_proj_a.weight`.
        in_proj_a: HfTensor<'w>,
    },
    /// Qwen3-Next: `in_proj_ba.weight` \[2·H_v, E\], grouped by key head (module docs).
    Fused {
        /// `linear_attn.in_proj_ba.weight`.
        in_proj_ba: HfTensor<'w>,
    },
}

/// The per-head decay.
#[derive(Clone, Copy, Debug)]
pub enum Decay<'w> {
    /// `A_log` \[H_v\]: rgdn computes −exp(A_log) (rounding in the module docs).
    ALog(HfTensor<'w>),
    /// A GGUF's `ssm_a` \[H_v\] = −exp(A_log) already, F32, used bit for bit.
    SsmA(&'w [f32]),
}

/// One layer's GDN weights as the checkpoint holds them.
#[derive(Clone, Copy, Debug)]
pub struct GdnWeights<'w> {
    /// `linear_attn.conv1d.weight` \[C, 1, K\] or \[C, K\].
    pub conv1d_weight: HfTensor<'w>,
    /// `linear_attn.in_proj_b` / `in_proj_a`, or `in_proj_ba`.
    pub beta_alpha: BetaAlpha<'w>,
    /// `linear_attn.dt_bias` \[H_v\].
    pub dt_bias: HfTensor<'w>,
    /// `linear_attn.A_log` \[H_v\], or `ssm_a`.
    pub decay: Decay<'w>,
}

/// The weights checked and laid out for the kernels (host side): what [`GdnLayer::new`]
/// uploads, one buffer at [`WeightLayout`]'s offsets.
#[derive(Clone, Debug, PartialEq)]
pub struct HostWeights {
    /// The b/a projection's type.
    pub dtype: DType,
    /// ggml `ssm_conv1d`: F32 ne \[K, C\] (= \[C\]\[K\] row-major, the checkpoint's bytes).
    pub conv_weight: Vec<f32>,
    /// ggml `ssm_alpha` (from a): ne \[E, H_v\], row h = value head h, in `dtype`'s bytes.
    pub alpha_weight: Vec<u8>,
    /// ggml `ssm_beta` (from b), as `alpha_weight`.
    pub beta_weight: Vec<u8>,
    /// F32 \[H_v\].
    pub dt_bias: Vec<f32>,
    /// F32 \[H_v\] = −exp(A_log).
    pub ssm_a: Vec<f32>,
}

fn shape_error(arg: &'static str, expected: String, got: &[usize]) -> Error {
    let mut ne = [0usize; 4];
    for (d, &n) in got.iter().rev().take(4).enumerate() {
        ne[d] = n;
    }
    Error::Shape { op: OP, arg, expected: format!("{expected} (PyTorch order; got {got:?})"), got: ne }
}

/// Checks `t` is `want` (PyTorch order; a \[C, 1, K\] conv weight may come as \[C, K\]) with as
/// many elements.
fn check_tensor(arg: &'static str, t: &HfTensor, want: &[usize], alt: Option<&[usize]>) -> Result<()> {
    let fits = t.shape == want || alt.is_some_and(|a| t.shape == a);
    if !fits {
        return Err(shape_error(arg, format!("{want:?}"), t.shape));
    }
    let n: usize = want.iter().product();
    if t.data.len() != n {
        return Err(Error::Invalid { op: OP, what: format!("`{arg}`: {} elements for shape {want:?} ({n})", t.data.len()) });
    }
    Ok(())
}

/// \[validation\] The per-head vectors (dt_bias, A_log, ssm_a) must be finite: a NaN or an infinity
/// there reaches every token's gate of its head and stays in the head's recurrent state from that
/// step on (a checkpoint's corruption, reported at load with the head that holds it, not as NaN
/// outputs many steps later). The weight matrices are not scanned: their values are data.
fn finite_per_head(arg: &'static str, values: &[f32]) -> Result<()> {
    match values.iter().position(|x| !x.is_finite()) {
        Some(h) => Err(Error::Invalid { op: OP, what: format!("`{arg}`[{h}] = {} (must be finite)", values[h]) }),
        None => Ok(()),
    }
}

/// −exp(x), rounded once from f64 to f32 (the module docs' statement).
pub fn ssm_a_of_a_log(a_log: f32) -> f32 {
    (-(a_log as f64).exp()) as f32
}

impl HostWeights {
    /// Checks every tensor against `config` (typed errors naming the tensor) and lays them out.
    pub fn from_hf(config: &GdnConfig, w: &GdnWeights) -> Result<Self> {
        let shape = config.shape()?;
        let (c, k, e, hv, hk) = (shape.try_channels()?, shape.d_conv, shape.n_embd, shape.n_v_heads, shape.n_k_heads);
        check_tensor("linear_attn.conv1d.weight", &w.conv1d_weight, &[c, 1, k], Some(&[c, k]))?;
        let conv_weight = (0..c * k).map(|i| w.conv1d_weight.data.get(i)).collect();
        let rows = |t: &HfTensor, pick: &dyn Fn(usize) -> usize| -> Vec<u8> {
            let mut out = Vec::with_capacity(hv * e * t.data.dtype().size());
            for h in 0..hv {
                for j in 0..e {
                    out.extend(t.data.bytes(pick(h) * e + j));
                }
            }
            out
        };
        let (dtype, beta_weight, alpha_weight) = match &w.beta_alpha {
            BetaAlpha::Split { in_proj_b, in_proj_a } => {
                check_tensor("linear_attn.in_proj_b.weight", in_proj_b, &[hv, e], None)?;
                check_tensor("linear_attn.in_proj_a.weight", in_proj_a, &[hv, e], None)?;
                if in_proj_b.data.dtype() != in_proj_a.data.dtype() {
                    return Err(Error::DType {
                        op: OP,
                        arg: "linear_attn.in_proj_a.weight",
                        expected: format!("{:?} (in_proj_b's type: the pair runs as one kernel)", in_proj_b.data.dtype()),
                        got: in_proj_a.data.dtype(),
                    });
                }
                (in_proj_b.data.dtype(), rows(in_proj_b, &|h| h), rows(in_proj_a, &|h| h))
            }
            BetaAlpha::Fused { in_proj_ba } => {
                check_tensor("linear_attn.in_proj_ba.weight", in_proj_ba, &[2 * hv, e], None)?;
                // Value head h = key head g's j-th (h = g·r + j): b at row g·2r + j, a at g·2r + r + j.
                let r = hv / hk;
                let b = rows(in_proj_ba, &|h| (h / r) * 2 * r + h % r);
                let a = rows(in_proj_ba, &|h| (h / r) * 2 * r + r + h % r);
                (in_proj_ba.data.dtype(), b, a)
            }
        };
        check_tensor("linear_attn.dt_bias", &w.dt_bias, &[hv], None)?;
        let dt_bias: Vec<f32> = (0..hv).map(|h| w.dt_bias.data.get(h)).collect();
        finite_per_head("linear_attn.dt_bias", &dt_bias)?;
        let ssm_a: Vec<f32> = match &w.decay {
            Decay::ALog(a_log) => {
                check_tensor("linear_attn.A_log", a_log, &[hv], None)?;
                let a_log: Vec<f32> = (0..hv).map(|h| a_log.data.get(h)).collect();
                finite_per_head("linear_attn.A_log", &a_log)?;
                a_log.into_iter().map(ssm_a_of_a_log).collect()
            }
            Decay::SsmA(values) => {
                if values.len() != hv {
                    return Err(shape_error("ssm_a", format!("[{hv}]"), &[values.len()]));
                }
                values.to_vec()
            }
        };
        // −exp(A_log) overflows f32 from A_log ≈ 88.7 on: −inf, as a non-finite ssm_a given as such.
        finite_per_head("ssm_a", &ssm_a)?;
        Ok(HostWeights { dtype, conv_weight, alpha_weight, beta_weight, dt_bias, ssm_a })
    }

    /// The weights buffer's bytes at `layout`'s offsets (zero between). A layout that does not
    /// hold these weights (not [`WeightLayout::of`] their shape and type: the fields are public)
    /// is a typed error naming the weight that does not fit.
    pub fn bytes(&self, layout: &WeightLayout) -> Result<Vec<u8>> {
        let mut out = vec![0u8; layout.bytes];
        let f32s = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        for (arg, offset, bytes) in [
            ("conv_weight", layout.conv_weight, f32s(&self.conv_weight)),
            ("alpha_weight", layout.alpha_weight, self.alpha_weight.clone()),
            ("beta_weight", layout.beta_weight, self.beta_weight.clone()),
            ("dt_bias", layout.dt_bias, f32s(&self.dt_bias)),
            ("ssm_a", layout.ssm_a, f32s(&self.ssm_a)),
        ] {
            let place = offset.checked_add(bytes.len()).and_then(|end| out.get_mut(offset..end)).ok_or_else(|| Error::Invalid {
                op: OP,
                what: format!("{arg}: {} bytes at offset {offset} do not fit the layout's {} bytes", bytes.len(), layout.bytes),
            })?;
            place.copy_from_slice(&bytes);
        }
        Ok(out)
    }
}

/// Where every buffer gets aligned to (device allocations start at 256 bytes; every kernel's
/// alignment need is below).
pub(super) const ALIGN: usize = 256;

fn align(n: usize) -> Result<usize> {
    n.checked_next_multiple_of(ALIGN).ok_or_else(|| Error::Overflow { op: OP, arg: "weights", what: format!("{n} bytes aligned") })
}

/// Byte offsets of the five weight tensors in the layer's one weight buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WeightLayout {
    /// ggml `ssm_conv1d`.
    pub conv_weight: usize,
    /// ggml `ssm_alpha` (from a).
    pub alpha_weight: usize,
    /// ggml `ssm_beta` (from b).
    pub beta_weight: usize,
    /// dt_bias.
    pub dt_bias: usize,
    /// ssm_a = −exp(A_log).
    pub ssm_a: usize,
    /// The buffer's size.
    pub bytes: usize,
}

impl WeightLayout {
    /// For `shape`'s weights with b/a projections of type `dtype`.
    pub fn of(shape: &GdnShape, dtype: DType) -> Result<Self> {
        let (c, k, e, hv) = (shape.try_channels()?, shape.d_conv, shape.n_embd, shape.n_v_heads);
        // [validation] checked: `shape` need not be validated (a hostile one is an Overflow).
        let p = |arg: &'static str, f: &[usize]| crate::tensor::try_product(OP, arg, "bytes", f);
        let mat_vec = p("alpha_weight", &[e, hv, dtype.size()])?;
        let sizes = [p("conv_weight", &[c, k, 4])?, mat_vec, mat_vec, p("dt_bias", &[hv, 4])?, p("ssm_a", &[hv, 4])?];
        let mut offsets = [0usize; 5];
        let mut at = 0usize;
        for (o, size) in offsets.iter_mut().zip(sizes) {
            *o = at;
            at = align(at.checked_add(size).ok_or_else(|| Error::Overflow { op: OP, arg: "weights", what: "buffer bytes".into() })?)?;
        }
        let [conv_weight, alpha_weight, beta_weight, dt_bias, ssm_a] = offsets;
        Ok(WeightLayout { conv_weight, alpha_weight, beta_weight, dt_bias, ssm_a, bytes: at })
    }
}

/// The cache rows of one step (module docs, "A step").
#[derive(Clone, Copy, Debug)]
pub struct StepRows<'r> {
    /// Tokens per sequence, n_t (1 ..= 16).
    pub n_tokens: usize,
    /// Cells per rollback group, M.
    pub cells: usize,
    /// Rollback snapshots kept, R (0 ..= 16): the caches hold (1 + R)·M rows.
    pub rollback: usize,
    /// The cell sequence 0 writes; sequence s writes `kv_head + s`.
    pub kv_head: usize,
    /// Per sequence, the cache row its state is read from (n_s = `sources.len()`).
    pub sources: &'r [u32],
    /// A cell whose state is zeroed in place before the step reads (a new sequence).
    pub zero_cell: Option<usize>,
}

impl StepRows<'_> {
    /// The ggml-view step (its source rows are placeholders: the real ones are index values,
    /// checked each step), validated.
    fn step(&self) -> Result<Step> {
        let n_s = self.sources.len();
        if n_s == 0 {
            return Err(Error::Invalid { op: OP, what: "no sequence: `sources` is empty".into() });
        }
        let others = vec![(self.kv_head, 0); n_s - 1];
        let step = Step {
            n_tokens: self.n_tokens,
            n_rollback: self.rollback,
            cells: self.cells,
            kv_head: self.kv_head,
            src_cell: self.kv_head,
            rollback_depth: 0,
            zero_cell: self.zero_cell,
            more_seqs: Default::default(),
        }
        .with_sequences(&others)?;
        step.validate()?;
        Ok(step)
    }

    /// The source rows as the index values (each a row of the caches: checked again by the
    /// step's index rules on the device side's copy).
    fn source_values(&self, rows: usize) -> Result<Vec<i32>> {
        self.sources
            .iter()
            .enumerate()
            .map(|(position, &r)| match i32::try_from(r) {
                Ok(v) if (r as usize) < rows => Ok(v),
                _ => Err(Error::IndexOutOfRange { op: OP, arg: "sources", position, index: r as i64, rows }),
            })
            .collect()
    }
}

/// Buffer ids of a bound step, in binding order.
pub mod ids {
    use crate::tensor::BufferId;
    /// The engine's conv cache.
    pub const CONV_CACHE: BufferId = BufferId(0);
    /// The engine's ssm cache.
    pub const SSM_CACHE: BufferId = BufferId(1);
    /// The engine's qkv activations.
    pub const QKV: BufferId = BufferId(2);
    /// The engine's layer input (hidden states after the attention norm).
    pub const HIDDEN: BufferId = BufferId(3);
    /// The output.
    pub const OUT: BufferId = BufferId(4);
    /// The layer's weights (read-only).
    pub const WEIGHTS: BufferId = BufferId(5);
    /// The layer's scratch.
    pub const SCRATCH: BufferId = BufferId(6);
    /// The source rows (an index buffer of the layer's).
    pub const INDEX: BufferId = BufferId(7);
}

/// The engine-side buffers of a step: their required lengths in f32 elements, by name.
pub fn engine_lengths(shape: &GdnShape, rows: &StepRows) -> Result<[(&'static str, usize); 5]> {
    let step = rows.step()?;
    let cache_rows = step.try_cache_rows()?;
    let cols = step.columns();
    let p = |arg: &'static str, f: &[usize]| crate::tensor::try_product(OP, arg, "f32 elements", f);
    Ok([
        ("conv_cache", p("conv_cache", &[shape.try_conv_row()?, cache_rows])?),
        ("ssm_cache", p("ssm_cache", &[shape.try_ssm_row()?, cache_rows])?),
        ("qkv", p("qkv", &[shape.try_channels()?, cols])?),
        ("hidden", p("hidden", &[shape.n_embd, cols])?),
        ("out", p("out", &[shape.head_dim, shape.n_v_heads, cols])?),
    ])
}

/// The step's tensors over the buffers [`ids`] names: the engine's five (contiguous, from
/// offset 0), the weights at `weights`' offsets, the intermediates packed in the scratch buffer
/// (each aligned to 256 bytes) and the index tensor. Returns them and the scratch bytes they need.
/// The shape, the step and the type are validated ([`LayerTensors::specs`]).
pub fn layer_tensors(shape: &GdnShape, step: &Step, dtype: DType, weights: &WeightLayout) -> Result<(LayerTensors, usize)> {
    // [validation] `specs`, not `table`: the shape, the step and the type are validated (a step
    // of 0 tokens, cells past M or an unsupported shape are typed errors, not views).
    let table = LayerTensors::specs(shape, step, dtype)?;
    let placeholder = Tensor::new(BufferId(usize::MAX), Layout::contiguous(DType::F32, [0; 4]));
    let mut tensors = [placeholder; LAYER_TENSORS];
    let mut scratch = 0usize;
    for (i, ((name, dt, ne), kind)) in table.into_iter().zip(LayerTensors::KINDS).enumerate() {
        let (buffer, offset) = match (kind, name) {
            (TensorKind::Cache, "conv_cache") => (ids::CONV_CACHE, 0),
            (TensorKind::Cache, _) => (ids::SSM_CACHE, 0),
            (TensorKind::Index, _) => (ids::INDEX, 0),
            (TensorKind::StepInput, "qkv_mixed") => (ids::QKV, 0),
            (TensorKind::StepInput, _) => (ids::HIDDEN, 0),
            (TensorKind::Output, _) => (ids::OUT, 0),
            (TensorKind::Weight, name) => (
                ids::WEIGHTS,
                match name {
                    "conv_weight" => weights.conv_weight,
                    "alpha_weight" => weights.alpha_weight,
                    "beta_weight" => weights.beta_weight,
                    "dt_bias" => weights.dt_bias,
                    _ => weights.ssm_a,
                },
            ),
            (TensorKind::Intermediate | TensorKind::Product, name) => {
                let at = scratch;
                let bytes = Layout::contiguous_bytes(dt, ne).ok_or_else(|| Error::Overflow { op: OP, arg: name, what: "bytes".into() })?;
                scratch = align(at.checked_add(bytes).ok_or_else(|| Error::Overflow { op: OP, arg: name, what: "scratch".into() })?)?;
                (ids::SCRATCH, at)
            }
        };
        let contiguous = Layout::contiguous(dt, ne);
        tensors[i] = Tensor::new(buffer, contiguous.view(ne, contiguous.nb, offset));
    }
    Ok((LayerTensors::from_array(tensors), scratch.max(ALIGN)))
}

/// What selects a plan besides the buffers: the step's shape and the `Gpu` it runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PlanKey {
    gpu: (usize, u64),
    n_tokens: usize,
    n_seqs: usize,
    cells: usize,
    rollback: usize,
    kv_head: usize,
    zero_cell: Option<usize>,
    fusions: Options,
}

/// Plans kept per layer (the shapes an engine alternates between); the oldest goes first.
pub(super) const PLANS_KEPT: usize = 16;

/// The plans a layer keeps: per key `K` (a step's shape and whatever else its plan depends on)
/// the layout `L` it was planned over (its views, its scratch size) and its plan, at most
/// [`PLANS_KEPT`], the oldest going first; and the one that ran last. [`GdnLayer`]'s and the
/// replay layer's steps share it.
pub(super) struct Plans<K, L> {
    kept: Vec<Kept<K, L>>,
    last: Option<usize>,
}

/// A planned step: its key, the layout it was planned over, its plan.
struct Kept<K, L> {
    key: K,
    layout: L,
    plan: StepPlan,
}

/// What makes a key's plan when none fits: its layout and its plan, on the step's memory.
pub(super) type MakePlan<'m, K, L> = dyn Fn(&K) -> Result<(L, StepPlan)> + 'm;

impl<K: Copy + PartialEq, L: Clone> Plans<K, L> {
    pub(super) fn new() -> Self {
        Plans { kept: Vec::new(), last: None }
    }

    /// How many plans are kept.
    pub(super) fn len(&self) -> usize {
        self.kept.len()
    }

    /// The plan the last step ran.
    pub(super) fn last_plan(&self) -> Option<&StepPlan> {
        self.last.and_then(|i| self.kept.get(i)).map(|p| &p.plan)
    }

    /// The layout `key` was planned over, if it was: a shape planned before is not laid out again.
    pub(super) fn layout(&self, key: &K) -> Option<L> {
        self.kept.iter().find(|p| p.key == *key).map(|p| p.layout.clone())
    }

    /// The kept plan of `key` if it fits `mem`'s buffers; else one made now by `make` (a new
    /// shape, or the same shape on other buffers: planned once), replacing the key's old one or
    /// the oldest. Its index.
    pub(super) fn plan(&mut self, key: K, mem: &CallerMemory, make: &MakePlan<'_, K, L>) -> Result<usize> {
        let known = self.kept.iter().position(|p| p.key == key);
        if let Some(i) = known.filter(|&i| self.kept[i].plan.fits(mem)) {
            return Ok(i);
        }
        let (layout, plan) = make(&key)?;
        let kept = Kept { key, layout, plan };
        Ok(match known {
            Some(i) => {
                self.kept[i] = kept;
                i
            }
            None => {
                if self.kept.len() >= PLANS_KEPT {
                    self.kept.remove(0);
                }
                self.kept.push(kept);
                self.kept.len() - 1
            }
        })
    }

    /// Runs plan `at` on `mem`. A fused op's index rules can be stricter than the unfused
    /// chain's (a sequence reading a row another sequence writes, which GET_ROWS then
    /// GATED_DELTA_NET take): refused before any launch, the step then runs the plan of
    /// `unfused` (the key with the fusions off; None when they are off already).
    pub(super) fn run(&mut self, at: usize, mem: &CallerMemory, unfused: Option<K>, make: &MakePlan<'_, K, L>) -> Result<()> {
        self.last = Some(at);
        match (mem.run(&self.kept[at].plan), unfused) {
            (Err(Error::Aliasing { .. }), Some(key)) => {
                let at = self.plan(key, mem, make)?;
                self.last = Some(at);
                mem.run(&self.kept[at].plan)
            }
            (ran, _) => ran,
        }
    }
}

/// One GDN layer on the GPU: its weights and scratch in device buffers of its own, the
/// steps it planned. See the module docs for every convention.
pub struct GdnLayer {
    pub(super) config: GdnConfig,
    pub(super) shape: GdnShape,
    pub(super) dtype: DType,
    pub(super) weight_layout: WeightLayout,
    /// The `Gpu`'s context the buffers live in.
    pub(super) ctx: usize,
    pub(super) weights: CudaSlice<u8>,
    pub(super) scratch: CudaSlice<u8>,
    pub(super) output: CudaSlice<f32>,
    pub(super) index: CudaSlice<i32>,
    pub(super) fusions: Options,
    plans: Plans<PlanKey, (LayerTensors, usize)>,
}

impl GdnLayer {
    /// Checks the weights against `config` (typed errors naming the tensor), lays them out and
    /// uploads them on `gpu`'s stream. `fusions`: [`Options::ON`] (the default fused step —
    /// one GDN_LAYER_STEP launch where it applies), or [`Options::OFF`] for ggml's unfused
    /// chain; both give the same bytes.
    pub fn new(gpu: &Gpu, config: GdnConfig, weights: &GdnWeights, fusions: Options) -> Result<Self> {
        let shape = config.shape()?;
        let host = HostWeights::from_hf(&config, weights)?;
        let weight_layout = WeightLayout::of(&shape, host.dtype)?;
        let stream = gpu.stream();
        Ok(GdnLayer {
            config,
            shape,
            dtype: host.dtype,
            weight_layout,
            ctx: gpu.context().cu_ctx() as usize,
            weights: stream.clone_htod(&host.bytes(&weight_layout)?)?,
            scratch: stream.alloc_zeros::<u8>(ALIGN)?,
            output: stream.alloc_zeros::<f32>(1)?,
            index: stream.alloc_zeros::<i32>(crate::layer::MAX_SEQS)?,
            fusions,
            plans: Plans::new(),
        })
    }

    /// The config the layer was built with.
    pub fn config(&self) -> &GdnConfig {
        &self.config
    }

    /// What the fusion pass decided for the last step's plan (which fusions fired, why the
    /// others did not); None before the first step.
    pub fn report(&self) -> Option<&Report> {
        self.last_plan().map(StepPlan::report)
    }

    /// The plan the last step ran (its ops and prepared launches).
    pub fn last_plan(&self) -> Option<&StepPlan> {
        self.plans.last_plan()
    }

    /// How many step shapes the layer holds plans for (at most 16; the oldest goes first).
    pub fn planned_shapes(&self) -> usize {
        self.plans.len()
    }

    /// One step into a buffer of the layer's own; returns its view, `[n_s][n_t][H_v][D]` F32.
    pub fn step<'s>(
        &'s mut self,
        gpu: &Gpu,
        conv_cache: CudaViewMut<'_, f32>,
        ssm_cache: CudaViewMut<'_, f32>,
        qkv: CudaView<'_, f32>,
        hidden: CudaView<'_, f32>,
        rows: &StepRows,
    ) -> Result<CudaView<'s, f32>> {
        let [.., (_, out_len)] = engine_lengths(&self.shape, rows)?;
        if self.output.len() < out_len {
            self.output = gpu.stream().alloc_zeros::<f32>(out_len)?;
        }
        self.run(gpu, Engine::Views { conv_cache, ssm_cache, qkv, hidden, out: None }, rows)?;
        Ok(self.output.slice(0..out_len))
    }

    /// One step writing the engine's `out` (`[n_s][n_t][H_v][D]` F32, exactly that long).
    #[allow(clippy::too_many_arguments)]
    pub fn step_into(
        &mut self,
        gpu: &Gpu,
        conv_cache: CudaViewMut<'_, f32>,
        ssm_cache: CudaViewMut<'_, f32>,
        qkv: CudaView<'_, f32>,
        hidden: CudaView<'_, f32>,
        out: CudaViewMut<'_, f32>,
        rows: &StepRows,
    ) -> Result<()> {
        self.run(gpu, Engine::Views { conv_cache, ssm_cache, qkv, hidden, out: Some(out) }, rows)
    }

    /// One step on buffers the engine names by address — a framework's tensors whose storage
    /// it reaches through raw device pointers (candle's `storage_and_layout`, as mistral.rs's
    /// own kernels do): each a contiguous F32 range, checked against the driver's allocation
    /// (it must lie inside one allocation of this device) and against the step's lengths.
    ///
    /// # Safety
    /// Every range stays allocated until the step has run on `gpu`'s stream, and while it may
    /// run nothing else writes any of them, nor reads `conv_cache`, `ssm_cache` or `out` (which
    /// it writes) — stream order on `gpu`'s stream, the engine's own, gives that.
    pub unsafe fn step_raw(&mut self, gpu: &Gpu, buffers: RawBuffers, rows: &StepRows) -> Result<()> {
        self.run(gpu, Engine::Raw(buffers), rows)
    }

    /// Checks the engine's buffers and rows, binds them with the layer's own, finds (or makes)
    /// the plan for this shape and these addresses, and runs one step of it. Without the
    /// engine's `out`, the layer's own output buffer, already long enough.
    fn run(&mut self, gpu: &Gpu, engine: Engine<'_>, rows: &StepRows) -> Result<()> {
        if gpu.context().cu_ctx() as usize != self.ctx {
            return Err(Error::Invalid { op: OP, what: "the Gpu runs on another CUDA context than the layer's weights".into() });
        }
        let step = rows.step()?;
        let lengths = engine_lengths(&self.shape, rows)?;
        engine.check_lengths(&lengths)?;
        let sources = rows.source_values(step.try_cache_rows()?)?;
        let key = PlanKey {
            gpu: (gpu.context().cu_ctx() as usize, gpu.grid_sync()),
            n_tokens: step.n_tokens,
            n_seqs: step.n_seqs(),
            cells: step.cells,
            rollback: step.n_rollback,
            kv_head: step.kv_head,
            zero_cell: step.zero_cell,
            fusions: self.fusions,
        };
        // The views and the scratch size of a shape planned before; else laid out now.
        let (tensors, scratch_bytes) = match self.plans.layout(&key) {
            Some(layout) => layout,
            None => layer_tensors(&self.shape, &step, self.dtype, &self.weight_layout)?,
        };
        if self.scratch.len() < scratch_bytes {
            self.scratch = gpu.stream().alloc_zeros::<u8>(scratch_bytes)?;
        }
        let GdnLayer { shape, dtype, weights, scratch, output, index, plans, .. } = self;
        let mut mem = CallerMemory::new(gpu);
        engine.bind(&mut mem, output, lengths[4].1)?;
        mem.bind(&*weights)?;
        mem.bind_mut(scratch)?;
        mem.bind_indices(index, &sources)?;
        let make = |key: &PlanKey| -> Result<((LayerTensors, usize), StepPlan)> {
            let init = LayerInit { mat_vec_weights: *dtype, precision: Precision::Default, specials: false };
            let compiled = layer_step_with(&tensors, shape, &step, &init, key.fusions, &mem)?;
            Ok(((tensors.clone(), scratch_bytes), mem.plan(compiled)?))
        };
        let at = plans.plan(key, &mem, &make)?;
        let unfused = (key.fusions != Options::OFF).then_some(PlanKey { fusions: Options::OFF, ..key });
        plans.run(at, &mem, unfused, &make)
    }
}

/// The engine's five buffers of a step.
pub(super) enum Engine<'v> {
    /// cudarc views (the layer's own output buffer when `out` is None).
    Views {
        conv_cache: CudaViewMut<'v, f32>,
        ssm_cache: CudaViewMut<'v, f32>,
        qkv: CudaView<'v, f32>,
        hidden: CudaView<'v, f32>,
        out: Option<CudaViewMut<'v, f32>>,
    },
    /// Raw ranges ([`GdnLayer::step_raw`]).
    Raw(RawBuffers),
}

impl<'v> Engine<'v> {
    /// Refuses a buffer whose length is not the step's (`lengths`, [`engine_lengths`]), naming it.
    pub(super) fn check_lengths(&self, lengths: &[(&'static str, usize); 5]) -> Result<()> {
        for ((name, want), got) in lengths.iter().zip(self.lengths(lengths[4].1)) {
            if got != *want {
                return Err(Error::Invalid { op: OP, what: format!("`{name}` holds {got} f32, the step needs exactly {want}") });
            }
        }
        Ok(())
    }

    /// Binds the five buffers under [`ids`] 0 … 4 (`out`: the first `out_len` f32 of the layer's
    /// `output` when the engine gave none).
    pub(super) fn bind(self, mem: &mut CallerMemory<'v>, output: &'v mut CudaSlice<f32>, out_len: usize) -> Result<()> {
        // A refused binding (an engine view at an unaligned address, say) names the buffer.
        let named = |name: &'static str| move |e: Error| Error::Invalid { op: OP, what: format!("`{name}`: {e}") };
        match self {
            Engine::Views { conv_cache, ssm_cache, qkv, hidden, out } => {
                mem.bind_view_mut(conv_cache).map_err(named("conv_cache"))?;
                mem.bind_view_mut(ssm_cache).map_err(named("ssm_cache"))?;
                mem.bind_view(qkv).map_err(named("qkv"))?;
                mem.bind_view(hidden).map_err(named("hidden"))?;
                match out {
                    Some(view) => mem.bind_view_mut(view).map_err(named("out"))?,
                    None => mem.bind_view_mut(output.slice_mut(0..out_len))?,
                };
            }
            Engine::Raw(raw) => {
                for ((name, writable), b) in
                    [("conv_cache", true), ("ssm_cache", true), ("qkv", false), ("hidden", false), ("out", true)].into_iter().zip(raw.all())
                {
                    // SAFETY: the raw step's caller promises the ranges' lifetime and
                    // exclusivity (`GdnLayer::step_raw`, `GdnReplayLayer::step_raw`); `bind_raw`
                    // checks each lies in one allocation of this device.
                    unsafe { mem.bind_raw(b.ptr, b.len.saturating_mul(4), writable) }.map_err(named(name))?;
                }
            }
        }
        Ok(())
    }

    /// The f32 lengths of conv_cache, ssm_cache, qkv, hidden and out (`own_out` for the
    /// layer's own).
    fn lengths(&self, own_out: usize) -> [usize; 5] {
        match self {
            Engine::Views { conv_cache, ssm_cache, qkv, hidden, out } => {
                [conv_cache.len(), ssm_cache.len(), qkv.len(), hidden.len(), out.as_ref().map_or(own_out, |v| v.len())]
            }
            Engine::Raw(raw) => raw.all().map(|b| b.len),
        }
    }
}

/// `len` f32 of device memory at `ptr` (a tensor's storage from its layout's start offset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceF32 {
    /// Device address of the first element.
    pub ptr: u64,
    /// Elements.
    pub len: usize,
}

/// The engine's buffers of one step by address ([`GdnLayer::step_raw`]), laid out as the
/// module docs say.
#[derive(Clone, Copy, Debug)]
pub struct RawBuffers {
    /// Written: the conv cache, every row.
    pub conv_cache: DeviceF32,
    /// Written: the ssm cache, every row.
    pub ssm_cache: DeviceF32,
    /// Read: \[n_s\]\[n_t\]\[C\].
    pub qkv: DeviceF32,
    /// Read: \[n_s\]\[n_t\]\[E\].
    pub hidden: DeviceF32,
    /// Written: \[n_s\]\[n_t\]\[H_v\]\[D\].
    pub out: DeviceF32,
}

impl RawBuffers {
    fn all(&self) -> [DeviceF32; 5] {
        [self.conv_cache, self.ssm_cache, self.qkv, self.hidden, self.out]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::HostMemory;
    use crate::reference::math::ExactMufu;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    /// H_k = 2, H_v = 4 (r = 2: the two key-head mappings differ), D 128, E 64, K 4: C = 1024.
    fn small(key_heads: KeyHeads) -> GdnConfig {
        GdnConfig {
            hidden_size: 64,
            num_key_heads: 2,
            num_value_heads: 4,
            key_head_dim: 128,
            value_head_dim: 128,
            conv_kernel: 4,
            eps: 1e-6,
            key_heads,
        }
    }

    fn random(rng: &mut StdRng, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| rng.random_range(-scale..scale)).collect()
    }

    /// Random checkpoint tensors for `cfg`: conv1d \[C, 1, K\], b, a \[H_v, E\], the fused ba
    /// \[2·H_v, E\] holding the same rows grouped by key head, dt_bias, A_log.
    struct Checkpoint {
        conv1d: Vec<f32>,
        b: Vec<f32>,
        a: Vec<f32>,
        ba: Vec<f32>,
        dt_bias: Vec<f32>,
        a_log: Vec<f32>,
    }

    fn checkpoint(cfg: &GdnConfig, seed: u64) -> Checkpoint {
        let mut rng = StdRng::seed_from_u64(seed);
        let s = cfg.shape().unwrap();
        let (c, e, hv, hk) = (s.channels(), s.n_embd, s.n_v_heads, s.n_k_heads);
        let (b, a) = (random(&mut rng, hv * e, 0.2), random(&mut rng, hv * e, 0.2));
        let r = hv / hk;
        let mut ba = Vec::with_capacity(2 * hv * e);
        for g in 0..hk {
            for j in 0..r {
                ba.extend_from_slice(&b[(g * r + j) * e..(g * r + j + 1) * e]);
            }
            for j in 0..r {
                ba.extend_from_slice(&a[(g * r + j) * e..(g * r + j + 1) * e]);
            }
        }
        Checkpoint {
            conv1d: random(&mut rng, c * s.d_conv, 0.5),
            b,
            a,
            ba,
            dt_bias: random(&mut rng, hv, 1.0),
            a_log: (0..hv).map(|_| rng.random_range(-2.0f32..1.5)).collect(),
        }
    }

    fn weights<'w>(ck: &'w Checkpoint, shapes: &'w [Vec<usize>; 5], fused: bool) -> GdnWeights<'w> {
        let t = |data: &'w [f32], shape: &'w Vec<usize>| HfTensor { data: Floats::F32(data), shape };
        GdnWeights {
            conv1d_weight: t(&ck.conv1d, &shapes[0]),
            beta_alpha: if fused {
                BetaAlpha::Fused { in_proj_ba: t(&ck.ba, &shapes[2]) }
            } else {
                BetaAlpha::Split { in_proj_b: t(&ck.b, &shapes[1]), in_proj_a: t(&ck.a, &shapes[1]) }
            },
            dt_bias: t(&ck.dt_bias, &shapes[3]),
            decay: Decay::ALog(t(&ck.a_log, &shapes[4])),
        }
    }

    fn shapes(cfg: &GdnConfig) -> [Vec<usize>; 5] {
        let s = cfg.shape().unwrap();
        let (c, e, hv) = (s.channels(), s.n_embd, s.n_v_heads);
        [vec![c, 1, s.d_conv], vec![hv, e], vec![2 * hv, e], vec![hv], vec![hv]]
    }

    #[test]
    fn every_weight_is_checked_and_refusals_name_the_tensor() {
        let cfg = small(KeyHeads::Modulo);
        let ck = checkpoint(&cfg, 1);
        let sh = shapes(&cfg);
        assert!(HostWeights::from_hf(&cfg, &weights(&ck, &sh, false)).is_ok());
        // [C, K] is the same bytes as [C, 1, K].
        let mut flat = sh.clone();
        flat[0] = vec![sh[0][0], sh[0][2]];
        assert!(HostWeights::from_hf(&cfg, &weights(&ck, &flat, false)).is_ok());
        let named = |bad: [Vec<usize>; 5], fused: bool| HostWeights::from_hf(&cfg, &weights(&ck, &bad, fused)).unwrap_err();
        let mut bad = sh.clone();
        bad[0] = vec![sh[0][0], 1, 3];
        assert!(matches!(named(bad, false), Error::Shape { arg: "linear_attn.conv1d.weight", .. }));
        let mut bad = sh.clone();
        bad[1] = vec![sh[1][1], sh[1][0]];
        assert!(matches!(named(bad, false), Error::Shape { arg: "linear_attn.in_proj_b.weight", .. }));
        let mut bad = sh.clone();
        bad[2] = vec![sh[1][0], sh[1][1]];
        assert!(matches!(named(bad, true), Error::Shape { arg: "linear_attn.in_proj_ba.weight", .. }));
        let mut bad = sh.clone();
        bad[3] = vec![3];
        assert!(matches!(named(bad, false), Error::Shape { arg: "linear_attn.dt_bias", .. }));
        let mut bad = sh.clone();
        bad[4] = vec![5];
        assert!(matches!(named(bad, false), Error::Shape { arg: "linear_attn.A_log", .. }));
        // A shape that fits, data that does not.
        let short = &ck.conv1d[1..];
        let w = GdnWeights { conv1d_weight: HfTensor { data: Floats::F32(short), shape: &sh[0] }, ..weights(&ck, &sh, false) };
        assert!(matches!(HostWeights::from_hf(&cfg, &w), Err(Error::Invalid { what, .. }) if what.contains("conv1d")));
        // b and a of two types.
        let halves: Vec<bf16> = ck.a.iter().map(|&x| bf16::from_f32(x)).collect();
        let w = GdnWeights {
            beta_alpha: BetaAlpha::Split {
                in_proj_b: HfTensor { data: Floats::F32(&ck.b), shape: &sh[1] },
                in_proj_a: HfTensor { data: Floats::BF16(&halves), shape: &sh[1] },
            },
            ..weights(&ck, &sh, false)
        };
        assert!(matches!(HostWeights::from_hf(&cfg, &w), Err(Error::DType { arg: "linear_attn.in_proj_a.weight", .. })));
        // ssm_a of the wrong length.
        let w = GdnWeights { decay: Decay::SsmA(&ck.a_log[..3]), ..weights(&ck, &sh, false) };
        assert!(matches!(HostWeights::from_hf(&cfg, &w), Err(Error::Shape { arg: "ssm_a", .. })));
        // A non-finite per-head value, named with its head: NaN, an infinity, or an A_log whose
        // −exp overflows f32 (e^88.73 > f32::MAX).
        let hv = cfg.num_value_heads;
        for (which, bad) in [(0, f32::NAN), (1, f32::INFINITY), (1, 88.73), (2, f32::NEG_INFINITY)] {
            let (mut a_log, mut dt_bias, mut ssm_a) = (ck.a_log.clone(), ck.dt_bias.clone(), vec![-1.0f32; hv]);
            let h = hv - 1;
            match which {
                0 => dt_bias[h] = bad,
                1 => a_log[h] = bad,
                _ => ssm_a[h] = bad,
            }
            let w = GdnWeights {
                dt_bias: HfTensor { data: Floats::F32(&dt_bias), shape: &sh[3] },
                decay: if which == 2 { Decay::SsmA(&ssm_a) } else { Decay::ALog(HfTensor { data: Floats::F32(&a_log), shape: &sh[4] }) },
                ..weights(&ck, &sh, false)
            };
            let arg = ["linear_attn.dt_bias", if bad == 88.73 { "ssm_a" } else { "linear_attn.A_log" }, "ssm_a"][which];
            let got = HostWeights::from_hf(&cfg, &w);
            assert!(matches!(&got, Err(Error::Invalid { what, .. }) if what.contains(&format!("`{arg}`[{h}]"))), "{which} {bad}: {got:?}");
        }
    }

    #[test]
    fn configs_that_do_not_fit_are_refused() {
        assert!(matches!(small(KeyHeads::Interleaved).shape(), Err(Error::Unsupported { what, .. }) if what.contains("Interleaved")));
        // With H_v = H_k both mappings are the same, and both are taken.
        let square = GdnConfig { num_value_heads: 2, ..small(KeyHeads::Interleaved) };
        assert!(square.shape().is_ok());
        assert!(GdnConfig { value_head_dim: 64, ..small(KeyHeads::Modulo) }.shape().is_err());
        assert!(GdnConfig { num_value_heads: 3, ..small(KeyHeads::Modulo) }.shape().is_err());
        assert!(GdnConfig { num_key_heads: 0, ..small(KeyHeads::Modulo) }.shape().is_err());
        assert!(GdnConfig { conv_kernel: 6, ..small(KeyHeads::Modulo) }.shape().is_err());
        assert!(GdnConfig { key_head_dim: 64, value_head_dim: 64, ..small(KeyHeads::Modulo) }.shape().is_err());
        assert!(GdnConfig::qwen3_5_9b(KeyHeads::Modulo).shape().is_ok());
    }

    #[test]
    fn the_fused_ba_is_split_as_hugging_face_splits_it() {
        let cfg = small(KeyHeads::Modulo);
        let ck = checkpoint(&cfg, 2);
        let sh = shapes(&cfg);
        let split = HostWeights::from_hf(&cfg, &weights(&ck, &sh, false)).unwrap();
        let fused = HostWeights::from_hf(&cfg, &weights(&ck, &sh, true)).unwrap();
        assert_eq!(split, fused);
        // Row h of beta is b's row h (not, say, a's).
        let e = cfg.hidden_size;
        assert_eq!(&split.beta_weight[..4 * e], ck.b[..e].iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>().as_slice());
    }

    #[test]
    fn ssm_a_is_minus_exp_of_a_log_rounded_once() {
        assert_eq!(ssm_a_of_a_log(0.0).to_bits(), (-1.0f32).to_bits());
        assert_eq!(ssm_a_of_a_log(1.0).to_bits(), (-std::f32::consts::E).to_bits());
        for x in [-3.5f32, -0.25, 0.7, 2.75] {
            let want = -(x as f64).exp();
            let got = ssm_a_of_a_log(x);
            // Nearest: no f32 neighbour is closer to the f64 value.
            let (up, down) = (f32::from_bits(got.to_bits() + 1), f32::from_bits(got.to_bits() - 1));
            let err = |y: f32| (y as f64 - want).abs();
            assert!(err(got) <= err(up) && err(got) <= err(down), "{x}: {got}");
        }
    }

    #[test]
    fn step_rows_are_checked() {
        let rows = |sources: &'static [u32], kv_head| StepRows { n_tokens: 2, cells: 2, rollback: 1, kv_head, sources, zero_cell: None };
        assert!(rows(&[3], 0).step().is_ok());
        assert!(rows(&[], 0).step().is_err());
        // Two sequences from cell 1 need a third cell.
        assert!(rows(&[0, 1], 1).step().is_err());
        let r = rows(&[4], 0);
        assert!(matches!(r.source_values(4), Err(Error::IndexOutOfRange { arg: "sources", index: 4, rows: 4, .. })));
        let big = StepRows { n_tokens: 17, ..rows(&[0], 0) };
        assert!(big.step().is_err());
    }

    /// The layer's wiring on the CPU reference against an f64 implementation of Hugging
    /// Face's Qwen3.5 GDN forward (causal conv + SiLU, L2-normalised q/k, q·D^-½, β = σ(b),
    /// g = −e^{A_log}·softplus(a + dt_bias), the gated delta rule), value head h reading key head
    /// h mod H_k: the attention output of every token, the snapshots of both caches. A wrong
    /// mapping of any tensor (b for a, the ba grouping, A's sign, a cache layout) is far off.
    #[test]
    fn the_layer_computes_hugging_faces_gdn_forward() {
        for (fused_ba, fusions) in [(false, Options::ON), (true, Options::OFF)] {
            let cfg = small(KeyHeads::Modulo);
            let ck = checkpoint(&cfg, 3);
            let sh = shapes(&cfg);
            let host = HostWeights::from_hf(&cfg, &weights(&ck, &sh, fused_ba)).unwrap();
            let s = cfg.shape().unwrap();
            let sources = [3u32];
            let rows = StepRows { n_tokens: 3, cells: 2, rollback: 2, kv_head: 0, sources: &sources, zero_cell: None };
            let step = rows.step().unwrap();
            let layout = WeightLayout::of(&s, host.dtype).unwrap();
            let (t, scratch) = layer_tensors(&s, &step, host.dtype, &layout).unwrap();
            let mut rng = StdRng::seed_from_u64(4);
            let mut mem = HostMemory::new();
            let lens = engine_lengths(&s, &rows).unwrap();
            let mut engine = Vec::new();
            for (i, (_, n)) in lens.iter().enumerate() {
                let id = mem.alloc(4 * n);
                assert_eq!(id.0, i);
                let values = random(&mut rng, *n, if i == 1 { 0.05 } else { 1.0 });
                for (w, v) in mem.bytes_mut(id).chunks_exact_mut(4).zip(&values) {
                    w.copy_from_slice(&v.to_le_bytes());
                }
                engine.push(values);
            }
            let id = mem.alloc(layout.bytes);
            mem.bytes_mut(id).copy_from_slice(&host.bytes(&layout).unwrap());
            assert_eq!((id, mem.alloc(scratch)), (ids::WEIGHTS, ids::SCRATCH));
            assert_eq!(mem.alloc_indices(&[sources[0] as i32]).buffer, ids::INDEX);
            let compiled = layer_step_with(&t, &s, &step, &LayerInit::default(), fusions, &mem).unwrap();
            for op in &compiled.ops {
                op.reference(&mut mem, &mut ExactMufu).unwrap();
            }
            let f32s = |id: BufferId| mem.bytes(id).chunks_exact(4).map(|w| f32::from_le_bytes(w.try_into().unwrap())).collect::<Vec<_>>();
            let want = hf_forward(&cfg, &ck, &engine, sources[0] as usize, rows.n_tokens);
            // Within 1e-4 of the tensor's largest magnitude: f32 rounding and the MUFU
            // approximations stay far below; a mis-wired tensor lands far above.
            let close = |what: &str, got: &[f32], want: &[f64]| {
                assert_eq!(got.len(), want.len(), "{what}");
                let scale = want.iter().fold(0f64, |m, w| m.max(w.abs()));
                for (i, (g, w)) in got.iter().zip(want).enumerate() {
                    assert!((*g as f64 - w).abs() <= 1e-4 * scale, "{what}[{i}]: {g} vs {w} (scale {scale}, {fusions:?})");
                }
            };
            close("out", &f32s(ids::OUT), &want.out);
            let (conv, ssm) = (f32s(ids::CONV_CACHE), f32s(ids::SSM_CACHE));
            let (conv_row, ssm_row, m) = (s.conv_row(), s.ssm_row(), rows.cells);
            for slot in 0..=rows.rollback {
                // Conv slot j: the state after max(0, n_t − j) tokens; ssm slot j < n_t: after n_t − j.
                let r = slot * m + rows.kv_head;
                close(
                    &format!("conv slot {slot}"),
                    &conv[r * conv_row..(r + 1) * conv_row],
                    &want.conv[rows.n_tokens.saturating_sub(slot)],
                );
                if slot < rows.n_tokens {
                    close(&format!("ssm slot {slot}"), &ssm[r * ssm_row..(r + 1) * ssm_row], &want.ssm[rows.n_tokens - slot]);
                }
            }
        }
    }

    /// What Hugging Face's forward computes (f64), in rgdn's cache layouts: `out` \[t\]\[h\]\[v\];
    /// `conv[n]`, `ssm[n]` the states after n tokens.
    struct Forward {
        out: Vec<f64>,
        conv: Vec<Vec<f64>>,
        ssm: Vec<Vec<f64>>,
    }

    fn hf_forward(cfg: &GdnConfig, ck: &Checkpoint, engine: &[Vec<f32>], source: usize, n_t: usize) -> Forward {
        let s = cfg.shape().unwrap();
        let (c, k, e, hk, hv, d) = (s.channels(), s.d_conv, s.n_embd, s.n_k_heads, s.n_v_heads, s.head_dim);
        let (conv_row, ssm_row) = (s.conv_row(), s.ssm_row());
        let (conv0, ssm0, qkv, hidden) = (
            &engine[0][source * conv_row..(source + 1) * conv_row],
            &engine[1][source * ssm_row..(source + 1) * ssm_row],
            &engine[2],
            &engine[3],
        );
        // x_ext[c][j]: the K − 1 state columns, then the tokens.
        let x =
            |ch: usize, j: usize| -> f64 { if j < k - 1 { conv0[ch * (k - 1) + j] as f64 } else { qkv[(j - (k - 1)) * c + ch] as f64 } };
        let conv =
            (0..=n_t).map(|n| (0..c).flat_map(|ch| (0..k - 1).map(move |j| (ch, n + j))).map(|(ch, j)| x(ch, j)).collect()).collect();
        let silu = |v: f64| v / (1.0 + (-v).exp());
        let y = |t: usize, ch: usize| silu((0..k).map(|j| ck.conv1d[ch * k + j] as f64 * x(ch, t + j)).sum());
        let eps = cfg.eps as f64;
        let l2 = |v: Vec<f64>| {
            let ss: f64 = v.iter().map(|a| a * a).sum();
            let inv = 1.0 / ss.max(eps * eps).sqrt();
            v.into_iter().map(|a| a * inv).collect::<Vec<f64>>()
        };
        let dot = |w: &[f32], h: usize, t: usize| -> f64 { (0..e).map(|j| w[h * e + j] as f64 * hidden[t * e + j] as f64).sum() };
        // S[h][kk][vv] from rgdn's [h][v][k] row.
        let mut state: Vec<f64> = vec![0.0; hv * d * d];
        for h in 0..hv {
            for vv in 0..d {
                for kk in 0..d {
                    state[(h * d + kk) * d + vv] = ssm0[(h * d + vv) * d + kk] as f64;
                }
            }
        }
        let as_rgdn = |st: &[f64]| -> Vec<f64> {
            let mut row = vec![0.0; hv * d * d];
            for h in 0..hv {
                for vv in 0..d {
                    for kk in 0..d {
                        row[(h * d + vv) * d + kk] = st[(h * d + kk) * d + vv];
                    }
                }
            }
            row
        };
        let mut ssm = vec![as_rgdn(&state)];
        let mut out = vec![0.0; n_t * hv * d];
        for t in 0..n_t {
            let ys: Vec<f64> = (0..c).map(|ch| y(t, ch)).collect();
            for h in 0..hv {
                let key = h % hk;
                let q: Vec<f64> = l2(ys[key * d..(key + 1) * d].to_vec()).into_iter().map(|a| a / (d as f64).sqrt()).collect();
                let kv = l2(ys[(hk + key) * d..(hk + key + 1) * d].to_vec());
                let v = &ys[(2 * hk + h) * d..(2 * hk + h + 1) * d];
                let beta = 1.0 / (1.0 + (-dot(&ck.b, h, t)).exp());
                let a = dot(&ck.a, h, t) + ck.dt_bias[h] as f64;
                let g = -(ck.a_log[h] as f64).exp() * (1.0 + a.exp()).ln();
                let st = &mut state[h * d * d..(h + 1) * d * d];
                st.iter_mut().for_each(|x| *x *= g.exp());
                for vv in 0..d {
                    let mem: f64 = (0..d).map(|kk| st[kk * d + vv] * kv[kk]).sum();
                    let delta = (v[vv] - mem) * beta;
                    for kk in 0..d {
                        st[kk * d + vv] += kv[kk] * delta;
                    }
                }
                for vv in 0..d {
                    out[(t * hv + h) * d + vv] = (0..d).map(|kk| state[h * d * d + kk * d + vv] * q[kk]).sum();
                }
            }
            ssm.push(as_rgdn(&state));
        }
        Forward { out, conv, ssm }
    }
}
