//! \[replay\] GATED_DELTA_NET_REPLAY_VERIFY cases (the `replay_verify` fusion's op): the replay of
//! each sequence's accepted tokens into its committed row, then the verify step's tokens from
//! that row with no state slot — the replay's setups (n_s 1/2/5/64 × T 1/4/8/16, random counts
//! with 0 and T among them, the destination the source row or another row of a poisoned cache,
//! grouped heads, padded log views, growing gates) with a verify of the same length or another;
//! and refusals named as this op's (a count above T, rows, the verify's inputs over the cache,
//! `out` over the log).
//!
//! [`VS_PAIR`]: every match setup against the unfused pair it replaces, GATED_DELTA_NET_REPLAY
//! then GATED_DELTA_NET_FROM_CACHE reading the destination rows and writing its one slot into a
//! scratch tensor — on the GPU both run, and `out` and every byte of the cache's buffer (guard
//! bytes included) must come out identical (the scratch is the pair's alone).

use super::gated_delta_net::{Gate, TOLERANCE};
use super::gated_delta_net_replay::{Accept, ReplayCase, Rows, grid};
use crate::Error;
use crate::kernels::abi::GDN_HEAD_DIM as D;
use crate::ops::{GatedDeltaNetFromCache, GatedDeltaNetReplayVerify};
use crate::suite::inputs::Values;
use crate::suite::{Builder, Case, Equivalence, Expect, Scenario};
use crate::tensor::{DType, Layout, Tensor};
use rand::Rng;

pub const GROUP: &str = "GATED_DELTA_NET_REPLAY_VERIFY";
/// The fused op against GATED_DELTA_NET_REPLAY + GATED_DELTA_NET_FROM_CACHE, bitwise.
pub const VS_PAIR: &str = "GATED_DELTA_NET_REPLAY_VERIFY_VS_PAIR";

/// One case: the replay's setup and the verify's token count.
#[derive(Clone, Copy, Debug)]
struct VerifyCase {
    replay: ReplayCase,
    /// T of the verify step (the log's T is `replay.n_t`).
    n_t: usize,
}

impl VerifyCase {
    fn name(&self, group: &str) -> String {
        let replay = self.replay.name(group);
        format!("{},verify_T={})", &replay[..replay.len() - 1], self.n_t)
    }

    /// The pair: the replay of [`ReplayCase::build`], and GATED_DELTA_NET_FROM_CACHE over its
    /// destination rows (fresh q, k, v, g, β and `out`; its one slot in a scratch tensor).
    fn build(&self, b: &mut Builder) -> (GatedDeltaNetReplayVerify, GatedDeltaNetFromCache) {
        let (p, n_t) = (self.replay, self.n_t);
        let replay = p.build(b);
        let pad = |extra: [usize; 4]| if p.padded { extra } else { [0; 4] };
        let q = b.tensor_padded(DType::F32, [D, p.h_k, n_t, p.n_s], pad([1, 0, 2, 0]), Values::Uniform(0.15));
        let k = b.tensor_padded(DType::F32, [D, p.h_k, n_t, p.n_s], pad([0, 1, 0, 1]), Values::Uniform(0.15));
        let v = b.tensor_padded(DType::F32, [D, p.h_v, n_t, p.n_s], pad([2, 0, 0, 1]), Values::Uniform(2.0));
        let g = b.tensor_padded(DType::F32, [1, p.h_v, n_t, p.n_s], [0; 4], Values::Uniform(1.0));
        let gates: Vec<f32> = (0..p.h_v * n_t * p.n_s).map(|_| super::gated_delta_net::gate_value(&mut b.rng, p.gate)).collect();
        b.mem.fill_f32(&g, &gates).expect("a view of the case's own buffers");
        let beta = b.tensor_padded(DType::F32, [1, p.h_v, n_t, p.n_s], [0; 4], Values::Uniform(1.0));
        let betas: Vec<f32> = (0..p.h_v * n_t * p.n_s).map(|_| b.rng.random_range(0.0..1.0)).collect();
        b.mem.fill_f32(&beta, &betas).expect("a view of the case's own buffers");
        let out = b.output([D, p.h_v, n_t, p.n_s]);
        let states = b.output([D * D * p.h_v, p.n_s, 1, 1]);
        let verify = GatedDeltaNetFromCache { q, k, v, g, beta, ssm_cache: replay.ssm_cache, source_rows: replay.dest_rows, out, states };
        let fused = GatedDeltaNetReplayVerify::of_pair(&replay, &verify).expect("the verify reads the replay's rows");
        (fused, verify)
    }

    fn match_case(self) -> Case {
        Case::seeded(GROUP, self.name(GROUP), move |mut b| {
            let (op, _) = self.build(&mut b);
            Ok(b.finish(vec![Box::new(op)], TOLERANCE, false))
        })
    }

    fn vs_pair_case(self) -> Case {
        Case::seeded(VS_PAIR, self.name(VS_PAIR), move |mut b| {
            let (op, verify) = self.build(&mut b);
            let replay = op.replay.clone();
            let len = b.mem.bytes(replay.ssm_cache.buffer).len();
            let whole = Tensor::new(replay.ssm_cache.buffer, Layout::contiguous(DType::F32, [len / 4, 1, 1, 1]));
            let compare = vec![(op.out, verify.out), (whole, whole)];
            Ok(Expect::Equivalent(Equivalence::new(b.mem, vec![Box::new(op)], vec![Box::new(replay), Box::new(verify)], compare)))
        })
    }
}

const BASE: ReplayCase =
    ReplayCase { h_k: 1, h_v: 2, n_t: 4, n_s: 2, rows: Rows::Same, accept: Accept::Random, padded: false, gate: Gate::Realistic };

