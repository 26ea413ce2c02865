//! GDN_LAYER_STEP's cross-block readiness (`device/grid.rs`) on host atomics: the flags and
//! counters are `AtomicU64`s at the state's addresses, the release stores and reductions
//! `Release`, the polls `Relaxed` and the acquire loads `Acquire` — the same orderings the PTX
//! memory model gives the kernel's instructions, so a wait that returns makes every write the
//! item released visible to the block (after its barrier), as on the GPU. A poll gives the CPU
//! away between reads, gives up once another thread of the launch panicked, and panics after
//! [`WAIT_LIMIT`] (a wait that never ends is a failure, not a hang).

use super::runtime::block;
use super::thread::{sync_threads, thread_idx_x, thread_idx_y, thread_idx_z};
use crate::abi::GRID_SYNC_LINE;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Longest a poll waits before the launch fails.
pub const WAIT_LIMIT: Duration = Duration::from_secs(600);

fn at<'a>(p: *mut u64) -> &'a AtomicU64 {
    assert!(p as usize % 8 == 0, "readiness state word at {p:p}: not 8-byte aligned");
    // SAFETY: the state is host memory the test allocated for the launch, 8-byte aligned
    // (checked), accessed only atomically while the launch runs.
    unsafe { AtomicU64::from_ptr(p) }
}

fn line_at(state: *mut u64, line: u32) -> *mut u64 {
    state.wrapping_byte_add(line as usize * GRID_SYNC_LINE)
}

fn counter_at(state: *mut u64, chunk: u32) -> *mut u64 {
    line_at(state, crate::abi::GRID_SYNC_COUNTER_LINE + chunk)
}

fn is_first_thread() -> bool {
    thread_idx_x() == 0 && thread_idx_y() == 0 && thread_idx_z() == 0
}

/// Counts a lane out of its block's pollers when its poll ends (returns or panics).
struct Stop<'a>(&'a std::sync::atomic::AtomicU32);

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Polls `word` (relaxed) until it holds at least `target`, then reads it once with acquire.
fn poll_then_acquire(word: &AtomicU64, target: u64, what: &str) {
    let start = Instant::now();
    // The block counts as waiting while a lane polls (`runtime::Pace::BlockZeroLast`).
    let polling = &block().polling;
    polling.fetch_add(1, Ordering::SeqCst);
    let _done = Stop(polling);
    while word.load(Ordering::Relaxed) < target {
        if block().poisoned().load(Ordering::Relaxed) {
            panic!("a thread of the emulated launch panicked; this one stops waiting for {what}");
        }
        assert!(start.elapsed() < WAIT_LIMIT, "{what} did not reach {target} within {WAIT_LIMIT:?}: the launch would hang");
        std::thread::yield_now();
    }
    word.load(Ordering::Acquire);
}

pub unsafe fn grid_target(state: *const u64, n_blocks: u32) -> u64 {
    at(state as *mut u64).load(Ordering::Relaxed).wrapping_add(n_blocks as u64)
}

pub unsafe fn publish_item(state: *mut u64, item: u32, target: u64) {
    unsafe { sync_threads() };
    if is_first_thread() {
        at(line_at(state, 2 + item)).store(target, Ordering::Release);
    }
}

pub unsafe fn wait_items(state: *mut u64, item: Option<u32>, target: u64) {
    if thread_idx_x() < 32 && thread_idx_y() == 0 && thread_idx_z() == 0 {
        if let Some(item) = item {
            assert!((item as usize) < crate::abi::GRID_SYNC_FLAGS, "wait for item {item}: past the readiness flags");
            poll_then_acquire(at(line_at(state, 2 + item)), target, &format!("flag {item}"));
        }
    }
    unsafe { sync_threads() };
}

pub unsafe fn arrive(state: *mut u64) {
    unsafe { sync_threads() };
    if is_first_thread() {
        at(line_at(state, 1)).fetch_add(1, Ordering::Release);
    }
}

pub unsafe fn close_launch(state: *mut u64, target: u64) {
    if is_first_thread() {
        poll_then_acquire(at(line_at(state, 1)), target, "the arrivals");
        at(state).store(target, Ordering::Relaxed);
    }
}

pub unsafe fn publish_count(state: *mut u64, chunk: u32) {
    unsafe { sync_threads() };
    if is_first_thread() {
        at(counter_at(state, chunk)).fetch_add(1, Ordering::Release);
    }
}

pub unsafe fn wait_count(state: *mut u64, chunk: u32, target: u64) {
    if is_first_thread() {
        poll_then_acquire(at(counter_at(state, chunk)), target, &format!("chunk {chunk}'s count"));
    }
    unsafe { sync_threads() };
}

pub unsafe fn close_batch_launch(state: *mut u64, target: u64, n_chunks: u32) {
    if is_first_thread() {
        poll_then_acquire(at(line_at(state, 1)), target, "the arrivals");
        for c in 0..n_chunks {
            at(counter_at(state, c)).store(0, Ordering::Relaxed);
        }
        at(state).store(target, Ordering::Relaxed);
    }
}

/// \[overlap\] What an emulated programmatic grid's [`wait_prerequisite_grids`] runs, once per
/// block, while every thread of the block is held there: the test's check of what the block
/// did before its wait and its stand-in for the previous grids completing (it restores the
/// bytes the test poisoned). None: nothing.
type PrerequisiteWait = Box<dyn Fn() + Send + Sync>;
static PREREQUISITE_WAIT: std::sync::Mutex<Option<PrerequisiteWait>> = std::sync::Mutex::new(None);

/// Sets (or clears) what [`wait_prerequisite_grids`] runs.
pub fn set_prerequisite_wait(wait: Option<PrerequisiteWait>) {
    *PREREQUISITE_WAIT.lock().unwrap_or_else(|p| p.into_inner()) = wait;
}

/// `griddepcontrol.launch_dependents`: a scheduling hint; the emulation runs grids one after
/// another, so there is nothing to let start.
pub unsafe fn allow_dependent_launch() {}

/// `griddepcontrol.wait`, emulated as a block barrier around the test's hook: the kernels call
/// it in every thread of the block (block-uniform), so the hook runs after every thread's work
/// before the wait and before any thread's work after it — a stricter order than the GPU's
/// per-thread wait, which only makes a pre-wait access easier to see.
pub unsafe fn wait_prerequisite_grids() {
    // SAFETY: every thread of the block calls it (above).
    unsafe { sync_threads() };
    if is_first_thread()
        && let Some(wait) = PREREQUISITE_WAIT.lock().unwrap_or_else(|p| p.into_inner()).as_ref()
    {
        wait();
    }
    // SAFETY: as above.
    unsafe { sync_threads() };
}
