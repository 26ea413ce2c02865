//! Dynamic shared memory: the block's words, every access bounds-checked.

use super::runtime::block;
use std::sync::atomic::Ordering;

/// The shared address of the first byte (not 0, so that an address below it shows).
const BASE: u32 = 0x400;

pub fn base() -> u32 {
    BASE
}

fn word(addr: u32) -> usize {
    assert!(addr >= BASE && addr % 4 == 0, "shared address {addr:#x}: below the window or not 4-byte aligned");
    let i = ((addr - BASE) / 4) as usize;
    let len = block().shared.len();
    assert!(i < len, "shared access at byte {} outside the launch's {} bytes of dynamic shared memory", addr - BASE, 4 * len);
    i
}

fn put(addr: u32, v: u32) {
    block().shared[word(addr)].store(v, Ordering::Relaxed);
}

fn get(addr: u32) -> u32 {
    block().shared[word(addr)].load(Ordering::Relaxed)
}

// SAFETY (every function): the shared accesses are checked; the global reads are forwarded to
// the caller.
pub unsafe fn store_f32(addr: u32, v: f32) {
    put(addr, v.to_bits())
}
pub unsafe fn store_u32(addr: u32, v: u32) {
    put(addr, v)
}
pub unsafe fn load_f32(addr: u32) -> f32 {
    f32::from_bits(get(addr))
}
pub unsafe fn load_u32(addr: u32) -> u32 {
    get(addr)
}
pub unsafe fn load_f32x2(addr: u32) -> (f32, f32) {
    assert!(addr % 8 == 0, "ld.shared.v2 at {addr:#x}: not 8-byte aligned");
    (f32::from_bits(get(addr)), f32::from_bits(get(addr + 4)))
}
pub unsafe fn load_f32x4(addr: u32) -> [f32; 4] {
    assert!(addr % 16 == 0, "ld.shared.v4 at {addr:#x}: not 16-byte aligned");
    core::array::from_fn(|i| f32::from_bits(get(addr + 4 * i as u32)))
}
pub unsafe fn copy_async_4(dst: u32, src: *const u32) {
    put(dst, unsafe { src.read_unaligned() })
}
pub unsafe fn copy_async_8(dst: u32, src: *const u64) {
    assert!(dst % 8 == 0, "cp.async 8 to {dst:#x}: not 8-byte aligned");
    let v = unsafe { src.read_unaligned() };
    put(dst, v as u32);
    put(dst + 4, (v >> 32) as u32);
}
pub unsafe fn copy_async_16(dst: u32, src: *const u8) {
    assert!(dst % 16 == 0, "cp.async 16 to {dst:#x}: not 16-byte aligned");
    for i in 0..4 {
        put(dst + 4 * i, unsafe { (src as *const u32).add(i as usize).read_unaligned() });
    }
}
pub fn wait_async_copies() {}
pub fn commit_async_copies() {}
pub fn wait_async_groups<const N: u32>() {}
pub fn generic(_addr: u32) -> *mut u8 {
    panic!("shared::generic is not emulated")
}
