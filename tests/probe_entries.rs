//! Probes of the higher-level public entries (`engine::hf`, `engine::replay`, `graph::layer`,
//! `layer`, `fusion::Options`) with hostile caller data, on the CPU: each must end in a typed
//! error (or a documented value), never a panic, an overflow or a huge allocation.

use rgdn::Error;
use rgdn::engine::hf::{
    BetaAlpha, Decay, Floats, GdnConfig, GdnWeights, HfTensor, HostWeights, KeyHeads, StepRows, WeightLayout, engine_lengths, layer_tensors,
};
use rgdn::engine::replay::{LogLayout, ReplayCells, ReplayRows, ReplayStep};
use rgdn::fusion::Options;
use rgdn::graph::layer::{LayerSpec, ReplayTensors};
use rgdn::layer::{GdnShape, Step};
use rgdn::memory::HostMemory;
use rgdn::tensor::DType;
use std::panic::{AssertUnwindSafe, catch_unwind};

fn no_panic<T: std::fmt::Debug>(what: &str, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(e) => {
            let msg = e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
            panic!("{what}: panicked: {msg}")
        }
    }
}

const SMALL: GdnShape = GdnShape { n_embd: 64, n_k_heads: 1, n_v_heads: 2, head_dim: 128, d_conv: 4, eps: 1e-6 };

#[test]
fn config_shape_refuses_hostile_configs() {
    let base = GdnConfig::qwen3_5_9b(KeyHeads::Modulo);
    assert!(base.shape().is_ok());
    let cases: Vec<GdnConfig> = vec![
        GdnConfig { num_key_heads: 0, ..base },
        GdnConfig { num_value_heads: 0, ..base },
        GdnConfig { key_head_dim: 0, value_head_dim: 0, ..base },
        GdnConfig { key_head_dim: 64, value_head_dim: 64, ..base },
        GdnConfig { hidden_size: 0, ..base },
        GdnConfig { hidden_size: usize::MAX, ..base },
        GdnConfig { hidden_size: usize::MAX - 1, ..base },
        GdnConfig { num_value_heads: usize::MAX - usize::MAX % 16, ..base },
        GdnConfig { num_key_heads: usize::MAX, num_value_heads: usize::MAX, ..base },
        GdnConfig { conv_kernel: 0, ..base },
        GdnConfig { conv_kernel: 1, ..base },
        GdnConfig { conv_kernel: usize::MAX, ..base },
        GdnConfig { eps: f32::NAN, ..base },
        GdnConfig { eps: f32::INFINITY, ..base },
        GdnConfig { eps: 0.0, ..base },
        GdnConfig { eps: -1.0, ..base },
        GdnConfig { key_heads: KeyHeads::Interleaved, ..base },
    ];
    for c in cases {
        let r = no_panic(&format!("{c:?}.shape()"), || c.shape());
        assert!(r.is_err(), "{c:?} accepted");
    }
}

/// A shape that `validate` refuses but whose sizes tempt unchecked products.
fn hostile_shapes() -> Vec<GdnShape> {
    vec![
        GdnShape { n_embd: usize::MAX, ..SMALL },
        GdnShape { n_embd: usize::MAX / 2, n_v_heads: 3, ..SMALL },
        GdnShape { d_conv: usize::MAX, n_k_heads: 0, n_v_heads: 1, head_dim: 1, ..SMALL },
        GdnShape { d_conv: usize::MAX / 4 + 1, n_k_heads: 0, n_v_heads: 1, head_dim: 1, ..SMALL },
        GdnShape { d_conv: 0, ..SMALL },
        GdnShape { n_v_heads: usize::MAX / 128, n_k_heads: 0, ..SMALL },
        GdnShape { n_v_heads: 1 << 40, n_k_heads: 0, head_dim: 1, n_embd: 1 << 30, ..SMALL },
        GdnShape { head_dim: 0, ..SMALL },
        GdnShape { n_k_heads: 0, n_v_heads: 0, ..SMALL },
        GdnShape { eps: f32::NAN, ..SMALL },
    ]
}

#[test]
fn weight_layout_of_hostile_shapes_is_typed() {
    for shape in hostile_shapes() {
        for dtype in [DType::F32, DType::F16, DType::BF16, DType::I32] {
            let r = no_panic(&format!("WeightLayout::of({shape:?}, {dtype:?})"), || WeightLayout::of(&shape, dtype));
            if shape.n_embd > 1 << 40 || shape.d_conv > 1 << 40 || shape.n_v_heads > 1 << 50 {
                assert!(matches!(r, Err(Error::Overflow { .. })), "WeightLayout::of({shape:?}) = {r:?}");
            }
        }
    }
}

