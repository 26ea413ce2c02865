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

/// A bench report of `modes` (T, n_s, median µs of every figure), as `--plot-from` reads one.
#[cfg(feature = "bench")]
fn report(modes: &[(usize, usize, f64)]) -> rgdn::bench::report::Report {
    use rgdn::bench::report::{ArmStats, KernelRow, Meta, ModeReport, Report};
    use rgdn::bench::stats::Summary;
    let s = |median: f64| Some(Summary { n: 10, median, p10: median, p90: median, min: median, max: median, mean: median });
    let modes = modes
        .iter()
        .map(|&(t, n_s, us)| {
            let arm = ArmStats { chain_total: s(us), kernels_per_layer: 1, graph_span: s(us * 24.0), graph_kernels_per_forward: Some(24) };
            ModeReport {
                mode: format!("t{t}-s{n_s}"),
                label: format!("T={t}"),
                tokens: t,
                rollback: t - 1,
                seqs: n_s,
                state_bytes: Some(1 << 20),
                replay: None,
                kernels: vec![KernelRow { key: "GET_ROWS#0".into(), role: None, entry: "get_rows_f32".into(), off: s(us), on: s(us) }],
                off: arm.clone(),
                on: arm,
                on_overlapped: false,
                chain_ratio: Some(1.0),
                graph_ratio: Some(1.0),
                round_ratios: vec![],
                host: None,
            }
        })
        .collect();
    Report::new(Meta { graph_layers: 24, ..Meta::default() }, modes)
}

/// `rgdn bench --plot-from` draws reports read from files, which can hold anything. Before:
/// n_s = 0 panicked (log2 0 = −∞, an overflowing label count), a duration of −10^300 panicked
/// inside plotters (a coordinate past i32), one of 10^308 never returned (an infinite axis).
/// Now each figure entry refuses them with a message, and so does `merged_reports`.
#[cfg(feature = "bench")]
#[test]
fn bench_figures_refuse_reports_they_cannot_draw() {
    use rgdn::bench::plot::{check_drawable, write_batch_png, write_batch_svg, write_png, write_svg};
    let dir = std::env::temp_dir().join(format!("rgdn-probe-more-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = report(&[(4, 1, 20.0), (4, 4, 40.0)]);
    assert!(check_drawable(&good).is_ok());
    write_png(&dir.join("good.png"), &good).unwrap();
    write_batch_svg(&dir.join("good.svg"), &good).unwrap();
    for (name, bad) in [
        ("n_s = 0", report(&[(4, 0, 20.0), (4, 4, 40.0)])),
        ("negative", report(&[(4, 1, -1e300), (4, 4, 40.0)])),
        ("huge", report(&[(4, 1, 1e308), (4, 4, 40.0)])),
        ("infinite", report(&[(4, 1, f64::INFINITY), (4, 4, 40.0)])),
        ("NaN", report(&[(4, 1, f64::NAN), (4, 4, 40.0)])),
    ] {
        assert!(check_drawable(&bad).is_err(), "{name}");
        for (file, draw) in [
            ("bench.png", write_png as fn(&std::path::Path, &rgdn::bench::report::Report) -> Result<(), String>),
            ("bench.svg", write_svg),
            ("batch.png", write_batch_png),
            ("batch.svg", write_batch_svg),
        ] {
            let r = no_panic(&format!("{file} of {name}"), || draw(&dir.join(file), &bad));
            assert!(r.is_err(), "{file} of {name}: drawn");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `rgdn bench` refuses counts the run would multiply past 64 bits (4·rounds arms,
/// replays·graph_layers launches, …) before probing the GPU: before, they passed to the run,
/// which panics on the overflow once a GPU is there (here: "no GPU" hid it).
#[test]
fn bench_refuses_huge_counts_before_the_gpu() {
    let Some(bin) = option_env!("CARGO_BIN_EXE_rgdn") else {
        eprintln!("SKIPPED bench_refuses_huge_counts_before_the_gpu: no rgdn binary (feature cli off)");
        return;
    };
    let max = usize::MAX.to_string();
    for flag in ["--rounds", "--layers", "--graph-layers", "--replays", "--warmup"] {
        let out = std::process::Command::new(bin).args(["bench", flag, &max, "--no-progress"]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{flag}: {stderr}");
        assert!(stderr.contains(flag) && stderr.contains("at most") && !stderr.contains("no GPU"), "{flag}: {stderr}");
    }
    // The limit itself passes this check, and the next one (a step of too many token columns)
    // refuses before the GPU, so that this never runs a benchmark.
    let out = std::process::Command::new(bin)
        .args(["bench", "--graph-layers", "65536", "--seqs", "256", "--modes", "t16", "--no-progress"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("at most 65536") && stderr.contains("token columns"), "{stderr}");
}

/// `Memory::index_values` of a broadcast index view (zero strides) copied its whole element
/// count: 2^24 values out of an 8-byte buffer before, and a count of 2^62 grew a vector until
/// the host ran out of memory. Now a view of more elements than its buffer holds values is
/// refused (`None`, which ops turn into their typed error) before anything is allocated.
#[test]
fn index_values_refuse_a_broadcast_larger_than_the_buffer() {
    use rgdn::memory::{HostMemory, Memory};
    let mut mem = HostMemory::new();
    let idx = mem.alloc_indices(&[1, 2]);
    for n in [3, 1 << 24, 1 << 62, usize::MAX] {
        let wide = idx.view([n, 1, 1, 1], [0, 4, 4, 4], 0);
        let got = no_panic(&format!("index_values of {n}"), || mem.index_values(&wide));
        assert!(got.is_none(), "a broadcast of {n} values out of an 8-byte buffer: {} values copied", got.map_or(0, |v| v.len()));
    }
    // A broadcast of no more values than the buffer holds is still read.
    assert_eq!(mem.index_values(&idx.view([2, 1, 1, 1], [0, 4, 4, 4], 4)), Some(vec![2, 2]));
    assert_eq!(mem.index_values(&idx), Some(vec![1, 2]));
    // An op refuses a broadcast of more rows than the buffer holds values, saying so.
    use rgdn::ops::{GetRows, Op};
    let src = mem.alloc_tensor(DType::F32, [4, 2, 1, 1]);
    let dst = mem.alloc_tensor(DType::F32, [4, 3, 1, 1]);
    let rows = idx.view([3, 1, 1, 1], [0, 4, 4, 4], 0);
    let r = no_panic("GET_ROWS", || GetRows { src, rows, dst }.validate(&mem));
    match r {
        Err(Error::Invalid { op: "GET_ROWS", what }) => assert!(what.contains("more elements than its index buffer holds"), "{what}"),
        r => panic!("{r:?}"),
    }
}
