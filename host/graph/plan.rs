//! Buffer planning as ggml's graph allocator (`ggml_gallocr` over a dynamic tensor allocator)
//! does it: walking the nodes in execution order, a planned value gets a block of one arena
//! when it is first written and gives it back after the last node that accesses it (reads
//! *or writes* it) has run — a value written again after its last read still owns its bytes
//! until that write, so no other value can have taken them. A value nothing reads is, to
//! ggml, a graph output (a node without consumers): never given back. A returned block
//! merges with free neighbours and the next request takes the best fit (the smallest free block
//! that holds it; ties go to the lowest offset), else the end of the arena. Inputs, index
//! tensors, weights and caches live in their own buffers and are never reused; graph outputs
//! are planned in the arena (they may take a dead block) but never given back.
//!
//! Not reproduced: ggml's in-place reuse of a dying parent's block by unary/binary ops (a
//! different layout of the same values; the fusion pass's rules hold for any layout).
//!
//! A [`Pin`] forces a value onto the block of another value that died before it (the block is
//! sized for both and held back from the free list until then): this reproduces the reference
//! PR's DFlash layout, where the ssm-state GET_ROWS output lands on the dead qkv projection.

use super::Node;
use crate::error::{Error, Result};

/// Block alignment of the arena (ggml's CUDA buffers align to 128 bytes; 256 keeps every
/// block aligned for any kernel's vector loads).
pub const ALIGN: usize = 256;

/// What a value is, for the planner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Host-provided data in its own buffer (never reused).
    Input,
    /// Row indices (an index buffer of its own).
    Index,
    Weight,
    /// Recurrent cache (persists across steps).
    Cache,
    /// A layer input that arrives in the arena through a [`super::Stage`] node; its block is
    /// reused after its last access, like the output of the out-of-scope node it stands for.
    Staged,
    /// Planned, reused after its last access (read or write).
    Intermediate,
    /// Planned, never given back (a graph output).
    Output,
}

impl Role {
    /// Lives in the arena.
    pub fn planned(self) -> bool {
        matches!(self, Role::Staged | Role::Intermediate | Role::Output)
    }

    /// Given back after its last access.
    pub fn freed(self) -> bool {
        matches!(self, Role::Staged | Role::Intermediate)
    }
}

/// One value of a graph: what it is and how many bytes it takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValueInfo {
    pub name: String,
    pub role: Role,
    pub bytes: usize,
    pub layer: Option<usize>,
}

/// Place `value` on the block of `onto`, which must be dead (given back) when `value` is first
/// written. A value is pinned at most once, a block held for one value, and a pinned value is
/// no pin's block (the planner refuses other pin lists).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pin {
    pub value: usize,
    pub onto: usize,
}

/// Where every planned value lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Byte offset in the arena of each planned value (`None`: own buffer).
    pub offsets: Vec<Option<usize>>,
    /// Block size (aligned) of each planned value.
    pub block_bytes: Vec<usize>,
    /// Total arena size.
    pub arena_bytes: usize,
    /// Node that first writes / last reads / last accesses (reads or writes) each value; a
    /// freed value's block is given back after `last_access`.
    pub first_write: Vec<Option<usize>>,
    pub last_read: Vec<Option<usize>>,
    pub last_access: Vec<Option<usize>>,
    /// Planned values whose bytes no later block overwrites: their final contents can be
    /// compared after a run.
    pub intact_at_end: Vec<bool>,
}

impl Plan {
    /// True when the blocks of values `a` and `b` overlap.
    pub fn shares_bytes(&self, a: usize, b: usize) -> bool {
        match (self.offsets.get(a).copied().flatten(), self.offsets.get(b).copied().flatten()) {
            // Every block ends inside the arena (checked when planned): no sum overflows.
            (Some(x), Some(y)) => x < y.saturating_add(self.block_bytes[b]) && y < x.saturating_add(self.block_bytes[a]),
            _ => false,
        }
    }
}

/// Free blocks sorted by offset; the arena grows at `top`.
#[derive(Default)]
struct Arena {
    free: Vec<(usize, usize)>,
    top: usize,
}

