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

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rgdn::memory::HostMemory;
use rgdn::ops::Op;
use rgdn::ops::gated_delta_net::{GatedDeltaNetFromCache, attention_scale};
use rgdn::ops::gated_delta_net_replay::GatedDeltaNetReplay;
use rgdn::ops::gated_delta_net_replay_verify::GatedDeltaNetReplayVerify;
use rgdn::reference::math::ExactMufu;
use rgdn::tensor::{DType, Tensor};

const D: usize = abi::GDN_HEAD_DIM;
const HV: usize = 2;

fn random(mem: &mut HostMemory, rng: &mut StdRng, ne: [usize; 4], scale: f32) -> Tensor {
    let t = mem.alloc_tensor(DType::F32, ne);
    let values: Vec<f32> = (0..t.layout.n_elements()).map(|_| rng.random_range(-scale..scale)).collect();
    mem.fill_f32(&t, &values);
    t
}

fn gates(mem: &mut HostMemory, rng: &mut StdRng, n_t: usize, n_s: usize) -> (Tensor, Tensor) {
    let (g, beta) = (mem.alloc_tensor(DType::F32, [1, HV, n_t, n_s]), mem.alloc_tensor(DType::F32, [1, HV, n_t, n_s]));
    let gs: Vec<f32> = (0..HV * n_t * n_s).map(|_| -rng.random_range(-6.0f32..2.08).exp()).collect();
    let bs: Vec<f32> = (0..HV * n_t * n_s).map(|_| rng.random_range(0.0..1.0)).collect();
    mem.fill_f32(&g, &gs);
    mem.fill_f32(&beta, &bs);
    (g, beta)
}

/// Host copies of every buffer, 4-byte aligned, at stable addresses: what the emulated kernel
/// reads and writes.
struct Buffers(Vec<Vec<u32>>);

impl Buffers {
    fn of(mem: &HostMemory) -> Self {
        Buffers(
            (0..mem.n_buffers())
                .map(|i| {
                    let b = mem.bytes(rgdn::tensor::BufferId(i));
                    b.chunks(4)
                        .map(|c| {
                            u32::from_le_bytes([
                                c[0],
                                c.get(1).copied().unwrap_or(0),
                                c.get(2).copied().unwrap_or(0),
                                c.get(3).copied().unwrap_or(0),
                            ])
                        })
                        .collect()
                })
                .collect(),
        )
    }

    /// Address of element 0 of `t`.
    fn addr(&self, t: &Tensor) -> u64 {
        self.0[t.buffer.0].as_ptr() as u64 + t.layout.offset as u64
    }

    fn bytes(&self, t: &Tensor) -> Vec<u8> {
        self.0[t.buffer.0].iter().flat_map(|w| w.to_le_bytes()).collect()
    }
}

/// Element strides of a contiguous [a, b, c, d] tensor: (1, a, a·b, a·b·c).
fn strides(t: &Tensor) -> [u64; 4] {
    let nb = t.layout.nb;
    [nb[0] as u64 / 4, nb[1] as u64 / 4, nb[2] as u64 / 4, nb[3] as u64 / 4]
}

fn view(b: &Buffers, t: &Tensor) -> abi::TokenViewParams {
    let s = strides(t);
    abi::TokenViewParams { addr: b.addr(t), head: s[1], token: s[2], seq: s[3] }
}

/// The kernel's parameters over the host copies (the host's `params` for these contiguous views).
fn params(b: &Buffers, fused: &GatedDeltaNetReplayVerify, t_log: usize, n_t: usize) -> abi::GatedDeltaNetReplayVerifyParams {
    let r = &fused.replay;
    let replay = abi::GatedDeltaNetReplayParams {
        k: view(b, &r.k),
        v: view(b, &r.v),
        g: view(b, &r.g),
        beta: view(b, &r.beta),
        cache: b.addr(&r.ssm_cache),
        cache_row: strides(&r.ssm_cache)[1],
        source_rows: b.addr(&r.source_rows),
        source_rows_stride: 1,
        dest_rows: b.addr(&r.dest_rows),
        dest_rows_stride: 1,
        accepted: b.addr(&r.accepted),
        accepted_stride: 1,
        n_tokens: t_log as u32,
        n_key_heads: 1,
    };
    let (q, k, v, g, beta, out) =
        (strides(&fused.q), strides(&fused.k), strides(&fused.v), strides(&fused.g), strides(&fused.beta), strides(&fused.out));
    let verify = abi::GatedDeltaNetParams {
        q: b.addr(&fused.q),
        q_head: q[1],
        q_token: q[2],
        q_seq: q[3],
        k: b.addr(&fused.k),
        k_head: k[1],
        k_token: k[2],
        k_seq: k[3],
        v: b.addr(&fused.v),
        v_head: v[1],
        v_token: v[2],
        v_seq: v[3],
        g: b.addr(&fused.g),
        g_head: g[1],
        g_token: g[2],
        g_seq: g[3],
        beta: b.addr(&fused.beta),
        beta_head: beta[1],
        beta_token: beta[2],
        beta_seq: beta[3],
        state_in: b.addr(&r.ssm_cache),
        in_col: D as u64,
        in_head: (D * D) as u64,
        in_seq: strides(&r.ssm_cache)[1],
        out: b.addr(&fused.out),
        out_head: out[1],
        out_token: out[2],
        out_seq: out[3],
        states: b.addr(&r.ssm_cache),
        states_seq: 0,
        states_slot: 0,
        n_tokens: n_t as u32,
        n_key_heads: 1,
        n_slots: 0,
        scale: attention_scale(),
    };
    abi::GatedDeltaNetReplayVerifyParams { replay, verify }
}

