//! What the host and the kernels must agree on: block sizes, supported specialisations and the
//! names of the PTX entry points. Kept free of intrinsics and of `core`-only items so that the
//! host crate includes this very file (`#[path]`), giving every constant one source of truth.
//!
//! Every kernel entry takes exactly one by-value `#[repr(C)]` parameter struct declared here
//! (with `param_struct!`, which refuses implicit padding at compile time), and takes its
//! exported name from `entry_name!`: `ENTRIES` lists every entry with its struct's size and
//! alignment, and `tests/ptx.rs` checks each against the built PTX (one `.param`, same size and
//! alignment; every table entry in the PTX and every PTX entry in the table).

/// One kernel entry point: its PTX name and the size and alignment of the one parameter struct it
/// takes by value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntrySig {
    pub name: &'static str,
    pub param_size: usize,
    pub param_align: usize,
}

impl EntrySig {
    /// The entry `name` taking a `P` by value.
    pub const fn of<P>(name: &'static str) -> Self {
        EntrySig { name, param_size: size_of::<P>(), param_align: align_of::<P>() }
    }
}

/// The PTX name of an entry, as a literal: kernels use it in `#[unsafe(export_name = …)]`, the
/// host and `ENTRIES` in expressions, so a name is written once and a key that is not here does
/// not compile. (MUL_MAT_VEC, MUL_MAT_VEC_PAIR and GATED_DELTA_NET keep their own names below.)
macro_rules! entry_name {
    (get_rows) => {
        "get_rows_f32"
    };
    (concat_dim0) => {
        "concat_dim0_f32"
    };
    (concat_flat) => {
        "concat_flat_f32"
    };
    (cpy) => {
        "cpy_f32_f32"
    };
    (cpy_snapshots) => {
        "cpy_snapshots_f32"
    };
    (scale) => {
        "scale_f32"
    };
    (ssm_conv, 3) => {
        "ssm_conv_f32_d3"
    };
    (ssm_conv, 4) => {
        "ssm_conv_f32_d4"
    };
    (ssm_conv, 5) => {
        "ssm_conv_f32_d5"
    };
    (ssm_conv, 9) => {
        "ssm_conv_f32_d9"
    };
    (ssm_conv, 15) => {
        "ssm_conv_f32_d15"
    };
    (ssm_conv_silu, 3) => {
        "ssm_conv_f32_d3_silu"
    };
    (ssm_conv_silu, 4) => {
        "ssm_conv_f32_d4_silu"
    };
    (ssm_conv_silu, 5) => {
        "ssm_conv_f32_d5_silu"
    };
    (ssm_conv_silu, 9) => {
        "ssm_conv_f32_d9_silu"
    };
    (ssm_conv_silu, 15) => {
        "ssm_conv_f32_d15_silu"
    };
    (l2_norm) => {
        "l2_norm_f32"
    };
    (unary_sigmoid) => {
        "unary_sigmoid_f32"
    };
    (unary_softplus) => {
        "unary_softplus_f32"
    };
    (unary_silu) => {
        "unary_silu_f32"
    };
    (unary_exp) => {
        "unary_exp_f32"
    };
    (unary_softplus_mul) => {
        "unary_softplus_mul_f32"
    };
    (binary_add) => {
        "binary_add_f32"
    };
    (binary_mul) => {
        "binary_mul_f32"
    };
    (gdn_conv_chain, 3) => {
        "gdn_conv_chain_f32_d3"
    };
    (gdn_conv_chain, 4) => {
        "gdn_conv_chain_f32_d4"
    };
    (gdn_conv_chain, 5) => {
        "gdn_conv_chain_f32_d5"
    };
    (gdn_conv_chain_t4, 3) => {
        "gdn_conv_chain_f32_d3_t4"
    };
    (gdn_conv_chain_t4, 4) => {
        "gdn_conv_chain_f32_d4_t4"
    };
    (gdn_conv_chain_t4, 5) => {
        "gdn_conv_chain_f32_d5_t4"
    };
    (gdn_conv_chain_commit, 3) => {
        "gdn_conv_chain_commit_f32_d3"
    };
    (gdn_conv_chain_commit, 4) => {
        "gdn_conv_chain_commit_f32_d4"
    };
    (gdn_conv_chain_commit, 5) => {
        "gdn_conv_chain_commit_f32_d5"
    };
    (gdn_conv_chain_commit_overlap, 3) => {
        "gdn_conv_chain_commit_f32_d3_overlap"
    };
    (gdn_conv_chain_commit_overlap, 4) => {
        "gdn_conv_chain_commit_f32_d4_overlap"
    };
    (gdn_conv_chain_commit_overlap, 5) => {
        "gdn_conv_chain_commit_f32_d5_overlap"
    };
    (gdn_layer_step, f32, 3) => {
        "gdn_layer_step_f32_d3"
    };
    (gdn_layer_step, f32, 4) => {
        "gdn_layer_step_f32_d4"
    };
    (gdn_layer_step, f32, 5) => {
        "gdn_layer_step_f32_d5"
    };
    (gdn_layer_step, bf16, 3) => {
        "gdn_layer_step_bf16_d3"
    };
    (gdn_layer_step, bf16, 4) => {
        "gdn_layer_step_bf16_d4"
    };
    (gdn_layer_step, bf16, 5) => {
        "gdn_layer_step_bf16_d5"
    };
    (gdn_layer_step, f16, 3) => {
        "gdn_layer_step_f16_d3"
    };
    (gdn_layer_step, f16, 4) => {
        "gdn_layer_step_f16_d4"
    };
    (gdn_layer_step, f16, 5) => {
        "gdn_layer_step_f16_d5"
    };
    (gdn_layer_step, f16_f32acc, 3) => {
        "gdn_layer_step_f16_f32acc_d3"
    };
    (gdn_layer_step, f16_f32acc, 4) => {
        "gdn_layer_step_f16_f32acc_d4"
    };
    (gdn_layer_step, f16_f32acc, 5) => {
        "gdn_layer_step_f16_f32acc_d5"
    };
    (gdn_layer_step_batch, f32, 3) => {
        "gdn_layer_step_batch_f32_d3"
    };
    (gdn_layer_step_batch, f32, 4) => {
        "gdn_layer_step_batch_f32_d4"
    };
    (gdn_layer_step_batch, f32, 5) => {
        "gdn_layer_step_batch_f32_d5"
    };
    (gdn_layer_step_batch, bf16, 3) => {
        "gdn_layer_step_batch_bf16_d3"
    };
    (gdn_layer_step_batch, bf16, 4) => {
        "gdn_layer_step_batch_bf16_d4"
    };
    (gdn_layer_step_batch, bf16, 5) => {
        "gdn_layer_step_batch_bf16_d5"
    };
    (gdn_layer_step_batch, f16, 3) => {
        "gdn_layer_step_batch_f16_d3"
    };
    (gdn_layer_step_batch, f16, 4) => {
        "gdn_layer_step_batch_f16_d4"
    };
    (gdn_layer_step_batch, f16, 5) => {
        "gdn_layer_step_batch_f16_d5"
    };
    (gdn_layer_step_batch, f16_f32acc, 3) => {
        "gdn_layer_step_batch_f16_f32acc_d3"
    };
    (gdn_layer_step_batch, f16_f32acc, 4) => {
        "gdn_layer_step_batch_f16_f32acc_d4"
    };
    (gdn_layer_step_batch, f16_f32acc, 5) => {
        "gdn_layer_step_batch_f16_f32acc_d5"
    };
    (gdn_layer_step_seqs, f32, 3) => {
        "gdn_layer_step_seqs_f32_d3"
    };
    (gdn_layer_step_seqs, f32, 4) => {
        "gdn_layer_step_seqs_f32_d4"
    };
    (gdn_layer_step_seqs, f32, 5) => {
        "gdn_layer_step_seqs_f32_d5"
    };
    (gdn_layer_step_seqs, bf16, 3) => {
        "gdn_layer_step_seqs_bf16_d3"
    };
    (gdn_layer_step_seqs, bf16, 4) => {
        "gdn_layer_step_seqs_bf16_d4"
    };
    (gdn_layer_step_seqs, bf16, 5) => {
        "gdn_layer_step_seqs_bf16_d5"
    };
    (gdn_layer_step_seqs, f16, 3) => {
        "gdn_layer_step_seqs_f16_d3"
    };
    (gdn_layer_step_seqs, f16, 4) => {
        "gdn_layer_step_seqs_f16_d4"
    };
    (gdn_layer_step_seqs, f16, 5) => {
        "gdn_layer_step_seqs_f16_d5"
    };
    (gdn_layer_step_seqs, f16_f32acc, 3) => {
        "gdn_layer_step_seqs_f16_f32acc_d3"
    };
    (gdn_layer_step_seqs, f16_f32acc, 4) => {
        "gdn_layer_step_seqs_f16_f32acc_d4"
    };
    (gdn_layer_step_seqs, f16_f32acc, 5) => {
        "gdn_layer_step_seqs_f16_f32acc_d5"
    };
    (gdn_layer_step_replay, f32, 3) => {
        "gdn_layer_step_replay_f32_d3"
    };
    (gdn_layer_step_replay, f32, 4) => {
        "gdn_layer_step_replay_f32_d4"
    };
    (gdn_layer_step_replay, f32, 5) => {
        "gdn_layer_step_replay_f32_d5"
    };
    (gdn_layer_step_replay, bf16, 3) => {
        "gdn_layer_step_replay_bf16_d3"
    };
    (gdn_layer_step_replay, bf16, 4) => {
        "gdn_layer_step_replay_bf16_d4"
    };
    (gdn_layer_step_replay, bf16, 5) => {
        "gdn_layer_step_replay_bf16_d5"
    };
    (gdn_layer_step_replay, f16, 3) => {
        "gdn_layer_step_replay_f16_d3"
    };
    (gdn_layer_step_replay, f16, 4) => {
        "gdn_layer_step_replay_f16_d4"
    };
    (gdn_layer_step_replay, f16, 5) => {
        "gdn_layer_step_replay_f16_d5"
    };
    (gdn_layer_step_replay, f16_f32acc, 3) => {
        "gdn_layer_step_replay_f16_f32acc_d3"
    };
    (gdn_layer_step_replay, f16_f32acc, 4) => {
        "gdn_layer_step_replay_f16_f32acc_d4"
    };
    (gdn_layer_step_replay, f16_f32acc, 5) => {
        "gdn_layer_step_replay_f16_f32acc_d5"
    };
    (gated_delta_net_replay) => {
        "gated_delta_net_replay_f32_d128"
    };
    (gated_delta_net_from_cache_batch) => {
        "gated_delta_net_from_cache_batch_f32_d128"
    };
    (gated_delta_net_replay_verify) => {
        "gated_delta_net_replay_verify_f32_d128"
    };
    (gated_delta_net_replay_verify_overlap) => {
        "gated_delta_net_replay_verify_f32_d128_overlap"
    };
    (math_probe) => {
        "test_math_probe_f32"
    };
    (count_mismatches) => {
        "test_count_mismatches_u32"
    };
    (mufu_eval) => {
        "test_mufu_eval_f32"
    };
}
#[allow(unused_imports)]
pub(crate) use entry_name;

/// Declares a kernel parameter struct exactly as written and asserts at compile time that its
/// size is the sum of its fields' sizes: no implicit padding, so every byte the host copies into
/// the launch is initialised (fill gaps with explicit `_pad` fields).
macro_rules! param_struct {
    ($(#[$attr:meta])* pub struct $name:ident { $($(#[$field_attr:meta])* pub $field:ident: $ty:ty,)* }) => {
        $(#[$attr])*
        pub struct $name { $($(#[$field_attr])* pub $field: $ty,)* }
        const _: () = assert!(size_of::<$name>() == 0 $(+ size_of::<$ty>())*, concat!(stringify!($name), " has padding bytes"));
    };
}

/// Threads per block of SSM_CONV's short-sequence kernel; one thread per channel.
pub const SSM_CONV_BLOCK: u32 = 128;
/// Conv kernel widths ggml instantiates (`d_conv`).
pub const SSM_CONV_WIDTHS: [usize; 5] = [3, 4, 5, 9, 15];
/// Threads per block of L2_NORM for rows shorter than 1024: one warp per row.
pub const L2_NORM_BLOCK: u32 = 32;
/// L2_NORM rows must be shorter than this (ggml switches to a 1024-thread block above).
pub const L2_NORM_MAX_COLS: usize = 1024;

/// The SSM_CONV entry for `d_conv` taps, with or without the fused SiLU.
pub const fn ssm_conv_entry(d_conv: usize, silu: bool) -> Option<&'static str> {
    Some(match (d_conv, silu) {
        (3, false) => entry_name!(ssm_conv, 3),
        (4, false) => entry_name!(ssm_conv, 4),
        (5, false) => entry_name!(ssm_conv, 5),
        (9, false) => entry_name!(ssm_conv, 9),
        (15, false) => entry_name!(ssm_conv, 15),
        (3, true) => entry_name!(ssm_conv_silu, 3),
        (4, true) => entry_name!(ssm_conv_silu, 4),
        (5, true) => entry_name!(ssm_conv_silu, 5),
        (9, true) => entry_name!(ssm_conv_silu, 9),
        (15, true) => entry_name!(ssm_conv_silu, 15),
        _ => return None,
    })
}

param_struct! {
    /// Parameters of every SSM_CONV entry (element strides, see `ssm_conv.rs`): `conv_input`
    /// (col, c, s) at `col + c·in_channel + s·in_seq`, `weight` (j, c) at `j + c·w_channel`,
    /// `bias` at `c` (0 when absent), `dst` (c, t, s) at `c + t·dst_token + s·dst_seq`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct SsmConvParams {
        pub conv_input: u64,
        pub in_channel: u64,
        pub in_seq: u64,
        pub weight: u64,
        pub w_channel: u64,
        pub bias: u64,
        pub dst: u64,
        pub dst_token: u64,
        pub dst_seq: u64,
        pub n_channels: u32,
        pub n_tokens: u32,
    }
}

pub const L2_NORM_ENTRY: &str = entry_name!(l2_norm);

param_struct! {
    /// Parameters of [`L2_NORM_ENTRY`]: row (r, ch, s) of `src` at `r·src_row + ch·src_channel +
    /// s·src_sample` (element strides), `dst` likewise, `n_cols` contiguous columns.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct L2NormParams {
        pub src: u64,
        pub src_row: u64,
        pub src_channel: u64,
        pub src_sample: u64,
        pub dst: u64,
        pub dst_row: u64,
        pub dst_channel: u64,
        pub dst_sample: u64,
        pub n_cols: u32,
        pub eps: f32,
    }
}

/// Test-support kernels (GPU suite only): math parity probes and the MUFU oracle.
pub const MATH_PROBE_ENTRY: &str = entry_name!(math_probe);
pub const COUNT_MISMATCHES_ENTRY: &str = entry_name!(count_mismatches);
pub const MUFU_EVAL_ENTRY: &str = entry_name!(mufu_eval);

param_struct! {
    /// Parameters of [`MATH_PROBE_ENTRY`]: `out[i] = f(f32::from_bits(first + i))` for `i < n`,
    /// `f` a [`math_probe`] id, `param` the L2 norm's eps.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct MathProbeParams {
        pub out: u64,
        pub function: u32,
        pub first: u32,
        pub n: u32,
        pub param: f32,
    }
}

param_struct! {
    /// Parameters of [`COUNT_MISMATCHES_ENTRY`]: `a`, `b` hold `n` u32; `count` one u64.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct CountMismatchesParams {
        pub a: u64,
        pub b: u64,
        pub count: u64,
        pub n: u32,
        pub _pad: u32,
    }
}

param_struct! {
    /// Parameters of [`MUFU_EVAL_ENTRY`]: `op`, `arg`, `out` hold `n` u32.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct MufuEvalParams {
        pub op: u64,
        pub arg: u64,
        pub out: u64,
        pub n: u32,
        pub _pad: u32,
    }
}

/// Function ids of [`MATH_PROBE_ENTRY`].
pub mod math_probe {
    pub const EXP: u32 = 0;
    pub const SILU: u32 = 1;
    pub const SIGMOID: u32 = 2;
    pub const SOFTPLUS: u32 = 3;
    /// `rsqrtf(fmaxf(x, eps * eps))`, eps passed as the probe's parameter.
    pub const L2_SCALE: u32 = 4;
}

/// Instruction ids of [`MUFU_EVAL_ENTRY`].
pub mod mufu_op {
    pub const EX2: u32 = 0;
    pub const LG2: u32 = 1;
    pub const RCP: u32 = 2;
    pub const RSQRT: u32 = 3;
}

// ---- [copies] GET_ROWS, CONCAT, CPY, CPY_SNAPSHOTS, SCALE ----

/// GET_ROWS: threads per block (ggml's `CUDA_GET_ROWS_BLOCK_SIZE`); grid (rows gathered,
/// min(⌈row_len/256⌉, [`GET_ROWS_MAX_GRID_Y`])), each thread striding over its row by gridDim.y·256.
pub const GET_ROWS_BLOCK: u32 = 256;
/// CONCAT (non-contiguous kernel): threads per block, looping over dimension 0; grid (ne1, ne2).
pub const CONCAT_BLOCK: u32 = 256;
/// CPY f32→f32 (ggml's scalar `cpy_flt`): threads per block, one element per thread.
pub const CPY_BLOCK: u32 = 64;
/// CPY_SNAPSHOTS: threads per block, one channel per thread; grid (channel blocks, slot·n_s).
pub const CPY_SNAPSHOTS_BLOCK: u32 = 128;
/// CPY_SNAPSHOTS: at most this many slots (1 live row + 16 rollback snapshots).
pub const CPY_SNAPSHOTS_MAX_SLOTS: usize = 17;
/// SCALE: threads per block (ggml's `CUDA_SCALE_BLOCK_SIZE`), grid-stride loop.
pub const SCALE_BLOCK: u32 = 256;
/// SCALE: at most this many blocks; larger tensors loop (bits do not depend on the grid).
pub const SCALE_MAX_BLOCKS: u32 = 1024;
/// GET_ROWS: gridDim.y is capped at the hardware limit; longer rows loop.
pub const GET_ROWS_MAX_GRID_Y: u32 = 65535;

