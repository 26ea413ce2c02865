//! CPU tests of what a step of a plan (`rgdn::engine::StepPlan`) re-checks: every op that
//! reads an index buffer overrides `Op::check_indices` with its index rules only, and for any
//! index values those rules must give exactly the full validation's verdict (and error) on an
//! op that validated with other values — else a plan would launch on an index the full
//! validation refuses, or refuse what it accepts. (The plans themselves run on the GPU:
//! `tests/gpu_engine.rs`.)

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rgdn::engine::{layer_step, layer_step_with};
use rgdn::fusion::Options;
use rgdn::layer::{GdnShape, LayerInit, LayerTensors, Step};
use rgdn::memory::{HostMemory, Memory};
use rgdn::ops::{GatedDeltaNet, GatedDeltaNetFromCache, GdnConvChain, GdnLayerStep, GetRows, Op};
use rgdn::tensor::Tensor;

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

/// For `trials` random index vectors (in −1 ..= rows + 1, so refusals are common): the op's
/// `check_indices` verdict is its `validate` verdict, error for error. Returns how many were
/// refused (a test that never sees a refusal proves nothing).
fn index_rules_match_validation(op: &dyn Op, mem: &mut HostMemory, index: &Tensor, rows: usize, seed: u64) -> usize {
    op.validate(mem).unwrap_or_else(|e| panic!("{}: the op must validate first: {e}", op.name()));
    let mut rng = StdRng::seed_from_u64(seed);
    let mut refused = 0;
    for _ in 0..400 {
        let values: Vec<i32> = (0..index.ne()[0]).map(|_| rng.random_range(-1..=rows as i32 + 1)).collect();
        set_indices(mem, index, &values);
        let (full, quick) = (op.validate(mem), op.check_indices(mem));
        assert_eq!(full.as_ref().map_err(|e| e.to_string()), quick.as_ref().map_err(|e| e.to_string()), "{} with {values:?}", op.name());
        refused += full.is_err() as usize;
    }
    refused
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
    let ops: [(u64, &dyn Op, Tensor); 5] = [
        (1, &gather, t.source_rows),
        (2, &chain, t.source_rows),
        (3, &from_cache, t.source_rows),
        (4, &whole, t.source_rows),
        (5, &own_index, own_index.gdn.source_rows),
    ];
    for (seed, op, index) in ops {
        let refused = index_rules_match_validation(op, &mut mem, &index, rows, seed);
        assert!(refused > 0, "{}: no index was refused", op.name());
        set_indices(&mut mem, &index, &step.source_rows_i32());
    }
}

/// Several sequences: a source row may also be a row another sequence writes — GATED_DELTA_NET
/// _FROM_CACHE's one index rule beyond the range, which `check_indices` must keep.
#[test]
fn a_source_row_another_sequence_writes_is_refused_by_the_index_rules_too() {
    let step = Step { cells: 4, ..Step::new(2, 1) }.with_sequences(&[(1, 0), (2, 0)]).unwrap();
    let (mut mem, t) = layer(step);
    let ops = layer_step(&t, &SMALL, &step, &LayerInit::default(), false, &mem).unwrap();
    let gdn: GatedDeltaNet = find(&ops);
    let gather = ops
        .iter()
        .filter_map(|op| op.as_ref().downcast_ref::<GetRows>())
        .find(|g| g.src == t.ssm_cache)
        .cloned()
        .expect("the ssm-state GET_ROWS");
    let op = GatedDeltaNetFromCache::from_cache(&gdn, gather.src, gather.rows);
    // Sequence 0 reading the row sequence 1 writes (cell 1, slot 0): refused either way.
    set_indices(&mut mem, &t.source_rows, &[1, 1, 2]);
    let (full, quick) = (op.validate(&mem), op.check_indices(&mem));
    assert!(matches!(full, Err(rgdn::Error::Aliasing { .. })), "{full:?}");
    assert_eq!(full.map_err(|e| e.to_string()), quick.map_err(|e| e.to_string()));
    set_indices(&mut mem, &t.source_rows, &step.source_rows_i32());
    let refused = index_rules_match_validation(&op, &mut mem, &t.source_rows, step.cache_rows(), 5);
    assert!(refused > 0);
    assert!(mem.index_values(&t.source_rows).is_some());
}