fn setups() -> Vec<VerifyCase> {
    let mut out = Vec::new();
    // The replay's grid, the verify as long as the log.
    out.extend(grid().map(|replay| VerifyCase { replay, n_t: replay.n_t }));
    // Nothing accepted (the verify reads the destination rows as they were), part of the step,
    // all of it; a verify of another length than the log; padded views, growing gates.
    out.push(VerifyCase { replay: ReplayCase { n_s: 1, n_t: 8, accept: Accept::Each(0), rows: Rows::Distinct, ..BASE }, n_t: 8 });
    out.push(VerifyCase { replay: ReplayCase { n_s: 3, n_t: 8, accept: Accept::Each(0), ..BASE }, n_t: 4 });
    out.push(VerifyCase { replay: ReplayCase { n_s: 1, n_t: 8, accept: Accept::Each(3), rows: Rows::Distinct, ..BASE }, n_t: 5 });
    out.push(VerifyCase { replay: ReplayCase { n_s: 2, n_t: 16, accept: Accept::All, ..BASE }, n_t: 1 });
    out.push(VerifyCase { replay: ReplayCase { n_s: 5, n_t: 8, h_k: 2, h_v: 6, padded: true, ..BASE }, n_t: 8 });
    out.push(VerifyCase {
        replay: ReplayCase { n_s: 2, n_t: 16, padded: true, rows: Rows::Distinct, gate: Gate::PositiveAndZero, ..BASE },
        n_t: 16,
    });
    out
}

/// A case the op must refuse with the error `predicate` accepts; `edit` spoils a valid op
/// (n_s = 3, T = 4, rows shuffled over 7).
fn refusal(
    name: &str,
    expected: &'static str,
    predicate: fn(&Error) -> bool,
    edit: fn(&mut GatedDeltaNetReplayVerify, &mut Builder),
) -> Case {
    let name = format!("{GROUP}(refuse:{name})");
    Case::seeded(GROUP, name, move |mut b| {
        let (mut op, _) = VerifyCase { replay: ReplayCase { n_s: 3, rows: Rows::Distinct, ..BASE }, n_t: 4 }.build(&mut b);
        edit(&mut op, &mut b);
        let scenario = Scenario { mem: b.mem, ops: vec![Box::new(op)], tolerance: TOLERANCE, exact_nan_payloads: false };
        Ok(Expect::Refusal { scenario, predicate, expected })
    })
}

pub fn cases() -> Vec<Case> {
    let mut cases: Vec<Case> = setups().into_iter().map(VerifyCase::match_case).collect();
    cases.push(refusal(
        "accepted_above_T",
        "IndexOutOfRange: accepted[2] = T + 1, named as the fused op",
        |e| matches!(e, Error::IndexOutOfRange { op: GROUP, arg: "accepted", position: 2, index: 5, rows: 5 }),
        |op, b| op.replay.accepted = b.mem.alloc_indices(&[4, 0, 5]),
    ));
    cases.push(refusal(
        "writes_a_row_another_sequence_reads",
        "Aliasing: dest_rows over source_rows",
        |e| matches!(e, Error::Aliasing { op: GROUP, a: "dest_rows", b: "source_rows", .. }),
        |op, b| {
            op.replay.source_rows = b.mem.alloc_indices(&[0, 1, 2]);
            op.replay.dest_rows = b.mem.alloc_indices(&[1, 3, 4]);
        },
    ));
    cases.push(refusal(
        "dest_row_out_of_range",
        "IndexOutOfRange: dest_rows[1] = n_rows",
        |e| matches!(e, Error::IndexOutOfRange { op: GROUP, arg: "dest_rows", position: 1, index: 7, rows: 7 }),
        |op, b| op.replay.dest_rows = b.mem.alloc_indices(&[0, 7, 1]),
    ));
    cases.push(refusal(
        "verify_v_over_the_cache",
        "Aliasing: the verify's v on the cache the launch writes",
        |e| matches!(e, Error::Aliasing { op: GROUP, a: "ssm_cache", b: "v", .. }),
        |op, _| op.v = op.replay.ssm_cache.view(op.v.ne(), Layout::contiguous(DType::F32, op.v.ne()).nb, 0),
    ));
    cases.push(refusal(
        "out_over_the_logged_v",
        "Aliasing: out on the log the launch reads",
        |e| matches!(e, Error::Aliasing { op: GROUP, a: "out", b: "log v", .. }),
        |op, _| op.out = op.replay.v.view(op.out.ne(), op.replay.v.layout.nb, 0),
    ));
    cases.push(refusal(
        "verify_of_other_sequences",
        "Shape: the verify's n_s is the replay's",
        |e| matches!(e, Error::Shape { op: GROUP, .. }),
        |op, b| op.q = b.tensor_padded(DType::F32, [D, 1, 4, 2], [0; 4], Values::Uniform(0.15)),
    ));
    cases.extend(setups().into_iter().map(VerifyCase::vs_pair_case));
    cases
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::cases::gated_delta_net_replay::covers_the_grid;

    #[test]
    fn the_grid_of_sizes_and_row_modes_is_covered() {
        let s = setups();
        assert!(covers_the_grid(&s.iter().map(|c| (c.replay.n_s, c.replay.n_t, c.replay.rows)).collect::<Vec<_>>()));
        assert!(s.iter().any(|c| c.n_t != c.replay.n_t) && s.iter().any(|c| c.replay.accept == Accept::Each(0)));
    }

    #[test]
    fn every_case_passes_on_the_cpu() {
        crate::suite::assert_cpu_passes(cases());
    }
}
