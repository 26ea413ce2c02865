//! [test] The kernels' own source on the CPU: GDN_LAYER_STEP's, GATED_DELTA_NET_REPLAY_VERIFY's and
//! the batched GATED_DELTA_NET_FROM_CACHE's kernel files (with the files they build on) compiled
//! for the host over a host `device` module (`tests/kernel_emulation/device/`: one OS thread a
//! GPU thread, barriers for `bar.sync` and the shuffles, bounds-checked shared memory, `cp.async`
//! landing at its issue or at its wait, the layer step's blocks all at once with its readiness
//! flags and counters as host atomics, `.rn.ftz` arithmetic and the CPU reference's MUFU
//! results), launched as the ops prepare them (their `launch`: entry, shape, parameters over the
//! host copies' addresses), and compared byte for byte with the CPU reference — every byte of
//! every buffer.
//!
//! What it checks that nothing else does between GPU runs: the kernels' indices, shared memory
//! layouts and bounds (unwritten shared words hold a NaN, so a read of one that reaches an output
//! shows), which lane computes and broadcasts what, the column groups a warp runs, the layer
//! step's item schedules, its waits (a consumer that skips one reads what its producer has not
//! written yet, when the producer runs late) and its staging copies' waits, and the host's
//! parameter blocks. What it does not: timing, the weak corners of the memory model (`.nc` or
//! weak loads that a GPU may serve stale), anything that depends on how the hardware schedules.
//! The GPU suite remains the proof.

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
#[path = "../kernels-gpu/src/gdn_layer_step_replay.rs"]
mod gdn_layer_step_replay;
#[path = "../kernels-gpu/src/l2_norm.rs"]
mod l2_norm;
#[path = "../kernels-gpu/src/mmvf.rs"]
mod mmvf;
#[path = "../kernels-gpu/src/ssm_conv.rs"]
mod ssm_conv;
#[path = "../kernels-gpu/src/unary.rs"]
mod unary;

use device::runtime::{Landing, Pace};
use rgdn::memory::HostMemory;
use rgdn::ops::Op;
use rgdn::reference::math::ExactMufu;
use rgdn::suite::{Expect, Scenario, full_tests, sample};
use rgdn::tensor::{BufferId, Tensor};

/// The `k`-th launch's copies land at their wait when k is even, at their issue when odd: both
/// executions the GPU may take, alternating over a test's launches.
fn landing_of(k: usize) -> Landing {
    if k % 2 == 0 { Landing::AtWait } else { Landing::AtIssue }
}

/// A kernel parameter struct of this test's `abi` from the library's: the same `#[repr(C)]`
/// declaration of the same file (`abi.rs`, compiled once into rgdn and once into this test).
fn same_abi<Library: Copy, Kernel: Copy>(p: &Library) -> Kernel {
    assert_eq!(std::mem::size_of::<Kernel>(), std::mem::size_of::<Library>());
    // SAFETY: both are the same declaration of abi.rs (the callers name the pairs): `#[repr(C)]`,
    // `Copy`, no padding (`param_struct!` asserts it), fields of the same types in the same order;
    // every bit pattern of their integer and float fields is valid.
    unsafe { std::mem::transmute_copy(p) }
}

