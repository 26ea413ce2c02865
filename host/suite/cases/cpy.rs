//! CPY cases: the layer's `window(o)` → `dst(slot)` copies at Qwen3.5 sizes (single and as the
//! W2 sequence of K launches), generic 4-D strided ↔ contiguous copies between different
//! shapes, a broadcast source, and block-boundary sizes.

use super::conv_layer::ConvLayer;
use crate::ops::{Cpy, Op};
use crate::suite::inputs::Values;
use crate::suite::{Builder, Case, Tolerance};
use crate::tensor::{DType, Tensor};

pub const GROUP: &str = "CPY";

#[derive(Clone, Copy, Debug)]
enum CpyCase {
    /// One CPY `window(o)` → `dst(slot)` of a layer (filled conv_input, any-bits cache).
    Window { layer: ConvLayer, o: usize, slot: usize },
    /// The W2 sequence: for t' = 1 … K, `window(max(0, n_t − K + t'))` → `dst(K − t')`.
    Snapshots { layer: ConvLayer },
    /// src ne with per-dimension padding → dst ne (same count) with its own padding.
    Generic { src: [usize; 4], src_pad: [usize; 4], dst: [usize; 4], dst_pad: [usize; 4] },
    /// Contiguous src → a dst view whose dimensions run in reverse order in memory.
    Reversed { ne: [usize; 4] },
    /// A source row of `len` read `times` over through a zero stride → contiguous dst.
    Broadcast { len: usize, times: usize },
}

impl CpyCase {
    fn layer(channels: usize, n_t: usize, n_s: usize, groups: usize) -> ConvLayer {
        // M = n_s + 1 cells per group with kv_head = 1: every dst(slot) ends on its group's last cell.
        ConvLayer { d_conv: 4, channels, n_t, n_s, cells: n_s + 1, groups, kv_head: 1 }
    }

    fn flat(n: usize) -> Self {
        CpyCase::Generic { src: [n, 1, 1, 1], src_pad: [0; 4], dst: [n, 1, 1, 1], dst_pad: [0; 4] }
    }

    fn name(&self) -> String {
        match self {
            CpyCase::Window { layer: l, o, slot } => {
                format!("{GROUP}(window(o={o})->dst(slot={slot}),C={},n_t={},n_s={},K={})", l.channels, l.n_t, l.n_s, l.groups)
            }
            CpyCase::Snapshots { layer: l } => format!("{GROUP}(W2 x{},C={},n_t={},n_s={})", l.groups, l.channels, l.n_t, l.n_s),
            CpyCase::Generic { src, src_pad, dst, dst_pad } => {
                format!("{GROUP}(src={src:?},src_pad={src_pad:?},dst={dst:?},dst_pad={dst_pad:?})")
            }
            CpyCase::Reversed { ne } => format!("{GROUP}(ne={ne:?},dst_reversed)"),
            CpyCase::Broadcast { len, times } => format!("{GROUP}(broadcast_src,len={len},times={times})"),
        }
    }

    fn ops(&self, b: &mut Builder) -> Vec<Box<dyn Op>> {
        match *self {
            CpyCase::Window { layer, o, slot } => {
                let conv_input = b.input([layer.state_len() + layer.n_t, layer.channels, layer.n_s, 1], Values::AnyBits);
                let cache = layer.cache(b);
                vec![Box::new(Cpy { src: layer.window(&conv_input, o), dst: layer.dst(&cache, slot) })]
            }
            CpyCase::Snapshots { layer } => {
                let conv_input = b.input([layer.state_len() + layer.n_t, layer.channels, layer.n_s, 1], Values::AnyBits);
                let cache = layer.cache(b);
                let k = layer.groups;
                (1..=k)
                    .map(|tp| {
                        let o = (layer.n_t + tp).saturating_sub(k);
                        Box::new(Cpy { src: layer.window(&conv_input, o), dst: layer.dst(&cache, k - tp) }) as Box<dyn Op>
                    })
                    .collect()
            }
            CpyCase::Generic { src, src_pad, dst, dst_pad } => {
                let src = b.tensor_padded(DType::F32, src, src_pad, Values::AnyBits);
                let dst = b.tensor_padded(DType::F32, dst, dst_pad, Values::AnyBits);
                vec![Box::new(Cpy { src, dst })]
            }
            CpyCase::Reversed { ne } => {
                let src = b.input(ne, Values::AnyBits);
                let rev = b.output([ne[3], ne[2], ne[1], ne[0]]);
                let nb = rev.layout.nb;
                let dst = rev.view(ne, [nb[3], nb[2], nb[1], nb[0]], 0);
                vec![Box::new(Cpy { src, dst })]
            }
            CpyCase::Broadcast { len, times } => {
                let row = b.input([len, 1, 1, 1], Values::AnyBits);
                let src: Tensor = row.view([len, times, 1, 1], [4, 0, 0, 0], 0);
                vec![Box::new(Cpy { src, dst: b.output([len * times, 1, 1, 1]) })]
            }
        }
    }

    fn case(self) -> Case {
        let name = self.name();
        Case::seeded(GROUP, name, move |mut b| {
            let ops = self.ops(&mut b);
            Ok(b.finish(ops, Tolerance::BitExact, true))
        })
    }
}

pub fn cases() -> Vec<Case> {
    let l = CpyCase::layer;
    [
        // W1 (R = 0): window(n_t) → dst(0) at Qwen3.5 sizes.
        CpyCase::Window { layer: l(8192, 1, 1, 1), o: 1, slot: 0 },
        CpyCase::Window { layer: l(10240, 16, 1, 1), o: 16, slot: 0 },
        // Single snapshot copies: a middle window into slot 2, the incoming state into slot 4,
        // two sequences.
        CpyCase::Window { layer: l(8192, 16, 2, 17), o: 7, slot: 9 },
        CpyCase::Window { layer: l(8192, 4, 1, 5), o: 0, slot: 4 },
        CpyCase::Window { layer: l(8192, 8, 2, 3), o: 6, slot: 2 },
        // W2 as the layer launches it: K copies, including a short draft (n_t < K).
        CpyCase::Snapshots { layer: l(8192, 4, 1, 5) },
        CpyCase::Snapshots { layer: l(256, 3, 2, 6) },
        // Generic 4-D: strided → contiguous of another shape, contiguous → strided, strided →
        // strided, reversed dimension order.
        CpyCase::Generic { src: [5, 3, 4, 2], src_pad: [1, 2, 1, 1], dst: [120, 1, 1, 1], dst_pad: [0; 4] },
        CpyCase::Generic { src: [7, 11, 3, 2], src_pad: [0; 4], dst: [3, 2, 77, 1], dst_pad: [2, 1, 3, 0] },
        CpyCase::Generic { src: [6, 5, 4, 1], src_pad: [2, 1, 0, 0], dst: [4, 6, 5, 1], dst_pad: [3, 0, 1, 0] },
        CpyCase::Reversed { ne: [7, 11, 3, 2] },
        CpyCase::Broadcast { len: 16, times: 9 },
        // Block boundaries (64 threads) and a large flat copy.
        CpyCase::flat(1),
        CpyCase::flat(64),
        CpyCase::flat(65),
        CpyCase::flat((1 << 20) + 5),
    ]
    .into_iter()
    .map(CpyCase::case)
    .collect()
}
