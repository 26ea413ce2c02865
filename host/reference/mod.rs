//! CPU references: one file per op, each in the kernel's exact float-operation order, built on
//! [`math`] (bit-exact `.ftz` arithmetic and pluggable MUFU results).

pub mod l2_norm;
pub mod math;
pub mod ssm_conv;

// [copies]
pub mod concat;
pub mod cpy;
pub mod get_rows;
pub mod scale;

// [unary]
pub mod binary;
pub mod unary;

// [mmvf]
pub mod mmvf;

// [gdn]
pub mod gated_delta_net;

// [convchain]
pub mod gdn_conv_chain;
