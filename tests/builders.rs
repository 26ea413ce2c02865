//! Issue 13: the graph builders and the planner never panic and never give a wrong answer on
//! what they accept — regression tests for each class found, and property tests (random specs
//! and steps in and out of range; random value lifetimes, sizes near 2^64 and writes after the
//! last read) checked by executing the planned graph on the CPU reference against an unplanned
//! one. The property tests run few cases by default (≈ seconds); `RGDN_PROPTEST_CASES=N` runs
//! N per property.

use proptest::prelude::*;
use rgdn::Error;
use rgdn::graph::layer::{self, LayerSpec, Outputs, StackSpec, batch_snapshot_copies, build_with_budget, ggml_layer_ops};
use rgdn::graph::plan::{self, Plan, Role, ValueInfo};
use rgdn::graph::{Node, exec};
use rgdn::layer::{GdnShape, LayerInit, LayerTensors, Step};
use rgdn::memory::HostMemory;
use rgdn::ops::{Binary, BinaryKind, ConcatDim0, CpySnapshots, GdnConvChain, Op, Scale, SnapshotWrite};
use rgdn::reference::math::ExactMufu;
use rgdn::tensor::{BufferId, DType, Layout, Tensor};

const SMALL: GdnShape = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 128, d_conv: 4, eps: 1e-6 };
const TINY: GdnShape = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 32, d_conv: 4, eps: 1e-6 };
/// Budget of the builds here: a spec needing more is an OutOfMemory error, never a 16 GiB
/// allocation on a shared machine.
const BUDGET: usize = 64 << 20;

