//! Probes of public entries that `tests/probe_entries.rs`, `tests/hostile.rs` and
//! `tests/errors.rs` leave out — the planner's pins, the bench's `--plot-from` reports and its
//! counts, … — with hostile caller data, on the CPU: each must end in a typed error, never a
//! panic, a hang, a huge allocation or a silently wrong answer.

use rgdn::Error;
use rgdn::graph::Node;
use rgdn::graph::plan::{Pin, Role, ValueInfo, plan};
use rgdn::ops::{Op, Scale};
use rgdn::tensor::{BufferId, DType, Layout, Tensor};
use std::panic::{AssertUnwindSafe, catch_unwind};

fn no_panic<T>(what: &str, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(e) => {
            let msg = e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
            panic!("{what}: panicked: {msg}")
        }
    }
}

fn value(name: &str, role: Role, bytes: usize) -> ValueInfo {
    ValueInfo { name: name.into(), role, bytes, layer: None }
}

/// A node reading value `a` and writing value `b` (SCALE of one float stands for any op).
fn node(a: usize, b: usize) -> Node {
    let t = |v: usize| Tensor::new(BufferId(v), Layout::contiguous(DType::F32, [1, 1, 1, 1]));
    let op: Box<dyn Op> = Box::new(Scale { src: t(a), dst: t(b), scale: 1.0, bias: 0.0 });
    Node::new(op, None)
}

/// Whether two values placed in the arena share bytes while both are live (a silent wrong
/// answer: one overwrites the other).
fn live_overlap(p: &rgdn::graph::plan::Plan, a: usize, b: usize) -> bool {
    let live = |v: usize| (p.first_write[v].unwrap_or(usize::MAX), p.last_access[v].unwrap_or(usize::MAX));
    let ((fa, la), (fb, lb)) = (live(a), live(b));
    p.shares_bytes(a, b) && fa <= lb && fb <= la
}

/// [`plan`]'s pins: a value pinned onto two blocks, or a pinned value that is itself a pin's
/// block, got a block sized for the larger pin but placed on the smaller one, running into the
/// next live value (before: a plan whose blocks overlap; now: a typed error).
#[test]
fn planner_pins_that_chain_or_repeat_are_refused() {
    // 0 input; 1 small (256), 2 large (1024), 3 pinned, 4 live beside 1's block.
    let values = [
        value("x", Role::Input, 4),
        value("small", Role::Intermediate, 256),
        value("large", Role::Intermediate, 1024),
        value("pinned", Role::Intermediate, 256),
        value("neighbour", Role::Output, 256),
        value("out", Role::Output, 4),
    ];
    // small written, neighbour written right after it (next block), small dies, pinned written
    // onto small's block and read while neighbour is still live; large lives from 0 to 5.
    let nodes = [node(0, 1), node(0, 4), node(0, 2), node(1, 5), node(0, 3), node(3, 5), node(4, 5), node(2, 5)];
    let one = plan(&values, &nodes, &[Pin { value: 3, onto: 1 }]).unwrap();
    assert!(!live_overlap(&one, 3, 4));
    for pins in [
        // The same value pinned onto two blocks.
        vec![Pin { value: 3, onto: 1 }, Pin { value: 3, onto: 2 }],
        // A block held for two values.
        vec![Pin { value: 3, onto: 1 }, Pin { value: 4, onto: 1 }],
        // A chain: small onto large's block, pinned onto small's.
        vec![Pin { value: 1, onto: 2 }, Pin { value: 3, onto: 1 }],
        // A value pinned onto itself.
        vec![Pin { value: 1, onto: 1 }],
    ] {
        let r = no_panic(&format!("plan({pins:?})"), || plan(&values, &nodes, &pins));
        match r {
            Ok(p) => {
                for a in 1..values.len() {
                    for b in a + 1..values.len() {
                        assert!(!live_overlap(&p, a, b), "{pins:?}: values {a} and {b} share bytes while both live: {p:?}");
                    }
                }
                panic!("{pins:?} accepted: {p:?}");
            }
            Err(e) => assert!(matches!(e, Error::Invalid { op: "GRAPH_PLAN", .. }), "{pins:?}: {e:?}"),
        }
    }
}
