//! Every wrapper refuses bad input with a typed error before anything runs (CPU, no GPU).

mod common;

use common::f32_tensor;
use rgdn::Error;
use rgdn::memory::HostMemory;
use rgdn::ops::{L2Norm, Op, SsmConv};
use rgdn::reference::math::ExactMufu;
use rgdn::tensor::{BufferId, DType, Layout, Tensor};

fn conv_op(mem: &mut HostMemory, d_conv: usize, channels: usize, tokens: usize) -> SsmConv {
    let cols = d_conv - 1 + tokens;
    let conv_input = f32_tensor(mem, [cols, channels, 1, 1], &vec![1.0; cols * channels]);
    let weight = f32_tensor(mem, [d_conv, channels, 1, 1], &vec![0.5; d_conv * channels]);
    let dst = mem.alloc_tensor(DType::F32, [channels, tokens, 1, 1]);
    SsmConv { conv_input, weight, bias: None, dst, apply_silu: true }
}

#[test]
fn a_valid_conv_passes() {
    let mut mem = HostMemory::new();
    let op = conv_op(&mut mem, 4, 8, 3);
    op.validate(&mem).unwrap();
    op.reference(&mut mem, &mut ExactMufu).unwrap();
}

#[test]
fn conv_refuses_unsupported_widths() {
    let mut mem = HostMemory::new();
    let op = conv_op(&mut mem, 6, 8, 3);
    assert!(matches!(op.validate(&mem), Err(Error::Unsupported { op: "SSM_CONV", .. })));
    // The reference refuses too instead of computing something.
    assert!(matches!(op.reference(&mut mem, &mut ExactMufu), Err(Error::Unsupported { .. })));
}

#[test]
fn conv_refuses_inconsistent_shapes() {
    let mut mem = HostMemory::new();
    let mut op = conv_op(&mut mem, 4, 8, 3);
    op.dst = mem.alloc_tensor(DType::F32, [8, 4, 1, 1]);
    assert!(matches!(op.validate(&mem), Err(Error::Shape { arg: "dst", .. })));
    let mut op = conv_op(&mut mem, 4, 8, 3);
    op.conv_input = mem.alloc_tensor(DType::F32, [2, 8, 1, 1]); // fewer columns than taps
    assert!(matches!(op.validate(&mem), Err(Error::Shape { arg: "conv_input", .. })));
    let mut op = conv_op(&mut mem, 4, 8, 3);
    op.bias = Some(mem.alloc_tensor(DType::F32, [7, 1, 1, 1]));
    assert!(matches!(op.validate(&mem), Err(Error::Shape { arg: "bias", .. })));
}

#[test]
fn conv_refuses_empty_tensors() {
    let mut mem = HostMemory::new();
    let mut op = conv_op(&mut mem, 4, 8, 3);
    op.weight = mem.alloc_tensor(DType::F32, [4, 0, 1, 1]);
    assert!(matches!(op.validate(&mem), Err(Error::Empty { arg: "weight", .. })));
}

#[test]
fn conv_refuses_wrong_types_strides_and_bounds() {
    let mut mem = HostMemory::new();
    let mut op = conv_op(&mut mem, 4, 8, 3);
    op.weight.layout.dtype = DType::F16;
    assert!(matches!(op.validate(&mem), Err(Error::DType { arg: "weight", got: DType::F16, .. })));

    let mut op = conv_op(&mut mem, 4, 8, 3);
    op.dst.layout.offset += 4; // now reaches one float past the end of its buffer
    assert!(matches!(op.validate(&mem), Err(Error::OutOfBounds { arg: "dst", .. })));

    let mut op = conv_op(&mut mem, 4, 8, 3);
    op.dst.layout.offset += 2; // not element-aligned
    assert!(matches!(op.validate(&mem), Err(Error::Stride { arg: "dst", .. })));

    let mut op = conv_op(&mut mem, 4, 8, 3);
    op.dst.buffer = BufferId(999);
    assert!(matches!(op.validate(&mem), Err(Error::Invalid { op: "SSM_CONV", .. })));
}

#[test]
fn conv_refuses_rows_that_are_not_contiguous() {
    let mut mem = HostMemory::new();
    let mut op = conv_op(&mut mem, 3, 4, 2);
    let buf = mem.alloc(4 * 2 * 4 * 4);
    op.conv_input = Tensor::new(buf, Layout { dtype: DType::F32, offset: 0, ne: [4, 4, 1, 1], nb: [8, 32, 128, 128] });
    assert!(matches!(op.validate(&mem), Err(Error::Stride { arg: "conv_input", .. })));
}

#[test]
fn conv_refuses_an_output_that_overlaps_its_input() {
    let mut mem = HostMemory::new();
    let mut op = conv_op(&mut mem, 4, 8, 3);
    op.dst = op.conv_input.view([8, 3, 1, 1], [4, 32, 96, 96], 0);
    assert!(matches!(op.validate(&mem), Err(Error::Aliasing { a: "dst", b: "conv_input", .. })));
}

#[test]
fn ops_never_write_index_buffers() {
    let mut mem = HostMemory::new();
    let mut op = conv_op(&mut mem, 4, 2, 1);
    let idx = mem.alloc_indices(&[0, 1]);
    op.dst = Tensor::new(idx.buffer, Layout::contiguous(DType::F32, [2, 1, 1, 1]));
    assert!(matches!(op.validate(&mem), Err(Error::Invalid { .. })));
}

fn l2_op(mem: &mut HostMemory, cols: usize) -> L2Norm {
    let src = f32_tensor(mem, [cols, 2, 1, 1], &vec![1.0; 2 * cols]);
    let dst = mem.alloc_tensor(DType::F32, [cols, 2, 1, 1]);
    L2Norm { src, dst, eps: 1e-6 }
}

#[test]
fn l2_norm_accepts_in_place_and_refuses_partial_overlap() {
    let mut mem = HostMemory::new();
    let mut op = l2_op(&mut mem, 8);
    op.dst = op.src;
    op.validate(&mem).unwrap();
    op.dst = op.src.view([8, 2, 1, 1], op.src.layout.nb, 4);
    op.src = op.src.view([8, 2, 1, 1], op.src.layout.nb, 0);
    assert!(matches!(op.validate(&mem), Err(Error::Aliasing { .. }) | Err(Error::OutOfBounds { .. })));
    let mut op = l2_op(&mut mem, 8);
    op.dst = op.src.view([4, 2, 1, 1], op.src.layout.nb, 4);
    op.src = op.src.view([4, 2, 1, 1], op.src.layout.nb, 0);
    assert!(matches!(op.validate(&mem), Err(Error::Aliasing { a: "dst", b: "src", .. })));
}

#[test]
fn l2_norm_refuses_long_rows_bad_eps_and_shape_mismatch() {
    let mut mem = HostMemory::new();
    let op = l2_op(&mut mem, 1024);
    assert!(matches!(op.validate(&mem), Err(Error::Unsupported { op: "L2_NORM", .. })));
    let mut op = l2_op(&mut mem, 8);
    op.eps = f32::NAN;
    assert!(matches!(op.validate(&mem), Err(Error::Invalid { .. })));
    let mut op = l2_op(&mut mem, 8);
    op.dst = mem.alloc_tensor(DType::F32, [8, 3, 1, 1]);
    assert!(matches!(op.validate(&mem), Err(Error::Shape { arg: "dst", .. })));
}