#[test]
fn from_hf_refuses_wrong_lengths_and_shapes() {
    let config = GdnConfig {
        hidden_size: 64,
        num_key_heads: 1,
        num_value_heads: 2,
        key_head_dim: 128,
        value_head_dim: 128,
        conv_kernel: 4,
        eps: 1e-6,
        key_heads: KeyHeads::Modulo,
    };
    let c = 512;
    let conv = vec![0.5f32; c * 4];
    let ba = vec![0.25f32; 2 * 64];
    let ba2 = vec![0.25f32; 4 * 64];
    let hv = vec![0.1f32; 2];
    let short = vec![0.1f32; 1];
    let t = |data: &'static [f32], shape: &'static [usize]| HfTensor { data: Floats::F32(data), shape };
    let conv: &'static [f32] = conv.leak();
    let ba: &'static [f32] = ba.leak();
    let ba2: &'static [f32] = ba2.leak();
    let hv: &'static [f32] = hv.leak();
    let short: &'static [f32] = short.leak();
    let ok = GdnWeights {
        conv1d_weight: t(conv, &[512, 1, 4]),
        beta_alpha: BetaAlpha::Split { in_proj_b: t(ba, &[2, 64]), in_proj_a: t(ba, &[2, 64]) },
        dt_bias: t(hv, &[2]),
        decay: Decay::ALog(t(hv, &[2])),
    };
    let host = HostWeights::from_hf(&config, &ok).unwrap();
    let fused = GdnWeights { beta_alpha: BetaAlpha::Fused { in_proj_ba: t(ba2, &[4, 64]) }, ..ok };
    assert!(HostWeights::from_hf(&config, &fused).is_ok());
    let bad = [
        GdnWeights { conv1d_weight: t(conv, &[512, 1, 3]), ..ok },
        GdnWeights { conv1d_weight: t(&conv[1..], &[512, 1, 4]), ..ok },
        GdnWeights { conv1d_weight: t(conv, &[]), ..ok },
        GdnWeights { conv1d_weight: t(conv, &[usize::MAX, 1, 4]), ..ok },
        GdnWeights { beta_alpha: BetaAlpha::Split { in_proj_b: t(ba, &[2, 64]), in_proj_a: t(&ba[1..], &[2, 64]) }, ..ok },
        GdnWeights { beta_alpha: BetaAlpha::Fused { in_proj_ba: t(ba, &[4, 64]) }, ..ok },
        GdnWeights { beta_alpha: BetaAlpha::Fused { in_proj_ba: t(ba, &[2, 64]) }, ..ok },
        GdnWeights { dt_bias: t(short, &[2]), ..ok },
        GdnWeights { decay: Decay::ALog(t(short, &[1])), ..ok },
        GdnWeights { decay: Decay::SsmA(short), ..ok },
    ];
    for w in bad {
        let r = no_panic("from_hf", || HostWeights::from_hf(&config, &w));
        assert!(r.is_err(), "accepted {w:?}");
    }
    // The weights buffer at a layout that does not hold them (its fields are public): typed.
    let layout = WeightLayout::of(&SMALL, DType::F32).unwrap();
    assert_eq!(host.bytes(&layout).unwrap().len(), layout.bytes);
    for bad in [
        WeightLayout { bytes: 0, ..layout },
        WeightLayout { ssm_a: layout.bytes, ..layout },
        WeightLayout { conv_weight: usize::MAX, ..layout },
        WeightLayout { alpha_weight: layout.bytes - 1, ..layout },
    ] {
        let r = no_panic(&format!("bytes({bad:?})"), || host.bytes(&bad));
        assert!(matches!(r, Err(Error::Invalid { .. })), "{bad:?}: {:?}", r.map(|b| b.len()));
    }
}