pub const GET_ROWS_ENTRY: &str = entry_name!(get_rows);
pub const CONCAT_DIM0_ENTRY: &str = entry_name!(concat_dim0);
pub const CPY_ENTRY: &str = entry_name!(cpy);
pub const CPY_SNAPSHOTS_ENTRY: &str = entry_name!(cpy_snapshots);
pub const SCALE_ENTRY: &str = entry_name!(scale);

param_struct! {
    /// Parameters of [`GET_ROWS_ENTRY`] (element strides): `src` row r at `r·src_row`, `dst`
    /// row i at `i·dst_row`, both `row_len` contiguous elements; index i at `rows[i·rows_stride]`
    /// (I32).
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct GetRowsParams {
        pub src: u64,
        pub src_row: u64,
        pub rows: u64,
        pub rows_stride: u64,
        pub dst: u64,
        pub dst_row: u64,
        pub row_len: u64,
    }
}

param_struct! {
    /// Parameters of [`CONCAT_DIM0_ENTRY`]: `a` [na, n1, n2], `b` [nb, n1, n2], `dst` [na + nb,
    /// n1, n2] (device addresses) with their element strides for dimensions 0, 1, 2; the grid is
    /// (n1, n2).
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct ConcatDim0Params {
        pub a: u64,
        pub b: u64,
        pub dst: u64,
        pub a_stride: [u64; 3],
        pub b_stride: [u64; 3],
        pub dst_stride: [u64; 3],
        pub na: u64,
        pub nb: u64,
    }
}

param_struct! {
    /// Parameters of [`CPY_ENTRY`]: both views by their first three sizes (`*_ne`, each ≥ 1;
    /// the fourth follows from `n`) and four element strides.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct CpyParams {
        pub src: u64,
        pub src_stride: [u64; 4],
        pub dst: u64,
        pub dst_stride: [u64; 4],
        pub src_ne: [u32; 3],
        pub dst_ne: [u32; 3],
        /// Elements copied.
        pub n: u32,
        pub _pad: u32,
    }
}

param_struct! {
    /// Parameters of [`CPY_SNAPSHOTS_ENTRY`] (element strides): `conv_input` (col, c, s) at
    /// `col + c·in_channel + s·in_seq`; cache row r at `r·cache_row`; slot j of sequence s is row
    /// `j·group_stride + first_row + s`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct CpySnapshotsParams {
        pub conv_input: u64,
        pub in_channel: u64,
        pub in_seq: u64,
        pub cache: u64,
        pub cache_row: u64,
        pub first_row: u64,
        pub group_stride: u64,
        pub state_len: u32,
        pub n_channels: u32,
        pub n_tokens: u32,
        pub n_seqs: u32,
    }
}

param_struct! {
    /// Parameters of [`SCALE_ENTRY`]: `dst[i] = fma(scale, src[i], bias)` for `i < n`
    /// (contiguous).
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct ScaleParams {
        pub src: u64,
        pub dst: u64,
        pub n: u64,
        pub scale: f32,
        pub bias: f32,
    }
}

// ---- [unary] unary and binary element-wise ops ----
/// Threads per block of the unary kernels (one element per thread, ggml's 256).
pub const UNARY_BLOCK: u32 = 256;
/// Threads per block of the binary broadcast kernels (one element per thread).
pub const BINARY_BLOCK: u32 = 256;

/// Op ids of the unary kernels.
pub mod unary_kind {
    pub const SIGMOID: u32 = 0;
    pub const SOFTPLUS: u32 = 1;
    pub const SILU: u32 = 2;
    pub const EXP: u32 = 3;
}

pub const fn unary_entry(kind: u32) -> Option<&'static str> {
    Some(match kind {
        unary_kind::SIGMOID => entry_name!(unary_sigmoid),
        unary_kind::SOFTPLUS => entry_name!(unary_softplus),
        unary_kind::SILU => entry_name!(unary_silu),
        unary_kind::EXP => entry_name!(unary_exp),
        _ => return None,
    })
}

param_struct! {
    /// Parameters of every [`unary_entry`]: `src` and `dst` contiguous, `n` elements.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct UnaryParams {
        pub src: u64,
        pub dst: u64,
        pub n: u64,
    }
}

/// Op ids of the binary broadcast kernels.
pub mod binary_kind {
    pub const ADD: u32 = 0;
    pub const MUL: u32 = 1;
}

pub const fn binary_entry(kind: u32) -> Option<&'static str> {
    Some(match kind {
        binary_kind::ADD => entry_name!(binary_add),
        binary_kind::MUL => entry_name!(binary_mul),
        _ => return None,
    })
}

param_struct! {
    /// Parameters of every [`binary_entry`]: `a` and `dst` of shape `ne`, `b` of shape `b_ne`
    /// (`ne[d] % b_ne[d] == 0`), each with contiguous dimension 0 and the element strides of
    /// dimensions 1, 2, 3.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct BinaryParams {
        pub a: u64,
        pub a_stride: [u64; 3],
        pub b: u64,
        pub b_stride: [u64; 3],
        pub b_ne: [u64; 4],
        pub dst: u64,
        pub dst_stride: [u64; 3],
        pub ne: [u64; 4],
    }
}

// ---- [mmvf] MUL_MAT_VEC ----

/// Most input columns one MUL_MAT_VEC launch takes (ggml's `MMVF_MAX_BATCH_SIZE`).
pub const MUL_MAT_VEC_MAX_COLS: usize = 8;
/// Most input columns of one MUL_MAT_VEC_PAIR (and MUL_MAT_VEC_PAIR_GATE, GDN_LAYER_STEP): the
/// products ggml splits into launches of at most [`MUL_MAT_VEC_MAX_COLS`] columns, taken whole.
/// The pair's launch runs column groups of at most [`MUL_MAT_VEC_MAX_COLS`] (grid z, the
/// existing entries) and a column's loop, butterflies and block sum do not depend on the other
/// columns of its block, so every element keeps ggml's bits; [seq-batch] 16 tokens of each of up to
/// [`GDN_LAYER_STEP_MAX_SEQS`] sequences (the batched layer step's n_t·n_s).
pub const MUL_MAT_VEC_PAIR_MAX_COLS: usize = GDN_LAYER_STEP_MAX_TOKENS * GDN_LAYER_STEP_MAX_SEQS;
/// Most warps of a MUL_MAT_VEC block (ggml's block sizes go up to 256 threads).
pub const MUL_MAT_VEC_MAX_WARPS: u32 = 8;
/// Dynamic shared memory of a MUL_MAT_VEC (or MUL_MAT_VEC_PAIR) launch: the cross-warp step of
/// the reduction, one warp sum per warp and column (ggml uses one 32-float buffer per column in
/// turn; the sums and their order are the same).
pub const MUL_MAT_VEC_SHARED_BYTES: u32 = MUL_MAT_VEC_MAX_COLS as u32 * MUL_MAT_VEC_MAX_WARPS * 4;

/// How MUL_MAT_VEC reads and accumulates a weight row (ggml's `T` × `type_acc`).
pub mod mul_mat_vec_kind {
    /// F32 weights, f32 accumulation.
    pub const F32: u32 = 0;
    /// BF16 weights (exact to f32), f32 accumulation.
    pub const BF16: u32 = 1;
    /// F16 weights, half2 accumulation (ggml's default precision).
    pub const F16_HALF: u32 = 2;
    /// F16 weights (exact to f32), f32 accumulation (op precision F32).
    pub const F16_F32: u32 = 3;
}

/// Parameters of a MUL_MAT_VEC entry, passed by value (one product; the pair's struct is
/// [`MulMatVecPairParams`]). Addresses are device addresses, strides are in elements (weight
/// rows in weight elements, input and dst columns in f32).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MulMatVecParams {
    /// Row 0 of the weight, and the elements between its rows.
    pub weight: u64,
    pub w_row: u64,
    /// Column 0 of the input, and the f32 elements between its columns.
    pub input: u64,
    pub in_col: u64,
    /// Column 0 of dst, and the f32 elements between its columns.
    pub dst: u64,
    pub dst_col: u64,
    /// E / 2: pairs per weight row and input column.
    pub n_pairs: u32,
    /// Zero; makes the size a multiple of 8 (no padding bytes).
    pub _pad: u32,
}

/// ggml's block size for rows of `row_len` elements (`launch_mul_mat_vec_f_cuda`, warp size 32,
/// NVIDIA's limit 256): start from one warp and ⌈row_len/64⌉ pair iterations per thread; for
/// 64, 96, …, 256 threads take the size whenever it needs strictly fewer iterations.
/// 256 for Qwen3.5's E = 2560, 4096, 5120.
pub const fn mul_mat_vec_block_size(row_len: usize) -> u32 {
    let mut best = 32;
    let mut best_iters = row_len.div_ceil(2 * 32);
    let mut block = 64;
    while block <= 256 {
        let iters = row_len.div_ceil(2 * block);
        if iters < best_iters {
            best = block;
            best_iters = iters;
        }
        block += 32;
    }
    best as u32
}

/// The MUL_MAT_VEC entry for a [`mul_mat_vec_kind`] and 1 ≤ `ncols` ≤ 8 input columns.
pub const fn mul_mat_vec_entry(kind: u32, ncols: usize) -> Option<&'static str> {
    const NAMES: [[&str; MUL_MAT_VEC_MAX_COLS]; 4] = [
        [
            "mul_mat_vec_f32_c1",
            "mul_mat_vec_f32_c2",
            "mul_mat_vec_f32_c3",
            "mul_mat_vec_f32_c4",
            "mul_mat_vec_f32_c5",
            "mul_mat_vec_f32_c6",
            "mul_mat_vec_f32_c7",
            "mul_mat_vec_f32_c8",
        ],
        [
            "mul_mat_vec_bf16_c1",
            "mul_mat_vec_bf16_c2",
            "mul_mat_vec_bf16_c3",
            "mul_mat_vec_bf16_c4",
            "mul_mat_vec_bf16_c5",
            "mul_mat_vec_bf16_c6",
            "mul_mat_vec_bf16_c7",
            "mul_mat_vec_bf16_c8",
        ],
        [
            "mul_mat_vec_f16_c1",
            "mul_mat_vec_f16_c2",
            "mul_mat_vec_f16_c3",
            "mul_mat_vec_f16_c4",
            "mul_mat_vec_f16_c5",
            "mul_mat_vec_f16_c6",
            "mul_mat_vec_f16_c7",
            "mul_mat_vec_f16_c8",
        ],
        [
            "mul_mat_vec_f16_f32acc_c1",
            "mul_mat_vec_f16_f32acc_c2",
            "mul_mat_vec_f16_f32acc_c3",
            "mul_mat_vec_f16_f32acc_c4",
            "mul_mat_vec_f16_f32acc_c5",
            "mul_mat_vec_f16_f32acc_c6",
            "mul_mat_vec_f16_f32acc_c7",
            "mul_mat_vec_f16_f32acc_c8",
        ],
    ];
    pick_mul_mat_vec_entry(&NAMES, kind, ncols)
}

/// The entry of `kind` and `ncols` in a [kind][ncols − 1] name table (F32, BF16, F16 half,
/// F16 f32-acc), shared by MUL_MAT_VEC and MUL_MAT_VEC_PAIR.
const fn pick_mul_mat_vec_entry(names: &[[&'static str; MUL_MAT_VEC_MAX_COLS]; 4], kind: u32, ncols: usize) -> Option<&'static str> {
    use mul_mat_vec_kind::*;
    let row = match kind {
        F32 => 0,
        BF16 => 1,
        F16_HALF => 2,
        F16_F32 => 3,
        _ => return None,
    };
    if ncols == 0 || ncols > MUL_MAT_VEC_MAX_COLS {
        return None;
    }
    Some(names[row][ncols - 1])
}

// ---- [gdn] GATED_DELTA_NET ----
/// GATED_DELTA_NET head dimension (ggml's S_v = D_k = D_v): the only one the kernel is built for.
pub const GDN_HEAD_DIM: usize = 128;
/// Warps per GATED_DELTA_NET block: block (32, GDN_WARPS, 1), one value column per warp; the
/// grid's z dimension is `GDN_HEAD_DIM / GDN_WARPS`.
pub const GDN_WARPS: u32 = 4;
/// Most snapshot slots the op accepts (K = 1 + R with at most R = 16 rollback groups).
pub const GDN_MAX_SLOTS: usize = 17;
/// Scalar-gate GATED_DELTA_NET for D = 128 (spec §2.10).
pub const GATED_DELTA_NET_ENTRY: &str = "gated_delta_net_f32_d128";

/// Parameters of [`GATED_DELTA_NET_ENTRY`], passed by value: for each tensor its device address
/// then its element strides (dimension 0 is contiguous for every tensor but `g` and `beta`,
/// which have one element per row), then the sizes. 31 u64 and four 4-byte scalars: 264 bytes,
/// alignment 8, no padding.
///
/// Layouts: `q`/`k` (i, kh, t, s) at `i + kh·*_head + t·*_token + s·*_seq`; `v` and `out`
/// (col, h, t, s) likewise; `g`/`beta` (0, h, t, s) at `h·*_head + t·*_token + s·*_seq`;
/// `state_in` (i, col, h, s) at `i + col·in_col + h·in_head + s·in_seq`; `states` slot k of
/// sequence s at `s·states_seq + k·states_slot`, (i, col, h) at `(h·D + col)·D + i` in it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GatedDeltaNetParams {
    pub q: u64,
    pub q_head: u64,
    pub q_token: u64,
    pub q_seq: u64,
    pub k: u64,
    pub k_head: u64,
    pub k_token: u64,
    pub k_seq: u64,
    pub v: u64,
    pub v_head: u64,
    pub v_token: u64,
    pub v_seq: u64,
    pub g: u64,
    pub g_head: u64,
    pub g_token: u64,
    pub g_seq: u64,
    pub beta: u64,
    pub beta_head: u64,
    pub beta_token: u64,
    pub beta_seq: u64,
    pub state_in: u64,
    pub in_col: u64,
    pub in_head: u64,
    pub in_seq: u64,
    pub out: u64,
    pub out_head: u64,
    pub out_token: u64,
    pub out_seq: u64,
    pub states: u64,
    pub states_seq: u64,
    pub states_slot: u64,
    /// n_t.
    pub n_tokens: u32,
    /// H_k ≥ 1: value head h reads key head h mod H_k.
    pub n_key_heads: u32,
    /// K: slots k < min(n_t, K) of `states` are written.
    pub n_slots: u32,
    /// The attention scale 1/√D.
    pub scale: f32,
}

// ---- [gdn-from-cache] GATED_DELTA_NET_FROM_CACHE: the state read from the ssm cache row ----
/// GATED_DELTA_NET reading sequence s's initial state straight from ssm-cache row
/// `source_rows[s]` (GET_ROWS + GATED_DELTA_NET in one launch; spec §2.1 + §2.10).
pub const GATED_DELTA_NET_FROM_CACHE_ENTRY: &str = "gated_delta_net_from_cache_f32_d128";

/// \[seq-batch\] GATED_DELTA_NET_FROM_CACHE in the batched GDN layout: [`BATCH_GDN_WARP_COLUMNS`]
/// columns a warp, block (32, [`GDN_WARPS`], 1), grid (H_v, n_s, D / [`BATCH_GDN_BLOCK_COLUMNS`]),
/// [`batch_token_stage_bytes`]`(n_t)` of dynamic shared memory, n_t ≤ [`BATCH_GDN_MAX_TOKENS`];
/// same parameters, same bits.
pub const GATED_DELTA_NET_FROM_CACHE_BATCH_ENTRY: &str = entry_name!(gated_delta_net_from_cache_batch);

/// Parameters of [`GATED_DELTA_NET_FROM_CACHE_ENTRY`]: GATED_DELTA_NET's, with `gdn.state_in` =
/// the cache's row 0, `gdn.in_col` = D, `gdn.in_head` = D·D, `gdn.in_seq` = the cache's row
/// stride (elements), and the I32 row indices (device address, element stride). 280 bytes, no
/// padding.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GatedDeltaNetFromCacheParams {
    pub gdn: GatedDeltaNetParams,
    pub source_rows: u64,
    pub source_rows_stride: u64,
}

// ---- [replay] GATED_DELTA_NET_REPLAY: the logged tokens a sequence accepted, into one state row ----
/// GATED_DELTA_NET's state update over the first `accepted[s]` tokens of a logged step, from
/// ssm-cache row `source_rows[s]` into row `dest_rows[s]` (exact-replay rollback's unfused op,
/// `docs/rollback.md`). Block (32, [`GDN_WARPS`], 1), grid (H_v, n_s, D / [`GDN_WARPS`]), as
/// GATED_DELTA_NET.
pub const GATED_DELTA_NET_REPLAY_ENTRY: &str = entry_name!(gated_delta_net_replay);

param_struct! {
    /// \[replay\] One F32 view of a per-head, per-token, per-sequence tensor as GATED_DELTA_NET_REPLAY
    /// reads it: the device address of element 0, then the element strides between heads,
    /// tokens and sequences (dimension 0 contiguous, or of one element).
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct TokenViewParams {
        pub addr: u64,
        pub head: u64,
        pub token: u64,
        pub seq: u64,
    }
}

param_struct! {
    /// Parameters of [`GATED_DELTA_NET_REPLAY_ENTRY`], passed by value: the logged k, v, g, β
    /// (`k` (i, kh, t, s) at `i + kh·head + t·token + s·seq`, `v` (col, h, t, s) likewise, `g`
    /// and `beta` (0, h, t, s) at `h·head + t·token + s·seq`), the ssm cache (row 0's address
    /// and the element stride between rows; element (i, col, h) of a row at `(h·D + col)·D + i`),
    /// the three I32 index views (address, element stride) and the sizes. 200 bytes, no padding.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct GatedDeltaNetReplayParams {
        pub k: TokenViewParams,
        pub v: TokenViewParams,
        pub g: TokenViewParams,
        pub beta: TokenViewParams,
        /// The ssm cache's row 0, and the elements between its rows.
        pub cache: u64,
        pub cache_row: u64,
        /// Sequence s reads its committed state from row `source_rows[s·source_rows_stride]`.
        pub source_rows: u64,
        pub source_rows_stride: u64,
        /// … and writes the replayed state to row `dest_rows[s·dest_rows_stride]`.
        pub dest_rows: u64,
        pub dest_rows_stride: u64,
        /// … after the first `accepted[s·accepted_stride]` (0 ..= `n_tokens`) logged tokens; 0
        /// writes nothing.
        pub accepted: u64,
        pub accepted_stride: u64,
        /// T: tokens per sequence in the log.
        pub n_tokens: u32,
        /// H_k ≥ 1: value head h reads key head h mod H_k.
        pub n_key_heads: u32,
    }
}

