//! The emulated launch: one OS thread a GPU thread, a block's threads at a time, blocks one after
//! another; each thread knows its coordinates, its block's shared memory and barriers.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// A barrier of `n` threads that gives up (panics) once another thread of the launch panicked,
/// instead of waiting for it forever.
pub struct Barrier {
    n: usize,
    state: Mutex<(usize, u64)>,
    cv: Condvar,
}

impl Barrier {
    fn new(n: usize) -> Self {
        Barrier { n, state: Mutex::new((0, 0)), cv: Condvar::new() }
    }

    pub fn wait(&self, poisoned: &AtomicBool) {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let generation = g.1;
        g.0 += 1;
        if g.0 == self.n {
            *g = (0, generation + 1);
            self.cv.notify_all();
            return;
        }
        loop {
            let (ng, _) = self.cv.wait_timeout(g, Duration::from_millis(50)).unwrap_or_else(|e| e.into_inner());
            g = ng;
            if g.1 != generation {
                return;
            }
            if poisoned.load(Ordering::Relaxed) {
                panic!("a thread of the emulated launch panicked; this one stops at its barrier");
            }
        }
    }
}

/// One warp's shuffle slots (two sets, used alternately: one barrier a shuffle) and barrier.
pub struct Warp {
    pub slots: [[AtomicU32; 32]; 2],
    pub barrier: Barrier,
}

/// Sixteen bytes of shared memory: the block's dynamic shared memory is an array of them, so it
/// is 16-byte aligned as the GPU's (`.align 16`) and a kernel may read a struct through
/// `shared::generic`.
#[repr(C, align(16))]
pub struct Quad(pub [AtomicU32; 4]);

/// What a block's threads share.
pub struct Block {
    /// The dynamic shared memory.
    pub shared: Vec<Quad>,
    pub barrier: Barrier,
    pub warps: Vec<Warp>,
    /// Address of the launch's poison flag: set once any thread of the launch panicked.
    poisoned: usize,
    /// When the block's `cp.async` copies land.
    pub landing: Landing,
    /// Lanes of the block polling a readiness flag or counter now (`device::grid`).
    pub polling: AtomicU32,
    /// Threads of the block that returned from the kernel.
    pub finished: AtomicU32,
}

/// When an emulated `cp.async` copy lands in shared memory: both are executions the GPU may
/// take (a copy lands at some time between its issue and the wait that covers it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Landing {
    /// At its issue: shows a copy that overwrites shared memory another thread still reads.
    AtIssue,
    /// At the wait that covers it (`cp.async.wait_group` / `wait_all`): shows a read of staged
    /// data before that wait.
    AtWait,
}

impl Block {
    /// Shared word `i` (4-byte words from the first byte).
    pub fn word(&self, i: usize) -> &AtomicU32 {
        &self.shared[i / 4].0[i % 4]
    }

    /// Words of dynamic shared memory.
    pub fn words(&self) -> usize {
        4 * self.shared.len()
    }

    /// Whether a thread of the launch panicked (then every wait gives up).
    pub fn poisoned(&self) -> &AtomicBool {
        // SAFETY: the flag outlives every block of its launch (`run`).
        unsafe { &*(self.poisoned as *const AtomicBool) }
    }
}

/// A thread's coordinates and block.
#[derive(Clone, Copy)]
pub struct Thread {
    pub tid: [u32; 3],
    pub bid: [u32; 3],
    pub bdim: [u32; 3],
    pub gdim: [u32; 3],
    pub block: usize,
}

thread_local! {
    static THREAD: Cell<Option<Thread>> = const { Cell::new(None) };
    /// Which slot set the thread's next shuffle uses.
    pub static PARITY: Cell<usize> = const { Cell::new(0) };
}

/// This thread's coordinates (panics outside an emulated launch).
pub fn this() -> Thread {
    THREAD.with(|t| t.get()).expect("a device function called outside an emulated launch")
}

/// This thread's block.
pub fn block() -> &'static Block {
    // SAFETY: the block outlives every thread of its scope (`run`), and the reference does
    // not leave the thread's run of the kernel body.
    unsafe { &*(this().block as *const Block) }
}

/// This thread's warp: linear thread index / 32.
pub fn warp() -> &'static Warp {
    let t = this();
    let linear = t.tid[0] + t.bdim[0] * (t.tid[1] + t.bdim[1] * t.tid[2]);
    &block().warps[(linear / 32) as usize]
}

/// Runs `body` as a launch of `grid` blocks of `block_dim` threads (a multiple of 32) with
/// `shared_bytes` of dynamic shared memory, one block after another, its `cp.async` copies
/// landing as `landing` says; panics if any thread panicked.
pub fn launch(grid: [u32; 3], block_dim: [u32; 3], shared_bytes: usize, landing: Landing, body: &(dyn Fn() + Sync)) {
    for bz in 0..grid[2] {
        for by in 0..grid[1] {
            for bx in 0..grid[0] {
                run(&[[bx, by, bz]], grid, block_dim, shared_bytes, landing, Pace::Free, body);
            }
        }
    }
}

