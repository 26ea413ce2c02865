//! CPU tests of what a step of a plan (`rgdn::engine::StepPlan`) re-checks: every op that
//! reads an index buffer overrides `Op::check_indices` with its index rules only, and prepares
//! them once per plan (`Op::index_rules`: what does not depend on the values — which rows each
//! sequence may read — worked out from the views); for any index values both must give exactly
//! the full validation's verdict (and error) on an op that validated with other values — else a
//! plan would launch on an index the full validation refuses, or refuse what it accepts. (The
//! plans themselves run on the GPU: `tests/gpu_engine.rs`.)

use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use rgdn::engine::{layer_step, layer_step_with};
use rgdn::fusion::Options;
use rgdn::layer::{GdnShape, LayerInit, LayerTensors, Step};
use rgdn::memory::{HostMemory, Memory};
use rgdn::ops::{GatedDeltaNet, GatedDeltaNetFromCache, GdnConvChain, GdnLayerStep, GetRows, Op, SnapshotWrite};
use rgdn::tensor::{BufferId, Tensor};

/// C = (2·1 + 2)·128 = 512: the smallest shape every fused op takes.
const SMALL: GdnShape = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 128, d_conv: 4, eps: 1e-6 };

fn layer(step: Step) -> (HostMemory, LayerTensors) {
    let mut mem = HostMemory::new();
    let t = LayerTensors::alloc(&mut mem, &SMALL, &step, &LayerInit::default()).unwrap();
    (mem, t)
}

fn set_indices(mem: &mut HostMemory, t: &Tensor, values: &[i32]) {
    for (w, v) in mem.bytes_mut(t.buffer)[t.layout.offset..].chunks_exact_mut(4).zip(values) {
        w.copy_from_slice(&v.to_le_bytes());
    }
}

/// A memory that lends no index bytes (`Memory::index_bytes` is `None`): prepared rules must
/// then read the values through `index_values`, with the same verdicts.
struct NoBytes<'a>(&'a HostMemory);

/// A memory in which buffer `.1` is not an index buffer (its values unknown to the host).
struct Hidden<'a>(&'a HostMemory, BufferId);

impl Memory for NoBytes<'_> {
    fn buffer_len(&self, id: BufferId) -> Option<usize> {
        self.0.buffer_len(id)
    }
    fn is_index_buffer(&self, id: BufferId) -> bool {
        self.0.is_index_buffer(id)
    }
    fn index_values(&self, t: &Tensor) -> Option<Vec<i32>> {
        self.0.index_values(t)
    }
}

impl Memory for Hidden<'_> {
    fn buffer_len(&self, id: BufferId) -> Option<usize> {
        self.0.buffer_len(id)
    }
    fn is_index_buffer(&self, id: BufferId) -> bool {
        id != self.1 && self.0.is_index_buffer(id)
    }
    fn index_values(&self, t: &Tensor) -> Option<Vec<i32>> {
        if t.buffer == self.1 { None } else { self.0.index_values(t) }
    }
    fn index_bytes(&self, id: BufferId) -> Option<&[u8]> {
        if id == self.1 { None } else { self.0.index_bytes(id) }
    }
}

/// How the trials ended: accepted, or refused by which op's which rule ("IndexOutOfRange
/// GDN_CONV_CHAIN", "Aliasing GATED_DELTA_NET_FROM_CACHE", …), and how often.
#[derive(Debug, Default)]
struct Verdicts {
    accepted: usize,
    out_of_range: usize,
    another_row: usize,
    by_rule: std::collections::BTreeMap<String, usize>,
}

