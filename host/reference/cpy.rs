//! CPY and CPY_SNAPSHOTS references (spec §2.3, §1.3 W1/W2, README decision 1): bit moves.

use crate::error::Result;
use crate::memory::HostMemory;
use crate::tensor::Tensor;

/// The sizes a valid CPY_SNAPSHOTS (`ops::CpySnapshots`) runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotShape {
    /// d_conv − 1: columns of a conv state.
    pub state_len: usize,
    /// C: channels.
    pub n_channels: usize,
    /// n_t: tokens.
    pub n_tokens: usize,
    /// n_s: sequences.
    pub n_seqs: usize,
}

/// The f-th element of `src` in logical order to the f-th element of `dst` in logical order.
pub fn cpy(src: &Tensor, dst: &Tensor, mem: &mut HostMemory) -> Result<()> {
    for (i, o) in src.layout.indices().zip(dst.layout.indices()) {
        let v = mem.read_u32(src, i)?;
        mem.write_u32(dst, o, v)?;
    }
    Ok(())
}

/// Slot j < `n_slots` of sequence s: cache row `row(j, s)` (`j·group_stride + first_row + s`)
/// ← window(max(0, n_t − j)), window element (jj, c) = conv_input(o + jj, c, s) at row offset
/// c·(d_conv − 1) + jj.
pub fn cpy_snapshots(
    conv_input: &Tensor,
    cache: &Tensor,
    n_slots: usize,
    row: &dyn Fn(usize, usize) -> usize,
    shape: &SnapshotShape,
    mem: &mut HostMemory,
) -> Result<()> {
    let SnapshotShape { state_len, n_channels, n_tokens, n_seqs } = *shape;
    for slot in 0..n_slots {
        let o = n_tokens.saturating_sub(slot);
        for s in 0..n_seqs {
            let row = row(slot, s);
            for c in 0..n_channels {
                for jj in 0..state_len {
                    let v = mem.read_u32(conv_input, [o + jj, c, s, 0])?;
                    mem.write_u32(cache, [c * state_len + jj, row, 0, 0], v)?;
                }
            }
        }
    }
    Ok(())
}
