//! [test] The kernel crate's `device` module on the host: the same functions, run by one OS thread
//! a GPU thread (`runtime`), so that the kernels' own source runs on the CPU. Every primitive
//! keeps its GPU meaning where a kernel can observe it:
//! - the special registers come from the thread's launch coordinates;
//! - `bar.sync` and the warp shuffles are barriers of the block's and the warp's threads;
//! - shared memory is the block's byte buffer, bounds-checked on every access (an access
//!   outside the launch's dynamic shared memory panics: what memcheck reports on the GPU);
//!   `cp.async` copies when issued, so the wait has nothing left to do;
//! - global memory is host memory, read and written through the raw addresses the kernels
//!   compute;
//! - the arithmetic is `.rn.ftz` on the host's IEEE floats and the MUFU instructions are the
//!   CPU reference's (`reference::math::exact_mufu`), so the results compare bit for bit with
//!   the CPU reference's.
//! - a cooperative launch (the layer step) runs every block at once, its readiness flags and
//!   counters host atomics with the PTX operations' orderings (`grid`); other launches run
//!   their blocks one after another.
//! Timing and the weaker corners of the memory model (what a weak or `.nc` load may return
//! before an acquire) are not modelled: host loads see every store that happened before them.

#![allow(dead_code)]

pub mod runtime;

pub mod grid;
pub mod half;
pub mod math;
pub mod memory;
pub mod shared;
pub mod thread;
pub mod warp_shuffle;

#[path = "../../../kernels-gpu/src/device/warp.rs"]
pub mod warp;

pub mod load {
    /// `ld.global.nc.v2.f32`.
    ///
    /// # Safety
    /// Two readable floats at `p`.
    pub unsafe fn nc_f32x2(p: *const f32) -> (f32, f32) {
        // SAFETY: forwarded to the caller.
        unsafe { (p.read_unaligned(), p.add(1).read_unaligned()) }
    }
    /// `ld.global.nc.u32`.
    ///
    /// # Safety
    /// A readable u32 at `p`.
    pub unsafe fn nc_u32(p: *const u32) -> u32 {
        // SAFETY: forwarded to the caller.
        unsafe { p.read_unaligned() }
    }
    /// A coherent load (`ld.relaxed.gpu`).
    ///
    /// # Safety
    /// A readable float at `p`.
    pub unsafe fn coherent_f32(p: *const f32) -> f32 {
        // SAFETY: forwarded to the caller.
        unsafe { p.read_unaligned() }
    }
}

/// `trap`: ends the emulated launch with a panic.
pub fn trap() -> ! {
    panic!("trap: the kernel aborted the launch")
}