/// For every index vector of `vectors`: the op's full validation, its `check_indices` and its
/// rules prepared ONCE before the trials (as a plan prepares them; with bytes read in place and
/// without) give one verdict, error for error (every field: the errors' Debug forms). Then the
/// same with the index hidden from the host: the same "not an index buffer" error each way.
fn verdicts_match(op: &dyn Op, mem: &mut HostMemory, index: &Tensor, vectors: &[Vec<i32>]) -> Verdicts {
    op.validate(mem).unwrap_or_else(|e| panic!("{}: the op must validate first: {e}", op.name()));
    let start = mem.index_values(index).expect("an index buffer");
    let rules = op.index_rules();
    let mut v = Verdicts::default();
    let debug = |r: rgdn::Result<()>| r.map_err(|e| format!("{e:?}"));
    for values in vectors {
        set_indices(mem, index, values);
        let validated = op.validate(mem);
        let rule = match &validated {
            Ok(()) => {
                v.accepted += 1;
                "accepted".to_string()
            }
            Err(rgdn::Error::IndexOutOfRange { op, .. }) => {
                v.out_of_range += 1;
                format!("IndexOutOfRange {op}")
            }
            Err(rgdn::Error::Aliasing { op, .. }) => {
                v.another_row += 1;
                format!("Aliasing {op}")
            }
            Err(e) => panic!("{}: a verdict no index rule gives: {e}", op.name()),
        };
        *v.by_rule.entry(rule).or_default() += 1;
        let full = debug(validated);
        assert_eq!(full, debug(op.check_indices(mem)), "{}: check_indices with {values:?}", op.name());
        assert_eq!(full, debug(rules.check(mem)), "{}: prepared rules with {values:?}", op.name());
        assert_eq!(full, debug(rules.check(&NoBytes(mem))), "{}: prepared rules, values copied, with {values:?}", op.name());
    }
    set_indices(mem, index, &start);
    let hidden = Hidden(mem, index.buffer);
    let full = debug(op.validate(&hidden));
    assert!(matches!(op.validate(&hidden), Err(rgdn::Error::Invalid { .. })), "{}: {full:?}", op.name());
    assert_eq!(full, debug(op.check_indices(&hidden)), "{}: check_indices, index hidden", op.name());
    assert_eq!(full, debug(rules.check(&hidden)), "{}: prepared rules, index hidden", op.name());
    v
}

/// The rows of the step's caches as llama.cpp lays them out: row g·M + s is sequence s's
/// (cell s, kv_head = 0) in group g. `valid` is a vector the op accepts.
struct Rows {
    n_s: usize,
    cells: usize,
    groups: usize,
    /// Rows of the op's cache view (the range rule).
    rows: usize,
    valid: Vec<i32>,
}

/// Index vectors that hit every rule: uniformly random (refusals common); a valid vector with
/// one to three values replaced by another sequence's row, its own row of another group, a
/// row no sequence writes, a random row or one out of range (−1, rows, i32::MIN, i32::MAX);
/// every sequence on one row; the valid vector shifted by ±1 row or ±1 group; sequences
/// swapping rows.
fn vectors(r: &Rows, seed: u64, trials: usize) -> Vec<Vec<i32>> {
    let mut rng = StdRng::seed_from_u64(seed);
    let row = |g: usize, c: usize| (g * r.cells + c) as i32;
    let mut out = Vec::with_capacity(trials);
    for trial in 0..trials {
        let mut v = r.valid.clone();
        match trial % 6 {
            0 => v.iter_mut().for_each(|x| *x = rng.random_range(-1..=r.rows as i32 + 1)),
            1 | 2 => {
                for _ in 0..rng.random_range(1..=3) {
                    let p = rng.random_range(0..r.n_s);
                    let g = rng.random_range(0..r.groups);
                    v[p] = match rng.random_range(0..8) {
                        0 | 1 => row(g, (p + rng.random_range(1..r.n_s.max(2))) % r.n_s),
                        2 => row(g, p),
                        3 => row(g, rng.random_range(r.n_s.min(r.cells - 1)..r.cells)),
                        4 => rng.random_range(0..r.rows as i32),
                        5 => *[-1, r.rows as i32, i32::MIN, i32::MAX].choose(&mut rng).unwrap(),
                        _ => v[(p + 1) % r.n_s],
                    };
                }
            }
            3 => v.fill(rng.random_range(0..r.rows as i32)),
            4 => {
                let d = *[-1, 1, -(r.cells as i32), r.cells as i32].choose(&mut rng).unwrap();
                v.iter_mut().for_each(|x| *x += d);
            }
            _ => {
                for _ in 0..rng.random_range(1..=r.n_s.div_ceil(2)) {
                    v.swap(rng.random_range(0..r.n_s), rng.random_range(0..r.n_s));
                }
            }
        }
        out.push(v);
    }
    out
}

