//! L2_NORM cases: the q/k head views of the conv output (strided), contiguous rows of several
//! lengths, in place, eps edge cases, all-zero rows, special values.

use crate::ops::L2Norm;
use crate::suite::inputs::Values;
use crate::suite::{Case, Tolerance};

pub const GROUP: &str = "L2_NORM";
/// Qwen3.5's `rms_norm_eps` (1e-6, bits 0x358637BD).
pub const QWEN_EPS: f32 = 1e-6;

#[derive(Clone, Copy, Debug)]
enum Kind {
    /// q (offset 0) or k (offset H_k·D) heads of a [C, n_t] conv output: ne [D, H_k, n_t, 1].
    HeadView {
        key: bool,
        heads: usize,
        channels: usize,
    },
    Contiguous,
    InPlace,
}

#[derive(Clone, Copy, Debug)]
struct L2Case {
    kind: Kind,
    cols: usize,
    rows: usize,
    tokens: usize,
    eps: f32,
    values: Values,
    zero_rows: bool,
}

impl L2Case {
    fn name(&self) -> String {
        let kind = match self.kind {
            Kind::HeadView { key: false, heads, channels } => format!("q_view(H={heads},C={channels})"),
            Kind::HeadView { key: true, heads, channels } => format!("k_view(H={heads},C={channels})"),
            Kind::Contiguous => "contiguous".into(),
            Kind::InPlace => "in_place".into(),
        };
        let vals = match self.values {
            Values::WithSpecials { .. } => ",specials",
            _ => "",
        };
        format!(
            "{GROUP}({kind},ncols={},rows={},n_t={},eps={:e}{vals}{})",
            self.cols,
            self.rows,
            self.tokens,
            self.eps,
            if self.zero_rows { ",zero_rows" } else { "" }
        )
    }

    fn case(self) -> Case {
        let name = self.name();
        Case::seeded(GROUP, name, move |mut b| {
            let p = self;
            let (src, dst) = match p.kind {
                Kind::HeadView { key, heads, channels } => {
                    let y = b.input([channels, p.tokens, 1, 1], p.values);
                    let nb = y.layout.nb;
                    let offset = if key { 4 * heads * p.cols } else { 0 };
                    let src = y.view([p.cols, heads, p.tokens, 1], [4, 4 * p.cols, nb[1], nb[2]], offset);
                    (src, b.output([p.cols, heads, p.tokens, 1]))
                }
                Kind::Contiguous => (b.input([p.cols, p.rows, p.tokens, 1], p.values), b.output([p.cols, p.rows, p.tokens, 1])),
                Kind::InPlace => {
                    let t = b.input([p.cols, p.rows, p.tokens, 1], p.values);
                    (t, t)
                }
            };
            if p.zero_rows {
                // Zero the first row of src: Σx² = 0, the eps floor decides.
                for i0 in 0..p.cols {
                    b.mem.write_f32(&src, [i0, 0, 0, 0], 0.0).expect("a view of the case's own buffers");
                }
            }
            let op = L2Norm { src, dst, eps: p.eps };
            Ok(b.finish(vec![Box::new(op)], Tolerance::Ulps(4), false))
        })
    }
}

pub fn cases() -> Vec<Case> {
    let base =
        L2Case { kind: Kind::Contiguous, cols: 128, rows: 16, tokens: 1, eps: QWEN_EPS, values: Values::Uniform(1.0), zero_rows: false };
    let mut out = Vec::new();
    // The layer's q and k views (Qwen3.5 9B: 16 heads × 128 of an 8192-channel conv output).
    for tokens in [1, 4, 8, 16] {
        for key in [false, true] {
            out.push(L2Case { kind: Kind::HeadView { key, heads: 16, channels: 8192 }, tokens, ..base });
        }
    }
    out.push(L2Case { kind: Kind::HeadView { key: true, heads: 16, channels: 10240 }, tokens: 3, ..base });
    out.push(L2Case {
        kind: Kind::HeadView { key: false, heads: 4, channels: 1536 },
        tokens: 2,
        values: Values::WithSpecials { scale: 1.0, every: 40 },
        ..base
    });
    // Row lengths: shorter than a warp, not a multiple of 32, the largest one-warp row.
    for cols in [1, 20, 32, 100, 1023] {
        out.push(L2Case { cols, rows: 5, tokens: 2, ..base });
    }
    out.push(L2Case { kind: Kind::InPlace, tokens: 3, ..base });
    out.push(L2Case { zero_rows: true, ..base });
    out.push(L2Case { zero_rows: true, eps: 0.0, ..base });
    out.push(L2Case { eps: 1e-3, values: Values::Uniform(1e-3), ..base });
    out.push(L2Case { values: Values::WithSpecials { scale: 4.0, every: 30 }, tokens: 4, ..base });
    out.push(L2Case { values: Values::Uniform(1e-20), ..base });
    out.into_iter().map(L2Case::case).collect()
}
