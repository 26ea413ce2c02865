//! # rgdn — exactness-preserving GPU kernels for Gated-DeltaNet layers, in Rust
//!
//! Speculative decoding of Gated-DeltaNet models (Qwen3.5 and kin) verifies 1–16 tokens of one
//! sequence per step. rgdn rebuilds ggml's CUDA kernels for that step in Rust — device code in
//! `kernels-gpu/` (compiled to PTX by rustc's nvptx64 backend), launched from here with cudarc —
//! reproducing ggml's `-use_fast_math` float-operation order bit for bit, so that fused kernels
//! can be proven byte-identical to the unfused chain.
//!
//! - [`tensor`]: ggml-style views (buffer, byte offset, `ne[4]`, `nb[4]`);
//! - [`memory`]: host and device buffers under the same ids;
//! - [`gpu`]: driver probe and the single launch path;
//! - [`ops`]: one validated wrapper per kernel; [`reference`]: one CPU reference per kernel;
//! - [`kernels`]: the embedded PTX and the entry table shared with the device crate;
//! - [`layer`]: Qwen3.5 shapes and the unfused chain of one GDN layer's verify step;
//! - [`suite`]: the op suite (named cases, GPU vs reference byte for byte, math parity).

pub mod engine;
pub mod error;
pub mod gpu;
pub mod kernels;
pub mod layer;
pub mod memory;
pub mod ops;
pub mod reference;
#[cfg(feature = "suite")]
pub mod suite;
pub mod tensor;

pub use error::{Error, Result};

// [bench]
#[cfg(feature = "bench")]
pub mod bench;
pub mod inputs;
#[cfg(feature = "cli")]
pub mod main_job;

// [graph] the layer graph, buffer planner and executor; the fusion pass
pub mod fusion;
pub mod graph;
