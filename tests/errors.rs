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

// [validation] Regressions of issue 9: layout arithmetic that wrapped, outputs whose elements
// share bytes, layer shapes whose buffers cannot exist, a CLI that panicked.

mod overflow {
    use rgdn::Error;
    use rgdn::memory::HostMemory;
    use rgdn::ops::{Binary, BinaryKind, ConcatDim0, Cpy, CpySnapshots, GatedDeltaNet, L2Norm, MulMatVec, Op, Precision};
    use rgdn::reference::math::ExactMufu;
    use rgdn::tensor::{DType, Layout, Tensor};

    /// Seen on the H200: a CPY whose destination offset is 2^64 − 4 bytes passed the range check
    /// (the end wrapped to a small number) and the launch wrote outside the buffer.
    #[test]
    fn cpy_destination_at_offset_2_pow_64_minus_4_is_an_overflow() {
        let mut mem = HostMemory::new();
        let src = mem.alloc_tensor(DType::F32, [4, 1, 1, 1]);
        let mut dst = mem.alloc_tensor(DType::F32, [4, 1, 1, 1]);
        dst.layout.offset = usize::MAX - 3;
        let op = Cpy { src, dst };
        assert!(matches!(op.validate(&mem), Err(Error::Overflow { op: "CPY", arg: "dst", .. })), "{:?}", op.validate(&mem));
        // The reference refuses as well instead of writing anywhere.
        assert!(matches!(op.reference(&mut mem, &mut ExactMufu), Err(Error::Overflow { .. })));
    }

    /// A wrapped "negative" stride (−4 as usize) on the CPU reference.
    #[test]
    fn negative_looking_strides_are_an_overflow() {
        let mut mem = HostMemory::new();
        let buf = mem.alloc_tensor(DType::F32, [8, 1, 1, 1]);
        let src =
            Tensor::new(buf.buffer, Layout { dtype: DType::F32, offset: 28, ne: [8, 1, 1, 1], nb: [4usize.wrapping_neg(), 32, 32, 32] });
        let dst = mem.alloc_tensor(DType::F32, [8, 1, 1, 1]);
        let op = Cpy { src, dst };
        assert!(matches!(op.validate(&mem), Err(Error::Overflow { arg: "src", .. })));
        assert!(op.reference(&mut mem, &mut ExactMufu).is_err());
    }

    /// Seen on the H200: a snapshot copy with `first_row = usize::MAX`: the last row wrapped
    /// into the cache.
    #[test]
    fn snapshot_copy_with_first_row_usize_max_is_refused() {
        let mut mem = HostMemory::new();
        let conv_input = mem.alloc_tensor(DType::F32, [6, 2, 2, 1]);
        let cache = mem.alloc_tensor(DType::F32, [6, 6, 1, 1]);
        for n_slots in [1, 2] {
            let op = CpySnapshots { conv_input, cache, d_conv: 4, first_row: usize::MAX, group_stride: 3, n_slots };
            assert!(matches!(op.validate(&mem), Err(Error::IndexOutOfRange { arg: "cache", .. })), "{:?}", op.validate(&mem));
            assert!(op.reference(&mut mem, &mut ExactMufu).is_err());
        }
        // A sequence count that makes n_slots·n_s overflow (zero-stride conv_input).
        let conv_input = conv_input.view([6, 2, usize::MAX, 1], [4, 24, 0, 0], 0);
        let op = CpySnapshots { conv_input, cache, d_conv: 4, first_row: 0, group_stride: usize::MAX, n_slots: 17 };
        assert!(op.validate(&mem).is_err());
    }

    /// CONCAT's `na + nb` with a huge (zero-stride) `a`.
    #[test]
    fn concat_column_sum_overflow_is_typed() {
        let mut mem = HostMemory::new();
        let a = mem.alloc_tensor(DType::F32, [1, 1, 1, 1]).view([usize::MAX, 1, 1, 1], [0, 4, 4, 4], 0);
        let b = mem.alloc_tensor(DType::F32, [3, 1, 1, 1]);
        let dst = mem.alloc_tensor(DType::F32, [4, 1, 1, 1]);
        let op = ConcatDim0 { a, b, dst };
        assert!(matches!(op.validate(&mem), Err(Error::Overflow { op: "CONCAT", arg: "dst", .. })), "{:?}", op.validate(&mem));
    }

