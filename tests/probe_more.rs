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

/// `HostMemory`'s element accessors (`read_*`, `write_*`) and `fill_f32` / `to_f32_vec` indexed
/// the buffer with the view's byte offsets: a view reaching past its buffer, an index outside
/// the view, an offset that overflows or a buffer that does not exist panicked (a slice index
/// out of range). Now each is a typed error naming the accessor, with the element's (or the
/// view's) bytes and the buffer's size, and a refused bulk write writes nothing. The CPU
/// references, which read through them, return the same errors.
#[test]
fn host_memory_accessors_refuse_views_outside_their_buffer() {
    use rgdn::memory::HostMemory;
    let mut mem = HostMemory::new();
    let t = mem.alloc_tensor(DType::F32, [4, 1, 1, 1]);
    // Elements 2 and 3 of `past` lie in bytes 16..24 of a 16-byte buffer.
    let past = t.view([4, 1, 1, 1], t.layout.nb, 8);
    let oob = |r: &Result<(), Error>, op: &str, start: usize, end: usize| matches!(r, Err(Error::OutOfBounds { op: o, arg: "t", start: s, end: e, len: 16, .. }) if *o == op && *s == start && *e == end);
    let r = no_panic("read_f32", || mem.read_f32(&past, [3, 0, 0, 0]).map(drop));
    assert!(oob(&r, "HostMemory::read_f32", 20, 24), "{r:?}");
    let r = no_panic("read_u32", || mem.read_u32(&past, [2, 0, 0, 0]).map(drop));
    assert!(oob(&r, "HostMemory::read_u32", 16, 20), "{r:?}");
    let r = no_panic("write_f32", || mem.write_f32(&past, [3, 0, 0, 0], 1.0));
    assert!(oob(&r, "HostMemory::write_f32", 20, 24), "{r:?}");
    let r = no_panic("write_u32", || mem.write_u32(&past, [3, 0, 0, 0], 1));
    assert!(oob(&r, "HostMemory::write_u32", 20, 24), "{r:?}");
    let halves = Tensor::new(t.buffer, Layout { offset: 10, ..Layout::contiguous(DType::F16, [4, 1, 1, 1]) });
    let r = no_panic("read_u16", || mem.read_u16(&halves, [3, 0, 0, 0]).map(drop));
    assert!(oob(&r, "HostMemory::read_u16", 16, 18), "{r:?}");
    let r = no_panic("write_u16", || mem.write_u16(&halves, [3, 0, 0, 0], 1));
    assert!(oob(&r, "HostMemory::write_u16", 16, 18), "{r:?}");
    // An index outside the view (inside the buffer: it would read another element), an offset
    // that overflows, a buffer that does not exist.
    let r = no_panic("outside ne", || mem.read_f32(&t, [1, 1, 0, 0]));
    assert!(matches!(r, Err(Error::Shape { op: "HostMemory::read_f32", got: [4, 1, 1, 1], .. })), "{r:?}");
    let far = t.view([1, 1, 1, 1], t.layout.nb, usize::MAX - 2);
    let r = no_panic("overflow", || mem.write_f32(&far, [0, 0, 0, 0], 1.0));
    assert!(matches!(r, Err(Error::Overflow { op: "HostMemory::write_f32", .. })), "{r:?}");
    let none = Tensor::new(BufferId(7), t.layout);
    let r = no_panic("no buffer", || mem.read_f32(&none, [0, 0, 0, 0]));
    assert!(matches!(r, Err(Error::OutOfBounds { buffer: 7, len: 0, .. })), "{r:?}");
    // Bulk: refused before anything is written.
    let before = mem.bytes(t.buffer).to_vec();
    let r = no_panic("fill_f32", || mem.fill_f32(&past, &[1.0; 4]));
    assert!(oob(&r, "HostMemory::fill_f32", 8, 24), "{r:?}");
    assert_eq!(mem.bytes(t.buffer), &before[..]);
    let r = no_panic("fill_f32 count", || mem.fill_f32(&t, &[1.0; 3]));
    assert!(matches!(r, Err(Error::Invalid { op: "HostMemory::fill_f32", .. })), "{r:?}");
    let r = no_panic("to_f32_vec", || mem.to_f32_vec(&past).map(drop));
    assert!(oob(&r, "HostMemory::to_f32_vec", 8, 24), "{r:?}");
    // A broadcast view of 2^62 elements is refused, not allocated.
    let wide = t.view([1 << 62, 1, 1, 1], [0, 4, 4, 4], 0);
    let r = no_panic("to_f32_vec broadcast", || mem.to_f32_vec(&wide).map(drop));
    assert!(matches!(r, Err(Error::OutOfMemory { op: "HostMemory::to_f32_vec", .. })), "{r:?}");
    // A reference reading through them returns their error.
    let r = no_panic("reference::scale", || rgdn::reference::scale::scale(&past, &past, 2.0, 0.0, &mut mem));
    assert!(matches!(r, Err(Error::OutOfBounds { len: 16, .. })), "{r:?}");
    // Views inside their buffer read and write as before.
    mem.fill_f32(&t, &[1.0, 2.0, 3.0, 4.0]).unwrap();
    assert_eq!(mem.to_f32_vec(&t).unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
    assert_eq!(mem.read_f32(&past, [1, 0, 0, 0]).unwrap(), 4.0);
    assert_eq!(mem.read_u16(&halves, [2, 0, 0, 0]).unwrap(), 0x4080); // high half of 4.0
}

/// `inputs::fill` panicked inside rand on a range it cannot draw from: an empty one (scale 0 or
/// negative), a NaN or infinite one, one wider than the largest float (scale > f32::MAX / 2),
/// or `every` = 0; a count past 64 bits overflowed the vector's capacity. Now each is a typed
/// error, and valid values draw exactly as before.
#[test]
fn inputs_fill_refuses_ranges_it_cannot_draw_from() {
    use rand::SeedableRng;
    use rand::rngs::StdRng;
    use rgdn::inputs::{Values, fill};
    let mut rng = StdRng::seed_from_u64(1);
    for v in [
        Values::Uniform(0.0),
        Values::Uniform(-1.0),
        Values::Uniform(f32::NAN),
        Values::Uniform(f32::INFINITY),
        Values::Uniform(f32::MAX),
        Values::WithSpecials { scale: 0.0, every: 3 },
        Values::WithSpecials { scale: 1.0, every: 0 },
    ] {
        let r = no_panic(&format!("{v:?}"), || fill(&mut rng, 4, v));
        assert!(matches!(r, Err(Error::Invalid { op: "inputs::fill", .. })), "{v:?}: {r:?}");
        assert!(v.check().is_err(), "{v:?}");
    }
    for n in [usize::MAX, usize::MAX / 4, 1 << 62] {
        let r = no_panic(&format!("{n} values"), || fill(&mut rng, n, Values::Uniform(1.0)).map(|v| v.len()));
        assert!(matches!(r, Err(Error::OutOfMemory { op: "inputs::fill", .. })), "{n}: {r:?}");
    }
    // The limits that draw, and the same draws as an unchecked loop.
    for v in [
        Values::Uniform(f32::MAX / 2.0),
        Values::Uniform(f32::from_bits(1)),
        Values::WithSpecials { scale: 1.0, every: 1 },
        Values::AnyBits,
    ] {
        assert_eq!(fill(&mut rng, 16, v).unwrap().len(), 16, "{v:?}");
    }
    let got = fill(&mut StdRng::seed_from_u64(9), 8, Values::Uniform(2.0)).unwrap();
    let mut rng = StdRng::seed_from_u64(9);
    let want: Vec<f32> = (0..8).map(|_| rand::Rng::random_range(&mut rng, -2.0f32..2.0)).collect();
    assert_eq!(got, want);
}

/// `Memory::index_values` copies an index view's values: a broadcast view (element stride 0)
/// of an 8-byte buffer with a count of 2^62 allocated it (and then aborted). Now a view of more
/// than `MAX_INDEX_VALUES` elements is `None`, refused before anything is allocated, and the
/// plan's in-place reader agrees; a broadcast of a sane count is still read.
#[test]
fn index_values_refuse_a_broadcast_of_a_huge_count() {
    use rgdn::memory::{HostMemory, MAX_INDEX_VALUES, Memory};
    let mut mem = HostMemory::new();
    let idx = mem.alloc_indices(&[1, 2]);
    for n in [MAX_INDEX_VALUES + 1, 1 << 40, 1 << 62, usize::MAX] {
        let wide = idx.view([n, 1, 1, 1], [0, 4, 4, 4], 0);
        let got = no_panic(&format!("index_values of {n}"), || mem.index_values(&wide));
        assert!(got.is_none(), "a broadcast of {n} values out of an 8-byte buffer: {} values copied", got.map_or(0, |v| v.len()));
    }
    // A broadcast of a few values more than the buffer holds is read, value by value.
    assert_eq!(mem.index_values(&idx.view([3, 1, 1, 1], [0, 4, 4, 4], 4)), Some(vec![2, 2, 2]));
    assert_eq!(mem.index_values(&idx), Some(vec![1, 2]));
}

/// The public CPU references that broadcast an operand (`binary`, `unary_mul`) indexed it modulo
/// its shape: an empty operand was a division-by-zero panic. GDN_CONV_CHAIN's reference took
/// `d_conv − 1` of a weight with no taps: an underflow panic. Each is a typed `Shape` error now.
#[test]
fn references_refuse_an_empty_broadcast_operand_and_a_conv_without_taps() {
    use rgdn::memory::HostMemory;
    use rgdn::reference::gdn_conv_chain::{ChainViews, gdn_conv_chain};
    use rgdn::reference::math::{ExactMufu, add};
    use rgdn::reference::{binary::binary, unary::unary_mul};
    let mut mem = HostMemory::new();
    let a = mem.alloc_tensor(DType::F32, [4, 2, 1, 1]);
    let dst = mem.alloc_tensor(DType::F32, [4, 2, 1, 1]);
    let empty = mem.alloc_tensor(DType::F32, [4, 0, 1, 1]);
    let r = no_panic("binary", || binary(add, &a, &empty, &dst, &mut mem));
    assert!(matches!(r, Err(Error::Shape { arg: "b", got: [4, 0, 1, 1], .. })), "{r:?}");
    let identity: rgdn::reference::unary::UnaryFn = |x, _| x;
    let r = no_panic("unary_mul", || unary_mul(identity, &a, &empty, &dst, &mut mem, &mut ExactMufu));
    assert!(matches!(r, Err(Error::Shape { arg: "mul_by", got: [4, 0, 1, 1], .. })), "{r:?}");
    // A non-empty operand still broadcasts.
    let one = mem.alloc_tensor(DType::F32, [4, 1, 1, 1]);
    no_panic("binary broadcast", || binary(add, &a, &one, &dst, &mut mem)).unwrap();
    let views = ChainViews {
        conv_cache: mem.alloc_tensor(DType::F32, [4, 1, 1, 1]),
        qkv: mem.alloc_tensor(DType::F32, [4, 1, 1, 1]),
        weight: mem.alloc_tensor(DType::F32, [0, 4, 1, 1]),
        conv_out: mem.alloc_tensor(DType::F32, [4, 1, 1, 1]),
        q_norm: mem.alloc_tensor(DType::F32, [4, 1, 1, 1]),
        k_norm: mem.alloc_tensor(DType::F32, [4, 1, 1, 1]),
        head_dim: 4,
        n_k_heads: 1,
        eps: 1e-6,
    };
    let r = no_panic("gdn_conv_chain", || gdn_conv_chain(&views, &[0], &[], &mut mem, &mut ExactMufu));
    assert!(matches!(r, Err(Error::Shape { arg: "weight", got: [0, 4, 1, 1], .. })), "{r:?}");
}
