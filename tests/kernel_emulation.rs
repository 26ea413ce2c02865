//! [test] The kernels' own source on the CPU: GATED_DELTA_NET_REPLAY_VERIFY's kernel file (with
//! the files it builds on) compiled for the host over a host `device` module
//! (`tests/kernel_emulation/device/`: one OS thread a GPU thread, barriers for `bar.sync` and the
//! shuffles, bounds-checked shared memory, `.rn.ftz` arithmetic and the CPU reference's MUFU
//! results), launched on the grids the host launches, and compared byte for byte with the CPU
//! reference of the op — every `out` element and the whole cache.
//!
//! What it checks that nothing else does between GPU runs: the kernel's indices, its shared
//! memory layout and bounds (unwritten shared words hold a NaN, so a read of one that reaches an
//! output shows), which lane computes and broadcasts what, the column groups a warp runs. What
//! it does not: timing, the memory model, anything another block could see. The GPU suite
//! remains the proof.

#![allow(dead_code, unused_imports, unused_variables, clippy::all)]

#[path = "../kernels-gpu/src/abi.rs"]
mod abi;
#[path = "kernel_emulation/device/mod.rs"]
mod device;
#[path = "../kernels-gpu/src/fast_math.rs"]
mod fast_math;
#[path = "../kernels-gpu/src/gated_delta_net.rs"]
mod gated_delta_net;
#[path = "../kernels-gpu/src/gated_delta_net_replay.rs"]
mod gated_delta_net_replay;
#[path = "../kernels-gpu/src/gated_delta_net_replay_verify.rs"]
mod gated_delta_net_replay_verify;

use rgdn::memory::HostMemory;
use rgdn::ops::gated_delta_net::attention_scale;
use rgdn::ops::gated_delta_net_replay_verify::GatedDeltaNetReplayVerify;
use rgdn::reference::math::ExactMufu;
use rgdn::suite::cases::gated_delta_net_replay_verify::{GROUP, cases};
use rgdn::suite::{Expect, full_tests, sample};
use rgdn::tensor::{BufferId, Tensor};

/// Host copies of every buffer, 4-byte aligned, at stable addresses: what the emulated kernel
/// reads and writes.
struct Buffers(Vec<Vec<u32>>);

impl Buffers {
    fn of(mem: &HostMemory) -> Self {
        let words = |b: &[u8]| b.chunks(4).map(|c| u32::from_le_bytes(std::array::from_fn(|i| c.get(i).copied().unwrap_or(0)))).collect();
        Buffers((0..mem.n_buffers()).map(|i| words(mem.bytes(BufferId(i)))).collect())
    }

    /// Address of element 0 of `t`.
    fn addr(&self, t: &Tensor) -> u64 {
        self.0[t.buffer.0].as_ptr() as u64 + t.layout.offset as u64
    }

    /// The bytes of `t`'s whole buffer.
    fn bytes(&self, t: &Tensor) -> Vec<u8> {
        self.0[t.buffer.0].iter().flat_map(|w| w.to_le_bytes()).collect()
    }
}

/// The first of `tensors` whose whole buffer differs between the CPU reference's memory and the
/// emulated launch's copies, with the first differing byte.
fn first_difference<const N: usize>(reference: &HostMemory, emulated: &Buffers, tensors: [(&str, &Tensor); N]) -> Option<String> {
    tensors.into_iter().find_map(|(what, t)| {
        let (want, got) = (reference.bytes(t.buffer), emulated.bytes(t));
        let first = want.iter().zip(&got).position(|(a, b)| a != b)?;
        Some(format!("{what} differs from the CPU reference first at byte {first}"))
    })
}

/// Element strides of `t` (its byte strides over 4: the views are F32 or I32).
fn strides(t: &Tensor) -> [u64; 4] {
    t.layout.nb.map(|b| b as u64 / 4)
}

fn view(b: &Buffers, t: &Tensor) -> abi::TokenViewParams {
    let s = strides(t);
    abi::TokenViewParams { addr: b.addr(t), head: s[1], token: s[2], seq: s[3] }
}