impl Arena {
    /// The start of a block of `size` bytes, or `None` when the arena would end past
    /// `usize::MAX` (every block then lies inside `0..top`, so no sum below overflows).
    fn alloc(&mut self, size: usize) -> Option<usize> {
        // Best fit among the free blocks, the one ending at the top excepted: as ggml's last
        // block, that one is unbounded and only the last resort.
        let top = self.top;
        let best =
            self.free.iter().enumerate().filter(|(_, b)| b.1 >= size && b.0 + b.1 != top).min_by_key(|(i, b)| (b.1, *i)).map(|(i, _)| i);
        if let Some(i) = best {
            let (start, len) = self.free[i];
            if len == size {
                self.free.remove(i);
            } else {
                self.free[i] = (start + size, len - size);
            }
            return Some(start);
        }
        // The last free block, when it ends at the top, serves (and grows if needed).
        if let Some(&(start, len)) = self.free.last()
            && start + len == self.top
        {
            let end = start.checked_add(size)?;
            self.free.pop();
            if len > size {
                self.free.push((end, len - size));
            } else {
                self.top = end;
            }
            return Some(start);
        }
        let start = self.top;
        self.top = start.checked_add(size)?;
        Some(start)
    }

    fn release(&mut self, start: usize, size: usize) {
        let i = self.free.partition_point(|b| b.0 < start);
        self.free.insert(i, (start, size));
        if i + 1 < self.free.len() && self.free[i].0 + self.free[i].1 == self.free[i + 1].0 {
            self.free[i].1 += self.free[i + 1].1;
            self.free.remove(i + 1);
        }
        if i > 0 && self.free[i - 1].0 + self.free[i - 1].1 == self.free[i].0 {
            self.free[i - 1].1 += self.free[i].1;
            self.free.remove(i);
        }
    }
}

fn bad(what: String) -> Error {
    Error::Invalid { op: "GRAPH_PLAN", what }
}

/// Block size of a planned value: its bytes rounded up to [`ALIGN`] (at least one unit), or
/// `None` when that does not fit.
fn aligned(bytes: usize) -> Option<usize> {
    bytes.max(1).div_ceil(ALIGN).checked_mul(ALIGN)
}

/// Plans `values` over `nodes`, whose tensors name values by buffer id (`BufferId(v)` is
/// value `v`: the symbolic graph). Every size is checked: a value or an arena that does not
/// fit `usize` is an [`Error::Overflow`], never a wrapped offset.
pub fn plan(values: &[ValueInfo], nodes: &[Node], pins: &[Pin]) -> Result<Plan> {
    plan_with_groups(values, nodes, pins, &[])
}

/// Nodes a later pass will replace by one node at the position of node `anchor` (a fusion):
/// planning for both graphs, every value the group's nodes access is also accessed at
/// `anchor` — written there if any of them writes it, live there if any reads it — so that the
/// fused node's inputs and outputs never share a block, and the plan serves the unfused graph
/// as well.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    pub nodes: Vec<usize>,
    pub anchor: usize,
}

