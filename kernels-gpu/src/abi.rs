//! What the host and the kernels must agree on: block sizes, supported specialisations and the
//! names of the PTX entry points. Kept free of intrinsics and of `core`-only items so that the
//! host crate includes this very file (`#[path]`), giving every constant one source of truth.
//! `tests/ptx.rs` checks that every name listed here is an entry of the built PTX.

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
        (3, false) => "ssm_conv_f32_d3",
        (4, false) => "ssm_conv_f32_d4",
        (5, false) => "ssm_conv_f32_d5",
        (9, false) => "ssm_conv_f32_d9",
        (15, false) => "ssm_conv_f32_d15",
        (3, true) => "ssm_conv_f32_d3_silu",
        (4, true) => "ssm_conv_f32_d4_silu",
        (5, true) => "ssm_conv_f32_d5_silu",
        (9, true) => "ssm_conv_f32_d9_silu",
        (15, true) => "ssm_conv_f32_d15_silu",
        _ => return None,
    })
}

pub const L2_NORM_ENTRY: &str = "l2_norm_f32";

/// Test-support kernels (GPU suite only): math parity probes and the MUFU oracle.
pub const MATH_PROBE_ENTRY: &str = "test_math_probe_f32";
pub const COUNT_MISMATCHES_ENTRY: &str = "test_count_mismatches_u32";
pub const MUFU_EVAL_ENTRY: &str = "test_mufu_eval_f32";

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

// ---- [unary] unary and binary element-wise ops ----

// ---- [mmvf] MUL_MAT_VEC ----

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