// ---- [replay] GATED_DELTA_NET_REPLAY_VERIFY: the replay and the verify's recurrence, one state read ----
/// GATED_DELTA_NET_REPLAY then GATED_DELTA_NET_FROM_CACHE reading the rows the replay wrote, in
/// one launch (the `replay_verify` fusion): per column, the committed state read once, the
/// replay's tokens, the commit, then the verify's tokens from the state in registers, no state
/// slot. Block (32, [`GDN_WARPS`], 1), grid (H_v, n_s, [`replay_verify_grid_z`]`(groups)`):
/// `groups` of [`BATCH_GDN_WARP_COLUMNS`] columns a warp, one after the other;
/// [`replay_verify_shared_bytes`] of dynamic shared memory.
pub const GATED_DELTA_NET_REPLAY_VERIFY_ENTRY: &str = entry_name!(gated_delta_net_replay_verify);
/// \[overlap\] GATED_DELTA_NET_REPLAY_VERIFY launched programmatically: one column group a warp,
/// the replay and its commit first, then `griddepcontrol.wait` (the grids before it complete and
/// visible), then the verify's staging and tokens.
pub const GATED_DELTA_NET_REPLAY_VERIFY_OVERLAP_ENTRY: &str = entry_name!(gated_delta_net_replay_verify_overlap);
/// \[seq-batch\] The batched GDN layout (GATED_DELTA_NET_REPLAY_VERIFY,
/// [`GATED_DELTA_NET_FROM_CACHE_BATCH_ENTRY`]): value columns one warp runs, interleaved (the
/// batched layer step's two groups a warp run as one).
pub const BATCH_GDN_WARP_COLUMNS: u32 = BATCH_MAX_GROUPS_PER_WARP * GDN_LAYER_STEP_GROUP_COLUMNS;
/// \[seq-batch\] The batched GDN layout: value columns of one block ([`GDN_WARPS`] warps).
pub const BATCH_GDN_BLOCK_COLUMNS: u32 = GDN_WARPS * BATCH_GDN_WARP_COLUMNS;
/// \[seq-batch\] The batched GDN layout: most tokens a launch stages in shared memory (a verify
/// step's 16).
pub const BATCH_GDN_MAX_TOKENS: usize = GDN_LAYER_STEP_MAX_TOKENS;
const _: () = assert!(BATCH_GDN_WARP_COLUMNS == 8 && (GDN_HEAD_DIM as u32).is_multiple_of(BATCH_GDN_BLOCK_COLUMNS));
const _: () = assert!(GDN_WARPS == GDN_LAYER_STEP_WARPS, "the verify's stage is the batched layer step's layout");
/// \[replay\] GATED_DELTA_NET_REPLAY_VERIFY: most tokens of the log (T_log) and of the verify (T)
/// — a verify step's 16 — the kernel stages in shared memory.
pub const REPLAY_VERIFY_MAX_TOKENS: usize = BATCH_GDN_MAX_TOKENS;
/// \[replay\] GATED_DELTA_NET_REPLAY_VERIFY: most column groups one warp runs one after the
/// other, [`BATCH_GDN_WARP_COLUMNS`] columns each, so that a warp's fixed work (the index loads,
/// the views' addresses, the token staging) is paid once for all of them. A launch runs
/// `D / (32·groups)` blocks along z with `groups` = 1 or 2 (the host's choice: fewer, longer
/// blocks pay off only when the grid has many waves); the kernel reads it from `%nctaid.z`.
pub const REPLAY_VERIFY_MAX_WARP_GROUPS: u32 = 2;
/// \[replay\] GATED_DELTA_NET_REPLAY_VERIFY: most value columns one warp runs (and stages room for).
pub const REPLAY_VERIFY_MAX_WARP_COLUMNS: u32 = REPLAY_VERIFY_MAX_WARP_GROUPS * BATCH_GDN_WARP_COLUMNS;
/// \[replay\] GATED_DELTA_NET_REPLAY_VERIFY's grid z for `groups` column groups a warp
/// (1 ..= [`REPLAY_VERIFY_MAX_WARP_GROUPS`]): `D / (32·groups)` blocks of [`GDN_WARPS`] warps.
pub const fn replay_verify_grid_z(groups: u32) -> u32 {
    GDN_HEAD_DIM as u32 / (GDN_WARPS * BATCH_GDN_WARP_COLUMNS * groups)
}
const _: () = assert!(replay_verify_grid_z(1) == 4 && replay_verify_grid_z(REPLAY_VERIFY_MAX_WARP_GROUPS) == 2);
/// \[replay\] GATED_DELTA_NET_REPLAY_VERIFY: shared bytes of one (warp, token) of either stage
/// with `groups` column groups a warp: the warp's 8·`groups` v, then g and β (the layer step's
/// per-(warp, token) size for that many columns: 64 bytes for one group, 128 for two).
pub const fn replay_verify_warp_token_bytes(groups: u32) -> u32 {
    layer_step_stage_warp_token_bytes(groups * BATCH_GDN_WARP_COLUMNS / GDN_LAYER_STEP_GROUP_COLUMNS)
}
/// \[replay\] GATED_DELTA_NET_REPLAY_VERIFY: shared bytes of one staged verify token: the key
/// head's q and k rows, then per warp [`replay_verify_warp_token_bytes`].
pub const fn replay_verify_token_bytes(groups: u32) -> u32 {
    LAYER_STEP_STAGE_QK_BYTES + GDN_WARPS * replay_verify_warp_token_bytes(groups)
}
/// \[replay\] GATED_DELTA_NET_REPLAY_VERIFY: shared bytes of one staged logged token: the key
/// head's k row (512), then per warp [`replay_verify_warp_token_bytes`].
pub const fn replay_verify_log_token_bytes(groups: u32) -> u32 {
    GDN_HEAD_DIM as u32 * 4 + GDN_WARPS * replay_verify_warp_token_bytes(groups)
}

/// \[replay\] GATED_DELTA_NET_REPLAY_VERIFY's dynamic shared memory for a verify of `n_tokens`,
/// a log of `log_tokens` and `groups` column groups a warp: the verify's token stage
/// ([`replay_verify_token_bytes`] a token, the batched layer step's layout for 8·`groups`
/// columns a warp), the log's ([`replay_verify_log_token_bytes`] a token), then
/// [`REPLAY_VERIFY_READ_PAST_BYTES`]. One group takes what the kernel took before groups
/// existed (plus the pad), so that six blocks still share a multiprocessor at T = T_log = 16.
pub const fn replay_verify_shared_bytes(n_tokens: usize, log_tokens: usize, groups: u32) -> u32 {
    n_tokens as u32 * replay_verify_token_bytes(groups)
        + log_tokens as u32 * replay_verify_log_token_bytes(groups)
        + REPLAY_VERIFY_READ_PAST_BYTES
}
/// \[replay\] Bytes after GATED_DELTA_NET_REPLAY_VERIFY's two stages that its verify loop may
/// read and never use: at the last token it loads "token T's" k, v, g and β with the same
/// unconditional loads as every other token's (no branch, no zeroing). The farthest such read
/// ends at most `max(1024 − 256·T, 40)` bytes past the stages with one group a warp,
/// `max(1024 − 512·T, 72)` with two (T ≥ 1).
pub const REPLAY_VERIFY_READ_PAST_BYTES: u32 = 1024;
// At T = 1 "token 1's" q and k rows end 2·1024 bytes into the stage, past it by at most 768
// (one group) or 512 (two); its v, g, β (the last warp's area) end at most 4·(8·G + 2) bytes past it.
const _: () = assert!(
    2 * LAYER_STEP_STAGE_QK_BYTES <= replay_verify_token_bytes(1) + REPLAY_VERIFY_READ_PAST_BYTES
        && 4 * (REPLAY_VERIFY_MAX_WARP_COLUMNS + 2) <= REPLAY_VERIFY_READ_PAST_BYTES
);
// A plain launch gets 48 KiB of dynamic shared memory without asking.
const _: () =
    assert!(replay_verify_shared_bytes(REPLAY_VERIFY_MAX_TOKENS, REPLAY_VERIFY_MAX_TOKENS, REPLAY_VERIFY_MAX_WARP_GROUPS) <= 48 * 1024);
const _: () = assert!(replay_verify_warp_token_bytes(1) == 64 && replay_verify_warp_token_bytes(REPLAY_VERIFY_MAX_WARP_GROUPS) == 128);

param_struct! {
    /// Parameters of [`GATED_DELTA_NET_REPLAY_VERIFY_ENTRY`], passed by value: the replay's
    /// (sequence s commits to cache row `replay.dest_rows[s]`), then the verify step's
    /// GATED_DELTA_NET views (q, k, v, g, β, `out`, the sizes and the scale). Of `verify`'s state
    /// fields none is dereferenced: the initial state is the replay's, in registers; `states` is
    /// the cache's row 0 with `states_seq` = 0 (the slot pointer GATED_DELTA_NET's head views
    /// compute then stays inside that row), and no slot is written whatever `n_slots` says.
    /// 464 bytes, no padding.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, PartialEq)]
    pub struct GatedDeltaNetReplayVerifyParams {
        pub replay: GatedDeltaNetReplayParams,
        pub verify: GatedDeltaNetParams,
    }
}

// ---- [convchain] GDN_CONV_CHAIN ----
/// GDN_CONV_CHAIN: threads per block, one channel per thread; grid (C / 128, 1, 1).
pub const GDN_CONV_CHAIN_BLOCK: u32 = 128;
/// GDN_CONV_CHAIN: most tokens one launch takes (a verify batch of one sequence).
pub const GDN_CONV_CHAIN_MAX_TOKENS: usize = 16;
/// GDN_CONV_CHAIN: most conv-state rows one launch writes (the live row + 15 snapshots).
pub const GDN_CONV_CHAIN_MAX_ROWS: usize = 16;
/// GDN_CONV_CHAIN: the conv widths it is built for.
pub const GDN_CONV_CHAIN_WIDTHS: [usize; 3] = [3, 4, 5];
/// GDN_CONV_CHAIN: the head dimensions it is built for (powers of two dividing the block, so a
/// block holds whole heads).
pub const GDN_CONV_CHAIN_HEAD_DIMS: [usize; 3] = [32, 64, 128];

/// The GDN_CONV_CHAIN entry for `d_conv` taps and `n_tokens` tokens: `gdn_conv_chain_f32_d*_t4`
/// (4 token slots) for n_tokens ≤ 2, else `gdn_conv_chain_f32_d*` (16 slots, any n_tokens ≤ 16).
/// \[speed\] Measured in one H100 call, same binary otherwise
/// (`results/2026-12-07-chain-token-slots/`, session 45): the 4-slot entry took the chain from
/// 12.94 to 8.78 µs at n_s = 64, T = 1 and from 13.98 to 13.62 at T = 2, but was slower at T = 3
/// and 4 (17.15 against 16.93, 21.23 against 20.66): there the kernel is bound by DRAM, not by
/// its issue, and an 8-slot entry gained nothing at T = 5 … 8 either.
pub const fn gdn_conv_chain_entry(d_conv: usize, n_tokens: usize) -> Option<&'static str> {
    Some(match (d_conv, n_tokens) {
        (3, 0..=2) => entry_name!(gdn_conv_chain_t4, 3),
        (4, 0..=2) => entry_name!(gdn_conv_chain_t4, 4),
        (5, 0..=2) => entry_name!(gdn_conv_chain_t4, 5),
        (3, _) => entry_name!(gdn_conv_chain, 3),
        (4, _) => entry_name!(gdn_conv_chain, 4),
        (5, _) => entry_name!(gdn_conv_chain, 5),
        _ => return None,
    })
}

/// Every GDN_CONV_CHAIN entry for `d_conv` taps, by its token slots (4, 16).
pub const fn gdn_conv_chain_entries(d_conv: usize) -> Option<[&'static str; 2]> {
    match (gdn_conv_chain_entry(d_conv, 1), gdn_conv_chain_entry(d_conv, GDN_CONV_CHAIN_MAX_TOKENS)) {
        (Some(a), Some(b)) => Some([a, b]),
        _ => None,
    }
}

/// \[replay\] `GdnConvChainCommitParams::logs`: the step's conv inputs to `log_out`.
pub const COMMIT_LOG_QKV: u32 = 1;
/// \[replay\] … the normalised k heads to `log_k`.
pub const COMMIT_LOG_K: u32 = 2;
/// \[replay\] … the v heads (SiLU outputs) to `log_v`.
pub const COMMIT_LOG_V: u32 = 4;

/// \[replay\] The GDN_CONV_CHAIN entry with the window commit in front
/// ([`GdnConvChainCommitParams`]) for `d_conv` taps.
pub const fn gdn_conv_chain_commit_entry(d_conv: usize) -> Option<&'static str> {
    Some(match d_conv {
        3 => entry_name!(gdn_conv_chain_commit, 3),
        4 => entry_name!(gdn_conv_chain_commit, 4),
        5 => entry_name!(gdn_conv_chain_commit, 5),
        _ => return None,
    })
}

/// \[overlap\] [`gdn_conv_chain_commit_entry`]'s twin that lets the stream's next grid start
/// once every block of it has begun (`griddepcontrol.launch_dependents` first, the same body).
pub const fn gdn_conv_chain_commit_overlap_entry(d_conv: usize) -> Option<&'static str> {
    Some(match d_conv {
        3 => entry_name!(gdn_conv_chain_commit_overlap, 3),
        4 => entry_name!(gdn_conv_chain_commit_overlap, 4),
        5 => entry_name!(gdn_conv_chain_commit_overlap, 5),
        _ => return None,
    })
}

/// GDN_CONV_CHAIN: floats per channel of the block's `conv_input` tile in shared memory:
/// d_conv − 1 + n_t columns, rounded up to an odd count (conflict-free banks when each thread
/// walks its own channel).
pub const fn gdn_conv_chain_tile_stride(d_conv: usize, n_tokens: usize) -> usize {
    (d_conv - 1 + n_tokens) | 1
}

/// GDN_CONV_CHAIN: dynamic shared memory in bytes — the `conv_input` tile
/// ([128 channels][tile stride]) followed by the SiLU outputs ([n_t][128 channels]).
pub const fn gdn_conv_chain_shared_bytes(d_conv: usize, n_tokens: usize) -> u32 {
    let block = GDN_CONV_CHAIN_BLOCK as usize;
    (4 * block * (gdn_conv_chain_tile_stride(d_conv, n_tokens) + n_tokens)) as u32
}

param_struct! {
    /// GDN_CONV_CHAIN's whole parameter list, passed by value. Device addresses and element strides
    /// first (u64), then the u32/f32 scalars and the row tables; 312 bytes, no padding.
    ///
    /// Layouts (element strides): cache row r at `r·cache_row`, channel c's slot jj at
    /// `c·(d_conv−1) + jj` in it; qkv/conv_out (c, t, s) at `c + t·*_token + s·*_seq`; weight
    /// (j, c) at `j + c·w_channel`; q_norm/k_norm (i, h, t, s) at `i + h·*_head + t·*_token +
    /// s·*_seq`. Sequence s reads its incoming state from row `source_row[s·source_row_seq]` and
    /// writes row `rows[i] + s` for every i (llama.cpp: sequence s owns cell kv_head + s of every
    /// rollback group).
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct GdnConvChainParams {
        /// Conv cache (`r_l`) element (0, 0).
        pub cache: u64,
        /// The I32 source-row index (`s_copy`), read by the kernel like GET_ROWS reads it.
        pub source_row: u64,
        pub qkv: u64,
        pub weight: u64,
        pub conv_out: u64,
        pub q_norm: u64,
        pub k_norm: u64,
        pub cache_row: u64,
        pub qkv_token: u64,
        pub w_channel: u64,
        pub conv_out_token: u64,
        pub q_head: u64,
        pub q_token: u64,
        pub k_head: u64,
        pub k_token: u64,
        /// [seq-batch] Element strides between sequences: the index, qkv, conv_out, q_norm, k_norm.
        pub source_row_seq: u64,
        pub qkv_seq: u64,
        pub conv_out_seq: u64,
        pub q_seq: u64,
        pub k_seq: u64,
        /// n_t, 1 ..= [`GDN_CONV_CHAIN_MAX_TOKENS`].
        pub n_tokens: u32,
        /// D, one of [`GDN_CONV_CHAIN_HEAD_DIMS`].
        pub head_dim: u32,
        /// H_k: channels 0 … H_k·D are q heads, H_k·D … 2·H_k·D k heads.
        pub n_k_heads: u32,
        pub eps: f32,
        /// Rows to write, 1 ..= [`GDN_CONV_CHAIN_MAX_ROWS`]: row `rows[i] + s` ← window(`offsets[i]`)
        /// of sequence s.
        pub n_rows: u32,
        /// [seq-batch] n_s: sequences (grid y of GDN_CONV_CHAIN).
        pub n_seqs: u32,
        pub rows: [u32; GDN_CONV_CHAIN_MAX_ROWS],
        pub offsets: [u32; GDN_CONV_CHAIN_MAX_ROWS],
    }
}