fn find<T: Op + Clone + 'static>(ops: &[Box<dyn Op>]) -> T {
    ops.iter().find_map(|op| op.as_ref().downcast_ref::<T>()).cloned().expect("the op is in the step")
}

#[test]
fn each_fused_and_gather_ops_index_rules_are_its_validations() {
    let step = Step { cells: 3, ..Step::new(2, 2) };
    let (mut mem, t) = layer(step);
    let rows = step.cache_rows();
    let init = LayerInit::default();
    let unfused = layer_step(&t, &SMALL, &step, &init, false, &mem).unwrap();
    let gather: GetRows = find(&unfused);
    let chain: GdnConvChain = find(&layer_step_with(&t, &SMALL, &step, &init, Options::only(&["conv_chain"]).unwrap(), &mem).unwrap().ops);
    let from_cache: GatedDeltaNetFromCache =
        find(&layer_step_with(&t, &SMALL, &step, &init, Options::only(&["state_read"]).unwrap(), &mem).unwrap().ops);
    let whole: GdnLayerStep = find(&layer_step_with(&t, &SMALL, &step, &init, Options::ALL, &mem).unwrap().ops);
    // The same step with the state read through an index of its own: the GDN part's rules
    // must run too (with one shared index the chain's would cover them).
    let mut own_index = whole.clone();
    own_index.gdn.source_rows = mem.alloc_indices(&step.source_rows_i32());
    let ops: [(u64, &dyn Op, Tensor); 6] = [
        (1, &gather, t.source_rows),
        (2, &chain, t.source_rows),
        (3, &from_cache, t.source_rows),
        (4, &whole, t.source_rows),
        (5, &own_index, own_index.gdn.source_rows),
        (6, &own_index, t.source_rows),
    ];
    let r = Rows { n_s: 1, cells: 3, groups: 3, rows, valid: step.source_rows_i32() };
    for (seed, op, index) in ops {
        let v = verdicts_match(op, &mut mem, &index, &vectors(&r, seed, 400));
        assert!(v.out_of_range > 0 && v.accepted > 0, "{}: {v:?}", op.name());
    }
}

/// Several sequences: a source row may also be a row another sequence writes — GATED_DELTA_NET
/// _FROM_CACHE's one index rule beyond the range, which `check_indices` must keep.
#[test]
fn a_source_row_another_sequence_writes_is_refused_by_the_index_rules_too() {
    let step = Step { cells: 4, ..Step::new(2, 1) }.with_sequences(&[(1, 0), (2, 0)]).unwrap();
    let (mut mem, t) = layer(step);
    let op = from_cache(&t, &step, &mem);
    // Sequence 0 reading the row sequence 1 writes (cell 1, slot 0): refused either way.
    set_indices(&mut mem, &t.source_rows, &[1, 1, 2]);
    let (full, quick, prepared) = (op.validate(&mem), op.check_indices(&mem), op.index_rules().check(&mem));
    assert!(matches!(full, Err(rgdn::Error::Aliasing { .. })), "{full:?}");
    let text = |r: rgdn::Result<()>| r.map_err(|e| e.to_string());
    let full = text(full);
    assert_eq!(full, text(quick));
    assert_eq!(full, text(prepared));
    set_indices(&mut mem, &t.source_rows, &step.source_rows_i32());
    let r = Rows { n_s: 3, cells: 4, groups: 2, rows: step.cache_rows(), valid: step.source_rows_i32() };
    let v = verdicts_match(&op, &mut mem, &t.source_rows, &vectors(&r, 5, 400));
    assert!(v.accepted > 0 && v.out_of_range > 0 && v.another_row > 0, "{v:?}");
}

