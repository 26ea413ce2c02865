//! The one legality check, for every fusion: from byte sets alone ([`ByteSet`]), whether
//! replacing a pattern of nodes by one fused node can change a byte that anything observes.
//!
//! A [`Candidate`] says which nodes the fusion replaces, where the fused node goes (the
//! position of one pattern node, `at`), which of the pattern's nodes write values that live
//! only inside the fused kernel (`eliminated`), along which (producer, consumer) pairs the
//! pattern passes values (`edges`), and which overlaps of its own reads and writes the fused
//! kernel supports element for element (`overlaps`). Every op declares what it may read, may
//! write and always writes ([`crate::ops::Op::inputs`], [`crate::ops::Op::outputs`],
//! [`crate::ops::Op::must_write`]); nothing here trusts a tensor's name, a planner or the
//! graph's builder.
//!
//! # Why an accepted rewrite changes nothing observable
//!
//! Let P = p₁ < … < p_k be the pattern in graph order and F the fused node at `at`. The fused
//! graph is reached from the original in two steps, each checked here:
//!
//! 1. **Make the pattern contiguous at `at`.** A node X strictly between p₁ and p_k that is not
//!    in P trades places with every pattern node on the far side of `at` from it (pattern
//!    nodes before X when X < `at`, after X when X > `at`). Two nodes trade places without
//!    changing anything when neither writes a byte the other reads or writes (may-sets on
//!    both sides). Any such conflict is a [`Refusal::Reorder`].
//! 2. **Replace the contiguous pattern by F.** F's kernel is the unfused kernels' bodies run
//!    together, so it computes what the pattern computes *when the pattern's values flow as
//!    the pattern intends* — checked byte for byte:
//!    - each byte a pattern node reads holds the value of the last pattern node before it that
//!      may write it; that must be a declared edge, a byte the producer always writes, and
//!      one F does not read from memory (it has the value inside) unless its kernel reads it
//!      before writing it (a supported overlap) — [`Refusal::UndeclaredDataflow`],
//!      [`Refusal::PartialValue`], [`Refusal::FusedReadsInternal`];
//!    - every other byte the pattern reads (its inputs from outside) F reads too
//!      ([`Refusal::FusedMissesInput`]), and since no pattern node wrote it before it was
//!      read, F sees the same bytes;
//!    - two pattern writes to the same bytes: the later one writes them all
//!      ([`Refusal::WrittenTwice`]), so the last writer's value is the result;
//!    - F writes every byte the kept (non-eliminated) pattern nodes always write and nothing
//!      they cannot write ([`Refusal::FusedWrites`]);
//!    - F's reads and writes share bytes only inside the overlaps its kernel supports
//!      ([`Refusal::FusedOverlap`]).
//!
//!    What differs after the swap are the **eliminated bytes** E: those whose last pattern
//!    writer is eliminated, plus those a kept pattern node may write and F never does. From
//!    `at` on, no node may read a byte of E before some node has certainly overwritten it
//!    ([`Refusal::EliminatedRead`]), and at the end no byte of E that is still stale may be
//!    one the caller observes (`live_out`: caches, graph outputs; [`Refusal::EliminatedLive`]).
//!
//! Every byte any node reads and every observed byte at the end are then the same in both
//! graphs; the fuzzer in `tests/fusion_fuzz.rs` tries to find a counter-example.

use super::Refusal;
use crate::graph::{Bound, ByteSet, Effects, Node};
use crate::ops::Op;
use crate::tensor::Tensor;
use std::fmt;

/// One proposed rewrite: what a fusion's matcher found.
#[derive(Debug)]
pub struct Candidate {
    /// The pattern's nodes (indices into the graph).
    pub nodes: Vec<usize>,
    /// The pattern node whose position the fused node takes.
    pub at: usize,
    /// The fused node's op.
    pub fused: Box<dyn Op>,
    /// (producer, consumer): the only pairs of pattern nodes along which a value may pass.
    pub edges: Vec<(usize, usize)>,
    /// Pattern nodes whose writes the fused node drops (their values live inside it).
    pub eliminated: Vec<usize>,
    /// (read, write) views of the fused op that may share bytes: the overlaps its kernel
    /// supports element for element.
    pub overlaps: Vec<(Tensor, Tensor)>,
}

/// Which way two nodes that trade places conflict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hazard {
    /// The node writes bytes the pattern node reads.
    WritesPatternInput,
    /// The node reads bytes the pattern node writes.
    ReadsPatternOutput,
    /// Both write the same bytes.
    BothWrite,
}

impl fmt::Display for Hazard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Hazard::WritesPatternInput => "writes bytes it reads",
            Hazard::ReadsPatternOutput => "reads bytes it writes",
            Hazard::BothWrite => "writes bytes it writes too",
        })
    }
}

/// An accepted rewrite: the bytes the fused graph leaves stale at the end of the run (see the
/// module docs; none of them is observed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    pub eliminated: ByteSet,
}