param_struct! {
    /// \[replay\] GDN_CONV_CHAIN with the window commit in front (`gdn_conv_chain_commit_f32_d*`,
    /// docs/rollback.md): the chain's own parameters (`n_rows` 0: a replay step writes no
    /// snapshot row), then the commit's. Sequence s's accepted count is
    /// a = `log_tokens` − (w − s) / n_s, w = `window_rows[s·window_rows_seq]` (the unfused
    /// graph's row of window(a) in its table of T_log + 1 windows, validated by the host to be
    /// j·n_s + s with j ≤ T_log); its incoming window is window(a) of [the committed window in
    /// row `source_row[s]` ; its logged inputs 0 … a − 1], written back over that row before the
    /// chain reads it. `log_qkv` (c, t, s) at `c + t·log_token + s·log_seq` (T_log tokens); with
    /// [`COMMIT_LOG_QKV`] in `logs` the step's own inputs (qkv) are copied to `log_out` (c, t, s) at
    /// `c + t·log_out_token + s·log_out_seq`; the k heads and v heads likewise to `log_k` /
    /// `log_v` (`logs` says which). 448 bytes, no padding.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct GdnConvChainCommitParams {
        pub chain: GdnConvChainParams,
        pub window_rows: u64,
        pub log_qkv: u64,
        pub log_out: u64,
        pub window_rows_seq: u64,
        pub log_token: u64,
        pub log_seq: u64,
        pub log_out_token: u64,
        pub log_out_seq: u64,
        /// The normalised k heads' log (i, h, t, s) at `i + h·log_k_head + t·log_k_token +
        /// s·log_k_seq`, as `k_norm` \[D, H_k, n_t, n_s\].
        pub log_k: u64,
        pub log_k_head: u64,
        pub log_k_token: u64,
        pub log_k_seq: u64,
        /// The v heads' log (the SiLU outputs of channels 2·H_k·D …): (i, h, t, s) at
        /// `i + h·log_v_head + t·log_v_token + s·log_v_seq`, \[D, H_v, n_t, n_s\].
        pub log_v: u64,
        pub log_v_head: u64,
        pub log_v_token: u64,
        pub log_v_seq: u64,
        /// T_log, 1 ..= [`GDN_CONV_CHAIN_MAX_TOKENS`]: tokens of the logged step.
        pub log_tokens: u32,
        /// Which logs the launch writes: [`COMMIT_LOG_QKV`] | [`COMMIT_LOG_K`] | [`COMMIT_LOG_V`].
        pub logs: u32,
    }
}

// [mmvf-pair] MUL_MAT_VEC_PAIR
param_struct! {
    /// Parameters of a MUL_MAT_VEC_PAIR entry, passed by value. Grid (rows, 2, 1): block y = 0
    /// computes the product of the `_0` fields, y = 1 that of the `_1` fields, each exactly as the
    /// MUL_MAT_VEC entry of the same kind and column count would. Addresses are device addresses,
    /// strides are in elements (weight rows in weight elements, input and dst columns in f32).
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct MulMatVecPairParams {
        /// Row 0 of each weight.
        pub weight_0: u64,
        pub weight_1: u64,
        /// Elements between weight rows.
        pub w_row_0: u64,
        pub w_row_1: u64,
        /// Column 0 of the shared input, and the f32 elements between its columns.
        pub input: u64,
        pub in_col: u64,
        /// Column 0 of each dst, and the f32 elements between its columns.
        pub dst_0: u64,
        pub dst_1: u64,
        pub dst_col_0: u64,
        pub dst_col_1: u64,
        /// E / 2: pairs per weight row and input column.
        pub n_pairs: u32,
        /// Zero; makes the size a multiple of 8 (no padding bytes).
        pub _pad: u32,
    }
}

/// Launch bounds the build writes into the PTX: (entry-name prefix, `.maxntid` x, `.minnctapersm`).
/// mul_mat_vec_f blocks have at most 256 threads (ggml's rule), and the grids are small (one
/// block per row): with the bounds, ptxas keeps every load of a thread's chunk in flight at once
/// instead of budgeting registers for full occupancy (NOTES.md, mul_mat_vec_f speed).
/// [layer-step] GDN_LAYER_STEP blocks have 128 threads; `.minnctapersm 3` (≤ 168 registers)
/// lets three blocks share a multiprocessor, so the cooperative grid (bounded by the occupancy
/// the driver reports) holds every first-phase item at n_t = 8 (320 for 9B) at once. The
/// d_conv = 5 entries would spill at 168 registers: they keep `.minnctapersm 2`.
pub const PTX_LAUNCH_BOUNDS: &[(&str, u32, u32)] = &[
    // [speed] The wide tiled pair: two blocks a multiprocessor (≤ 128 registers), the round the
    // host's rule for it counts (`ops::mmvf_pair::pair_tiles_wide`). Before the prefix of every
    // other mat-vec entry: the first prefix that matches applies.
    ("mul_mat_vec_pair_tiles_wide_", PAIR_TILES_WIDE_BLOCK, PAIR_TILES_WIDE_BLOCKS_PER_SM),
    ("mul_mat_vec_", 32 * MUL_MAT_VEC_MAX_WARPS, 1),
    (entry_name!(gdn_layer_step, f32, 5), GDN_LAYER_STEP_BLOCK, 2),
    (entry_name!(gdn_layer_step, bf16, 5), GDN_LAYER_STEP_BLOCK, 2),
    (entry_name!(gdn_layer_step, f16, 5), GDN_LAYER_STEP_BLOCK, 2),
    (entry_name!(gdn_layer_step, f16_f32acc, 5), GDN_LAYER_STEP_BLOCK, 2),
    (entry_name!(gdn_layer_step_seqs, f32, 5), GDN_LAYER_STEP_BLOCK, 2),
    (entry_name!(gdn_layer_step_seqs, bf16, 5), GDN_LAYER_STEP_BLOCK, 2),
    (entry_name!(gdn_layer_step_seqs, f16, 5), GDN_LAYER_STEP_BLOCK, 2),
    (entry_name!(gdn_layer_step_seqs, f16_f32acc, 5), GDN_LAYER_STEP_BLOCK, 2),
    // [seq-batch] Four blocks per multiprocessor (128 registers, no spills): a small batch's
    // n_s·H_v·16 warp items run in fewer rounds (n_s = 4: one round of 2112 warps instead of 1.3
    // of 1584). Same call on the H200 (`results/2026-12-03-h200-seq-pairs/`): n_s = 4, T = 1 / 4
    // 8.46 / 15.99 µs against 9.84 / 18.79 at three blocks.
    // [replay] The replay layer step: four blocks a multiprocessor (≤ 128 registers, no spills
    // with its conv items' token slots unrolled to 16, ptxas 13.5; d_conv 5 three: 168, no
    // spills — at four it spilled 32 bytes). Not yet measured on a GPU.
    (entry_name!(gdn_layer_step_replay, f32, 5), GDN_LAYER_STEP_BLOCK, 3),
    (entry_name!(gdn_layer_step_replay, bf16, 5), GDN_LAYER_STEP_BLOCK, 3),
    (entry_name!(gdn_layer_step_replay, f16, 5), GDN_LAYER_STEP_BLOCK, 3),
    (entry_name!(gdn_layer_step_replay, f16_f32acc, 5), GDN_LAYER_STEP_BLOCK, 3),
    ("gdn_layer_step_replay_", GDN_LAYER_STEP_BLOCK, 4),
    ("gdn_layer_step_seqs_", GDN_LAYER_STEP_BLOCK, 4),
    ("gdn_layer_step_", GDN_LAYER_STEP_BLOCK, 3),
    // [replay] Six blocks of 128 threads per multiprocessor (≤ 80 registers; 85 without the
    // bounds, no spills either way): the recurrence's token loop is latency-bound, and a
    // pipelined variant with fewer resident warps was no faster (`results/2026-12-04-h200-tiles/`).
    (GATED_DELTA_NET_REPLAY_VERIFY_ENTRY, 32 * GDN_WARPS, 6),
];

/// The MUL_MAT_VEC_PAIR entry for a [`mul_mat_vec_kind`] and 1 ≤ `ncols` ≤ 8 input columns.
pub const fn mul_mat_vec_pair_entry(kind: u32, ncols: usize) -> Option<&'static str> {
    const NAMES: [[&str; MUL_MAT_VEC_MAX_COLS]; 4] = [
        [
            "mul_mat_vec_pair_f32_c1",
            "mul_mat_vec_pair_f32_c2",
            "mul_mat_vec_pair_f32_c3",
            "mul_mat_vec_pair_f32_c4",
            "mul_mat_vec_pair_f32_c5",
            "mul_mat_vec_pair_f32_c6",
            "mul_mat_vec_pair_f32_c7",
            "mul_mat_vec_pair_f32_c8",
        ],
        [
            "mul_mat_vec_pair_bf16_c1",
            "mul_mat_vec_pair_bf16_c2",
            "mul_mat_vec_pair_bf16_c3",
            "mul_mat_vec_pair_bf16_c4",
            "mul_mat_vec_pair_bf16_c5",
            "mul_mat_vec_pair_bf16_c6",
            "mul_mat_vec_pair_bf16_c7",
            "mul_mat_vec_pair_bf16_c8",
        ],
        [
            "mul_mat_vec_pair_f16_c1",
            "mul_mat_vec_pair_f16_c2",
            "mul_mat_vec_pair_f16_c3",
            "mul_mat_vec_pair_f16_c4",
            "mul_mat_vec_pair_f16_c5",
            "mul_mat_vec_pair_f16_c6",
            "mul_mat_vec_pair_f16_c7",
            "mul_mat_vec_pair_f16_c8",
        ],
        [
            "mul_mat_vec_pair_f16_f32acc_c1",
            "mul_mat_vec_pair_f16_f32acc_c2",
            "mul_mat_vec_pair_f16_f32acc_c3",
            "mul_mat_vec_pair_f16_f32acc_c4",
            "mul_mat_vec_pair_f16_f32acc_c5",
            "mul_mat_vec_pair_f16_f32acc_c6",
            "mul_mat_vec_pair_f16_f32acc_c7",
            "mul_mat_vec_pair_f16_f32acc_c8",
        ],
    ];
    pick_mul_mat_vec_entry(&NAMES, kind, ncols)
}

// ---- [pair-gate] MUL_MAT_VEC_PAIR_GATE: the gate path as the pair's epilogue ----
/// What the `mul_mat_vec_pair_*` entries take by value: the pair's products ([`MulMatVecPairParams`])
/// and the gate-path epilogue. With `epilogue` = [`PAIR_EPILOGUE_NONE`] they are MUL_MAT_VEC_PAIR
/// (the epilogue fields are ignored, zero by convention); with [`PAIR_EPILOGUE_GATE`] they are
/// MUL_MAT_VEC_PAIR_GATE: besides writing both products as the pair does, the thread that writes
/// element (r, j) of product 0 (alpha) also writes `gate[r + j·gate_col] =
/// softplus(alpha + dt_bias[r]) · ssm_a[r]`, and the one that writes (r, j) of product 1 (beta_raw)
/// writes `beta[r + j·beta_col] = sigmoid(beta_raw)` — ADD, SOFTPLUS, MUL and SIGMOID with the
/// unfused kernels' own bodies. One set of entries serves both ops (a runtime flag, uniform per
/// launch, read after the reduction) instead of a second set of 32 large entries (the pair
/// entries are ~1.6 MB of the PTX, which every test binary of the GPU bundle embeds).
///
/// Addresses are device addresses; `dt_bias`, `ssm_a` are contiguous \[H_v\] f32, `beta`, `gate`
/// [H_v, ncols] f32 with contiguous columns `beta_col`/`gate_col` f32 apart. 144 bytes, no padding.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MulMatVecPairGateParams {
    pub pair: MulMatVecPairParams,
    pub dt_bias: u64,
    pub ssm_a: u64,
    pub beta: u64,
    pub beta_col: u64,
    pub gate: u64,
    pub gate_col: u64,
    /// [`PAIR_EPILOGUE_NONE`] or [`PAIR_EPILOGUE_GATE`].
    pub epilogue: u32,
    /// Zero; makes the size a multiple of 8 (no padding bytes).
    pub _pad: u32,
}

param_struct! {
    /// \[speed\] MUL_MAT_VEC_PAIR(_GATE) over many columns as tiles
    /// (`mul_mat_vec_pair_tiles_*`): block (x, y) of [`PAIR_TILES_BLOCK`] threads computes heads
    /// `x·BATCH_ROW_HEADS …` of both products for columns `y·BATCH_ROW_COLS …` with GDN_LAYER_STEP's
    /// mat-vec item body (`mmvf::pair_gate_tile`: each element exactly as a pair block of
    /// `pair_block` threads computes it), so a block reads its columns once for 8 weight rows
    /// instead of once per row. 160 bytes, no padding.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct MulMatVecPairTilesParams {
        pub gate: MulMatVecPairGateParams,
        /// ggml's mul_mat_vec_f block size for E (32 … 256): the thread count whose partial sums
        /// and reduction each element reproduces.
        pub pair_block: u32,
        /// Rows of each product (H_v).
        pub n_rows: u32,
        /// Input columns.
        pub n_cols: u32,
        /// Zero (no padding bytes).
        pub _pad: u32,
    }
}

/// \[speed\] Threads of a `mul_mat_vec_pair_tiles_*` block (GDN_LAYER_STEP's block): each real
/// thread runs virtual threads `tid` and `tid + 128` of ggml's block one after the other.
pub const PAIR_TILES_BLOCK: u32 = 128;
/// \[speed\] Dynamic shared memory of a `mul_mat_vec_pair_tiles_*` block: the item's reduction
/// buffer, then its operand rings.
pub const PAIR_TILES_SHARED_BYTES: u32 = BATCH_ROW_REDUCE_BYTES + BATCH_ROW_RING_BYTES;
/// \[speed\] Threads of a `mul_mat_vec_pair_tiles_wide_*` block: 256, one real thread a virtual
/// one (ggml's blocks have at most 256), so that each warp streams one virtual warp's iterations
/// (8 at E = 4096) where the 128-thread block streams two in turn. Shorter per block, two blocks
/// a multiprocessor instead of four: the host takes it where the tiles fit in one round of those
/// (`ops::mmvf_pair::pair_tiles_wide`).
pub const PAIR_TILES_WIDE_BLOCK: u32 = 256;
/// \[speed\] Resident `mul_mat_vec_pair_tiles_wide_*` blocks a multiprocessor, the entries'
/// launch bound ([`PTX_LAUNCH_BOUNDS`]): two of 256 threads and 97 KiB of shared memory.
pub const PAIR_TILES_WIDE_BLOCKS_PER_SM: u32 = 2;
/// \[speed\] Dynamic shared memory of a `mul_mat_vec_pair_tiles_wide_*` block: the item's
/// reduction buffer, then its operand rings, one a warp.
pub const PAIR_TILES_WIDE_SHARED_BYTES: u32 = BATCH_ROW_REDUCE_BYTES + PAIR_TILES_WIDE_BLOCK / 32 * BATCH_ROW_RING_WARP_BYTES;
const _: () = assert!(
    PAIR_TILES_BLOCK == 32 * GDN_LAYER_STEP_WARPS
        && PAIR_TILES_WIDE_BLOCK == 32 * MUL_MAT_VEC_MAX_WARPS
        && BATCH_ROW_RING_BYTES == GDN_LAYER_STEP_WARPS * BATCH_ROW_RING_WARP_BYTES
);

/// \[speed\] The tiled MUL_MAT_VEC_PAIR(_GATE) entry for a [`mul_mat_vec_kind`]: with `wide`
/// the [`PAIR_TILES_WIDE_BLOCK`]-thread form, else the [`PAIR_TILES_BLOCK`]-thread one (the
/// same body and bits, `mmvf::pair_gate_tile`).
pub const fn mul_mat_vec_pair_tiles_entry(kind: u32, wide: bool) -> Option<&'static str> {
    Some(match (kind, wide) {
        (mul_mat_vec_kind::F32, false) => "mul_mat_vec_pair_tiles_f32",
        (mul_mat_vec_kind::BF16, false) => "mul_mat_vec_pair_tiles_bf16",
        (mul_mat_vec_kind::F16_HALF, false) => "mul_mat_vec_pair_tiles_f16",
        (mul_mat_vec_kind::F16_F32, false) => "mul_mat_vec_pair_tiles_f16_f32acc",
        (mul_mat_vec_kind::F32, true) => "mul_mat_vec_pair_tiles_wide_f32",
        (mul_mat_vec_kind::BF16, true) => "mul_mat_vec_pair_tiles_wide_bf16",
        (mul_mat_vec_kind::F16_HALF, true) => "mul_mat_vec_pair_tiles_wide_f16",
        (mul_mat_vec_kind::F16_F32, true) => "mul_mat_vec_pair_tiles_wide_f16_f32acc",
        _ => return None,
    })
}