/// The launch shapes the host uses for a verify of `n_t` and a log of `t_log` tokens: (label,
/// grid z, dynamic shared bytes).
fn launch_shapes(n_t: usize, t_log: usize) -> Vec<(&'static str, u32, usize)> {
    vec![("D/32 blocks", abi::GDN_HEAD_DIM as u32 / abi::BATCH_GDN_BLOCK_COLUMNS, abi::replay_verify_shared_bytes(n_t, t_log) as usize)]
}

/// One case: the emulated kernel on launch shape `shape` against the CPU reference.
fn case(seed: u64, (t_log, n_t): (usize, usize), source: &[i32], dest: &[i32], accepted: &[i32], shape: usize) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut mem = HostMemory::new();
    let n_s = source.len();
    let n_rows = 2 * n_s + 1;
    let (lg, lbeta) = gates(&mut mem, &mut rng, t_log, n_s);
    let replay = GatedDeltaNetReplay {
        k: random(&mut mem, &mut rng, [D, 1, t_log, n_s], 0.15),
        v: random(&mut mem, &mut rng, [D, HV, t_log, n_s], 2.0),
        g: lg,
        beta: lbeta,
        ssm_cache: random(&mut mem, &mut rng, [D * D * HV, n_rows, 1, 1], 0.5),
        source_rows: mem.alloc_indices(source),
        dest_rows: mem.alloc_indices(dest),
        accepted: mem.alloc_indices(accepted),
    };
    let (g, beta) = gates(&mut mem, &mut rng, n_t, n_s);
    let verify = GatedDeltaNetFromCache {
        q: random(&mut mem, &mut rng, [D, 1, n_t, n_s], 0.15),
        k: random(&mut mem, &mut rng, [D, 1, n_t, n_s], 0.15),
        v: random(&mut mem, &mut rng, [D, HV, n_t, n_s], 2.0),
        g,
        beta,
        ssm_cache: replay.ssm_cache,
        source_rows: replay.dest_rows,
        out: mem.alloc_tensor(DType::F32, [D, HV, n_t, n_s]),
        states: mem.alloc_tensor(DType::F32, [D * D * HV, n_s, 1, 1]),
    };
    let fused = GatedDeltaNetReplayVerify::of_pair(&replay, &verify).ok_or("the verify reads the replay's rows")?;
    let emulated = Buffers::of(&mem);
    fused.reference(&mut mem, &mut ExactMufu).map_err(|e| format!("reference: {e}"))?;
    let p = params(&emulated, &fused, t_log, n_t);
    let (label, grid_z, shared) = launch_shapes(n_t, t_log)[shape];
    let grid = [HV as u32, n_s as u32, grid_z];
    // SAFETY: the parameters address the host copies, sized as the reference's views; the grid
    // and shared bytes are the host's for these sizes.
    device::runtime::launch(grid, [32, abi::GDN_WARPS, 1], shared, &|| unsafe {
        gated_delta_net_replay_verify::gated_delta_net_replay_verify_emulated(&p)
    });
    for (name, t) in [("out", &fused.out), ("cache", &fused.replay.ssm_cache)] {
        let (want, got) = (mem.bytes(t.buffer).to_vec(), emulated.bytes(t));
        if want[..] != got[..want.len()] {
            let first = want.iter().zip(&got).position(|(a, b)| a != b).unwrap_or(0);
            return Err(format!(
                "{name} differs from the CPU reference first at byte {first} (T_log {t_log}, T {n_t}, n_s {n_s}, a {accepted:?}, {label})"
            ));
        }
    }
    Ok(())
}

/// GATED_DELTA_NET_REPLAY_VERIFY's source, emulated, equals its CPU reference: log and verify
/// lengths 1 … 16, counts 0, T_log and in between, destination rows the source's or others, on
/// every launch shape the host uses.
#[test]
fn the_replay_verify_kernel_source_equals_the_cpu_reference() {
    let mut failures = Vec::new();
    let mut n = 0;
    for (i, &(t_log, n_t)) in [(1, 1), (3, 2), (4, 4), (2, 5), (16, 16)].iter().enumerate() {
        for distinct in [false, true] {
            let n_s = 2;
            let source: Vec<i32> = (0..n_s as i32).map(|s| 2 * s + 1).collect();
            let dest: Vec<i32> = if distinct { (0..n_s as i32).map(|s| 2 * s).collect() } else { source.clone() };
            let accepted: Vec<i32> = (0..n_s).map(|s| [t_log, t_log / 2, 0][(s + i) % 3] as i32).collect();
            for shape in 0..launch_shapes(n_t, t_log).len() {
                n += 1;
                if let Err(e) = case(700 + 10 * i as u64 + distinct as u64, (t_log, n_t), &source, &dest, &accepted, shape) {
                    failures.push(e);
                }
            }
        }
    }
    println!("KERNEL EMULATION (GATED_DELTA_NET_REPLAY_VERIFY): {}/{n} cases equal the CPU reference", n - failures.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
