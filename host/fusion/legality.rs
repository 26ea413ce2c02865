//! The one legality check, for every fusion: from byte sets alone ([`ByteSet`]), whether
//! replacing a pattern of nodes by one fused node can change a byte that anything observes.
//!
//! A [`Candidate`] says which nodes the fusion replaces, where the fused node goes (the
//! position of one pattern node, `at`), which of the pattern's nodes write values that live
//! only inside the fused kernel (`eliminated`) and which outputs of the others do
//! (`eliminated_values`), along which (producer, consumer) pairs the
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
//!      one F does not read from memory (it has the value inside) unless the pattern also
//!      reads that byte as it was before the pattern and F's kernel reads it before writing it
//!      (a supported overlap) — [`Refusal::UndeclaredDataflow`],
//!      [`Refusal::PartialValue`], [`Refusal::FusedReadsInternal`]. \[replay\] A byte the
//!      producer may leave as it was is such a byte, or refused: F reads it from memory as it
//!      was before the pattern (an earlier pattern writer of it is [`Refusal::WrittenTwice`]),
//!      and its kernel takes
//!      the producer's value where the producer writes and the bytes read where it does not
//!      (GATED_DELTA_NET_REPLAY_VERIFY: the rows a count-dependent replay commits, read back
//!      by the verify);
//!    - every other byte the pattern reads (its inputs from outside) F reads too
//!      ([`Refusal::FusedMissesInput`]), and since no pattern node wrote it before it was
//!      read, F sees the same bytes;
//!    - two pattern writes to the same bytes: the later one writes them all
//!      ([`Refusal::WrittenTwice`]), so the last writer's value is the result;
//!    - F writes every byte the kept (non-eliminated) pattern nodes always write — but the
//!      candidate's eliminated values — and nothing they cannot write
//!      ([`Refusal::FusedWrites`]);
//!    - F's reads and writes share bytes only inside the overlaps its kernel supports
//!      ([`Refusal::FusedOverlap`]).
//!
//!    What differs after the swap are the **eliminated bytes** E: those whose last pattern
//!    writer is eliminated or writes them as an eliminated value, plus those a kept pattern
//!    node may write and F never does. From
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
    /// \[replay\] Outputs of kept pattern nodes that the fused node does not write (a value only
    /// the pattern's own nodes could read, like the verify step's scratch state slot): their
    /// bytes count as eliminated, whatever node wrote them.
    pub eliminated_values: Vec<Tensor>,
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
    /// The fused node's effects (computed by the check; the pass keeps them for the new graph).
    pub fused: Effects,
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
    let dropped = ByteSet::of_all(&c.eliminated_values, Bound::Over);

    // F writes what the kept pattern nodes write (but the eliminated values).
    let mut kept_may = ByteSet::new();
    let mut kept_must = ByteSet::new();
    for &p in pattern.iter().filter(|p| kept(p)) {
        kept_may.union_with(&e(p).may_write);
        kept_must.union_with(&e(p).must_write.minus(&dropped));
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
    // what it held before the pattern. First the bytes the pattern reads from before it: F
    // reads its inputs from memory at its start, so the only pattern-internal bytes it may
    // read there are ones the pattern also reads as they were before it (an input it then
    // overwrites in a supported overlap, like the SiLU output on qkv).
    let mut read_from_before = ByteSet::new();
    for (jj, &j) in pattern.iter().enumerate() {
        let mut unexplained = e(j).reads.clone();
        for &i in &pattern[..jj] {
            unexplained.subtract(&e(i).may_write);
        }
        read_from_before.union_with(&unexplained);
    }
    let readable = allowed.intersection(&read_from_before);
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
            // Bytes the producer may leave as they were: the consumer reads the producer's value
            // or the bytes from before the pattern. Only F reading them from memory, before
            // writing them, as the pattern also reads them, in an overlap its kernel supports
            // (which then takes the producer's value where it writes and the bytes read where it
            // does not: \[replay\] a count-dependent commit read back) gives the same. (An earlier
            // pattern node that may write them too is `WrittenTwice`, refused on the producer's
            // own turn, before this consumer's.)
            let partial = value.minus(&e(i).must_write);
            if !partial.is_subset(&readable.intersection(&fused.reads)) {
                return Err(Refusal::PartialValue { producer: i, consumer: j });
            }
            // F may read such bytes only where the pattern read them before writing them and
            // F's kernel does the same (a supported overlap): it then reads what the pattern read.
            if !value.intersection(&fused.reads).is_subset(&readable) {
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
            stale.subtract(&e(p).must_write.minus(&dropped));
            stale.union_with(&e(p).may_write.intersection(&dropped));
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
    Ok(Accepted { eliminated: stale, fused })
}

#[cfg(test)]
mod tests {
    //! Each rule on a hand-made graph of copies (STAGE nodes), bypassing every matcher: the
    //! pattern `x → y → z` (two copies) fused into one copy `x → z` that drops `y`.
    use super::*;
    use crate::graph::Stage;
    use crate::tensor::{BufferId, DType, Layout};

    /// Floats `at .. at + n` of buffer `b`.
    fn t(b: usize, at: usize, n: usize) -> Tensor {
        let l = Layout::contiguous(DType::F32, [n, 1, 1, 1]);
        Tensor::new(BufferId(b), l.view(l.ne, l.nb, 4 * at))
    }
    fn copy(src: Tensor, dst: Tensor) -> Node {
        Node::new(Box::new(Stage { src, dst }), Some(0))
    }
    /// A test op with the effects it is given: reads `reads`, may write `may`, always writes
    /// `must` (runs nowhere).
    #[derive(Clone, Debug)]
    struct Declared {
        reads: Vec<Tensor>,
        may: Vec<Tensor>,
        must: Vec<Tensor>,
    }
    impl Op for Declared {
        fn name(&self) -> &'static str {
            "DECLARED"
        }
        fn validate(&self, _: &dyn crate::memory::Memory) -> crate::Result<()> {
            Ok(())
        }
        fn prepare(&self, _: &crate::gpu::Gpu, _: &crate::memory::DeviceMemory) -> crate::Result<crate::gpu::PreparedLaunch> {
            unreachable!("CPU only")
        }
        fn reference(&self, _: &mut crate::memory::HostMemory, _: &mut dyn crate::reference::math::Mufu) -> crate::Result<()> {
            Ok(())
        }
        fn inputs(&self) -> Vec<Tensor> {
            self.reads.clone()
        }
        fn outputs(&self) -> Vec<Tensor> {
            self.may.clone()
        }
        fn must_write(&self) -> Vec<Tensor> {
            self.must.clone()
        }
    }
    /// A copy from `src` into `written` that declares it may write all of `declared`.
    fn partial(src: Tensor, written: Tensor, declared: Tensor) -> Declared {
        Declared { reads: vec![src], may: vec![declared], must: vec![written] }
    }
    const X: usize = 1;
    const Y: usize = 2;
    const Z: usize = 3;
    const W: usize = 4;

    /// nodes: [extra before…] x→y, [between…], y→z, [after…]
    fn graph(between: Vec<Node>, after: Vec<Node>) -> (Vec<Node>, usize, usize) {
        let mut nodes = vec![copy(t(X, 0, 8), t(Y, 0, 8))];
        nodes.extend(between);
        let second = nodes.len();
        nodes.push(copy(t(Y, 0, 8), t(Z, 0, 8)));
        nodes.extend(after);
        (nodes, 0, second)
    }
    fn candidate(first: usize, second: usize) -> Candidate {
        Candidate {
            nodes: vec![first, second],
            at: first,
            fused: Box::new(Stage { src: t(X, 0, 8), dst: t(Z, 0, 8) }),
            edges: vec![(first, second)],
            eliminated: vec![first],
            eliminated_values: vec![],
            overlaps: vec![],
        }
    }
    fn run(nodes: &[Node], live_out: &ByteSet, c: &Candidate) -> Result<Accepted, Refusal> {
        let effects: Vec<Effects> = nodes.iter().map(Node::effects).collect();
        check(nodes, &effects, live_out, c)
    }
    fn live(ts: &[Tensor]) -> ByteSet {
        ByteSet::of_all(ts, Bound::Over)
    }

    #[test]
    fn the_plain_pattern_is_accepted_and_reports_its_stale_bytes() {
        let (nodes, a, b) = graph(vec![], vec![]);
        let ok = run(&nodes, &live(&[t(Z, 0, 8)]), &candidate(a, b)).unwrap();
        assert_eq!(ok.eliminated, live(&[t(Y, 0, 8)]));
        // Stale bytes a later node overwrites whole are not reported.
        let (nodes, a, b) = graph(vec![], vec![copy(t(W, 0, 8), t(Y, 0, 8))]);
        assert!(run(&nodes, &live(&[t(Y, 0, 8)]), &candidate(a, b)).unwrap().eliminated.is_empty());
    }

    #[test]
    fn stale_bytes_may_not_be_read_or_observed() {
        let (nodes, a, b) = graph(vec![], vec![copy(t(Y, 3, 1), t(W, 0, 1))]);
        assert_eq!(run(&nodes, &ByteSet::new(), &candidate(a, b)), Err(Refusal::EliminatedRead { node: 2 }));
        // A partial overwrite leaves the rest stale: a reader of it is refused, and so is
        // observing it after the run.
        let (nodes, a, b) = graph(vec![], vec![copy(t(W, 0, 4), t(Y, 0, 4)), copy(t(Y, 0, 8), t(W, 8, 8))]);
        assert_eq!(run(&nodes, &ByteSet::new(), &candidate(a, b)), Err(Refusal::EliminatedRead { node: 3 }));
        let (nodes, a, b) = graph(vec![], vec![copy(t(W, 0, 4), t(Y, 0, 4))]);
        assert_eq!(run(&nodes, &live(&[t(Y, 6, 1)]), &candidate(a, b)), Err(Refusal::EliminatedLive));
        assert!(run(&nodes, &live(&[t(Y, 0, 4)]), &candidate(a, b)).is_ok());
    }

    #[test]
    fn nodes_in_between_must_trade_places() {
        // at = the first copy: the second moves up past the node in between.
        let hazards = [
            (copy(t(W, 0, 8), t(Y, 2, 1)), Hazard::WritesPatternInput),
            (copy(t(Z, 5, 1), t(W, 0, 1)), Hazard::ReadsPatternOutput),
            (copy(t(W, 0, 1), t(Z, 7, 1)), Hazard::BothWrite),
        ];
        for (x, hazard) in hazards {
            let (nodes, a, b) = graph(vec![x], vec![]);
            assert_eq!(run(&nodes, &ByteSet::new(), &candidate(a, b)), Err(Refusal::Reorder { node: 1, pattern_node: 2, hazard }));
        }
        // Unrelated nodes are fine; with the fused node at the second copy, a writer of the
        // first copy's source in between is the hazard instead.
        let (nodes, a, b) = graph(vec![copy(t(W, 0, 8), t(W, 8, 8))], vec![]);
        assert!(run(&nodes, &ByteSet::new(), &candidate(a, b)).is_ok());
        let (nodes, a, b) = graph(vec![copy(t(W, 0, 1), t(X, 4, 1))], vec![]);
        let c = Candidate { at: b, ..candidate(a, b) };
        assert_eq!(
            run(&nodes, &ByteSet::new(), &c),
            Err(Refusal::Reorder { node: 1, pattern_node: 0, hazard: Hazard::WritesPatternInput })
        );
    }

    #[test]
    fn the_patterns_dataflow_must_be_declared_complete_and_internal() {
        let (nodes, a, b) = graph(vec![], vec![]);
        let c = Candidate { edges: vec![], ..candidate(a, b) };
        assert_eq!(run(&nodes, &ByteSet::new(), &c), Err(Refusal::UndeclaredDataflow { producer: 0, consumer: 1 }));
        // The consumer reads bytes of y the producer may leave as they were.
        let partial = partial(t(X, 0, 4), t(Y, 0, 4), t(Y, 0, 8));
        let nodes = vec![Node::new(Box::new(partial), Some(0)), copy(t(Y, 0, 8), t(Z, 0, 8))];
        let c = Candidate { fused: Box::new(Stage { src: t(X, 0, 8), dst: t(Z, 0, 8) }), ..candidate(0, 1) };
        assert_eq!(run(&nodes, &ByteSet::new(), &c), Err(Refusal::PartialValue { producer: 0, consumer: 1 }));
        // The fused op reads the internal value from memory.
        let (nodes, a, b) = graph(vec![], vec![]);
        let reads_y = crate::ops::Binary { kind: crate::ops::BinaryKind::Add, a: t(X, 0, 8), b: t(Y, 0, 8), dst: t(Z, 0, 8) };
        let c = Candidate { fused: Box::new(reads_y), ..candidate(a, b) };
        assert_eq!(run(&nodes, &ByteSet::new(), &c), Err(Refusal::FusedReadsInternal { producer: 0, consumer: 1 }));
        // … or misses an input from outside.
        let c = Candidate { fused: Box::new(Stage { src: t(W, 0, 8), dst: t(Z, 0, 8) }), ..candidate(a, b) };
        assert_eq!(run(&nodes, &ByteSet::new(), &c), Err(Refusal::FusedMissesInput { node: 0 }));
    }

    #[test]
    fn the_fused_writes_must_be_the_kept_writes() {
        let (nodes, a, b) = graph(vec![], vec![]);
        let c = Candidate { fused: Box::new(Stage { src: t(X, 0, 4), dst: t(Z, 0, 4) }), ..candidate(a, b) };
        assert!(matches!(run(&nodes, &ByteSet::new(), &c), Err(Refusal::FusedWrites(_))));
        let c = Candidate { fused: Box::new(Stage { src: t(X, 0, 8), dst: t(W, 0, 8) }), ..candidate(a, b) };
        assert!(matches!(run(&nodes, &ByteSet::new(), &c), Err(Refusal::FusedWrites(_))));
        // Two pattern writes of the same bytes: the later must write them all.
        let partial = partial(t(X, 0, 4), t(Z, 0, 4), t(Z, 0, 8));
        let nodes = vec![copy(t(X, 0, 8), t(Z, 0, 8)), Node::new(Box::new(partial), Some(0))];
        let c = Candidate { edges: vec![], eliminated: vec![], ..candidate(0, 1) };
        assert_eq!(run(&nodes, &ByteSet::new(), &c), Err(Refusal::WrittenTwice { first: 0, second: 1 }));
    }

    /// The hole the long fuzz run found: the fused op's input placed on the bytes an eliminated
    /// node writes and the pattern reads back. Pattern: x → y (eliminated), then y scaled in
    /// place; F = x + y → y with (y, y) declared a supported overlap. F would read y from
    /// memory, where the pattern reads the first node's value: refused, because the pattern
    /// never reads y as it was before it.
    #[test]
    fn a_fused_input_on_an_eliminated_value_is_refused_even_as_a_declared_overlap() {
        let scale = crate::ops::Scale { src: t(Y, 0, 8), dst: t(Y, 0, 8), scale: 2.0, bias: 0.0 };
        let nodes = vec![copy(t(X, 0, 8), t(Y, 0, 8)), Node::new(Box::new(scale), Some(0))];
        let fused = crate::ops::Binary { kind: crate::ops::BinaryKind::Add, a: t(X, 0, 8), b: t(Y, 0, 8), dst: t(Y, 0, 8) };
        let c = Candidate { fused: Box::new(fused), overlaps: vec![(t(Y, 0, 8), t(Y, 0, 8))], ..candidate(0, 1) };
        assert_eq!(run(&nodes, &ByteSet::new(), &c), Err(Refusal::FusedReadsInternal { producer: 0, consumer: 1 }));
    }

    /// \[replay\] The replay's shape: a producer that reads y and may leave part of it as it was
    /// (writes y\[0..4\], declares y\[0..8\]), read whole by the consumer. Accepted only when the
    /// fused node reads y itself in a declared (y, y) overlap; an earlier pattern node that may
    /// write those bytes too is refused as written twice.
    #[test]
    fn a_value_the_producer_may_leave_is_read_only_through_a_supported_overlap() {
        let y = t(Y, 0, 8);
        let producer = partial(y, t(Y, 0, 4), y);
        let nodes = vec![Node::new(Box::new(producer.clone()), Some(0)), copy(y, t(Z, 0, 8))];
        let fused = || -> Box<dyn Op> { Box::new(Declared { reads: vec![y], may: vec![y, t(Z, 0, 8)], must: vec![y, t(Z, 0, 8)] }) };
        let c = |overlaps: Vec<(Tensor, Tensor)>| Candidate {
            nodes: vec![0, 1],
            at: 1,
            fused: fused(),
            edges: vec![(0, 1)],
            eliminated: vec![],
            eliminated_values: vec![],
            overlaps,
        };
        assert!(run(&nodes, &ByteSet::new(), &c(vec![(y, y)])).is_ok());
        // A fused node that keeps the producer's value inside (the producer eliminated) and
        // reads y only as an input: where the producer left y, the consumer read y's old bytes,
        // which the fused node cannot tell from the producer's.
        let inside = Candidate {
            fused: Box::new(Declared { reads: vec![y], may: vec![t(Z, 0, 8)], must: vec![t(Z, 0, 8)] }),
            eliminated: vec![0],
            ..c(vec![])
        };
        assert_eq!(run(&nodes, &ByteSet::new(), &inside), Err(Refusal::PartialValue { producer: 0, consumer: 1 }));
        // An earlier pattern node (reading y before anything writes it, then writing y[4..8])
        // may have written the bytes the producer leaves: the fused node would read them stale;
        // refused on the producer's turn.
        let early = partial(y, t(Y, 4, 4), t(Y, 4, 4));
        let nodes = vec![Node::new(Box::new(early), Some(0)), Node::new(Box::new(producer), Some(0)), copy(y, t(Z, 0, 8))];
        let c = Candidate { nodes: vec![0, 1, 2], edges: vec![(0, 1), (0, 2), (1, 2)], at: 2, ..c(vec![(y, y)]) };
        assert_eq!(run(&nodes, &ByteSet::new(), &c).map(|_| ()), Err(Refusal::WrittenTwice { first: 0, second: 1 }));
    }

    /// \[replay\] An output of a kept pattern node declared eliminated (the verify's scratch
    /// slot): the fused node need not write it, its bytes are stale, and reading or observing
    /// them afterwards is refused by name.
    #[test]
    fn an_eliminated_value_of_a_kept_node_is_stale() {
        // Pattern: x → y, then y → z and y → w (one node writing both); fused: x → z, dropping w.
        let w = t(W, 0, 8);
        let nodes = |after: Vec<Node>| {
            let mut n = vec![
                copy(t(X, 0, 8), t(Y, 0, 8)),
                Node::new(Box::new(Declared { reads: vec![t(Y, 0, 8)], may: vec![t(Z, 0, 8), w], must: vec![t(Z, 0, 8), w] }), Some(0)),
            ];
            n.extend(after);
            n
        };
        let c = |values: Vec<Tensor>| Candidate {
            nodes: vec![0, 1],
            at: 1,
            fused: Box::new(Stage { src: t(X, 0, 8), dst: t(Z, 0, 8) }),
            edges: vec![(0, 1)],
            eliminated: vec![0],
            eliminated_values: values,
            overlaps: vec![],
        };
        // Without declaring w eliminated the fused node must write it.
        assert!(matches!(run(&nodes(vec![]), &ByteSet::new(), &c(vec![])), Err(Refusal::FusedWrites(_))));
        let ok = run(&nodes(vec![]), &ByteSet::new(), &c(vec![w])).unwrap();
        assert!(ok.eliminated.intersects(&ByteSet::of(&w, Bound::Over)));
        assert_eq!(run(&nodes(vec![copy(t(W, 2, 1), t(X, 9, 1))]), &ByteSet::new(), &c(vec![w])), Err(Refusal::EliminatedRead { node: 2 }));
        assert_eq!(run(&nodes(vec![]), &live(&[t(W, 7, 1)]), &c(vec![w])), Err(Refusal::EliminatedLive));
    }

    #[test]
    fn the_fused_op_may_overlap_itself_only_where_declared() {
        // Pattern: x → y, then y → x (the second writes x, which the first read).
        let nodes = vec![copy(t(X, 0, 8), t(Y, 0, 8)), copy(t(Y, 0, 8), t(X, 0, 8))];
        let fused = || -> Box<dyn Op> { Box::new(crate::ops::Scale { src: t(X, 0, 8), dst: t(X, 0, 8), scale: 1.0, bias: 0.0 }) };
        let c = Candidate { fused: fused(), ..candidate(0, 1) };
        assert_eq!(run(&nodes, &ByteSet::new(), &c), Err(Refusal::FusedOverlap));
        let c = Candidate { fused: fused(), overlaps: vec![(t(X, 0, 8), t(X, 0, 8))], ..candidate(0, 1) };
        assert!(run(&nodes, &ByteSet::new(), &c).is_ok());
    }

    #[test]
    fn malformed_candidates_are_refused() {
        let (nodes, a, b) = graph(vec![], vec![]);
        for c in [
            Candidate { at: 7, ..candidate(a, b) },
            Candidate { nodes: vec![a, a], ..candidate(a, b) },
            Candidate { edges: vec![(b, a)], ..candidate(a, b) },
            Candidate { eliminated: vec![9], ..candidate(a, b) },
        ] {
            assert!(matches!(run(&nodes, &ByteSet::new(), &c), Err(Refusal::Malformed(_))));
        }
    }
}
