//! [layer-step] Cross-block readiness for launches whose blocks are all resident at once
//! (cooperative launches: the driver refuses a cooperative grid that does not fit): one flag
//! per first-phase work item instead of one grid barrier, so a consumer waits only for the
//! items it reads, and no two hundred blocks meet on one counter.
//!
//! State (global memory, zero when first allocated,
//! [`GRID_SYNC_BYTES`](crate::abi::GRID_SYNC_BYTES)), one u64 per 128-byte line
//! ([`GRID_SYNC_LINE`](crate::abi::GRID_SYNC_LINE): pollers of different flags meet in no L2
//! line): line 0 `done`, line 1 `arrived`, line 2 + i the flag of work item i
//! (i < [`GRID_SYNC_FLAGS`](crate::abi::GRID_SYNC_FLAGS)). `arrived` counts every block arrival of every launch that used the state, `done` is its value at the
//! end of the last launch. Launches that share the state run one after another (one stream), so
//! at a launch's start `done` = `arrived`, every block reads the same `done`, and the launch's
//! **target** is `done + n_blocks` ([`grid_target`]) — larger than every value any earlier
//! launch stored anywhere in the state (each stored at most its own target, and targets grow by
//! n_blocks ≥ 1 per launch; u64 does not wrap).
//!
//! - [`publish_item`]: once every thread of the block finished item i (`bar.sync`), thread 0
//!   `st.release.gpu` of the target into flag i — the PTX memory model's release pattern (a
//!   release only: an acquire fence here would also invalidate the multiprocessor's L1 under
//!   the other blocks reading it); the block's writes are ordered before thread 0's release
//!   by `bar.sync` (cumulative at CTA scope), so every write of the item is released.
//! - [`wait_items`]: each lane of a block's first warp polls (`ld.relaxed.gpu`) the flag of at
//!   most one item until it holds the target (a flag ≥ the target was stored by this launch:
//!   see above), then reads it once more with `ld.acquire.gpu` — the acquire pattern: that read
//!   returns the target too (coherence: it follows the relaxed read in program order), so it
//!   synchronizes with the item block's release, and every write that block released is
//!   visible to the lane — and the block meets at `bar.sync`, which orders those acquires
//!   before every thread's later accesses. [speed] One acquire load instead of a
//!   `fence.acq_rel.gpu` in every lane, and none in lanes with no item: measured −0.4 to −1.0 µs
//!   at n_t = 1 / 4 / 8 (`results/2026-12-01-h200-acquire/`). The likely reason (inferred from
//!   the stall samples, not shown): the fence's `MEMBAR.ALL.GPU` also waits for the lane's own
//!   outstanding memory operations, here the group state loads issued just before the wait.
//! - [`arrive`] (every block once, after all its `publish_item`s) and [`close_launch`] (block 0,
//!   last): thread 0's `red.release.gpu.add` of 1 on `arrived`; block 0's thread 0 at its end
//!   polls `arrived` until it reaches the target and stores the target into `done` for the next
//!   launch: every block read `done` before its arrival (its threads' reads are ordered before
//!   thread 0's release by `bar.sync`), and block 0 has observed every arrival, so no thread of
//!   this launch can read the new value.
//!
//! Waiting cannot deadlock when no thread waits before its block published all its own items
//! and arrived, and every block is resident: every item is then published.
//!
//! Loads of data another block wrote during the launch, after its flag was observed, must not
//! use the non-coherent path (`ld.global.nc`): it is not covered by the memory model for data
//! written during the launch. Plain coherent loads (`ld.global`, weak) are: after the acquire, a
//! weak load observes every write the item released (the memory model's guarantee for weak
//! loads after a GPU-scope acquire, whatever the machine code does for it: no line the
//! multiprocessor's L1 cached before the acquire — e.g. qkv read under conv_out — may be
//! returned).

use super::thread::{sync_threads, thread_idx_x, thread_idx_y, thread_idx_z};
use crate::abi::GRID_SYNC_LINE;
use core::arch::asm;

