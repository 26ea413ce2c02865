//! \[replay\] GATED_DELTA_NET_REPLAY cases: the logged tokens each sequence accepted, replayed from
//! its committed ssm-cache row into one state row — n_s 1/2/5/64 × T 1/4/8/16, accepted counts
//! random per sequence (0 and T among them), the destination the source row itself or another
//! row, rows shuffled over a poisoned cache whose other rows (and guard bytes) must stay
//! untouched, grouped heads, padded log views, growing gates; and refusals (counts out of
//! 0 ..= T, rows out of range, a row two sequences write, a row one writes and another reads,
//! an index view the host cannot read, shapes).
//!
//! [`VS_GDN`]: with every count = T, the op against GATED_DELTA_NET_FROM_CACHE (one state slot,
//! in the destination rows) on the same log and a random q — on the GPU both kernels run, and
//! the cache must come out identical byte for byte: replaying T tokens is GATED_DELTA_NET's last
//! state slot.

use super::gated_delta_net::{Gate, TOLERANCE, big_tensor, gate_value};
use crate::Error;
use crate::kernels::abi::GDN_HEAD_DIM as D;
use crate::ops::{GatedDeltaNetFromCache, GatedDeltaNetReplay};
use crate::suite::inputs::Values;
use crate::suite::{Builder, Case, Equivalence, Expect, Scenario};
use crate::tensor::{DType, Layout, Tensor};
use rand::Rng;
use rand::seq::SliceRandom;

pub const GROUP: &str = "GATED_DELTA_NET_REPLAY";
/// Replaying all T tokens against GATED_DELTA_NET_FROM_CACHE's last state slot, bitwise.
pub const VS_GDN: &str = "GATED_DELTA_NET_REPLAY_VS_GDN";

/// Where each sequence's replayed state goes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rows {
    /// Over its committed row (the engine's case): `dest_rows[s] = source_rows[s]`.
    Same,
    /// To a row of its own that no sequence reads.
    Distinct,
}

/// The accepted counts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Accept {
    /// Random in 0 ..= T, with sequence 0 at T and sequence 1 (if any) at 0.
    Random,
    /// Every sequence T.
    All,
    /// Every sequence `a`.
    Each(usize),
}

/// One case's parameters.
#[derive(Clone, Copy, Debug)]
pub struct ReplayCase {
    pub h_k: usize,
    pub h_v: usize,
    pub n_t: usize,
    pub n_s: usize,
    pub rows: Rows,
    pub accept: Accept,
    /// The log views get padded strides.
    pub padded: bool,
    pub gate: Gate,
}

const BASE: ReplayCase =
    ReplayCase { h_k: 1, h_v: 2, n_t: 4, n_s: 2, rows: Rows::Same, accept: Accept::Random, padded: false, gate: Gate::Realistic };

impl ReplayCase {
    pub(crate) fn name(&self, group: &str) -> String {
        let accept = match self.accept {
            Accept::Random => "random".to_string(),
            Accept::All => "T".to_string(),
            Accept::Each(a) => a.to_string(),
        };
        format!(
            "{group}(H_k={},H_v={},T={},n_s={},rows={},a={accept}{}{})",
            self.h_k,
            self.h_v,
            self.n_t,
            self.n_s,
            if self.rows == Rows::Same { "same" } else { "distinct" },
            if self.padded { ",padded" } else { "" },
            match self.gate {
                Gate::Realistic => "",
                Gate::PositiveAndZero => ",g>=0",
                Gate::Specials => ",g_specials",
            },
        )
    }