#[test]
fn engine_lengths_and_layer_tensors_refuse_hostile_steps() {
    let sources_257: Vec<u32> = (0..257).collect();
    let one = [0u32];
    let two = [0u32, 1];
    let rows = |n_tokens, cells, rollback, kv_head, sources, zero_cell| StepRows { n_tokens, cells, rollback, kv_head, sources, zero_cell };
    let cases = [
        rows(4, 4, 0, 0, &[][..], None),
        rows(0, 4, 0, 0, &one[..], None),
        rows(17, 4, 0, 0, &one[..], None),
        rows(4, 0, 0, 0, &one[..], None),
        rows(4, 4, 17, 0, &one[..], None),
        rows(4, 4, 0, 4, &one[..], None),
        rows(4, 4, 0, usize::MAX, &two[..], None),
        rows(4, usize::MAX, 16, 0, &one[..], None),
        rows(4, 300, 0, 0, &sources_257[..], None),
        rows(4, 4, 0, 0, &one[..], Some(usize::MAX)),
    ];
    for r in cases {
        let got = no_panic(&format!("engine_lengths({r:?})"), || engine_lengths(&SMALL, &r));
        assert!(got.is_err(), "{r:?} accepted: {got:?}");
    }
    // Unvalidated shapes with a valid step.
    for shape in hostile_shapes() {
        let _ = no_panic(&format!("engine_lengths({shape:?})"), || engine_lengths(&shape, &rows(4, 4, 0, 0, &one[..], None)));
    }
    // layer_tensors validates the shape, the step and the type (before: views of a step of 0
    // tokens, of cells past M, of an n_embd of usize::MAX with saturated strides, a 171 TB
    // scratch).
    let w = WeightLayout::of(&SMALL, DType::F32).unwrap();
    assert!(layer_tensors(&SMALL, &Step::new(4, 0), DType::F32, &w).is_ok());
    let steps = [
        Step::new(0, 0),
        Step::new(17, 0),
        Step::new(usize::MAX, 0),
        Step::new(4, usize::MAX),
        Step { kv_head: usize::MAX, cells: usize::MAX, ..Step::new(4, 0) },
        Step { kv_head: 1, ..Step::new(4, 0) },
        Step { cells: 0, ..Step::new(4, 0) },
    ];
    for step in steps {
        let r = no_panic(&format!("layer_tensors({step:?})"), || layer_tensors(&SMALL, &step, DType::F32, &w).map(|(_, s)| s));
        assert!(r.is_err(), "layer_tensors({step:?}) = {r:?}");
    }
    for shape in hostile_shapes() {
        let r = no_panic(&format!("layer_tensors({shape:?})"), || layer_tensors(&shape, &Step::new(4, 0), DType::F32, &w).map(|(_, s)| s));
        assert!(r.is_err(), "layer_tensors({shape:?}) = {r:?}");
    }
    assert!(layer_tensors(&SMALL, &Step::new(4, 0), DType::I32, &w).is_err());
    assert!(Step::new(4, 0).with_sequences(&[(0, 0); 256]).is_err());
}

#[test]
fn layer_spec_and_replay_tensors_refuse_hostile_input() {
    for shape in hostile_shapes() {
        for step in [Step::new(0, 0), Step::new(4, 0), Step::new(usize::MAX, 0)] {
            let spec = LayerSpec::new(shape, step);
            let _ = no_panic(&format!("LayerSpec::validate {shape:?} {step:?}"), || spec.validate());
            let _ = no_panic(&format!("ReplayTensors::table {shape:?} {step:?}"), || ReplayTensors::table(&shape, &step));
            let _ = no_panic(&format!("LogLayout::of {shape:?}"), || LogLayout::of(&shape, 4, 4));
        }
    }
    // alloc of a hostile size: a typed error, not a panic.
    let mut mem = HostMemory::with_budget(1 << 30);
    let huge = GdnShape { n_v_heads: 1 << 20, ..SMALL };
    let r = no_panic("ReplayTensors::alloc(huge)", || ReplayTensors::alloc(&mut mem, &huge, &Step::new(4, 0)).map(|_| ()));
    assert!(r.is_err());

    let step = Step { cells: 2, ..Step::new(4, 0) }.with_sequences(&[(1, 0)]).unwrap();
    let r = ReplayTensors::alloc(&mut mem, &SMALL, &step).unwrap();
    for accepted in [&[][..], &[0][..], &[5, 0][..], &[usize::MAX, 0][..], &[0, 0, 0][..]] {
        let got = no_panic(&format!("set_accepted({accepted:?})"), || r.set_accepted(&mut mem, accepted));
        assert!(got.is_err(), "{accepted:?} accepted");
    }
    assert!(r.set_accepted(&mut mem, &[4, 0]).is_ok());
    // Non-conforming replay tensors: a log of a huge T.
    let mut a = r.to_array();
    a[0] = rgdn::tensor::Tensor::new(a[0].buffer, rgdn::tensor::Layout::contiguous(DType::F32, [1, usize::MAX / 2, 2, 1]));
    let hostile = ReplayTensors::from_array(a);
    let got = no_panic("set_accepted(huge T log)", || hostile.set_accepted(&mut mem, &[0, 0]));
    assert!(matches!(got, Err(Error::Overflow { .. })), "{got:?}");
    // Tensors of another memory.
    let mut other = HostMemory::new();
    let got = no_panic("set_accepted(other memory)", || r.set_accepted(&mut other, &[0, 0]));
    assert!(got.is_err(), "{got:?}");
    // window_rows of fewer elements than the counts.
    let mut a = r.to_array();
    a[11] = a[11].view([1, 1, 1, 1], a[11].layout.nb, 0);
    let got = no_panic("set_accepted(short window_rows)", || ReplayTensors::from_array(a).set_accepted(&mut mem, &[0, 0]));
    assert!(got.is_err(), "{got:?}");
    assert!(r.set_accepted(&mut mem, &[1, 2]).is_ok());
    assert_eq!(r.accepted_counts(&mem).unwrap(), vec![1, 2]);
}