    /// GATED_DELTA_NET's D·D·H_v with a huge (zero-stride) head count.
    #[test]
    fn gated_delta_net_state_size_overflow_is_typed() {
        let mut mem = HostMemory::new();
        let h = 1usize << 62;
        let zero_heads =
            |mem: &mut HostMemory, ne0: usize| mem.alloc_tensor(DType::F32, [ne0, 1, 1, 1]).view([ne0, h, 1, 1], [4, 0, 0, 0], 0);
        let q = mem.alloc_tensor(DType::F32, [128, 1, 1, 1]);
        let op = GatedDeltaNet {
            q,
            k: mem.alloc_tensor(DType::F32, [128, 1, 1, 1]),
            v: zero_heads(&mut mem, 128),
            g: zero_heads(&mut mem, 1),
            beta: zero_heads(&mut mem, 1),
            state_in: mem.alloc_tensor(DType::F32, [128, 128, 1, 1]).view([128, 128, h, 1], [4, 512, 0, 0], 0),
            out: mem.alloc_tensor(DType::F32, [128, 1, 1, 1]),
            states: mem.alloc_tensor(DType::F32, [128 * 128, 1, 1, 1]),
        };
        assert!(op.validate(&mem).is_err());
        // The element count itself does not fit: a typed overflow, not a wrapped product.
        let mut huge = op.clone();
        huge.v = mem.alloc_tensor(DType::F32, [128, 1, 1, 1]).view([128, usize::MAX, 4, 1], [4, 0, 0, 0], 0);
        assert!(matches!(huge.validate(&mem), Err(Error::Overflow { arg: "v", .. })), "{:?}", huge.validate(&mem));
    }

    /// Outputs whose elements share bytes: ADD, SSM_CONV, L2_NORM and MUL_MAT_VEC used to accept
    /// them (nondeterministic results on the H200). Now every output goes through one check.
    #[test]
    fn zero_stride_outputs_are_refused_by_every_op() {
        let mut mem = HostMemory::new();
        let a = mem.alloc_tensor(DType::F32, [4, 3, 1, 1]);
        let b = mem.alloc_tensor(DType::F32, [4, 1, 1, 1]);
        let dst = mem.alloc_tensor(DType::F32, [4, 1, 1, 1]).view([4, 3, 1, 1], [4, 0, 0, 0], 0);
        let add = Binary { kind: BinaryKind::Add, a, b, dst };
        assert!(matches!(add.validate(&mem), Err(Error::Aliasing { op: "ADD", a: "dst", b: "dst", .. })), "{:?}", add.validate(&mem));

        let l2 = L2Norm { src: a, dst, eps: 1e-6 };
        assert!(matches!(l2.validate(&mem), Err(Error::Aliasing { op: "L2_NORM", a: "dst", b: "dst", .. })));

        let weight = mem.alloc_tensor(DType::F32, [8, 4, 1, 1]);
        let input = mem.alloc_tensor(DType::F32, [8, 3, 1, 1]);
        let mmv = MulMatVec { weight, input, dst, precision: Precision::Default };
        assert!(matches!(mmv.validate(&mem), Err(Error::Aliasing { op: "MUL_MAT_VEC", a: "dst", b: "dst", .. })));
    }

    #[test]
    fn ssm_conv_with_a_zero_stride_destination_is_refused() {
        let mut mem = HostMemory::new();
        let mut op = super::conv_op(&mut mem, 4, 8, 3);
        // Every token's row on the same bytes.
        op.dst = mem.alloc_tensor(DType::F32, [8, 1, 1, 1]).view([8, 3, 1, 1], [4, 0, 0, 0], 0);
        assert!(matches!(op.validate(&mem), Err(Error::Aliasing { op: "SSM_CONV", a: "dst", b: "dst", .. })), "{:?}", op.validate(&mem));
        // Channels interleaved with tokens (stride 4 over a 32-byte row).
        op.dst = mem.alloc_tensor(DType::F32, [8, 3, 1, 1]).view([8, 3, 1, 1], [4, 4, 12, 12], 0);
        assert!(matches!(op.validate(&mem), Err(Error::Aliasing { .. })));
    }

