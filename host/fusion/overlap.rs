//! \[overlap\] The overlap pass: which launches of a compiled node list start before the launch
//! before them completes (programmatic dependent launch, `docs/rollback.md` "Overlapping the
//! three launches"). It runs once per compiled plan, after the fusion pass, when
//! [`super::Options`] allows it ([`OVERLAP`]).
//!
//! Node i starts early when
//! - its op's kernel has a form that starts early ([`crate::ops::overlap::Forms::early`]: what
//!   it touches before its `griddepcontrol.wait`),
//! - node i − 1's kernel has a form that lets the next grid start (it runs
//!   `griddepcontrol.launch_dependents` first), and
//! - \[speed\] at most [`EARLY_START_MAX_PARKED_BLOCKS`] of its blocks would wait with work left
//!   (a cost rule, not a safety one: measured, see the constant), and the launch after it, if it
//!   has an early form, is not refused by that rule (a run that stops short of such a launch
//!   stays plain: [`Refusal::RunEndsParked`]), and
//! - what node i touches before its wait **commutes** with everything every grid that may still
//!   run beside it touches: no byte it writes is read or written by one of them, no byte it
//!   reads is written by one of them ([`crate::graph::Effects`], byte for byte).
//!
//! The grids that may run beside node i: node i − 1, and, while node j started early itself,
//! node j − 1 (it may still run beside j, which let i start). Every kernel that starts early
//! waits for the grids before it before it completes, so once node i's wait returns every grid
//! before it is complete and its writes are visible: after its wait, node i runs as if launched
//! plainly, and a plain launch after it starts after all of them. So the node list computes the
//! same bytes, in the same order of every conflicting access, as launched plainly.
//!
//! The pass leaves the nodes it gives a form as [`Overlapped`] ops; the rest as they were.

use crate::graph::{Bound, ByteSet, Effects, Node};
use crate::ops::overlap::{Overlap, Overlapped};
use std::fmt;

/// The name [`super::Options`] gives the pass (`RGDN_FUSION=…,overlap`, `--fusions`).
pub const OVERLAP: &str = "overlap";

/// \[speed\] The most blocks a launch that starts early may park on its wait with work left
/// ([`crate::ops::overlap::BeforeWait::parked_blocks`]). Measured on an H100
/// (`results/2026-12-06-h100-overlap/`, 9B replay steps, the overlapped replay-verify's grid
/// being H_v·n_s·4 blocks): the overlap bought 4–10 % of the layer step at n_s = 8, 16 and 32
/// (up to 4096 blocks), was mixed at n_s = 48 (6144: T = 4 −3.6 %, T = 8 +1.2 %) and cost 1–5 % at
/// n_s = 64 (8192): the parked blocks' slots, taken from the grids before it for many waves,
/// cost more than the early start buys.
pub const EARLY_START_MAX_PARKED_BLOCKS: usize = 4096;

/// Why a launch that could start early does not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The first node of the list: nothing before it to overlap.
    First,
    /// The node before it has no form that lets the next grid start (its op's name).
    PreviousWaits { previous: &'static str },
    /// \[speed\] More than `limit` of its blocks would wait with work left
    /// ([`EARLY_START_MAX_PARKED_BLOCKS`]).
    ManyParked { blocks: usize, limit: usize },
    /// \[speed\] It could start early, but the run it belongs to stops at node `at`, refused by
    /// the cost rule ([`Refusal::ManyParked`]): the run stays plain. Measured on an H100
    /// (`results/2026-12-06-h100-commit-chain/`): at 64 sequences (9B, T = 4) the commit chain
    /// letting the products start, with the replay-verify refused, took 1.007× the plain step.
    RunEndsParked { at: usize },
    /// What it touches before its wait meets what node `with` (its op's name) touches.
    Conflict { with: usize, op: &'static str, what: &'static str },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::First => write!(f, "the first launch"),
            Refusal::PreviousWaits { previous } => write!(f, "the launch before it ({previous}) lets nothing start early"),
            Refusal::RunEndsParked { at } => {
                write!(f, "its run stops at node {at}, which the cost rule keeps plain, so the run stays plain (measured slower in part)")
            }
            Refusal::ManyParked { blocks, limit } => {
                write!(
                    f,
                    "{blocks} of its blocks would wait with work left, holding multiprocessors from the grids before it (at most {limit})"
                )
            }
            Refusal::Conflict { with, op, what } => write!(f, "before its wait it {what} node {with} ({op})"),
        }
    }
}

