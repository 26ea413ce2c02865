//! \[replay\] GDN_LAYER_STEP_REPLAY cases: a replay layer's step of the Qwen3.5 presets in one
//! launch. Each case builds a one-layer replay graph (`graph::layer` with `Rollback::Replay`:
//! random caches, inputs, weights and a logged previous step, random accepted counts 0 … T per
//! sequence) and lets the fusion pass fuse it with every fusion: the step becomes one
//! GDN_LAYER_STEP_REPLAY (the graph's other nodes, staging copies, stay as they are).
//!
//! - `GDN_LAYER_STEP_REPLAY`: the fused graph on the GPU against its CPU reference (exact math
//!   within the layer tolerance; the MUFU replay bit for bit);
//! - `GDN_LAYER_STEP_REPLAY_VS_PARTS`: twins — the fused graph and the same graph with the step
//!   as its three launches (GDN_CONV_CHAIN with the commit, MUL_MAT_VEC_PAIR_GATE,
//!   GATED_DELTA_NET_REPLAY_VERIFY: `replay_step` off) from the same memory, every value a caller
//!   observes (both caches, both log sets, every output) byte for byte, every other buffer too.
//!
//! Shapes: 9B at one sequence and n_t 1 / 4 / 8 / 16, two to four sequences, BF16 and F16
//! weights, 4B and 27B. `rows=distinct` cases commit each sequence's state to a spare cache row
//! of its own (`dest_rows` ≠ `source_rows`, in reverse sequence order), which the graph's replay
//! layers never do (they commit in place): only these cases see a step that reads or writes one
//! sequence's row for another's.

use super::layer::EXACT_MATH_TOLERANCE;
use crate::error::{Error, Result};
use crate::fusion::{Options, compile, sweep};
use crate::graph::layer::{Built, LayerSpec, Outputs, Rollback, StackSpec};
use crate::layer::{GdnShape, Step};
use crate::ops::{GatedDeltaNetReplayVerify, GdnLayerStepReplay, Op, Precision};
use crate::suite::{Case, Equivalence, Expect, Scenario};
use crate::tensor::{DType, Tensor};

pub const GROUP: &str = "GDN_LAYER_STEP_REPLAY";
/// The fused step against its three parts, bitwise on the GPU.
pub const VS_PARTS: &str = "GDN_LAYER_STEP_REPLAY_VS_PARTS";

#[derive(Clone, Copy, Debug)]
struct ReplayCase {
    preset: &'static str,
    n_seqs: usize,
    n_tokens: usize,
    weights: DType,
    precision: Precision,
    /// Each sequence commits to a spare row of its own ([`ReplayCase::commit_elsewhere`]).
    distinct_rows: bool,
}

impl ReplayCase {
    fn name(&self, group: &str) -> String {
        let mut name = format!("{group}({},n_t={},n_s={}", self.preset, self.n_tokens, self.n_seqs);
        if self.weights != DType::F32 {
            name += &format!(",{:?}", self.weights);
        }
        if self.precision == Precision::F32 {
            name += ",f32acc";
        }
        if self.distinct_rows {
            name += ",rows=distinct";
        }
        name + ")"
    }

    /// The built replay layer: sequence s on cell s (its own rows), log set 1 replayed; with
    /// `distinct_rows`, n_s more cells that no sequence uses.
    fn built(&self, seed: u64) -> Result<Built> {
        let shape = GdnShape::preset(self.preset).ok_or(Error::Invalid { op: GROUP, what: format!("no preset {}", self.preset) })?;
        let more: Vec<(usize, usize)> = (1..self.n_seqs).map(|s| (s, 0)).collect();
        let cells = if self.distinct_rows { 2 * self.n_seqs } else { self.n_seqs };
        let step = Step { cells, ..Step::new(self.n_tokens, 0) }.with_sequences(&more)?;
        let layer = LayerSpec {
            rollback: Rollback::Replay { log_set: 0 },
            weights: self.weights,
            precision: self.precision,
            ..LayerSpec::new(shape, step)
        };
        sweep::build(&StackSpec { layers: vec![layer], outputs: Outputs::Products }, seed, sweep::Planning::FusionAware)
    }

    /// The graph's nodes (replaying set 1) compiled with `options`, as ops.
    fn ops(b: &Built, options: Options) -> Result<Vec<Box<dyn Op>>> {
        let (nodes, _) = compile(b.replay_nodes(1)?, &b.live_out(), options);
        Ok(nodes.into_iter().map(|n| n.op).collect())
    }

    /// With `distinct_rows`: every replay in `ops` (the fused step's, or the replay-verify's of
    /// its parts) commits sequence s to spare row 2·n_s − 1 − s (cells n_s … 2·n_s − 1 are
    /// unused, row = cell at R = 0) instead of its source row s, which it still reads; the
    /// verify then reads the row it committed. One index tensor, allocated in `b`'s memory.
    fn commit_elsewhere(&self, b: &mut Built, ops: &mut [Box<dyn Op>], parts: Option<&mut [Box<dyn Op>]>) -> Result<()> {
        if !self.distinct_rows {
            return Ok(());
        }
        let n = self.n_seqs as i32;
        let dest = b.mem.try_alloc_indices(&(0..n).map(|s| 2 * n - 1 - s).collect::<Vec<_>>())?;
        let mut replaced = 0;
        for op in ops.iter_mut().chain(parts.into_iter().flatten()) {
            if let Some(step) = op.as_ref().downcast_ref::<GdnLayerStepReplay>() {
                let mut step = step.clone();
                step.gdn.replay.dest_rows = dest;
                *op = Box::new(step);
                replaced += 1;
            } else if let Some(rv) = op.as_ref().downcast_ref::<GatedDeltaNetReplayVerify>() {
                let mut rv = rv.clone();
                rv.replay.dest_rows = dest;
                *op = Box::new(rv);
                replaced += 1;
            }
        }
        if replaced == 0 {
            return Err(Error::Invalid { op: GROUP, what: "no replay to commit elsewhere".into() });
        }
        Ok(())
    }

