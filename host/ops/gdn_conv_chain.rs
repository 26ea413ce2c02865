//! GDN_CONV_CHAIN — the fused conv chain of one GDN layer step (the reference PR's
//! `ssm_conv_gdn_fused_f32`): conv-state GET_ROWS, CONCAT, the 1 + R snapshot CPYs,
//! SSM_CONV+SiLU and the L2_NORM of the q and k heads in one kernel, bit-identical to those
//! five unfused ops (spec §1.3 C2–C5, W1/W2, V1–V2, N1).
//!
//! The op struct is the contract between the fusion pass (`host/fusion/`), the kernel
//! (`kernels-gpu/src/gdn_conv_chain.rs`) and its reference.

use crate::tensor::Tensor;

/// One conv-state row the fused kernel writes: cache row `row` receives `window(offset)` — the
/// d_conv−1 columns `offset … offset+d_conv−2` of `[old state | tokens]` for every channel, in
/// the cache's channel-major layout (spec §1.3 W2: slot j of the clamped rule has
/// `offset = max(0, n_t − j)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SnapshotWrite {
    pub row: usize,
    /// Window start, 0 ≤ offset ≤ n_t.
    pub offset: usize,
}

/// The five ops of the conv chain as one:
/// - `conv_cache` (r_l): F32 ne [(d_conv−1)·C, rows, 1, 1], rows contiguous; row
///   `source_row[0]` is read as the incoming state, every `snapshots[i].row` is written;
/// - `source_row` (s_copy): I32 ne [1, 1, 1, 1] in an index buffer;
/// - `qkv` (qkv_mixed): F32 ne [C, n_t, 1, 1], channels contiguous;
/// - `weight` (ssm_conv1d.weight): F32 ne [d_conv, C, 1, 1], taps contiguous;
/// - `snapshots`: 1 ..= 16 rows to write, each at most once;
/// - `conv_out`: SiLU(conv) ne [C, n_t, 1, 1], channels contiguous; may be `qkv` itself,
///   element for element (each thread reads all its channel's inputs before it writes);
/// - `q_norm`, `k_norm`: ne [D, H_k, n_t, 1], the L2-normalised heads of `conv_out` channels
///   `0 … H_k·D` (q) and `H_k·D … 2·H_k·D` (k), rows contiguous;
/// - `eps`: the L2_NORM epsilon.
#[derive(Clone, Debug)]
pub struct GdnConvChain {
    pub conv_cache: Tensor,
    pub source_row: Tensor,
    pub qkv: Tensor,
    pub weight: Tensor,
    pub snapshots: Vec<SnapshotWrite>,
    pub conv_out: Tensor,
    pub q_norm: Tensor,
    pub k_norm: Tensor,
    pub head_dim: usize,
    pub n_k_heads: usize,
    pub eps: f32,
}