/// The views both fused layer steps share, by name: their conv chain's (`.chain`) and their
/// pair-gate's (`.gate`), as `(name, accessor)` for the op type `$op`.
macro_rules! chain_and_gate_fields {
    ($op:ty) => {{
        type F = (&'static str, fn(&mut $op) -> &mut Tensor);
        let fields: [F; 16] = [
            ("conv_cache", |o| &mut o.chain.conv_cache),
            ("source_row", |o| &mut o.chain.source_row),
            ("qkv", |o| &mut o.chain.qkv),
            ("conv_weight", |o| &mut o.chain.weight),
            ("conv_out", |o| &mut o.chain.conv_out),
            ("q_norm", |o| &mut o.chain.q_norm),
            ("k_norm", |o| &mut o.chain.k_norm),
            ("alpha_weight", |o| &mut o.gate.pair.first.weight),
            ("beta_weight", |o| &mut o.gate.pair.second.weight),
            ("cur", |o| &mut o.gate.pair.first.input),
            ("alpha", |o| &mut o.gate.pair.first.dst),
            ("beta_raw", |o| &mut o.gate.pair.second.dst),
            ("dt_bias", |o| &mut o.gate.dt_bias),
            ("ssm_a", |o| &mut o.gate.ssm_a),
            ("beta", |o| &mut o.gate.beta),
            ("gate", |o| &mut o.gate.gate),
        ];
        fields
    }};
}

/// Runs a plain launch an op prepared (`PlainLaunch`: entry, shape, parameters) over the host
/// copies, from the entry's host twin `body`, its copies landing as `landing` says.
fn run_plain<Library: Copy, Kernel: Copy + Sync>(
    launch: rgdn::ops::PlainLaunch<Library>,
    entry: &str,
    landing: Landing,
    body: unsafe fn(&Kernel),
) {
    assert_eq!(launch.entry, entry, "the op launches another entry than the one emulated");
    let (p, d): (Kernel, _) = (same_abi(&launch.params), launch.dims);
    // SAFETY: the parameters address the host copies of the op's views, validated by the op
    // (`launch`); the grid, block and shared bytes are the ones it launches, and `body` is the
    // twin of `entry` (asserted above).
    device::runtime::launch(
        [d.grid.0, d.grid.1, d.grid.2],
        [d.block.0, d.block.1, d.block.2],
        d.shared_bytes as usize,
        landing,
        &|| unsafe { body(&p) },
    );
}

/// Runs `scenario`'s ops in order from copies of its memory — `emulate` runs the ops the test
/// emulates (Some: it ran the op on the copies, over the host memory it was validated on), the
/// others run their CPU reference — and compares every byte of every buffer with the CPU
/// reference of the whole scenario.
fn emulated_scenario(
    name: &str,
    scenario: &Scenario,
    emulate: &dyn Fn(&(dyn Op + 'static), &HostMemory, &StepBuffers) -> Option<Result<(), String>>,
) -> Result<(), String> {
    let mut reference = scenario.mem.clone();
    for op in &scenario.ops {
        op.reference(&mut reference, &mut ExactMufu).map_err(|e| format!("{name}: reference: {e}"))?;
    }
    let mut host = scenario.mem.clone();
    let mut emulated = StepBuffers::of(&host);
    for op in &scenario.ops {
        emulated.write_into(&mut host);
        match emulate(op.as_ref(), &host, &emulated) {
            Some(ran) => ran.map_err(|e| format!("{name}: {e}"))?,
            None => {
                op.reference(&mut host, &mut ExactMufu).map_err(|e| format!("{name}: {}: {e}", op.name()))?;
                emulated.read_from(&host);
            }
        }
    }
    match memory_difference(&reference, &emulated, scenario.exact_nan_payloads) {
        Some(d) => Err(format!("{name}: {d}")),
        None => Ok(()),
    }
}

/// GATED_DELTA_NET_REPLAY_VERIFY's source, emulated, equals its CPU reference on the GPU suite's
/// own cases of the op (one in eight; all with `RGDN_FULL_TESTS=1`), on the launch the op
/// prepares with one and with two column groups a warp
/// (`GatedDeltaNetReplayVerify::launch_with_groups`: its entry, shape and parameters).
#[test]
fn the_replay_verify_kernel_source_equals_the_cpu_reference_on_the_suite_cases() {
    use rgdn::ops::gated_delta_net_replay_verify::GatedDeltaNetReplayVerify;
    use rgdn::suite::cases::gated_delta_net_replay_verify::{GROUP, cases};
    let matching: Vec<_> = cases().into_iter().filter(|c| c.group == GROUP && !c.name.contains("refuse")).collect();
    let total = matching.len();
    let (mut failures, mut n) = (Vec::new(), 0);
    // One case in eight (a few seconds each), all with `RGDN_FULL_TESTS=1`.
    let chosen = if full_tests() { matching } else { sample(matching, 8) };
    for c in chosen {
        let Ok(Expect::Match(scenario)) = c.build() else { panic!("{}: not a match case", c.name) };
        // [speed] Every column-group count a warp runs (the host's rule picks one by H_v·n_s).
        for groups in 1..=abi::REPLAY_VERIFY_MAX_WARP_GROUPS {
            let landing = landing_of(n);
            n += 1;
            let emulate = |op: &(dyn Op + 'static), host: &HostMemory, emulated: &StepBuffers| {
                let op = op.downcast_ref::<GatedDeltaNetReplayVerify>()?;
                let body = gated_delta_net_replay_verify::gated_delta_net_replay_verify_emulated;
                let launch = op.launch_with_groups(host, emulated, Some(groups));
                Some(launch.map_err(|e| e.to_string()).map(|l| run_plain(l, abi::GATED_DELTA_NET_REPLAY_VERIFY_ENTRY, landing, body)))
            };
            let name = format!("{} ({groups} groups a warp, copies landing {landing:?})", c.name);
            if let Err(e) = emulated_scenario(&name, &scenario, &emulate) {
                failures.push(e);
            }
        }
    }
    let sampled = if full_tests() { "all" } else { "one in eight" };
    conclude("GATED_DELTA_NET_REPLAY_VERIFY", "equal the CPU reference", n, &format!("{sampled} of the suite's {total} cases"), failures);
}

/// \[overlap\] Bytes of the emulated buffers a test watches or poisons: (address, length).
fn regions_of(views: &[Tensor], buffers: &StepBuffers) -> Vec<(usize, usize)> {
    use rgdn::memory::KernelAddresses;
    views
        .iter()
        .filter_map(|t| {
            let bytes = t.layout.byte_range()?;
            let start = buffers.address(t) as usize - t.layout.offset;
            Some((start + bytes.start, bytes.end - bytes.start))
        })
        .collect()
}

/// \[overlap\] GATED_DELTA_NET_REPLAY_VERIFY's programmatically launched entry, emulated, equals
/// the CPU reference on the GPU suite's cases of the op (one in eight; all with
/// `RGDN_FULL_TESTS=1`), launched as the op prepares it (`launch_overlapped`), and touches
/// before its wait only what the op declares (`Op::overlap_forms`, what the overlap pass proves
/// no neighbouring grid touches): every block starts with the op's other inputs (the verify's
/// q, k, v, g, β) poisoned — NaNs, restored only when the block reaches its wait — and its other
/// outputs (`out`) are checked unchanged at the wait. A read of a verify input before the wait
/// changes the results; a write of `out` fails at once.
#[test]
fn the_replay_verify_overlap_entry_touches_only_its_declared_views_before_its_wait() {
    use rgdn::ops::gated_delta_net_replay_verify::GatedDeltaNetReplayVerify;
    use rgdn::ops::overlap::Overlap;
    use rgdn::suite::cases::gated_delta_net_replay_verify::{GROUP, cases};
    use std::sync::{Arc, Mutex};
    let matching: Vec<_> = cases().into_iter().filter(|c| c.group == GROUP && !c.name.contains("refuse")).collect();
    let total = matching.len();
    let chosen = if full_tests() { matching } else { sample(matching, 8) };
    let (mut failures, mut n, poisoned_views) = (Vec::new(), 0, std::cell::Cell::new(0));
    let early = Overlap { lets_next_start: false, starts_early: true };
    for c in chosen {
        let Ok(Expect::Match(scenario)) = c.build() else { panic!("{}: not a match case", c.name) };
        let landing = landing_of(n);
        n += 1;
        let emulate = |op: &(dyn Op + 'static), host: &HostMemory, emulated: &StepBuffers| {
            let op = op.downcast_ref::<GatedDeltaNetReplayVerify>()?;
            let declared = op.overlap_forms().early.expect("the op can start early");
            let touched: Vec<rgdn::graph::Access> =
                declared.reads.iter().chain(&declared.writes).filter_map(rgdn::graph::Access::of).collect();
            // Views not declared, and sharing no byte with a declared one (a suite case may
            // alias a verify input with the log: both only read).
            let undeclared = |views: Vec<Tensor>| -> Vec<Tensor> {
                views.into_iter().filter(|t| rgdn::graph::Access::of(t).is_some_and(|a| !touched.iter().any(|d| d.overlaps(&a)))).collect()
            };
            let (poison, watch) = (regions_of(&undeclared(op.inputs()), emulated), regions_of(&undeclared(op.outputs()), emulated));
            poisoned_views.set(poisoned_views.get() + poison.len());
            let launch = match op.launch_overlapped(host, emulated, early) {
                Ok(l) => l,
                Err(e) => return Some(Err(e.to_string())),
            };
            assert_eq!(launch.entry, abi::GATED_DELTA_NET_REPLAY_VERIFY_OVERLAP_ENTRY);
            let saved: Vec<Vec<u8>> = poison
                .iter()
                .map(|&(at, len)| {
                    // SAFETY: `len` bytes of a host buffer the launch addresses; no launch runs.
                    unsafe { std::slice::from_raw_parts(at as *const u8, len) }.to_vec()
                })
                .collect();
            // The watched bytes as each block found them.
            let at_start: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
            let read = |regions: &[(usize, usize)]| -> Vec<Vec<u8>> {
                regions
                    .iter()
                    .map(|&(at, len)| {
                        // SAFETY: as above; the block's threads are held at a barrier.
                        unsafe { std::slice::from_raw_parts(at as *const u8, len) }.to_vec()
                    })
                    .collect()
            };
            {
                let (watch, at_start, poison, saved) = (watch.clone(), at_start.clone(), poison.clone(), saved.clone());
                device::grid::set_prerequisite_wait(Some(Box::new(move || {
                    let now = read(&watch);
                    assert!(*at_start.lock().unwrap() == now, "a block wrote a view it does not declare before its wait (`out`)");
                    for (&(at, len), bytes) in poison.iter().zip(&saved) {
                        // SAFETY: as above: the previous grids' bytes back for the block's
                        // threads after the wait.
                        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), at as *mut u8, len) };
                    }
                })));
            }
            let (p, d): (abi::GatedDeltaNetReplayVerifyParams, _) = (same_abi(&launch.params), launch.dims);
            let body = gated_delta_net_replay_verify::gated_delta_net_replay_verify_overlap_emulated;
            let block_start = || {
                use device::thread::{thread_idx_x, thread_idx_y, thread_idx_z};
                if thread_idx_x() == 0 && thread_idx_y() == 0 && thread_idx_z() == 0 {
                    for &(at, len) in &poison {
                        // SAFETY: as above: the block's inputs not yet written, as far as its
                        // pre-wait part may know (a quiet NaN in every float).
                        unsafe { std::slice::from_raw_parts_mut(at as *mut u8, len) }
                            .chunks_mut(4)
                            .for_each(|f| f.copy_from_slice(&0x7fc0_0bad_u32.to_le_bytes()[..f.len()]));
                    }
                    *at_start.lock().unwrap() = read(&watch);
                }
                // SAFETY: every thread of the block.
                unsafe { device::thread::sync_threads() };
                // SAFETY: the parameters address the host copies of the op's views, validated
                // by the op; the grid, block and shared bytes are the ones it launches.
                unsafe { body(&p) };
            };
            device::runtime::launch(
                [d.grid.0, d.grid.1, d.grid.2],
                [d.block.0, d.block.1, d.block.2],
                d.shared_bytes as usize,
                landing,
                &block_start,
            );
            device::grid::set_prerequisite_wait(None);
            Some(Ok(()))
        };
        let name = format!("{} (overlap entry, copies landing {landing:?})", c.name);
        if let Err(e) = emulated_scenario(&name, &scenario, &emulate) {
            failures.push(e);
        }
    }
    let poisoned_views = poisoned_views.get();
    assert!(poisoned_views >= n, "every case poisons the verify's inputs ({poisoned_views} views over {n} cases)");
    let sampled = if full_tests() { "all" } else { "one in eight" };
    conclude(
        "GATED_DELTA_NET_REPLAY_VERIFY overlap entry",
        "equal the CPU reference",
        n,
        &format!("{sampled} of the suite's {total} cases"),
        failures,
    );
}