/// [`plan`], with the lifetimes of `groups` widened to their anchors.
pub fn plan_with_groups(values: &[ValueInfo], nodes: &[Node], pins: &[Pin], groups: &[Group]) -> Result<Plan> {
    let n = values.len();
    let mut first_write = vec![None; n];
    let mut last_read = vec![None; n];
    let mut last_access = vec![None; n];
    for (i, node) in nodes.iter().enumerate() {
        for t in node.op.inputs() {
            let v = t.buffer.0;
            if v >= n {
                return Err(bad(format!("node {i} reads value {v} of {n}")));
            }
            if values[v].role.planned() && first_write[v].is_none() {
                return Err(bad(format!("node {i} ({}) reads `{}` before anything writes it", node.op.name(), values[v].name)));
            }
            last_read[v] = Some(i);
            last_access[v] = Some(i);
        }
        for t in node.op.outputs() {
            let v = t.buffer.0;
            if v >= n {
                return Err(bad(format!("node {i} writes value {v} of {n}")));
            }
            first_write[v].get_or_insert(i);
            last_access[v] = Some(i);
        }
    }
    for g in groups {
        if g.anchor >= nodes.len() || g.nodes.iter().any(|&i| i >= nodes.len()) {
            return Err(bad(format!("group {g:?} names a node outside the graph")));
        }
        for &i in &g.nodes {
            for t in nodes[i].op.outputs() {
                let v = t.buffer.0;
                first_write[v] = first_write[v].min(Some(g.anchor)).or(Some(g.anchor));
                last_access[v] = last_access[v].max(Some(g.anchor));
            }
            for t in nodes[i].op.inputs() {
                let v = t.buffer.0;
                last_read[v] = last_read[v].max(Some(g.anchor));
                last_access[v] = last_access[v].max(Some(g.anchor));
            }
        }
    }
    // Where each value is placed and given back, in the order of first mention.
    let mut placed_at: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    let mut dies_at: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for v in 0..n {
        if let Some(i) = first_write[v] {
            placed_at[i].push(v);
        }
        if let Some(i) = last_access[v] {
            dies_at[i].push(v);
        }
    }
    let mut mention: Vec<Option<(usize, usize)>> = vec![None; n];
    for (i, node) in nodes.iter().enumerate() {
        for (k, t) in node.op.outputs().iter().enumerate() {
            mention[t.buffer.0].get_or_insert((i, k));
        }
    }
    for list in &mut placed_at {
        list.sort_by_key(|&v| (mention[v], v));
    }
    let mut pin_of = vec![None; n];
    let mut pinned_by = vec![None; n];
    for p in pins {
        if p.value >= n || p.onto >= n || !values[p.value].role.planned() || !values[p.onto].role.freed() {
            return Err(bad(format!("pin {p:?}: both values must be planned and the block's owner freed")));
        }
        // [validation] One block per pin, one pin per block, no chains: the sizes below make the
        // value's block and its owner's equal pin by pin, so a value pinned twice, a block held
        // for two values or a pinned value that is itself a pin's block would be placed on a
        // block smaller than its own and run into the next live value.
        if p.value == p.onto || pin_of[p.value].is_some() || pinned_by[p.onto].is_some() {
            return Err(bad(format!("pin {p:?}: a value is pinned at most once, onto a block held for it alone")));
        }
        pin_of[p.value] = Some(p.onto);
        pinned_by[p.onto] = Some(p.value);
    }
    if let Some(v) = (0..n).find(|&v| pin_of[v].is_some() && pinned_by[v].is_some()) {
        return Err(bad(format!("`{}` is pinned onto a block and holds a block for another pinned value (chained pins)", values[v].name)));
    }
    let mut block_bytes = Vec::with_capacity(n);
    for v in values {
        let bytes = if v.role.planned() {
            aligned(v.bytes).ok_or_else(|| overflow(&v.name, format!("block of {} bytes aligned to {ALIGN}", v.bytes)))?
        } else {
            0
        };
        block_bytes.push(bytes);
    }
    for p in pins {
        block_bytes[p.onto] = block_bytes[p.onto].max(block_bytes[p.value]);
        block_bytes[p.value] = block_bytes[p.onto];
    }

    let mut arena = Arena::default();
    let mut offsets = vec![None; n];
    let mut held = vec![None; n]; // blocks held back for a pinned value
    let mut allocs: Vec<(usize, usize, usize, usize)> = Vec::new(); // (node, value, start, size)
    let mut freed_at = vec![None; n];
    for i in 0..nodes.len() {
        for &v in &placed_at[i] {
            if !values[v].role.planned() || offsets[v].is_some() {
                continue;
            }
            let start = match pin_of[v] {
                Some(u) => held[v].take().ok_or_else(|| {
                    bad(format!(
                        "`{}` is pinned onto `{}`, which is not dead when `{}` is written",
                        values[v].name, values[u].name, values[v].name
                    ))
                })?,
                None => arena.alloc(block_bytes[v]).ok_or_else(|| {
                    overflow(&values[v].name, format!("arena of {} bytes grown by a block of {}", arena.top, block_bytes[v]))
                })?,
            };
            offsets[v] = Some(start);
            allocs.push((i, v, start, block_bytes[v]));
        }
        // Values accessed for the last time here (a read or a write) die after this node; a
        // value nothing reads never dies (ggml keeps a node without consumers).
        for &v in &dies_at[i] {
            if values[v].role.freed() && last_read[v].is_some() && last_access[v] == Some(i) && freed_at[v].is_none() {
                freed_at[v] = Some(i);
                let Some(start) = offsets[v] else {
                    return Err(bad(format!("`{}` dies at node {i} but was never placed", values[v].name)));
                };
                match pinned_by[v] {
                    Some(w) if offsets[w].is_none() => held[w] = Some(start),
                    _ => arena.release(start, block_bytes[v]),
                }
            }
        }
    }
    let intact_at_end = (0..n)
        .map(|v| match (offsets[v], freed_at[v]) {
            (Some(start), Some(f)) => {
                // Blocks lie inside the arena, whose end fits usize: the sums cannot overflow.
                !allocs.iter().any(|&(i, w, s, len)| w != v && i > f && s < start + block_bytes[v] && start < s + len)
            }
            (Some(_), None) => true,
            _ => false,
        })
        .collect();
    Ok(Plan { offsets, block_bytes, arena_bytes: arena.top, first_write, last_read, last_access, intact_at_end })
}

