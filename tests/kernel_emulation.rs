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
#[path = "../kernels-gpu/src/binary.rs"]
mod binary;
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
#[path = "../kernels-gpu/src/gdn_conv_chain.rs"]
mod gdn_conv_chain;
#[path = "../kernels-gpu/src/gdn_layer_step.rs"]
mod gdn_layer_step;
#[path = "../kernels-gpu/src/l2_norm.rs"]
mod l2_norm;
#[path = "../kernels-gpu/src/mmvf.rs"]
mod mmvf;
#[path = "../kernels-gpu/src/ssm_conv.rs"]
mod ssm_conv;
#[path = "../kernels-gpu/src/unary.rs"]
mod unary;

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

use device::runtime::Landing;

/// The `k`-th launch's copies land at their wait when k is even, at their issue when odd: both
/// executions the GPU may take, alternating over a test's launches.
fn landing_of(k: usize) -> Landing {
    if k % 2 == 0 { Landing::AtWait } else { Landing::AtIssue }
}

/// The launch shapes the host uses for a verify of `n_t` and a log of `t_log` tokens: (label,
/// grid z, dynamic shared bytes).
fn launch_shapes(n_t: usize, t_log: usize) -> Vec<(&'static str, u32, usize)> {
    vec![("D/32 blocks", abi::GDN_HEAD_DIM as u32 / abi::BATCH_GDN_BLOCK_COLUMNS, abi::replay_verify_shared_bytes(n_t, t_log) as usize)]
}

