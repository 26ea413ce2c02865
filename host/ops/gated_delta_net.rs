//! GATED_DELTA_NET (scalar gate, D = 128) — kernel: `kernels-gpu/src/gated_delta_net.rs`,
//! reference: [`crate::reference::gated_delta_net`], spec §2.10.

use super::{Op, check};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, KernelArg, LaunchDims};
use crate::kernels::abi;
use crate::memory::{DeviceMemory, HostMemory, Memory};
use crate::reference::math::Mufu;
use crate::tensor::{DType, Tensor};

const OP: &str = "GATED_DELTA_NET";
const D: usize = abi::GDN_HEAD_DIM;
/// Grid y (sequences) limit of a launch.
const MAX_GRID_YZ: usize = 65535;

/// The gated delta rule over n_t tokens for every value head h and sequence s (key head
/// `h mod H_k`), in ggml's CUDA order (spec §2.10):
/// `γ = expf(g)`, `δ = β·(v − γ·Sᵀk)`, `S ← γ·S + k·δᵀ`, `out = (Sᵀq)·scale`, scale = 1/√D.
///
/// - `q`, `k`: F32 ne [D, H_k, n_t, n_s] (rows contiguous, any other strides, independently);
/// - `v`: F32 ne [D, H_v, n_t, n_s] (rows contiguous, any strides — in the layer a view of the
///   conv output);
/// - `g`, `beta`: F32 ne [1, H_v, n_t, n_s] (any strides);
/// - `state_in`: F32 ne [D, D, H_v, n_s]; element (i, col, h, s) = `S[i][col]` of head h, i.e. the
///   k index i is fastest. The layer passes it contiguous; rows contiguous and any other
///   strides are accepted;
/// - `out`: F32 ne [D, H_v, n_t, n_s], rows contiguous (any other strides): attention output,
///   element (col, h, t, s);
/// - `states`: F32 ne [D·D·H_v, n_s, K, 1], dim 0 contiguous: slot k of sequence s starts at
///   `nb[1]·s + nb[2]·k` and holds element (i, col, h) at (h·D + col)·D + i. Slot k = the state
///   after token n_t−1−k; ONLY slots k < min(n_t, K) are written (the others keep their bytes).
///   Unfused layout: the tail of ggml's result tensor (slot stride D·D·H_v·n_s floats);
///   cache-fused layout: rows of the ssm cache (slot stride = M rows). Same kernel.
///
/// D must be 128 (else [`Error::Unsupported`]); H_v need not be a multiple of H_k;
/// 1 ≤ K ≤ 17 (else Unsupported); n_s ≤ 65535. `out` and `states` are disjoint from every input
/// and from each other, and neither has two elements sharing bytes.
#[derive(Clone, Debug)]
pub struct GatedDeltaNet {
    pub q: Tensor,
    pub k: Tensor,
    pub v: Tensor,
    pub g: Tensor,
    pub beta: Tensor,
    pub state_in: Tensor,
    pub out: Tensor,
    pub states: Tensor,
}

/// The sizes a valid [`GatedDeltaNet`] runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GdnShape {
    /// H_k: heads of q and k.
    pub n_key_heads: usize,
    /// H_v: heads of v, g, beta, the state and the output.
    pub n_heads: usize,
    pub n_tokens: usize,
    pub n_seqs: usize,
    /// K: snapshot slots in `states`.
    pub n_slots: usize,
}

/// The attention scale `1.0f / sqrtf(D)` as ggml's host code computes it (IEEE f32 sqrt and
/// division): 0x3DB504F3 for D = 128.
pub fn attention_scale() -> f32 {
    1.0f32 / (D as f32).sqrt()
}