#[test]
fn replay_bookkeeping_refuses_hostile_steps() {
    assert!(ReplayCells::new(0, 4).is_err());
    assert!(ReplayCells::new(17, 4).is_err());
    assert!(ReplayCells::new(4, 0).is_err());
    assert!(ReplayCells::new(4, usize::MAX).is_err());
    let cells = ReplayCells::new(4, 8).unwrap();
    let accepted_257 = vec![0usize; 257];
    for (kv_head, accepted, new_cells) in [
        (0, &[][..], &[][..]),
        (0, &accepted_257[..], &[][..]),
        (usize::MAX, &[0, 0][..], &[][..]),
        (7, &[0, 0][..], &[][..]),
        (0, &[5][..], &[][..]),
        (0, &[1][..], &[][..]),
        (0, &[0][..], &[1][..]),
        (0, &[0, 0][..], &[1, 1][..]),
        (0, &[0][..], &[usize::MAX][..]),
    ] {
        let r = no_panic("prepare", || cells.prepare(&ReplayRows { kv_head, accepted, new_cells }));
        assert!(r.is_err(), "{kv_head} {accepted:?} {new_cells:?} accepted");
    }
    for (c, a) in [(&[8][..], &[0][..]), (&[0, 0][..], &[0, 0][..]), (&[0][..], &[0, 0][..]), (&[usize::MAX][..], &[0][..])] {
        let r = no_panic("commit_steps", || cells.commit_steps(c, a));
        assert!(r.is_err(), "{c:?} {a:?}");
    }
    // A hand-built ReplayStep (all fields public).
    let good = cells.prepare(&ReplayRows { kv_head: 0, accepted: &[0, 0], new_cells: &[] }).unwrap();
    let hostile = ReplayStep { kv_head: usize::MAX, ..good.clone() };
    let r = no_panic("ReplayStep::step(kv_head = MAX)", || hostile.step());
    assert!(r.is_err());
    // LogLayout with its public fields changed.
    let mut logs = LogLayout::of(&SMALL, 4, 4).unwrap();
    logs.cells = usize::MAX;
    let r = no_panic("LogLayout::views(mutated cells)", || logs.views(0, usize::MAX / 2, 1).map(|_| ()));
    assert!(matches!(r, Err(Error::Overflow { .. })), "{r:?}");
    let r = no_panic("LogLayout::moves(mutated cells)", || logs.moves(0, usize::MAX / 2, 1).map(|_| ()));
    assert!(matches!(r, Err(Error::Overflow { .. })), "{r:?}");
    let r = no_panic("LogLayout::views(set 2)", || LogLayout::of(&SMALL, 4, 4).unwrap().views(2, 0, 1).map(|_| ()));
    assert!(r.is_err());
    let r = no_panic("LogLayout::views(0 cells)", || LogLayout::of(&SMALL, 4, 4).unwrap().views(0, 0, 0).map(|_| ()));
    assert!(r.is_err());
}

#[test]
fn options_parse_hostile_names() {
    for spec in ["", ",", ",,", " , ", "none", "all,none", "default,default", "all,all"] {
        assert!(Options::parse(spec).is_ok(), "{spec:?}");
    }
    for spec in ["bogus", "all,bogus", "ALL", "\0"] {
        assert!(matches!(Options::parse(spec), Err(Error::Invalid { .. })), "{spec:?}");
    }
    for spec in ["pair,", "pair,pair"] {
        let _ = no_panic(spec, || Options::parse(spec));
    }
    assert!(Options::only(&[""]).is_err());
    let long = "x".repeat(1 << 20);
    assert!(matches!(Options::parse(&long), Err(Error::Invalid { .. })));
}

/// `rgdn bench` refuses a mode × `--seqs` pair that is no valid step (n_t·n_s token columns past
/// MAX_GRAPH_TOKENS) before probing the GPU: the same message with or without one.
#[test]
fn bench_refuses_too_many_token_columns_before_the_gpu() {
    let Some(bin) = option_env!("CARGO_BIN_EXE_rgdn") else {
        eprintln!("SKIPPED bench_refuses_too_many_token_columns_before_the_gpu: no rgdn binary (feature cli off)");
        return;
    };
    let out = std::process::Command::new(bin).args(["bench", "--seqs", "256", "--modes", "t16", "--no-progress"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("token columns") && !stderr.contains("panicked") && !stderr.contains("no GPU"), "{stderr}");
}
