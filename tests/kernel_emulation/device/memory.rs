//! Global memory: the host addresses the kernels compute, read and written as they are.

// SAFETY (every function): forwarded to the caller — the address is one a kernel may access.
pub unsafe fn load_nc_u32(p: *const u32) -> u32 {
    unsafe { p.read_unaligned() }
}
pub unsafe fn load_nc_f32(p: *const f32) -> f32 {
    unsafe { p.read_unaligned() }
}
pub unsafe fn prefetch_l2<T>(_p: *const T) {}
pub unsafe fn prefetch_l1<T>(_p: *const T) {}
pub unsafe fn load_nc_f32_at(base: *const f32, index: u32) -> f32 {
    unsafe { base.add(index as usize).read_unaligned() }
}
pub unsafe fn load_nc_f32x4_stride32(base: *const f32, index: u32) -> [f32; 4] {
    core::array::from_fn(|r| unsafe { base.add(index as usize + 32 * r).read_unaligned() })
}
pub unsafe fn store_f32_at(base: *mut f32, index: u32, x: f32) {
    unsafe { base.add(index as usize).write_unaligned(x) }
}
pub unsafe fn store_f32x4_stride32(base: *mut f32, index: u32, x: &[f32; 4]) {
    for (r, v) in x.iter().enumerate() {
        unsafe { base.add(index as usize + 32 * r).write_unaligned(*v) }
    }
}
pub unsafe fn load_nc_u32_at(base: *const u32, index: u32) -> u32 {
    unsafe { base.add(index as usize).read_unaligned() }
}
pub unsafe fn load_u32_at(base: *const u32, index: u32) -> u32 {
    unsafe { base.add(index as usize).read_unaligned() }
}
pub unsafe fn store_u32_at(base: *mut u32, index: u32, x: u32) {
    unsafe { base.add(index as usize).write_unaligned(x) }
}
pub unsafe fn store_u32(p: *mut u32, x: u32) {
    unsafe { p.write_unaligned(x) }
}