    #[test]
    fn impossible_allocations_are_typed_errors_not_aborts() {
        let mut mem = HostMemory::with_budget(1 << 20);
        assert!(matches!(mem.try_alloc(1 << 21), Err(Error::OutOfMemory { requested: 2097152, budget: 1048576, .. })));
        assert!(matches!(mem.try_alloc_tensor(DType::F32, [1 << 40, 1 << 30, 1, 1]), Err(Error::Overflow { .. })));
        // 256 GiB: representable, far over the budget.
        assert!(matches!(mem.try_alloc_tensor(DType::F32, [1 << 36, 1, 1, 1]), Err(Error::OutOfMemory { .. })));
        let t = mem.try_alloc_tensor(DType::F32, [1024, 1, 1, 1]).unwrap();
        assert_eq!(mem.used_bytes(), 4096);
        assert_eq!(mem.bytes(t.buffer).len(), 4096);
    }
}

mod layer {
    use rgdn::Error;
    use rgdn::graph::layer::unfused_ops;
    use rgdn::layer::{GdnShape, LayerInit, LayerTensors, Step};
    use rgdn::memory::HostMemory;
    use rgdn::ops::Precision;
    use rgdn::tensor::DType;

    const SMALL: GdnShape = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 128, d_conv: 4, eps: 1e-6 };

    fn alloc(mem: &mut HostMemory, shape: &GdnShape, step: &Step) -> rgdn::Result<LayerTensors> {
        LayerTensors::alloc(mem, shape, step, &LayerInit::default())
    }

    #[test]
    fn shapes_whose_caches_overflow_are_typed_errors() {
        let mut mem = HostMemory::new();
        let huge_heads = GdnShape { n_v_heads: 1 << 60, ..SMALL };
        assert!(matches!(huge_heads.validate(), Err(Error::Overflow { op: "GDN_LAYER", .. })));
        assert!(matches!(alloc(&mut mem, &huge_heads, &Step::new(1, 0)), Err(Error::Overflow { .. })));
        let huge_k = GdnShape { n_k_heads: usize::MAX / 2, ..SMALL };
        assert!(matches!(alloc(&mut mem, &huge_k, &Step::new(1, 0)), Err(Error::Overflow { .. })));
        let huge_embd = GdnShape { n_embd: 1 << 62, ..SMALL };
        assert!(matches!(alloc(&mut mem, &huge_embd, &Step::new(1, 0)), Err(Error::Overflow { .. })));
        // Cells whose row count M·(1 + R) overflows, or exceeds s_copy's I32 range.
        let step = Step { cells: usize::MAX / 4, ..Step::new(1, 16) };
        assert!(matches!(step.validate(), Err(Error::Overflow { op: "GDN_LAYER", .. })));
        let step = Step { cells: 1 << 31, ..Step::new(1, 0) };
        assert!(matches!(step.validate(), Err(Error::Unsupported { op: "GDN_LAYER", .. })));
        assert_eq!(mem.used_bytes(), 0, "nothing was allocated for refused shapes");
    }

    /// Representable but far too big (≈ 270 GiB of ssm cache): the budget refuses it before any
    /// allocation, instead of an abort inside a `vec!`.
    #[test]
    fn a_layer_over_the_memory_budget_is_refused_before_allocating() {
        let mut mem = HostMemory::with_budget(1 << 30);
        let step = Step { cells: 8192, ..Step::new(4, 16) };
        let r = alloc(&mut mem, &GdnShape::QWEN35_9B, &step);
        assert!(matches!(r, Err(Error::OutOfMemory { .. })), "{r:?}");
        assert_eq!((mem.n_buffers(), mem.used_bytes()), (0, 0));
    }

    #[test]
    fn unfused_ops_on_tensors_of_another_shape_are_typed_errors() {
        let mut mem = HostMemory::new();
        let step = Step::new(4, 3);
        let t = alloc(&mut mem, &SMALL, &step).unwrap();
        assert!(unfused_ops(&t, &SMALL, &step, Precision::Default).is_ok());
        // The tensors of one shape under another shape or step.
        let other = GdnShape { n_v_heads: 4, ..SMALL };
        assert!(matches!(unfused_ops(&t, &other, &step, Precision::Default), Err(Error::Shape { op: "GDN_LAYER", .. })));
        assert!(matches!(unfused_ops(&t, &SMALL, &Step::new(5, 3), Precision::Default), Err(Error::Shape { .. })));
        // Non-contiguous tensors (these used to hit `expect("contiguous")` or divide by a zero stride).
        let mut z = t.clone();
        z.conv_out.layout.nb = [4, 0, 0, 0];
        assert!(matches!(unfused_ops(&z, &SMALL, &step, Precision::Default), Err(Error::Stride { arg: "conv_out", .. })));
        let mut z = t.clone();
        z.gate = z.gate.transpose();
        assert!(unfused_ops(&z, &SMALL, &step, Precision::Default).is_err());
        let mut z = t.clone();
        z.ssm_state.layout.nb[1] = 4;
        assert!(unfused_ops(&z, &SMALL, &step, Precision::Default).is_err());
        // Wrong types, and offsets near 2^64 (views built from them would wrap).
        let mut z = t.clone();
        z.beta_weight.layout.dtype = DType::F16;
        assert!(matches!(unfused_ops(&z, &SMALL, &step, Precision::Default), Err(Error::DType { arg: "beta_weight", .. })));
        // A view whose offset would pass 2^64 is an overflow when built (the k heads start
        // 4·H_k·D bytes into conv_out); one at offset 0 of such a tensor is built, and refused
        // by its op's validation.
        let mut z = t.clone();
        z.conv_out.layout.offset = usize::MAX - 8;
        assert!(matches!(unfused_ops(&z, &SMALL, &step, Precision::Default), Err(Error::Overflow { arg: "conv_out", .. })));
        let mut z = t.clone();
        z.ssm_cache.layout.offset = usize::MAX - 8;
        let ops = unfused_ops(&z, &SMALL, &step, Precision::Default).unwrap();
        let refusals: Vec<_> = ops.iter().filter_map(|op| op.validate(&mem).err()).collect();
        assert!(!refusals.is_empty() && refusals.iter().all(|e| matches!(e, Error::Overflow { .. })), "{refusals:?}");
        let zeroing = Step { cells: 2, kv_head: 1, src_cell: 1, zero_cell: Some(1), ..step };
        let t0 = alloc(&mut mem, &SMALL, &zeroing).unwrap();
        let mut z = t0.clone();
        z.conv_cache.layout.offset = usize::MAX - 8;
        assert!(matches!(unfused_ops(&z, &SMALL, &zeroing, Precision::Default), Err(Error::Overflow { arg: "conv_cache", .. })));
        let mut z = t;
        z.source_rows.layout.dtype = DType::F32;
        assert!(unfused_ops(&z, &SMALL, &step, Precision::Default).is_err());
    }
}