fn cases(default: u32) -> u32 {
    std::env::var("RGDN_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn typed(e: &Error) -> bool {
    // Every variant is typed; this just names the ones these builders may return.
    matches!(
        e,
        Error::Invalid { .. } | Error::Unsupported { .. } | Error::Overflow { .. } | Error::OutOfMemory { .. } | Error::Shape { .. }
    )
}

// ---- class 1: inputs()/outputs()/must_write() never panic ------------------------------------

#[test]
fn gdn_conv_chain_outputs_do_not_panic_on_a_row_near_2_pow_62() {
    let mut mem = HostMemory::new();
    let cache = mem.alloc_tensor(DType::F32, [3 * 128, 2, 1, 1]);
    let f = |mem: &mut HostMemory, ne| mem.alloc_tensor(DType::F32, ne);
    let op = GdnConvChain {
        conv_cache: cache,
        source_row: mem.alloc_indices(&[0]),
        qkv: f(&mut mem, [128, 1, 1, 1]),
        weight: f(&mut mem, [4, 128, 1, 1]),
        snapshots: vec![SnapshotWrite { row: 1 << 62, offset: 0 }, SnapshotWrite { row: usize::MAX, offset: 0 }],
        conv_out: f(&mut mem, [128, 1, 1, 1]),
        q_norm: f(&mut mem, [32, 1, 1, 1]),
        k_norm: f(&mut mem, [32, 1, 1, 1]),
        head_dim: 32,
        n_k_heads: 1,
        eps: 1e-6,
        commit: None,
    };
    let outs = op.outputs();
    // The unrepresentable row's view saturates: it reaches the end of the address space.
    assert_eq!(outs[3].layout.offset, usize::MAX);
    let node = Node::new(Box::new(op.clone()), None);
    assert!(node.writes().iter().any(|w| w.bytes.end == usize::MAX));
    assert!(matches!(op.validate(&mem), Err(Error::IndexOutOfRange { .. })));
    let _ = op.must_write();
}

#[test]
fn cpy_snapshots_must_write_is_bounded_and_panic_free() {
    let mut mem = HostMemory::new();
    let conv_input = mem.alloc_tensor(DType::F32, [7, 8, 1, 1]);
    let cache = mem.alloc_tensor(DType::F32, [24, 4, 1, 1]);
    for (n_slots, first_row, group_stride) in [(usize::MAX, 0, 1), (17, usize::MAX, usize::MAX), (1 << 40, 1, 1), (4, 0, 1)] {
        let op = CpySnapshots { conv_input, cache, d_conv: 4, first_row, group_stride, n_slots };
        let rows = op.must_write();
        assert!(rows.len() <= 4, "{n_slots}: {} rows", rows.len());
        let _ = (op.inputs(), op.outputs());
    }
    // Empty sequences and d_conv = 0 are refused by the structure check, not an underflow.
    let empty = mem.alloc_tensor(DType::F32, [7, 8, 1, 1]).view([7, 8, 0, 1], [4, 28, 224, 224], 0);
    let op = CpySnapshots { conv_input: empty, cache, d_conv: 0, first_row: 0, group_stride: 1, n_slots: 2 };
    assert!(op.check_structure().is_err());
    assert!(op.must_write().is_empty());
}

#[test]
fn concat_flat_path_is_checked() {
    let mut mem = HostMemory::new();
    let a = mem.alloc_tensor(DType::F32, [1, 1, 1, 1]);
    let op = ConcatDim0 { a, b: a, dst: a };
    for shape in [
        rgdn::ops::concat::ConcatShape { na: usize::MAX, nb: 1, n1: 1, n2: 1 },
        rgdn::ops::concat::ConcatShape { na: 1 << 40, nb: 1 << 40, n1: 1 << 30, n2: 1 },
    ] {
        assert!(!op.takes_flat_path(&shape));
    }
    assert!(op.takes_flat_path(&rgdn::ops::concat::ConcatShape { na: 3, nb: 4, n1: 5, n2: 2 }));
}

// ---- class 2: ggml_layer_ops validates the step and shape, tail or not -----------------------

fn small_tensors(mem: &mut HostMemory) -> LayerTensors {
    LayerTensors::alloc(mem, &SMALL, &Step::new(4, 3), &LayerInit::default()).unwrap()
}

#[test]
fn ggml_layer_ops_refuses_bad_steps_without_the_tail() {
    let mut mem = HostMemory::new();
    let t = small_tensors(&mut mem);
    for (shape, step) in [
        (TINY, Step::new(1 << 40, 3)),
        (TINY, Step::new(usize::MAX, 3)),
        (TINY, Step::new(4, usize::MAX)),
        (GdnShape { d_conv: 0, ..TINY }, Step::new(4, 3)),
        (GdnShape { eps: f32::NAN, ..TINY }, Step::new(4, 3)),
        (GdnShape { n_v_heads: usize::MAX, ..TINY }, Step::new(4, 3)),
    ] {
        for gdn_tail in [false, true] {
            let spec = LayerSpec { gdn_tail, ..LayerSpec::new(shape, step) };
            match ggml_layer_ops(&t, &spec) {
                Err(e) => assert!(typed(&e), "{e}"),
                Ok(_) => panic!("{shape:?} {step:?} (tail {gdn_tail}) accepted"),
            }
        }
    }
}

// ---- class 3: build never panics on what LayerSpec::validate accepts -------------------------

#[test]
fn build_refuses_with_typed_errors_what_does_not_fit() {
    let one = |ls: LayerSpec| StackSpec { layers: vec![ls], outputs: Outputs::Forward };
    // Many cells: LayerSpec::validate accepts, the memory cannot hold it.
    let many_cells = LayerSpec::new(SMALL, Step { cells: 1 << 20, ..Step::new(1, 3) });
    many_cells.validate().unwrap();
    assert!(matches!(build_with_budget(&one(many_cells), 1, BUDGET), Err(Error::OutOfMemory { .. } | Error::Overflow { .. })));
    // A huge head count without the GDN tail: checked size products.
    let heads = LayerSpec { gdn_tail: false, ..LayerSpec::new(GdnShape { n_v_heads: 1 << 60, ..TINY }, Step::new(2, 1)) };
    assert!(matches!(build_with_budget(&one(heads), 1, BUDGET), Err(Error::Overflow { .. } | Error::OutOfMemory { .. })));
    let heads = LayerSpec { gdn_tail: false, ..LayerSpec::new(GdnShape { n_v_heads: 1 << 24, ..TINY }, Step::new(2, 1)) };
    assert!(matches!(build_with_budget(&one(heads), 1, BUDGET), Err(Error::OutOfMemory { .. } | Error::Overflow { .. })));
    // eps the L2 norms would refuse (or turn a zero head into NaN) is refused by the spec.
    for eps in [f32::NAN, f32::INFINITY, -1e-6, 0.0] {
        for gdn_tail in [false, true] {
            let shape = if gdn_tail { SMALL } else { TINY };
            let ls = LayerSpec { gdn_tail, ..LayerSpec::new(GdnShape { eps, ..shape }, Step::new(2, 1)) };
            assert!(matches!(ls.validate(), Err(Error::Invalid { .. })), "eps {eps}");
            assert!(build_with_budget(&one(ls), 1, BUDGET).is_err());
        }
    }
}

// ---- class 4: the planner --------------------------------------------------------------------

/// One op of a random graph over F32 values of `floats` elements each: `dst = 2·a + 1` or
/// `dst = a + b`.
#[derive(Clone, Copy, Debug)]
struct RawOp {
    dst: usize,
    a: usize,
    b: Option<usize>,
}

fn nodes_of(ops: &[RawOp], tensor: &dyn Fn(usize) -> Tensor) -> Vec<Node> {
    ops.iter()
        .map(|o| {
            let op: Box<dyn Op> = match o.b {
                None => Box::new(Scale { src: tensor(o.a), dst: tensor(o.dst), scale: 2.0, bias: 1.0 }),
                Some(b) => Box::new(Binary { kind: BinaryKind::Add, a: tensor(o.a), b: tensor(b), dst: tensor(o.dst) }),
            };
            Node::new(op, None)
        })
        .collect()
}

/// Plans the graph, then runs it node by node on the CPU twice — every value in its own
/// buffer, and the planned values in one arena at the plan's offsets — and compares each
/// node's output right after it ran, and every graph output, cache and input at the end, bit
/// for bit. A planner that lets two live values share bytes shows as a difference.
fn planned_equals_unplanned(values: &[ValueInfo], ops: &[RawOp], floats: usize, seed: u64) -> std::result::Result<Plan, String> {
    let symbolic = |v: usize| Tensor::new(BufferId(v), Layout::contiguous(DType::F32, [floats, 1, 1, 1]));
    let plan = plan::plan(values, &nodes_of(ops, &symbolic), &[]).map_err(|e| format!("plan: {e}"))?;
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(seed);
    let mut flat = HostMemory::new();
    let flat_t: Vec<Tensor> = values.iter().map(|_| flat.alloc_tensor(DType::F32, [floats, 1, 1, 1])).collect();
    let mut arena_mem = HostMemory::new();
    let arena = arena_mem.alloc(plan.arena_bytes);
    // The arena starts with other bits than the flat buffers: an unwritten read would show.
    arena_mem.bytes_mut(arena).fill(0x7f);
    let planned_t: Vec<Tensor> = (0..values.len())
        .map(|v| match plan.offsets[v] {
            Some(o) => Tensor::new(
                arena,
                Layout::contiguous(DType::F32, [floats, 1, 1, 1]).view([floats, 1, 1, 1], [4, 4 * floats, 4 * floats, 4 * floats], o),
            ),
            None => arena_mem.alloc_tensor(DType::F32, [floats, 1, 1, 1]),
        })
        .collect();
    for (v, info) in values.iter().enumerate() {
        if !info.role.planned() {
            let data = rgdn::inputs::fill(&mut rng, floats, rgdn::inputs::Values::Uniform(1.0)).unwrap();
            flat.fill_f32(&flat_t[v], &data).unwrap();
            arena_mem.fill_f32(&planned_t[v], &data).unwrap();
        }
    }
    let flat_nodes = nodes_of(ops, &|v| flat_t[v]);
    let planned_nodes = nodes_of(ops, &|v| planned_t[v]);
    let bits = |m: &HostMemory, t: &Tensor| m.to_f32_vec(t).unwrap().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (i, (f, p)) in flat_nodes.iter().zip(&planned_nodes).enumerate() {
        let rf = f.op.reference(&mut flat, &mut ExactMufu);
        let rp = p.op.reference(&mut arena_mem, &mut ExactMufu);
        if rf.is_ok() != rp.is_ok() {
            return Err(format!("node {i}: unplanned {rf:?}, planned {rp:?}"));
        }
        let dst = ops[i].dst;
        if bits(&flat, &flat_t[dst]) != bits(&arena_mem, &planned_t[dst]) {
            return Err(format!("node {i} ({ops:?}): `{}` differs between the planned and the unplanned graph", values[dst].name));
        }
    }
    for (v, info) in values.iter().enumerate() {
        let written = plan.first_write[v].is_some();
        if (!info.role.freed() && (written || !info.role.planned())) && bits(&flat, &flat_t[v]) != bits(&arena_mem, &planned_t[v]) {
            return Err(format!("`{}` differs at the end", info.name));
        }
    }
    Ok(plan)
}

fn value(name: &str, role: Role, bytes: usize) -> ValueInfo {
    ValueInfo { name: name.into(), role, bytes, layer: None }
}

/// The case: `a` is read for the last time at node 1, `b` takes its block at node 2,
/// then node 3 writes `a` again; freed at its last read, `a`'s write clobbers `b`, and `d`
/// (read from `b`) comes out wrong. Freed at its last access, `a` keeps its block until node 3.
#[test]
fn a_value_written_after_its_last_read_does_not_clobber_the_next_owner() {
    let values = [
        value("x", Role::Input, 1024),
        value("a", Role::Intermediate, 1024),
        value("b", Role::Intermediate, 1024),
        value("c", Role::Output, 1024),
        value("d", Role::Output, 1024),
    ];
    let ops = [
        RawOp { dst: 1, a: 0, b: None },
        RawOp { dst: 3, a: 1, b: None },
        RawOp { dst: 2, a: 0, b: None },
        RawOp { dst: 1, a: 0, b: Some(0) },
        RawOp { dst: 4, a: 2, b: None },
    ];
    let plan = planned_equals_unplanned(&values, &ops, 256, 3).unwrap();
    assert_eq!(plan.last_read[1], Some(1));
    assert_eq!(plan.last_access[1], Some(3));
    assert!(!plan.shares_bytes(1, 2), "{plan:?}");
}

#[test]
fn planner_sizes_near_2_pow_64_are_overflow_errors() {
    let ops = [RawOp { dst: 1, a: 0, b: None }, RawOp { dst: 2, a: 1, b: None }, RawOp { dst: 3, a: 2, b: None }];
    let symbolic = |v: usize| Tensor::new(BufferId(v), Layout::contiguous(DType::F32, [4, 1, 1, 1]));
    for sizes in [[usize::MAX, 1], [usize::MAX - 255, 1], [1 << 63, 1 << 63], [usize::MAX / 2, usize::MAX / 2 + 256]] {
        let values = [
            value("x", Role::Input, 16),
            value("a", Role::Intermediate, sizes[0]),
            value("b", Role::Output, sizes[1]),
            value("c", Role::Output, 16),
        ];
        match plan::plan(&values, &nodes_of(&ops, &symbolic), &[]) {
            Err(Error::Overflow { op: "GRAPH_PLAN", .. }) => {}
            other => panic!("{sizes:?}: {other:?}"),
        }
    }
}

/// Every planned block ends inside the arena, and two values whose lives (first write to last
/// access; outputs to the end) intersect never share bytes.
fn check_plan_layout(values: &[ValueInfo], plan: &Plan, n_nodes: usize) -> std::result::Result<(), String> {
    let life = |v: usize| -> Option<(usize, usize)> {
        let first = plan.first_write[v]?;
        // Freed after the last access; never when nothing reads it (nor for outputs).
        let last = if values[v].role.freed() && plan.last_read[v].is_some() { plan.last_access[v]? } else { n_nodes };
        Some((first, last))
    };
    for v in 0..values.len() {
        if let Some(o) = plan.offsets[v] {
            let end = o.checked_add(plan.block_bytes[v]).ok_or("block end overflows")?;
            if end > plan.arena_bytes || plan.block_bytes[v] < values[v].bytes {
                return Err(format!("`{}`: block {o}..{end} of {} bytes, arena {}", values[v].name, values[v].bytes, plan.arena_bytes));
            }
        }
        for w in 0..v {
            if let (Some((a0, a1)), Some((b0, b1))) = (life(v), life(w))
                && a0 <= b1
                && b0 <= a1
                && plan.shares_bytes(v, w)
            {
                return Err(format!("`{}` and `{}` are alive together and share bytes", values[v].name, values[w].name));
            }
        }
    }
    Ok(())
}

/// A random graph: `n` values (value 0 an input, the others of random roles and extra
/// bytes), ops whose sources are values already written (or inputs and caches).
fn repair(n: usize, roles: &[u8], raw: &[(usize, usize, Option<usize>)]) -> (Vec<Role>, Vec<RawOp>) {
    let roles: Vec<Role> = (0..n)
        .map(|v| {
            if v == 0 {
                Role::Input
            } else {
                [Role::Intermediate, Role::Intermediate, Role::Staged, Role::Output, Role::Cache][roles[v] as usize % 5]
            }
        })
        .collect();
    let mut written: Vec<bool> = roles.iter().map(|r| !r.planned()).collect();
    let mut ops = Vec::new();
    for &(d, a, b) in raw {
        let dst = 1 + d % (n - 1);
        let readable: Vec<usize> = (0..n).filter(|&v| written[v]).collect();
        let a = readable[a % readable.len()];
        let b = b.map(|b| readable[b % readable.len()]);
        ops.push(RawOp { dst, a, b });
        written[dst] = true;
    }
    (roles, ops)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(256), failure_persistence: None, ..ProptestConfig::default() })]

    /// Random lifetimes, writes after the last read included (ops write any value again):
    /// the planned graph computes exactly what the unplanned one does.
    #[test]
    fn planned_graphs_compute_what_unplanned_ones_do(
        n in 3usize..10,
        roles in proptest::collection::vec(any::<u8>(), 10),
        extra in proptest::collection::vec(0usize..2048, 10),
        raw in proptest::collection::vec((any::<usize>(), any::<usize>(), proptest::option::of(any::<usize>())), 1..24),
        floats in 1usize..200,
        seed in any::<u64>(),
    ) {
        let (roles, ops) = repair(n, &roles, &raw);
        let values: Vec<ValueInfo> = (0..n).map(|v| value(&format!("v{v}"), roles[v], 4 * floats + extra[v])).collect();
        let plan = planned_equals_unplanned(&values, &ops, floats, seed).map_err(TestCaseError::fail)?;
        check_plan_layout(&values, &plan, ops.len()).map_err(TestCaseError::fail)?;
    }

    /// Sizes near 2^64: a typed error, or a plan whose blocks fit the arena and never overlap
    /// while both values live.
    #[test]
    fn planner_never_wraps(
        n in 3usize..8,
        roles in proptest::collection::vec(any::<u8>(), 8),
        sizes in proptest::collection::vec(prop_oneof![0usize..4096, (usize::MAX - 4096)..=usize::MAX, (1usize << 62)..(1usize << 62) + 512, Just(1usize << 63)], 8),
        raw in proptest::collection::vec((any::<usize>(), any::<usize>(), proptest::option::of(any::<usize>())), 1..16),
    ) {
        let (roles, ops) = repair(n, &roles, &raw);
        let values: Vec<ValueInfo> = (0..n).map(|v| value(&format!("v{v}"), roles[v], sizes[v])).collect();
        let symbolic = |v: usize| Tensor::new(BufferId(v), Layout::contiguous(DType::F32, [4, 1, 1, 1]));
        match plan::plan(&values, &nodes_of(&ops, &symbolic), &[]) {
            Ok(plan) => check_plan_layout(&values, &plan, ops.len()).map_err(TestCaseError::fail)?,
            Err(e) => prop_assert!(matches!(e, Error::Overflow { op: "GRAPH_PLAN", .. }), "{e}"),
        }
    }
}

