//! Helpers shared by the CPU test binaries.
#![allow(dead_code)]

use rgdn::memory::HostMemory;
use rgdn::tensor::{DType, Tensor};

/// A contiguous F32 tensor in its own buffer holding `values` (logical order).
pub fn f32_tensor(mem: &mut HostMemory, ne: [usize; 4], values: &[f32]) -> Tensor {
    let t = mem.alloc_tensor(DType::F32, ne);
    mem.fill_f32(&t, values).unwrap();
    t
}

/// `RGDN_FULL_TESTS=1` (`scripts/full-tests.sh`): the long runs (the switch `rgdn::suite::full_tests`
/// reads too); otherwise `cargo test` runs the same checks with fewer cases.
pub fn full_tests() -> bool {
    std::env::var("RGDN_FULL_TESTS").is_ok_and(|v| v == "1")
}

/// Asserts two floats are bitwise equal, printing both as hex when not.
#[track_caller]
pub fn assert_bits(got: f32, want: f32) {
    assert!(got.to_bits() == want.to_bits(), "got {got:e} ({:#010x}), want {want:e} ({:#010x})", got.to_bits(), want.to_bits());
}