impl GatedDeltaNet {
    /// Validates the op and returns its sizes.
    pub fn check(&self, mem: &dyn Memory) -> Result<GdnShape> {
        check::tensor(OP, "q", &self.q, DType::F32, mem)?;
        let [d, n_key_heads, n_tokens, n_seqs] = self.q.ne();
        if d != D {
            return Err(Error::Unsupported { op: OP, what: format!("head dimension D = {d} (the kernel is built for D = {D})") });
        }
        if n_seqs > MAX_GRID_YZ {
            return Err(Error::Unsupported { op: OP, what: format!("n_s = {n_seqs} sequences (grid y ≤ {MAX_GRID_YZ})") });
        }
        let n_slots = self.states.ne()[2];
        if !(1..=abi::GDN_MAX_SLOTS).contains(&n_slots) {
            return Err(Error::Unsupported {
                op: OP,
                what: format!(
                    "K = {n_slots} snapshot slots (1 ≤ K ≤ {}: R ≤ {} rollback groups)",
                    abi::GDN_MAX_SLOTS,
                    abi::GDN_MAX_SLOTS - 1
                ),
            });
        }
        check::tensor(OP, "k", &self.k, DType::F32, mem)?;
        check::shape(OP, "k", &self.k, self.q.ne())?;
        check::tensor(OP, "v", &self.v, DType::F32, mem)?;
        let n_heads = self.v.ne()[1];
        check::shape(OP, "v", &self.v, [D, n_heads, n_tokens, n_seqs])?;
        for (arg, t) in [("g", &self.g), ("beta", &self.beta)] {
            check::tensor(OP, arg, t, DType::F32, mem)?;
            if arg == "g" && t.ne() == [D, n_heads, n_tokens, n_seqs] {
                return Err(Error::Unsupported { op: OP, what: "a vector gate (g ne[0] = D, ggml's KDA branch)".into() });
            }
            check::shape(OP, arg, t, [1, n_heads, n_tokens, n_seqs])?;
        }
        check::tensor(OP, "state_in", &self.state_in, DType::F32, mem)?;
        check::shape(OP, "state_in", &self.state_in, [D, D, n_heads, n_seqs])?;
        check::output(OP, "out", &self.out, DType::F32, mem)?;
        check::shape(OP, "out", &self.out, [D, n_heads, n_tokens, n_seqs])?;
        check::output(OP, "states", &self.states, DType::F32, mem)?;
        let slot_len = check::product(OP, "v", "state floats per slot D·D·H_v", &[D, D, n_heads])?;
        check::shape(OP, "states", &self.states, [slot_len, n_seqs, n_slots, 1])?;

        let inputs = [("q", &self.q), ("k", &self.k), ("v", &self.v), ("g", &self.g), ("beta", &self.beta), ("state_in", &self.state_in)];
        for (arg, t) in
            [("q", &self.q), ("k", &self.k), ("v", &self.v), ("state_in", &self.state_in), ("out", &self.out), ("states", &self.states)]
        {
            check::rows_contiguous(OP, arg, t)?;
        }
        check::disjoint(OP, "out", &self.out, "states", &self.states)?;
        for (arg, t) in inputs {
            check::disjoint(OP, "out", &self.out, arg, t)?;
            check::disjoint(OP, "states", &self.states, arg, t)?;
        }
        check::fits_u32(OP, "value heads", n_heads)?;
        check::fits_u32(OP, "key heads", n_key_heads)?;
        check::fits_u32(OP, "tokens", n_tokens)?;
        Ok(GdnShape { n_key_heads, n_heads, n_tokens, n_seqs, n_slots })
    }
}

