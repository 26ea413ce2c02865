//! CONCAT (dim 0) cases: conv_input built exactly as the layer does (conv state + transposed
//! projection) at Qwen3.5 sizes, padded views of every operand, rows longer than a block,
//! broadcast reads, edge sizes.

use super::conv_layer::ConvLayer;
use crate::ops::ConcatDim0;
use crate::ops::concat::ConcatDim0PerRow;
use crate::suite::inputs::Values;
use crate::suite::{Case, Tolerance};
use crate::tensor::{DType, Tensor};

pub const GROUP: &str = "CONCAT";

#[derive(Clone, Copy, Debug)]
enum ConcatCase {
    /// The layer's CONCAT (C5); `pad` extra channels per projection row.
    Layer { layer: ConvLayer, pad: usize },
    /// Any shapes and strides, see [`Generic`].
    Generic(Generic),
}

/// Generic shapes: a [na, n1, n2], b [nb, n1, n2], each with padding `pad_*` per dimension;
/// `b_broadcast`: b repeats one [nb, n1] plane over n2 (stride 0).
#[derive(Clone, Copy, Debug)]
struct Generic {
    na: usize,
    nb: usize,
    n1: usize,
    n2: usize,
    pad_a: [usize; 4],
    pad_b: [usize; 4],
    pad_dst: [usize; 4],
    b_broadcast: bool,
}

impl Generic {
    fn new(na: usize, nb: usize, n1: usize, n2: usize) -> Self {
        Generic { na, nb, n1, n2, pad_a: [0; 4], pad_b: [0; 4], pad_dst: [0; 4], b_broadcast: false }
    }
}

impl ConcatCase {
    fn layer(d_conv: usize, channels: usize, n_t: usize, n_s: usize, pad: usize) -> Self {
        ConcatCase::Layer { layer: ConvLayer { d_conv, channels, n_t, n_s, cells: 1, groups: 1, kv_head: 0 }, pad }
    }

    fn name(&self) -> String {
        match self {
            ConcatCase::Layer { layer: l, pad } => format!(
                "{GROUP}(layer,d_conv={},C={},n_t={},n_s={}{})",
                l.d_conv,
                l.channels,
                l.n_t,
                l.n_s,
                if *pad > 0 { format!(",proj_pad={pad}") } else { String::new() }
            ),
            ConcatCase::Generic(Generic { na, nb, n1, n2, pad_a, pad_b, pad_dst, b_broadcast }) => format!(
                "{GROUP}(na={na},nb={nb},n1={n1},n2={n2},pad_a={pad_a:?},pad_b={pad_b:?},pad_dst={pad_dst:?}{})",
                if *b_broadcast { ",b_broadcast" } else { "" }
            ),
        }
    }

    fn case(self) -> Case {
        self.case_with(false)
    }

    /// [speed] `per_row`: launched through [`ConcatDim0PerRow`] (ggml's per-row kernel) instead
    /// of [`ConcatDim0`] (the flat kernel for every view that fits u32).
    fn case_with(self, per_row: bool) -> Case {
        let name = if per_row { format!("{},per_row_kernel", self.name()) } else { self.name() };
        Case::seeded(GROUP, name, move |mut b| {
            let op = match self {
                ConcatCase::Layer { layer, pad } => {
                    let a = layer.conv_states(&mut b);
                    let b_view = layer.projection_t(&mut b, pad);
                    ConcatDim0 { a, b: b_view, dst: layer.conv_input(&mut b) }
                }
                ConcatCase::Generic(Generic { na, nb, n1, n2, pad_a, pad_b, pad_dst, b_broadcast }) => {
                    let a = b.tensor_padded(DType::F32, [na, n1, n2, 1], pad_a, Values::AnyBits);
                    let b_view: Tensor = if b_broadcast {
                        let plane = b.tensor_padded(DType::F32, [nb, n1, 1, 1], pad_b, Values::AnyBits);
                        let strides = plane.layout.nb;
                        plane.view([nb, n1, n2, 1], [strides[0], strides[1], 0, 0], 0)
                    } else {
                        b.tensor_padded(DType::F32, [nb, n1, n2, 1], pad_b, Values::AnyBits)
                    };
                    let dst = b.tensor_padded(DType::F32, [na + nb, n1, n2, 1], pad_dst, Values::AnyBits);
                    ConcatDim0 { a, b: b_view, dst }
                }
            };
            let op: Box<dyn crate::ops::Op> = if per_row { Box::new(ConcatDim0PerRow(op)) } else { Box::new(op) };
            Ok(b.finish(vec![op], Tolerance::BitExact, true))
        })
    }
}

