//! GET_ROWS cases: the conv and ssm state gathers at Qwen3.5 sizes, repeated and out-of-order
//! indices, strided rows and index views, edge sizes, and the refusal of indices outside the
//! source. (Rows longer than 65535·256 elements, where each thread loops, are left out: 64 MiB
//! rows make the CPU run of the suite take seconds.)

use crate::Error;
use crate::ops::GetRows;
use crate::suite::inputs::Values;
use crate::suite::{Builder, Case, Expect, Scenario, Tolerance};
use crate::tensor::DType;

pub const GROUP: &str = "GET_ROWS";

#[derive(Clone, Debug)]
struct RowsCase {
    row_len: usize,
    src_rows: usize,
    rows: Vec<i32>,
    /// Extra elements after every source / destination row (padded row strides).
    src_pad: usize,
    dst_pad: usize,
    /// Element stride of the index view (1: contiguous; more: every n-th entry of a buffer).
    index_stride: usize,
}

impl RowsCase {
    fn new(row_len: usize, src_rows: usize, rows: &[i32]) -> Self {
        RowsCase { row_len, src_rows, rows: rows.to_vec(), src_pad: 0, dst_pad: 0, index_stride: 1 }
    }

    fn name(&self) -> String {
        let rows = if self.rows.len() <= 8 { format!("{:?}", self.rows) } else { format!("{} rows", self.rows.len()) };
        format!(
            "{GROUP}(row_len={},src_rows={},rows={rows}{}{}{})",
            self.row_len,
            self.src_rows,
            if self.src_pad > 0 { format!(",src_pad={}", self.src_pad) } else { String::new() },
            if self.dst_pad > 0 { format!(",dst_pad={}", self.dst_pad) } else { String::new() },
            if self.index_stride > 1 { format!(",index_stride={}", self.index_stride) } else { String::new() },
        )
    }

    /// Memory and the op; the GPU suite decides whether it must match or be refused.
    fn build(&self, b: &mut Builder) -> GetRows {
        let src = b.tensor_padded(DType::F32, [self.row_len, self.src_rows, 1, 1], [self.src_pad, 0, 0, 0], Values::AnyBits);
        // Strided index view: entry i at position i·stride; the gaps hold an index that would be
        // out of range if it were read.
        let mut all = vec![i32::MAX; self.rows.len() * self.index_stride];
        for (i, r) in self.rows.iter().enumerate() {
            all[i * self.index_stride] = *r;
        }
        let buffer = b.mem.alloc_indices(&all);
        let s = 4 * self.index_stride;
        let rows = buffer.view([self.rows.len(), 1, 1, 1], [s, s * self.rows.len(), s * self.rows.len(), s * self.rows.len()], 0);
        let dst = b.tensor_padded(DType::F32, [self.row_len, self.rows.len(), 1, 1], [self.dst_pad, 0, 0, 0], Values::AnyBits);
        GetRows { src, rows, dst }
    }

    fn case(self) -> Case {
        let name = self.name();
        Case::seeded(GROUP, name, move |mut b| {
            let op = self.build(&mut b);
            Ok(b.finish(vec![Box::new(op)], Tolerance::BitExact, true))
        })
    }

    fn refusal(self) -> Case {
        let name = format!("{}:refused", self.name());
        Case::seeded(GROUP, name, move |mut b| {
            let op = self.build(&mut b);
            let scenario = Scenario { mem: b.mem, ops: vec![Box::new(op)], tolerance: Tolerance::BitExact, exact_nan_payloads: true };
            Ok(Expect::Refusal {
                scenario,
                predicate: |e| matches!(e, Error::IndexOutOfRange { op: "GET_ROWS", arg: "rows", .. }),
                expected: "IndexOutOfRange on `rows`",
            })
        })
    }
}

pub fn cases() -> Vec<Case> {
    // Qwen3.5 4B/9B conv state row (3·8192), 27B (3·10240), ssm state row (128·128·32).
    let (conv_9b, conv_27b, ssm_9b) = (24576, 30720, 524_288);
    let mut out = vec![
        // The layer's gather: M = 2 cells, R = 16 (34 rows), kv_head = 1.
        RowsCase::new(conv_9b, 34, &[1]),
        // Two sequences, out of order; a rollback read (rs_idx = 3: row 3·4 + 1) at 27B.
        RowsCase::new(conv_9b, 12, &[5, 1]),
        RowsCase::new(conv_27b, 20, &[13]),
        // Repeated indices.
        RowsCase::new(conv_9b, 6, &[3, 3, 0, 3]),
        // The ssm state gather: 2048 blocks along y.
        RowsCase::new(ssm_9b, 3, &[2]),
        // Edge sizes: one element, one past a block, many gathered rows with repeats.
        RowsCase::new(1, 7, &[6, 0, 6, 3]),
        RowsCase::new(257, 3, &[1, 2]),
        RowsCase::new(64, 50, &(0..300).map(|i| i * 7 % 50).collect::<Vec<i32>>()),
        // Padded rows on both sides, and an index view with a stride.
        RowsCase { src_pad: 24, dst_pad: 7, ..RowsCase::new(1000, 5, &[0, 4, 2]) },
        RowsCase { index_stride: 2, ..RowsCase::new(100, 5, &[4, 1, 0]) },
    ]
    .into_iter()
    .map(RowsCase::case)
    .collect::<Vec<_>>();
    // Refused: an index equal to the row count, a negative index.
    out.push(RowsCase::new(64, 4, &[0, 4]).refusal());
    out.push(RowsCase::new(64, 4, &[-1, 2]).refusal());
    out
}
