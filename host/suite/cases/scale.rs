//! SCALE cases: the state zeroing (scale 0, bias 0) in place on one row of a larger cache —
//! conv rows at Qwen3.5 sizes and an ssm state row long enough for the grid-stride loop — with
//! ±Inf, NaN, ±0 and subnormal inputs (neighbour rows must stay untouched), and generic
//! scale/bias both in place and into a separate tensor.

use crate::ops::Scale;
use crate::suite::inputs::Values;
use crate::suite::{Case, Tolerance};
use crate::tensor::Tensor;

pub const GROUP: &str = "SCALE";

/// Written at the start of every source: +Inf, −Inf, a quiet NaN with a payload, a signalling
/// NaN, −0, +0, the smallest subnormals of both signs, the largest finite value.
const SPECIALS: [u32; 9] = [0x7F80_0000, 0xFF80_0000, 0x7FC0_1234, 0xFF80_0001, 0x8000_0000, 0, 0x0000_0001, 0x8000_0001, 0x7F7F_FFFF];

#[derive(Clone, Copy, Debug)]
struct ScaleCase {
    row_len: usize,
    /// Rows of the tensor the op works on one row of (1: the whole tensor is the row).
    rows: usize,
    /// The row the op works on.
    row: usize,
    in_place: bool,
    scale: f32,
    bias: f32,
    values: Values,
}

impl ScaleCase {
    fn zeroing(row_len: usize, rows: usize, row: usize) -> Self {
        ScaleCase { row_len, rows, row, in_place: true, scale: 0.0, bias: 0.0, values: Values::AnyBits }
    }

    fn name(&self) -> String {
        format!(
            "{GROUP}(row_len={},row={}/{},{},scale={:e},bias={:e}{})",
            self.row_len,
            self.row,
            self.rows,
            if self.in_place { "in_place" } else { "disjoint" },
            self.scale,
            self.bias,
            if let Values::AnyBits = self.values { ",any_bits" } else { "" }
        )
    }

    fn case(self) -> Case {
        let name = self.name();
        Case::seeded(GROUP, name, move |mut b| {
            let p = self;
            let cache = b.input([p.row_len, p.rows, 1, 1], p.values);
            let row_bytes = cache.layout.nb[1];
            let src: Tensor = cache.view([p.row_len, 1, 1, 1], [4, row_bytes, row_bytes, row_bytes], p.row * row_bytes);
            for (i, bits) in SPECIALS.iter().enumerate().take(p.row_len) {
                b.mem.write_u32(&src, [i, 0, 0, 0], *bits).expect("a view of the case's own buffers");
            }
            let dst = if p.in_place { src } else { b.output([p.row_len, 1, 1, 1]) };
            let op = Scale { src, dst, scale: p.scale, bias: p.bias };
            // Arithmetic: the GPU's NaNs are canonical, so NaN payloads are not compared.
            Ok(b.finish(vec![Box::new(op)], Tolerance::BitExact, false))
        })
    }
}

pub fn cases() -> Vec<Case> {
    let specials = Values::WithSpecials { scale: 4.0, every: 16 };
    [
        // C1 zeroing of row rs_z of r_l: Qwen3.5 4B/9B (3·8192) in the middle of 8 rows, 27B
        // (3·10240) as the last row, and an ssm state row (128·128·32: 2048 blocks of work for
        // at most 1024 blocks, so every thread loops).
        ScaleCase::zeroing(24576, 8, 5),
        ScaleCase::zeroing(30720, 4, 3),
        ScaleCase::zeroing(524_288, 3, 1),
        ScaleCase { values: specials, ..ScaleCase::zeroing(24576, 3, 0) },
        // Generic scale and bias: into a separate tensor, in place with results near the
        // subnormal range (flushed), identity on any bits (subnormals flush, NaNs stay NaN),
        // and edge sizes.
        ScaleCase { in_place: false, scale: 1.5, bias: -0.25, values: specials, ..ScaleCase::zeroing(1000, 3, 2) },
        ScaleCase { scale: -3.7e-3, bias: 1e-38, values: Values::Uniform(1e-35), ..ScaleCase::zeroing(257, 2, 1) },
        ScaleCase { scale: 1.0, bias: 0.0, ..ScaleCase::zeroing(4096, 1, 0) },
        ScaleCase { scale: 2.0, bias: 1.0, values: specials, ..ScaleCase::zeroing(1, 1, 0) },
    ]
    .into_iter()
    .map(ScaleCase::case)
    .collect()
}