    /// The fused graph's ops, or an error when the step did not become one GDN_LAYER_STEP_REPLAY.
    fn step_ops(b: &Built) -> Result<Vec<Box<dyn Op>>> {
        let ops = Self::ops(b, Options::ALL)?;
        if ops.iter().filter(|o| o.name() == GROUP).count() != 1 {
            let names: Vec<&str> = ops.iter().map(|o| o.name()).collect();
            return Err(Error::Invalid { op: GROUP, what: format!("the fusion pass did not make one replay step: {names:?}") });
        }
        Ok(ops)
    }

    fn match_case(self) -> Case {
        Case::seeded(GROUP, self.name(GROUP), move |mut b| {
            let mut built = self.built(rand::Rng::random(&mut b.rng))?;
            let mut ops = Self::step_ops(&built)?;
            self.commit_elsewhere(&mut built, &mut ops, None)?;
            Ok(Expect::Match(Scenario { mem: built.mem, ops, tolerance: EXACT_MATH_TOLERANCE, exact_nan_payloads: false }))
        })
    }

    fn twin_case(self) -> Case {
        Case::seeded(VS_PARTS, self.name(VS_PARTS), move |mut b| {
            let mut built = self.built(rand::Rng::random(&mut b.rng))?;
            let mut ops = Self::step_ops(&built)?;
            let mut parts = Self::ops(&built, Options::ALL.without(crate::fusion::replay_step::FUSION.name))?;
            self.commit_elsewhere(&mut built, &mut ops, Some(&mut parts))?;
            // Every value a caller observes: unplanned values (caches, logs, inputs, weights)
            // and the graph's outputs.
            let observed: Vec<Tensor> = (0..built.values.len())
                .filter(|&v| built.plan.offsets[v].is_none() || built.values[v].role == crate::graph::plan::Role::Output)
                .map(|v| built.value_tensors[v])
                .collect();
            let compare = observed.into_iter().map(|t| (t, t)).collect();
            Ok(Expect::Equivalent(Equivalence::new(built.mem, ops, parts, compare)))
        })
    }
}

fn setups() -> Vec<ReplayCase> {
    let c = |preset, n_seqs, n_tokens| ReplayCase {
        preset,
        n_seqs,
        n_tokens,
        weights: DType::F32,
        precision: Precision::Default,
        distinct_rows: false,
    };
    vec![
        c("9b", 1, 1),
        c("9b", 1, 4),
        c("9b", 1, 8),
        c("9b", 1, 16),
        c("9b", 2, 4),
        c("9b", 3, 5),
        c("9b", 4, 2),
        ReplayCase { weights: DType::BF16, ..c("9b", 1, 4) },
        ReplayCase { weights: DType::F16, precision: Precision::F32, ..c("9b", 2, 3) },
        c("4b", 1, 4),
        c("27b", 1, 8),
        ReplayCase { distinct_rows: true, ..c("9b", 1, 4) },
        ReplayCase { distinct_rows: true, ..c("9b", 2, 2) },
        ReplayCase { distinct_rows: true, ..c("9b", 4, 1) },
        ReplayCase { distinct_rows: true, ..c("9b", 3, 5) },
    ]
}

pub fn cases() -> Vec<Case> {
    let mut out: Vec<Case> = setups().into_iter().map(ReplayCase::match_case).collect();
    out.extend(setups().into_iter().map(ReplayCase::twin_case));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Memory;

    /// The `rows=distinct` cases really commit elsewhere: in the fused step every sequence's
    /// destination row is a spare one, not its source row, in reverse order; and they pass on
    /// the CPU (their reference, and the step against its parts).
    #[test]
    fn the_distinct_rows_cases_commit_to_spare_rows_and_pass_on_the_cpu() {
        let distinct: Vec<Case> = cases().into_iter().filter(|c| c.name.contains("rows=distinct")).collect();
        assert_eq!(distinct.len(), 8, "four setups, each a match case and a twin");
        for c in distinct.iter().filter(|c| c.group == GROUP) {
            let Ok(Expect::Match(scenario)) = c.build() else { panic!("{}: not a match case", c.name) };
            let step = scenario.ops.iter().find_map(|op| op.as_ref().downcast_ref::<GdnLayerStepReplay>()).expect("a replay step");
            let (source, dest) = (
                scenario.mem.index_values(&step.gdn.replay.source_rows).expect("source rows"),
                scenario.mem.index_values(&step.gdn.replay.dest_rows).expect("dest rows"),
            );
            let n = source.len() as i32;
            assert_eq!(source, (0..n).collect::<Vec<_>>(), "{}", c.name);
            assert_eq!(dest, (0..n).map(|s| 2 * n - 1 - s).collect::<Vec<_>>(), "{}", c.name);
        }
        crate::suite::assert_cpu_passes(distinct);
    }
}
