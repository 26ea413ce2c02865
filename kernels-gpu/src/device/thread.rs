//! Thread, block and grid indices (PTX special registers) and block barriers.
//!
//! CUDA's execution model: a launch is a grid of blocks; each block holds up to 1024 threads
//! that share a multiprocessor, shared memory and barriers; threads of a block are grouped in
//! warps of 32 consecutive lanes that execute together. All indices here are u32 because the
//! hardware registers are 32-bit and never negative.

use core::arch::nvptx;

macro_rules! special_register {
    ($(#[$doc:meta] $name:ident => $intrinsic:ident;)*) => {$(
        #[$doc]
        #[inline(always)]
        pub fn $name() -> u32 {
            // SAFETY: reading a special register has no preconditions; the value is never
            // negative, so the cast from the intrinsic's i32 is lossless.
            unsafe { nvptx::$intrinsic() as u32 }
        }
    )*};
}

special_register! {
    /// `%tid.x`: this thread's x index within its block.
    thread_idx_x => _thread_idx_x;
    /// `%tid.y`: this thread's y index within its block.
    thread_idx_y => _thread_idx_y;
    /// `%tid.z`: this thread's z index within its block.
    thread_idx_z => _thread_idx_z;
    /// `%ctaid.x`: this block's x index within the grid.
    block_idx_x => _block_idx_x;
    /// `%ctaid.y`: this block's y index within the grid.
    block_idx_y => _block_idx_y;
    /// `%ctaid.z`: this block's z index within the grid.
    block_idx_z => _block_idx_z;
    /// `%ntid.x`: the block's x size.
    block_dim_x => _block_dim_x;
    /// `%ntid.y`: the block's y size.
    block_dim_y => _block_dim_y;
    /// `%nctaid.x`: the grid's x size.
    grid_dim_x => _grid_dim_x;
    /// `%nctaid.y`: the grid's y size.
    grid_dim_y => _grid_dim_y;
    /// `%nctaid.z`: the grid's z size.
    grid_dim_z => _grid_dim_z;
}

/// Lane index within the warp (0..32) for blocks whose x size is a multiple of 32.
#[inline(always)]
pub fn lane_id() -> u32 {
    thread_idx_x() % 32
}

/// [speed] `%laneid`, read anew at every call (the `asm!` is not `pure`, so the compiler neither
/// merges two reads nor moves one out of a loop): what a loop body derives from it (shared
/// offsets, say) is computed in the body instead of living in registers across the loop.
#[inline(always)]
pub fn lane_id_here() -> u32 {
    let r: u32;
    // SAFETY: reads a special register; touches no memory.
    unsafe { core::arch::asm!("mov.u32 {r}, %laneid;", r = out(reg32) r, options(nomem, nostack, preserves_flags)) };
    r
}

/// [speed] `%tid.y`, read anew at every call, as [`lane_id_here`].
#[inline(always)]
pub fn thread_idx_y_here() -> u32 {
    let r: u32;
    // SAFETY: reads a special register; touches no memory.
    unsafe { core::arch::asm!("mov.u32 {r}, %tid.y;", r = out(reg32) r, options(nomem, nostack, preserves_flags)) };
    r
}

/// `bar.sync 0`: every thread of the block waits here until all have arrived; orders the
/// block's shared-memory accesses before the barrier against those after it.
///
/// # Safety
/// Every thread of the block must reach this barrier (it must not be inside divergent control
/// flow that some threads skip), or the block deadlocks.
#[inline(always)]
pub unsafe fn sync_threads() {
    // SAFETY: forwarded to the caller (all threads of the block reach this point).
    unsafe { nvptx::_syncthreads() }
}