/// A `ld.<sem>.gpu.global.u64` wrapper (one definition for each memory-model strength).
macro_rules! load_gpu_u64 {
    ($name:ident, $sem:literal) => {
        #[doc = concat!("`ld.", $sem, ".gpu.global.u64`.")]
        ///
        /// # Safety
        /// `p` must be a valid, aligned u64 of global memory.
        #[inline(always)]
        unsafe fn $name(p: *const u64) -> u64 {
            let r: u64;
            // SAFETY: forwarded to the caller.
            unsafe {
                asm!(
                    concat!("{{ .reg .b64 ga; cvta.to.global.u64 ga, {p}; ld.", $sem, ".gpu.global.u64 {r}, [ga]; }}"),
                    p = in(reg64) p as u64,
                    r = out(reg64) r,
                    options(nostack, preserves_flags)
                );
            }
            r
        }
    };
}
load_gpu_u64!(load_acquire_gpu_u64, "acquire");
load_gpu_u64!(load_relaxed_gpu_u64, "relaxed");

/// `st.relaxed.gpu.global.u64`.
///
/// # Safety
/// `p` must be a valid, aligned u64 of global memory.
#[inline(always)]
unsafe fn store_relaxed_gpu_u64(p: *mut u64, v: u64) {
    // SAFETY: forwarded to the caller.
    unsafe {
        asm!(
            "{{ .reg .b64 ga; cvta.to.global.u64 ga, {p}; st.relaxed.gpu.global.u64 [ga], {v}; }}",
            p = in(reg64) p as u64,
            v = in(reg64) v,
            options(nostack, preserves_flags)
        );
    }
}

/// `st.release.gpu.global.u64`: a release store (the release fence without the acquire
/// half's L1 invalidation, which would drop lines the multiprocessor's other blocks still read).
///
/// # Safety
/// `p` must be a valid, aligned u64 of global memory.
#[inline(always)]
unsafe fn store_release_gpu_u64(p: *mut u64, v: u64) {
    // SAFETY: forwarded to the caller.
    unsafe {
        asm!(
            "{{ .reg .b64 ga; cvta.to.global.u64 ga, {p}; st.release.gpu.global.u64 [ga], {v}; }}",
            p = in(reg64) p as u64,
            v = in(reg64) v,
            options(nostack, preserves_flags)
        );
    }
}

/// `red.release.gpu.global.add.u64`.
///
/// # Safety
/// `p` must be a valid, aligned u64 of global memory.
#[inline(always)]
unsafe fn reduce_add_release_gpu_u64(p: *mut u64, v: u64) {
    // SAFETY: forwarded to the caller.
    unsafe {
        asm!(
            "{{ .reg .b64 ga; cvta.to.global.u64 ga, {p}; red.release.gpu.global.add.u64 [ga], {v}; }}",
            p = in(reg64) p as u64,
            v = in(reg64) v,
            options(nostack, preserves_flags)
        );
    }
}

/// This launch's target, `done + n_blocks` (module docs). Every thread that publishes, waits or
/// closes calls it at the kernel's start, before its block's arrival.
///
/// # Safety
/// `state` must point to the state of the module docs, used by no launch running at the same
/// time.
#[inline(always)]
pub unsafe fn grid_target(state: *const u64, n_blocks: u32) -> u64 {
    // SAFETY: forwarded to the caller.
    unsafe { load_relaxed_gpu_u64(state) }.wrapping_add(n_blocks as u64)
}

/// Address of the state's u64 at line `line` (module docs: 0 `done`, 1 `arrived`, 2 + i flag i).
#[inline(always)]
fn line_at(state: *mut u64, line: u32) -> *mut u64 {
    state.wrapping_byte_add(line as usize * GRID_SYNC_LINE)
}

/// Publishes work item `item` of this launch (module docs): returns in every thread of the
/// block once the block's writes for the item are released under the item's flag. Also a block
/// barrier: the item's shared-memory accesses end here.
///
/// # Safety
/// Every thread of the block must call it together (block-uniform control flow), after its
/// last write of the item; `state` must be the launch's state (module docs) and
/// `item` < [`GRID_SYNC_FLAGS`](crate::abi::GRID_SYNC_FLAGS), published once per launch;
/// `target` is [`grid_target`]'s.
#[inline(always)]
pub unsafe fn publish_item(state: *mut u64, item: u32, target: u64) {
    // SAFETY: every thread of the block is here (caller).
    unsafe { sync_threads() };
    if is_first_thread() {
        // SAFETY: flag `item` of the state (caller: item < GRID_SYNC_FLAGS).
        unsafe { store_release_gpu_u64(line_at(state, 2 + item), target) };
    }
}

