//! CPU references: one file per op, each in the kernel's exact float-operation order, built on
//! [`math`] (bit-exact `.ftz` arithmetic and pluggable MUFU results).

pub mod l2_norm;
pub mod math;
pub mod ssm_conv;

// [copies]

// [unary]

// [mmvf]

// [gdn]
pub mod gated_delta_net;