// ---- class 5: the batching pass only makes what CPY_SNAPSHOTS accepts ------------------------

#[test]
fn batching_leaves_copies_into_overlapping_rows_alone() {
    let mut mem = HostMemory::new();
    let step = Step::new(4, 3);
    let mut t = LayerTensors::alloc(&mut mem, &SMALL, &step, &LayerInit::default()).unwrap();
    // Cache rows half a row apart: each separate CPY writes one row (they run, in order); the
    // batched op would have two blocks write shared bytes and is refused.
    let l = t.conv_cache.layout;
    let half = l.nb[1] / 2;
    t.conv_cache = t.conv_cache.view(l.ne, [l.nb[0], half, half * l.ne[1], half * l.ne[1]], 0);
    let spec = LayerSpec { gdn_tail: false, ..LayerSpec::new(SMALL, step) };
    let nodes: Vec<Node> = ggml_layer_ops(&t, &spec).unwrap().into_iter().map(|op| Node::new(op, Some(0))).collect();
    exec::validate(&nodes, &mem).unwrap();
    let batched = batch_snapshot_copies(nodes);
    let names: Vec<_> = batched.iter().map(|n| n.op.name()).collect();
    assert!(!names.contains(&"CPY_SNAPSHOTS"), "{names:?}");
    assert_eq!(names.iter().filter(|n| **n == "CPY").count(), 4);
    exec::validate(&batched, &mem).unwrap();
    exec::run_cpu(&batched, &mut mem, &mut ExactMufu).unwrap();
    // The layout the batched op accepts is still batched.
    let t = LayerTensors::alloc(&mut mem, &SMALL, &step, &LayerInit::default()).unwrap();
    let nodes = ggml_layer_ops(&t, &spec).unwrap().into_iter().map(|op| Node::new(op, Some(0))).collect();
    let batched = batch_snapshot_copies(nodes);
    assert!(batched.iter().any(|n| n.op.name() == "CPY_SNAPSHOTS"));
    exec::validate(&batched, &mem).unwrap();
}