/// The pass's decision for one node whose op can start early.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The node's index in the list.
    pub node: usize,
    pub op: &'static str,
    /// Ok: it starts early; the grids it may run beside (node indices, nearest first).
    pub outcome: Result<Vec<usize>, Refusal>,
}

/// How `before` (a kernel's accesses before its wait) meets `other` (a grid's accesses), if it
/// does: a write of `before` on a byte `other` reads or writes, or a read of `before` on a byte
/// `other` writes.
pub fn conflict(before: &Effects, other: &Effects) -> Option<&'static str> {
    if before.may_write.intersects(&other.may_write) {
        Some("writes bytes written by")
    } else if before.may_write.intersects(&other.reads) {
        Some("writes bytes read by")
    } else if before.reads.intersects(&other.may_write) {
        Some("reads bytes written by")
    } else {
        None
    }
}

/// The overlap form of every node of `nodes` (in order) and the decisions behind them, one per
/// node whose op can start early.
pub fn plan(nodes: &[Node]) -> (Vec<Overlap>, Vec<Decision>) {
    let forms: Vec<_> = nodes.iter().map(|n| n.op.overlap_forms()).collect();
    let mut overlap = vec![Overlap::NONE; nodes.len()];
    let mut decisions = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        let Some(before) = &forms[i].early else { continue };
        let outcome = (|| {
            if i == 0 {
                return Err(Refusal::First);
            }
            if before.parked_blocks > EARLY_START_MAX_PARKED_BLOCKS {
                return Err(Refusal::ManyParked { blocks: before.parked_blocks, limit: EARLY_START_MAX_PARKED_BLOCKS });
            }
            if !forms[i - 1].lets_next_start {
                return Err(Refusal::PreviousWaits { previous: nodes[i - 1].op.name() });
            }
            // [speed] The run rule before the byte check: a launch whose next launch the cost rule
            // keeps plain would end its run there, so it stays plain whatever its bytes. (Checked
            // after the bytes, a plan whose planner placed values knowing the run stays plain
            // — `super::groups` keeps only an overlapped run's values apart — reported a conflict
            // here instead.)
            if forms.get(i + 1).and_then(|f| f.early.as_ref()).is_some_and(|next| next.parked_blocks > EARLY_START_MAX_PARKED_BLOCKS) {
                return Err(Refusal::RunEndsParked { at: i + 1 });
            }
            let mut beside = vec![i - 1];
            let mut j = i - 1;
            // Node 0 never starts early (Refusal::First), so j stays ≥ 1 while it loops.
            while overlap[j].starts_early {
                j -= 1;
                beside.push(j);
            }
            let before = Effects {
                reads: ByteSet::of_all(&before.reads, Bound::Over),
                may_write: ByteSet::of_all(&before.writes, Bound::Over),
                must_write: ByteSet::new(),
            };
            for &b in &beside {
                if let Some(what) = conflict(&before, &nodes[b].effects()) {
                    return Err(Refusal::Conflict { with: b, op: nodes[b].op.name(), what });
                }
            }
            Ok(beside)
        })();
        if outcome.is_ok() {
            overlap[i].starts_early = true;
            overlap[i - 1].lets_next_start = true;
        }
        let parked_at = match outcome {
            Err(Refusal::ManyParked { .. }) => Some(i),
            Err(Refusal::RunEndsParked { at }) => Some(at),
            _ => None,
        };
        decisions.push(Decision { node: i, op: node.op.name(), outcome });
        if let Some(at) = parked_at {
            // [speed] The run before node i (the launches that start early up to i − 1, and the
            // one that lets the first of them start) stays plain. Fewer overlaps only shrink
            // the grids any later launch may run beside (node i + 1's begin at node i, which is
            // plain), so every other decision stands.
            let mut m = i - 1;
            while overlap[m].starts_early {
                overlap[m] = Overlap::NONE;
                overlap[m - 1].lets_next_start = false;
                if let Some(d) = decisions.iter_mut().find(|d| d.node == m) {
                    d.outcome = Err(Refusal::RunEndsParked { at });
                }
                m -= 1;
            }
        }
    }
    (overlap, decisions)
}

/// The pass: [`plan`], then every node with a form other than the plain one wrapped as
/// [`Overlapped`].
pub fn mark(nodes: Vec<Node>) -> (Vec<Node>, Vec<Decision>) {
    let (overlap, decisions) = plan(&nodes);
    let nodes = nodes
        .into_iter()
        .zip(overlap)
        .map(|(n, o)| if o == Overlap::NONE { n } else { Node { op: Box::new(Overlapped { op: n.op, overlap: o }), layer: n.layer } })
        .collect();
    (nodes, decisions)
}
