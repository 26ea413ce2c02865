//! Math parity: each `fast_math` device function against nvcc's `-use_fast_math` compile of the
//! expression ggml writes, over **all 2^32 input bit patterns**. The CUDA oracles are one line
//! each, compiled with nvcc at test time (the check is skipped, and says so, when nvcc is absent).

use crate::error::{Error, Result};
use crate::gpu::{DeviceBuffer, Gpu, KernelArg, LaunchDims, ParamBlock};
use crate::kernels::abi::{self, math_probe};
use std::path::PathBuf;
use std::process::Command;

/// (probe id, oracle name, ggml's expression of `x`; `p` is the parameter).
pub const FUNCTIONS: [(u32, &str, &str); 5] = [
    (math_probe::EXP, "exp", "expf(x)"),
    (math_probe::SILU, "silu", "x / (1.0f + expf(-x))"),
    (math_probe::SIGMOID, "sigmoid", "1.0f / (1.0f + expf(-x))"),
    (math_probe::SOFTPLUS, "softplus", "(x > 20.0f) ? x : logf(1.0f + expf(x))"),
    (math_probe::L2_SCALE, "l2_scale", "rsqrtf(fmaxf(x, p * p))"),
];

/// The L2 norm's eps used for the `l2_scale` sweep (Qwen3.5's 1e-6).
pub const L2_EPS: f32 = 1e-6;

#[derive(Clone, Debug)]
pub struct ParityResult {
    pub function: &'static str,
    pub expression: &'static str,
    pub inputs: u64,
    pub mismatches: u64,
}

pub enum Parity {
    Skipped(String),
    Ran(Vec<ParityResult>),
}

/// The CUDA source of the oracles.
pub fn oracle_source() -> String {
    let mut src = String::from("// ggml's expressions, compiled with ggml's flags (-use_fast_math).\n");
    for (_, name, expr) in FUNCTIONS {
        src.push_str(&format!(
            "extern \"C\" __global__ void oracle_{name}(unsigned first, unsigned n, float p, unsigned* out) {{\n\
             \x20 for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {{\n\
             \x20   float x = __uint_as_float(first + i); (void)p;\n\
             \x20   out[i] = __float_as_uint({expr});\n  }}\n}}\n"
        ));
    }
    src
}

fn find_nvcc() -> Option<PathBuf> {
    let candidates =
        std::env::var_os("RGDN_NVCC").map(PathBuf::from).into_iter().chain(["nvcc", "/usr/local/cuda/bin/nvcc"].map(PathBuf::from));
    candidates.into_iter().find(|c| Command::new(c).arg("--version").output().is_ok_and(|o| o.status.success()))
}

/// Compiles the oracles with nvcc for this GPU; `Ok(None)` when there is no nvcc.
pub fn compile_oracles(gpu: &Gpu) -> Result<Option<String>> {
    let Some(nvcc) = find_nvcc() else { return Ok(None) };
    let dir = std::env::temp_dir().join(format!("rgdn-parity-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| io_err("create a temp dir", e))?;
    let (cu, ptx) = (dir.join("oracle.cu"), dir.join("oracle.ptx"));
    std::fs::write(&cu, oracle_source()).map_err(|e| io_err("write oracle.cu", e))?;
    let (maj, min) = gpu.info().compute_capability;
    let out = Command::new(&nvcc)
        .args(["-use_fast_math", "-O3", "-ptx", &format!("-arch=sm_{maj}{min}")])
        .arg(&cu)
        .arg("-o")
        .arg(&ptx)
        .output()
        .map_err(|e| io_err("run nvcc", e))?;
    if !out.status.success() {
        return Err(Error::Invalid { op: "PARITY", what: format!("nvcc failed: {}", String::from_utf8_lossy(&out.stderr)) });
    }
    let src = std::fs::read_to_string(&ptx).map_err(|e| io_err("read oracle.ptx", e))?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Some(src))
}

fn io_err(what: &str, e: std::io::Error) -> Error {
    Error::Invalid { op: "PARITY", what: format!("could not {what}: {e}") }
}

/// Sweeps all 2^32 inputs of every function in chunks of 2^`chunk_log2`.
pub fn run(gpu: &Gpu, chunk_log2: u32) -> Result<Parity> {
    let Some(ptx) = compile_oracles(gpu)? else {
        return Ok(Parity::Skipped("nvcc not found (set RGDN_NVCC or put nvcc on PATH)".into()));
    };
    let module = gpu.load_module(&ptx)?;
    let chunk: u64 = 1 << chunk_log2;
    let ours = gpu.alloc(4 * chunk as usize)?;
    let theirs = gpu.alloc(4 * chunk as usize)?;
    let mut results = Vec::new();
    for (id, name, expr) in FUNCTIONS {
        let oracle = module.load_function(&format!("oracle_{name}"))?;
        let counter = gpu.upload(&0u64.to_le_bytes())?;
        let mut first: u64 = 0;
        while first < 1 << 32 {
            let n = chunk.min((1u64 << 32) - first) as u32;
            let dims = LaunchDims::new((1024, 1, 1), (256, 1, 1));
            // SAFETY: both output buffers hold `chunk` ≥ n u32; every kernel is grid-stride over i < n.
            unsafe {
                gpu.launch(
                    abi::MATH_PROBE_ENTRY,
                    dims,
                    &[KernelArg::Params(ParamBlock::of(&abi::MathProbeParams {
                        out: ours.device_ptr(),
                        function: id,
                        first: first as u32,
                        n,
                        param: L2_EPS,
                    })?)],
                )?;
                gpu.launch_function(
                    &oracle,
                    "nvcc_oracle",
                    dims,
                    &[KernelArg::U32(first as u32), KernelArg::U32(n), KernelArg::F32(L2_EPS), KernelArg::Ptr(theirs.device_ptr())],
                )?;
                gpu.launch(
                    abi::COUNT_MISMATCHES_ENTRY,
                    dims,
                    &[KernelArg::Params(ParamBlock::of(&abi::CountMismatchesParams {
                        a: ours.device_ptr(),
                        b: theirs.device_ptr(),
                        count: counter.device_ptr(),
                        n,
                        _pad: 0,
                    })?)],
                )?;
            }
            first += n as u64;
        }
        let mismatches = read_u64(gpu, &counter)?;
        results.push(ParityResult { function: name, expression: expr, inputs: 1 << 32, mismatches });
    }
    Ok(Parity::Ran(results))
}

fn read_u64(gpu: &Gpu, b: &DeviceBuffer) -> Result<u64> {
    let bytes = gpu.download(b)?;
    Ok(u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")))
}
