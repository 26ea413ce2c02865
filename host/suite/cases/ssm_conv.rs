//! SSM_CONV cases: every d_conv, SiLU on/off, bias on/off, small to Qwen3.5 shapes, padded
//! (strided) views, special values.

use crate::ops::SsmConv;
use crate::suite::inputs::Values;
use crate::suite::{Case, Tolerance};
use crate::tensor::DType;

pub const GROUP: &str = "SSM_CONV";

/// One case's parameters.
#[derive(Clone, Copy, Debug)]
pub struct ConvCase {
    pub d_conv: usize,
    pub channels: usize,
    pub tokens: usize,
    pub seqs: usize,
    pub silu: bool,
    pub bias: bool,
    pub specials: bool,
    /// Pad the input's channel rows and the output's token rows (non-contiguous strides).
    pub padded: bool,
}

impl ConvCase {
    pub fn name(&self) -> String {
        format!(
            "{GROUP}(d_conv={},C={},n_t={},n_s={}{}{}{}{})",
            self.d_conv,
            self.channels,
            self.tokens,
            self.seqs,
            if self.silu { ",silu" } else { "" },
            if self.bias { ",bias" } else { "" },
            if self.specials { ",specials" } else { "" },
            if self.padded { ",padded" } else { "" }
        )
    }

    pub fn case(self) -> Case {
        let name = self.name();
        Case::seeded(GROUP, name, move |mut b| {
            let p = self;
            let values = if p.specials { Values::WithSpecials { scale: 2.0, every: 50 } } else { Values::Uniform(2.0) };
            let pad = if p.padded { [3, 1, 0, 0] } else { [0; 4] };
            let cols = p.d_conv - 1 + p.tokens;
            let conv_input = b.tensor_padded(DType::F32, [cols, p.channels, p.seqs, 1], pad, values);
            let weight = b.input([p.d_conv, p.channels, 1, 1], Values::Uniform(1.0));
            let bias = p.bias.then(|| b.input([p.channels, 1, 1, 1], Values::Uniform(0.5)));
            let dst = b.tensor_padded(
                DType::F32,
                [p.channels, p.tokens, p.seqs, 1],
                if p.padded { [5, 0, 0, 0] } else { [0; 4] },
                Values::AnyBits,
            );
            let op = SsmConv { conv_input, weight, bias, dst, apply_silu: p.silu };
            // Without SiLU no MUFU op enters: the exact-math reference must match bitwise. With
            // it, ex2 (≤ 2 ulp) feeds e + 1 and rcp (≤ 1 ulp), whose errors can land in a
            // binade twice as wide as the result's: 8 ulp bounds the composition.
            let tolerance = if p.silu { Tolerance::Ulps(8) } else { Tolerance::BitExact };
            Ok(b.finish(vec![Box::new(op)], tolerance, false))
        })
    }
}

pub fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    let base = ConvCase { d_conv: 4, channels: 128, tokens: 1, seqs: 1, silu: true, bias: false, specials: false, padded: false };
    // Every width × a spread of token counts (short-sequence geometry, n_t ≤ 32), SiLU on.
    for d_conv in [3, 4, 5, 9, 15] {
        for (tokens, channels, seqs) in [(1, 128, 1), (3, 256, 2), (8, 384, 1), (16, 128, 3), (32, 256, 1)] {
            out.push(ConvCase { d_conv, tokens, channels, seqs, ..base });
        }
    }
    // Without SiLU (bit-exact against exact math), with bias, with both.
    for d_conv in [3, 4, 5] {
        out.push(ConvCase { d_conv, tokens: 4, silu: false, ..base });
        out.push(ConvCase { d_conv, tokens: 4, bias: true, ..base });
        out.push(ConvCase { d_conv, tokens: 7, silu: false, bias: true, ..base });
    }
    // Channel counts that are not a multiple of the block, padded views, special values.
    out.push(ConvCase { channels: 200, tokens: 5, ..base });
    out.push(ConvCase { channels: 130, tokens: 2, seqs: 2, padded: true, ..base });
    out.push(ConvCase { d_conv: 9, tokens: 6, padded: true, bias: true, ..base });
    for d_conv in [3, 4, 5] {
        out.push(ConvCase { d_conv, tokens: 9, channels: 256, specials: true, ..base });
        out.push(ConvCase { d_conv, tokens: 9, channels: 256, specials: true, silu: false, ..base });
    }
    // Qwen3.5 9B / 4B (C = 8192) and 27B (C = 10240) verify widths.
    for tokens in [1, 2, 4, 8, 16] {
        out.push(ConvCase { channels: 8192, tokens, ..base });
    }
    out.push(ConvCase { channels: 10240, tokens: 16, ..base });
    out.push(ConvCase { channels: 8192, tokens: 16, specials: true, ..base });
    out.into_iter().map(ConvCase::case).collect()
}