pub fn cases() -> Vec<Case> {
    let mut out = vec![
        // Qwen3.5 4B/9B (C = 8192) and 27B (C = 10240), verify widths, one and two sequences.
        ConcatCase::layer(4, 8192, 1, 1, 0),
        ConcatCase::layer(4, 8192, 4, 1, 0),
        ConcatCase::layer(4, 8192, 16, 2, 0),
        ConcatCase::layer(4, 10240, 16, 1, 0),
        ConcatCase::layer(4, 10240, 3, 2, 0),
        // A projection whose rows are padded; other conv widths.
        ConcatCase::layer(4, 8192, 8, 1, 64),
        ConcatCase::layer(15, 256, 5, 1, 0),
        ConcatCase::layer(3, 384, 2, 3, 0),
    ];
    out.extend([
        // Padded views of all three operands.
        ConcatCase::Generic(Generic { pad_a: [2, 1, 1, 0], pad_b: [1, 3, 0, 0], pad_dst: [3, 2, 1, 0], ..Generic::new(3, 5, 130, 2) }),
        // Rows longer than the 256-thread block (each thread loops), a split inside the second pass.
        ConcatCase::Generic(Generic::new(100, 300, 3, 2)),
        ConcatCase::Generic(Generic::new(300, 20, 2, 1)),
        // Edge sizes: single elements; many planes (grid y).
        ConcatCase::Generic(Generic::new(1, 1, 1, 1)),
        ConcatCase::Generic(Generic::new(2, 3, 4, 300)),
        // b read through a zero stride (one plane repeated over n2).
        ConcatCase::Generic(Generic { b_broadcast: true, pad_b: [1, 0, 0, 0], ..Generic::new(3, 4, 17, 5) }),
    ]);
    // [speed] Every case above runs the flat kernel (any strides, one thread per element). More
    // for it: the layer at n_t = 1 (ggml's contiguous path: the transposed [1, C, n_s]
    // projection is dense), and dense shapes whose element count is not a multiple of the block,
    // split anywhere inside a row.
    out.extend([
        ConcatCase::layer(4, 8192, 1, 2, 0),
        ConcatCase::layer(4, 10240, 1, 1, 0),
        ConcatCase::layer(4, 10240, 1, 3, 0),
        ConcatCase::layer(15, 384, 1, 2, 0),
        ConcatCase::Generic(Generic::new(5, 1, 77, 3)),
        ConcatCase::Generic(Generic::new(1, 7, 300, 1)),
        ConcatCase::Generic(Generic::new(200, 100, 3, 2)),
    ]);
    let mut cases: Vec<Case> = out.into_iter().map(ConcatCase::case).collect();
    // [speed] ggml's per-row kernel (now only for views beyond u32 elements) on the layer's
    // shapes, padded, long-row and broadcast views.
    cases.extend(
        [
            ConcatCase::layer(4, 8192, 1, 1, 0),
            ConcatCase::layer(4, 8192, 4, 1, 0),
            ConcatCase::layer(4, 10240, 16, 2, 0),
            ConcatCase::layer(4, 8192, 8, 1, 64),
            ConcatCase::Generic(Generic { pad_a: [2, 1, 1, 0], pad_b: [1, 3, 0, 0], pad_dst: [3, 2, 1, 0], ..Generic::new(3, 5, 130, 2) }),
            ConcatCase::Generic(Generic::new(100, 300, 3, 2)),
            ConcatCase::Generic(Generic { b_broadcast: true, pad_b: [1, 0, 0, 0], ..Generic::new(3, 4, 17, 5) }),
        ]
        .into_iter()
        .map(|c| c.case_with(true)),
    );
    cases
}
