//! Seeded random inputs, shared by the suite, the layer and the bench. Never zeros alone (they
//! hide unwritten outputs); optionally salted with the values that break kernels: ±0,
//! subnormals, ±Inf, NaNs with payloads, extremes.

use rand::Rng;
use rand::rngs::StdRng;

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

/// `n` values drawn as `values` says.
pub fn fill(rng: &mut StdRng, n: usize, values: Values) -> Vec<f32> {
    (0..n)
        .map(|_| match values {
            Values::Uniform(scale) => rng.random_range(-scale..scale),
            Values::WithSpecials { scale, every } => {
                if rng.random_range(0..every) == 0 {
                    special(rng)
                } else {
                    rng.random_range(-scale..scale)
                }
            }
            Values::AnyBits => f32::from_bits(rng.random()),
        })
        .collect()
}

/// Random bytes (poison for output buffers and padding).
pub fn poison(rng: &mut StdRng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.random()).collect()
}
