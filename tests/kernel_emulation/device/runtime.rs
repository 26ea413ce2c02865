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

/// What a block's threads share.
pub struct Block {
    /// The dynamic shared memory, in 4-byte words (every kernel access is 4-byte aligned).
    pub shared: Vec<AtomicU32>,
    pub barrier: Barrier,
    pub warps: Vec<Warp>,
    pub poisoned: AtomicBool,
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
    // SAFETY: the block outlives every thread of its scope (`launch`), and the reference does
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
/// `shared_bytes` of dynamic shared memory; panics if any thread panicked.
pub fn launch(grid: [u32; 3], block_dim: [u32; 3], shared_bytes: usize, body: &(dyn Fn() + Sync)) {
    let n = (block_dim[0] * block_dim[1] * block_dim[2]) as usize;
    assert!(n % 32 == 0, "block of whole warps");
    for bz in 0..grid[2] {
        for by in 0..grid[1] {
            for bx in 0..grid[0] {
                let blk = Block {
                    shared: (0..shared_bytes.div_ceil(4)).map(|_| AtomicU32::new(0xFFC0_0000)).collect(),
                    barrier: Barrier::new(n),
                    warps: (0..n / 32)
                        .map(|_| Warp {
                            slots: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU32::new(0))),
                            barrier: Barrier::new(32),
                        })
                        .collect(),
                    poisoned: AtomicBool::new(false),
                };
                let blk_addr = &blk as *const Block as usize;
                std::thread::scope(|scope| {
                    for z in 0..block_dim[2] {
                        for y in 0..block_dim[1] {
                            for x in 0..block_dim[0] {
                                let me = Thread { tid: [x, y, z], bid: [bx, by, bz], bdim: block_dim, gdim: grid, block: blk_addr };
                                std::thread::Builder::new()
                                    .stack_size(1 << 20)
                                    .spawn_scoped(scope, move || {
                                        struct Poison(usize);
                                        impl Drop for Poison {
                                            fn drop(&mut self) {
                                                if std::thread::panicking() {
                                                    // SAFETY: the block outlives the scope.
                                                    unsafe { &*(self.0 as *const Block) }.poisoned.store(true, Ordering::Relaxed);
                                                }
                                            }
                                        }
                                        let _guard = Poison(blk_addr);
                                        THREAD.with(|t| t.set(Some(me)));
                                        PARITY.with(|p| p.set(0));
                                        body();
                                    })
                                    .expect("spawn an emulated thread");
                            }
                        }
                    }
                });
            }
        }
    }
}