/// \[overlap\] [`mul_mat_vec_pair_tiles_entry`]'s twin for programmatic dependent launch: it lets
/// the stream's next grid start once every block of it has begun, and each block waits for the
/// grids before it (`griddepcontrol.wait`) only after its own work — so a grid that waits for
/// it also waits for every grid it may have overlapped.
pub const fn mul_mat_vec_pair_tiles_overlap_entry(kind: u32, wide: bool) -> Option<&'static str> {
    Some(match (kind, wide) {
        (mul_mat_vec_kind::F32, false) => "mul_mat_vec_pair_tiles_f32_overlap",
        (mul_mat_vec_kind::BF16, false) => "mul_mat_vec_pair_tiles_bf16_overlap",
        (mul_mat_vec_kind::F16_HALF, false) => "mul_mat_vec_pair_tiles_f16_overlap",
        (mul_mat_vec_kind::F16_F32, false) => "mul_mat_vec_pair_tiles_f16_f32acc_overlap",
        (mul_mat_vec_kind::F32, true) => "mul_mat_vec_pair_tiles_wide_f32_overlap",
        (mul_mat_vec_kind::BF16, true) => "mul_mat_vec_pair_tiles_wide_bf16_overlap",
        (mul_mat_vec_kind::F16_HALF, true) => "mul_mat_vec_pair_tiles_wide_f16_overlap",
        (mul_mat_vec_kind::F16_F32, true) => "mul_mat_vec_pair_tiles_wide_f16_f32acc_overlap",
        _ => return None,
    })
}

/// [`MulMatVecPairGateParams::epilogue`]: the plain pair.
pub const PAIR_EPILOGUE_NONE: u32 = 0;
/// [`MulMatVecPairGateParams::epilogue`]: the gate path (SIGMOID of product 1; ADD, SOFTPLUS,
/// MUL of product 0).
pub const PAIR_EPILOGUE_GATE: u32 = 1;

/// The MUL_MAT_VEC_PAIR_GATE entry for a [`mul_mat_vec_kind`] and 1 ≤ `ncols` ≤ 8 columns: the
/// pair's own entry, run with [`PAIR_EPILOGUE_GATE`].
pub const fn mul_mat_vec_pair_gate_entry(kind: u32, ncols: usize) -> Option<&'static str> {
    mul_mat_vec_pair_entry(kind, ncols)
}

// ---- [speed] CONCAT flat kernel, fused SOFTPLUS·MUL ----
/// CONCAT dim 0 as one flat kernel (ggml takes its flat kernel when both sources are contiguous —
/// at n_t = 1 in the layer; ours addresses each operand by its strides, so it serves strided
/// views too): one element of `dst` per thread; threads per block.
pub const CONCAT_FLAT_BLOCK: u32 = 256;
pub const CONCAT_FLAT_ENTRY: &str = entry_name!(concat_flat);

param_struct! {
    /// Parameters of [`CONCAT_FLAT_ENTRY`]: `a` [na, n1, n2], `b` [nb, n1, n2], `dst` [na + nb, n1,
    /// n2] (device addresses) with their element strides for dimensions 0, 1, 2; `total` =
    /// (na + nb)·n1·n2.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct ConcatFlatParams {
        pub a: u64,
        pub b: u64,
        pub dst: u64,
        pub a_stride: [u64; 3],
        pub b_stride: [u64; 3],
        pub dst_stride: [u64; 3],
        pub na: u32,
        pub nb: u32,
        pub n1: u32,
        pub total: u32,
    }
}

/// Fused UNARY→MUL `y = softplus(x)·m` (spec §2.7, ggml's fused unary·mul at n_t = 1): one
/// element per thread, [`UNARY_BLOCK`] threads per block.
pub const UNARY_SOFTPLUS_MUL_ENTRY: &str = entry_name!(unary_softplus_mul);

param_struct! {
    /// Parameters of [`UNARY_SOFTPLUS_MUL_ENTRY`]: `x` and `y` contiguous f32 of `n` elements, `m`
    /// contiguous of `n_mul` elements read at `i mod n_mul` (MUL's broadcast of a leading block;
    /// `n_mul = n` for equal shapes) (device addresses).
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct UnaryMulParams {
        pub x: u64,
        pub m: u64,
        pub y: u64,
        pub n: u32,
        pub n_mul: u32,
    }
}

// ---- [layer-step] GDN_LAYER_STEP: one launch per GDN layer verify step ----
/// GDN_LAYER_STEP: threads per block (the conv chain's tile and GATED_DELTA_NET's 32 × 4 block;
/// the mat-vec rows of up to 256 threads run as two virtual halves, see `gdn_layer_step.rs`).
pub const GDN_LAYER_STEP_BLOCK: u32 = 128;
/// GDN_LAYER_STEP: most tokens per sequence — a verify step's 16, the conv chain's token limit
/// (its shared memory, [`gdn_layer_step_shared_bytes`], is sized for it).
pub const GDN_LAYER_STEP_MAX_TOKENS: usize = 16;
const _: () = assert!(GDN_LAYER_STEP_MAX_TOKENS <= GDN_CONV_CHAIN_MAX_TOKENS, "the layer step runs the conv chain's tiles");
// Phase 2 of GDN_LAYER_STEP waits with one warp, a lane per item it reads: 2·⌈n_t/2⌉ row items
// and three conv tiles (`LayerStepItems::item_read_by`).
// [seq-batch] Sequence s's columns s·n_t … span ⌈n_t/2⌉ pairs too (s·n_t is even whenever n_t is).
const _: () = assert!(2 * GDN_LAYER_STEP_MAX_TOKENS.div_ceil(GDN_LAYER_STEP_COLS) + 3 <= 32);
/// GDN_LAYER_STEP: columns one mat-vec row item computes (the n_t columns split into
/// ⌈n_t / 2⌉ items per row; a column ≥ n_t repeats column n_t − 1 and is dropped), so that one
/// entry per weight kind and d_conv serves every n_t and the row items spread over the grid.
pub const GDN_LAYER_STEP_COLS: usize = 2;
/// GDN_LAYER_STEP: GATED_DELTA_NET column groups per value head (one warp per column, four
/// warps per group: GATED_DELTA_NET's grid z).
pub const GDN_LAYER_STEP_GROUPS_PER_HEAD: u32 = GDN_HEAD_DIM as u32 / GDN_LAYER_STEP_GROUP_COLUMNS;
/// GDN_LAYER_STEP: value columns one warp runs at once in the second phase (interleaved).
pub const GDN_LAYER_STEP_GROUP_COLUMNS: u32 = 4;
/// Bytes between the u64 of the cross-block readiness state (`device/grid.rs`): one per L2 line,
/// so that pollers of different flags never meet in a line.
pub const GRID_SYNC_LINE: usize = 128;
/// Work-item flags of the readiness state: GDN_LAYER_STEP's first-phase items
/// (2·H_v·⌈n_t/2⌉ + C/128) must not exceed it (the host refuses more).
pub const GRID_SYNC_FLAGS: usize = 4096;
/// Bytes of the readiness state (`device/grid.rs`): `done`, `arrived`, then
/// [`GRID_SYNC_FLAGS`] flags, then [seq-batch] [`BATCH_MAX_CHUNKS`] chunk counters, one u64 per
/// [`GRID_SYNC_LINE`].
pub const GRID_SYNC_BYTES: usize = (2 + GRID_SYNC_FLAGS + BATCH_MAX_CHUNKS) * GRID_SYNC_LINE;
/// [seq-batch] The line of chunk counter 0 in the readiness state.
pub const GRID_SYNC_COUNTER_LINE: u32 = 2 + GRID_SYNC_FLAGS as u32;
/// GDN_LAYER_STEP: warps per block; in the second phase each warp runs whole column groups
/// (the group's four columns interleaved), so a grid of G blocks runs 4·G groups at a time.
pub const GDN_LAYER_STEP_WARPS: u32 = GDN_LAYER_STEP_BLOCK / 32;

/// [layer-step] GDN_LAYER_STEP's work items: which first-phase item is which, and which of them
/// a value head's column groups wait for before they read their token inputs. The kernel runs
/// and waits by exactly these functions (`gdn_layer_step.rs`), and the host proves the waits
/// from byte ranges once per step (`host/ops/gdn_layer_step.rs`, `readiness_gap`): every item
/// that writes a byte a column group reads is among the items its head waits for.
///
/// [seq-batch] Several sequences run as every sequence's own items in one launch: the conv tiles
/// of every sequence (sequence-major), then the row items over the n_t·n_s token columns
/// (sequence-major, so a pair holds two columns of one sequence, or at an odd n_t the last of
/// one and the first of the next), each item its own flag; a sequence's column groups wait for
/// its own tiles and the row items of its own columns only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerStepItems {
    /// H_v: value heads (rows of each product).
    pub n_heads: u32,
    /// GATED_DELTA_NET's key heads: value head h reads key head h mod `n_key_heads`.
    pub n_key_heads: u32,
    /// The conv chain's H_k: q head kh is tile kh, k head kh tile H_k + kh, v head h tile
    /// 2·H_k + h (the host links it to `n_key_heads`; the two are read where the unfused
    /// kernels read them).
    pub chain_key_heads: u32,
    /// C / 128: conv-chain tiles of one sequence.
    pub n_chain_tiles: u32,
    /// n_t: the products' columns per sequence (row items take [`GDN_LAYER_STEP_COLS`] each).
    pub n_tokens: u32,
    /// n_s: sequences, each with its own items ([seq-batch]; 1 for one sequence).
    pub n_seqs: u32,
}

/// [layer-step] One first-phase item of GDN_LAYER_STEP ([`LayerStepItems::first_phase_item`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerStepItem {
    /// Conv-chain tile `tile` of sequence `seq`: channels 128·tile … 128·tile + 127 of every
    /// token of the sequence (GDN_CONV_CHAIN's block (tile, seq)).
    Tile { seq: u32, tile: u32 },
    /// Mat-vec row item: row `row` of product `product` (0: alpha with the gate epilogue, 1:
    /// beta_raw with SIGMOID) for token columns 2·`pair` and 2·`pair` + 1 (those < n_t·n_s;
    /// column c is token c mod n_t of sequence c / n_t).
    Row { pair: u32, row: u32, product: u32 },
}

impl LayerStepItems {
    /// The items of a launch with parameters `p` (its sequences: `p.batch.n_seqs`).
    #[inline(always)]
    pub const fn of(p: &GdnLayerStepParams) -> LayerStepItems {
        LayerStepItems {
            n_heads: p.n_heads,
            n_key_heads: p.gdn.gdn.n_key_heads,
            chain_key_heads: p.chain.n_k_heads,
            n_chain_tiles: p.n_chain_tiles,
            n_tokens: p.n_tokens,
            n_seqs: p.batch.n_seqs,
        }
    }

    /// \[replay\] The items of a GDN_LAYER_STEP_REPLAY launch: the single-sequence layer step's
    /// over `p.n_seqs` sequences (the verify's key heads: GATED_DELTA_NET_REPLAY_VERIFY's).
    #[inline(always)]
    pub const fn of_replay(p: &GdnLayerStepReplayParams) -> LayerStepItems {
        LayerStepItems {
            n_heads: p.n_heads,
            n_key_heads: p.rv.verify.n_key_heads,
            chain_key_heads: p.chain.chain.n_k_heads,
            n_chain_tiles: p.n_chain_tiles,
            n_tokens: p.n_tokens,
            n_seqs: p.n_seqs,
        }
    }

    /// Row items per column pair: one per (row, product), the product fastest.
    pub const fn row_items_per_pair(&self) -> u32 {
        2 * self.n_heads
    }

    /// Column pairs of the launch: ⌈n_t·n_s/2⌉.
    pub const fn column_pairs(&self) -> u32 {
        (self.n_seqs * self.n_tokens).div_ceil(GDN_LAYER_STEP_COLS as u32)
    }

    /// The column pairs holding sequence `seq`'s columns seq·n_t … seq·n_t + n_t − 1: (first,
    /// count); the count is ⌈n_t/2⌉ (an odd first column only at an odd n_t).
    pub const fn seq_pairs(&self, seq: u32) -> (u32, u32) {
        let first_col = seq * self.n_tokens;
        let first = first_col / GDN_LAYER_STEP_COLS as u32;
        let last = (first_col + self.n_tokens.saturating_sub(1)) / GDN_LAYER_STEP_COLS as u32;
        (first, last + 1 - first)
    }

    /// Lanes of sequence `seq`'s waiting warp that name a row item: two per column pair of the
    /// sequence (the pair's two products of the head's row), 2·⌈n_t/2⌉.
    pub const fn waited_row_items(&self, seq: u32) -> u32 {
        2 * self.seq_pairs(seq).1
    }

    /// Conv-tile items: n_s·C/128, items 0 … n_s·C/128 − 1 (sequence-major).
    pub const fn tile_items(&self) -> u32 {
        self.n_seqs * self.n_chain_tiles
    }

    /// First-phase items: the conv tiles, then 2·H_v·⌈n_t·n_s/2⌉ row items (the host checks
    /// the sum fits u32 and [`GRID_SYNC_FLAGS`]).
    pub const fn first_phase_items(&self) -> u32 {
        self.tile_items() + self.row_items_per_pair() * self.column_pairs()
    }

    /// Tile item `item` (< [`Self::tile_items`]) as (sequence, tile); `broken` when there are no
    /// tiles (the kernel traps; no tile item exists then).
    #[inline(always)]
    pub fn tile_item(&self, item: u32, broken: fn() -> !) -> (u32, u32) {
        // `checked_*` keeps core's divide-by-zero panic path out of the PTX.
        let (Some(seq), Some(tile)) = (item.checked_div(self.n_chain_tiles), item.checked_rem(self.n_chain_tiles)) else { broken() };
        (seq, tile)
    }

    /// Row item `row_item` (= item − [`Self::tile_items`]) as (column pair, rem): row rem / 2 of
    /// product rem mod 2; `broken` when there are no value heads (the kernel traps; the host
    /// refuses such a step before).
    #[inline(always)]
    pub fn row_item(&self, row_item: u32, broken: fn() -> !) -> (u32, u32) {
        let row_items = self.row_items_per_pair();
        // `checked_*` keeps core's divide-by-zero panic path out of the PTX.
        let (Some(pair), Some(rem)) = (row_item.checked_div(row_items), row_item.checked_rem(row_items)) else { broken() };
        (pair, rem)
    }

    /// First-phase item `item`, None past the last one (`broken` as for [`Self::row_item`]).
    pub fn first_phase_item(&self, item: u32, broken: fn() -> !) -> Option<LayerStepItem> {
        if item < self.tile_items() {
            let (seq, tile) = self.tile_item(item, broken);
            return Some(LayerStepItem::Tile { seq, tile });
        }
        if item >= self.first_phase_items() {
            return None;
        }
        let (pair, rem) = self.row_item(item - self.tile_items(), broken);
        Some(LayerStepItem::Row { pair, row: rem / 2, product: rem % 2 })
    }

    /// The first-phase item lane `lane` of sequence `seq`'s value head `head`'s waiting warp
    /// waits for: lanes 0 … [`Self::waited_row_items`]`(seq)` − 1 the row items of row `head`
    /// over the sequence's column pairs (its pair lane / 2, product lane mod 2), the next three
    /// the sequence's conv tiles of its q, k and v heads; the other lanes none. `broken` when
    /// there are no key heads (the kernel traps; the host refuses such a step before).
    #[inline(always)]
    pub fn item_read_by(&self, seq: u32, head: u32, lane: u32, broken: fn() -> !) -> Option<u32> {
        let row_items = self.row_items_per_pair();
        let (first_pair, n_pairs) = self.seq_pairs(seq);
        let n_rows = 2 * n_pairs;
        let (h_k, tiles) = (self.chain_key_heads, self.n_chain_tiles);
        if lane < n_rows {
            return Some(self.tile_items() + (first_pair + lane / 2) * row_items + 2 * head + lane % 2);
        }
        // GATED_DELTA_NET's key head of value head `head` (`HeadViews::at`).
        let Some(key_head) = head.checked_rem(self.n_key_heads) else { broken() };
        // D = 128 = the tile width: q head kh is tile kh, k head kh tile H_k + kh, v head h tile
        // 2·H_k + h (channels q | k | v of conv_out).
        let first = seq * tiles;
        match lane - n_rows {
            0 => Some(first + key_head),
            1 => Some(first + h_k + key_head),
            2 => Some(first + 2 * h_k + head),
            _ => None,
        }
    }
}

/// The GDN_LAYER_STEP entry for a [`mul_mat_vec_kind`] of the alpha/beta weights and `d_conv`.
pub const fn gdn_layer_step_entry(kind: u32, d_conv: usize) -> Option<&'static str> {
    use mul_mat_vec_kind::*;
    Some(match (kind, d_conv) {
        (F32, 3) => entry_name!(gdn_layer_step, f32, 3),
        (F32, 4) => entry_name!(gdn_layer_step, f32, 4),
        (F32, 5) => entry_name!(gdn_layer_step, f32, 5),
        (BF16, 3) => entry_name!(gdn_layer_step, bf16, 3),
        (BF16, 4) => entry_name!(gdn_layer_step, bf16, 4),
        (BF16, 5) => entry_name!(gdn_layer_step, bf16, 5),
        (F16_HALF, 3) => entry_name!(gdn_layer_step, f16, 3),
        (F16_HALF, 4) => entry_name!(gdn_layer_step, f16, 4),
        (F16_HALF, 5) => entry_name!(gdn_layer_step, f16, 5),
        (F16_F32, 3) => entry_name!(gdn_layer_step, f16_f32acc, 3),
        (F16_F32, 4) => entry_name!(gdn_layer_step, f16_f32acc, 4),
        (F16_F32, 5) => entry_name!(gdn_layer_step, f16_f32acc, 5),
        _ => return None,
    })
}

