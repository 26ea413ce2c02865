//! The built PTX module and the entry-point table shared with the device crate.

/// What host and kernels agree on (block sizes, entry names): the device crate's own file.
#[path = "../kernels-gpu/src/abi.rs"]
pub mod abi;

/// The PTX of every rgdn kernel, built from `kernels-gpu/` by `build.rs`.
pub const PTX: &str = include_str!(env!("RGDN_PTX_PATH"));

/// The GPU architecture the PTX targets (`RGDN_CUDA_ARCH` at build time, default sm_90).
pub const PTX_ARCH: &str = env!("RGDN_PTX_ARCH");

/// Where [`PTX`] came from: `"source"` (built from `kernels-gpu/` by the nightly kernel
/// toolchain) or `"committed"` (`kernels-gpu/ptx/<arch>.ptx`, when that toolchain is absent, e.g.
/// on stable Rust). `tests/ptx_committed.rs` keeps the two byte-identical.
pub const PTX_ORIGIN: &str = env!("RGDN_PTX_ORIGIN");

/// Every entry point the host may launch; `tests/ptx.rs` checks each is in [`PTX`].
pub fn all_entries() -> Vec<&'static str> {
    let mut entries = Vec::new();
    for d in abi::SSM_CONV_WIDTHS {
        for silu in [false, true] {
            entries.extend(abi::ssm_conv_entry(d, silu));
        }
    }
    entries.push(abi::L2_NORM_ENTRY);
    entries.extend([abi::MATH_PROBE_ENTRY, abi::COUNT_MISMATCHES_ENTRY, abi::MUFU_EVAL_ENTRY]);

    // [copies]
    entries.extend([abi::GET_ROWS_ENTRY, abi::CONCAT_DIM0_ENTRY, abi::CPY_ENTRY, abi::CPY_SNAPSHOTS_ENTRY, abi::SCALE_ENTRY]);

    // [unary]
    entries.extend((0..4).filter_map(abi::unary_entry));
    entries.extend((0..2).filter_map(abi::binary_entry));

    // [mmvf]
    for kind in [abi::mul_mat_vec_kind::F32, abi::mul_mat_vec_kind::BF16, abi::mul_mat_vec_kind::F16_HALF, abi::mul_mat_vec_kind::F16_F32] {
        for ncols in 1..=abi::MUL_MAT_VEC_MAX_COLS {
            entries.extend(abi::mul_mat_vec_entry(kind, ncols));
        }
    }

    // [gdn]
    entries.push(abi::GATED_DELTA_NET_ENTRY);

    // [convchain]
    entries.extend(abi::GDN_CONV_CHAIN_WIDTHS.iter().filter_map(|&d| abi::gdn_conv_chain_entry(d)));

    // [mmvf-pair]
    for kind in [abi::mul_mat_vec_kind::F32, abi::mul_mat_vec_kind::BF16, abi::mul_mat_vec_kind::F16_HALF, abi::mul_mat_vec_kind::F16_F32] {
        for ncols in 1..=abi::MUL_MAT_VEC_MAX_COLS {
            entries.extend(abi::mul_mat_vec_pair_entry(kind, ncols));
        }
    }

    // [speed]
    entries.extend([abi::CONCAT_FLAT_ENTRY, abi::UNARY_SOFTPLUS_MUL_ENTRY]);

    entries
}

/// Names of the `.entry` functions in [`PTX`].
pub fn ptx_entries() -> Vec<&'static str> {
    PTX.lines()
        .filter_map(|l| l.trim_start().strip_prefix(".visible .entry "))
        .map(|rest| rest.split('(').next().unwrap_or(rest).trim())
        .collect()
}