impl Op for GatedDeltaNet {
    fn name(&self) -> &'static str {
        OP
    }

    fn validate(&self, mem: &dyn Memory) -> Result<()> {
        self.check(mem).map(|_| ())
    }

    fn launch(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<()> {
        let shape = self.check(mem)?;
        let [_, q_head, q_token, q_seq] = check::elem_strides(&self.q);
        let [_, k_head, k_token, k_seq] = check::elem_strides(&self.k);
        let [_, v_head, v_token, v_seq] = check::elem_strides(&self.v);
        let [_, g_head, g_token, g_seq] = check::elem_strides(&self.g);
        let [_, beta_head, beta_token, beta_seq] = check::elem_strides(&self.beta);
        let [_, in_col, in_head, in_seq] = check::elem_strides(&self.state_in);
        let [_, out_head, out_token, out_seq] = check::elem_strides(&self.out);
        let [_, states_seq, states_slot, _] = check::elem_strides(&self.states);
        let grid = (shape.n_heads as u32, shape.n_seqs as u32, D as u32 / abi::GDN_WARPS);
        let dims = LaunchDims::new(grid, (32, abi::GDN_WARPS, 1));
        let args = [
            KernelArg::Ptr(mem.device_ptr(&self.q)),
            KernelArg::Usize(q_head),
            KernelArg::Usize(q_token),
            KernelArg::Usize(q_seq),
            KernelArg::Ptr(mem.device_ptr(&self.k)),
            KernelArg::Usize(k_head),
            KernelArg::Usize(k_token),
            KernelArg::Usize(k_seq),
            KernelArg::Ptr(mem.device_ptr(&self.v)),
            KernelArg::Usize(v_head),
            KernelArg::Usize(v_token),
            KernelArg::Usize(v_seq),
            KernelArg::Ptr(mem.device_ptr(&self.g)),
            KernelArg::Usize(g_head),
            KernelArg::Usize(g_token),
            KernelArg::Usize(g_seq),
            KernelArg::Ptr(mem.device_ptr(&self.beta)),
            KernelArg::Usize(beta_head),
            KernelArg::Usize(beta_token),
            KernelArg::Usize(beta_seq),
            KernelArg::Ptr(mem.device_ptr(&self.state_in)),
            KernelArg::Usize(in_col),
            KernelArg::Usize(in_head),
            KernelArg::Usize(in_seq),
            KernelArg::Ptr(mem.device_ptr(&self.out)),
            KernelArg::Usize(out_head),
            KernelArg::Usize(out_token),
            KernelArg::Usize(out_seq),
            KernelArg::Ptr(mem.device_ptr(&self.states)),
            KernelArg::Usize(states_seq),
            KernelArg::Usize(states_slot),
            KernelArg::U32(shape.n_tokens as u32),
            KernelArg::U32(shape.n_key_heads as u32),
            KernelArg::U32(shape.n_slots as u32),
            KernelArg::F32(attention_scale()),
        ];
        // SAFETY: `check` proved every view lies inside its buffer for the grid (H_v, n_s,
        // D/4) × block (32, 4) with D = 128, key heads < H_k, n_t tokens and K slots (D·D·H_v
        // floats per slot row); that out and states overlap no input, each other, or
        // themselves; and the argument list matches the entry's parameters in order and type.
        unsafe { gpu.launch(entry(), dims, &args) }
    }

    fn reference(&self, mem: &mut HostMemory, mufu: &mut dyn Mufu) -> Result<()> {
        let shape = self.check(mem)?;
        crate::reference::gated_delta_net::gated_delta_net(self, &shape, mem, mufu);
        Ok(())
    }

    fn inputs(&self) -> Vec<Tensor> {
        vec![self.q, self.k, self.v, self.g, self.beta, self.state_in]
    }

    fn outputs(&self) -> Vec<Tensor> {
        vec![self.out, self.states]
    }

    /// `out`, and only the slots k < min(n_t, K) of `states` (the others keep their bytes).
    fn must_write(&self) -> Vec<Tensor> {
        let s = &self.states;
        let written = s.ne()[2].min(self.q.ne()[2]);
        vec![self.out, s.view([s.ne()[0], s.ne()[1], written, s.ne()[3]], s.layout.nb, s.layout.offset)]
    }
}

/// The kernel entry. (A paired-butterfly variant — token t+1's KV sum interleaved with token
/// t's attention sum — was measured on the H200 at 2.2–2.7× this kernel's time and removed;
/// NOTES.md, GATED_DELTA_NET speed.)
pub fn entry() -> &'static str {
    abi::GATED_DELTA_NET_ENTRY
}

/// A valid op with every tensor contiguous in a buffer of its own: inputs zero, `out` and
/// `states` filled with a NaN sentinel (so unwritten elements are recognisable).
#[cfg(test)]
pub(crate) fn contiguous_op(mem: &mut HostMemory, h_k: usize, h_v: usize, n_t: usize, n_s: usize, slots: usize) -> GatedDeltaNet {
    let out = mem.alloc_tensor(DType::F32, [D, h_v, n_t, n_s]);
    let states = mem.alloc_tensor(DType::F32, [D * D * h_v, n_s, slots, 1]);
    for t in [out, states] {
        mem.bytes_mut(t.buffer).chunks_exact_mut(4).for_each(|w| w.copy_from_slice(&SENTINEL.to_le_bytes()));
    }
    GatedDeltaNet {
        q: mem.alloc_tensor(DType::F32, [D, h_k, n_t, n_s]),
        k: mem.alloc_tensor(DType::F32, [D, h_k, n_t, n_s]),
        v: mem.alloc_tensor(DType::F32, [D, h_v, n_t, n_s]),
        g: mem.alloc_tensor(DType::F32, [1, h_v, n_t, n_s]),
        beta: mem.alloc_tensor(DType::F32, [1, h_v, n_t, n_s]),
        state_in: mem.alloc_tensor(DType::F32, [D, D, h_v, n_s]),
        out,
        states,
    }
}

