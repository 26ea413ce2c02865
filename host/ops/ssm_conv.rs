//! SSM_CONV (+ optional bias, + optional fused SiLU) — kernel: `kernels-gpu/src/ssm_conv.rs`,
//! reference: [`crate::reference::ssm_conv`], spec §2.5.

use super::{Op, check};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, KernelArg, LaunchDims, ParamBlock, PreparedLaunch};
use crate::kernels::abi;
use crate::memory::{DeviceMemory, HostMemory, Memory};
use crate::reference::math::Mufu;
use crate::tensor::{DType, Tensor};

const OP: &str = "SSM_CONV";

/// `dst[s][t][c] = silu?(Σ_j conv_input[s][c][t+j] · weight[c][j] + bias[c])`.
///
/// - `conv_input`: F32 ne [d_conv−1+n_t, C, n_s, 1], columns contiguous;
/// - `weight`: F32 ne [d_conv, C, 1, 1], taps contiguous (d_conv ∈ 3, 4, 5, 9, 15);
/// - `bias`: optional F32 ne [C, 1, 1, 1], contiguous;
/// - `dst`: F32 ne [C, n_t, n_s, 1], channels contiguous, disjoint from every input.
#[derive(Clone, Debug)]
pub struct SsmConv {
    pub conv_input: Tensor,
    pub weight: Tensor,
    pub bias: Option<Tensor>,
    pub dst: Tensor,
    pub apply_silu: bool,
}

/// The sizes a valid [`SsmConv`] runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvShape {
    pub d_conv: usize,
    pub n_channels: usize,
    pub n_tokens: usize,
    pub n_seqs: usize,
}

impl SsmConv {
    /// Validates the op and returns its sizes.
    pub fn check(&self, mem: &dyn Memory) -> Result<ConvShape> {
        check::tensor(OP, "weight", &self.weight, DType::F32, mem)?;
        let [d_conv, n_channels, ..] = self.weight.ne();
        check::shape(OP, "weight", &self.weight, [d_conv, n_channels, 1, 1])?;
        if abi::ssm_conv_entry(d_conv, self.apply_silu).is_none() {
            return Err(Error::Unsupported { op: OP, what: format!("d_conv = {d_conv} (kernels exist for {:?})", abi::SSM_CONV_WIDTHS) });
        }
        check::tensor(OP, "conv_input", &self.conv_input, DType::F32, mem)?;
        let [cols, _, n_seqs, _] = self.conv_input.ne();
        if cols < d_conv {
            return Err(Error::Shape {
                op: OP,
                arg: "conv_input",
                expected: format!("[d_conv−1+n_t ≥ {d_conv}, {n_channels}, n_s, 1]"),
                got: self.conv_input.ne(),
            });
        }
        let n_tokens = cols - (d_conv - 1);
        check::shape(OP, "conv_input", &self.conv_input, [cols, n_channels, n_seqs, 1])?;
        check::output(OP, "dst", &self.dst, DType::F32, mem)?;
        check::shape(OP, "dst", &self.dst, [n_channels, n_tokens, n_seqs, 1])?;
        for (arg, t) in [("conv_input", &self.conv_input), ("weight", &self.weight), ("dst", &self.dst)] {
            check::rows_contiguous(OP, arg, t)?;
        }
        check::disjoint(OP, "dst", &self.dst, "conv_input", &self.conv_input)?;
        check::disjoint(OP, "dst", &self.dst, "weight", &self.weight)?;
        if let Some(bias) = &self.bias {
            check::tensor(OP, "bias", bias, DType::F32, mem)?;
            check::shape(OP, "bias", bias, [n_channels, 1, 1, 1])?;
            check::rows_contiguous(OP, "bias", bias)?;
            check::disjoint(OP, "dst", &self.dst, "bias", bias)?;
        }
        check::fits_u32(OP, "channels", n_channels)?;
        check::fits_u32(OP, "tokens", n_tokens)?;
        check::fits_u32(OP, "sequences", n_seqs)?;
        Ok(ConvShape { d_conv, n_channels, n_tokens, n_seqs })
    }
}

impl Op for SsmConv {
    fn name(&self) -> &'static str {
        OP
    }

    fn validate(&self, mem: &dyn Memory) -> Result<()> {
        self.check(mem).map(|_| ())
    }

    fn prepare(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<PreparedLaunch> {
        let shape = self.check(mem)?;
        let entry = abi::ssm_conv_entry(shape.d_conv, self.apply_silu).expect("checked: d_conv has an entry");
        let [_, in_channel, in_seq, _] = check::elem_strides(&self.conv_input);
        let [_, w_channel, ..] = check::elem_strides(&self.weight);
        let [_, dst_token, dst_seq, _] = check::elem_strides(&self.dst);
        let bias = self.bias.map_or(0, |b| mem.device_ptr(&b));
        let channel_blocks = shape.n_channels.div_ceil(abi::SSM_CONV_BLOCK as usize);
        let dims =
            LaunchDims::new((shape.n_seqs as u32, check::fits_u32(OP, "channel blocks", channel_blocks)?, 1), (abi::SSM_CONV_BLOCK, 1, 1));
        let params = abi::SsmConvParams {
            conv_input: mem.device_ptr(&self.conv_input),
            in_channel,
            in_seq,
            weight: mem.device_ptr(&self.weight),
            w_channel,
            bias,
            dst: mem.device_ptr(&self.dst),
            dst_token,
            dst_seq,
            n_channels: shape.n_channels as u32,
            n_tokens: shape.n_tokens as u32,
        };
        // SAFETY: `check` proved every view lies inside its buffer with the shapes the kernel
        // derives from (n_channels, n_tokens, grid.x = n_seqs), that dst is disjoint from the
        // inputs, and `params` is the struct every SSM_CONV entry takes.
        unsafe { gpu.prepare(entry, dims, &[KernelArg::Params(ParamBlock::of(&params)?)]) }
    }

    fn reference(&self, mem: &mut HostMemory, mufu: &mut dyn Mufu) -> Result<()> {
        self.check(mem)?;
        crate::reference::ssm_conv::ssm_conv(&self.conv_input, &self.weight, self.bias.as_ref(), &self.dst, self.apply_silu, mem, mufu)?;
        Ok(())
    }

    fn inputs(&self) -> Vec<Tensor> {
        self.bias.into_iter().chain([self.conv_input, self.weight]).collect()
    }

    fn outputs(&self) -> Vec<Tensor> {
        vec![self.dst]
    }

    fn must_write(&self) -> Vec<Tensor> {
        self.outputs()
    }
}
