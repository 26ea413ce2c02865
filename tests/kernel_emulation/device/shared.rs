//! Dynamic shared memory: the block's words, every access bounds-checked.

use super::runtime::{Landing, block};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;

/// The shared address of the first byte (not 0, so that an address below it shows).
const BASE: u32 = 0x400;

pub fn base() -> u32 {
    BASE
}

fn word(addr: u32) -> usize {
    assert!(addr >= BASE && addr % 4 == 0, "shared address {addr:#x}: below the window or not 4-byte aligned");
    let i = ((addr - BASE) / 4) as usize;
    let len = block().words();
    assert!(i < len, "shared access at byte {} outside the launch's {} bytes of dynamic shared memory", addr - BASE, 4 * len);
    i
}

fn put(addr: u32, v: u32) {
    block().word(word(addr)).store(v, Ordering::Relaxed);
}

fn get(addr: u32) -> u32 {
    block().word(word(addr)).load(Ordering::Relaxed)
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
    issue(dst, unsafe { src.read_unaligned() })
}
pub unsafe fn copy_async_8(dst: u32, src: *const u64) {
    assert!(dst % 8 == 0, "cp.async 8 to {dst:#x}: not 8-byte aligned");
    let v = unsafe { src.read_unaligned() };
    issue(dst, v as u32);
    issue(dst + 4, (v >> 32) as u32);
}
pub unsafe fn copy_async_16(dst: u32, src: *const u8) {
    assert!(dst % 16 == 0, "cp.async 16 to {dst:#x}: not 16-byte aligned");
    for i in 0..4 {
        issue(dst + 4 * i, unsafe { (src as *const u32).add(i as usize).read_unaligned() });
    }
}

thread_local! {
    /// This thread's copies not landed yet (`Landing::AtWait`): the committed groups, oldest
    /// first, and the group still open. The source is read at the issue.
    static IN_FLIGHT: RefCell<(VecDeque<Vec<(u32, u32)>>, Vec<(u32, u32)>)> = const { RefCell::new((VecDeque::new(), Vec::new())) };
}

/// One word of a `cp.async` copy: stored now, or queued until a wait covers it (the block's
/// `Landing`). The address is checked at the issue either way.
fn issue(dst: u32, v: u32) {
    word(dst);
    match block().landing {
        Landing::AtIssue => put(dst, v),
        Landing::AtWait => IN_FLIGHT.with(|f| f.borrow_mut().1.push((dst, v))),
    }
}

fn land(group: Vec<(u32, u32)>) {
    for (dst, v) in group {
        put(dst, v);
    }
}

/// `cp.async.wait_all`: every copy of this thread lands (committed or not).
pub fn wait_async_copies() {
    let groups = IN_FLIGHT.with(|f| {
        let mut f = f.borrow_mut();
        let open = std::mem::take(&mut f.1);
        let mut all: Vec<_> = f.0.drain(..).collect();
        all.push(open);
        all
    });
    groups.into_iter().for_each(land);
}
/// `cp.async.commit_group`: the open copies become a group.
pub fn commit_async_copies() {
    IN_FLIGHT.with(|f| {
        let mut f = f.borrow_mut();
        let open = std::mem::take(&mut f.1);
        f.0.push_back(open);
    });
}
/// `cp.async.wait_group N`: every committed group but the newest N lands.
pub fn wait_async_groups<const N: u32>() {
    loop {
        let oldest = IN_FLIGHT.with(|f| {
            let mut f = f.borrow_mut();
            if f.0.len() > N as usize { f.0.pop_front() } else { None }
        });
        match oldest {
            Some(group) => land(group),
            None => break,
        }
    }
}

/// A new thread starts with nothing in flight.
pub fn forget_copies() {
    IN_FLIGHT.with(|f| *f.borrow_mut() = (VecDeque::new(), Vec::new()));
}

/// A thread's end: a copy never waited for would land nowhere the kernel reads — a bug.
pub fn check_no_copies_in_flight() {
    let left = IN_FLIGHT.with(|f| {
        let f = f.borrow();
        f.0.iter().map(Vec::len).sum::<usize>() + f.1.len()
    });
    assert!(left == 0, "the thread ended with {left} words of cp.async copies it never waited for");
}

/// The block's shared byte at `addr` as an ordinary pointer (`cvta.shared`). What is read or
/// written through it is not bounds-checked: the one kernel that uses it, the batched layer
/// step, keeps its parameters' copy and schedule walk there, in the first 1024 bytes (checked
/// here to exist).
pub fn generic(addr: u32) -> *mut u8 {
    let i = word(addr);
    assert!(block().words() * 4 >= 1024, "shared::generic: fewer than the 1024 bytes the parameters' copy takes");
    (block().shared.as_ptr() as *mut u8).wrapping_add(4 * i)
}
