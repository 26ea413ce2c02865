//! Evaluates MUFU instructions on the GPU for [`MufuTable`]s, and resolves a reference run
//! against the hardware's exact approximation bits.

use crate::error::{Error, Result};
use crate::gpu::{Gpu, KernelArg, LaunchDims, ParamBlock};
use crate::kernels::abi;
use crate::memory::HostMemory;
use crate::ops::Op;
use crate::reference::math::{MufuOp, MufuTable, RecordingMufu};
use std::collections::BTreeSet;

/// Runs each `(op, input bits)` through `test_mufu_eval_f32` and adds the results to `table`.
pub fn fill_table(gpu: &Gpu, wanted: &BTreeSet<(MufuOp, u32)>, table: &mut MufuTable) -> Result<()> {
    if wanted.is_empty() {
        return Ok(());
    }
    let n = u32::try_from(wanted.len()).map_err(|_| Error::Unsupported { op: "MUFU_EVAL", what: "more than 2^32 arguments".into() })?;
    let ops: Vec<u8> = wanted.iter().flat_map(|(op, _)| op.kernel_id().to_le_bytes()).collect();
    let args: Vec<u8> = wanted.iter().flat_map(|(_, x)| x.to_le_bytes()).collect();
    let d_ops = gpu.upload(&ops)?;
    let d_args = gpu.upload(&args)?;
    let d_out = gpu.alloc(args.len())?;
    let blocks = n.div_ceil(256).min(4096);
    let params = abi::MufuEvalParams { op: d_ops.device_ptr(), arg: d_args.device_ptr(), out: d_out.device_ptr(), n, _pad: 0 };
    let kernel_args = [KernelArg::Params(ParamBlock::of(&params)?)];
    // SAFETY: the three buffers hold n u32 each; the kernel is grid-stride over i < n.
    unsafe { gpu.launch(abi::MUFU_EVAL_ENTRY, LaunchDims::new((blocks, 1, 1), (256, 1, 1)), &kernel_args)? };
    let out = gpu.download(&d_out)?;
    for ((op, x), y) in wanted.iter().zip(out.chunks_exact(4)) {
        table.insert(*op, *x, u32::from_le_bytes(y.try_into().expect("4 bytes")));
    }
    Ok(())
}

/// Runs `ops` on a copy of `mem` with MUFU results taken from the GPU, repeating until every
/// MUFU argument the reference meets is in `table` (a chain of MUFU ops needs one round per
/// link). The result is what the kernels must produce bit for bit.
pub fn reference_with_hardware_mufu(gpu: &Gpu, mem: &HostMemory, ops: &[Box<dyn Op>], table: &mut MufuTable) -> Result<HostMemory> {
    const MAX_ROUNDS: usize = 8;
    for _ in 0..MAX_ROUNDS {
        let mut out = mem.clone();
        let mut rec = RecordingMufu::new(table);
        for op in ops {
            op.reference(&mut out, &mut rec)?;
        }
        let missing = rec.missing;
        if missing.is_empty() {
            return Ok(out);
        }
        fill_table(gpu, &missing, table)?;
    }
    Err(Error::Invalid { op: "MUFU_EVAL", what: format!("MUFU arguments still missing after {MAX_ROUNDS} rounds") })
}
