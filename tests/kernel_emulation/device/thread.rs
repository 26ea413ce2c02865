//! Special registers and `bar.sync`.

use super::runtime::{block, this};

pub fn thread_idx_x() -> u32 {
    this().tid[0]
}
pub fn thread_idx_y() -> u32 {
    this().tid[1]
}
pub fn thread_idx_z() -> u32 {
    this().tid[2]
}
pub fn block_idx_x() -> u32 {
    this().bid[0]
}
pub fn block_idx_y() -> u32 {
    this().bid[1]
}
pub fn block_idx_z() -> u32 {
    this().bid[2]
}
pub fn block_dim_x() -> u32 {
    this().bdim[0]
}
pub fn block_dim_y() -> u32 {
    this().bdim[1]
}
pub fn grid_dim_x() -> u32 {
    this().gdim[0]
}
pub fn grid_dim_y() -> u32 {
    this().gdim[1]
}
pub fn grid_dim_z() -> u32 {
    this().gdim[2]
}
pub fn lane_id() -> u32 {
    thread_idx_x() % 32
}
pub fn lane_id_here() -> u32 {
    let t = this();
    (t.tid[0] + t.bdim[0] * (t.tid[1] + t.bdim[1] * t.tid[2])) % 32
}
pub fn thread_idx_y_here() -> u32 {
    thread_idx_y()
}
/// `bar.sync 0`.
///
/// # Safety
/// Every thread of the block arrives.
pub unsafe fn sync_threads() {
    let b = block();
    b.barrier.wait(b.poisoned());
}