/// GET_ROWS(ssm_cache) + GATED_DELTA_NET of the unfused step as one GATED_DELTA_NET_FROM_CACHE
/// (what the `state_read` fusion builds; built here so that every batch has one).
fn from_cache(t: &LayerTensors, step: &Step, mem: &HostMemory) -> GatedDeltaNetFromCache {
    let ops = layer_step(t, &SMALL, step, &LayerInit::default(), false, mem).unwrap();
    let gdn: GatedDeltaNet = find(&ops);
    let gather = ops
        .iter()
        .filter_map(|op| op.as_ref().downcast_ref::<GetRows>())
        .find(|g| g.src == t.ssm_cache)
        .cloned()
        .expect("the ssm-state GET_ROWS");
    GatedDeltaNetFromCache::from_cache(&gdn, gather.src, gather.rows)
}

/// A batch of n_s sequences (cells n_s + 16, so that rows no sequence writes exist in every
/// group; n_t = 2, R = 2: the conv chain writes all 3 groups, the GDN the 2 newest): every
/// index-reading op of its fused step, and GATED_DELTA_NET_FROM_CACHE on cache views the layer
/// never makes — shifted by 16 bytes (every row read straddles two slot rows), rows 16 bytes
/// apart more than the slots (the overlap drifts row by row), rows half a row apart (each read
/// meets up to three slots) — and the conv chain with its snapshot rows moved (adjacent
/// ranges, the last one ending at the cache's last row). Returns the verdicts of all.
fn batch_verdicts(n_s: usize, seed: u64) -> Vec<(String, Verdicts)> {
    let cells = n_s + 16;
    let sources: Vec<(usize, usize)> = (1..n_s).map(|c| (c, 0)).collect();
    let step = Step { cells, ..Step::new(2, 2) }.with_sequences(&sources).unwrap();
    let (mut mem, t) = layer(step);
    let init = LayerInit::default();
    let rows = step.cache_rows();
    // Above `layer_step::max_seqs` (8 by default) the fusion pass leaves the three fused parts:
    // the op whose rules are checked is built from them as the `layer_step` matcher builds it
    // (the op itself takes up to 256 sequences).
    let parts = layer_step_with(&t, &SMALL, &step, &init, Options::ALL.without("layer_step"), &mem).unwrap();
    let whole = GdnLayerStep { chain: find(&parts.ops), gate: find(&parts.ops), gdn: find(&parts.ops) };
    whole.validate(&mem).expect("the three parts make a valid layer step");
    let chain = whole.chain.clone();
    let gdn = from_cache(&t, &step, &mem);
    let mut own_index = whole.clone();
    own_index.gdn.source_rows = mem.alloc_indices(&step.source_rows_i32());
    let base = Rows { n_s, cells, groups: 3, rows, valid: step.source_rows_i32() };
    let mut out = Vec::new();
    let mut run = |name: &str, op: &dyn Op, mem: &mut HostMemory, index: Tensor, r: &Rows, seed: u64| {
        out.push((format!("n_s {n_s} {name}"), verdicts_match(op, mem, &index, &vectors(r, seed, 400))));
    };
    run("GDN_CONV_CHAIN", &chain, &mut mem, t.source_rows, &base, seed);
    run("GATED_DELTA_NET_FROM_CACHE", &gdn, &mut mem, t.source_rows, &base, seed + 1);
    run("GDN_LAYER_STEP", &whole, &mut mem, t.source_rows, &base, seed + 2);
    run("GDN_LAYER_STEP, own GDN index", &own_index, &mut mem, own_index.gdn.source_rows, &base, seed + 3);
    run("GDN_LAYER_STEP, own GDN index, chain's index", &own_index, &mut mem, t.source_rows, &base, seed + 4);

    // Cache views the layer never makes. Each op must validate first: every sequence starts on
    // a row of the unwritten group 2 (cells s, rows 2·M + s), which no slot's bytes reach.
    let row = t.ssm_cache.layout.nb[1];
    let n = t.ssm_cache.ne();
    let in_group_2: Vec<i32> = (0..n_s).map(|s| (2 * cells + s) as i32).collect();
    let layouts = [
        ("shifted by 16 bytes", n[1] - 1, row, 16),
        ("rows 16 bytes further apart", n[1] * row / (row + 16), row + 16, 0),
        ("rows half a row apart", 2 * n[1] - 1, row / 2, 0),
    ];
    for (i, (what, n_rows, stride, offset)) in layouts.into_iter().enumerate() {
        // Sequence s on the row whose bytes start where row 2·M + s does (or just after).
        let valid: Vec<i32> = in_group_2.iter().map(|&x| ((x as usize * row).div_ceil(stride)) as i32).collect();
        let cache = t.ssm_cache.view([n[0], n_rows, 1, 1], [4, stride, stride * n_rows, stride * n_rows], offset);
        let r = Rows { n_s, cells: cells * row / stride, groups: 3, rows: n_rows, valid: valid.clone() };
        set_indices(&mut mem, &t.source_rows, &valid);
        let mut op = gdn.clone();
        op.ssm_cache = cache;
        run(&format!("GATED_DELTA_NET_FROM_CACHE, cache {what}"), &op, &mut mem, t.source_rows, &r, seed + 10 + i as u64);
        let mut op = whole.clone();
        op.gdn.ssm_cache = cache;
        // The chain reads the same index: its rows must pass too (conv rows of group 2 are
        // written only by their own sequence, which the layouts here keep).
        if op.validate(&mem).is_ok() {
            run(&format!("GDN_LAYER_STEP, ssm cache {what}"), &op, &mut mem, t.source_rows, &r, seed + 20 + i as u64);
        }
        set_indices(&mut mem, &t.source_rows, &step.source_rows_i32());
    }
    // The conv chain's snapshot rows moved: three adjacent ranges of n_s rows at 16…, the last
    // ending at the cache's last row.
    let mut moved = chain.clone();
    let last = rows - n_s;
    moved.snapshots = vec![
        SnapshotWrite { row: last, offset: 2 },
        SnapshotWrite { row: last - n_s, offset: 1 },
        SnapshotWrite { row: last - 2 * n_s, offset: 0 },
    ];
    let valid: Vec<i32> = (0..n_s).map(|s| (last + s) as i32).collect();
    set_indices(&mut mem, &t.source_rows, &valid);
    let r = Rows { n_s, cells: n_s, groups: rows / n_s, rows, valid };
    run("GDN_CONV_CHAIN, snapshots moved", &moved, &mut mem, t.source_rows, &r, seed + 30);
    out
}