/// GDN_CONV_CHAIN's entries from their own source — the chain, and the replay layers' commit
/// entries with the window commit in front (token slots unrolled to 4, 8 or 16) — against the CPU
/// reference, on every GPU suite case of the op,
/// launched as the op prepares them (`GdnConvChain::launch`): every byte of the memory.
#[test]
fn the_conv_chain_kernel_source_equals_the_cpu_reference_on_the_suite_cases() {
    use rgdn::ops::gdn_conv_chain::{ConvChainParams, GdnConvChain};
    use rgdn::suite::cases::gdn_conv_chain::{GROUP, cases};
    let matching: Vec<_> = cases().into_iter().filter(|c| c.group == GROUP && !c.name.contains("refuse")).collect();
    let total = matching.len();
    // Every case: a plain launch of one block a (tile, sequence) takes milliseconds here.
    let (mut failures, mut n, mut commits, mut overlapped) = (Vec::new(), 0, 0, 0);
    for c in matching {
        let Ok(Expect::Match(scenario)) = c.build() else { continue };
        let landing = landing_of(n);
        n += 1;
        // [overlap] Every other commit case launches the commit entries' twins that let the
        // next grid start early (`launch_overlapped`: the same body after the hint).
        let lets_next_start = commits % 2 == 1;
        let overlap = rgdn::ops::overlap::Overlap { lets_next_start, starts_early: false };
        let emulate = |op: &(dyn Op + 'static), host: &HostMemory, emulated: &StepBuffers| {
            let op = op.downcast_ref::<GdnConvChain>()?;
            let launch = if op.commit.is_some() { op.launch_overlapped(host, emulated, overlap) } else { op.launch(host, emulated) };
            let launch = match launch {
                Ok(l) => l,
                Err(e) => return Some(Err(e.to_string())),
            };
            let rgdn::ops::PlainLaunch { entry, dims, params } = launch;
            Some(match params {
                ConvChainParams::Chain(params) => {
                    let Some(&(_, body)) = gdn_conv_chain::ENTRIES_EMULATED.iter().find(|(name, _)| *name == entry) else {
                        return Some(Err(format!("{entry}: no emulated body")));
                    };
                    Ok(run_plain(rgdn::ops::PlainLaunch { entry, dims, params }, entry, landing, body))
                }
                ConvChainParams::Commit(params) => {
                    let Some(&(_, body)) = gdn_conv_chain::COMMIT_ENTRIES_EMULATED.iter().find(|(name, _)| *name == entry) else {
                        return Some(Err(format!("{entry}: no emulated body")));
                    };
                    Ok(run_plain(rgdn::ops::PlainLaunch { entry, dims, params }, entry, landing, body))
                }
            })
        };
        if scenario.ops.iter().any(|op| op.downcast_ref::<GdnConvChain>().is_some_and(|op| op.commit.is_some())) {
            commits += 1;
            overlapped += usize::from(lets_next_start);
        }
        if let Err(e) = emulated_scenario(&format!("{} (copies landing {landing:?})", c.name), &scenario, &emulate) {
            failures.push(e);
        }
    }
    conclude(
        "GDN_CONV_CHAIN",
        "equal the CPU reference",
        n,
        &format!(
            "all of the suite's {total} cases, {commits} with the window commit, {overlapped} of them on the entries that let the next grid start"
        ),
        failures,
    );
}

/// \[speed\] The tiled MUL_MAT_VEC_PAIR(_GATE) (`mul_mat_vec_pair_tiles_*`: GDN_LAYER_STEP's
/// mat-vec items as a grid of their own, `abi::PAIR_TILES_BLOCK` threads a block, and the wide
/// `mul_mat_vec_pair_tiles_wide_*`, `abi::PAIR_TILES_WIDE_BLOCK`) from their own source against
/// the CPU reference, each sampled GPU suite case of both ops in both forms, whatever their
/// column count (the host launches tiles from `PAIR_TILES_MIN_COLS` columns, wide ones where the
/// grid fits one round of them; a tile clips its last heads and columns): the launch the op
/// prepares for tiles (`tiles_launch`), every byte of the memory.
#[test]
fn the_pair_tiles_kernel_source_equals_the_cpu_reference_on_the_suite_cases() {
    use rgdn::ops::{MulMatVecPair, MulMatVecPairGate};
    use rgdn::suite::cases::{mmvf_pair, mmvf_pair_gate};
    let matching: Vec<_> = mmvf_pair::cases()
        .into_iter()
        .chain(mmvf_pair_gate::cases())
        .filter(|c| (c.group == mmvf_pair::GROUP || c.group == mmvf_pair_gate::GROUP) && !c.name.contains("refuse"))
        .collect();
    let total = matching.len();
    // One case in eight (a 4096-wide product's tiles take seconds here), all
    // with `RGDN_FULL_TESTS=1`.
    let chosen: Vec<_> = if full_tests() { matching } else { sample(matching, 8) }
        .into_iter()
        .filter_map(|c| match c.build() {
            Ok(Expect::Match(scenario)) => Some((c.name.clone(), scenario)),
            _ => None,
        })
        .collect();
    let (mut failures, mut n) = (Vec::new(), 0);
    for (k, (name, scenario)) in chosen.iter().enumerate() {
        let landing = landing_of(k);
        for wide in [false, true] {
            let emulate = |op: &(dyn Op + 'static), host: &HostMemory, emulated: &StepBuffers| {
                let launch = match (op.downcast_ref::<MulMatVecPairGate>(), op.downcast_ref::<MulMatVecPair>()) {
                    (Some(gate), _) => gate.tiles_launch(host, emulated, wide),
                    (None, Some(pair)) => pair.tiles_launch(host, emulated, wide),
                    (None, None) => return None,
                };
                let launch = match launch {
                    Ok(l) => l,
                    Err(e) => return Some(Err(e.to_string())),
                };
                let Some(&(entry, body, threads)) = mmvf::PAIR_TILES_ENTRIES_EMULATED.iter().find(|(name, ..)| *name == launch.entry)
                else {
                    return Some(Err(format!("{}: no emulated body", launch.entry)));
                };
                if launch.dims.block != (threads, 1, 1) {
                    return Some(Err(format!(
                        "{}: launched with {:?} threads, its body is for {threads}",
                        launch.entry, launch.dims.block
                    )));
                }
                Some(Ok(run_plain(launch, entry, landing, body)))
            };
            n += 1;
            let form = if wide { "wide" } else { "128 threads" };
            if let Err(e) = emulated_scenario(&format!("{name} ({form}, copies landing {landing:?})"), scenario, &emulate) {
                failures.push(e);
            }
        }
    }
    let sampled = if full_tests() { "all" } else { "one in eight" };
    conclude(
        "MUL_MAT_VEC_PAIR(_GATE) as tiles",
        "equal the CPU reference",
        n,
        &format!("{sampled} of the suite's {total} cases"),
        failures,
    );
}

