//! Runs a node list: on the GPU (each node's launch, in order, on the one stream) or on the CPU
//! reference (each node's reference, in order, with a pluggable MUFU).

use super::Node;
use crate::error::Result;
use crate::gpu::{Gpu, LaunchKind};
use crate::memory::{DeviceMemory, HostMemory};
use crate::reference::math::Mufu;

/// What one GPU run launched: the kernel entries of each node, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Launches {
    pub per_node: Vec<(&'static str, Vec<&'static str>)>,
}

impl Launches {
    /// Kernel launches in all.
    pub fn total(&self) -> usize {
        self.per_node.iter().map(|(_, k)| k.len()).sum()
    }

    /// Launches made by nodes named `op`, and how many such nodes ran.
    pub fn of(&self, op: &str) -> (usize, usize) {
        self.per_node.iter().filter(|(n, _)| *n == op).fold((0, 0), |(k, n), (_, e)| (k + e.len(), n + 1))
    }
}

/// Launches every node on the GPU in order and waits for the stream; what each node launched
/// comes from its prepared launch ([`crate::ops::Op::prepare`]: the entry, or nothing for a
/// copy), so the run does not need the launch recorder and leaves it as the caller set it —
/// off, the path an engine runs, unless the caller turned it on. With the recorder on, the
/// log must show exactly the prepared entries (checked; the log is taken first).
pub fn run_gpu(gpu: &Gpu, nodes: &[Node], mem: &DeviceMemory) -> Result<Launches> {
    let recording = gpu.is_recording();
    if recording {
        gpu.take_launches()?;
    }
    let mut per_node = Vec::with_capacity(nodes.len());
    for node in nodes {
        let launch = node.op.prepare(gpu, mem)?;
        // SAFETY: prepared just now on `mem`, borrowed for this call.
        unsafe { gpu.run(&launch) }?;
        let entries = if launch.kind() == LaunchKind::Copy { vec![] } else { vec![launch.entry()] };
        if recording {
            let logged: Vec<&'static str> = gpu.take_launches()?.into_iter().map(|r| r.entry).collect();
            if logged != entries {
                return Err(crate::Error::Invalid {
                    op: "exec::run_gpu",
                    what: format!("{} prepared {entries:?} but the launch log shows {logged:?}", node.op.name()),
                });
            }
        }
        per_node.push((node.op.name(), entries));
    }
    gpu.synchronize()?;
    Ok(Launches { per_node })
}

/// Runs every node's CPU reference in order.
pub fn run_cpu(nodes: &[Node], mem: &mut HostMemory, mufu: &mut dyn Mufu) -> Result<()> {
    for node in nodes {
        node.op.reference(mem, mufu)?;
    }
    Ok(())
}

/// Validates every node against `mem` without running anything.
pub fn validate(nodes: &[Node], mem: &dyn crate::memory::Memory) -> Result<()> {
    nodes.iter().try_for_each(|n| n.op.validate(mem))
}
