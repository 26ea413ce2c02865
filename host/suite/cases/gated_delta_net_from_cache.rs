//! [gdn-from-cache] GATED_DELTA_NET_FROM_CACHE cases: GATED_DELTA_NET reading each sequence's
//! initial state straight from its ssm-cache row — n_t 1/4/8/16 against K 1 … 17, one and two
//! sequences, the row read among the rows written (slot 0's row, as in the layer, or another
//! slot's), a row not written, an unwritten slot's row of another sequence, a fresh zeroed row,
//! the slots in the cache or in a separate result tensor, padded views, special values; and
//! refusals (a row another sequence writes, misaligned overlaps, out over the cache, indices).
//!
//! Every match case has a twin in [`VS_UNFUSED`]: the fused op and the GET_ROWS +
//! GATED_DELTA_NET it replaces run from the same memory, and `out`, `states` and every byte of
//! the cache's buffer (guard bytes included) must come out identical.

use super::gated_delta_net::{BASE, Gate, GdnCase, Salt, States, TOLERANCE, big_tensor};
use crate::Error;
use crate::kernels::abi::GDN_HEAD_DIM as D;
use crate::ops::{GatedDeltaNet, GatedDeltaNetFromCache, GetRows, Op};
use crate::suite::{Builder, Case, Equivalence, Expect, Scenario};
use crate::tensor::{DType, Layout, Tensor};

pub const GROUP: &str = "GATED_DELTA_NET_FROM_CACHE";
/// The fused op against GET_ROWS + GATED_DELTA_NET on the GPU (both runs), bitwise.
pub const VS_UNFUSED: &str = "GATED_DELTA_NET_FROM_CACHE_VS_UNFUSED";

/// Which cache row sequence s reads.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Read {
    /// Slot 0's row of sequence s (kv_head + s): the layer's "read among written" case.
    Slot0,
    /// Slot `k`'s row of sequence s (k < min(n_t, K): written too).
    Slot(usize),
    /// A row of the cache no slot touches (the last row, past every slot group).
    Unwritten,
    /// Sequence s reads slot `k`'s row of sequence n_s − 1 − s, a slot the kernel does not write
    /// (k ≥ n_t).
    OtherSeqUnwrittenSlot(usize),
}

#[derive(Clone, Copy, Debug)]
struct FromCacheCase {
    gdn: GdnCase,
    read: Read,
    /// The states slots live in a result tensor of their own (the cache is only read).
    separate_states: bool,
    /// The rows read are zeroed first (a fresh cell after SCALE).
    fresh: bool,
}

impl FromCacheCase {
    fn name(&self, group: &str) -> String {
        let base = self.gdn.name();
        let inner = base[base.find('(').unwrap() + 1..base.len() - 1].replace('(', "[").replace(')', "]");
        let read = match self.read {
            Read::Slot0 => "slot0".to_string(),
            Read::Slot(k) => format!("slot{k}"),
            Read::Unwritten => "unwritten".to_string(),
            Read::OtherSeqUnwrittenSlot(k) => format!("other_seq_unwritten_slot{k}"),
        };
        format!(
            "{group}({inner},read={read}{}{})",
            if self.separate_states { ",separate_states" } else { "" },
            if self.fresh { ",fresh" } else { "" }
        )
    }

    /// The cache's cells per group, kv_head and the rows read.
    fn layout(&self) -> (usize, usize, Vec<i32>) {
        let p = self.gdn;
        let (cells, kv_head) = match p.states {
            States::Cache { cells, kv_head } => (cells, kv_head),
            States::Unfused => (p.n_s, 0), // not used by the setups: slots as if M = n_s
        };
        let rows = cells * p.k_slots + 1; // one spare row past the slot groups
        let read = (0..p.n_s)
            .map(|s| match self.read {
                Read::Slot0 => kv_head + s,
                Read::Slot(k) => k * cells + kv_head + s,
                Read::Unwritten => rows - 1,
                Read::OtherSeqUnwrittenSlot(k) => k * cells + kv_head + (p.n_s - 1 - s),
            } as i32)
            .collect();
        (cells, kv_head, read)
    }