/// The batched GATED_DELTA_NET_FROM_CACHE (`gated_delta_net_from_cache_batch_f32_d128`: the
/// batched layer step's staging and token loop, `group_recurrence`, with the state slots) from
/// its own source against the CPU reference, on the GPU suite's cases of the op that the host
/// launches it for (`GatedDeltaNetFromCache::launch` names that entry: n_s ≥ 2, T ≤ 16; one in
/// four, all with `RGDN_FULL_TESTS=1`): every byte of the memory.
#[test]
fn the_batched_from_cache_kernel_source_equals_the_cpu_reference_on_the_suite_cases() {
    use rgdn::kernels::abi::GATED_DELTA_NET_FROM_CACHE_BATCH_ENTRY as BATCH;
    use rgdn::ops::gated_delta_net::GatedDeltaNetFromCache;
    use rgdn::suite::cases::gated_delta_net_from_cache as from_cache;
    let launched = |scenario: &Scenario| {
        let op = scenario.ops[0].downcast_ref::<GatedDeltaNetFromCache>()?;
        op.launch(&scenario.mem, &StepBuffers::of(&scenario.mem)).ok().map(|l| l.entry)
    };
    let mut chosen = Vec::new();
    for c in from_cache::cases().into_iter().filter(|c| c.group == from_cache::GROUP && !c.name.contains("refuse")) {
        let Ok(Expect::Match(scenario)) = c.build() else { continue };
        if scenario.ops.len() == 1 && launched(&scenario) == Some(BATCH) {
            chosen.push((c.name.clone(), scenario));
        }
    }
    let total = chosen.len();
    let chosen: Vec<_> = if full_tests() { chosen } else { chosen.into_iter().step_by(4).collect() };
    let (mut failures, n) = (Vec::new(), chosen.len());
    for (k, (name, scenario)) in chosen.iter().enumerate() {
        let landing = landing_of(k);
        let emulate = |op: &(dyn Op + 'static), host: &HostMemory, emulated: &StepBuffers| {
            let op = op.downcast_ref::<GatedDeltaNetFromCache>()?;
            let body = gated_delta_net::gated_delta_net_from_cache_batch_emulated;
            Some(op.launch(host, emulated).map_err(|e| e.to_string()).map(|l| run_plain(l, BATCH, landing, body)))
        };
        if let Err(e) = emulated_scenario(&format!("{name} (copies landing {landing:?})"), scenario, &emulate) {
            failures.push(e);
        }
    }
    let sampled = if full_tests() { "all" } else { "one in four" };
    conclude(
        "GATED_DELTA_NET_FROM_CACHE, batched",
        "equal the CPU reference",
        n,
        &format!("{sampled} of the suite's {total} batched cases"),
        failures,
    );
}