/// The bits [`contiguous_op`] fills its outputs with: a NaN no float op produces.
#[cfg(test)]
pub(crate) const SENTINEL: u32 = 0x7FC0_1234;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::math::ExactMufu;
    use crate::tensor::{BufferId, Layout};

    fn op(mem: &mut HostMemory) -> GatedDeltaNet {
        contiguous_op(mem, 2, 3, 4, 2, 3)
    }

    #[test]
    fn the_attention_scale_is_ggmls_host_constant() {
        assert_eq!(attention_scale().to_bits(), 0x3DB5_04F3);
    }

    #[test]
    fn a_valid_op_passes_and_runs_its_reference() {
        let mut mem = HostMemory::new();
        let op = op(&mut mem);
        assert_eq!(op.check(&mem).unwrap(), GdnShape { n_key_heads: 2, n_heads: 3, n_tokens: 4, n_seqs: 2, n_slots: 3 });
        op.reference(&mut mem, &mut ExactMufu).unwrap();
    }

    #[test]
    fn refuses_other_head_dims_slot_counts_and_sequence_counts() {
        let mut mem = HostMemory::new();
        let mut o = op(&mut mem);
        o.q = mem.alloc_tensor(DType::F32, [64, 2, 4, 2]);
        assert!(matches!(o.validate(&mem), Err(Error::Unsupported { op: OP, .. })));
        for slots in [0, abi::GDN_MAX_SLOTS + 1] {
            let mut o = op(&mut mem);
            o.states = mem.alloc_tensor(DType::F32, [D * D * 3, 2, slots, 1]);
            assert!(matches!(o.validate(&mem), Err(Error::Unsupported { op: OP, .. })), "K = {slots}");
        }
        // 65536 sequences (grid y ≤ 65535): a zero-stride q view is enough to be refused first.
        let mut o = op(&mut mem);
        o.q = o.q.view([D, 2, 4, 65536], [4, 4 * D, 8 * D, 0], 0);
        assert!(matches!(o.validate(&mem), Err(Error::Unsupported { op: OP, .. })));
        // A vector gate (ggml's KDA branch) is another kernel.
        let mut o = op(&mut mem);
        o.g = mem.alloc_tensor(DType::F32, [D, 3, 4, 2]);
        assert!(matches!(o.validate(&mem), Err(Error::Unsupported { op: OP, .. })));
    }

    #[test]
    fn refuses_inconsistent_shapes() {
        let mut mem = HostMemory::new();
        type Edit = fn(&mut GatedDeltaNet, &mut HostMemory);
        let cases: [(&str, Edit); 8] = [
            ("k", |o, m| o.k = m.alloc_tensor(DType::F32, [D, 1, 4, 2])),
            ("v", |o, m| o.v = m.alloc_tensor(DType::F32, [D, 3, 5, 2])),
            ("g", |o, m| o.g = m.alloc_tensor(DType::F32, [1, 2, 4, 2])),
            ("beta", |o, m| o.beta = m.alloc_tensor(DType::F32, [1, 3, 4, 1])),
            ("state_in", |o, m| o.state_in = m.alloc_tensor(DType::F32, [D, D, 2, 2])),
            ("out", |o, m| o.out = m.alloc_tensor(DType::F32, [D, 3, 3, 2])),
            ("states", |o, m| o.states = m.alloc_tensor(DType::F32, [D * D * 2, 2, 3, 1])),
            ("states", |o, m| o.states = m.alloc_tensor(DType::F32, [D * D * 3, 2, 3, 2])),
        ];
        for (arg, edit) in cases {
            let mut o = op(&mut mem);
            edit(&mut o, &mut mem);
            let err = o.validate(&mem);
            assert!(matches!(err, Err(Error::Shape { op: OP, arg: a, .. }) if a == arg), "{arg}: {err:?}");
        }
    }

    #[test]
    fn refuses_wrong_types_strides_bounds_and_index_buffers() {
        let mut mem = HostMemory::new();
        let mut o = op(&mut mem);
        o.beta.layout.dtype = DType::F16;
        assert!(matches!(o.validate(&mem), Err(Error::DType { arg: "beta", got: DType::F16, .. })));

        let mut o = op(&mut mem);
        let buf = mem.alloc(4 * 2 * D * 3 * 4 * 2);
        o.v = Tensor::new(buf, Layout { dtype: DType::F32, offset: 0, ne: [D, 3, 4, 2], nb: [8, 8 * D, 24 * D, 96 * D] });
        assert!(matches!(o.validate(&mem), Err(Error::Stride { arg: "v", .. })));

        let mut o = op(&mut mem);
        o.states.layout.offset += 4;
        assert!(matches!(o.validate(&mem), Err(Error::OutOfBounds { arg: "states", .. })));

        let mut o = op(&mut mem);
        o.state_in.buffer = BufferId(999);
        assert!(matches!(o.validate(&mem), Err(Error::Invalid { op: OP, .. })));

        let mut o = op(&mut mem);
        let idx = mem.alloc_indices(&vec![0; D * 3 * 4 * 2]);
        o.out = Tensor::new(idx.buffer, Layout::contiguous(DType::F32, [D, 3, 4, 2]));
        assert!(matches!(o.validate(&mem), Err(Error::Invalid { op: OP, .. })));
    }

    #[test]
    fn refuses_outputs_that_overlap_inputs_each_other_or_themselves() {
        let mut mem = HostMemory::new();
        // out's first element is q's last.
        let (q_len, out_len, slot) = (D * 2 * 4 * 2, D * 3 * 4 * 2, D * D * 3);
        let mut o = op(&mut mem);
        let shared = mem.alloc_tensor(DType::F32, [q_len + out_len, 1, 1, 1]);
        o.q = shared.view(o.q.ne(), o.q.layout.nb, 0);
        o.out = shared.view(o.out.ne(), o.out.layout.nb, 4 * (q_len - 1));
        assert!(matches!(o.validate(&mem), Err(Error::Aliasing { a: "out", b: "q", .. })));

        // The unfused layout: out and states are disjoint parts of one result buffer — fine; one
        // float less between them and they overlap.
        for (gap, ok) in [(0, true), (-1, false)] {
            let mut o = op(&mut mem);
            let result = mem.alloc_tensor(DType::F32, [out_len + slot * 2 * 3, 1, 1, 1]);
            o.out = result.view([D, 3, 4, 2], Layout::contiguous(DType::F32, [D, 3, 4, 2]).nb, 0);
            let offset = (4 * out_len as isize + 4 * gap) as usize;
            o.states = result.view([slot, 2, 3, 1], [4, 4 * slot, 8 * slot, 24 * slot], offset);
            let r = o.validate(&mem);
            assert_eq!(r.is_ok(), ok, "gap {gap}: {r:?}");
            if !ok {
                assert!(matches!(r, Err(Error::Aliasing { a: "out", b: "states", .. })));
            }
        }

        // states' last element is v's first.
        let mut o = op(&mut mem);
        let shared = mem.alloc_tensor(DType::F32, [slot * 2 * 3 + out_len, 1, 1, 1]);
        o.states = shared.view(o.states.ne(), o.states.layout.nb, 0);
        o.v = shared.view(o.v.ne(), o.v.layout.nb, 4 * (slot * 2 * 3 - 1));
        assert!(matches!(o.validate(&mem), Err(Error::Aliasing { a: "states", b: "v", .. })));

        // A cache with fewer cells per group (1) than sequences (2): slot 1 of sequence 0 would
        // be the row of slot 0 of sequence 1.
        let mut o = op(&mut mem);
        let cache = mem.alloc_tensor(DType::F32, [slot, 4, 1, 1]);
        o.states = cache.view([slot, 2, 3, 1], [4, 4 * slot, 4 * slot, 12 * slot], 0);
        assert!(matches!(o.validate(&mem), Err(Error::Aliasing { a: "states", b: "states", .. })));
        // With two cells per group it is valid.
        let cache = mem.alloc_tensor(DType::F32, [slot, 6, 1, 1]);
        o.states = cache.view([slot, 2, 3, 1], [4, 4 * slot, 8 * slot, 24 * slot], 0);
        o.validate(&mem).unwrap();

        // An output whose tokens share a row.
        let mut o = op(&mut mem);
        o.out = o.out.view([D, 3, 4, 2], [4, 4 * D, 0, 12 * D], 0);
        assert!(matches!(o.validate(&mem), Err(Error::Aliasing { a: "out", b: "out", .. })));
    }
}