    /// The fused op: GdnCase's q, k, v, g, beta, out; a poisoned cache of `cells·K + 1` rows with
    /// the rows read filled (uniform, salted for `Salt::State`, or zero when fresh); states as
    /// slot rows of that cache (or a separate result tensor).
    fn build(&self, b: &mut Builder) -> GatedDeltaNetFromCache {
        let p = self.gdn;
        let base = GdnCase { states: States::Unfused, ..p }.build(b);
        let (cells, kv_head, read) = self.layout();
        let row = D * D * p.h_v;
        let n_rows = cells * p.k_slots + 1;
        let cache = big_tensor(b, [row, n_rows, 1, 1], [0; 4], Some(0.5));
        // Rows read carry the state GdnCase drew (salt included), or zeros.
        for (s, &r) in read.iter().enumerate() {
            for h in 0..p.h_v {
                for col in 0..D {
                    for i in 0..D {
                        let x = if self.fresh {
                            0
                        } else {
                            b.mem.read_u32(&base.state_in, [i, col, h, s]).expect("a view of the case's own buffers")
                        };
                        b.mem.write_u32(&cache, [(h * D + col) * D + i, r as usize, 0, 0], x).expect("a view of the case's own buffers");
                    }
                }
            }
        }
        let states = if self.separate_states {
            base.states
        } else {
            cache.view([row, p.n_s, p.k_slots, 1], [4, 4 * row, 4 * row * cells, 4 * row * cells * p.k_slots], 4 * row * kv_head)
        };
        let out = if self.separate_states { base.out } else { b.output([D, p.h_v, p.n_t, p.n_s]) };
        let source_rows = b.mem.alloc_indices(&read);
        GatedDeltaNetFromCache { q: base.q, k: base.k, v: base.v, g: base.g, beta: base.beta, ssm_cache: cache, source_rows, out, states }
    }

    fn match_case(self) -> Case {
        Case::seeded(GROUP, self.name(GROUP), move |mut b| {
            let op = self.build(&mut b);
            Ok(b.finish(vec![Box::new(op)], TOLERANCE, false))
        })
    }

    fn vs_unfused_case(self) -> Case {
        Case::seeded(VS_UNFUSED, self.name(VS_UNFUSED), move |mut b| {
            let op = self.build(&mut b);
            let unfused = unfused_ops(&op, &mut b);
            let whole = |t: &Tensor, mem: &crate::memory::HostMemory| {
                let len = mem.bytes(t.buffer).len();
                Tensor::new(t.buffer, Layout::contiguous(DType::F32, [len / 4, 1, 1, 1]))
            };
            let mut compare = vec![(op.out, op.out), (op.states, op.states)];
            for t in [op.ssm_cache, op.out, op.states] {
                let w = whole(&t, &b.mem);
                compare.push((w, w));
            }
            Ok(Expect::Equivalent(Equivalence::new(b.mem, vec![Box::new(op)], unfused, compare)))
        })
    }
}

/// The unfused chain the op replaces: GET_ROWS(ssm_cache, source_rows) → ssm_state (a fresh
/// [D·D·H_v, n_s] buffer), then GATED_DELTA_NET with state_in = ssm_state as [D, D, H_v, n_s].
pub fn unfused_ops(op: &GatedDeltaNetFromCache, b: &mut Builder) -> Vec<Box<dyn Op>> {
    let [row, _, _, _] = op.ssm_cache.ne();
    let n_s = op.source_rows.ne()[0];
    let h_v = row / (D * D);
    let ssm_state = b.output([row, n_s, 1, 1]);
    let state_in = ssm_state.view([D, D, h_v, n_s], Layout::contiguous(DType::F32, [D, D, h_v, n_s]).nb, 0);
    vec![
        Box::new(GetRows { src: op.ssm_cache, rows: op.source_rows, dst: ssm_state }),
        Box::new(GatedDeltaNet { state_in, ..op.as_gated_delta_net() }),
    ]
}

/// A case the op must refuse with the error `predicate` accepts; `edit` spoils a valid op.
fn refusal(name: &str, expected: &'static str, predicate: fn(&Error) -> bool, edit: fn(&mut GatedDeltaNetFromCache, &mut Builder)) -> Case {
    let name = format!("{GROUP}(refuse:{name})");
    Case::seeded(GROUP, name, move |mut b| {
        let setup = FromCacheCase {
            gdn: GdnCase { n_t: 2, n_s: 2, k_slots: 2, states: States::Cache { cells: 2, kv_head: 0 }, ..BASE },
            read: Read::Slot0,
            separate_states: false,
            fresh: false,
        };
        let mut op = setup.build(&mut b);
        edit(&mut op, &mut b);
        let scenario = Scenario { mem: b.mem, ops: vec![Box::new(op)], tolerance: TOLERANCE, exact_nan_payloads: false };
        Ok(Expect::Refusal { scenario, predicate, expected })
    })
}