/// Waits, in every thread of the block, until each item the first warp's lanes name (`None`:
/// nothing; the other warps' `item` is not read) is published by this launch; afterwards every
/// write those items released is visible to every thread's coherent loads (module docs): the
/// first warp's lanes with an item poll, each then runs one acquire load of its flag, and the
/// block meets at `bar.sync`, which orders those acquires before every thread's later accesses. One poll and one L1
/// invalidation per block, not per warp: the block's warps share the lines they read.
///
/// # Safety
/// Every thread of the block must call it together (block-uniform control flow); `state` must
/// be the launch's state, each item of the first warp < [`GRID_SYNC_FLAGS`](crate::abi::GRID_SYNC_FLAGS)
/// an item some block of the launch publishes, and this block must have published its own
/// items and arrived before (module docs: no deadlock); `target` is [`grid_target`]'s.
#[inline(always)]
pub unsafe fn wait_items(state: *mut u64, item: Option<u32>, target: u64) {
    if thread_idx_x() < 32 && thread_idx_y() == 0 && thread_idx_z() == 0 {
        if let Some(item) = item {
            let flag = line_at(state, 2 + item);
            // SAFETY: flag `item` of the state (caller).
            while unsafe { load_relaxed_gpu_u64(flag) } < target {}
            // The acquire (module docs); its value is the target again, not needed.
            // SAFETY: as above.
            unsafe { load_acquire_gpu_u64(flag) };
        }
    }
    // SAFETY: every thread of the block is here (caller).
    unsafe { sync_threads() };
}

/// This block's arrival (module docs), after its last [`publish_item`]; also a block barrier.
///
/// # Safety
/// Every thread of the block must call it together, once per launch; `state` must be the
/// launch's state.
#[inline(always)]
pub unsafe fn arrive(state: *mut u64) {
    // SAFETY: every thread of the block is here (caller); orders every thread's read of `done`
    // before thread 0's release.
    unsafe { sync_threads() };
    if is_first_thread() {
        // SAFETY: `arrived`, line 1 of the state (caller).
        unsafe { reduce_add_release_gpu_u64(line_at(state, 1), 1) };
    }
}

/// Block 0's end of the launch (module docs): thread 0 waits for every block's arrival, then
/// stores the target into `done` for the next launch. Other threads return at once.
///
/// # Safety
/// Called by block 0 only, after its [`arrive`], with [`grid_target`]'s `target`; every block of
/// the grid arrives (they are resident together); `state` must be the launch's state.
#[inline(always)]
pub unsafe fn close_launch(state: *mut u64, target: u64) {
    if is_first_thread() {
        // SAFETY: lines 0 and 1 of the state (caller); every block's read of `done` precedes its
        // arrival, which this thread observes before the store.
        unsafe {
            while load_relaxed_gpu_u64(line_at(state, 1)) < target {}
            store_relaxed_gpu_u64(state, target);
        }
    }
}

fn is_first_thread() -> bool {
    thread_idx_x() == 0 && thread_idx_y() == 0 && thread_idx_z() == 0
}

/// [seq-batch] The counter of chunk `chunk` in the readiness state (line
/// [`GRID_SYNC_COUNTER_LINE`](crate::abi::GRID_SYNC_COUNTER_LINE) + chunk).
#[inline(always)]
fn counter_at(state: *mut u64, chunk: u32) -> *mut u64 {
    line_at(state, crate::abi::GRID_SYNC_COUNTER_LINE + chunk)
}

/// [seq-batch] Counts one finished first-phase item of chunk `chunk`: once every thread of the block
/// finished it (`bar.sync`), thread 0 adds 1 to the chunk's counter with `red.release.gpu` — the
/// release pattern of [`publish_item`], so every write of the item is released with the count.
/// Also a block barrier. The counters are zero when a launch starts ([`close_batch_launch`]
/// resets them).
///
/// # Safety
/// Every thread of the block must call it together, after its last write of the item; `state`
/// must be the launch's state and `chunk` < [`BATCH_MAX_CHUNKS`](crate::abi::BATCH_MAX_CHUNKS).
#[inline(always)]
pub unsafe fn publish_count(state: *mut u64, chunk: u32) {
    // SAFETY: every thread of the block is here (caller).
    unsafe { sync_threads() };
    if is_first_thread() {
        // SAFETY: counter `chunk` of the state (caller).
        unsafe { reduce_add_release_gpu_u64(counter_at(state, chunk), 1) };
    }
}