// ---- property tests of the builders -----------------------------------------------------------

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![0usize..6, Just(32usize), Just(64), Just(128), Just(1 << 20), Just(1 << 40), Just(usize::MAX)]
}

fn wild_shape() -> impl Strategy<Value = GdnShape> {
    (
        prop_oneof![Just(0usize), Just(63), Just(64), Just(96), Just(1 << 40), Just(usize::MAX)],
        size(),
        size(),
        prop_oneof![Just(0usize), Just(1), Just(32), Just(128), Just(1023), Just(1 << 33), Just(usize::MAX)],
        prop_oneof![0usize..17, Just(usize::MAX)],
        prop_oneof![Just(1e-6f32), Just(0.0), Just(-1.0), Just(f32::NAN), Just(f32::INFINITY), Just(1e30)],
    )
        .prop_map(|(n_embd, n_k_heads, n_v_heads, head_dim, d_conv, eps)| GdnShape {
            n_embd,
            n_k_heads,
            n_v_heads,
            head_dim,
            d_conv,
            eps,
        })
}

/// Mostly valid shapes and steps (so that builds happen), the rest anything.
fn shape() -> impl Strategy<Value = GdnShape> {
    let valid = (prop_oneof![Just(64usize), Just(96)], 1usize..3, 1usize..4, prop_oneof![Just(32usize), Just(128)], 3usize..6).prop_map(
        |(n_embd, n_k_heads, n_v_heads, head_dim, d_conv)| GdnShape { n_embd, n_k_heads, n_v_heads, head_dim, d_conv, eps: 1e-6 },
    );
    prop_oneof![2 => valid, 1 => wild_shape()]
}