fn setups() -> Vec<FromCacheCase> {
    let cache = |cells, kv_head| States::Cache { cells, kv_head };
    let c = |gdn: GdnCase, read| FromCacheCase { gdn, read, separate_states: false, fresh: false };
    let mut out = Vec::new();
    // n_t 1/4/8/16 × K below, at and above n_t, reading slot 0's row (the layer's case).
    for (n_t, ks) in [(1, [1, 2, 17]), (4, [1, 4, 5]), (8, [3, 8, 17]), (16, [1, 16, 17])] {
        for (j, k_slots) in ks.into_iter().enumerate() {
            let n_s = if j == 1 { 2 } else { 1 };
            out.push(c(GdnCase { n_t, n_s, k_slots, states: cache(n_s + j, j % 2), h_k: 1, h_v: 2, ..BASE }, Read::Slot0));
        }
    }
    // Reading another written slot's row; a row nobody writes; an unwritten slot of the other
    // sequence (n_t = 1 writes slot 0 only).
    out.push(c(GdnCase { n_t: 4, n_s: 2, k_slots: 4, states: cache(2, 0), ..BASE }, Read::Slot(2)));
    out.push(c(GdnCase { n_t: 16, k_slots: 17, states: cache(1, 0), ..BASE }, Read::Slot(15)));
    out.push(c(GdnCase { n_t: 8, n_s: 2, k_slots: 7, states: cache(3, 1), ..BASE }, Read::Unwritten));
    out.push(c(GdnCase { n_t: 1, n_s: 2, k_slots: 3, states: cache(2, 0), ..BASE }, Read::OtherSeqUnwrittenSlot(2)));
    // K 1 … 17 over the remaining counts, n_t cycling through 1/4/8/16.
    for (i, k_slots) in [3, 6, 7, 9, 10, 11, 12, 13, 14, 15].into_iter().enumerate() {
        let n_t = [1, 4, 8, 16][i % 4];
        out.push(c(GdnCase { n_t, k_slots, states: cache(1 + i % 2, i % 2), h_k: 2, h_v: 3, ..BASE }, Read::Slot0));
    }
    // A fresh (zeroed) row, in the cache and with separate states.
    out.push(FromCacheCase { fresh: true, ..c(GdnCase { n_t: 4, k_slots: 4, states: cache(1, 0), ..BASE }, Read::Slot0) });
    out.push(FromCacheCase {
        fresh: true,
        separate_states: true,
        ..c(GdnCase { n_t: 1, k_slots: 1, states: cache(1, 0), ..BASE }, Read::Slot0)
    });
    // States in ggml's result tensor (the cache only read), grouped heads, padded views.
    out.push(FromCacheCase {
        separate_states: true,
        ..c(GdnCase { n_t: 8, n_s: 2, k_slots: 8, h_k: 2, h_v: 6, states: cache(2, 0), padded: true, ..BASE }, Read::Slot(1))
    });
    out.push(c(GdnCase { n_t: 4, k_slots: 2, h_k: 2, h_v: 6, states: cache(2, 1), padded: true, qk_view: true, ..BASE }, Read::Slot0));
    // Special values in the state read and in the gates.
    out.push(c(GdnCase { n_t: 4, k_slots: 4, salt: Salt::State, states: cache(1, 0), ..BASE }, Read::Slot0));
    out.push(c(
        GdnCase { n_t: 8, n_s: 2, k_slots: 3, gate: Gate::Specials, salt: Salt::Subnormals, states: cache(2, 0), ..BASE },
        Read::Slot0,
    ));
    out
}

