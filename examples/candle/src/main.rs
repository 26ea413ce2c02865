//! rgdn inside candle: one Qwen3.5-9B GDN layer built from its weights as candle tensors
//! (as an engine's loader holds them), stepped on candle tensors — the engine's caches and
//! activations — on candle's own CUDA stream, in mistral.rs's calling style for custom kernels
//! (a tensor's storage reached through `storage_and_layout`, its device address handed to the
//! kernel). Four verify steps (T = 4, R = 3) with changing source rows, fused (one
//! GDN_LAYER_STEP launch) and unfused (ggml's chain): every output and both caches must be
//! bit-identical to each other and to rgdn's own step on cudarc buffers (`GdnLayer::step`).
//!
//! Build and run: README.md beside this file. Exit 0 only when everything matched.

use candle_core::{DType, Device, Storage, Tensor};
use cudarc::driver::{CudaStream, DevicePtr};
use half::bf16;
use rgdn::engine::hf::{BetaAlpha, Decay, DeviceF32, Floats, GdnConfig, GdnLayer, GdnWeights, HfTensor, KeyHeads, RawBuffers, StepRows};
use rgdn::fusion::Options;
use rgdn::gpu::Gpu;
use std::process::ExitCode;
use std::sync::Arc;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("rgdn-candle: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The device address and length of a contiguous F32 candle tensor on the GPU.
fn f32_range(t: &Tensor, stream: &Arc<CudaStream>) -> Res<DeviceF32> {
    if t.dtype() != DType::F32 || !t.is_contiguous() {
        return Err(format!("a contiguous F32 tensor is needed, got {:?} {:?}", t.dtype(), t.shape()).into());
    }
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cuda(cuda) = &*storage else { return Err("the tensor is not on the GPU".into()) };
    let slice = cuda.as_cuda_slice::<f32>()?;
    let (ptr, _order) = slice.device_ptr(stream);
    Ok(DeviceF32 { ptr: ptr + 4 * layout.start_offset() as u64, len: t.elem_count() })
}

/// The steps of one arm: outputs per step, then both caches.
type Run = (Vec<Vec<f32>>, Vec<f32>, Vec<f32>);

fn run() -> Res<bool> {
    let device = Device::new_cuda(0)?;
    let Device::Cuda(cuda) = &device else { return Err("no CUDA device".into()) };
    let stream = cuda.cuda_stream();
    // rgdn's kernels on candle's context and stream.
    let gpu = Gpu::from_stream(stream.clone())?;
    println!("candle-core 0.11 CUDA device 0; rgdn on its stream: {}", gpu.info());

    let cfg = GdnConfig::qwen3_5_9b(KeyHeads::Modulo);
    let shape = cfg.shape()?;
    let (c, k, e, hv, d) = (shape.channels(), shape.d_conv, shape.n_embd, shape.n_v_heads, shape.head_dim);
    // The checkpoint's tensors as the engine holds them (random here): Hugging Face names and
    // shapes, b/a in BF16 as Qwen3.5 ships them.
    let conv1d = Tensor::randn(0f32, 0.3, (c, 1, k), &device)?;
    let in_proj_b = Tensor::randn(0f32, 0.02, (hv, e), &device)?.to_dtype(DType::BF16)?;
    let in_proj_a = Tensor::randn(0f32, 0.02, (hv, e), &device)?.to_dtype(DType::BF16)?;
    let dt_bias = Tensor::randn(0f32, 0.5, hv, &device)?;
    let a_log = Tensor::randn(0f32, 0.5, hv, &device)?;
    let host_conv: Vec<f32> = conv1d.flatten_all()?.to_vec1()?;
    let host_b: Vec<bf16> = in_proj_b.flatten_all()?.to_vec1()?;
    let host_a: Vec<bf16> = in_proj_a.flatten_all()?.to_vec1()?;
    let (host_dt, host_a_log): (Vec<f32>, Vec<f32>) = (dt_bias.to_vec1()?, a_log.to_vec1()?);
    let (s_conv, s_proj, s_head) = ([c, 1, k], [hv, e], [hv]);
    let weights = GdnWeights {
        conv1d_weight: HfTensor { data: Floats::F32(&host_conv), shape: &s_conv },
        beta_alpha: BetaAlpha::Split {
            in_proj_b: HfTensor { data: Floats::BF16(&host_b), shape: &s_proj },
            in_proj_a: HfTensor { data: Floats::BF16(&host_a), shape: &s_proj },
        },
        dt_bias: HfTensor { data: Floats::F32(&host_dt), shape: &s_head },
        decay: Decay::ALog(HfTensor { data: Floats::F32(&host_a_log), shape: &s_head }),
    };

    // One sequence of T = 4 tokens, R = 3 rollback snapshots, one cell: 4 cache rows.
    let (n_t, cells, rollback) = (4usize, 1usize, 3usize);
    let rows = cells * (1 + rollback);
    let sources: [[u32; 1]; 4] = [[0], [3], [1], [2]];
    let conv0: Vec<f32> = Tensor::randn(0f32, 1.0, (rows, shape.conv_row()), &device)?.flatten_all()?.to_vec1()?;
    let ssm0: Vec<f32> = Tensor::randn(0f32, 0.05, (rows, shape.ssm_row()), &device)?.flatten_all()?.to_vec1()?;
    let qkv0: Vec<f32> = Tensor::randn(0f32, 1.0, (n_t, c), &device)?.flatten_all()?.to_vec1()?;
    let hidden0: Vec<f32> = Tensor::randn(0f32, 1.0, (n_t, e), &device)?.flatten_all()?.to_vec1()?;
    fn step_rows(src: &[u32], n_tokens: usize, cells: usize, rollback: usize) -> StepRows<'_> {
        StepRows { n_tokens, cells, rollback, kv_head: 0, sources: src, zero_cell: None }
    }

    // candle tensors, mistral.rs style: the storage's device address goes to the kernels.
    let on_candle = |fusions: Options| -> Res<Run> {
        let mut layer = GdnLayer::new(&gpu, cfg, &weights, fusions)?;
        let conv_cache = Tensor::from_vec(conv0.clone(), (rows, shape.conv_row()), &device)?;
        let ssm_cache = Tensor::from_vec(ssm0.clone(), (rows, shape.ssm_row()), &device)?;
        let qkv = Tensor::from_vec(qkv0.clone(), (n_t, c), &device)?;
        let hidden = Tensor::from_vec(hidden0.clone(), (n_t, e), &device)?;
        let mut outs = Vec::new();
        for src in &sources {
            let out = Tensor::zeros((n_t, hv * d), DType::F32, &device)?;
            let buffers = RawBuffers {
                conv_cache: f32_range(&conv_cache, &stream)?,
                ssm_cache: f32_range(&ssm_cache, &stream)?,
                qkv: f32_range(&qkv, &stream)?,
                hidden: f32_range(&hidden, &stream)?,
                out: f32_range(&out, &stream)?,
            };
            // SAFETY: the five tensors live until after the step (they are read back below, in
            // stream order); nothing else touches them meanwhile: one stream, candle's.
            unsafe { layer.step_raw(&gpu, buffers, &step_rows(src, n_t, cells, rollback)) }?;
            outs.push(out.flatten_all()?.to_vec1()?);
        }
        if fusions == Options::ON {
            println!("fused plan:\n{}", layer.report().ok_or("no report")?);
        }
        Ok((outs, conv_cache.flatten_all()?.to_vec1()?, ssm_cache.flatten_all()?.to_vec1()?))
    };
    // rgdn's own step on cudarc buffers (the views API), same layer, same data.
    let on_cudarc = || -> Res<Run> {
        let mut layer = GdnLayer::new(&gpu, cfg, &weights, Options::ON)?;
        let mut conv_cache = stream.clone_htod(&conv0)?;
        let mut ssm_cache = stream.clone_htod(&ssm0)?;
        let (qkv, hidden) = (stream.clone_htod(&qkv0)?, stream.clone_htod(&hidden0)?);
        let mut outs = Vec::new();
        for src in &sources {
            let out = layer.step(
                &gpu,
                conv_cache.slice_mut(..),
                ssm_cache.slice_mut(..),
                qkv.slice(..),
                hidden.slice(..),
                &step_rows(src, n_t, cells, rollback),
            )?;
            outs.push(stream.clone_dtoh(&out)?);
        }
        Ok((outs, stream.clone_dtoh(&conv_cache)?, stream.clone_dtoh(&ssm_cache)?))
    };
    let fused = on_candle(Options::ON)?;
    let unfused = on_candle(Options::OFF)?;
    let own = on_cudarc()?;
    let bits = |r: &Run| -> Vec<u32> { r.0.iter().flatten().chain(&r.1).chain(&r.2).map(|x| x.to_bits()).collect() };
    let words = bits(&fused).len();
    let (fu, fo) = (bits(&fused) == bits(&unfused), bits(&fused) == bits(&own));
    println!(
        "fused vs unfused on candle tensors: {} ({words} words: 4 steps' outputs and both caches)",
        if fu { "identical" } else { "DIFFER" }
    );
    println!("candle (fused) vs rgdn's own step on cudarc buffers: {}", if fo { "identical" } else { "DIFFER" });
    Ok(fu && fo)
}