/// The op of one suite case on launch shape `shape`, emulated, against its CPU reference: every
/// `out` element and the whole cache, byte for byte.
fn case(name: &str, mem: &HostMemory, op: &GatedDeltaNetReplayVerify, shape: usize, landing: Landing) -> Result<(), String> {
    let (n_t, t_log) = (op.q.layout.ne[2], op.replay.k.layout.ne[2]);
    let (h_v, n_s) = (op.v.layout.ne[1], op.v.layout.ne[3]);
    let emulated = Buffers::of(mem);
    let mut reference = mem.clone();
    rgdn::ops::Op::reference(op, &mut reference, &mut ExactMufu).map_err(|e| format!("{name}: reference: {e}"))?;
    let p = params(&emulated, op);
    let (label, grid_z, shared) = launch_shapes(n_t, t_log)[shape];
    // SAFETY: the parameters address the host copies of the case's validated views; the grid and
    // shared bytes are the host's for these sizes.
    device::runtime::launch([h_v as u32, n_s as u32, grid_z], [32, abi::GDN_WARPS, 1], shared, landing, &|| unsafe {
        gated_delta_net_replay_verify::gated_delta_net_replay_verify_emulated(&p)
    });
    match first_difference(&reference, &emulated, [("out", &op.out), ("cache", &op.replay.ssm_cache)]) {
        Some(d) => Err(format!("{name} ({label}, copies landing {landing:?}): {d}")),
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
            if let Err(e) = case(&c.name, &scenario.mem, op, shape, landing_of(n)) {
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
    for (k, (name, scenario)) in chosen.iter().enumerate() {
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
        let landing = landing_of(k);
        device::runtime::launch(grid, [32, abi::GDN_WARPS, 1], abi::batch_token_stage_bytes(n_t) as usize, landing, &|| unsafe {
            gated_delta_net::gated_delta_net_from_cache_batch_emulated(&p)
        });
        if let Some(d) = first_difference(&reference, &emulated, [("out", &op.out), ("states", &op.states)]) {
            failures.push(format!("{name} (copies landing {landing:?}): {d}"));
        }
    }
    let sampled = if full_tests() { "all" } else { "one in four" };
    println!(
        "KERNEL EMULATION (GATED_DELTA_NET_FROM_CACHE, batched): {}/{n} equal the CPU reference ({sampled} of the suite's {total} batched cases)",
        n - failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Sixteen bytes, 16-byte aligned: a layer-step buffer's host copy is made of them, so every
/// buffer starts as aligned as a driver allocation needs for the kernels' 16-byte copies.
#[derive(Clone, Copy)]
#[repr(C, align(16))]
struct Sixteen([u8; 16]);

/// Host copies of every buffer of a layer step's memory, 16-byte aligned, at stable addresses:
/// what the emulated launch reads and writes, and the addresses its parameters are built over
/// (`KernelAddresses`, as `DeviceMemory` gives device addresses).
struct StepBuffers(Vec<Vec<Sixteen>>);

impl StepBuffers {
    fn of(mem: &HostMemory) -> Self {
        StepBuffers(
            (0..mem.n_buffers())
                .map(|i| {
                    mem.bytes(BufferId(i)).chunks(16).map(|c| Sixteen(std::array::from_fn(|j| c.get(j).copied().unwrap_or(0)))).collect()
                })
                .collect(),
        )
    }

    /// The first `len` bytes of buffer `i`.
    fn bytes(&self, i: usize, len: usize) -> &[u8] {
        // SAFETY: the buffer holds 16 · its length ≥ `len` initialised bytes.
        unsafe { std::slice::from_raw_parts(self.0[i].as_ptr() as *const u8, len) }
    }

    /// `mem` with every buffer's bytes replaced by these copies (same ids and sizes).
    fn write_into(&self, mem: &mut HostMemory) {
        for i in 0..mem.n_buffers() {
            let len = mem.bytes(BufferId(i)).len();
            let bytes = self.bytes(i, len).to_vec();
            mem.bytes_mut(BufferId(i)).copy_from_slice(&bytes);
        }
    }

    /// These copies replaced by `mem`'s bytes.
    fn read_from(&mut self, mem: &HostMemory) {
        *self = StepBuffers::of(mem);
    }
}

impl rgdn::memory::KernelAddresses for StepBuffers {
    fn address(&self, t: &Tensor) -> u64 {
        self.0[t.buffer.0].as_ptr() as u64 + t.layout.offset as u64
    }
}

/// The kernel crate's parameter struct from the library's: the same `#[repr(C)]` declaration of
/// the same file (`abi.rs`, compiled once into rgdn and once into this test), so the same bytes.
fn kernel_params(p: &rgdn::kernels::abi::GdnLayerStepParams) -> abi::GdnLayerStepParams {
    assert_eq!(std::mem::size_of::<abi::GdnLayerStepParams>(), std::mem::size_of_val(p));
    // SAFETY: both types are `abi::GdnLayerStepParams` from one source file: `#[repr(C)]`, `Copy`,
    // no padding (`param_struct!` asserts it), fields of the same types in the same order; every
    // bit pattern of their integer and float fields is valid.
    unsafe { std::mem::transmute_copy(p) }
}

/// The layer-step entry `name`'s body on the host (the kernel file's tables).
fn layer_step_entry(name: &str) -> unsafe fn(&abi::GdnLayerStepParams) {
    let tables = [gdn_layer_step::ENTRIES_EMULATED, gdn_layer_step::SEQS_ENTRIES_EMULATED, gdn_layer_step::BATCH_ENTRIES_EMULATED];
    tables.iter().flat_map(|t| t.iter()).find(|(n, _)| *n == name).unwrap_or_else(|| panic!("no emulated entry {name}")).1
}

/// One way to launch a step: its work split (None: the host's own) and the grid's blocks.
#[derive(Clone, Copy, Debug)]
struct StepLaunch {
    split: Option<rgdn::kernels::abi::LayerStepBatchParams>,
    blocks: u32,
    landing: Landing,
}

/// The launches a case runs (their copies landing at the wait or at the issue, alternately):
/// the host's own split on a small grid, and for several sequences
/// the other kinds the knobs can force (the single-sequence entries with one or two groups a
/// warp, the batched schedule with one-sequence conv items and one-row mat-vec items, with
/// four-sequence conv items in two chunks and one group a warp), on grids of other sizes (one
/// block runs every item and group itself; more blocks wait on each other).
fn step_launches(n_s: u32) -> Vec<StepLaunch> {
    use rgdn::kernels::abi::LayerStepBatchParams as Split;
    let mut out = vec![StepLaunch { split: None, blocks: 3, landing: Landing::AtWait }];
    if n_s >= 2 {
        let seq_items = |groups_per_warp| Split { n_seqs: n_s, groups_per_warp, ..Split::default() };
        out.push(StepLaunch { split: Some(seq_items(1)), blocks: 2, landing: Landing::AtIssue });
        out.push(StepLaunch { split: Some(seq_items(2)), blocks: 5, landing: Landing::AtWait });
        let batched = |chunk_seqs: u32, tile_seqs: u32, groups_per_warp, one_row_items| Split {
            n_seqs: n_s,
            chunk_seqs,
            tile_seqs: tile_seqs.min(chunk_seqs),
            groups_per_warp,
            one_row_items,
            _pad: 0,
        };
        out.push(StepLaunch { split: Some(batched(1, 1, 2, 1)), blocks: 4, landing: Landing::AtIssue });
        out.push(StepLaunch { split: Some(batched(n_s.div_ceil(2), 4, 1, 0)), blocks: 1, landing: Landing::AtWait });
    }
    out
}

/// Whether the emulated memory equals the reference's, word by word: bit for bit, or both NaN
/// where the scenario does not compare NaN payloads (host arithmetic keeps payloads the GPU's
/// canonical NaN does not). None when equal, else the first difference.
fn memory_difference(reference: &HostMemory, emulated: &StepBuffers, exact_nan_payloads: bool) -> Option<String> {
    (0..reference.n_buffers()).find_map(|i| {
        let want = reference.bytes(BufferId(i));
        let got = emulated.bytes(i, want.len());
        let word = |b: &[u8], k: usize| u32::from_le_bytes(std::array::from_fn(|j| b.get(4 * k + j).copied().unwrap_or(0)));
        (0..want.len().div_ceil(4)).find_map(|k| {
            let (w, g) = (word(want, k), word(got, k));
            let both_nan = f32::from_bits(w).is_nan() && f32::from_bits(g).is_nan();
            (w != g && (exact_nan_payloads || !both_nan))
                .then(|| format!("buffer {i} differs at byte {}: {w:#010x} expected, {g:#010x}", 4 * k))
        })
    })
}

/// One GDN_LAYER_STEP suite case with launch `how`, emulated from the kernel's own source
/// (every op of the scenario in order: the layer step emulated, the others by their reference),
/// against the CPU reference of the whole scenario: every byte of every buffer.
fn layer_step_case(name: &str, scenario: &rgdn::suite::Scenario, how: StepLaunch) -> Result<(), String> {
    use rgdn::ops::gdn_layer_step::GdnLayerStep;
    let mut reference = scenario.mem.clone();
    for op in &scenario.ops {
        op.reference(&mut reference, &mut ExactMufu).map_err(|e| format!("{name}: reference: {e}"))?;
    }
    let mut host = scenario.mem.clone();
    let mut emulated = StepBuffers::of(&host);
    for op in &scenario.ops {
        let Some(step) = op.as_ref().downcast_ref::<GdnLayerStep>() else {
            emulated.write_into(&mut host);
            op.reference(&mut host, &mut ExactMufu).map_err(|e| format!("{name}: {}: {e}", op.name()))?;
            emulated.read_from(&host);
            continue;
        };
        // The readiness state: zero, as a fresh allocation (line 0 `done`, line 1 `arrived`, …).
        let sync = vec![0u64; abi::GRID_SYNC_BYTES / 8];
        let launch = match how.split {
            None => step.launch(&host, &emulated, sync.as_ptr() as u64),
            Some(split) => step.launch_with_split(&host, &emulated, sync.as_ptr() as u64, split),
        }
        .map_err(|e| format!("{name} ({how:?}): {e}"))?;
        let (p, body) = (kernel_params(&launch.params), layer_step_entry(launch.entry));
        // SAFETY: the parameters address the host copies of the step's views, validated and
        // proved for this split by the host (`launch`); the shared bytes are the entry's; every
        // block runs at once (a cooperative launch) over a zeroed readiness state of its own.
        device::runtime::launch_cooperative(how.blocks, abi::GDN_LAYER_STEP_BLOCK, launch.shared_bytes as usize, how.landing, &|| unsafe {
            body(&p)
        });
        drop(sync);
    }
    match memory_difference(&reference, &emulated, scenario.exact_nan_payloads) {
        Some(d) => Err(format!("{name} ({how:?}): {d}")),
        None => Ok(()),
    }
}

/// GDN_LAYER_STEP's source — the single-sequence entries, the `seqs` entries and the batched
/// schedule, their readiness flags and counters between blocks running at once — emulated,
/// equals the CPU reference on the GPU suite's own match cases (of those with at most 4 token
/// columns n_t·n_s, one in three of one sequence and every one of several; all with
/// `RGDN_FULL_TESTS=1`, about an hour of two cores;
/// `RGDN_EMULATION_CASE=<part of a name>` picks cases by name), each with
/// the host's split and, for several sequences, every other kind of split (`step_launches`).
#[test]
fn the_layer_step_kernel_source_equals_the_cpu_reference_on_the_suite_cases() {
    use rgdn::ops::gdn_layer_step::GdnLayerStep;
    use rgdn::suite::cases::gdn_layer_step::{GROUP, cases};
    let matching: Vec<_> = cases().into_iter().filter(|c| c.group == GROUP && !c.name.contains("refuse")).collect();
    let total = matching.len();
    let picked = std::env::var("RGDN_EMULATION_CASE").ok();
    let chosen: Vec<_> = match &picked {
        Some(part) => matching.into_iter().filter(|c| c.name.contains(part.as_str())).collect(),
        None => matching,
    };
    let mut built = Vec::new();
    for c in chosen {
        let Ok(Expect::Match(scenario)) = c.build() else { panic!("{}: not a match case", c.name) };
        let step = scenario.ops.iter().find_map(|op| op.as_ref().downcast_ref::<GdnLayerStep>()).expect("a layer step");
        // Token columns n_t·n_s: what an emulated launch's time grows with (≈ 4–7 s at 1–2).
        let (n_t, n_s) = (step.gdn.q.layout.ne[2], step.gdn.q.layout.ne[3]);
        built.push((c.name.clone(), scenario, n_t * n_s, n_s as u32));
    }
    let chosen: Vec<_> = if picked.is_some() || full_tests() {
        built
    } else {
        // The light cases (up to 4 token columns): one in three of one sequence, every one of
        // several (each runs every kind of split): about two minutes of this 2-core machine.
        let (one, several): (Vec<_>, Vec<_>) = built.into_iter().filter(|b| b.2 <= 4).partition(|b| b.3 == 1);
        one.into_iter().step_by(3).chain(several).collect()
    };
    let (mut failures, mut n) = (Vec::new(), 0);
    for (name, scenario, _, n_s) in chosen {
        for how in step_launches(n_s) {
            n += 1;
            let start = std::time::Instant::now();
            let result = layer_step_case(&name, &scenario, how);
            println!("{name} {how:?}: {} in {:.1} s", if result.is_ok() { "equal" } else { "DIFFERENT" }, start.elapsed().as_secs_f64());
            if let Err(e) = result {
                failures.push(e);
            }
        }
    }
    let sampled = if picked.is_some() {
        "picked by name"
    } else if full_tests() {
        "all"
    } else {
        "with n_t·n_s ≤ 4: one in three of one sequence, all of several"
    };
    println!(
        "KERNEL EMULATION (GDN_LAYER_STEP): {}/{n} launches equal the CPU reference ({sampled} of the suite's {total} cases)",
        n - failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
