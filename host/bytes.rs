//! Exact byte sets: which bytes of which buffers a view touches, as sorted disjoint runs.
//!
//! The fusion pass's legality check ([`crate::fusion::legality`]) reasons on these. A strided
//! view touches only its elements' bytes, not its whole first-to-last span, so the check can
//! tell a write into the gap of a strided view from a write into its elements. Where a view
//! would need more than [`MAX_RUNS`] runs, [`ByteSet::of`] falls back to a bound that is safe
//! for the use: the whole span for what may be touched ([`Bound::Over`]: reads, may-writes),
//! nothing for what is certainly written ([`Bound::Under`]: must-writes).

use crate::tensor::{BufferId, Tensor};
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;

/// Most runs one view is split into before [`ByteSet::of`] takes its bound.
pub const MAX_RUNS: usize = 1 << 16;

/// Which side to err on when a view's exact bytes are too many runs (or overflow).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// A superset: the view's whole span (what an op may read or write).
    Over,
    /// A subset: nothing (what an op certainly writes).
    Under,
}

/// Bytes of buffers: per buffer, sorted, disjoint, non-adjacent half-open runs.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ByteSet {
    runs: BTreeMap<BufferId, Vec<Range<usize>>>,
}

impl fmt::Debug for ByteSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut m = f.debug_map();
        for (b, runs) in &self.runs {
            m.entry(&b.0, runs);
        }
        m.finish()
    }
}

