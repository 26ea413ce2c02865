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
//! weights, 4B and 27B.

use super::layer::EXACT_MATH_TOLERANCE;
use crate::error::{Error, Result};
use crate::fusion::{Options, compile, sweep};
use crate::graph::layer::{Built, LayerSpec, Outputs, Rollback, StackSpec};
use crate::layer::{GdnShape, Step};
use crate::ops::{Op, Precision};
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
        name + ")"
    }

    /// The built replay layer: sequence s on cell s (its own rows), log set 1 replayed.
    fn built(&self, seed: u64) -> Result<Built> {
        let shape = GdnShape::preset(self.preset).ok_or(Error::Invalid { op: GROUP, what: format!("no preset {}", self.preset) })?;
        let more: Vec<(usize, usize)> = (1..self.n_seqs).map(|s| (s, 0)).collect();
        let step = Step { cells: self.n_seqs, ..Step::new(self.n_tokens, 0) }.with_sequences(&more)?;
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
            let built = self.built(rand::Rng::random(&mut b.rng))?;
            let ops = Self::step_ops(&built)?;
            Ok(Expect::Match(Scenario { mem: built.mem, ops, tolerance: EXACT_MATH_TOLERANCE, exact_nan_payloads: false }))
        })
    }

    fn twin_case(self) -> Case {
        Case::seeded(VS_PARTS, self.name(VS_PARTS), move |mut b| {
            let built = self.built(rand::Rng::random(&mut b.rng))?;
            let ops = Self::step_ops(&built)?;
            let parts = Self::ops(&built, Options::ALL.without(crate::fusion::replay_step::FUSION.name))?;
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
    let c = |preset, n_seqs, n_tokens| ReplayCase { preset, n_seqs, n_tokens, weights: DType::F32, precision: Precision::Default };
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
    ]
}

pub fn cases() -> Vec<Case> {
    let mut out: Vec<Case> = setups().into_iter().map(ReplayCase::match_case).collect();
    out.extend(setups().into_iter().map(ReplayCase::twin_case));
    out
}