/// How a cooperative launch's blocks are paced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pace {
    /// Every block starts at once and runs as the OS schedules it.
    Free,
    /// Block 0 starts only once every other block is waiting for a readiness flag or counter
    /// (or has finished): the items block 0 runs are then written last, after every consumer
    /// that could read them early has had its chance — a consumer that skips a wait for one of
    /// them reads bytes not written yet.
    BlockZeroLast,
}

/// Runs `body` as a cooperative launch of `grid_x` blocks of `block_x` threads (a multiple of
/// 32): every block at once, as on a co-resident grid whose blocks wait for each other
/// (`device::grid`), paced as `pace` says, its `cp.async` copies landing as `landing` says;
/// panics if any thread panicked.
pub fn launch_cooperative(grid_x: u32, block_x: u32, shared_bytes: usize, landing: Landing, pace: Pace, body: &(dyn Fn() + Sync)) {
    let blocks: Vec<[u32; 3]> = (0..grid_x).map(|b| [b, 0, 0]).collect();
    run(&blocks, [grid_x, 1, 1], [block_x, 1, 1], shared_bytes, landing, pace, body);
}

/// Block 0's gate under `Pace::BlockZeroLast`: returns once every other block polls or has
/// finished (or the launch is poisoned: the thread then stops).
fn hold_until_others_wait(state: &[Block], threads: u32) {
    let start = std::time::Instant::now();
    loop {
        let others_wait = state[1..].iter().all(|b| b.polling.load(Ordering::SeqCst) > 0 || b.finished.load(Ordering::SeqCst) == threads);
        if others_wait {
            return;
        }
        if state[0].poisoned().load(Ordering::Relaxed) {
            panic!("a thread of the emulated launch panicked; block 0 does not start");
        }
        assert!(
            start.elapsed() < super::grid::WAIT_LIMIT,
            "block 0 held for {:?}: the other blocks neither wait nor finish",
            super::grid::WAIT_LIMIT
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Runs the blocks `blocks` of a launch of `grid` at once, one OS thread a GPU thread.
fn run(
    blocks: &[[u32; 3]],
    grid: [u32; 3],
    block_dim: [u32; 3],
    shared_bytes: usize,
    landing: Landing,
    pace: Pace,
    body: &(dyn Fn() + Sync),
) {
    let n = (block_dim[0] * block_dim[1] * block_dim[2]) as usize;
    assert!(n % 32 == 0, "block of whole warps");
    let poisoned = AtomicBool::new(false);
    let poisoned_addr = &poisoned as *const AtomicBool as usize;
    // Unwritten shared words hold a NaN (0xFFC00000), so a read of one that reaches an output shows.
    let nan = || AtomicU32::new(0xFFC0_0000);
    let state: Vec<Block> = blocks
        .iter()
        .map(|_| Block {
            shared: (0..shared_bytes.div_ceil(16)).map(|_| Quad([nan(), nan(), nan(), nan()])).collect(),
            barrier: Barrier::new(n),
            warps: (0..n / 32)
                .map(|_| Warp { slots: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU32::new(0))), barrier: Barrier::new(32) })
                .collect(),
            poisoned: poisoned_addr,
            landing,
            polling: AtomicU32::new(0),
            finished: AtomicU32::new(0),
        })
        .collect();
    let state = &state[..];
    std::thread::scope(|scope| {
        for (bid, blk) in blocks.iter().zip(state) {
            let blk_addr = blk as *const Block as usize;
            for z in 0..block_dim[2] {
                for y in 0..block_dim[1] {
                    for x in 0..block_dim[0] {
                        let me = Thread { tid: [x, y, z], bid: *bid, bdim: block_dim, gdim: grid, block: blk_addr };
                        std::thread::Builder::new()
                            .stack_size(1 << 20)
                            .spawn_scoped(scope, move || {
                                struct Poison(usize);
                                impl Drop for Poison {
                                    fn drop(&mut self) {
                                        if std::thread::panicking() {
                                            // SAFETY: the flag outlives the scope.
                                            unsafe { &*(self.0 as *const AtomicBool) }.store(true, Ordering::Relaxed);
                                        }
                                    }
                                }
                                let _guard = Poison(poisoned_addr);
                                if pace == Pace::BlockZeroLast && me.bid == [0, 0, 0] && state.len() > 1 {
                                    hold_until_others_wait(state, n as u32);
                                }
                                THREAD.with(|t| t.set(Some(me)));
                                PARITY.with(|p| p.set(0));
                                super::shared::forget_copies();
                                body();
                                super::shared::check_no_copies_in_flight();
                                // SAFETY: the block outlives the scope.
                                unsafe { &*(blk_addr as *const Block) }.finished.fetch_add(1, Ordering::SeqCst);
                            })
                            .expect("spawn an emulated thread");
                    }
                }
            }
        }
    });
}