mod cli {
    use std::process::{Command, Output, Stdio};

    /// The rgdn binary: `RGDN_BIN`, else cargo's build of it, else `../rgdn` next to this test
    /// executable (the GPU bundle's layout: bundle/tests/errors, bundle/rgdn).
    fn bin() -> std::path::PathBuf {
        let bundled = std::env::current_exe().ok().and_then(|e| Some(e.parent()?.parent()?.join("rgdn")));
        let candidates = std::env::var_os("RGDN_BIN").map(Into::into).into_iter().chain([env!("CARGO_BIN_EXE_rgdn").into()]).chain(bundled);
        let found = candidates.into_iter().find(|p: &std::path::PathBuf| p.is_file());
        found.expect("the rgdn binary (set RGDN_BIN to its path)")
    }

    fn command() -> Command {
        Command::new(bin())
    }

    fn rgdn(args: &[&std::ffi::OsStr]) -> Output {
        command().args(args).stdin(Stdio::null()).output().expect("the rgdn binary runs")
    }

    fn text(b: &[u8]) -> String {
        String::from_utf8_lossy(b).into_owned()
    }

    fn no_panic(o: &Output) {
        let err = text(&o.stderr);
        assert!(!err.contains("panicked") && !err.contains("RUST_BACKTRACE"), "stderr: {err}");
    }

    #[test]
    fn a_non_utf8_argument_is_a_usage_error() {
        use std::os::unix::ffi::OsStrExt;
        let o = rgdn(&["check".as_ref(), std::ffi::OsStr::from_bytes(b"\xff\xfe")]);
        no_panic(&o);
        assert_eq!(o.status.code(), Some(2));
        assert!(text(&o.stderr).contains("UTF-8"), "{}", text(&o.stderr));
    }

    #[test]
    fn extra_and_unknown_arguments_are_refused() {
        // (No arguments at all is the main job, not a usage error.)
        for args in [
            &["check", "a", "b"][..],
            &["info", "extra"],
            &["layer", "9b", "4b"],
            &["layer", "--bogus"],
            &["bench", "--bogus"],
            &["frobnicate"],
        ] {
            let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
            let o = rgdn(&args);
            no_panic(&o);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
            assert!(text(&o.stderr).contains("Usage"), "{args:?}");
        }
    }