/// [seq-batch] The GDN_LAYER_STEP entry of a small batch on the single-sequence items with two
/// column groups a warp (`gdn_layer_step_seqs_*`) for a [`mul_mat_vec_kind`] of the alpha/beta
/// weights and `d_conv`.
pub const fn gdn_layer_step_seqs_entry(kind: u32, d_conv: usize) -> Option<&'static str> {
    use mul_mat_vec_kind::*;
    Some(match (kind, d_conv) {
        (F32, 3) => entry_name!(gdn_layer_step_seqs, f32, 3),
        (F32, 4) => entry_name!(gdn_layer_step_seqs, f32, 4),
        (F32, 5) => entry_name!(gdn_layer_step_seqs, f32, 5),
        (BF16, 3) => entry_name!(gdn_layer_step_seqs, bf16, 3),
        (BF16, 4) => entry_name!(gdn_layer_step_seqs, bf16, 4),
        (BF16, 5) => entry_name!(gdn_layer_step_seqs, bf16, 5),
        (F16_HALF, 3) => entry_name!(gdn_layer_step_seqs, f16, 3),
        (F16_HALF, 4) => entry_name!(gdn_layer_step_seqs, f16, 4),
        (F16_HALF, 5) => entry_name!(gdn_layer_step_seqs, f16, 5),
        (F16_F32, 3) => entry_name!(gdn_layer_step_seqs, f16_f32acc, 3),
        (F16_F32, 4) => entry_name!(gdn_layer_step_seqs, f16_f32acc, 4),
        (F16_F32, 5) => entry_name!(gdn_layer_step_seqs, f16_f32acc, 5),
        _ => return None,
    })
}

/// [seq-batch] The batched GDN_LAYER_STEP entry (n_s ≥ 2 sequences) for a [`mul_mat_vec_kind`] of
/// the alpha/beta weights and `d_conv`.
pub const fn gdn_layer_step_batch_entry(kind: u32, d_conv: usize) -> Option<&'static str> {
    use mul_mat_vec_kind::*;
    Some(match (kind, d_conv) {
        (F32, 3) => entry_name!(gdn_layer_step_batch, f32, 3),
        (F32, 4) => entry_name!(gdn_layer_step_batch, f32, 4),
        (F32, 5) => entry_name!(gdn_layer_step_batch, f32, 5),
        (BF16, 3) => entry_name!(gdn_layer_step_batch, bf16, 3),
        (BF16, 4) => entry_name!(gdn_layer_step_batch, bf16, 4),
        (BF16, 5) => entry_name!(gdn_layer_step_batch, bf16, 5),
        (F16_HALF, 3) => entry_name!(gdn_layer_step_batch, f16, 3),
        (F16_HALF, 4) => entry_name!(gdn_layer_step_batch, f16, 4),
        (F16_HALF, 5) => entry_name!(gdn_layer_step_batch, f16, 5),
        (F16_F32, 3) => entry_name!(gdn_layer_step_batch, f16_f32acc, 3),
        (F16_F32, 4) => entry_name!(gdn_layer_step_batch, f16_f32acc, 4),
        (F16_F32, 5) => entry_name!(gdn_layer_step_batch, f16_f32acc, 5),
        _ => return None,
    })
}

/// \[replay\] The replay layer step's entry (GDN_LAYER_STEP_REPLAY: the window commit and the conv
/// chain, the products, and GATED_DELTA_NET_REPLAY_VERIFY's items in one cooperative launch) for
/// a [`mul_mat_vec_kind`] of the alpha/beta weights and `d_conv`.
pub const fn gdn_layer_step_replay_entry(kind: u32, d_conv: usize) -> Option<&'static str> {
    use mul_mat_vec_kind::*;
    Some(match (kind, d_conv) {
        (F32, 3) => entry_name!(gdn_layer_step_replay, f32, 3),
        (F32, 4) => entry_name!(gdn_layer_step_replay, f32, 4),
        (F32, 5) => entry_name!(gdn_layer_step_replay, f32, 5),
        (BF16, 3) => entry_name!(gdn_layer_step_replay, bf16, 3),
        (BF16, 4) => entry_name!(gdn_layer_step_replay, bf16, 4),
        (BF16, 5) => entry_name!(gdn_layer_step_replay, bf16, 5),
        (F16_HALF, 3) => entry_name!(gdn_layer_step_replay, f16, 3),
        (F16_HALF, 4) => entry_name!(gdn_layer_step_replay, f16, 4),
        (F16_HALF, 5) => entry_name!(gdn_layer_step_replay, f16, 5),
        (F16_F32, 3) => entry_name!(gdn_layer_step_replay, f16_f32acc, 3),
        (F16_F32, 4) => entry_name!(gdn_layer_step_replay, f16_f32acc, 4),
        (F16_F32, 5) => entry_name!(gdn_layer_step_replay, f16_f32acc, 5),
        _ => return None,
    })
}

/// \[replay\] GDN_LAYER_STEP_REPLAY's dynamic shared memory: the single-sequence layer step's
/// first phase ([`gdn_layer_step_shared_bytes`]: the conv chain's tile — the commit tile's is
/// the same layout — or a row item's reduction and staging) or a second-phase item's
/// (GATED_DELTA_NET_REPLAY_VERIFY's block with one group a warp,
/// [`replay_verify_shared_bytes`]), whichever is larger: a block barrier between items.
pub const fn gdn_layer_step_replay_shared_bytes(d_conv: usize, n_tokens: usize, log_tokens: usize) -> u32 {
    let first = gdn_layer_step_shared_bytes(d_conv, n_tokens);
    let second = replay_verify_shared_bytes(n_tokens, log_tokens, 1);
    if first > second { first } else { second }
}

/// \[replay\] GDN_LAYER_STEP_REPLAY: second-phase block items per (sequence, value head), each
/// GATED_DELTA_NET_REPLAY_VERIFY's block (h, s, z) with one column group a warp
/// ([`replay_verify_grid_z`]`(1)` = 4: 32 columns a block).
pub const REPLAY_STEP_ITEMS_PER_HEAD: u32 = replay_verify_grid_z(1);

param_struct! {
    /// \[replay\] GDN_LAYER_STEP_REPLAY's parameters, passed by value: the three fused ops' own
    /// parameter structs (GDN_CONV_CHAIN's with the window commit, the pair-gate's with
    /// `epilogue` = [`PAIR_EPILOGUE_GATE`], GATED_DELTA_NET_REPLAY_VERIFY's), the readiness state
    /// and the sizes the single-sequence layer step's items are derived from
    /// ([`LayerStepItems::of_replay`]). 1088 bytes, alignment 8, no padding.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct GdnLayerStepReplayParams {
        pub chain: GdnConvChainCommitParams,
        pub gate: MulMatVecPairGateParams,
        pub rv: GatedDeltaNetReplayVerifyParams,
        /// Device address of the cross-block readiness state ([`GRID_SYNC_BYTES`]).
        pub sync_state: u64,
        /// ggml's mul_mat_vec_f block size for the row length E (as [`GdnLayerStepParams`]).
        pub pair_block: u32,
        /// H_v: rows of each product and value heads.
        pub n_heads: u32,
        /// C / 128: conv-chain tiles of one sequence.
        pub n_chain_tiles: u32,
        /// n_t (1 ..= [`GDN_LAYER_STEP_MAX_TOKENS`]) per sequence.
        pub n_tokens: u32,
        /// n_s: sequences, each with its own items.
        pub n_seqs: u32,
        /// Zero; makes the size a multiple of 8.
        pub _pad: u32,
    }
}

/// GDN_LAYER_STEP: dynamic shared memory in bytes — the conv chain's tile and staging area,
/// which the mat-vec rows' reduction buffer ([`MUL_MAT_VEC_SHARED_BYTES`]) reuses (an item
/// uses one or the other, a block barrier between items).
pub const fn gdn_layer_step_shared_bytes(d_conv: usize, n_tokens: usize) -> u32 {
    let chain = gdn_conv_chain_shared_bytes(d_conv, n_tokens);
    let rows = MUL_MAT_VEC_SHARED_BYTES + GDN_LAYER_STEP_ROW_STAGE_BYTES;
    let most = if chain > rows { chain } else { rows };
    if most > GDN_LAYER_STEP_TOKEN_STAGE_BYTES { most } else { GDN_LAYER_STEP_TOKEN_STAGE_BYTES }
}

/// [layer-step] GDN_LAYER_STEP: shared bytes the second phase stages a block's token inputs in:
/// q and k of [`GDN_LAYER_STEP_MAX_TOKENS`] tokens (1 KiB each), then per warp 32 bytes per
/// token (its four columns' v, g, β).
pub const GDN_LAYER_STEP_TOKEN_STAGE_BYTES: u32 =
    GDN_LAYER_STEP_MAX_TOKENS as u32 * (2 * GDN_HEAD_DIM as u32 * 4 + GDN_LAYER_STEP_WARPS * 32);

/// [layer-step] GDN_LAYER_STEP: shared bytes a mat-vec row item stages its high virtual
/// threads' chunk in (after the reduction buffer): 8 iterations × (the weight + 2 columns) ×
/// 128 threads × 8 bytes.
pub const GDN_LAYER_STEP_ROW_STAGE_BYTES: u32 = 8 * (1 + GDN_LAYER_STEP_COLS as u32) * GDN_LAYER_STEP_BLOCK * 8;

/// [layer-step] Bytes of one staged token's q and k rows (the block's key head).
pub const LAYER_STEP_STAGE_QK_BYTES: u32 = 2 * GDN_HEAD_DIM as u32 * 4;

/// [layer-step] Bytes per (warp, token) of the staged v, g and β of a warp running `groups`
/// column groups per head: 4 v per group, then g and β, rounded up to a power of two (32 for one
/// group — the single-sequence layout — 64 for two).
pub const fn layer_step_stage_warp_token_bytes(groups: u32) -> u32 {
    (4 * (GDN_LAYER_STEP_GROUP_COLUMNS * groups + 2)).next_power_of_two()
}

// ---- [seq-batch] GDN_LAYER_STEP over n_s sequences: one persistent launch ----
/// [seq-batch] Most sequences one batched layer step takes.
pub const GDN_LAYER_STEP_MAX_SEQS: usize = 256;
/// [seq-batch] Value heads one batched mat-vec item computes (both products: twice as many rows).
pub const BATCH_ROW_HEADS: u32 = 4;
/// [seq-batch] Token columns one batched mat-vec item computes.
pub const BATCH_ROW_COLS: u32 = 4;
/// [seq-batch] Values one batched mat-vec item reduces: rows × columns (one per lane of a warp).
pub const BATCH_ROW_VALUES: u32 = 2 * BATCH_ROW_HEADS * BATCH_ROW_COLS;
const _: () = assert!(BATCH_ROW_VALUES == 32, "one warp's lanes hold the item's values after the reduce-scatter");
/// [seq-batch] Most column groups one warp runs in a second-phase item.
pub const BATCH_MAX_GROUPS_PER_WARP: u32 = 2;
/// [seq-batch] Most sequence chunks of a launch (one readiness counter each).
pub const BATCH_MAX_CHUNKS: usize = 256;
/// [seq-batch] Most sequences one first-phase conv item runs (side by side, in rounds of
/// [`batch_conv_round_seqs`]).
pub const BATCH_MAX_TILE_SEQS: u32 = 8;
/// [seq-batch] Shared bytes of a mat-vec item's cross-warp reduction buffer: 32 values × 8 virtual
/// warps.
pub const BATCH_ROW_REDUCE_BYTES: u32 = BATCH_ROW_VALUES * MUL_MAT_VEC_MAX_WARPS * 4;
/// [seq-batch] (speed) Iterations one warp's operand ring in a mat-vec item holds: the weight and
/// column pairs of its virtual warps' next iterations, copied with `cp.async` while the current
/// iteration accumulates (`mmvf::TileRing`: depth − 1 iterations in flight). Three blocks of
/// the d_conv 5, n_t = 16 layout fit a multiprocessor up to 4.
pub const BATCH_ROW_RING_DEPTH: u32 = 4;
/// [seq-batch] Shared bytes of one warp's operand ring: [`BATCH_ROW_RING_DEPTH`] iterations of 3
/// KiB (F32 weights: 8 weight pairs and 4 column pairs of 32 lanes; 16-bit weights use 2 KiB).
pub const BATCH_ROW_RING_WARP_BYTES: u32 = BATCH_ROW_RING_DEPTH * 3 * 1024;
/// [seq-batch] Shared bytes of a mat-vec item's operand rings, one per warp.
pub const BATCH_ROW_RING_BYTES: u32 = GDN_LAYER_STEP_WARPS * BATCH_ROW_RING_WARP_BYTES;
/// [seq-batch] Shared bytes of one second-phase item's initial state, per group a warp runs: 4 warps
/// × 4 columns × D floats.
pub const BATCH_STATE_BYTES_PER_GROUP: u32 = GDN_LAYER_STEP_WARPS * GDN_LAYER_STEP_GROUP_COLUMNS * GDN_HEAD_DIM as u32 * 4;

/// [seq-batch] Shared bytes of the batched layer step's copy of its parameters (the first bytes of
/// its dynamic shared memory): [`GdnLayerStepParams`], then at [`BATCH_WALK_OFFSET`] its
/// [`ScheduleWalk`] (both in the first KiB), then at [`BATCH_SOURCE_ROWS_OFFSET`] the table of
/// the sequences' ssm-cache source rows (`source_rows[s·stride]` at `+ 4s`, s < n_s ≤
/// [`GDN_LAYER_STEP_MAX_SEQS`]), then at [`BATCH_CONV_SOURCE_ROWS_OFFSET`] the same table of
/// their conv-cache source rows (the conv chain's `source_row[s·source_row_seq]`).
pub const BATCH_PARAMS_BYTES: u32 = 1024 + 2 * BATCH_SOURCE_ROWS_BYTES;
/// [seq-batch] Where the [`ScheduleWalk`] lies in the parameters' copy: after the parameters, 8-byte
/// aligned.
pub const BATCH_WALK_OFFSET: u32 = (size_of::<GdnLayerStepParams>() as u32).next_multiple_of(8);
/// [seq-batch] Where the source-row table lies in the parameters' copy.
pub const BATCH_SOURCE_ROWS_OFFSET: u32 = 1024;
/// [seq-batch] The source-row table's bytes: one u32 per sequence.
pub const BATCH_SOURCE_ROWS_BYTES: u32 = 4 * GDN_LAYER_STEP_MAX_SEQS as u32;
/// [seq-batch] Where the conv-cache source-row table lies in the parameters' copy.
pub const BATCH_CONV_SOURCE_ROWS_OFFSET: u32 = BATCH_SOURCE_ROWS_OFFSET + BATCH_SOURCE_ROWS_BYTES;
const _: () = assert!(BATCH_WALK_OFFSET as usize + size_of::<ScheduleWalk>() <= BATCH_SOURCE_ROWS_OFFSET as usize);
/// [seq-batch] Where block 0's thread 0 keeps the launch's target (a u64, read at the start and
/// used at the end) in the parameters' copy: after the walk, 8-byte aligned. (speed) Kept in
/// shared memory, not a register live through every item.
pub const BATCH_TARGET_OFFSET: u32 = (BATCH_WALK_OFFSET + size_of::<ScheduleWalk>() as u32).next_multiple_of(8);
const _: () = assert!(BATCH_TARGET_OFFSET + 8 <= BATCH_SOURCE_ROWS_OFFSET);
const _: () = assert!(align_of::<ScheduleWalk>() <= 8 && align_of::<GdnLayerStepParams>() <= 8);

/// [seq-batch] The batched layer step's dynamic shared memory: its parameters' copy, two
/// second-phase state buffers (the current item's and the next one's, in flight), then one area
/// the first-phase items (the conv tile, the mat-vec reduction) and the second phase's staged
/// token inputs share (a block barrier between items), then a second token stage (the next
/// second-phase item's token inputs, in flight while the current item runs).
///
/// A mat-vec item uses its own area instead ([`batch_rows_offset`]): the reduction buffer, then
/// the operand rings, from the second state buffer on, over the scratch area and the second
/// token stage; all of them are idle during a first-phase item. The memory is the larger of
/// the two layouts.
pub const fn gdn_layer_step_batch_shared_bytes(d_conv: usize, n_tokens: usize, groups_per_warp: u32) -> u32 {
    let items = batch_second_stage_offset(d_conv, n_tokens, groups_per_warp) + batch_token_stage_bytes(n_tokens);
    let rows = batch_rows_offset(groups_per_warp) + BATCH_ROW_REDUCE_BYTES + BATCH_ROW_RING_BYTES;
    BATCH_PARAMS_BYTES + if items > rows { items } else { rows }
}

/// [seq-batch] Where a mat-vec item's area starts, counted from the end of the parameters' copy:
/// the second state buffer (the first may hold the block's first second-phase state, copied
/// before the first phase). The item's reduction buffer ([`BATCH_ROW_REDUCE_BYTES`]) comes
/// first, then its operand rings ([`BATCH_ROW_RING_BYTES`], 16-byte aligned).
pub const fn batch_rows_offset(groups_per_warp: u32) -> u32 {
    groups_per_warp * BATCH_STATE_BYTES_PER_GROUP
}
const _: () = assert!(
    BATCH_ROW_REDUCE_BYTES.is_multiple_of(16) && BATCH_STATE_BYTES_PER_GROUP.is_multiple_of(16) && BATCH_PARAMS_BYTES.is_multiple_of(16)
);
// Three blocks per multiprocessor (228 KiB, 1 KiB reserved per block) at every n_t and groups.
const _: () =
    assert!(3 * (gdn_layer_step_batch_shared_bytes(5, GDN_LAYER_STEP_MAX_TOKENS, BATCH_MAX_GROUPS_PER_WARP) + 1024) <= 228 * 1024);