/// GATED_DELTA_NET's parameters over the host copies for the views q, k, v, g, β, `out`, the
/// initial state's address and element strides (column, head, sequence), and the slot view's
/// address, sequence and slot strides and slot count (the host's `gdn_params`).
fn gdn_params(
    b: &Buffers,
    [q, k, v, g, beta, out]: [&Tensor; 6],
    (state_in, [in_col, in_head, in_seq]): (u64, [u64; 3]),
    (states, states_seq, states_slot, n_slots): (u64, u64, u64, u32),
) -> abi::GatedDeltaNetParams {
    let [q_s, k_s, v_s, g_s, beta_s, out_s] = [q, k, v, g, beta, out].map(strides);
    abi::GatedDeltaNetParams {
        q: b.addr(q),
        q_head: q_s[1],
        q_token: q_s[2],
        q_seq: q_s[3],
        k: b.addr(k),
        k_head: k_s[1],
        k_token: k_s[2],
        k_seq: k_s[3],
        v: b.addr(v),
        v_head: v_s[1],
        v_token: v_s[2],
        v_seq: v_s[3],
        g: b.addr(g),
        g_head: g_s[1],
        g_token: g_s[2],
        g_seq: g_s[3],
        beta: b.addr(beta),
        beta_head: beta_s[1],
        beta_token: beta_s[2],
        beta_seq: beta_s[3],
        state_in,
        in_col,
        in_head,
        in_seq,
        out: b.addr(out),
        out_head: out_s[1],
        out_token: out_s[2],
        out_seq: out_s[3],
        states,
        states_seq,
        states_slot,
        n_tokens: q.layout.ne[2] as u32,
        n_key_heads: q.layout.ne[1] as u32,
        n_slots,
        scale: attention_scale(),
    }
}

/// The kernel's parameters over the host copies: the host's `params` for the op's views.
fn params(b: &Buffers, op: &GatedDeltaNetReplayVerify) -> abi::GatedDeltaNetReplayVerifyParams {
    let r = &op.replay;
    let index_stride = |t: &Tensor| strides(t)[0];
    let replay = abi::GatedDeltaNetReplayParams {
        k: view(b, &r.k),
        v: view(b, &r.v),
        g: view(b, &r.g),
        beta: view(b, &r.beta),
        cache: b.addr(&r.ssm_cache),
        cache_row: strides(&r.ssm_cache)[1],
        source_rows: b.addr(&r.source_rows),
        source_rows_stride: index_stride(&r.source_rows),
        dest_rows: b.addr(&r.dest_rows),
        dest_rows_stride: index_stride(&r.dest_rows),
        accepted: b.addr(&r.accepted),
        accepted_stride: index_stride(&r.accepted),
        n_tokens: r.k.layout.ne[2] as u32,
        n_key_heads: r.k.layout.ne[1] as u32,
    };
    // The verify's state is the replay's, in registers: `state_in` and `states` are never
    // dereferenced (no slot).
    let cache = (b.addr(&r.ssm_cache), [D as u64, (D * D) as u64, strides(&r.ssm_cache)[1]]);
    let verify = gdn_params(b, [&op.q, &op.k, &op.v, &op.g, &op.beta, &op.out], cache, (b.addr(&r.ssm_cache), 0, 0, 0));
    abi::GatedDeltaNetReplayVerifyParams { replay, verify }
}

const D: usize = abi::GDN_HEAD_DIM;

/// The launch shapes the host uses for a verify of `n_t` and a log of `t_log` tokens: (label,
/// grid z, dynamic shared bytes).
fn launch_shapes(n_t: usize, t_log: usize) -> Vec<(&'static str, u32, usize)> {
    vec![("D/32 blocks", abi::GDN_HEAD_DIM as u32 / abi::BATCH_GDN_BLOCK_COLUMNS, abi::replay_verify_shared_bytes(n_t, t_log) as usize)]
}

/// The op of one suite case on launch shape `shape`, emulated, against its CPU reference: every
/// `out` element and the whole cache, byte for byte.
fn case(name: &str, mem: &HostMemory, op: &GatedDeltaNetReplayVerify, shape: usize) -> Result<(), String> {
    let (n_t, t_log) = (op.q.layout.ne[2], op.replay.k.layout.ne[2]);
    let (h_v, n_s) = (op.v.layout.ne[1], op.v.layout.ne[3]);
    let emulated = Buffers::of(mem);
    let mut reference = mem.clone();
    rgdn::ops::Op::reference(op, &mut reference, &mut ExactMufu).map_err(|e| format!("{name}: reference: {e}"))?;
    let p = params(&emulated, op);
    let (label, grid_z, shared) = launch_shapes(n_t, t_log)[shape];
    // SAFETY: the parameters address the host copies of the case's validated views; the grid and
    // shared bytes are the host's for these sizes.
    device::runtime::launch([h_v as u32, n_s as u32, grid_z], [32, abi::GDN_WARPS, 1], shared, &|| unsafe {
        gated_delta_net_replay_verify::gated_delta_net_replay_verify_emulated(&p)
    });
    match first_difference(&reference, &emulated, [("out", &op.out), ("cache", &op.replay.ssm_cache)]) {
        Some(d) => Err(format!("{name} ({label}): {d}")),
        None => Ok(()),
    }
}

