//! CPY_SNAPSHOTS cases: 1 … 17 slots, full and short drafts (n_t < n_slots: several slots get
//! window(0)), one and two sequences, Qwen3.5 sizes, padded cache rows; the whole conv-state
//! chain GET_ROWS → CONCAT → CPY_SNAPSHOTS where the row GET_ROWS read is among the rows written;
//! refusals of a row written twice and of rows past the cache.

use super::conv_layer::ConvLayer;
use crate::Error;
use crate::ops::CpySnapshots;
use crate::suite::inputs::Values;
use crate::suite::{Case, Expect, Scenario, Tolerance};
use crate::tensor::DType;

pub const GROUP: &str = "CPY_SNAPSHOTS";

#[derive(Clone, Debug)]
enum SnapCase {
    /// One launch on a filled conv_input; `row_pad` extra elements after every cache row.
    Single { layer: ConvLayer, row_pad: usize },
    /// The chain, with `s_copy` the rows GET_ROWS reads (one per sequence).
    Chain { layer: ConvLayer, s_copy: Vec<i32> },
    /// Must be refused: `group_stride` and `first_row` override the layer's M and kv_head.
    Refused { layer: ConvLayer, group_stride: usize, first_row: usize, aliasing: bool },
}

fn layer(d_conv: usize, channels: usize, n_t: usize, n_s: usize, cells: usize, groups: usize, kv_head: usize) -> ConvLayer {
    ConvLayer { d_conv, channels, n_t, n_s, cells, groups, kv_head }
}

impl SnapCase {
    fn name(&self) -> String {
        let (kind, l) = match self {
            SnapCase::Single { layer, row_pad: 0 } => ("single".to_string(), layer),
            SnapCase::Single { layer, row_pad } => (format!("single,row_pad={row_pad}"), layer),
            SnapCase::Chain { layer, s_copy } => (format!("chain,s_copy={s_copy:?}"), layer),
            SnapCase::Refused { layer, group_stride, first_row, .. } => (format!("refused,stride={group_stride},first={first_row}"), layer),
        };
        format!(
            "{GROUP}({kind},d_conv={},C={},n_t={},n_s={},M={},slots={},kv_head={})",
            l.d_conv, l.channels, l.n_t, l.n_s, l.cells, l.groups, l.kv_head
        )
    }

    fn case(self) -> Case {
        let name = self.name();
        Case::seeded(GROUP, name, move |mut b| match &self {
            SnapCase::Single { layer: l, row_pad } => {
                let conv_input = b.input([l.state_len() + l.n_t, l.channels, l.n_s, 1], Values::AnyBits);
                let cache = b.tensor_padded(DType::F32, [l.row_len(), l.cells * l.groups, 1, 1], [*row_pad, 0, 0, 0], Values::AnyBits);
                let op =
                    CpySnapshots { conv_input, cache, d_conv: l.d_conv, first_row: l.kv_head, group_stride: l.cells, n_slots: l.groups };
                Ok(b.finish(vec![Box::new(op)], Tolerance::BitExact, true))
            }
            SnapCase::Chain { layer: l, s_copy } => {
                let ops = l.chain(&mut b, s_copy);
                Ok(b.finish(ops, Tolerance::BitExact, true))
            }
            SnapCase::Refused { layer: l, group_stride, first_row, aliasing } => {
                let conv_input = b.input([l.state_len() + l.n_t, l.channels, l.n_s, 1], Values::AnyBits);
                let cache = l.cache(&mut b);
                let op = CpySnapshots {
                    conv_input,
                    cache,
                    d_conv: l.d_conv,
                    first_row: *first_row,
                    group_stride: *group_stride,
                    n_slots: l.groups,
                };
                let scenario = Scenario { mem: b.mem, ops: vec![Box::new(op)], tolerance: Tolerance::BitExact, exact_nan_payloads: true };
                Ok(if *aliasing {
                    Expect::Refusal {
                        scenario,
                        predicate: |e| matches!(e, Error::Aliasing { op: "CPY_SNAPSHOTS", a: "cache", b: "cache", .. }),
                        expected: "Aliasing: one cache row written twice",
                    }
                } else {
                    Expect::Refusal {
                        scenario,
                        predicate: |e| matches!(e, Error::IndexOutOfRange { op: "CPY_SNAPSHOTS", arg: "cache", .. }),
                        expected: "IndexOutOfRange: a row past the cache",
                    }
                })
            }
        })
    }
}

pub fn cases() -> Vec<Case> {
    let single = |layer| SnapCase::Single { layer, row_pad: 0 };
    let chain = |layer, s_copy: &[i32]| SnapCase::Chain { layer, s_copy: s_copy.to_vec() };
    vec![
        // W1 (one slot) and the full 1 + 16 slots with a full verify batch, C = 8192.
        single(layer(4, 8192, 1, 1, 2, 1, 1)),
        single(layer(4, 8192, 16, 1, 2, 17, 0)),
        // Short drafts: n_t < n_slots, slots n_t … n_slots−1 all receive window(0).
        single(layer(4, 8192, 3, 1, 2, 17, 1)),
        single(layer(4, 8192, 1, 2, 3, 5, 1)),
        // n_t = n_slots (the oldest slot gets exactly window(0)); 27B with two sequences.
        single(layer(4, 8192, 4, 1, 1, 4, 0)),
        single(layer(4, 10240, 16, 2, 2, 2, 0)),
        // Two sequences, a non-zero first row, padded cache rows.
        SnapCase::Single { layer: layer(4, 8192, 8, 2, 4, 9, 2), row_pad: 40 },
        // Channel counts that do not fill the last block; other conv widths.
        single(layer(3, 200, 2, 1, 1, 4, 0)),
        single(layer(5, 130, 6, 2, 2, 3, 0)),
        single(layer(15, 128, 2, 1, 1, 7, 0)),
        // Chains: the row GET_ROWS reads is among the rows CPY_SNAPSHOTS writes.
        // Slot 0's row (the live state), 4 snapshots of a 4-token draft.
        chain(layer(4, 8192, 4, 1, 2, 5, 1), &[1]),
        // A rollback read (rs_idx = 2: rows 2·M + kv_head + s), short draft, two sequences.
        chain(layer(4, 8192, 3, 2, 3, 6, 1), &[7, 8]),
        // 27B, full verify, all 17 slots, reading the live row.
        chain(layer(4, 10240, 16, 1, 2, 17, 0), &[0]),
        // One token, 17 slots, reading the oldest group's rows (both sequences, swapped).
        chain(layer(4, 8192, 1, 2, 2, 17, 0), &[33, 32]),
        // Refused: group_stride 1 < n_s = 2 (slot 1 of sequence 0 = slot 0 of sequence 1).
        SnapCase::Refused { layer: layer(4, 256, 2, 2, 2, 3, 0), group_stride: 1, first_row: 0, aliasing: true },
        // Refused: the last slot's row is one past the cache.
        SnapCase::Refused { layer: layer(4, 256, 2, 1, 2, 3, 0), group_stride: 2, first_row: 2, aliasing: false },
    ]
    .into_iter()
    .map(SnapCase::case)
    .collect()
}
