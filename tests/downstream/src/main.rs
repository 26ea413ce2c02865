//! The example `examples/fused_step.rs`, built here as a downstream crate would build it: on
//! stable Rust, against rgdn with `default-features = false`.
include!("../../../examples/fused_step.rs");