    /// The op: the log (k, v, g, β), a cache of 2·n_s + 1 rows filled with states (uniform in
    /// ±0.5), source and destination rows drawn from a shuffle of its rows, the counts.
    pub(crate) fn build(&self, b: &mut Builder) -> GatedDeltaNetReplay {
        let p = *self;
        let pad = |extra: [usize; 4]| if p.padded { extra } else { [0; 4] };
        // Logged k are L2-normalised rows (|x_i| ≈ 1/√D); v the SiLU output.
        let k = b.tensor_padded(DType::F32, [D, p.h_k, p.n_t, p.n_s], pad([5, 1, 0, 1]), Values::Uniform(0.15));
        let v = b.tensor_padded(DType::F32, [D, p.h_v, p.n_t, p.n_s], pad([3, 0, 1, 0]), Values::Uniform(2.0));
        let g = b.tensor_padded(DType::F32, [1, p.h_v, p.n_t, p.n_s], pad([2, 1, 1, 0]), Values::Uniform(1.0));
        let gates: Vec<f32> = (0..p.h_v * p.n_t * p.n_s).map(|_| gate_value(&mut b.rng, p.gate)).collect();
        b.mem.fill_f32(&g, &gates).expect("a view of the case's own buffers");
        let beta = b.tensor_padded(DType::F32, [1, p.h_v, p.n_t, p.n_s], pad([0, 3, 0, 1]), Values::Uniform(1.0));
        let betas: Vec<f32> = (0..p.h_v * p.n_t * p.n_s).map(|_| b.rng.random_range(0.0..1.0)).collect();
        b.mem.fill_f32(&beta, &betas).expect("a view of the case's own buffers");
        let row = D * D * p.h_v;
        let n_rows = 2 * p.n_s + 1;
        let ssm_cache = big_tensor(b, [row, n_rows, 1, 1], [0; 4], Some(0.5));
        let mut order: Vec<i32> = (0..n_rows as i32).collect();
        order.shuffle(&mut b.rng);
        let source: Vec<i32> = order[..p.n_s].to_vec();
        let dest: Vec<i32> = match p.rows {
            Rows::Same => source.clone(),
            Rows::Distinct => order[p.n_s..2 * p.n_s].to_vec(),
        };
        let accepted: Vec<i32> = (0..p.n_s)
            .map(|s| match p.accept {
                Accept::All => p.n_t,
                Accept::Each(a) => a,
                Accept::Random if s == 0 => p.n_t,
                Accept::Random if s == 1 => 0,
                Accept::Random => b.rng.random_range(0..=p.n_t),
            } as i32)
            .collect();
        GatedDeltaNetReplay {
            k,
            v,
            g,
            beta,
            ssm_cache,
            source_rows: b.mem.alloc_indices(&source),
            dest_rows: b.mem.alloc_indices(&dest),
            accepted: b.mem.alloc_indices(&accepted),
        }
    }

    fn match_case(self) -> Case {
        Case::seeded(GROUP, self.name(GROUP), move |mut b| {
            let op = self.build(&mut b);
            Ok(b.finish(vec![Box::new(op)], TOLERANCE, false))
        })
    }

    /// [`VS_GDN`]: every count T, destination rows `first + s` (GATED_DELTA_NET_FROM_CACHE's slot
    /// rows), the source rows the destinations themselves or the rows after them.
    fn vs_gdn_case(self) -> Case {
        Case::seeded(VS_GDN, self.name(VS_GDN), move |mut b| {
            let p = ReplayCase { accept: Accept::All, ..self };
            let mut op = p.build(&mut b);
            let row = D * D * p.h_v;
            let first = 1;
            let dest: Vec<i32> = (0..p.n_s).map(|s| (first + s) as i32).collect();
            let source: Vec<i32> = match p.rows {
                Rows::Same => dest.clone(),
                Rows::Distinct => (0..p.n_s).map(|s| (first + p.n_s + s) as i32).collect(),
            };
            op.source_rows = b.mem.alloc_indices(&source);
            op.dest_rows = b.mem.alloc_indices(&dest);
            let q = b.tensor_padded(DType::F32, [D, p.h_k, p.n_t, p.n_s], [0; 4], Values::Uniform(0.15));
            let out = b.output([D, p.h_v, p.n_t, p.n_s]);
            let nb = op.ssm_cache.layout.nb;
            let states = op.ssm_cache.view([row, p.n_s, 1, 1], [4, nb[1], nb[1] * p.n_s, nb[1] * p.n_s], first * nb[1]);
            let gdn = GatedDeltaNetFromCache {
                q,
                k: op.k,
                v: op.v,
                g: op.g,
                beta: op.beta,
                ssm_cache: op.ssm_cache,
                source_rows: op.source_rows,
                out,
                states,
            };
            let len = b.mem.bytes(op.ssm_cache.buffer).len();
            let whole = Tensor::new(op.ssm_cache.buffer, Layout::contiguous(DType::F32, [len / 4, 1, 1, 1]));
            let compare = vec![(states, states), (whole, whole)];
            Ok(Expect::Equivalent(Equivalence::new(b.mem, vec![Box::new(op)], vec![Box::new(gdn)], compare)))
        })
    }
}

