//! [layer-step] A grid-wide barrier for launches whose blocks are all resident at once
//! (cooperative launches: the driver refuses a cooperative grid that does not fit).
//!
//! State: two u32 in global memory, `[count, generation]`, with `count` = 0 between launches.
//! Each block, once all its threads arrived (`bar.sync`), sends thread 0:
//! 1. `fence.acq_rel.gpu` — the block's writes before the barrier (ordered before thread 0's
//!    fence by `bar.sync`, which is cumulative at CTA scope) are released at GPU scope;
//! 2. reads `generation` (relaxed), then `atom.acq_rel.gpu.add` on `count`: the release half
//!    orders the read before the arrival, so the read cannot see the increment the last block
//!    makes after every arrival;
//! 3. the last block to arrive (old count = n_blocks − 1) resets `count` to 0 (relaxed) and
//!    bumps `generation` with a release add; every other block spins on an acquire load of
//!    `generation` until it changes;
//! 4. `fence.acq_rel.gpu` again, then `bar.sync`: every thread of the block is ordered after
//!    the acquire, so its loads see every write any block made before the barrier (the PTX
//!    memory model's causality order: write → bar.sync → release fence → atomic → acquire →
//!    fence → bar.sync → read; CUDA's cooperative-groups `grid.sync` is the same pattern).
//!
//! Loads after the barrier of data written before it must not use the non-coherent path
//! (`ld.global.nc`): it is not covered by the memory model for data written during the launch.
//! [`load_l2_f32`] (`ld.global.cg`, cached in L2 only) is what GDN_LAYER_STEP uses for them: the
//! acquire fence already makes plain loads see those writes, and bypassing L1 additionally
//! rules out a line this multiprocessor cached before the barrier (from a block that read the
//! same bytes as an input, e.g. qkv under conv_out).

use super::thread::{sync_threads, thread_idx_x, thread_idx_y, thread_idx_z};
use core::arch::asm;

/// `fence.acq_rel.gpu` (`membar.gl`): orders this thread's memory accesses before it against
/// those after it at GPU scope.
#[inline(always)]
pub fn fence_acq_rel_gpu() {
    // SAFETY: a fence has no operands and no preconditions.
    unsafe { asm!("fence.acq_rel.gpu;", options(nostack, preserves_flags)) }
}

/// `*p` with `ld.global.cg.f32` (cached in L2, not in L1): a coherent load for data other
/// blocks wrote before a [`grid_barrier`]. Not `pure`: kept in program order with the thread's
/// stores.
///
/// # Safety
/// `p` must point to 4 readable bytes of global memory, 4-byte aligned, that no thread writes
/// from the barrier until the load.
#[inline(always)]
pub unsafe fn load_l2_f32(p: *const f32) -> f32 {
    let r: f32;
    // SAFETY: forwarded to the caller.
    unsafe {
        asm!(
            "{{ .reg .b64 ga; cvta.to.global.u64 ga, {p}; ld.global.cg.f32 {r}, [ga]; }}",
            p = in(reg64) p as u64,
            r = out(reg32) r,
            options(readonly, nostack, preserves_flags)
        );
    }
    r
}

/// `ld.relaxed.gpu.global.u32`.
///
/// # Safety
/// `p` must be a valid, aligned u32 of global memory.
#[inline(always)]
unsafe fn load_relaxed_gpu(p: *const u32) -> u32 {
    let r: u32;
    // SAFETY: forwarded to the caller.
    unsafe {
        asm!(
            "{{ .reg .b64 ga; cvta.to.global.u64 ga, {p}; ld.relaxed.gpu.global.u32 {r}, [ga]; }}",
            p = in(reg64) p as u64,
            r = out(reg32) r,
            options(nostack, preserves_flags)
        );
    }
    r
}

