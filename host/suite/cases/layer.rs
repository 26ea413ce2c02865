//! The whole unfused GDN layer step (spec §1.4) on the Qwen3.5 presets: every kernel of the
//! chain on the GPU against the chained CPU references — every output and both caches compared
//! byte for byte.

use crate::graph::layer::unfused_ops;
use crate::layer::{GdnShape, LayerInit, LayerTensors, Step};
use crate::ops::Precision;
use crate::suite::{Case, Expect, Scenario, Tolerance};
use crate::tensor::DType;

pub const GROUP: &str = "GDN_LAYER";

/// The recurrence runs up to 16 tokens through ex2 approximations: against exact math the
/// outputs drift by a few ulp per step, relative to the state's scale (see GATED_DELTA_NET's
/// cases for the measured bound); bitwise parity is proven by the hardware-MUFU comparison.
pub const EXACT_MATH_TOLERANCE: Tolerance = Tolerance::AbsRel { abs: 2e-5, rel: 1e-4 };

#[derive(Clone, Copy, Debug)]
pub struct LayerCase {
    pub preset: &'static str,
    pub step: Step,
    pub init: LayerInit,
}

impl LayerCase {
    pub fn name(&self) -> String {
        let s = &self.step;
        let mut name = format!("{GROUP}({},n_t={},R={},M={}", self.preset, s.n_tokens, s.n_rollback, s.cells);
        if s.rollback_depth > 0 {
            name += &format!(",rs_idx={}", s.rollback_depth);
        }
        if s.zero_cell.is_some() {
            name += ",zeroed";
        }
        if self.init.mat_vec_weights != DType::F32 {
            name += &format!(",{:?}", self.init.mat_vec_weights);
        }
        if self.init.precision == Precision::F32 {
            name += ",f32acc";
        }
        if self.init.specials {
            name += ",specials";
        }
        name + ")"
    }

    pub fn case(self) -> Case {
        let name = self.name();
        Case::seeded(GROUP, name, move |mut b| {
            let shape = GdnShape::preset(self.preset).expect("known preset");
            let t = LayerTensors::alloc(&mut b.mem, &shape, &self.step, &self.init)?;
            t.fill_random(&mut b.mem, &shape, &mut b.rng, &self.init)?;
            let ops = unfused_ops(&t, &shape, &self.step, self.init.precision)?;
            Ok(Expect::Match(Scenario { mem: b.mem, ops, tolerance: EXACT_MATH_TOLERANCE, exact_nan_payloads: false }))
        })
    }
}

pub fn cases() -> Vec<Case> {
    let f32w = LayerInit::default();
    // Two cells, writing and reading cell 1: the row read is also a row written.
    let step = |n_tokens, n_rollback| Step { cells: 2, kv_head: 1, src_cell: 1, ..Step::new(n_tokens, n_rollback) };
    let mut out = Vec::new();
    for (n_t, r) in [(1, 0), (2, 0), (4, 3), (8, 7), (16, 15), (16, 16), (3, 7), (1, 4)] {
        out.push(LayerCase { preset: "9b", step: step(n_t, r), init: f32w });
    }
    out.push(LayerCase { preset: "9b", step: Step { rollback_depth: 2, ..step(5, 3) }, init: f32w });
    out.push(LayerCase { preset: "9b", step: Step { zero_cell: Some(1), ..step(4, 3) }, init: f32w });
    out.push(LayerCase { preset: "9b", step: Step { kv_head: 0, ..step(12, 2) }, init: f32w });
    out.push(LayerCase { preset: "9b", step: step(6, 5), init: LayerInit { mat_vec_weights: DType::BF16, ..f32w } });
    out.push(LayerCase { preset: "9b", step: step(6, 5), init: LayerInit { mat_vec_weights: DType::F16, ..f32w } });
    out.push(LayerCase {
        preset: "9b",
        step: step(6, 5),
        init: LayerInit { mat_vec_weights: DType::F16, precision: Precision::F32, ..f32w },
    });
    out.push(LayerCase { preset: "9b", step: step(4, 3), init: LayerInit { specials: true, ..f32w } });
    out.push(LayerCase { preset: "4b", step: step(4, 3), init: f32w });
    out.push(LayerCase { preset: "27b", step: step(8, 7), init: f32w });
    out.into_iter().map(LayerCase::case).collect()
}