/// A case the op must refuse with the error `predicate` accepts; `edit` spoils a valid op
/// (n_s = 3, T = 4, rows shuffled over 7).
fn refusal(name: &str, expected: &'static str, predicate: fn(&Error) -> bool, edit: fn(&mut GatedDeltaNetReplay, &mut Builder)) -> Case {
    let name = format!("{GROUP}(refuse:{name})");
    Case::seeded(GROUP, name, move |mut b| {
        let mut op = ReplayCase { n_s: 3, rows: Rows::Distinct, ..BASE }.build(&mut b);
        edit(&mut op, &mut b);
        let scenario = Scenario { mem: b.mem, ops: vec![Box::new(op)], tolerance: TOLERANCE, exact_nan_payloads: false };
        Ok(Expect::Refusal { scenario, predicate, expected })
    })
}

/// The grid every replay group covers: n_s 1/2/5/64 × T 1/4/8/16 × the destination the source
/// row or another row (grouped heads H_k = 2, H_v = 3 at n_s = 5), random counts.
pub(crate) fn grid() -> impl Iterator<Item = ReplayCase> {
    [1, 2, 5, 64].into_iter().flat_map(|n_s| {
        [1, 4, 8, 16].into_iter().flat_map(move |n_t| {
            [Rows::Same, Rows::Distinct].into_iter().map(move |rows| {
                let (h_k, h_v) = if n_s == 5 { (2, 3) } else { (1, 2) };
                ReplayCase { h_k, h_v, n_t, n_s, rows, ..BASE }
            })
        })
    })
}

/// Whether `cases` (n_s, T, rows of each) cover [`grid`].
#[cfg(test)]
pub(crate) fn covers_the_grid(cases: &[(usize, usize, Rows)]) -> bool {
    grid().all(|g| cases.contains(&(g.n_s, g.n_t, g.rows)))
}

fn setups() -> Vec<ReplayCase> {
    let mut out = Vec::new();
    // n_s 1/2/5/64 × T 1/4/8/16, the destination the source row or another row.
    out.extend(grid());
    // One sequence with nothing accepted (nothing written) and with part of the step.
    out.push(ReplayCase { n_s: 1, n_t: 8, accept: Accept::Each(0), ..BASE });
    out.push(ReplayCase { n_s: 1, n_t: 8, accept: Accept::Each(3), rows: Rows::Distinct, ..BASE });
    out.push(ReplayCase { n_s: 2, n_t: 16, accept: Accept::All, ..BASE });
    // Padded log views, grouped heads, growing gates.
    out.push(ReplayCase { n_s: 5, n_t: 8, h_k: 2, h_v: 6, padded: true, ..BASE });
    out.push(ReplayCase { n_s: 2, n_t: 16, padded: true, rows: Rows::Distinct, gate: Gate::PositiveAndZero, ..BASE });
    out
}

/// The [`VS_GDN`] twins: every count T, n_s 1/2/5/64 × T 1/4/8/16 on a diagonal, both row modes.
fn vs_gdn_setups() -> Vec<ReplayCase> {
    let mut out = Vec::new();
    for (i, (n_s, n_t)) in [(1, 1), (2, 4), (5, 8), (64, 16), (1, 16), (64, 4)].into_iter().enumerate() {
        let rows = if i % 2 == 0 { Rows::Same } else { Rows::Distinct };
        out.push(ReplayCase { n_s, n_t, rows, ..BASE });
    }
    out.push(ReplayCase { n_s: 5, n_t: 8, h_k: 2, h_v: 3, padded: true, gate: Gate::PositiveAndZero, ..BASE });
    out
}

