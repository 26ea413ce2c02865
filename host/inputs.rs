//! Seeded random inputs, shared by the suite, the layer and the bench. Never zeros alone (they
//! hide unwritten outputs); optionally salted with the values that break kernels: ±0,
//! subnormals, ±Inf, NaNs with payloads, extremes.

use crate::error::{Error, Result};
use rand::Rng;
use rand::rngs::StdRng;

const OP: &str = "inputs::fill";

/// How a tensor's values are drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Values {
    /// Uniform in (−scale, scale).
    Uniform(f32),
    /// Uniform in (−scale, scale), with about one value in `every` replaced by a special one.
    WithSpecials {
        /// Half-width of the uniform range.
        scale: f32,
        /// About one value in this many is special.
        every: u32,
    },
    /// Any bit pattern at all (for pure copies).
    AnyBits,
}

impl Values {
    /// Refuses (typed, [`Error::Invalid`]) what [`fill`] cannot draw from: a half-width `scale`
    /// that is not finite and > 0 (an empty or NaN range), or whose range (−scale, scale) is
    /// wider than the largest finite float (scale > f32::MAX / 2), or `every` = 0.
    pub fn check(self) -> Result<()> {
        let (scale, every) = match self {
            Values::Uniform(scale) => (scale, 1),
            Values::WithSpecials { scale, every } => (scale, every),
            Values::AnyBits => return Ok(()),
        };
        if !(scale > 0.0 && (2.0 * scale).is_finite()) {
            return Err(Error::Invalid {
                op: OP,
                what: format!("{self:?}: the half-width must be finite, > 0 and at most f32::MAX / 2 (got {scale})"),
            });
        }
        if every == 0 {
            return Err(Error::Invalid { op: OP, what: format!("{self:?}: `every` must be ≥ 1 (one value in `every` is special)") });
        }
        Ok(())
    }
}

/// One special value: ±0, a subnormal of either sign, ±Inf, a NaN with a random payload, the
/// largest/smallest normals, or a value whose square underflows.
pub fn special(rng: &mut StdRng) -> f32 {
    let sign = if rng.random::<bool>() { 0x8000_0000u32 } else { 0 };
    let bits = match rng.random_range(0..8) {
        0 => 0,
        1 => rng.random_range(1..0x0080_0000),               // subnormal
        2 => 0x7F80_0000,                                    // Inf
        3 => 0x7F80_0000 | rng.random_range(1..0x0080_0000), // NaN, random payload
        4 => 0x7F7F_FFFF,                                    // max normal
        5 => 0x0080_0000,                                    // min normal
        6 => rng.random_range(0x0080_0000..0x1F00_0000),     // tiny normal: square flushes
        _ => rng.random_range(0x5000_0000..0x7F00_0000),     // huge: products overflow
    };
    f32::from_bits(bits | sign)
}

/// `n` values drawn as `values` says, or a typed error: `values` that [`Values::check`]
/// refuses, or `n` values (4·n bytes) more than the [`crate::memory::default_host_budget`]
/// ([`Error::OutOfMemory`]; nothing is allocated then).
pub fn fill(rng: &mut StdRng, n: usize, values: Values) -> Result<Vec<f32>> {
    values.check()?;
    let budget = crate::memory::default_host_budget();
    let requested = n.saturating_mul(4);
    let oom = || Error::OutOfMemory { op: OP, requested, available: budget, budget };
    if requested > budget {
        return Err(oom());
    }
    let mut out = Vec::new();
    out.try_reserve_exact(n).map_err(|_| oom())?;
    out.extend((0..n).map(|_| match values {
        Values::Uniform(scale) => rng.random_range(-scale..scale),
        Values::WithSpecials { scale, every } => {
            if rng.random_range(0..every) == 0 {
                special(rng)
            } else {
                rng.random_range(-scale..scale)
            }
        }
        Values::AnyBits => f32::from_bits(rng.random()),
    }));
    Ok(out)
}

/// Random bytes (poison for output buffers and padding).
pub fn poison(rng: &mut StdRng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.random()).collect()
}