/// Sorts and merges overlapping or adjacent runs; drops empty ones.
fn normalize(runs: &mut Vec<Range<usize>>) {
    runs.retain(|r| r.start < r.end);
    runs.sort_unstable_by_key(|r| r.start);
    let mut out: Vec<Range<usize>> = Vec::with_capacity(runs.len());
    for r in runs.drain(..) {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    *runs = out;
}

/// The byte runs of a view's elements, or `None` when they overflow or exceed [`MAX_RUNS`].
fn exact_runs(t: &Tensor) -> Option<Vec<Range<usize>>> {
    let l = &t.layout;
    if l.is_empty() {
        return Some(Vec::new());
    }
    let size = l.dtype.size();
    // Dimensions that move: (ne, nb), fastest stride first. A dimension of one element or of
    // stride 0 (a broadcast) adds no bytes.
    let mut dims: Vec<(usize, usize)> = (0..4).filter(|&d| l.ne[d] > 1 && l.nb[d] > 0).map(|d| (l.ne[d], l.nb[d])).collect();
    dims.sort_unstable_by_key(|&(_, nb)| nb);
    // Fold the fastest dimensions into one run while each starts where the run so far ends.
    let mut run = size;
    let mut rest = dims.as_slice();
    while let Some((&(ne, nb), tail)) = rest.split_first() {
        if nb != run {
            break;
        }
        run = run.checked_mul(ne)?;
        rest = tail;
    }
    let count = rest.iter().try_fold(1usize, |acc, &(ne, _)| acc.checked_mul(ne))?;
    if count > MAX_RUNS {
        return None;
    }
    // Every combination of the remaining indices.
    let mut starts = vec![l.offset];
    for &(ne, nb) in rest {
        let mut next = Vec::with_capacity(starts.len() * ne);
        for &s in &starts {
            for i in 0..ne {
                next.push(s.checked_add(i.checked_mul(nb)?)?);
            }
        }
        starts = next;
    }
    starts.into_iter().map(|s| Some(s..s.checked_add(run)?)).collect()
}

/// The runs of a view's elements, or its [`Bound`] when they are too many to list.
fn view_runs(t: &Tensor, bound: Bound) -> Vec<Range<usize>> {
    match exact_runs(t) {
        Some(runs) => runs,
        None if bound == Bound::Over => t.layout.byte_range().into_iter().collect(),
        None => Vec::new(),
    }
}

impl ByteSet {
    pub fn new() -> Self {
        ByteSet::default()
    }

    /// The bytes of `t`'s elements (see [`Bound`] for views too large to list).
    pub fn of(t: &Tensor, bound: Bound) -> ByteSet {
        let mut s = ByteSet::new();
        s.add_view(t, bound);
        s
    }

    /// The union of [`ByteSet::of`] over `views`: every view's runs gathered first, then each
    /// buffer's runs sorted and merged once — n log n in the runs (adding the views one by one
    /// re-sorted the runs so far each time: quadratic for a CPY_SNAPSHOTS of 65,535 rows).
    pub fn of_all<'a>(views: impl IntoIterator<Item = &'a Tensor>, bound: Bound) -> ByteSet {
        let mut runs: BTreeMap<BufferId, Vec<Range<usize>>> = BTreeMap::new();
        for t in views {
            runs.entry(t.buffer).or_default().extend(view_runs(t, bound));
        }
        runs.retain(|_, v| {
            normalize(v);
            !v.is_empty()
        });
        ByteSet { runs }
    }

    /// Every byte of `buffer`.
    pub fn whole(buffer: BufferId) -> ByteSet {
        let mut s = ByteSet::new();
        s.insert(buffer, 0..usize::MAX);
        s
    }

    fn add_view(&mut self, t: &Tensor, bound: Bound) {
        self.extend(t.buffer, view_runs(t, bound));
    }

    fn extend(&mut self, buffer: BufferId, runs: Vec<Range<usize>>) {
        if runs.is_empty() {
            return;
        }
        let v = self.runs.entry(buffer).or_default();
        v.extend(runs);
        normalize(v);
    }

    pub fn insert(&mut self, buffer: BufferId, range: Range<usize>) {
        self.extend(buffer, vec![range]);
    }

    pub fn is_empty(&self) -> bool {
        self.runs.values().all(|v| v.is_empty())
    }

    /// Number of bytes (saturating).
    pub fn len(&self) -> usize {
        self.runs.values().flatten().fold(0usize, |acc, r| acc.saturating_add(r.len()))
    }

    /// Every run, buffer by buffer.
    pub fn runs(&self) -> impl Iterator<Item = (BufferId, Range<usize>)> + '_ {
        self.runs.iter().flat_map(|(b, v)| v.iter().map(move |r| (*b, r.clone())))
    }

    /// The run holding byte `at` of `buffer`, if any.
    pub fn run_containing(&self, buffer: BufferId, at: usize) -> Option<Range<usize>> {
        let v = self.runs.get(&buffer)?;
        let k = v.partition_point(|r| r.end <= at);
        v.get(k).filter(|r| r.start <= at).cloned()
    }

    pub fn union_with(&mut self, other: &ByteSet) {
        for (b, v) in &other.runs {
            self.extend(*b, v.clone());
        }
    }

    pub fn union(&self, other: &ByteSet) -> ByteSet {
        let mut s = self.clone();
        s.union_with(other);
        s
    }

    pub fn intersection(&self, other: &ByteSet) -> ByteSet {
        let mut out = ByteSet::new();
        for (b, xs) in &self.runs {
            let Some(ys) = other.runs.get(b) else { continue };
            let (mut i, mut j) = (0, 0);
            let mut v = Vec::new();
            while i < xs.len() && j < ys.len() {
                let (x, y) = (&xs[i], &ys[j]);
                let (s, e) = (x.start.max(y.start), x.end.min(y.end));
                if s < e {
                    v.push(s..e);
                }
                if x.end < y.end {
                    i += 1;
                } else {
                    j += 1;
                }
            }
            out.extend(*b, v);
        }
        out
    }

    pub fn intersects(&self, other: &ByteSet) -> bool {
        self.runs.iter().any(|(b, xs)| {
            let Some(ys) = other.runs.get(b) else { return false };
            let (mut i, mut j) = (0, 0);
            while i < xs.len() && j < ys.len() {
                if xs[i].start < ys[j].end && ys[j].start < xs[i].end {
                    return true;
                }
                if xs[i].end < ys[j].end {
                    i += 1;
                } else {
                    j += 1;
                }
            }
            false
        })
    }

    /// Removes every byte of `other` (one merge pass over both sorted run lists).
    pub fn subtract(&mut self, other: &ByteSet) {
        for (b, ys) in &other.runs {
            let Some(xs) = self.runs.get_mut(b) else { continue };
            let mut out = Vec::with_capacity(xs.len());
            let mut j = 0;
            for x in xs.drain(..) {
                let mut start = x.start;
                // Skip the cuts that end before this run.
                while j < ys.len() && ys[j].end <= start {
                    j += 1;
                }
                let mut k = j;
                while k < ys.len() && ys[k].start < x.end {
                    if ys[k].start > start {
                        out.push(start..ys[k].start);
                    }
                    start = start.max(ys[k].end);
                    k += 1;
                }
                if start < x.end {
                    out.push(start..x.end);
                }
            }
            *xs = out;
        }
        self.runs.retain(|_, v| !v.is_empty());
    }

    pub fn minus(&self, other: &ByteSet) -> ByteSet {
        let mut s = self.clone();
        s.subtract(other);
        s
    }

    /// True when every byte of `self` is in `other`.
    pub fn is_subset(&self, other: &ByteSet) -> bool {
        self.runs.iter().all(|(b, xs)| {
            let ys = other.runs.get(b).map(Vec::as_slice).unwrap_or(&[]);
            // Runs of `other` are disjoint and non-adjacent: each run of `self` must lie in one.
            xs.iter().all(|x| {
                let k = ys.partition_point(|y| y.end <= x.start);
                k < ys.len() && ys[k].start <= x.start && x.end <= ys[k].end
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::{DType, Layout};

    fn t(ne: [usize; 4], nb: [usize; 4], offset: usize) -> Tensor {
        Tensor::new(BufferId(0), Layout::contiguous(DType::F32, ne).view(ne, nb, offset))
    }

    fn runs(s: &ByteSet) -> Vec<Range<usize>> {
        s.runs().map(|(_, r)| r).collect()
    }

    #[test]
    fn a_contiguous_view_is_one_run_and_a_strided_one_its_elements() {
        let dense = t([4, 3, 1, 1], [4, 16, 48, 48], 8);
        assert_eq!(runs(&ByteSet::of(&dense, Bound::Under)), vec![8..56]);
        // Every other float of 4 rows: the gaps are not touched.
        let strided = t([2, 2, 1, 1], [8, 32, 64, 64], 0);
        assert_eq!(runs(&ByteSet::of(&strided, Bound::Under)), vec![0..4, 8..12, 32..36, 40..44]);
        // A transposed view covers the same bytes as the original.
        assert_eq!(runs(&ByteSet::of(&dense.transpose(), Bound::Under)), vec![8..56]);
        // Overlapping windows (stride below the run length) merge.
        let windows = t([3, 4, 1, 1], [4, 4, 64, 64], 0);
        assert_eq!(runs(&ByteSet::of(&windows, Bound::Under)), vec![0..24]);
        // A broadcast dimension adds nothing.
        assert_eq!(runs(&ByteSet::of(&t([2, 5, 1, 1], [4, 0, 0, 0], 0), Bound::Under)), vec![0..8]);
    }

    #[test]
    fn too_many_runs_or_overflow_take_the_safe_bound() {
        let huge = t([2, MAX_RUNS + 1, 1, 1], [4, 16, 16, 16], 0);
        assert_eq!(runs(&ByteSet::of(&huge, Bound::Over)), vec![0..(16 * MAX_RUNS + 8)]);
        assert!(ByteSet::of(&huge, Bound::Under).is_empty());
        let overflow = t([2, 2, 1, 1], [4, usize::MAX - 4, 4, 4], 0);
        assert!(ByteSet::of(&overflow, Bound::Under).is_empty());
        assert!(!ByteSet::of(&overflow, Bound::Over).is_empty());
    }

    #[test]
    fn set_algebra() {
        let mut a = ByteSet::new();
        a.insert(BufferId(1), 0..10);
        a.insert(BufferId(1), 20..30);
        let mut b = ByteSet::new();
        b.insert(BufferId(1), 5..25);
        b.insert(BufferId(2), 0..4);
        assert_eq!(runs(&a.intersection(&b)), vec![5..10, 20..25]);
        assert_eq!(runs(&a.minus(&b)), vec![0..5, 25..30]);
        let mut cuts = ByteSet::new();
        for r in [1..2, 4..6, 9..22, 28..40] {
            cuts.insert(BufferId(1), r);
        }
        assert_eq!(runs(&a.minus(&cuts)), vec![0..1, 2..4, 6..9, 22..28]);
        assert!(!a.is_subset(&cuts) && ByteSet::new().is_subset(&cuts));
        assert!(a.minus(&cuts).is_subset(&a) && !a.is_subset(&a.minus(&cuts)));
        assert!(a.intersects(&b) && !a.is_subset(&b));
        assert!(a.intersection(&b).is_subset(&a));
        assert_eq!(a.union(&b).len(), 34);
        a.insert(BufferId(1), 10..20);
        assert_eq!(runs(&a), vec![0..30]);
    }
}