    #[test]
    fn help_and_user_errors_exit_cleanly() {
        let o = rgdn(&["--help".as_ref()]);
        assert_eq!(o.status.code(), Some(0));
        for cmd in ["check", "info", "layer"] {
            assert!(text(&o.stdout).contains(cmd));
        }
        // A refused layer step: a message, exit 1, no backtrace.
        let o = rgdn(&["layer".as_ref(), "--tokens".as_ref(), "99".as_ref()]);
        no_panic(&o);
        assert_eq!(o.status.code(), Some(1));
        assert!(text(&o.stderr).contains("n_tokens = 99"), "{}", text(&o.stderr));
        let o = rgdn(&["layer".as_ref(), "7b".as_ref()]);
        assert_eq!(o.status.code(), Some(1));
        assert!(text(&o.stderr).contains("unknown preset"));
    }

    /// Runs rgdn with `args` and its stdout closed: it must end quietly (exit 0, nothing on stderr).
    fn assert_quiet_on_closed_stdout(args: &[&str]) {
        let mut child = command().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("the rgdn binary runs");
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        no_panic(&o);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o.stderr));
        assert!(o.stderr.is_empty(), "{args:?}: {}", text(&o.stderr));
    }

    #[test]
    fn a_closed_stdout_ends_quietly() {
        assert_quiet_on_closed_stdout(&["check", "scale"]);
    }

    /// The main job (no subcommand) writes through the same path: a closed pipe ends it quietly.
    #[test]
    fn the_main_job_ends_quietly_on_a_closed_stdout() {
        assert_quiet_on_closed_stdout(&[]);
    }

    #[test]
    fn a_full_stdout_is_an_error_message() {
        let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else { return };
        let o = command().arg("info").stdout(full).output().unwrap();
        no_panic(&o);
        assert_eq!(o.status.code(), Some(1));
        assert!(text(&o.stderr).contains("cannot write"), "{}", text(&o.stderr));
    }

    /// Without a GPU nothing is compared: the table says the reference ran, not "passed"; the
    /// run says how far it is, group by group (the whole suite takes minutes on a small machine).
    #[test]
    fn check_without_a_gpu_says_what_ran() {
        let o = rgdn(&["check".as_ref(), "scale".as_ref()]);
        no_panic(&o);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        let out = text(&o.stdout);
        if out.starts_with("no GPU") {
            assert!(out.contains("reference ran") && !out.contains("passed"), "{out}");
            assert!(out.contains("[1/1] SCALE: "), "no progress line: {out}");
        }
    }

    /// "no GPU (no GPU: …)" said it twice.
    #[test]
    fn no_gpu_is_said_once() {
        for args in [&["check", "scale"][..], &["layer", "9b", "--tokens", "1", "--rollback", "0"]] {
            let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
            let o = rgdn(&args);
            no_panic(&o);
            let out = text(&o.stdout);
            assert!(!out.contains("no GPU (no GPU"), "{args:?}: {out}");
            if out.contains("no GPU (") {
                assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o.stderr));
            }
        }
    }

    /// `rgdn --help` says what `rgdn` alone does.
    #[test]
    fn help_says_that_no_subcommand_runs_the_main_job() {
        let o = rgdn(&["--help".as_ref()]);
        assert_eq!(o.status.code(), Some(0));
        assert!(text(&o.stdout).contains("Without a subcommand, rgdn runs the main job"), "{}", text(&o.stdout));
    }

    /// `bench --help` is plain text (no rustdoc link syntax) and describes `all` as it is.
    #[test]
    fn bench_help_is_plain_text() {
        let o = rgdn(&["bench".as_ref(), "--help".as_ref()]);
        assert_eq!(o.status.code(), Some(0));
        let help = text(&o.stdout);
        assert!(!help.contains("[`") && !help.contains("`]"), "rustdoc link syntax in:\n{help}");
        assert!(help.contains("`all` (every registered fusion") && !help.contains("also the one-launch"), "{help}");
    }

    /// A bench refusal names the command once: "rgdn bench: unknown preset 3b".
    #[test]
    fn a_bench_refusal_is_prefixed_once() {
        let o = rgdn(&["bench".as_ref(), "--preset".as_ref(), "3b".as_ref()]);
        no_panic(&o);
        assert_eq!(o.status.code(), Some(1));
        let err = text(&o.stderr);
        assert!(err.contains("rgdn bench: unknown preset 3b") && !err.contains("bench: bench"), "{err}");
    }
}

