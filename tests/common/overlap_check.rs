//! [overlap] The overlap pass's safety property, restated on a compiled node list from the launch
//! forms the pass left in it (`ops::Overlapped`), independently of how `fusion::overlap` decided
//! them (shared by `tests/overlap.rs` and `tests/fusion_fuzz.rs`).

use rgdn::graph::{Bound, ByteSet, Node};
use rgdn::ops::overlap::{Overlap, Overlapped};

/// The launch form of a node (plain unless the pass wrapped it).
pub fn form_of(n: &Node) -> Overlap {
    n.get::<Overlapped>().map_or(Overlap::NONE, |o| o.overlap)
}

/// Checks every pair of launches (j, i), j < i, that may run at once: i started early, and
/// j = i − 1, or j < i − 1 with every launch from j + 1 on started early too (each let start
/// by the one before it, which lets the next start). For each, what i touches before its wait
/// (its op's declared early form) must meet nothing j touches: no byte i writes is read or
/// written by j, no byte i reads is written by j. Also: a launch that starts early has an early
/// form and follows one that lets the next start; the forms are the op's own. Returns the pairs
/// checked.
pub fn check_overlaps(nodes: &[Node]) -> Result<usize, String> {
    let forms: Vec<Overlap> = nodes.iter().map(form_of).collect();
    let mut pairs = 0;
    for (i, node) in nodes.iter().enumerate() {
        if !node.op.overlap_forms().allow(forms[i]) {
            return Err(format!("node {i} ({}) has the form {:?}, which its op does not have", node.op.name(), forms[i]));
        }
        if !forms[i].starts_early {
            continue;
        }
        let early = node.op.overlap_forms().early.ok_or(format!("node {i} starts early without an early form"))?;
        let (reads, writes) = (ByteSet::of_all(&early.reads, Bound::Over), ByteSet::of_all(&early.writes, Bound::Over));
        let mut j = i;
        loop {
            let Some(prev) = j.checked_sub(1) else {
                return Err(format!("node {i} starts early with nothing before it"));
            };
            if !forms[prev].lets_next_start {
                return Err(format!("node {j} starts early after node {prev}, which lets nothing start"));
            }
            let other = nodes[prev].effects();
            let meets = writes.intersects(&other.reads) || writes.intersects(&other.may_write) || reads.intersects(&other.may_write);
            if meets {
                return Err(format!(
                    "node {i} ({}) starts early and touches before its wait bytes node {prev} ({}) touches while it may still run",
                    node.op.name(),
                    nodes[prev].op.name()
                ));
            }
            pairs += 1;
            if !forms[prev].starts_early {
                break;
            }
            j = prev;
        }
    }
    Ok(pairs)
}