pub fn cases() -> Vec<Case> {
    let setups = setups();
    let mut cases: Vec<Case> = setups.iter().map(|s| s.match_case()).collect();
    cases.push(refusal(
        "read_row_written_by_another_sequence",
        "Aliasing: states over a row another sequence reads",
        |e| matches!(e, Error::Aliasing { op: GROUP, a: "states", b: "ssm_cache", .. }),
        // Sequence 1 reads sequence 0's slot 0 row (and sequence 0 its own).
        |op, b| op.source_rows = b.mem.alloc_indices(&[0, 0]),
    ));
    cases.push(refusal(
        "read_row_misaligned_with_a_slot",
        "Aliasing: a row read one float off a written slot row",
        |e| matches!(e, Error::Aliasing { op: GROUP, a: "states", b: "ssm_cache", .. }),
        |op, _| {
            let [row, n_rows, ..] = op.ssm_cache.ne();
            op.ssm_cache = op.ssm_cache.view([row, n_rows - 1, 1, 1], op.ssm_cache.layout.nb, 4);
        },
    ));
    cases.push(refusal(
        "out_in_the_cache",
        "Aliasing: out over the cache",
        |e| matches!(e, Error::Aliasing { op: GROUP, a: "out", b: "ssm_cache", .. }),
        // The spare last row (never read, never written by the slots).
        |op, _| {
            let [row, n_rows, ..] = op.ssm_cache.ne();
            let ne = op.out.ne();
            op.out = op.ssm_cache.view(ne, Layout::contiguous(DType::F32, ne).nb, 4 * row * (n_rows - 1));
        },
    ));
    cases.push(refusal(
        "states_over_q",
        "Aliasing: states over q",
        |e| matches!(e, Error::Aliasing { op: GROUP, a: "states", b: "q", .. }),
        |op, _| op.q = op.states.view(op.q.ne(), Layout::contiguous(DType::F32, op.q.ne()).nb, 0),
    ));
    cases.push(refusal(
        "index_out_of_range",
        "IndexOutOfRange: source_rows[1] = n_rows",
        |e| matches!(e, Error::IndexOutOfRange { op: GROUP, arg: "source_rows", position: 1, .. }),
        |op, b| op.source_rows = b.mem.alloc_indices(&[0, op.ssm_cache.ne()[1] as i32]),
    ));
    cases.push(refusal(
        "negative_index",
        "IndexOutOfRange: source_rows[0] = −1",
        |e| matches!(e, Error::IndexOutOfRange { op: GROUP, arg: "source_rows", position: 0, index: -1, .. }),
        |op, b| op.source_rows = b.mem.alloc_indices(&[-1, 1]),
    ));
    cases.push(refusal(
        "source_rows_not_an_index_buffer",
        "Invalid: source_rows' values unknown to the host",
        |e| matches!(e, Error::Invalid { op: GROUP, .. }),
        |op, b| op.source_rows = b.tensor_padded(DType::I32, [2, 1, 1, 1], [0; 4], crate::suite::inputs::Values::AnyBits),
    ));
    cases.push(refusal(
        "source_rows_per_sequence",
        "Shape: source_rows has n_s entries",
        |e| matches!(e, Error::Shape { op: GROUP, arg: "source_rows", .. }),
        |op, b| op.source_rows = b.mem.alloc_indices(&[0, 1, 2]),
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
        "cache_rows_strided",
        "Stride: cache rows must be contiguous",
        |e| matches!(e, Error::Stride { op: GROUP, arg: "ssm_cache", .. }),
        // Every other float of twice-as-long rows (inside the buffer: half the rows).
        |op, _| {
            let [row, n_rows, ..] = op.ssm_cache.ne();
            let nb1 = 2 * op.ssm_cache.layout.nb[1];
            op.ssm_cache = op.ssm_cache.view([row, n_rows / 2, 1, 1], [8, nb1, nb1 * (n_rows / 2), nb1 * (n_rows / 2)], 0);
        },
    ));
    cases.extend(setups.iter().map(|s| s.vs_unfused_case()));
    cases
}

/// A random op for property tests: n_t 1 … 16, K 1 … 17, one or two sequences, a random read
/// mode that is valid for them, random salt (special values in q, k, v, β, the state read, or
/// subnormals everywhere) and gates (realistic, growing, special), fresh rows or not.
pub fn random_op(b: &mut Builder) -> GatedDeltaNetFromCache {
    use rand::Rng;
    let n_t = b.rng.random_range(1..=16);
    let k_slots = b.rng.random_range(1..=17);
    let n_s = b.rng.random_range(1..=2);
    let cells = n_s + b.rng.random_range(0..2);
    let kv_head = b.rng.random_range(0..=cells - n_s);
    let written = n_t.min(k_slots);
    let read = match b.rng.random_range(0..4) {
        0 => Read::Slot0,
        1 => Read::Slot(b.rng.random_range(0..written)),
        2 => Read::Unwritten,
        _ if k_slots > written => Read::OtherSeqUnwrittenSlot(b.rng.random_range(written..k_slots)),
        _ => Read::Slot0,
    };
    let salt = [Salt::None, Salt::Q, Salt::K, Salt::V, Salt::Beta, Salt::State, Salt::Subnormals][b.rng.random_range(0..7)];
    let gate = [Gate::Realistic, Gate::PositiveAndZero, Gate::Specials][b.rng.random_range(0..3)];
    let gdn = GdnCase { n_t, n_s, k_slots, states: States::Cache { cells, kv_head }, salt, gate, v_view: b.rng.random(), ..BASE };
    FromCacheCase { gdn, read, separate_states: b.rng.random_range(0..4) == 0, fresh: b.rng.random_range(0..4) == 0 }.build(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_match_case_has_a_twin_and_the_layer_case_is_covered() {
        let cases = cases();
        let twins = cases.iter().filter(|c| c.group == VS_UNFUSED).count();
        let matches = cases.iter().filter(|c| c.group == GROUP && !c.name.contains("refuse:")).count();
        assert_eq!(twins, matches);
        for n_t in [1, 4, 8, 16] {
            assert!(cases.iter().any(|c| c.name.contains(&format!("n_t={n_t},")) && c.name.contains("read=slot0")), "n_t {n_t}");
        }
        let ks: std::collections::BTreeSet<usize> = setups().iter().map(|s| s.gdn.k_slots).collect();
        assert_eq!(ks, (1..=17).collect(), "K 1 … 17");
    }

    #[test]
    fn every_case_passes_on_the_cpu() {
        crate::suite::assert_cpu_passes(cases());
    }
}