// [hostile] holes the hostile-view proptest (tests/hostile.rs) and its review of the fused ops
// found: refusals naming the wrong op, and u32/grid limits that only views of more memory than
// the H200 has could reach (a `Memory` that claims such buffers shows them on the CPU).
mod fused {
    use rgdn::Error;
    use rgdn::memory::{HostMemory, Memory};
    use rgdn::ops::{GdnConvChain, MulMatVec, MulMatVecPair, Op, Precision, SnapshotWrite};
    use rgdn::reference::math::ExactMufu;
    use rgdn::tensor::{BufferId, DType, Layout, Tensor};

    /// A product's overflowing view used to come back as MUL_MAT_VEC's `weight`, naming
    /// neither the pair nor the product.
    #[test]
    fn an_overflowing_view_in_a_pair_names_the_pair_and_the_product() {
        let mut mem = HostMemory::new();
        let input = mem.alloc_tensor(DType::F32, [64, 2, 1, 1]);
        let product = |mem: &mut HostMemory| MulMatVec {
            weight: mem.alloc_tensor(DType::F32, [64, 4, 1, 1]),
            input,
            dst: mem.alloc_tensor(DType::F32, [4, 2, 1, 1]),
            precision: Precision::Default,
        };
        let mut op = MulMatVecPair { first: product(&mut mem), second: product(&mut mem) };
        op.validate(&mem).unwrap();
        op.second.weight.layout.offset = usize::MAX - 7;
        let r = op.validate(&mem);
        assert!(matches!(r, Err(Error::Overflow { op: "MUL_MAT_VEC_PAIR", arg: "second.weight", .. })), "{r:?}");
        assert!(op.reference(&mut mem, &mut ExactMufu).is_err());
    }

    /// Claims every buffer is 2^62 bytes long; buffer 0 is an index buffer holding [0].
    struct Huge;

    impl Memory for Huge {
        fn buffer_len(&self, _: BufferId) -> Option<usize> {
            Some(1 << 62)
        }
        fn is_index_buffer(&self, id: BufferId) -> bool {
            id.0 == 0
        }
        fn index_values(&self, t: &Tensor) -> Option<Vec<i32>> {
            (t.buffer.0 == 0).then(|| vec![0])
        }
    }

    /// GDN_CONV_CHAIN with C channels and H_k heads of 32, every view in a buffer of its own.
    fn chain(c: usize, h_k: usize) -> GdnConvChain {
        let t = |id: usize, dtype: DType, ne: [usize; 4]| Tensor::new(BufferId(id), Layout::contiguous(dtype, ne));
        GdnConvChain {
            conv_cache: t(1, DType::F32, [3 * c, 1, 1, 1]),
            source_row: t(0, DType::I32, [1, 1, 1, 1]),
            qkv: t(2, DType::F32, [c, 1, 1, 1]),
            // A broadcast weight: the same taps for every channel (an input may repeat).
            weight: Tensor::new(BufferId(3), Layout { nb: [4, 0, 0, 0], ..Layout::contiguous(DType::F32, [4, c, 1, 1]) }),
            snapshots: vec![SnapshotWrite { row: 0, offset: 1 }],
            conv_out: t(4, DType::F32, [c, 1, 1, 1]),
            q_norm: t(5, DType::F32, [32, h_k, 1, 1]),
            k_norm: t(6, DType::F32, [32, h_k, 1, 1]),
            head_dim: 32,
            n_k_heads: h_k,
            eps: 1e-6,
            commit: None,
        }
    }

    /// The kernel takes H_k as u32: 2^32 heads used to be accepted and truncated to 0.
    #[test]
    fn gdn_conv_chain_with_more_k_heads_than_u32_is_refused() {
        assert!(chain(128, 1).validate(&Huge).is_ok());
        let r = chain(1 << 38, 1 << 32).validate(&Huge);
        assert!(matches!(&r, Err(Error::Unsupported { op: "GDN_CONV_CHAIN", what }) if what.contains("k heads")), "{r:?}");
    }

    /// Grid x is C / 128 blocks, at most 2^31 − 1: 2^31 blocks used to reach the launch.
    #[test]
    fn gdn_conv_chain_with_more_blocks_than_grid_x_is_refused() {
        let most = (i32::MAX as usize) * 128;
        assert!(chain(most, 1).validate(&Huge).is_ok());
        let r = chain(most + 128, 1).validate(&Huge);
        assert!(matches!(&r, Err(Error::Unsupported { op: "GDN_CONV_CHAIN", what }) if what.contains("grid x")), "{r:?}");
    }
}