pub fn cases() -> Vec<Case> {
    let mut cases: Vec<Case> = setups().into_iter().map(|s| s.match_case()).collect();
    cases.push(refusal(
        "accepted_above_T",
        "IndexOutOfRange: accepted[2] = T + 1",
        |e| matches!(e, Error::IndexOutOfRange { op: GROUP, arg: "accepted", position: 2, index: 5, rows: 5 }),
        |op, b| op.accepted = b.mem.alloc_indices(&[4, 0, 5]),
    ));
    cases.push(refusal(
        "accepted_negative",
        "IndexOutOfRange: accepted[0] = −1",
        |e| matches!(e, Error::IndexOutOfRange { op: GROUP, arg: "accepted", position: 0, index: -1, .. }),
        |op, b| op.accepted = b.mem.alloc_indices(&[-1, 0, 1]),
    ));
    cases.push(refusal(
        "dest_row_out_of_range",
        "IndexOutOfRange: dest_rows[1] = n_rows",
        |e| matches!(e, Error::IndexOutOfRange { op: GROUP, arg: "dest_rows", position: 1, index: 7, rows: 7 }),
        |op, b| op.dest_rows = b.mem.alloc_indices(&[0, 7, 1]),
    ));
    cases.push(refusal(
        "source_row_negative",
        "IndexOutOfRange: source_rows[2] = −1",
        |e| matches!(e, Error::IndexOutOfRange { op: GROUP, arg: "source_rows", position: 2, index: -1, .. }),
        |op, b| op.source_rows = b.mem.alloc_indices(&[0, 1, -1]),
    ));
    cases.push(refusal(
        "two_sequences_write_one_row",
        "Aliasing: dest_rows over dest_rows",
        |e| matches!(e, Error::Aliasing { op: GROUP, a: "dest_rows", b: "dest_rows", .. }),
        |op, b| {
            op.source_rows = b.mem.alloc_indices(&[0, 1, 2]);
            op.dest_rows = b.mem.alloc_indices(&[3, 4, 3]);
        },
    ));
    cases.push(refusal(
        "writes_a_row_another_sequence_reads",
        "Aliasing: dest_rows over source_rows",
        |e| matches!(e, Error::Aliasing { op: GROUP, a: "dest_rows", b: "source_rows", .. }),
        |op, b| {
            op.source_rows = b.mem.alloc_indices(&[0, 1, 2]);
            op.dest_rows = b.mem.alloc_indices(&[1, 3, 4]);
        },
    ));
    cases.push(refusal(
        "accepted_not_an_index_buffer",
        "Invalid: accepted's values unknown to the host",
        |e| matches!(e, Error::Invalid { op: GROUP, .. }),
        |op, b| op.accepted = b.tensor_padded(DType::I32, [3, 1, 1, 1], [0; 4], Values::AnyBits),
    ));
    cases.push(refusal(
        "accepted_per_sequence",
        "Shape: accepted has n_s entries",
        |e| matches!(e, Error::Shape { op: GROUP, arg: "accepted", .. }),
        |op, b| op.accepted = b.mem.alloc_indices(&[0, 1]),
    ));
    cases.push(refusal(
        "cache_row_length",
        "Shape: cache rows hold D·D·H_v floats",
        |e| matches!(e, Error::Shape { op: GROUP, arg: "ssm_cache", .. }),
        |op, _| {
            let [row, n_rows, ..] = op.ssm_cache.ne();
            op.ssm_cache = op.ssm_cache.view([row - D, n_rows, 1, 1], op.ssm_cache.layout.nb, 0);
        },
    ));
    cases.push(refusal(
        "cache_over_v",
        "Aliasing: the cache over the logged v",
        |e| matches!(e, Error::Aliasing { op: GROUP, a: "ssm_cache", b: "v", .. }),
        |op, _| op.v = op.ssm_cache.view(op.v.ne(), Layout::contiguous(DType::F32, op.v.ne()).nb, 0),
    ));
    cases.extend(vs_gdn_setups().into_iter().map(|s| s.vs_gdn_case()));
    cases
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grid_of_sizes_and_row_modes_is_covered() {
        assert!(covers_the_grid(&setups().iter().map(|c| (c.n_s, c.n_t, c.rows)).collect::<Vec<_>>()));
    }

    #[test]
    fn every_case_passes_on_the_cpu() {
        crate::suite::assert_cpu_passes(cases());
    }
}
