//! One GDN layer's verify step, as data: sizes and presets, the step's cache bookkeeping
//! ([`shape`]), and its tensors with the views ggml takes of them ([`tensors`]). Every builder
//! that wires them into ops — the unfused chain ([`crate::graph::layer::unfused_ops`]), ggml's
//! graph, whole stacks — lives in [`crate::graph`]; this module imports nothing from there.

pub mod shape;
pub mod tensors;

pub use shape::{GdnShape, MAX_GRAPH_TOKENS, MAX_ROLLBACK, MAX_SEQS, MAX_TOKENS, Sequences, Step};
pub use tensors::{LAYER_TENSORS, LayerInit, LayerTensors, TableDims, TensorKind};