const _: () = assert!(3 * (gdn_layer_step_batch_shared_bytes(3, 1, BATCH_MAX_GROUPS_PER_WARP) + 1024) <= 228 * 1024);

/// [seq-batch] (speed) Sequences a conv item runs side by side
/// (`gdn_conv_chain_tiles_side_by_side`): as many conv tiles with their staging rows
/// ([`gdn_conv_chain_shared_bytes`] each) as the first-phase area holds — from the second state
/// buffer ([`batch_rows_offset`]) to the end of the block's shared memory, idle during a
/// first-phase item. At least one (asserted below for the largest tile).
pub const fn batch_conv_round_seqs(d_conv: usize, n_tokens: usize, groups_per_warp: u32) -> u32 {
    let area = gdn_layer_step_batch_shared_bytes(d_conv, n_tokens, groups_per_warp)
        .saturating_sub(BATCH_PARAMS_BYTES + batch_rows_offset(groups_per_warp));
    let n = div_or_zero(area, gdn_conv_chain_shared_bytes(d_conv, n_tokens));
    if n == 0 { 1 } else { n }
}
const _: () = assert!(
    MUL_MAT_VEC_SHARED_BYTES.is_multiple_of(8)
        && BATCH_ROW_REDUCE_BYTES + BATCH_ROW_RING_BYTES >= MUL_MAT_VEC_SHARED_BYTES + GDN_LAYER_STEP_ROW_STAGE_BYTES,
    "a one-row mat-vec item's reduction buffer and staging fit the first-phase area, the staging 8-byte aligned"
);
const _: () = assert!(
    BATCH_ROW_REDUCE_BYTES + BATCH_ROW_RING_BYTES >= gdn_conv_chain_shared_bytes(5, GDN_LAYER_STEP_MAX_TOKENS),
    "one conv tile of the largest layout fits the first-phase area"
);

/// [seq-batch] Where the second token stage starts, counted from the end of the parameters' copy:
/// after the scratch area.
pub const fn batch_second_stage_offset(d_conv: usize, n_tokens: usize, groups_per_warp: u32) -> u32 {
    batch_scratch_offset(groups_per_warp) + batch_scratch_bytes(d_conv, n_tokens)
}

/// [seq-batch] Shared bytes of one second-phase token stage: q, k of the step's `n_tokens` tokens,
/// then per warp and token the v, g, β of [`BATCH_MAX_GROUPS_PER_WARP`] groups. (speed) Sized
/// by n_t, not [`GDN_LAYER_STEP_MAX_TOKENS`]: the shared memory the blocks leave unused is the
/// multiprocessor's L1.
pub const fn batch_token_stage_bytes(n_tokens: usize) -> u32 {
    n_tokens as u32 * (LAYER_STEP_STAGE_QK_BYTES + GDN_LAYER_STEP_WARPS * layer_step_stage_warp_token_bytes(BATCH_MAX_GROUPS_PER_WARP))
}
// [seq-batch] The single-sequence entries' two-group column items stage their tokens in this
// layout at the start of the dynamic shared memory, which a row item's area bounds from below
// (`gdn_layer_step_shared_bytes`).
const _: () = assert!(batch_token_stage_bytes(GDN_LAYER_STEP_MAX_TOKENS) <= MUL_MAT_VEC_SHARED_BYTES + GDN_LAYER_STEP_ROW_STAGE_BYTES);

/// [seq-batch] Where the shared scratch area starts, counted from the end of the parameters' copy:
/// after the two state buffers.
pub const fn batch_scratch_offset(groups_per_warp: u32) -> u32 {
    2 * groups_per_warp * BATCH_STATE_BYTES_PER_GROUP
}

/// [seq-batch] The scratch area's bytes: the largest of the conv tile, the reduction buffer and one
/// token stage ([`batch_token_stage_bytes`]).
pub const fn batch_scratch_bytes(d_conv: usize, n_tokens: usize) -> u32 {
    let chain = gdn_conv_chain_shared_bytes(d_conv, n_tokens);
    let stage = batch_token_stage_bytes(n_tokens);
    let most = if chain > stage { chain } else { stage };
    if most > BATCH_ROW_REDUCE_BYTES { most } else { BATCH_ROW_REDUCE_BYTES }
}

param_struct! {
    /// [seq-batch] How a batched GDN_LAYER_STEP splits its work. The sequences run in chunks of
    /// `chunk_seqs`; see [`LayerStepSchedule`]. The single-sequence entries read only `n_seqs`
    /// (each sequence's own items, [`LayerStepItems`]) and `groups_per_warp` (2: two column
    /// groups a warp; every other field zero).
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct LayerStepBatchParams {
        /// n_s, 1 ..= [`GDN_LAYER_STEP_MAX_SEQS`].
        pub n_seqs: u32,
        /// Sequences per chunk (≥ 1; ⌈n_s / chunk_seqs⌉ ≤ [`BATCH_MAX_CHUNKS`]).
        pub chunk_seqs: u32,
        /// Sequences one conv item runs (side by side), 1 ..= [`BATCH_MAX_TILE_SEQS`].
        pub tile_seqs: u32,
        /// Column groups per warp in a second-phase item, 1 ..= [`BATCH_MAX_GROUPS_PER_WARP`].
        pub groups_per_warp: u32,
        /// The mat-vec items' kind: 0 — [`BATCH_ROW_HEADS`] value heads × both products ×
        /// [`BATCH_ROW_COLS`] columns ([`BatchItem::Rows`]); 1 — one row of one product ×
        /// [`GDN_LAYER_STEP_COLS`] columns ([`BatchItem::Row`], the single-sequence step's row
        /// item: 8× as many items, each one memory round trip).
        pub one_row_items: u32,
        pub _pad: u32,
    }
}

/// [seq-batch] One work item of the batched layer step ([`LayerStepSchedule::item`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchItem {
    /// First phase: conv-chain tile `tile` of sequences `first_seq … first_seq + n_seqs − 1`.
    Tiles { tile: u32, first_seq: u32, n_seqs: u32 },
    /// First phase: the products' rows of value heads `first_head … + n_heads − 1` (alpha with
    /// the gate epilogue and beta_raw with SIGMOID) for token columns `first_col … + n_cols − 1`.
    Rows { first_head: u32, n_heads: u32, first_col: u32, n_cols: u32 },
    /// First phase: row `head` of product `product` (0: alpha with the gate epilogue, 1:
    /// beta_raw with SIGMOID) for token columns `first_col … + n_cols − 1` (n_cols ≤
    /// [`GDN_LAYER_STEP_COLS`]).
    Row { product: u32, head: u32, first_col: u32, n_cols: u32 },
    /// Second phase: column groups `first_group …` (4 × groups per warp) of value head `head`
    /// of sequence `seq`.
    Groups { seq: u32, head: u32, first_group: u32 },
}

/// [seq-batch] `a / b`, 0 for b = 0 (the host never passes 0; no panic path in the kernels).
#[inline(always)]
pub const fn div_or_zero(a: u32, b: u32) -> u32 {
    match a.checked_div(b) {
        Some(q) => q,
        None => 0,
    }
}

/// [seq-batch] `a mod b`, 0 for b = 0 (as [`div_or_zero`]).
#[inline(always)]
pub const fn rem_or_zero(a: u32, b: u32) -> u32 {
    match a.checked_rem(b) {
        Some(r) => r,
        None => 0,
    }
}

/// [seq-batch] ⌈a / b⌉, 0 for b = 0 (as [`div_or_zero`]).
#[inline(always)]
pub const fn div_ceil_or_zero(a: u32, b: u32) -> u32 {
    let q = div_or_zero(a, b);
    if q * b < a { q + 1 } else { q }
}

/// [seq-batch] The batched layer step's work, as the kernel runs it and the host proves it: the
/// sequences in chunks c = 0, 1, … of `chunk_seqs`; chunk c's first-phase items (its conv
/// tiles, then its mat-vec items) and second-phase items (its column groups); and the order of
/// the segments: `P1(0), P1(1), P2(0), P1(2), P2(1), …, P2(last)` — every chunk's first phase
/// one segment before its second phase, so that a chunk's column groups find their inputs done
/// while the next chunk's inputs are made. Work item x of the launch is item x of that order;
/// block b of a grid of G runs items b, b + G, b + 2G, … A second-phase item waits for every
/// first-phase item of its chunk (the chunk's counter); every item it waits for comes before it
/// in the order, so with every block resident the lowest unfinished item can always run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LayerStepSchedule {
    pub n_seqs: u32,
    pub n_tokens: u32,
    pub n_heads: u32,
    pub n_chain_tiles: u32,
    pub chunk_seqs: u32,
    pub tile_seqs: u32,
    pub groups_per_warp: u32,
    /// The mat-vec items are [`BatchItem::Row`]s (else [`BatchItem::Rows`]).
    pub one_row_items: bool,
}

/// [seq-batch] A position in the schedule: segment `segment` (module order above), item `offset` in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchCursor {
    pub segment: u32,
    pub offset: u32,
}

impl LayerStepSchedule {
    /// The schedule of a launch with parameters `p`.
    #[inline(always)]
    pub const fn of(p: &GdnLayerStepParams) -> LayerStepSchedule {
        LayerStepSchedule {
            n_seqs: p.batch.n_seqs,
            n_tokens: p.n_tokens,
            n_heads: p.n_heads,
            n_chain_tiles: p.n_chain_tiles,
            chunk_seqs: p.batch.chunk_seqs,
            tile_seqs: p.batch.tile_seqs,
            groups_per_warp: p.batch.groups_per_warp,
            one_row_items: p.batch.one_row_items != 0,
        }
    }

    /// Chunks ⌈n_s / chunk_seqs⌉ (the host checks chunk_seqs ≥ 1).
    pub const fn n_chunks(&self) -> u32 {
        div_ceil_or_zero(self.n_seqs, self.chunk_seqs)
    }

    /// Chunk c's first sequence and sequence count.
    pub const fn chunk_seqs_of(&self, c: u32) -> (u32, u32) {
        let first = c * self.chunk_seqs;
        let end = if first + self.chunk_seqs < self.n_seqs { first + self.chunk_seqs } else { self.n_seqs };
        (first, end - first)
    }

    /// Mat-vec items per column block: the row blocks ⌈H_v / [`BATCH_ROW_HEADS`]⌉, or with one-row
    /// items the 2·H_v rows of both products.
    pub const fn row_blocks(&self) -> u32 {
        if self.one_row_items { 2 * self.n_heads } else { self.n_heads.div_ceil(BATCH_ROW_HEADS) }
    }

    /// Token columns a mat-vec item computes: [`BATCH_ROW_COLS`], or [`GDN_LAYER_STEP_COLS`] with
    /// one-row items.
    pub const fn row_cols(&self) -> u32 {
        if self.one_row_items { GDN_LAYER_STEP_COLS as u32 } else { BATCH_ROW_COLS }
    }

    /// Second-phase items per (sequence, head): 32 groups / (4 warps × groups per warp).
    pub const fn head_parts(&self) -> u32 {
        div_or_zero(GDN_LAYER_STEP_GROUPS_PER_HEAD, GDN_LAYER_STEP_WARPS * self.groups_per_warp)
    }

    /// Chunk c's conv items: ⌈m / tile_seqs⌉ sequence blocks × C/128 tiles.
    pub const fn tile_items(&self, c: u32) -> u32 {
        div_ceil_or_zero(self.chunk_seqs_of(c).1, self.tile_seqs) * self.n_chain_tiles
    }

    /// Chunk c's mat-vec items: ⌈m·n_t / [`Self::row_cols`]⌉ column blocks × [`Self::row_blocks`].
    pub const fn row_items(&self, c: u32) -> u32 {
        (self.chunk_seqs_of(c).1 * self.n_tokens).div_ceil(self.row_cols()) * self.row_blocks()
    }

    /// Chunk c's first-phase items (what its counter reaches).
    pub const fn first_items(&self, c: u32) -> u32 {
        self.tile_items(c) + self.row_items(c)
    }

    /// Chunk c's second-phase items.
    pub const fn second_items(&self, c: u32) -> u32 {
        self.chunk_seqs_of(c).1 * self.n_heads * self.head_parts()
    }

    /// Segments: 2 per chunk.
    pub const fn n_segments(&self) -> u32 {
        2 * self.n_chunks()
    }

    /// Segment i as (second phase?, chunk): 0 → P1(0); odd i < last → P1((i + 1) / 2); even
    /// i ≥ 2 → P2(i / 2 − 1); the last → P2(last chunk).
    pub const fn segment(&self, i: u32) -> (bool, u32) {
        let n = self.n_chunks();
        if i == 0 {
            (false, 0)
        } else if i + 1 == 2 * n {
            (true, n - 1)
        } else if i % 2 == 1 {
            (false, i.div_ceil(2))
        } else {
            (true, i / 2 - 1)
        }
    }

    /// Items of segment i.
    pub const fn segment_len(&self, i: u32) -> u32 {
        match self.segment(i) {
            (false, c) => self.first_items(c),
            (true, c) => self.second_items(c),
        }
    }

    /// Every item of the launch (the host checks that it fits u32).
    pub const fn total_items(&self) -> u32 {
        let mut total = 0;
        let mut i = 0;
        while i < self.n_segments() {
            total += self.segment_len(i);
            i += 1;
        }
        total
    }

    /// The cursor of item `item` counted from `from` (None past the last segment).
    #[inline(always)]
    pub const fn advance(&self, from: BatchCursor, by: u32) -> Option<BatchCursor> {
        let (mut segment, mut offset) = (from.segment, from.offset + by);
        while segment < self.n_segments() {
            let len = self.segment_len(segment);
            if offset < len {
                return Some(BatchCursor { segment, offset });
            }
            offset -= len;
            segment += 1;
        }
        None
    }

    /// The item at `at` and its chunk.
    #[inline(always)]
    pub const fn item(&self, at: BatchCursor) -> (BatchItem, u32) {
        let (second, c) = self.segment(at.segment);
        let (first_seq, m) = self.chunk_seqs_of(c);
        let o = at.offset;
        if second {
            let per_seq = self.n_heads * self.head_parts();
            let (seq, rem) = (div_or_zero(o, per_seq), rem_or_zero(o, per_seq));
            let (head, part) = (div_or_zero(rem, self.head_parts()), rem_or_zero(rem, self.head_parts()));
            let first_group = part * GDN_LAYER_STEP_WARPS * self.groups_per_warp;
            return (BatchItem::Groups { seq: first_seq + seq, head, first_group }, c);
        }
        let tiles = self.tile_items(c);
        if o < tiles {
            let (block, tile) = (div_or_zero(o, self.n_chain_tiles), rem_or_zero(o, self.n_chain_tiles));
            let s0 = block * self.tile_seqs;
            let n = if s0 + self.tile_seqs < m { self.tile_seqs } else { m - s0 };
            return (BatchItem::Tiles { tile, first_seq: first_seq + s0, n_seqs: n }, c);
        }
        let o = o - tiles;
        let (col_block, row_block) = (div_or_zero(o, self.row_blocks()), rem_or_zero(o, self.row_blocks()));
        (rows_item(self, first_seq, m, col_block, row_block), c)
    }
}

/// [seq-batch] The mat-vec item of column block `col_block` and row block `row_block` of the chunk
/// of sequences `first_seq … + m − 1` ([`LayerStepSchedule::item`] and [`ScheduleWalk::item`]).
/// One-row items: row block r is row r / 2 of product r mod 2 (the product fastest, as the
/// single-sequence step's row items).
#[inline(always)]
const fn rows_item(s: &LayerStepSchedule, first_seq: u32, m: u32, col_block: u32, row_block: u32) -> BatchItem {
    let chunk_cols = m * s.n_tokens;
    let cols = s.row_cols();
    let c0 = col_block * cols;
    let n_cols = if c0 + cols < chunk_cols { cols } else { chunk_cols - c0 };
    let first_col = first_seq * s.n_tokens + c0;
    if s.one_row_items {
        return BatchItem::Row { product: row_block % 2, head: row_block / 2, first_col, n_cols };
    }
    let first_head = row_block * BATCH_ROW_HEADS;
    let n_heads = if first_head + BATCH_ROW_HEADS < s.n_heads { BATCH_ROW_HEADS } else { s.n_heads - first_head };
    BatchItem::Rows { first_head, n_heads, first_col, n_cols }
}

/// (speed) `n / d` and `n mod d` for a divisor fixed per launch: one multiply-high and one
/// correction step instead of the division sequence a runtime divisor costs (≈ 20 dependent
/// instructions each), exact for every u32 `n` and every `d` ≥ 1; `d` = 0 gives (0, 0), as
/// [`div_or_zero`] and [`rem_or_zero`].
///
/// Why one correction is enough: `m` = ⌊(2³² − 1)/d⌋ lies in [(2³² − d)/d, 2³²/d), so
/// q₀ = ⌊n·m / 2³²⌋ satisfies n/d − 1 < n/d − n/2³² ≤ n·m/2³² < n/d (n < 2³²), hence q₀ is
/// ⌊n/d⌋ or ⌊n/d⌋ − 1, and n − q₀·d < 2d.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Divisor {
    d: u32,
    m: u32,
}

impl Divisor {
    /// The divisor `d` with its multiplier.
    pub const fn new(d: u32) -> Divisor {
        match u32::MAX.checked_div(d) {
            Some(m) => Divisor { d, m },
            None => Divisor { d: 0, m: 0 },
        }
    }

    /// (⌊n / d⌋, n mod d); (0, 0) for d = 0.
    #[inline(always)]
    pub const fn div_rem(&self, n: u32) -> (u32, u32) {
        if self.d == 0 {
            return (0, 0);
        }
        let q = ((n as u64 * self.m as u64) >> 32) as u32;
        // q ≤ ⌊n/d⌋, so q·d ≤ n: no wrap.
        let r = n - q * self.d;
        if r >= self.d { (q + 1, r - self.d) } else { (q, r) }
    }
}