/// n_s = 64 and 256 (the layer step op's limit): every op, every layout, every kind of verdict.
#[test]
fn the_index_rules_of_batches_are_their_validations() {
    for (n_s, seed) in [(64, 640), (256, 2560)] {
        let runs = batch_verdicts(n_s, seed);
        for (name, v) in &runs {
            eprintln!("{name}: {v:?}");
            assert!(v.accepted > 0 && v.out_of_range > 0 && v.another_row > 0, "{name}: {v:?}");
        }
        // The whole step ran on the shifted ssm cache too (its one index passes the chain there),
        // and there each of its parts' rules decided some verdicts: one pass over the shared
        // index must report the chain's refusals before the GDN's, and the GDN's after a chain
        // that accepts.
        let (_, shifted) = runs
            .iter()
            .find(|(name, _)| name.ends_with("GDN_LAYER_STEP, ssm cache shifted by 16 bytes"))
            .unwrap_or_else(|| panic!("n_s {n_s}: the layer step on the shifted cache did not run"));
        for rule in [
            "IndexOutOfRange GDN_CONV_CHAIN",
            "Aliasing GDN_CONV_CHAIN",
            "IndexOutOfRange GATED_DELTA_NET_FROM_CACHE",
            "Aliasing GATED_DELTA_NET_FROM_CACHE",
        ] {
            assert!(shifted.by_rule.get(rule).is_some_and(|&n| n > 0), "n_s {n_s}: no `{rule}` verdict: {shifted:?}");
        }
    }
}