fn step() -> impl Strategy<Value = Step> {
    let valid = (1usize..17, 0usize..5, 1usize..3).prop_flat_map(|(n_tokens, n_rollback, cells)| {
        (0..cells, 0..cells, 0..=n_rollback, proptest::option::of(0..cells)).prop_map(
            move |(kv_head, src_cell, rollback_depth, zero_cell)| Step {
                n_tokens,
                n_rollback,
                cells,
                kv_head,
                src_cell,
                rollback_depth,
                zero_cell,
                more_seqs: rgdn::layer::Sequences::NONE,
            },
        )
    });
    prop_oneof![2 => valid, 1 => wild_step()]
}

fn wild_step() -> impl Strategy<Value = Step> {
    let small = || prop_oneof![0usize..5, Just(16usize), Just(17), Just(1 << 20), Just(1 << 40), Just(usize::MAX)];
    (small(), small(), small(), small(), small(), small(), proptest::option::of(small())).prop_map(
        |(n_tokens, n_rollback, cells, kv_head, src_cell, rollback_depth, zero_cell)| Step {
            n_tokens,
            n_rollback,
            cells,
            kv_head,
            src_cell,
            rollback_depth,
            zero_cell,
            more_seqs: rgdn::layer::Sequences::NONE,
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(256), failure_persistence: None, ..ProptestConfig::default() })]

    /// build: Ok or a typed error, never a panic; an Ok graph validates node by node, and
    /// what LayerSpec::validate refuses is never built.
    #[test]
    fn build_is_ok_or_typed(shape in shape(), step in step(), gdn_tail in any::<bool>(), layers in 1usize..3, pr in any::<bool>()) {
        let layout = if pr { layer::LayerLayout::PrAliasing } else { layer::LayerLayout::Ggml };
        let ls = LayerSpec { gdn_tail, layout, ..LayerSpec::new(shape, step) };
        let spec = StackSpec { layers: vec![ls; layers], outputs: Outputs::Products };
        match build_with_budget(&spec, 5, BUDGET) {
            Ok(b) => {
                prop_assert!(ls.validate().is_ok());
                exec::validate(&b.nodes, &b.mem).map_err(|e| TestCaseError::fail(format!("{ls:?}: {e}")))?;
                let batched = batch_snapshot_copies(b.fresh_nodes().unwrap());
                exec::validate(&batched, &b.mem).map_err(|e| TestCaseError::fail(format!("batched {ls:?}: {e}")))?;
            }
            Err(e) => prop_assert!(typed(&e), "{e}"),
        }
    }

    /// ggml_layer_ops over a small layer's tensors with any spec: Ok or a typed error, in
    /// bounded time and memory (the spec is validated before any loop).
    #[test]
    fn ggml_layer_ops_is_ok_or_typed(shape in shape(), step in step(), gdn_tail in any::<bool>()) {
        let mut mem = HostMemory::new();
        let t = small_tensors(&mut mem);
        let spec = LayerSpec { gdn_tail, ..LayerSpec::new(shape, step) };
        match ggml_layer_ops(&t, &spec) {
            Ok(ops) => {
                prop_assert!(spec.validate().is_ok());
                prop_assert!(ops.len() <= 64);
                for op in &ops {
                    let _ = (op.inputs(), op.outputs(), op.must_write());
                }
            }
            Err(e) => prop_assert!(typed(&e) || matches!(e, Error::DType { .. } | Error::Stride { .. }), "{e}"),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(64), failure_persistence: None, ..ProptestConfig::default() })]

    /// The batching pass on caches of any row stride (overlapping rows, gaps, exact): whenever
    /// the separate CPYs validate, the batched graph validates too and leaves every buffer
    /// byte for byte as the separate CPYs do.
    #[test]
    fn batching_never_turns_a_running_graph_into_a_refused_or_different_one(
        n_t in 1usize..6,
        r in 1usize..5,
        cells in 1usize..3,
        kv in 0usize..3,
        stride_delta in -3isize..=3,
        seed in any::<u64>(),
    ) {
        let step = Step { cells, kv_head: kv % cells, src_cell: 0, ..Step::new(n_t, r) };
        let mut mem = HostMemory::new();
        let mut t = LayerTensors::alloc(&mut mem, &SMALL, &step, &LayerInit::default()).unwrap();
        let l = t.conv_cache.layout;
        let row = l.nb[1];
        // Row stride row ± a few quarters of a row, whole floats.
        let stride = ((row as isize + stride_delta * (row as isize / 4)) as usize / 4).max(1) * 4;
        let bytes = stride * (l.ne[1] - 1) + row;
        let buffer = mem.alloc_tensor(DType::F32, [bytes / 4, 1, 1, 1]);
        let data = rgdn::inputs::fill(&mut <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(seed), bytes / 4, rgdn::inputs::Values::Uniform(1.0)).unwrap();
        mem.fill_f32(&buffer, &data).unwrap();
        t.conv_cache = Tensor::new(buffer.buffer, Layout { nb: [4, stride, stride * l.ne[1], stride * l.ne[1]], ..l });
        let spec = LayerSpec { gdn_tail: false, ..LayerSpec::new(SMALL, step) };
        let nodes = || -> Vec<Node> { ggml_layer_ops(&t, &spec).unwrap().into_iter().map(|op| Node::new(op, Some(0))).collect() };
        if exec::validate(&nodes(), &mem).is_err() {
            return Ok(());
        }
        let batched = batch_snapshot_copies(nodes());
        exec::validate(&batched, &mem).map_err(|e| TestCaseError::fail(format!("stride {stride} (row {row}): batched graph refused: {e}")))?;
        let (mut a, mut b) = (mem.clone(), mem);
        exec::run_cpu(&nodes(), &mut a, &mut ExactMufu).unwrap();
        exec::run_cpu(&batched, &mut b, &mut ExactMufu).unwrap();
        for id in (0..a.n_buffers()).map(BufferId) {
            prop_assert!(a.bytes(id) == b.bytes(id), "stride {stride}: buffer {} differs", id.0);
        }
    }
}