/// [seq-batch] (speed) A [`LayerStepSchedule`] with what decoding an item needs prepared once per
/// block: the item counts of a full chunk and of the last one, and every runtime divisor as a
/// [`Divisor`]. [`ScheduleWalk::advance`] and [`ScheduleWalk::item`] return exactly what
/// [`LayerStepSchedule::advance`] and [`LayerStepSchedule::item`] return (tests/schedule.rs walks
/// both over many shapes and grids); the kernel walks with this one, the host's proofs with the
/// plain one. Before it, decoding (segment lengths recomputed with divisions at every step, each
/// item decoded twice) was ≈ 22 % of the batched step's stall samples at n_s = 64, T = 4.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScheduleWalk {
    pub schedule: LayerStepSchedule,
    n_chunks: u32,
    /// Sequences of the last chunk.
    last_seqs: u32,
    /// Conv items, first-phase items and second-phase items of a full chunk, then of the last.
    tiles_full: u32,
    first_full: u32,
    second_full: u32,
    tiles_last: u32,
    first_last: u32,
    second_last: u32,
    /// Second-phase items per sequence: H_v × head parts.
    per_seq: Divisor,
    head_parts: Divisor,
    chain_tiles: Divisor,
    row_blocks: Divisor,
}

impl ScheduleWalk {
    /// The walk of `s`.
    pub const fn of(s: LayerStepSchedule) -> ScheduleWalk {
        let n_chunks = s.n_chunks();
        let last = if n_chunks == 0 { 0 } else { n_chunks - 1 };
        ScheduleWalk {
            schedule: s,
            n_chunks,
            last_seqs: s.chunk_seqs_of(last).1,
            tiles_full: s.tile_items(0),
            first_full: s.first_items(0),
            second_full: s.second_items(0),
            tiles_last: s.tile_items(last),
            first_last: s.first_items(last),
            second_last: s.second_items(last),
            per_seq: Divisor::new(s.n_heads * s.head_parts()),
            head_parts: Divisor::new(s.head_parts()),
            chain_tiles: Divisor::new(s.n_chain_tiles),
            row_blocks: Divisor::new(s.row_blocks()),
        }
    }

    /// [`LayerStepSchedule::n_chunks`].
    #[inline(always)]
    pub const fn n_chunks(&self) -> u32 {
        self.n_chunks
    }

    /// [`LayerStepSchedule::first_items`] (for c < the chunks).
    #[inline(always)]
    pub const fn first_items(&self, c: u32) -> u32 {
        if c + 1 == self.n_chunks { self.first_last } else { self.first_full }
    }

    /// [`LayerStepSchedule::segment_len`].
    #[inline(always)]
    pub const fn segment_len(&self, i: u32) -> u32 {
        let (second, c) = self.schedule.segment(i);
        let last = c + 1 == self.n_chunks;
        match (second, last) {
            (false, false) => self.first_full,
            (false, true) => self.first_last,
            (true, false) => self.second_full,
            (true, true) => self.second_last,
        }
    }

    /// [`LayerStepSchedule::advance`].
    #[inline(always)]
    pub const fn advance(&self, from: BatchCursor, by: u32) -> Option<BatchCursor> {
        let (mut segment, mut offset) = (from.segment, from.offset + by);
        while segment < 2 * self.n_chunks {
            let len = self.segment_len(segment);
            if offset < len {
                return Some(BatchCursor { segment, offset });
            }
            offset -= len;
            segment += 1;
        }
        None
    }

    /// [`LayerStepSchedule::item`].
    #[inline(always)]
    pub const fn item(&self, at: BatchCursor) -> (BatchItem, u32) {
        let s = &self.schedule;
        let (second, c) = s.segment(at.segment);
        let last = c + 1 == self.n_chunks;
        let first_seq = c * s.chunk_seqs;
        let m = if last { self.last_seqs } else { s.chunk_seqs };
        let o = at.offset;
        if second {
            let (seq, rem) = self.per_seq.div_rem(o);
            let (head, part) = self.head_parts.div_rem(rem);
            let first_group = part * GDN_LAYER_STEP_WARPS * s.groups_per_warp;
            return (BatchItem::Groups { seq: first_seq + seq, head, first_group }, c);
        }
        let tiles = if last { self.tiles_last } else { self.tiles_full };
        if o < tiles {
            let (block, tile) = self.chain_tiles.div_rem(o);
            let s0 = block * s.tile_seqs;
            let n = if s0 + s.tile_seqs < m { s.tile_seqs } else { m - s0 };
            return (BatchItem::Tiles { tile, first_seq: first_seq + s0, n_seqs: n }, c);
        }
        let (col_block, row_block) = self.row_blocks.div_rem(o - tiles);
        (rows_item(s, first_seq, m, col_block, row_block), c)
    }
}

param_struct! {
    /// GDN_LAYER_STEP's parameters, passed by value: the three fused ops' own parameter structs
    /// (each exactly what its kernel would take: the conv chain's, the pair-gate's with
    /// `epilogue` = [`PAIR_EPILOGUE_GATE`], GATED_DELTA_NET_FROM_CACHE's), the cross-block
    /// readiness state, the work split, and [seq-batch] the batched entries' schedule. 784 bytes,
    /// alignment 8, no padding.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct GdnLayerStepParams {
        pub chain: GdnConvChainParams,
        pub gate: MulMatVecPairGateParams,
        pub gdn: GatedDeltaNetFromCacheParams,
        /// Device address of the cross-block readiness state ([`GRID_SYNC_BYTES`],
        /// `device/grid.rs`).
        pub sync_state: u64,
        /// ggml's mul_mat_vec_f block size for the row length E (32 … 256, a multiple of 32):
        /// the thread count whose partial sums and reduction the mat-vec rows reproduce.
        pub pair_block: u32,
        /// H_v: rows of each product (alpha, beta_raw) and value heads of GATED_DELTA_NET.
        pub n_heads: u32,
        /// C / 128: conv-chain tiles.
        pub n_chain_tiles: u32,
        /// n_t (1 ..= [`GDN_LAYER_STEP_MAX_TOKENS`]) per sequence.
        pub n_tokens: u32,
        /// [seq-batch] The batched entries' schedule; the single-sequence entries read only its
        /// `n_seqs` (the sequences whose own items they run, [`LayerStepItems`]) and
        /// `groups_per_warp` (2: two column groups a warp as one recurrence; else one).
        pub batch: LayerStepBatchParams,
    }
}

// ---- the entry table ----

/// Every entry, with the size and alignment of the parameter struct it takes.
pub const ENTRIES: &[EntrySig] = &ENTRY_TABLE;

const LISTED_ENTRIES: &[EntrySig] = &[
    EntrySig::of::<GetRowsParams>(GET_ROWS_ENTRY),
    EntrySig::of::<ConcatDim0Params>(CONCAT_DIM0_ENTRY),
    EntrySig::of::<ConcatFlatParams>(CONCAT_FLAT_ENTRY),
    EntrySig::of::<CpyParams>(CPY_ENTRY),
    EntrySig::of::<CpySnapshotsParams>(CPY_SNAPSHOTS_ENTRY),
    EntrySig::of::<ScaleParams>(SCALE_ENTRY),
    EntrySig::of::<SsmConvParams>(entry_name!(ssm_conv, 3)),
    EntrySig::of::<SsmConvParams>(entry_name!(ssm_conv, 4)),
    EntrySig::of::<SsmConvParams>(entry_name!(ssm_conv, 5)),
    EntrySig::of::<SsmConvParams>(entry_name!(ssm_conv, 9)),
    EntrySig::of::<SsmConvParams>(entry_name!(ssm_conv, 15)),
    EntrySig::of::<SsmConvParams>(entry_name!(ssm_conv_silu, 3)),
    EntrySig::of::<SsmConvParams>(entry_name!(ssm_conv_silu, 4)),
    EntrySig::of::<SsmConvParams>(entry_name!(ssm_conv_silu, 5)),
    EntrySig::of::<SsmConvParams>(entry_name!(ssm_conv_silu, 9)),
    EntrySig::of::<SsmConvParams>(entry_name!(ssm_conv_silu, 15)),
    EntrySig::of::<L2NormParams>(L2_NORM_ENTRY),
    EntrySig::of::<UnaryParams>(entry_name!(unary_sigmoid)),
    EntrySig::of::<UnaryParams>(entry_name!(unary_softplus)),
    EntrySig::of::<UnaryParams>(entry_name!(unary_silu)),
    EntrySig::of::<UnaryParams>(entry_name!(unary_exp)),
    EntrySig::of::<UnaryMulParams>(UNARY_SOFTPLUS_MUL_ENTRY),
    EntrySig::of::<BinaryParams>(entry_name!(binary_add)),
    EntrySig::of::<BinaryParams>(entry_name!(binary_mul)),
    EntrySig::of::<GdnConvChainParams>(entry_name!(gdn_conv_chain, 3)),
    EntrySig::of::<GdnConvChainParams>(entry_name!(gdn_conv_chain, 4)),
    EntrySig::of::<GdnConvChainParams>(entry_name!(gdn_conv_chain, 5)),
    EntrySig::of::<GdnConvChainParams>(entry_name!(gdn_conv_chain_t4, 3)),
    EntrySig::of::<GdnConvChainParams>(entry_name!(gdn_conv_chain_t4, 4)),
    EntrySig::of::<GdnConvChainParams>(entry_name!(gdn_conv_chain_t4, 5)),
    EntrySig::of::<MulMatVecPairTilesParams>("mul_mat_vec_pair_tiles_f32"),
    EntrySig::of::<MulMatVecPairTilesParams>("mul_mat_vec_pair_tiles_bf16"),
    EntrySig::of::<MulMatVecPairTilesParams>("mul_mat_vec_pair_tiles_f16"),
    EntrySig::of::<MulMatVecPairTilesParams>("mul_mat_vec_pair_tiles_f16_f32acc"),
    EntrySig::of::<GdnConvChainCommitParams>(entry_name!(gdn_conv_chain_commit, 3)),
    EntrySig::of::<GdnConvChainCommitParams>(entry_name!(gdn_conv_chain_commit, 4)),
    EntrySig::of::<GdnConvChainCommitParams>(entry_name!(gdn_conv_chain_commit, 5)),
    EntrySig::of::<MulMatVecPairTilesParams>("mul_mat_vec_pair_tiles_f32_overlap"),
    EntrySig::of::<MulMatVecPairTilesParams>("mul_mat_vec_pair_tiles_bf16_overlap"),
    EntrySig::of::<MulMatVecPairTilesParams>("mul_mat_vec_pair_tiles_f16_overlap"),
    EntrySig::of::<MulMatVecPairTilesParams>("mul_mat_vec_pair_tiles_f16_f32acc_overlap"),
    EntrySig::of::<MulMatVecPairTilesParams>("mul_mat_vec_pair_tiles_wide_f32"),
    EntrySig::of::<MulMatVecPairTilesParams>("mul_mat_vec_pair_tiles_wide_bf16"),
    EntrySig::of::<MulMatVecPairTilesParams>("mul_mat_vec_pair_tiles_wide_f16"),
    EntrySig::of::<MulMatVecPairTilesParams>("mul_mat_vec_pair_tiles_wide_f16_f32acc"),
    EntrySig::of::<MulMatVecPairTilesParams>("mul_mat_vec_pair_tiles_wide_f32_overlap"),
    EntrySig::of::<MulMatVecPairTilesParams>("mul_mat_vec_pair_tiles_wide_bf16_overlap"),
    EntrySig::of::<MulMatVecPairTilesParams>("mul_mat_vec_pair_tiles_wide_f16_overlap"),
    EntrySig::of::<MulMatVecPairTilesParams>("mul_mat_vec_pair_tiles_wide_f16_f32acc_overlap"),
    EntrySig::of::<GdnConvChainCommitParams>(entry_name!(gdn_conv_chain_commit_overlap, 3)),
    EntrySig::of::<GdnConvChainCommitParams>(entry_name!(gdn_conv_chain_commit_overlap, 4)),
    EntrySig::of::<GdnConvChainCommitParams>(entry_name!(gdn_conv_chain_commit_overlap, 5)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step, f32, 3)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step, f32, 4)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step, f32, 5)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step, bf16, 3)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step, bf16, 4)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step, bf16, 5)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step, f16, 3)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step, f16, 4)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step, f16, 5)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step, f16_f32acc, 3)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step, f16_f32acc, 4)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step, f16_f32acc, 5)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step_batch, f32, 3)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step_batch, f32, 4)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step_batch, f32, 5)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step_batch, bf16, 3)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step_batch, bf16, 4)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step_batch, bf16, 5)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step_batch, f16, 3)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step_batch, f16, 4)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step_batch, f16, 5)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step_batch, f16_f32acc, 3)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step_batch, f16_f32acc, 4)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step_batch, f16_f32acc, 5)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step_seqs, f32, 3)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step_seqs, f32, 4)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step_seqs, f32, 5)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step_seqs, bf16, 3)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step_seqs, bf16, 4)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step_seqs, bf16, 5)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step_seqs, f16, 3)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step_seqs, f16, 4)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step_seqs, f16, 5)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step_seqs, f16_f32acc, 3)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step_seqs, f16_f32acc, 4)),
    EntrySig::of::<GdnLayerStepParams>(entry_name!(gdn_layer_step_seqs, f16_f32acc, 5)),
    EntrySig::of::<GdnLayerStepReplayParams>(entry_name!(gdn_layer_step_replay, f32, 3)),
    EntrySig::of::<GdnLayerStepReplayParams>(entry_name!(gdn_layer_step_replay, f32, 4)),
    EntrySig::of::<GdnLayerStepReplayParams>(entry_name!(gdn_layer_step_replay, f32, 5)),
    EntrySig::of::<GdnLayerStepReplayParams>(entry_name!(gdn_layer_step_replay, bf16, 3)),
    EntrySig::of::<GdnLayerStepReplayParams>(entry_name!(gdn_layer_step_replay, bf16, 4)),
    EntrySig::of::<GdnLayerStepReplayParams>(entry_name!(gdn_layer_step_replay, bf16, 5)),
    EntrySig::of::<GdnLayerStepReplayParams>(entry_name!(gdn_layer_step_replay, f16, 3)),
    EntrySig::of::<GdnLayerStepReplayParams>(entry_name!(gdn_layer_step_replay, f16, 4)),
    EntrySig::of::<GdnLayerStepReplayParams>(entry_name!(gdn_layer_step_replay, f16, 5)),
    EntrySig::of::<GdnLayerStepReplayParams>(entry_name!(gdn_layer_step_replay, f16_f32acc, 3)),
    EntrySig::of::<GdnLayerStepReplayParams>(entry_name!(gdn_layer_step_replay, f16_f32acc, 4)),
    EntrySig::of::<GdnLayerStepReplayParams>(entry_name!(gdn_layer_step_replay, f16_f32acc, 5)),
    EntrySig::of::<MathProbeParams>(MATH_PROBE_ENTRY),
    EntrySig::of::<CountMismatchesParams>(COUNT_MISMATCHES_ENTRY),
    EntrySig::of::<MufuEvalParams>(MUFU_EVAL_ENTRY),
    EntrySig::of::<GatedDeltaNetParams>(GATED_DELTA_NET_ENTRY),
    EntrySig::of::<GatedDeltaNetFromCacheParams>(GATED_DELTA_NET_FROM_CACHE_ENTRY),
    EntrySig::of::<GatedDeltaNetFromCacheParams>(GATED_DELTA_NET_FROM_CACHE_BATCH_ENTRY),
    EntrySig::of::<GatedDeltaNetReplayParams>(GATED_DELTA_NET_REPLAY_ENTRY),
    EntrySig::of::<GatedDeltaNetReplayVerifyParams>(GATED_DELTA_NET_REPLAY_VERIFY_ENTRY),
    EntrySig::of::<GatedDeltaNetReplayVerifyParams>(GATED_DELTA_NET_REPLAY_VERIFY_OVERLAP_ENTRY),
];

/// The MUL_MAT_VEC and MUL_MAT_VEC_PAIR entries (names from [`mul_mat_vec_entry`] and
/// [`mul_mat_vec_pair_entry`]): 4 kinds × 8 columns each.
const MUL_MAT_VEC_ENTRIES: usize = 4 * MUL_MAT_VEC_MAX_COLS;

const ENTRY_TABLE: [EntrySig; LISTED_ENTRIES.len() + 2 * MUL_MAT_VEC_ENTRIES] = {
    let mut table = [EntrySig { name: "", param_size: 0, param_align: 0 }; LISTED_ENTRIES.len() + 2 * MUL_MAT_VEC_ENTRIES];
    let mut i = 0;
    while i < LISTED_ENTRIES.len() {
        table[i] = LISTED_ENTRIES[i];
        i += 1;
    }
    use mul_mat_vec_kind::*;
    let kinds = [F32, BF16, F16_HALF, F16_F32];
    let mut k = 0;
    while k < kinds.len() {
        let mut ncols = 1;
        while ncols <= MUL_MAT_VEC_MAX_COLS {
            let Some(name) = mul_mat_vec_entry(kinds[k], ncols) else { panic!("every kind and column count has an entry") };
            table[i] = EntrySig::of::<MulMatVecParams>(name);
            let Some(name) = mul_mat_vec_pair_entry(kinds[k], ncols) else { panic!("every kind and column count has a pair entry") };
            table[i + 1] = EntrySig::of::<MulMatVecPairGateParams>(name);
            i += 2;
            ncols += 1;
        }
        k += 1;
    }
    table
};
