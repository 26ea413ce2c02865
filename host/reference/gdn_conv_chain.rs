//! GDN_CONV_CHAIN reference, in the fused kernel's order: read the source row's old state and
//! every token (before any write: a snapshot row may be the source row, `conv_out` may be
//! `qkv`); per channel the conv outputs ([`conv_output`], the SSM_CONV reference's own helper:
//! fma from +0 over the taps, `+ 0` for the absent bias, SiLU); the snapshot rows as bit copies
//! of their windows of `[old state | tokens]`; `conv_out`; then per token and q/k head the L2
//! normalisation of the conv outputs ([`l2_normalize`], the L2_NORM reference's helper).
//! [seq-batch] Sequence by sequence: sequence s reads its own source row and tokens and writes the
//! rows `row + s`.

use super::l2_norm::l2_normalize;
use super::math::Mufu;
use super::ssm_conv::conv_output;
use crate::error::{Error, Result};
use crate::memory::HostMemory;
use crate::tensor::Tensor;

/// The views and parameters the conv chain's reference reads and writes (a validated
/// GDN_CONV_CHAIN (`ops::GdnConvChain`)'s).
#[derive(Clone, Copy, Debug)]
pub struct ChainViews {
    /// `[(d_conv − 1)·C, rows]`: the source rows are read, the snapshot rows written.
    pub conv_cache: Tensor,
    /// `[C, n_t, n_s]`: the tokens.
    pub qkv: Tensor,
    /// `[d_conv, C]`: the conv taps.
    pub weight: Tensor,
    /// `[C, n_t, n_s]`: the conv outputs.
    pub conv_out: Tensor,
    /// `[D, H_k, n_t, n_s]`: the normalised q heads.
    pub q_norm: Tensor,
    /// `[D, H_k, n_t, n_s]`: the normalised k heads.
    pub k_norm: Tensor,
    /// D.
    pub head_dim: usize,
    /// H_k.
    pub n_k_heads: usize,
    /// The L2 norm's epsilon.
    pub eps: f32,
}

/// CPU reference of GDN_CONV_CHAIN in the kernel's float-op order, on a validated op's views:
/// sequence s's incoming state is cache row `source_rows[s]`; each `(row, offset)` of
/// `snapshots` writes `window(offset)` of sequence s to cache row `row + s`. Every sequence's
/// reads happen before any write (the op refuses a source row that another sequence writes, so
/// the order of the sequences does not matter).
pub fn gdn_conv_chain(
    op: &ChainViews,
    source_rows: &[usize],
    snapshots: &[(usize, usize)],
    mem: &mut HostMemory,
    mufu: &mut dyn Mufu,
) -> Result<()> {
    let [d_conv, n_channels, ..] = op.weight.ne();
    let n_tokens = op.qkv.ne()[1];
    let Some(state_len) = d_conv.checked_sub(1) else {
        return Err(Error::Shape {
            op: "gdn_conv_chain reference",
            arg: "weight",
            expected: "d_conv ≥ 1 taps".into(),
            got: op.weight.ne(),
        });
    };
    // Phase 1: every read of every sequence. cols[s][c] = conv_input row of channel c (GET_ROWS
    // + CONCAT), as bits.
    let cols: Vec<Vec<Vec<u32>>> = source_rows
        .iter()
        .enumerate()
        .map(|(s, &source_row)| {
            (0..n_channels)
                .map(|c| {
                    let old = (0..state_len).map(|jj| mem.read_u32(&op.conv_cache, [c * state_len + jj, source_row, 0, 0]));
                    let tokens = (0..n_tokens).map(|t| mem.read_u32(&op.qkv, [c, t, s, 0]));
                    old.chain(tokens).collect()
                })
                .collect()
        })
        .collect::<Result<_>>()?;
    let (d, h_k) = (op.head_dim, op.n_k_heads);
    for (s, cols) in cols.iter().enumerate() {
        // Phase 2: SSM_CONV + SiLU, y[t][c].
        let mut y = vec![vec![0.0f32; n_channels]; n_tokens];
        for (c, col) in cols.iter().enumerate() {
            let weight: Vec<f32> = (0..d_conv).map(|j| mem.read_f32(&op.weight, [j, c, 0, 0])).collect::<Result<_>>()?;
            let x: Vec<f32> = col.iter().map(|b| f32::from_bits(*b)).collect();
            for (t, yt) in y.iter_mut().enumerate() {
                yt[c] = conv_output(&x[t..t + d_conv], &weight, 0.0, true, mufu);
            }
        }
        // Phase 3: row `row + s` ← window(offset): channel c's slot jj = column offset + jj.
        for &(row, offset) in snapshots {
            for (c, col) in cols.iter().enumerate() {
                for jj in 0..state_len {
                    mem.write_u32(&op.conv_cache, [c * state_len + jj, row + s, 0, 0], col[offset + jj])?;
                }
            }
        }
        for (t, yt) in y.iter().enumerate() {
            for (c, v) in yt.iter().enumerate() {
                mem.write_f32(&op.conv_out, [c, t, s, 0], *v)?;
            }
        }
        // Phase 4: L2_NORM of q heads (channels h·D …) and k heads (H_k·D + h·D …) of every token.
        for (t, yt) in y.iter().enumerate() {
            for (dst, first) in [(&op.q_norm, 0), (&op.k_norm, h_k * d)] {
                for h in 0..h_k {
                    let start = first + h * d;
                    for (i, v) in l2_normalize(&yt[start..start + d], op.eps, mufu).into_iter().enumerate() {
                        mem.write_f32(dst, [i, h, t, s], v)?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// \[replay\] The window commit in front of the chain (`ops::ConvCommit`): for each sequence s,
/// row `rows[s]` of the conv cache ← window(a_s) of [that row's window ; the logged inputs
/// 0 … a_s − 1 of `log_qkv` ([C, T_log, n_s])]: channel c's slot j takes column a_s + j of the
/// concatenation, as bits. Rows of different sequences are distinct (the op's rule).
pub fn commit_windows(conv_cache: &Tensor, log_qkv: &Tensor, rows: &[usize], accepted: &[usize], mem: &mut HostMemory) -> Result<()> {
    let n_channels = log_qkv.ne()[0];
    let state_len = conv_cache.ne()[0] / n_channels.max(1);
    for (s, (&row, &a)) in rows.iter().zip(accepted).enumerate() {
        for c in 0..n_channels {
            let column = |i: usize, mem: &HostMemory| {
                if i < state_len {
                    mem.read_u32(conv_cache, [c * state_len + i, row, 0, 0])
                } else {
                    mem.read_u32(log_qkv, [c, i - state_len, s, 0])
                }
            };
            let window: Vec<u32> = (0..state_len).map(|j| column(a + j, mem)).collect::<Result<_>>()?;
            for (j, bits) in window.into_iter().enumerate() {
                mem.write_u32(conv_cache, [c * state_len + j, row, 0, 0], bits)?;
            }
        }
    }
    Ok(())
}