/// GATED_DELTA_NET_REPLAY_VERIFY's source, emulated, equals its CPU reference on the GPU suite's
/// own cases of the op (one in eight; all with `RGDN_FULL_TESTS=1`), on every launch
/// shape the host uses.
#[test]
fn the_replay_verify_kernel_source_equals_the_cpu_reference_on_the_suite_cases() {
    let matching: Vec<_> = cases().into_iter().filter(|c| c.group == GROUP && !c.name.contains("refuse")).collect();
    let total = matching.len();
    let (mut failures, mut n) = (Vec::new(), 0);
    // One case in eight (a few seconds each), all with `RGDN_FULL_TESTS=1`.
    let chosen = if full_tests() { matching } else { sample(matching, 8) };
    for c in chosen {
        let Ok(Expect::Match(scenario)) = c.build() else { panic!("{}: not a match case", c.name) };
        let op = scenario.ops[0].as_ref().downcast_ref::<GatedDeltaNetReplayVerify>().expect("the case's op");
        for shape in 0..launch_shapes(op.q.layout.ne[2], op.replay.k.layout.ne[2]).len() {
            n += 1;
            if let Err(e) = case(&c.name, &scenario.mem, op, shape) {
                failures.push(e);
            }
        }
    }
    let sampled = if full_tests() { "all" } else { "one in eight" };
    println!(
        "KERNEL EMULATION (GATED_DELTA_NET_REPLAY_VERIFY): {}/{n} equal the CPU reference ({sampled} of the suite's {total} cases)",
        n - failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The batched GATED_DELTA_NET_FROM_CACHE (`gated_delta_net_from_cache_batch_f32_d128`: the
/// batched layer step's staging and token loop, `group_recurrence`, with the state slots) from
/// its own source against the CPU reference, on the GPU suite's cases of the op that the host
/// launches it for (n_s ≥ 2, T ≤ 16; one in four, all with `RGDN_FULL_TESTS=1`): `out` and every
/// state slot, byte for byte.
#[test]
fn the_batched_from_cache_kernel_source_equals_the_cpu_reference_on_the_suite_cases() {
    use rgdn::ops::gated_delta_net::GatedDeltaNetFromCache;
    use rgdn::suite::cases::gated_delta_net_from_cache as from_cache;
    let batched = |op: &GatedDeltaNetFromCache| op.q.layout.ne[3] >= 2 && op.q.layout.ne[2] <= abi::BATCH_GDN_MAX_TOKENS;
    let mut chosen = Vec::new();
    for c in from_cache::cases().into_iter().filter(|c| c.group == from_cache::GROUP && !c.name.contains("refuse")) {
        let Ok(Expect::Match(scenario)) = c.build() else { continue };
        if scenario.ops[0].as_ref().downcast_ref::<GatedDeltaNetFromCache>().is_some_and(|op| batched(op)) {
            chosen.push((c.name.clone(), scenario));
        }
    }
    let total = chosen.len();
    let chosen: Vec<_> = if full_tests() { chosen } else { chosen.into_iter().step_by(4).collect() };
    let (mut failures, n) = (Vec::new(), chosen.len());
    for (name, scenario) in &chosen {
        let op = scenario.ops[0].as_ref().downcast_ref::<GatedDeltaNetFromCache>().expect("the case's op");
        let emulated = Buffers::of(&scenario.mem);
        let mut reference = scenario.mem.clone();
        if let Err(e) = rgdn::ops::Op::reference(op, &mut reference, &mut ExactMufu) {
            failures.push(format!("{name}: reference: {e}"));
            continue;
        }
        let st = strides(&op.states);
        let gdn = gdn_params(
            &emulated,
            [&op.q, &op.k, &op.v, &op.g, &op.beta, &op.out],
            (emulated.addr(&op.ssm_cache), [D as u64, (D * D) as u64, strides(&op.ssm_cache)[1]]),
            (emulated.addr(&op.states), st[1], st[2], op.states.layout.ne[2] as u32),
        );
        let p = abi::GatedDeltaNetFromCacheParams {
            gdn,
            source_rows: emulated.addr(&op.source_rows),
            source_rows_stride: strides(&op.source_rows)[0],
        };
        let (h_v, n_t, n_s) = (op.v.layout.ne[1], op.q.layout.ne[2], op.q.layout.ne[3]);
        let grid = [h_v as u32, n_s as u32, D as u32 / abi::BATCH_GDN_BLOCK_COLUMNS];
        // SAFETY: the parameters address the host copies of the case's validated views; the grid
        // and shared bytes are the host's (`from_cache_launch`) for these sizes.
        device::runtime::launch(grid, [32, abi::GDN_WARPS, 1], abi::batch_token_stage_bytes(n_t) as usize, &|| unsafe {
            gated_delta_net::gated_delta_net_from_cache_batch_emulated(&p)
        });
        if let Some(d) = first_difference(&reference, &emulated, [("out", &op.out), ("states", &op.states)]) {
            failures.push(format!("{name}: {d}"));
        }
    }
    let sampled = if full_tests() { "all" } else { "one in four" };
    println!(
        "KERNEL EMULATION (GATED_DELTA_NET_FROM_CACHE, batched): {}/{n} equal the CPU reference ({sampled} of the suite's {total} batched cases)",
        n - failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