/// A test's last lines: how many of its `n` launches (`what`) equal the CPU reference, out of
/// which cases (`of`), then every failure.
fn conclude(kernel: &str, what: &str, n: usize, of: &str, failures: Vec<String>) {
    println!("KERNEL EMULATION ({kernel}): {}/{n} {what} ({of})", n - failures.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Sixteen bytes, 16-byte aligned: a layer-step buffer's host copy is made of them, so every
/// buffer starts as aligned as a driver allocation needs for the kernels' 16-byte copies.
#[derive(Clone, Copy)]
#[repr(C, align(16))]
struct Sixteen([u8; 16]);

/// Host copies of every buffer of a scenario's memory, 16-byte aligned, at stable addresses: what
/// an emulated launch reads and writes, through the addresses its parameters are built over
/// (`KernelAddresses`, as `DeviceMemory` gives device addresses).
struct StepBuffers {
    buffers: Vec<Vec<Sixteen>>,
    /// Each buffer's start, taken mutably once: the kernels write through these addresses.
    starts: Vec<*mut Sixteen>,
}

// SAFETY: the raw starts point into `buffers`, which the struct owns; the emulated threads write
// through them only while a launch runs, and nothing reads the buffers during a launch.
unsafe impl Sync for StepBuffers {}

impl StepBuffers {
    fn of(mem: &HostMemory) -> Self {
        let mut buffers: Vec<Vec<Sixteen>> = (0..mem.n_buffers())
            .map(|i| mem.bytes(BufferId(i)).chunks(16).map(|c| Sixteen(std::array::from_fn(|j| c.get(j).copied().unwrap_or(0)))).collect())
            .collect();
        let starts = buffers.iter_mut().map(|b| b.as_mut_ptr()).collect();
        StepBuffers { buffers, starts }
    }

    /// The first `len` bytes of buffer `i` (between launches).
    fn bytes(&self, i: usize, len: usize) -> &[u8] {
        assert!(len <= 16 * self.buffers[i].len());
        // SAFETY: the buffer holds 16 · its length ≥ `len` initialised bytes, written through
        // `starts[i]`, and no launch runs while the slice lives.
        unsafe { std::slice::from_raw_parts(self.starts[i] as *const u8, len) }
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
        self.starts[t.buffer.0] as u64 + t.layout.offset as u64
    }
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
    pace: Pace,
}

/// The launches a case runs (their copies landing at the wait or at the issue, alternately; on
/// grids of several blocks mostly with block 0 held until the others wait, so that a consumer
/// that skips a wait reads its producer's bytes before they are written):
/// the host's own split on a small grid, and for several sequences
/// the other kinds the knobs can force (the single-sequence entries with one or two groups a
/// warp, the batched schedule with one-sequence conv items and one-row mat-vec items, with
/// four-sequence conv items in two chunks and one group a warp), on grids of other sizes (one
/// block runs every item and group itself; more blocks wait on each other).
fn step_launches(n_s: u32) -> Vec<StepLaunch> {
    use rgdn::kernels::abi::LayerStepBatchParams as Split;
    let mut out = vec![StepLaunch { split: None, blocks: 3, landing: Landing::AtWait, pace: Pace::BlockZeroLast }];
    if n_s >= 2 {
        let seq_items = |groups_per_warp| Split { n_seqs: n_s, groups_per_warp, ..Split::default() };
        out.push(StepLaunch { split: Some(seq_items(1)), blocks: 2, landing: Landing::AtIssue, pace: Pace::Free });
        out.push(StepLaunch { split: Some(seq_items(2)), blocks: 5, landing: Landing::AtWait, pace: Pace::BlockZeroLast });
        let batched = |chunk_seqs: u32, tile_seqs: u32, groups_per_warp, one_row_items| Split {
            n_seqs: n_s,
            chunk_seqs,
            tile_seqs: tile_seqs.min(chunk_seqs),
            groups_per_warp,
            one_row_items,
            _pad: 0,
        };
        out.push(StepLaunch { split: Some(batched(1, 1, 2, 1)), blocks: 4, landing: Landing::AtIssue, pace: Pace::BlockZeroLast });
        out.push(StepLaunch { split: Some(batched(n_s.div_ceil(2), 4, 1, 0)), blocks: 1, landing: Landing::AtWait, pace: Pace::Free });
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
/// (the layer step emulated, the scenario's other ops by their reference), against the CPU
/// reference of the whole scenario: every byte of every buffer.
fn layer_step_case(name: &str, scenario: &Scenario, how: StepLaunch) -> Result<(), String> {
    use rgdn::ops::gdn_layer_step::GdnLayerStep;
    let emulate = |op: &(dyn Op + 'static), host: &HostMemory, emulated: &StepBuffers| {
        let step = op.downcast_ref::<GdnLayerStep>()?;
        // The readiness state: zero, as a fresh allocation (line 0 `done`, line 1 `arrived`, …).
        let mut sync = vec![0u64; abi::GRID_SYNC_BYTES / 8];
        let state = sync.as_mut_ptr() as u64;
        let launch = match how.split {
            None => step.launch(host, emulated, state),
            Some(split) => step.launch_with_split(host, emulated, state, split),
        };
        Some(launch.map_err(|e| e.to_string()).map(|launch| {
            let (p, body): (abi::GdnLayerStepParams, _) = (same_abi(&launch.params), layer_step_entry(launch.entry));
            // SAFETY: the parameters address the host copies of the step's views, validated and
            // proved for this split by the host (`launch`); the shared bytes are the entry's;
            // every block runs at once (a cooperative launch) over a zeroed readiness state of
            // its own, which outlives the launch.
            device::runtime::launch_cooperative(
                how.blocks,
                abi::GDN_LAYER_STEP_BLOCK,
                launch.shared_bytes as usize,
                how.landing,
                how.pace,
                &|| unsafe { body(&p) },
            );
        }))
    };
    emulated_scenario(&format!("{name} ({how:?})"), scenario, &emulate)
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
    conclude("GDN_LAYER_STEP", "launches equal the CPU reference", n, &format!("{sampled} of the suite's {total} cases"), failures);
}

/// One scenario holding a GDN_LAYER_STEP_REPLAY, the step emulated from the kernel's own source
/// on `blocks` blocks (the scenario's other ops by their reference), against the CPU reference of
/// the whole scenario: every byte of every buffer.
fn replay_step_case(name: &str, scenario: &Scenario, blocks: u32, landing: Landing, pace: Pace) -> Result<(), String> {
    use rgdn::ops::GdnLayerStepReplay;
    let emulate = |op: &(dyn Op + 'static), host: &HostMemory, emulated: &StepBuffers| {
        let step = op.downcast_ref::<GdnLayerStepReplay>()?;
        // The readiness state: zero, as a fresh allocation.
        let mut sync = vec![0u64; abi::GRID_SYNC_BYTES / 8];
        let state = sync.as_mut_ptr() as u64;
        Some(step.launch(host, emulated, state).map_err(|e| e.to_string()).map(|launch| {
            let p: abi::GdnLayerStepReplayParams = same_abi(&launch.params);
            let body = gdn_layer_step_replay::ENTRIES_EMULATED
                .iter()
                .find(|(entry, _)| *entry == launch.entry)
                .unwrap_or_else(|| panic!("no emulated entry {}", launch.entry))
                .1;
            // SAFETY: the parameters address the host copies of the step's views, validated and
            // proved by the host (`launch`); the shared bytes are the entry's; every block runs at
            // once over a zeroed readiness state of its own, which outlives the launch.
            device::runtime::launch_cooperative(
                blocks,
                abi::GDN_LAYER_STEP_BLOCK,
                launch.shared_bytes as usize,
                landing,
                pace,
                &|| unsafe { body(&p) },
            );
        }))
    };
    let start = std::time::Instant::now();
    let result = emulated_scenario(name, scenario, &emulate);
    println!("{name}: {} in {:.1} s", if result.is_ok() { "equal" } else { "DIFFERENT" }, start.elapsed().as_secs_f64());
    result
}

/// \[replay\] GDN_LAYER_STEP_REPLAY's source — the commit-and-chain tiles, the mat-vec rows and
/// GATED_DELTA_NET_REPLAY_VERIFY's blocks with the replay before the readiness wait, blocks
/// running at once — emulated, equals the CPU reference of the whole replay layer it was fused
/// from (the fusion pass with every fusion on a built replay layer: random logs and accepted
/// counts 0 … T, one to four sequences in their own cells, n_t 1–16, two shapes), on grids of
/// one, three and five blocks (block 0 held until the others wait on most), its copies landing
/// at the wait and at the issue: every byte of every buffer.
#[test]
fn the_replay_step_kernel_source_equals_the_cpu_reference_on_replay_layers() {
    use rgdn::fusion::{Options, compile, sweep};
    use rgdn::graph::layer::{LayerSpec, Outputs, Rollback, StackSpec};
    use rgdn::layer::{GdnShape, Step};
    use rgdn::ops::GdnLayerStepReplay;
    const ONE_KEY_HEAD: GdnShape = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 128, d_conv: 4, eps: 1e-6 };
    const TWO_KEY_HEADS: GdnShape = GdnShape { n_embd: 96, n_k_heads: 2, n_v_heads: 4, head_dim: 128, d_conv: 3, eps: 1e-6 };
    let cases: &[(GdnShape, usize, usize, u64)] = &[
        (ONE_KEY_HEAD, 1, 1, 1),
        (ONE_KEY_HEAD, 1, 4, 2),
        (ONE_KEY_HEAD, 2, 3, 3),
        (TWO_KEY_HEADS, 3, 5, 4),
        (ONE_KEY_HEAD, 4, 2, 5),
        (TWO_KEY_HEADS, 1, 16, 6),
    ];
    let launches =
        [(3, Landing::AtWait, Pace::BlockZeroLast), (1, Landing::AtIssue, Pace::Free), (5, Landing::AtIssue, Pace::BlockZeroLast)];
    let (mut failures, mut n) = (Vec::new(), 0);
    for &(shape, n_s, n_t, seed) in cases {
        let more: Vec<(usize, usize)> = (1..n_s).map(|s| (s, 0)).collect();
        let step = Step { cells: n_s, ..Step::new(n_t, 0) }.with_sequences(&more).expect("at most 4 sequences");
        let layer = LayerSpec { rollback: Rollback::Replay { log_set: 0 }, ..LayerSpec::new(shape, step) };
        let spec = StackSpec { layers: vec![layer], outputs: Outputs::Products };
        let b = sweep::build(&spec, seed, sweep::Planning::FusionAware).expect("a replay layer");
        let (nodes, report) = compile(b.replay_nodes(1).expect("nodes"), &b.live_out(), Options::ALL);
        assert_eq!(report.fired("replay_step"), 1, "n_s = {n_s}, n_t = {n_t}: {report}");
        let scenario = Scenario {
            mem: b.mem.clone(),
            ops: nodes.into_iter().map(|node| node.op).collect(),
            tolerance: rgdn::suite::Tolerance::BitExact,
            exact_nan_payloads: false,
        };
        for &(blocks, landing, pace) in &launches {
            n += 1;
            let name = format!("replay step (H_k = {}, n_s = {n_s}, n_t = {n_t}, {blocks} blocks, {landing:?}, {pace:?})", shape.n_k_heads);
            let result = replay_step_case(&name, &scenario, blocks, landing, pace);
            if let Err(e) = result {
                failures.push(e);
            }
        }
    }
    // The GPU suite's own match cases of up to 4 token columns n_t·n_s (9B, 4B: the presets'
    // tile, head and key-head counts), one launch each.
    let mut suite_cases = 0;
    for c in rgdn::suite::cases::gdn_layer_step_replay::cases() {
        if c.group != rgdn::suite::cases::gdn_layer_step_replay::GROUP {
            continue;
        }
        let Ok(Expect::Match(scenario)) = c.build() else { panic!("{}: not a match case", c.name) };
        let step = scenario.ops.iter().find_map(|op| op.as_ref().downcast_ref::<GdnLayerStepReplay>()).expect("a replay step");
        if step.gdn.q.ne()[2] * step.gdn.q.ne()[3] > 4 {
            continue;
        }
        suite_cases += 1;
        n += 1;
        let result = replay_step_case(&c.name, &scenario, 3, Landing::AtWait, Pace::BlockZeroLast);
        if let Err(e) = result {
            failures.push(e);
        }
    }
    conclude("GDN_LAYER_STEP_REPLAY", "launches", n, &format!("{} replay layers, {suite_cases} GPU suite cases", cases.len()), failures);
}

/// The bytes `t` spans in its buffer: (buffer, first byte, one past the last), or None when its
/// extent does not fit usize (such a view must be refused anyway).
fn byte_span(t: &Tensor) -> Option<(usize, usize, usize)> {
    let (ne, nb) = (t.ne(), t.layout.nb);
    if ne.iter().any(|&n| n == 0) {
        return Some((t.buffer.0, t.layout.offset, t.layout.offset));
    }
    let last = (0..4).try_fold(t.layout.offset, |acc, d| acc.checked_add((ne[d] - 1).checked_mul(nb[d])?))?;
    Some((t.buffer.0, t.layout.offset, last.checked_add(t.layout.dtype.size())?))
}

/// What [`perturbed_trials`] found: trials, accepted steps (distinct, emulated), refusals by
/// error kind, and the failures.
struct Perturbed {
    trials: usize,
    accepted: usize,
    distinct: usize,
    emulated: usize,
    refused: std::collections::BTreeMap<String, usize>,
    failures: Vec<String>,
}

/// \[hostile\] The perturbation trials of a fused op's host check (the two tests below): every
/// view of `valid` (`fields`) onto every other view (its tensor, then its own shape at the
/// other's first byte), then random shifts along its buffer (whole elements, or misaligned; 200,
/// 2000 with RGDN_FULL_TESTS). Each trial asks `check` (the op's `launch`); a panic is a failure,
/// a refusal is counted by its error kind, and an accepted step must pass `oracle` (None: no
/// hazard); each distinct accepted step is then run by `emulate` (trial, what moved, the step),
/// one in `emulate_every` of them (all with RGDN_FULL_TESTS). `replacements` add one trial each:
/// field `fields[i]` replaced by a prepared tensor (an index view holding other values, in the
/// memory the closures use), described by the string.
fn perturbed_trials<O: Clone + std::fmt::Debug>(
    valid: &O,
    fields: &[(&'static str, fn(&mut O) -> &mut Tensor)],
    replacements: &[(String, usize, Tensor)],
    seed: u64,
    check: impl Fn(&O) -> rgdn::Result<()>,
    oracle: impl Fn(&O) -> Option<String>,
    emulate_every: usize,
    emulate: impl Fn(usize, &str, O) -> Result<(), String>,
) -> Perturbed {
    use rand::{Rng, SeedableRng};
    let n = fields.len();
    let shifts = if full_tests() { 2000 } else { 200 };
    let trials = 2 * n * n + replacements.len() + shifts;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut out = Perturbed { trials, accepted: 0, distinct: 0, emulated: 0, refused: Default::default(), failures: Vec::new() };
    let mut seen = std::collections::HashSet::new();
    for trial in 0..trials {
        let mut op = valid.clone();
        let how = if let Some((what, i, t)) = trial.checked_sub(2 * n * n).and_then(|r| replacements.get(r)) {
            *fields[*i].1(&mut op) = *t;
            what.clone()
        } else if trial < 2 * n * n {
            let ((name, field), (other, get)) = (fields[trial / 2 % n], fields[trial / 2 / n]);
            let (t, at) = (*field(&mut op), *get(&mut valid.clone()));
            if trial % 2 == 0 {
                *field(&mut op) = at;
                format!("{name} := {other}")
            } else {
                *field(&mut op) = Tensor::new(at.buffer, rgdn::tensor::Layout { offset: at.layout.offset, ..t.layout });
                format!("{name} placed at {other}")
            }
        } else {
            let (name, field) = fields[rng.random_range(0..n)];
            let t = *field(&mut op);
            let (shift, what) = if rng.random_bool(0.5) {
                (4 * rng.random_range(1..64usize), "shifted")
            } else {
                (rng.random_range(1..4usize), "misaligned by")
            };
            *field(&mut op) = t.view(t.ne(), t.layout.nb, shift);
            format!("{name} {what} {shift} bytes")
        };
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&op))) {
            Err(_) => out.failures.push(format!("trial {trial} ({how}): the host check panicked")),
            Ok(Err(e)) => {
                // By kind: the variant's name (`Aliasing`, `Invalid`, …).
                let kind: String = format!("{e:?}").chars().take_while(|c| c.is_alphanumeric()).collect();
                *out.refused.entry(kind).or_default() += 1;
            }
            Ok(Ok(())) => {
                out.accepted += 1;
                if let Some(why) = oracle(&op) {
                    out.failures.push(format!("trial {trial} ({how}): accepted, but {why}"));
                    continue;
                }
                // Each distinct accepted step once (a view moved onto itself is the valid step).
                if !seen.insert(format!("{op:?}")) {
                    continue;
                }
                out.distinct += 1;
                if !full_tests() && out.distinct % emulate_every != 1 % emulate_every {
                    continue;
                }
                out.emulated += 1;
                if let Err(e) = emulate(trial, &how, op) {
                    out.failures.push(e);
                }
            }
        }
    }
    out
}

/// \[hostile\] The index-value trials of [`perturbed_trials`]: for each `(name, top)`, the index
/// view `name` of `valid` (a field) with one sequence's value set to each of 0 ..= `top` (the
/// others kept; the unchanged values left out), each as a new index buffer in `mem`.
fn index_trials<O: Clone>(
    mem: &mut HostMemory,
    valid: &O,
    fields: &[(&'static str, fn(&mut O) -> &mut Tensor)],
    tops: &[(&str, i32)],
) -> Vec<(String, usize, Tensor)> {
    use rgdn::memory::Memory;
    let mut out = Vec::new();
    for &(name, top) in tops {
        let i = fields.iter().position(|f| f.0 == name).unwrap_or_else(|| panic!("no field {name}"));
        let now = mem.index_values(fields[i].1(&mut valid.clone())).expect("index values");
        for s in 0..now.len() {
            for value in 0..=top {
                let mut values = now.clone();
                values[s] = value;
                if values != now {
                    out.push((format!("{name} := {values:?}"), i, mem.alloc_indices(&values)));
                }
            }
        }
    }
    out
}

/// \[replay\] Adversarially: GDN_LAYER_STEP_REPLAY's host check on perturbed steps. From a valid
/// step of a built replay layer (two sequences in four cells, three tokens), each trial moves one
/// of its views or changes an index view's values, and asks `launch`: every view onto every other
/// view of the step (a link broken, two parts on one buffer), every view's own shape placed at
/// every other view's first byte (a write onto another part's bytes), each sequence's source row,
/// destination row (a spare row: a commit elsewhere), accepted count and commit window row set to
/// every value in its range and one past it, and random shifts along its buffer (a partial
/// overlap, a misaligned or out-of-bounds view; 200, 2000 with `RGDN_FULL_TESTS`); the oracle
/// below checks every accepted step, and one in three distinct ones is emulated (all with
/// `RGDN_FULL_TESTS`).
/// It must never panic; a refusal is a typed error; and every perturbed step it accepts must
/// (a) keep what the kernel reads before its readiness wait (the replay's log, counts, rows and
/// the ssm cache) and what its second phase writes (`out`, the ssm cache) off every first-phase
/// output, by the bytes the views span (an oracle written here, apart from the op's check), and
/// (b) run, emulated from the kernel's own source on three blocks with block 0 held, to the bytes
/// of the three parts' CPU references run one after the other.
#[test]
fn every_perturbed_replay_step_the_host_accepts_runs_to_its_reference() {
    use rgdn::fusion::{Options, compile, sweep};
    use rgdn::graph::layer::{LayerSpec, Outputs, Rollback, StackSpec};
    use rgdn::layer::{GdnShape, Step};
    use rgdn::ops::GdnLayerStepReplay;
    const SHAPE: GdnShape = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 128, d_conv: 4, eps: 1e-6 };
    // Four cells for two sequences: rows 2 and 3 of the ssm cache are spare (the index trials).
    let step = Step { cells: 4, ..Step::new(3, 0) }.with_sequences(&[(1, 0)]).expect("two sequences");
    let layer = LayerSpec { rollback: Rollback::Replay { log_set: 0 }, ..LayerSpec::new(SHAPE, step) };
    let mut b = sweep::build(&StackSpec { layers: vec![layer], outputs: Outputs::Products }, 7, sweep::Planning::FusionAware)
        .expect("a replay layer");
    let (nodes, _) = compile(b.replay_nodes(1).expect("nodes"), &b.live_out(), Options::ALL);
    let mut valid = nodes.iter().find_map(|n| n.get::<GdnLayerStepReplay>()).expect("a replay step").clone();
    // The builder's k norm writes the log set itself, so its chain copies no k; the kernel's k-log
    // path (a chain that also copies its k heads, as a graph with a CPY of k_norm asks) is
    // perturbed too, with a log of its own.
    let commit = valid.chain.commit.as_mut().expect("a commit");
    assert!(commit.log_k.is_none(), "the builder's chain copies no k");
    commit.log_k = Some(b.mem.alloc_tensor(rgdn::tensor::DType::F32, valid.chain.k_norm.ne()));
    // Every view of the step, by name.
    type Field = (&'static str, fn(&mut GdnLayerStepReplay) -> &mut Tensor);
    let mut fields: Vec<Field> = chain_and_gate_fields!(GdnLayerStepReplay).to_vec();
    let rest: Vec<Field> = vec![
        ("log_qkv", |o| &mut o.chain.commit.as_mut().expect("a commit").log_qkv),
        ("window_rows", |o| &mut o.chain.commit.as_mut().expect("a commit").window_rows),
        ("log_out", |o| o.chain.commit.as_mut().expect("a commit").log_out.as_mut().expect("a log")),
        ("log_k", |o| o.chain.commit.as_mut().expect("a commit").log_k.as_mut().expect("a log")),
        ("log_v", |o| o.chain.commit.as_mut().expect("a commit").log_v.as_mut().expect("a log")),
        ("replay k", |o| &mut o.gdn.replay.k),
        ("replay v", |o| &mut o.gdn.replay.v),
        ("replay g", |o| &mut o.gdn.replay.g),
        ("replay beta", |o| &mut o.gdn.replay.beta),
        ("ssm_cache", |o| &mut o.gdn.replay.ssm_cache),
        ("ssm source_rows", |o| &mut o.gdn.replay.source_rows),
        ("ssm dest_rows", |o| &mut o.gdn.replay.dest_rows),
        ("accepted", |o| &mut o.gdn.replay.accepted),
        ("verify q", |o| &mut o.gdn.q),
        ("verify k", |o| &mut o.gdn.k),
        ("verify v", |o| &mut o.gdn.v),
        ("verify g", |o| &mut o.gdn.g),
        ("verify beta", |o| &mut o.gdn.beta),
        ("out", |o| &mut o.gdn.out),
    ];
    fields.extend(rest);
    // (a): the oracle's groups, by field name.
    let first_phase_writes =
        ["conv_cache", "conv_out", "q_norm", "k_norm", "log_out", "log_k", "log_v", "alpha", "beta_raw", "beta", "gate"];
    let early_reads = ["replay k", "replay v", "replay g", "replay beta", "ssm_cache", "ssm source_rows", "ssm dest_rows", "accepted"];
    let oracle = |op: &GdnLayerStepReplay| -> Option<String> {
        let span = |name: &str| {
            let get = fields.iter().find(|f| f.0 == name).expect("a field").1;
            byte_span(get(&mut op.clone()))
        };
        let meet = |a: &str, b: &str| match (span(a), span(b)) {
            (Some((ba, sa, ea)), Some((bb, sb, eb))) => ba == bb && sa < eb && sb < ea,
            _ => true,
        };
        for w in first_phase_writes {
            for r in early_reads.iter().chain(&["out"]) {
                if meet(w, r) {
                    return Some(format!("{r} shares bytes with the first phase's {w}"));
                }
            }
        }
        None
    };
    assert_eq!(oracle(&valid), None, "the valid step");
    // The index trials: each sequence's source row, destination row (spare rows 2 and 3
    // included: a commit elsewhere, which the graph never builds), accepted count and commit
    // window row replaced by every value in its range and one past it, the other sequence's kept.
    let mut mem = b.mem.clone();
    let rows = valid.gdn.replay.ssm_cache.ne()[1] as i32;
    let (t_log, n_s) = (valid.gdn.replay.k.ne()[2] as i32, valid.gdn.replay.k.ne()[3] as i32);
    // Window rows j·n_s + s with j ≤ T_log; (T_log + 1)·n_s is one past the last.
    let tops = [("ssm source_rows", rows), ("ssm dest_rows", rows), ("accepted", t_log + 1), ("window_rows", (t_log + 1) * n_s)];
    let replacements = index_trials(&mut mem, &valid, &fields, &tops);
    let check = |op: &GdnLayerStepReplay| {
        let mut sync = vec![0u64; abi::GRID_SYNC_BYTES / 8];
        op.launch(&mem, &StepBuffers::of(&mem), sync.as_mut_ptr() as u64).map(|_| ())
    };
    // One in three distinct accepted steps emulated (≈ 1 s each on two cores).
    let r = perturbed_trials(&valid, &fields, &replacements, 24, check, oracle, 3, |trial, how, op| {
        let scenario =
            Scenario { mem: mem.clone(), ops: vec![Box::new(op)], tolerance: rgdn::suite::Tolerance::BitExact, exact_nan_payloads: false };
        replay_step_case(&format!("trial {trial} ({how})"), &scenario, 3, landing_of(trial), Pace::BlockZeroLast)
    });
    println!(
        "perturbed replay steps: {} trials, {} accepted ({} distinct, {} of them emulated against their reference), refusals by kind: {:?}",
        r.trials, r.accepted, r.distinct, r.emulated, r.refused
    );
    conclude(
        "GDN_LAYER_STEP_REPLAY",
        "perturbed steps handled",
        r.trials,
        "accepted ones emulated, the others refused by a typed error",
        r.failures,
    );
}

/// \[hostile\] Adversarially: GDN_LAYER_STEP's host check on perturbed steps, as
/// [`every_perturbed_replay_step_the_host_accepts_runs_to_its_reference`] does for the replay
/// step. From a valid step of a built snapshot layer (two sequences, three tokens, one snapshot
/// group), each trial moves one of its views or changes its source rows, and asks `launch`: every
/// view onto every other view of the step (a link broken, two parts on one buffer), every view's
/// own shape placed at every other view's first byte (a write onto another part's bytes), each
/// sequence's ssm source row set to every row and one past the last, and random shifts along its
/// buffer (a partial overlap, a misaligned or out-of-bounds view; 200, 2000 with
/// `RGDN_FULL_TESTS`). It must never panic; a refusal is a typed error; and
/// every perturbed step it accepts must (a) keep what its second phase writes (`out`, the state
/// slots) and the state rows it reads before its readiness wait off every first-phase input and
/// output, by the bytes the views span (an oracle written here, apart from the op's check), and
/// (b) run, emulated from the kernel's own source on three blocks with block 0 held, to the bytes
/// of the three parts' CPU references run one after the other.
#[test]
fn every_perturbed_layer_step_the_host_accepts_runs_to_its_reference() {
    use rgdn::fusion::{Options, compile, sweep};
    use rgdn::graph::layer::{LayerSpec, Outputs, StackSpec};
    use rgdn::layer::{GdnShape, Step};
    use rgdn::ops::gdn_layer_step::GdnLayerStep;
    const SHAPE: GdnShape = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 128, d_conv: 4, eps: 1e-6 };
    let step = Step { cells: 2, ..Step::new(3, 1) }.with_sequences(&[(1, 0)]).expect("two sequences");
    let b =
        sweep::build(&StackSpec { layers: vec![LayerSpec::new(SHAPE, step)], outputs: Outputs::Products }, 7, sweep::Planning::FusionAware)
            .expect("a snapshot layer");
    let (nodes, _) = compile(b.fresh_nodes().expect("nodes"), &b.live_out(), Options::ALL);
    let valid = nodes.iter().find_map(|n| n.get::<GdnLayerStep>()).expect("a layer step").clone();
    // Every view of the step, by name.
    type Field = (&'static str, fn(&mut GdnLayerStep) -> &mut Tensor);
    let mut fields: Vec<Field> = chain_and_gate_fields!(GdnLayerStep).to_vec();
    let rest: Vec<Field> = vec![
        ("gdn q", |o| &mut o.gdn.q),
        ("gdn k", |o| &mut o.gdn.k),
        ("gdn v", |o| &mut o.gdn.v),
        ("gdn g", |o| &mut o.gdn.g),
        ("gdn beta", |o| &mut o.gdn.beta),
        ("ssm_cache", |o| &mut o.gdn.ssm_cache),
        ("ssm source_rows", |o| &mut o.gdn.source_rows),
        ("out", |o| &mut o.gdn.out),
        ("states", |o| &mut o.gdn.states),
    ];
    fields.extend(rest);
    // (a): the oracle's groups, by field name. The conv cache is read at the source rows and
    // written at the snapshot rows (the chain's own rule); the state slots are rows of the ssm
    // cache, whose source rows the second phase reads before its wait; the second phase's q, k,
    // v, g and β are the first phase's outputs, read after it (the links).
    let first_writes = ["conv_cache", "conv_out", "q_norm", "k_norm", "alpha", "beta_raw", "beta", "gate"];
    let first_reads = ["conv_cache", "source_row", "qkv", "conv_weight", "alpha_weight", "beta_weight", "cur", "dt_bias", "ssm_a"];
    let (second_early_reads, second_writes) = (["ssm_cache", "ssm source_rows"], ["out", "states"]);
    let oracle = |op: &GdnLayerStep| -> Option<String> {
        let span = |name: &str| {
            let get = fields.iter().find(|f| f.0 == name).expect("a field").1;
            byte_span(get(&mut op.clone()))
        };
        let meet = |a: &str, b: &str| match (span(a), span(b)) {
            (Some((ba, sa, ea)), Some((bb, sb, eb))) => ba == bb && sa < eb && sb < ea,
            _ => true,
        };
        let first_written = first_writes.iter().flat_map(|w| second_early_reads.iter().chain(&second_writes).map(move |r| (*w, *r)));
        let second_written = second_writes.iter().flat_map(|w| first_reads.iter().map(move |r| (*r, *w)));
        first_written
            .chain(second_written)
            .find(|(a, b)| meet(a, b))
            .map(|(a, b)| format!("the second phase's {b} shares bytes with the first phase's {a}"))
    };
    assert_eq!(oracle(&valid), None, "the valid step");
    // The index trials: each sequence's source row of the ssm cache replaced by every row and
    // one past the last, the other sequence's kept.
    let mut mem = b.mem.clone();
    let rows = valid.gdn.ssm_cache.ne()[1] as i32;
    let replacements = index_trials(&mut mem, &valid, &fields, &[("ssm source_rows", rows)]);
    let check = |op: &GdnLayerStep| {
        let mut sync = vec![0u64; abi::GRID_SYNC_BYTES / 8];
        op.launch(&mem, &StepBuffers::of(&mem), sync.as_mut_ptr() as u64).map(|_| ())
    };
    let r = perturbed_trials(&valid, &fields, &replacements, 25, check, oracle, 1, |trial, how, op| {
        let scenario =
            Scenario { mem: mem.clone(), ops: vec![Box::new(op)], tolerance: rgdn::suite::Tolerance::BitExact, exact_nan_payloads: false };
        let launch = StepLaunch { split: None, blocks: 3, landing: landing_of(trial), pace: Pace::BlockZeroLast };
        layer_step_case(&format!("trial {trial} ({how})"), &scenario, launch)
    });
    println!(
        "perturbed layer steps: {} trials, {} accepted ({} distinct, each emulated against its reference), refusals by kind: {:?}",
        r.trials, r.accepted, r.distinct, r.refused
    );
    conclude(
        "GDN_LAYER_STEP",
        "perturbed steps handled",
        r.trials,
        "accepted ones emulated, the others refused by a typed error",
        r.failures,
    );
}
