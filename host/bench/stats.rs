//! Statistics of timing samples and the off/on schedule. Pure functions: unit-tested on the CPU.

use serde::{Deserialize, Serialize};

/// Order statistics of one set of samples (µs).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub n: usize,
    pub median: f64,
    pub p10: f64,
    pub p90: f64,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
}

/// The `q`-quantile (0 ≤ q ≤ 1) of sorted samples, linear between the closest ranks (numpy's
/// default): `sorted[(n−1)·q]` interpolated.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    debug_assert!(sorted.windows(2).all(|w| w[0] <= w[1]), "quantile needs sorted samples");
    match sorted.len() {
        0 => f64::NAN,
        1 => sorted[0],
        n => {
            let pos = (n - 1) as f64 * q.clamp(0.0, 1.0);
            let lo = pos.floor() as usize;
            let hi = (lo + 1).min(n - 1);
            sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
        }
    }
}

/// Summary of `samples`, `None` when there are none. NaN samples are dropped.
pub fn summarize(samples: &[f64]) -> Option<Summary> {
    let mut s: Vec<f64> = samples.iter().copied().filter(|x| !x.is_nan()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(|a, b| a.total_cmp(b));
    Some(Summary {
        n: s.len(),
        median: quantile(&s, 0.5),
        p10: quantile(&s, 0.1),
        p90: quantile(&s, 0.9),
        min: s[0],
        max: s[s.len() - 1],
        mean: s.iter().sum::<f64>() / s.len() as f64,
    })
}

/// Geometric mean of positive finite ratios; `None` if there are none (others are skipped).
pub fn geomean(xs: &[f64]) -> Option<f64> {
    let logs: Vec<f64> = xs.iter().filter(|x| x.is_finite() && **x > 0.0).map(|x| x.ln()).collect();
    (!logs.is_empty()).then(|| (logs.iter().sum::<f64>() / logs.len() as f64).exp())
}

/// One side of the comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arm {
    /// The unfused chain.
    Off,
    /// The fused chain (the unfused one again while fusion is not available).
    On,
}

impl Arm {
    pub fn fused(self) -> bool {
        self == Arm::On
    }

    pub fn label(self) -> &'static str {
        match self {
            Arm::Off => "off",
            Arm::On => "on",
        }
    }
}

/// ABBA order over `rounds` rounds (off on on off, repeated): each arm runs as often as the
/// other, and as often first as last within a round, so slow drifts (clocks, temperature)
/// cancel out of the comparison.
pub fn abba(rounds: usize) -> Vec<Arm> {
    (0..rounds).flat_map(|_| [Arm::Off, Arm::On, Arm::On, Arm::Off]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_between_ranks() {
        let s: Vec<f64> = (1..=11).map(f64::from).collect();
        assert_eq!(quantile(&s, 0.5), 6.0);
        assert_eq!(quantile(&s, 0.1), 2.0);
        assert_eq!(quantile(&s, 0.9), 10.0);
        assert_eq!(quantile(&[1.0, 2.0], 0.5), 1.5);
        assert_eq!(quantile(&[3.0], 0.9), 3.0);
        assert!(quantile(&[], 0.5).is_nan());
        // numpy.percentile([1, 2, 3, 4], 10) = 1.3
        assert!((quantile(&[1.0, 2.0, 3.0, 4.0], 0.1) - 1.3).abs() < 1e-12);
    }

    #[test]
    fn summaries_sort_and_skip_nans() {
        let s = summarize(&[5.0, f64::NAN, 1.0, 3.0, 2.0, 4.0]).unwrap();
        assert_eq!((s.n, s.median, s.min, s.max, s.mean), (5, 3.0, 1.0, 5.0, 3.0));
        assert!((s.p10 - 1.4).abs() < 1e-12 && (s.p90 - 4.6).abs() < 1e-12);
        assert!(summarize(&[]).is_none());
        assert!(summarize(&[f64::NAN]).is_none());
    }

    #[test]
    fn geometric_mean_of_ratios() {
        assert!((geomean(&[0.5, 2.0]).unwrap() - 1.0).abs() < 1e-12);
        assert!((geomean(&[0.25, 1.0]).unwrap() - 0.5).abs() < 1e-12);
        assert!((geomean(&[0.8, f64::NAN, 0.0, -1.0]).unwrap() - 0.8).abs() < 1e-12);
        assert_eq!(geomean(&[]), None);
    }

    #[test]
    fn abba_balances_both_arms_and_positions() {
        let order = abba(3);
        assert_eq!(order.len(), 12);
        assert_eq!(&order[..4], &[Arm::Off, Arm::On, Arm::On, Arm::Off]);
        assert_eq!(order.iter().filter(|a| **a == Arm::On).count(), 6);
        // Mean position of each arm is the same: no arm is systematically earlier.
        let mean_pos = |arm| order.iter().enumerate().filter(|(_, a)| **a == arm).map(|(i, _)| i as f64).sum::<f64>() / 6.0;
        assert_eq!(mean_pos(Arm::Off), mean_pos(Arm::On));
        assert!(abba(0).is_empty());
    }
}