/// Checks `c` against `nodes` (the graph as it stands) and `live_out` (what the caller reads
/// after the run). `effects[i]` must be `nodes[i].effects()`.
pub fn check(nodes: &[Node], effects: &[Effects], live_out: &ByteSet, c: &Candidate) -> Result<Accepted, Refusal> {
    let mut pattern = c.nodes.clone();
    pattern.sort_unstable();
    pattern.dedup();
    let malformed = |what: &'static str| Err(Refusal::Malformed(what));
    if pattern.is_empty() || pattern.len() != c.nodes.len() || pattern.iter().any(|&i| i >= nodes.len()) || effects.len() != nodes.len() {
        return malformed("pattern nodes must be distinct nodes of the graph");
    }
    if !pattern.contains(&c.at) {
        return malformed("the fused node must take the place of a pattern node");
    }
    if c.eliminated.iter().any(|e| !pattern.contains(e))
        || c.edges.iter().any(|(a, b)| !(pattern.contains(a) && pattern.contains(b) && a < b))
    {
        return malformed("edges and eliminated nodes must be pattern nodes, edges forward");
    }
    let fused = Effects::of(c.fused.as_ref());
    let e = |i: usize| &effects[i];
    let kept = |i: &usize| !c.eliminated.contains(i);

    // F writes what the kept pattern nodes write.
    let mut kept_may = ByteSet::new();
    let mut kept_must = ByteSet::new();
    for &p in pattern.iter().filter(|p| kept(p)) {
        kept_may.union_with(&e(p).may_write);
        kept_must.union_with(&e(p).must_write);
    }
    if !kept_must.is_subset(&fused.must_write) {
        return Err(Refusal::FusedWrites("the fused node does not always write what the pattern always writes"));
    }
    if !fused.may_write.is_subset(&kept_may) {
        return Err(Refusal::FusedWrites("the fused node may write bytes the pattern never writes"));
    }

    // F's own operands share bytes only where its kernel allows it: an output with an input
    // only as a declared (read, write) pair, two outputs never (different threads write them).
    let (inputs, outputs) = (c.fused.inputs(), c.fused.outputs());
    let mut allowed = ByteSet::new();
    for (r, w) in &c.overlaps {
        allowed.union_with(&ByteSet::of(r, Bound::Over).intersection(&ByteSet::of(w, Bound::Over)));
    }
    for (k, o) in outputs.iter().enumerate() {
        let written = ByteSet::of(o, Bound::Over);
        if outputs[k + 1..].iter().any(|p| ByteSet::of(p, Bound::Over).intersects(&written)) {
            return Err(Refusal::FusedOverlap);
        }
        for i in &inputs {
            if ByteSet::of(i, Bound::Over).intersects(&written) && !c.overlaps.contains(&(*i, *o)) {
                return Err(Refusal::FusedOverlap);
            }
        }
    }

    // The pattern's own dataflow, and its inputs from outside: each byte a pattern node reads
    // holds the value of the last pattern node before it that may write it (walking back), or
    // what it held before the pattern.
    for (jj, &j) in pattern.iter().enumerate() {
        let mut unexplained = e(j).reads.clone();
        for &i in pattern[..jj].iter().rev() {
            let value = unexplained.intersection(&e(i).may_write);
            if value.is_empty() {
                continue;
            }
            if !c.edges.contains(&(i, j)) {
                return Err(Refusal::UndeclaredDataflow { producer: i, consumer: j });
            }
            if !value.is_subset(&e(i).must_write) {
                return Err(Refusal::PartialValue { producer: i, consumer: j });
            }
            // F may read such bytes only where its kernel reads them before it writes them (a
            // supported overlap): it then reads what the pattern read before its write.
            if !value.intersection(&fused.reads).is_subset(&allowed) {
                return Err(Refusal::FusedReadsInternal { producer: i, consumer: j });
            }
            unexplained.subtract(&value);
        }
        for &i in &pattern[..jj] {
            let both = e(i).may_write.intersection(&e(j).may_write);
            if !both.is_subset(&e(j).must_write) {
                return Err(Refusal::WrittenTwice { first: i, second: j });
            }
        }
        if !unexplained.is_subset(&fused.reads) {
            return Err(Refusal::FusedMissesInput { node: j });
        }
    }

    // Step 1: every node in between trades places with the pattern nodes across `at`.
    let (first, last) = (pattern[0], *pattern.last().expect("non-empty"));
    for x in first + 1..last {
        if pattern.binary_search(&x).is_ok() {
            continue;
        }
        let crossed = pattern.iter().filter(|&&p| if x < c.at { p < x } else { p > x });
        for &p in crossed {
            let hazard = if e(x).may_write.intersects(&e(p).reads) {
                Some(Hazard::WritesPatternInput)
            } else if e(x).reads.intersects(&e(p).may_write) {
                Some(Hazard::ReadsPatternOutput)
            } else if e(x).may_write.intersects(&e(p).may_write) {
                Some(Hazard::BothWrite)
            } else {
                None
            };
            if let Some(hazard) = hazard {
                return Err(Refusal::Reorder { node: x, pattern_node: p, hazard });
            }
        }
    }

    // The bytes the fused graph leaves stale, then nobody may look at them.
    let mut stale = ByteSet::new();
    for &p in &pattern {
        if kept(&p) {
            stale.subtract(&e(p).must_write);
        } else {
            stale.union_with(&e(p).may_write);
        }
    }
    stale.union_with(&kept_may.minus(&fused.may_write));
    for x in c.at + 1..nodes.len() {
        if pattern.binary_search(&x).is_ok() {
            continue;
        }
        if e(x).reads.intersects(&stale) {
            return Err(Refusal::EliminatedRead { node: x });
        }
        stale.subtract(&e(x).must_write);
    }
    if stale.intersects(live_out) {
        return Err(Refusal::EliminatedLive);
    }
    Ok(Accepted { eliminated: stale })
}