/// [seq-batch] Waits, in every thread of the block, until chunk `chunk`'s counter reached `target`
/// (every first-phase item of the chunk counted); afterwards every write those items released is
/// visible to every thread's coherent loads: thread 0 polls (`ld.relaxed.gpu`), then reads the
/// counter once more with `ld.acquire.gpu` — it returns at least `target` again (coherence), so
/// it reads from the release sequence of every counted item's `red.release`, and synchronizes
/// with each of them — and the block meets at `bar.sync`.
///
/// # Safety
/// Every thread of the block must call it together; `state` must be the launch's state, `chunk`
/// < [`BATCH_MAX_CHUNKS`](crate::abi::BATCH_MAX_CHUNKS), and `target` the number of items of the
/// chunk that blocks of this launch count, each of which comes before this item in the launch's
/// order (`abi::LayerStepSchedule`: no deadlock).
#[inline(always)]
pub unsafe fn wait_count(state: *mut u64, chunk: u32, target: u64) {
    if is_first_thread() {
        let counter = counter_at(state, chunk);
        // SAFETY: counter `chunk` of the state (caller).
        while unsafe { load_relaxed_gpu_u64(counter) } < target {}
        // SAFETY: as above; the acquire (see above).
        unsafe { load_acquire_gpu_u64(counter) };
    }
    // SAFETY: every thread of the block is here (caller).
    unsafe { sync_threads() };
}

/// [seq-batch] Block 0's end of a batched launch: [`close_launch`], and before `done` is stored,
/// the counters of chunks 0 … `n_chunks` − 1 set back to zero for the next launch (every block
/// has arrived, so no thread of this launch reads or adds to them any more).
///
/// # Safety
/// As [`close_launch`]; `n_chunks` ≤ [`BATCH_MAX_CHUNKS`](crate::abi::BATCH_MAX_CHUNKS).
#[inline(always)]
pub unsafe fn close_batch_launch(state: *mut u64, target: u64, n_chunks: u32) {
    if is_first_thread() {
        // SAFETY: lines of the state (caller); every block's accesses of the counters precede
        // its arrival, which this thread observes before the stores.
        unsafe {
            while load_relaxed_gpu_u64(line_at(state, 1)) < target {}
            let mut c = 0;
            while c < n_chunks {
                store_relaxed_gpu_u64(counter_at(state, c), 0);
                c += 1;
            }
            store_relaxed_gpu_u64(state, target);
        }
    }
}

/// \[overlap\] `griddepcontrol.launch_dependents`: once every block of this grid has run it (or
/// exited), the stream's next grid, if it was launched with programmatic stream serialization
/// (`LaunchKind::Programmatic` on the host), may start while this one still runs. It orders
/// nothing: the next grid sees this one's writes only after its own
/// [`wait_prerequisite_grids`]. A no-op when the next launch is not programmatic.
///
/// # Safety
/// The host may start the next grid early only where what that grid touches before its wait
/// commutes with everything this grid touches (`fusion::overlap`, checked once per plan).
#[inline(always)]
pub unsafe fn allow_dependent_launch() {
    // SAFETY: a scheduling hint with no memory effect (the caller's rule above is what makes the
    // early start sound).
    unsafe { asm!("griddepcontrol.launch_dependents;", options(nostack, preserves_flags)) };
}

/// \[overlap\] `griddepcontrol.wait`: returns in this thread once every grid this grid depends on
/// programmatically (the stream's previous grid, launched before it) has completed and its
/// memory operations are performed and visible to this grid. Returns at once in a grid launched
/// plainly (its previous grids completed before it started).
///
/// # Safety
/// None beyond the call: it only waits. What a grid may touch before it is the host's rule
/// ([`allow_dependent_launch`]).
#[inline(always)]
pub unsafe fn wait_prerequisite_grids() {
    // SAFETY: a wait with acquire-like visibility of the previous grids' writes; no operands.
    unsafe { asm!("griddepcontrol.wait;", options(nostack, preserves_flags)) };
}
