//! One GDN layer's verify step: sizes and presets ([`shape`]), and the unfused chain of kernels
//! ggml's CUDA backend runs for it ([`unfused`]), the reference every fusion must equal.

pub mod shape;
pub mod unfused;

pub use shape::{GdnShape, MAX_GRAPH_TOKENS, MAX_ROLLBACK, MAX_TOKENS, Step};
pub use unfused::{LayerInit, LayerTensors, MAT_VEC_MAX_COLS, unfused_ops};