fn overflow(value: &str, what: String) -> Error {
    Error::Overflow { op: "GRAPH_PLAN", arg: "value", what: format!("`{value}`: {what}") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{Op, Scale};
    use crate::tensor::{BufferId, DType, Layout, Tensor};

    fn v(role: Role, bytes: usize) -> ValueInfo {
        ValueInfo { name: format!("{role:?}{bytes}"), role, bytes, layer: None }
    }

    fn t(id: usize, floats: usize) -> Tensor {
        Tensor::new(BufferId(id), Layout::contiguous(DType::F32, [floats, 1, 1, 1]))
    }

    /// A node reading value `a` and writing value `b` (Scale stands for any op here).
    fn node(a: usize, b: usize, floats: usize) -> Node {
        let op: Box<dyn Op> = Box::new(Scale { src: t(a, floats), dst: t(b, floats), scale: 1.0, bias: 0.0 });
        Node::new(op, None)
    }

    #[test]
    fn dead_blocks_are_reused_best_fit_and_inputs_never() {
        // x (input) → a → b → c → d; a dies after b is written, so c takes a's block.
        let values = [
            v(Role::Input, 1024),
            v(Role::Intermediate, 1024),
            v(Role::Intermediate, 1024),
            v(Role::Intermediate, 1024),
            v(Role::Output, 1024),
        ];
        let nodes = [node(0, 1, 256), node(1, 2, 256), node(2, 3, 256), node(3, 4, 256)];
        let p = plan(&values, &nodes, &[]).unwrap();
        assert_eq!(p.offsets, vec![None, Some(0), Some(1024), Some(0), Some(1024)]);
        assert_eq!(p.arena_bytes, 2048);
        assert!(!p.intact_at_end[1] && p.intact_at_end[4]);
    }

    #[test]
    fn a_pin_holds_the_dead_block_for_its_value() {
        // a dies at node 1; without the pin c (same size) would take a's block.
        let values =
            [v(Role::Input, 1024), v(Role::Staged, 1024), v(Role::Intermediate, 1024), v(Role::Intermediate, 2048), v(Role::Output, 1024)];
        let nodes = [node(0, 1, 256), node(1, 2, 256), node(2, 4, 256), node(0, 3, 256)];
        let free = plan(&values, &nodes, &[]).unwrap();
        assert_eq!(free.offsets[4], Some(0));
        let pinned = plan(&values, &nodes, &[Pin { value: 3, onto: 1 }]).unwrap();
        assert_eq!(pinned.offsets[3], Some(0));
        assert_eq!(pinned.block_bytes[1], 2048);
        assert_ne!(pinned.offsets[4], Some(0));
        // A pin onto a value that is still alive is refused.
        let nodes = [node(0, 1, 256), node(0, 3, 256), node(1, 2, 256), node(2, 4, 256)];
        assert!(plan(&values, &nodes, &[Pin { value: 3, onto: 1 }]).is_err());
    }

    #[test]
    fn a_value_nothing_reads_keeps_its_block_as_ggml_does() {
        // b is written and never read: to ggml a graph output, so c cannot take its block.
        let values = [v(Role::Input, 1024), v(Role::Intermediate, 1024), v(Role::Intermediate, 1024), v(Role::Output, 1024)];
        let nodes = [node(0, 1, 256), node(0, 2, 256), node(1, 3, 256)];
        let p = plan(&values, &nodes, &[]).unwrap();
        assert_eq!(p.last_read[2], None);
        assert!(!p.shares_bytes(2, 3) && p.intact_at_end[2]);
    }

    #[test]
    fn freed_neighbours_merge() {
        let mut a = Arena::default();
        let (x, y, z) = (a.alloc(256).unwrap(), a.alloc(256).unwrap(), a.alloc(256).unwrap());
        a.release(x, 256);
        a.release(z, 256);
        a.release(y, 256);
        assert_eq!(a.free, vec![(0, 768)]);
        assert_eq!(a.alloc(1024), Some(0));
        assert_eq!(a.top, 1024);
    }
}
