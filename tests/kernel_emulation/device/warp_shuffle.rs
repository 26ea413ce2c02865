//! `shfl.sync` and `bar.warp.sync` as barriers of the warp's 32 threads.

use super::runtime::{PARITY, block, this, warp};
use std::sync::atomic::Ordering;

fn lane() -> usize {
    let t = this();
    ((t.tid[0] + t.bdim[0] * (t.tid[1] + t.bdim[1] * t.tid[2])) % 32) as usize
}

/// Every lane posts `v`; after the warp's barrier each reads lane `src`'s. The slot set alternates,
/// so one barrier a shuffle is enough: a lane reuses a set only after every lane passed the
/// barrier of the shuffle in between, that is after every lane read it.
fn exchange(v: f32, src: usize) -> f32 {
    let w = warp();
    let set = PARITY.with(|p| {
        let s = p.get();
        p.set(s ^ 1);
        s
    });
    w.slots[set][lane()].store(v.to_bits(), Ordering::Relaxed);
    w.barrier.wait(block().poisoned());
    f32::from_bits(w.slots[set][src].load(Ordering::Relaxed))
}

/// # Safety
/// The whole warp calls it.
pub unsafe fn shfl_xor(v: f32, lane_mask: u32) -> f32 {
    let src = lane() ^ (lane_mask as usize & 31);
    exchange(v, src)
}

/// # Safety
/// The whole warp calls it.
pub unsafe fn shfl_idx(v: f32, src_lane: u32) -> f32 {
    exchange(v, src_lane as usize & 31)
}

/// # Safety
/// The whole warp calls it.
pub unsafe fn sync_warp() {
    warp().barrier.wait(block().poisoned());
}