/// `ld.acquire.gpu.global.u32`.
///
/// # Safety
/// `p` must be a valid, aligned u32 of global memory.
#[inline(always)]
unsafe fn load_acquire_gpu(p: *const u32) -> u32 {
    let r: u32;
    // SAFETY: forwarded to the caller.
    unsafe {
        asm!(
            "{{ .reg .b64 ga; cvta.to.global.u64 ga, {p}; ld.acquire.gpu.global.u32 {r}, [ga]; }}",
            p = in(reg64) p as u64,
            r = out(reg32) r,
            options(nostack, preserves_flags)
        );
    }
    r
}

/// `atom.acq_rel.gpu.global.add.u32`: adds `v`, returns the old value.
///
/// # Safety
/// `p` must be a valid, aligned u32 of global memory.
#[inline(always)]
unsafe fn atomic_add_acq_rel_gpu(p: *mut u32, v: u32) -> u32 {
    let r: u32;
    // SAFETY: forwarded to the caller.
    unsafe {
        asm!(
            "{{ .reg .b64 ga; cvta.to.global.u64 ga, {p}; atom.acq_rel.gpu.global.add.u32 {r}, [ga], {v}; }}",
            p = in(reg64) p as u64,
            v = in(reg32) v,
            r = out(reg32) r,
            options(nostack, preserves_flags)
        );
    }
    r
}

/// `st.relaxed.gpu.global.u32`.
///
/// # Safety
/// `p` must be a valid, aligned u32 of global memory.
#[inline(always)]
unsafe fn store_relaxed_gpu(p: *mut u32, v: u32) {
    // SAFETY: forwarded to the caller.
    unsafe {
        asm!(
            "{{ .reg .b64 ga; cvta.to.global.u64 ga, {p}; st.relaxed.gpu.global.u32 [ga], {v}; }}",
            p = in(reg64) p as u64,
            v = in(reg32) v,
            options(nostack, preserves_flags)
        );
    }
}

/// `red.release.gpu.global.add.u32`.
///
/// # Safety
/// `p` must be a valid, aligned u32 of global memory.
#[inline(always)]
unsafe fn reduce_add_release_gpu(p: *mut u32, v: u32) {
    // SAFETY: forwarded to the caller.
    unsafe {
        asm!(
            "{{ .reg .b64 ga; cvta.to.global.u64 ga, {p}; red.release.gpu.global.add.u32 [ga], {v}; }}",
            p = in(reg64) p as u64,
            v = in(reg32) v,
            options(nostack, preserves_flags)
        );
    }
}

/// The grid barrier (module docs): returns in every thread of every block once every block of
/// the grid has called it, with every write made before the call visible to every coherent load
/// after it.
///
/// # Safety
/// Every thread of every block of the launch must call it, exactly once per launch, outside
/// divergent control flow; all `n_blocks` = gridDim blocks must be resident together (a
/// cooperative launch); `state` must point to the two u32 `[count, generation]` of global
/// memory with count = 0 at the launch's start, used by no other launch running at the same
/// time.
#[inline(always)]
pub unsafe fn grid_barrier(state: *mut u32, n_blocks: u32) {
    // SAFETY: every thread of the block is here (caller).
    unsafe { sync_threads() };
    if thread_idx_x() == 0 && thread_idx_y() == 0 && thread_idx_z() == 0 {
        fence_acq_rel_gpu();
        // SAFETY: `state` holds two valid u32 (caller).
        unsafe {
            let generation = state.add(1);
            let seen = load_relaxed_gpu(generation);
            let arrived = atomic_add_acq_rel_gpu(state, 1);
            if arrived.wrapping_add(1) == n_blocks {
                store_relaxed_gpu(state, 0);
                reduce_add_release_gpu(generation, 1);
            } else {
                while load_acquire_gpu(generation) == seen {}
            }
        }
        fence_acq_rel_gpu();
    }
    // SAFETY: as above; the block's threads leave together, after thread 0's acquire.
    unsafe { sync_threads() };
}
