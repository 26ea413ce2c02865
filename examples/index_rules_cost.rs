// Host time of the index rules a planned GDN layer step runs before every launch
// (`Op::check_indices`, NOTES.md open question 9), measured on the CPU alone: no GPU, and no
// cache bytes either — the rules read only the views and the index values, so the layer's
// buffers are lengths in a `Memory` of this file's own and the 9B shape costs nothing to lay out.
//
// `cargo run --release --example index_rules_cost` (add `quick` for fewer rounds). Prints µs per
// call, the median of 15 rounds, for n_s = 1, 64, 256 and n_t = 1, 4, 8, 16 (R = n_t − 1: a
// verify step keeps a snapshot per token; n_s = 256 stops at the 1024 token columns a step
// takes): the rules a plan prepared once (`Op::index_rules`, what `StepPlan::launch` runs) for
// the whole step and for each part alone (the whole reads the shared index once for both), and
// `Op::check_indices`: the same rules as the full validation states them, which is what a plan
// ran before every step until the rules were prepared.

use rgdn::engine::layer_step_with;
use rgdn::fusion::Options;
use rgdn::layer::{GdnShape, LayerInit, LayerTensors, Step, TensorKind};
use rgdn::memory::Memory;
use rgdn::ops::{GdnLayerStep, Op};
use rgdn::tensor::{BufferId, DType, Layout, Tensor};
use std::hint::black_box;
use std::time::Instant;

/// Buffer lengths only, and the index buffers' bytes: what validation and the index rules read.
struct Lengths {
    lens: Vec<usize>,
    index: Vec<Option<Vec<u8>>>,
}

impl Memory for Lengths {
    fn buffer_len(&self, id: BufferId) -> Option<usize> {
        self.lens.get(id.0).copied()
    }
    fn is_index_buffer(&self, id: BufferId) -> bool {
        matches!(self.index.get(id.0), Some(Some(_)))
    }
    /// Decoded element by element with checked offsets, as `DeviceMemory`'s host copy is (so
    /// the time is the time a plan's step spends there).
    fn index_values(&self, t: &Tensor) -> Option<Vec<i32>> {
        let bytes = self.index.get(t.buffer.0)?.as_ref()?;
        if t.dtype() != DType::I32 || t.layout.checked_byte_range().ok()?.is_some_and(|r| r.end > bytes.len()) {
            return None;
        }
        t.layout
            .indices()
            .map(|i| {
                let o = t.layout.checked_byte_offset(i)?;
                Some(i32::from_le_bytes(bytes.get(o..o.checked_add(4)?)?.try_into().ok()?))
            })
            .collect()
    }
    fn index_bytes(&self, id: BufferId) -> Option<&[u8]> {
        self.index.get(id.0)?.as_deref()
    }
}

/// The layer's tensors, each contiguous in a buffer of its own, as `LayerTensors::alloc` lays
/// them out (without allocating their bytes).
fn layer(shape: &GdnShape, step: &Step) -> Result<(Lengths, LayerTensors), rgdn::Error> {
    let specs = LayerTensors::specs(shape, step, LayerInit::default().mat_vec_weights)?;
    let mut mem = Lengths { lens: Vec::new(), index: Vec::new() };
    let mut tensors = Vec::new();
    for ((_, dtype, ne), kind) in specs.into_iter().zip(LayerTensors::KINDS) {
        let layout = Layout::contiguous(dtype, ne);
        mem.lens.push(Layout::contiguous_bytes(dtype, ne).expect("the specs were checked"));
        mem.index.push((kind == TensorKind::Index).then(|| step.source_rows_i32().iter().flat_map(|v| v.to_le_bytes()).collect()));
        tensors.push(Tensor::new(BufferId(tensors.len()), layout));
    }
    Ok((mem, LayerTensors::from_array(tensors.try_into().expect("one tensor per table row"))))
}

/// µs per call of `f`: the median of `rounds` rounds of calls lasting ≈ 2 ms each.
fn per_call_us(rounds: usize, mut f: impl FnMut()) -> f64 {
    let t0 = Instant::now();
    let mut calls = 0usize;
    while t0.elapsed().as_secs_f64() < 2e-3 {
        f();
        calls += 1;
    }
    let mut us: Vec<f64> = (0..rounds)
        .map(|_| {
            let t0 = Instant::now();
            for _ in 0..calls {
                f();
            }
            t0.elapsed().as_secs_f64() * 1e6 / calls as f64
        })
        .collect();
    us.sort_by(f64::total_cmp);
    us[rounds / 2]
}

fn main() -> Result<(), rgdn::Error> {
    let rounds = if std::env::args().any(|a| a == "quick") { 5 } else { 15 };
    let shape = GdnShape::QWEN35_9B;
    println!("# GDN_LAYER_STEP index rules, 9B shape (µs per call, median of {rounds} rounds)");
    for n_s in [1usize, 64, 256] {
        for n_t in [1usize, 4, 8, 16] {
            let sources: Vec<(usize, usize)> = (1..n_s).map(|c| (c, 0)).collect();
            let step = Step { cells: n_s, ..Step::new(n_t, n_t - 1) }.with_sequences(&sources)?;
            let (mem, t) = match layer(&shape, &step) {
                Ok(layer) => layer,
                // n_t·n_s past the 1024 token columns a step takes (n_s 256 at n_t ≥ 8).
                Err(e) => {
                    println!("n_s {n_s:3} n_t {n_t:2}: not a step ({e})");
                    continue;
                }
            };
            let ops = layer_step_with(&t, &shape, &step, &LayerInit::default(), Options::ALL, &mem)?.ops;
            let Some(op) = ops.iter().find_map(|op| op.as_ref().downcast_ref::<GdnLayerStep>()) else {
                println!("n_s {n_s:3} n_t {n_t:2}: no GDN_LAYER_STEP in the step");
                continue;
            };
            op.validate(&mem)?;
            let check = |f: &dyn Fn() -> rgdn::Result<()>| per_call_us(rounds, || black_box(f()).expect("the step's own indices pass"));
            // What a plan runs before every step: the rules prepared once, with the plan.
            let (rules, chain_rules, gdn_rules) = (op.index_rules(), op.chain.index_rules(), op.gdn.index_rules());
            let planned = check(&|| rules.check(&mem));
            let planned_chain = check(&|| chain_rules.check(&mem));
            let planned_gdn = check(&|| gdn_rules.check(&mem));
            // The same rules as the full validation states them.
            let whole = check(&|| op.check_indices(&mem));
            println!(
                "n_s {n_s:3} n_t {n_t:2}: plan's index rules {planned:5.2} µs (chain alone {planned_chain:5.2}, gdn alone {planned_gdn:5.2}); \
                 check_indices {whole:7.2} µs"
            );
        }
    }
    Ok(())
}
