//! MUL_MAT_VEC — ggml's `mul_mat_vec_f` for the alpha/beta projections — kernel:
//! `kernels-gpu/src/mmvf.rs`, reference: [`crate::reference::mmvf`], spec §2.9.

use super::{Op, check};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, KernelArg, LaunchDims, ParamBlock, PreparedLaunch};
use crate::kernels::abi;
use crate::memory::{DeviceMemory, HostMemory, Memory};
use crate::reference::math::Mufu;
use crate::tensor::{DType, Tensor};

const OP: &str = "MUL_MAT_VEC";

// SAFETY: `abi::MulMatVecParams` is `#[repr(C)]`: six u64 fields, then two u32 fields (n_pairs
// and the explicit `_pad`), 56 bytes, alignment 8, no padding bytes; it is the type the
// `mul_mat_vec_*` entries take by value (the same abi.rs is compiled into both).
unsafe impl crate::gpu::KernelParams for abi::MulMatVecParams {}

/// ggml's op precision (`ggml_mul_mat_set_prec`); it only changes F16 weights.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Precision {
    /// F16 weights accumulate in half2 (ggml's default on GPUs with fast fp16, H200 included;
    /// llama.cpp leaves the alpha/beta projections at default precision).
    #[default]
    Default,
    /// F16 weights are converted exactly to f32 and accumulate in f32.
    F32,
}

/// `dst[j][r] = Σ_e weight[r][e] · input[j][e]` in ggml's mmvf order.
///
/// - `weight`: F32 | F16 | BF16 ne [E, rows, 1, 1], rows contiguous, E even (the kernel reads
///   pairs), each row starting at a pair-aligned address (offset and row stride multiples of
///   two elements);
/// - `input`: F32 ne [E, ncols, 1, 1], rows contiguous (column j at `nb[1]·j`), columns
///   pair-aligned, 1 ≤ ncols ≤ 8 (9 or more → [`Error::Unsupported`]);
/// - `dst`: F32 ne [rows, ncols, 1, 1], dim 0 contiguous (column j at `nb[1]·j`), disjoint from
///   the inputs;
/// - `precision`: see [`Precision`] (ignored for F32 and BF16 weights, as in ggml).
#[derive(Clone, Debug)]
pub struct MulMatVec {
    pub weight: Tensor,
    pub input: Tensor,
    pub dst: Tensor,
    pub precision: Precision,
}

/// The sizes and launch choices of a valid [`MulMatVec`] (declared beside the reference that iterates them).
pub use crate::reference::mmvf::MatVecShape;

impl MulMatVec {
    /// The [`abi::mul_mat_vec_kind`] for the weight type and precision (None: not a weight type).
    pub fn kind(&self) -> Option<u32> {
        use abi::mul_mat_vec_kind::{BF16, F16_F32, F16_HALF, F32};
        match (self.weight.dtype(), self.precision) {
            (DType::F32, _) => Some(F32),
            (DType::BF16, _) => Some(BF16),
            (DType::F16, Precision::Default) => Some(F16_HALF),
            (DType::F16, Precision::F32) => Some(F16_F32),
            (DType::I32, _) => None,
        }
    }

    /// Validates the op and returns its sizes.
    pub fn check(&self, mem: &dyn Memory) -> Result<MatVecShape> {
        self.check_up_to(mem, abi::MUL_MAT_VEC_MAX_COLS)
    }

    /// [`MulMatVec::check`] with a column limit of `max_cols`: every other rule is per column
    /// (a column's views, alignment and disjointness do not depend on the column count), so a
    /// product of up to `max_cols` columns passes exactly when each of its column groups of at
    /// most 8 would pass as an unfused MUL_MAT_VEC — what MUL_MAT_VEC_PAIR runs for products
    /// ggml splits into several launches.
    pub(crate) fn check_up_to(&self, mem: &dyn Memory, max_cols: usize) -> Result<MatVecShape> {
        let Some(kind) = self.kind() else {
            return Err(Error::DType { op: OP, arg: "weight", expected: "F32, F16 or BF16".into(), got: self.weight.dtype() });
        };
        check::tensor(OP, "weight", &self.weight, self.weight.dtype(), mem)?;
        let [row_len, rows, ..] = self.weight.ne();
        check::shape(OP, "weight", &self.weight, [row_len, rows, 1, 1])?;
        if row_len % 2 != 0 {
            return Err(Error::Unsupported { op: OP, what: format!("odd row length E = {row_len} (the kernel reads element pairs)") });
        }
        check::tensor(OP, "input", &self.input, DType::F32, mem)?;
        let ncols = self.input.ne()[1];
        if ncols > max_cols {
            return Err(Error::Unsupported { op: OP, what: format!("{ncols} input columns (kernels exist for 1 to {max_cols})") });
        }
        check::shape(OP, "input", &self.input, [row_len, ncols, 1, 1])?;
        check::output(OP, "dst", &self.dst, DType::F32, mem)?;
        check::shape(OP, "dst", &self.dst, [rows, ncols, 1, 1])?;
        for (arg, t) in [("weight", &self.weight), ("input", &self.input), ("dst", &self.dst)] {
            check::rows_contiguous(OP, arg, t)?;
        }
        pair_aligned("weight", &self.weight)?;
        pair_aligned("input", &self.input)?;
        check::disjoint(OP, "dst", &self.dst, "weight", &self.weight)?;
        check::disjoint(OP, "dst", &self.dst, "input", &self.input)?;
        // Grid x is one block per row (at most 2^31 − 1 blocks); the kernel counts pairs in u32.
        if rows > i32::MAX as usize {
            return Err(Error::Unsupported { op: OP, what: format!("{rows} rows (grid x holds at most 2^31 − 1 blocks)") });
        }
        check::fits_u32(OP, "pairs per row", row_len / 2)?;
        Ok(MatVecShape { row_len, rows, ncols, kind, block_size: abi::mul_mat_vec_block_size(row_len) })
    }
}

/// Input columns one block computes: at most [`DEFAULT_COLS_PER_BLOCK`] (the largest divisor of
/// `ncols` not above it; the launch then has ncols / that blocks per row, grid z), or at most k
/// when the knob `RGDN_MMVF_COLS_PER_BLOCK=k` (read once per process) says so —
/// `RGDN_MMVF_COLS_PER_BLOCK=8` restores ggml's one block per row. Every column's arithmetic is
/// the same either way (the kernel's per-column loop and reduction do not depend on the other
/// columns of its block; the GPU suite checked every MUL_MAT_VEC case bitwise under k = 2 and
/// 4); the split only moves work between blocks. Measured on the H200 (ncu, [4096 × 32]): one
/// block per row costs 4.16 µs at 8 F32 columns, two columns per block 3.22 µs (NOTES.md,
/// mul_mat_vec_f speed).
pub fn cols_per_block(ncols: usize) -> usize {
    static KNOB: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    let cap = KNOB.get_or_init(|| std::env::var("RGDN_MMVF_COLS_PER_BLOCK").ok().and_then(|v| v.trim().parse().ok()).filter(|k| *k >= 1));
    cols_per_block_with(ncols, Some(cap.unwrap_or(DEFAULT_COLS_PER_BLOCK)))
}

/// [`cols_per_block`] capped at an entry's column count ([`abi::MUL_MAT_VEC_MAX_COLS`]): what
/// MUL_MAT_VEC_PAIR launches, whose products may be wider than one entry (up to
/// [`abi::MUL_MAT_VEC_PAIR_MAX_COLS`]). The largest divisor of `ncols` not above the cap, so
/// every column group has the same width (grid z); for `ncols` ≤ 8 it equals
/// [`cols_per_block`].
pub fn pair_cols_per_block(ncols: usize) -> usize {
    let per_block = cols_per_block(ncols);
    if per_block <= abi::MUL_MAT_VEC_MAX_COLS { per_block } else { cols_per_block_with(ncols, Some(abi::MUL_MAT_VEC_MAX_COLS)) }
}

/// Columns per block unless the knob overrides it (see [`cols_per_block`]).
pub const DEFAULT_COLS_PER_BLOCK: usize = 2;

/// [`cols_per_block`] for a given knob value.
pub fn cols_per_block_with(ncols: usize, cap: Option<usize>) -> usize {
    match cap {
        Some(k) if k < ncols => (1..=k).rev().find(|c| ncols.is_multiple_of(*c)).unwrap_or(1),
        _ => ncols,
    }
}

/// Every row (dimension-1 slice) of `t` starts at a multiple of two elements, so the kernel's
/// pair loads (8 bytes for f32, 4 for f16/bf16) are aligned. Device buffers start 256-aligned.
fn pair_aligned(arg: &'static str, t: &Tensor) -> Result<()> {
    let pair = 2 * t.dtype().size();
    let stride_ok = t.ne()[1] == 1 || t.layout.nb[1].is_multiple_of(pair);
    if !t.layout.offset.is_multiple_of(pair) || !stride_ok {
        return Err(Error::Stride {
            op: OP,
            arg,
            nb: t.layout.nb,
            offset: t.layout.offset,
            reason: format!("rows must start at multiples of two elements ({pair} bytes): the kernel loads element pairs"),
        });
    }
    Ok(())
}

impl Op for MulMatVec {
    fn name(&self) -> &'static str {
        OP
    }

    fn validate(&self, mem: &dyn Memory) -> Result<()> {
        self.check(mem).map(|_| ())
    }

    fn prepare(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<PreparedLaunch> {
        let shape = self.check(mem)?;
        let per_block = cols_per_block(shape.ncols);
        let entry = abi::mul_mat_vec_entry(shape.kind, per_block).expect("checked: kind and ncols have an entry");
        let [_, w_row, ..] = check::elem_strides(&self.weight);
        let [_, in_col, ..] = check::elem_strides(&self.input);
        let [_, dst_col, ..] = check::elem_strides(&self.dst);
        let groups = (shape.ncols / per_block) as u32;
        let dims =
            LaunchDims::new((shape.rows as u32, 1, groups), (shape.block_size, 1, 1)).with_shared_bytes(abi::MUL_MAT_VEC_SHARED_BYTES);
        let params = abi::MulMatVecParams {
            weight: mem.device_ptr(&self.weight),
            w_row,
            input: mem.device_ptr(&self.input),
            in_col,
            dst: mem.device_ptr(&self.dst),
            dst_col,
            n_pairs: (shape.row_len / 2) as u32,
            _pad: 0,
        };
        let args = [KernelArg::Params(ParamBlock::of(&params)?)];
        // SAFETY: `check` proved every view lies inside its buffer for E = 2·n_pairs elements,
        // rows = grid.x weight rows and ncols = grid.z × (the entry's column count) input and
        // dst columns (`cols_per_block` divides ncols); that weight
        // rows and input columns start pair-aligned (so the kernel's pair loads are aligned);
        // that dst is disjoint from both inputs (so weight and input stay read-only, as the
        // kernel's `.nc` loads need); the block size is ggml's rule (a multiple of 32, ≤ 256,
        // the PTX launch bound) with the MUL_MAT_VEC_SHARED_BYTES reduction buffer; and
        // `params` is the entry's parameter struct.
        unsafe { gpu.prepare(entry, dims, &args) }
    }

    fn reference(&self, mem: &mut HostMemory, _mufu: &mut dyn Mufu) -> Result<()> {
        let shape = self.check(mem)?;
        crate::reference::mmvf::mul_mat_vec(&self.weight, &self.input, &self.dst, &shape, mem)?;
        Ok(())
    }

    fn inputs(&self) -> Vec<Tensor> {
        vec![self.weight, self.input]
    }

    fn outputs(&self) -> Vec<Tensor> {
        vec![self.dst]
    }

    fn must_write(&self) -> Vec<Tensor> {
        self.outputs()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::math::ExactMufu;
    use crate::tensor::{BufferId, Layout};

    fn op(mem: &mut HostMemory, dtype: DType, e: usize, rows: usize, ncols: usize) -> MulMatVec {
        let weight = mem.alloc_tensor(dtype, [e, rows, 1, 1]);
        let input = mem.alloc_tensor(DType::F32, [e, ncols, 1, 1]);
        let dst = mem.alloc_tensor(DType::F32, [rows, ncols, 1, 1]);
        MulMatVec { weight, input, dst, precision: Precision::Default }
    }

    #[test]
    fn valid_ops_pass_with_ggml_block_sizes() {
        let mut mem = HostMemory::new();
        for (dtype, precision, kind) in [
            (DType::F32, Precision::Default, abi::mul_mat_vec_kind::F32),
            (DType::F32, Precision::F32, abi::mul_mat_vec_kind::F32),
            (DType::BF16, Precision::Default, abi::mul_mat_vec_kind::BF16),
            (DType::F16, Precision::Default, abi::mul_mat_vec_kind::F16_HALF),
            (DType::F16, Precision::F32, abi::mul_mat_vec_kind::F16_F32),
        ] {
            let o = MulMatVec { precision, ..op(&mut mem, dtype, 4096, 32, 8) };
            let shape = o.check(&mem).unwrap();
            assert_eq!(shape, MatVecShape { row_len: 4096, rows: 32, ncols: 8, kind, block_size: 256 });
            o.reference(&mut mem, &mut ExactMufu).unwrap();
        }
    }

    #[test]
    fn params_have_no_padding() {
        assert_eq!(std::mem::size_of::<abi::MulMatVecParams>(), 6 * 8 + 2 * 4);
        assert_eq!(std::mem::align_of::<abi::MulMatVecParams>(), 8);
    }

    #[test]
    fn block_size_follows_ggml_rule() {
        // Hand-evaluated: bs = 32 until some larger size needs strictly fewer pair iterations.
        // E = 64: 1 iteration at 32 already. E = 130 (65 pairs): 32 → 3, 64 → 2, 96 → 1.
        // E = 1000 (500 pairs): 128 → 4, 192 → 3, 256 → 2 (160 and 224 tie and are skipped).
        for (e, bs) in [(2, 32), (64, 32), (66, 64), (128, 64), (130, 96), (200, 128), (300, 160), (380, 192), (400, 224), (1000, 256)] {
            assert_eq!(abi::mul_mat_vec_block_size(e), bs, "E = {e}");
        }
        for e in [2560, 4096, 5120, 100_000] {
            assert_eq!(abi::mul_mat_vec_block_size(e), 256, "E = {e}");
        }
    }

    #[test]
    fn entries_are_named_per_kind_and_column_count() {
        use abi::mul_mat_vec_kind::*;
        assert_eq!(abi::mul_mat_vec_entry(F32, 1), Some("mul_mat_vec_f32_c1"));
        assert_eq!(abi::mul_mat_vec_entry(BF16, 4), Some("mul_mat_vec_bf16_c4"));
        assert_eq!(abi::mul_mat_vec_entry(F16_HALF, 8), Some("mul_mat_vec_f16_c8"));
        assert_eq!(abi::mul_mat_vec_entry(F16_F32, 3), Some("mul_mat_vec_f16_f32acc_c3"));
        assert_eq!(abi::mul_mat_vec_entry(F32, 0), None);
        assert_eq!(abi::mul_mat_vec_entry(F32, 9), None);
        assert_eq!(abi::mul_mat_vec_entry(4, 1), None);
    }

    #[test]
    fn column_groups_divide_the_columns() {
        for ncols in 1..=8 {
            assert_eq!(cols_per_block_with(ncols, None), ncols);
            assert_eq!(cols_per_block_with(ncols, Some(8)), ncols);
            assert_eq!(cols_per_block_with(ncols, Some(1)), 1);
            for k in 1..=8 {
                let c = cols_per_block_with(ncols, Some(k));
                assert!(c >= 1 && c <= k.max(1) && ncols % c == 0, "ncols {ncols} k {k}: {c}");
            }
        }
        assert_eq!(cols_per_block_with(8, Some(4)), 4);
        assert_eq!(cols_per_block_with(6, Some(4)), 3);
        assert_eq!(cols_per_block_with(7, Some(4)), 1);
        assert_eq!(cols_per_block_with(5, Some(2)), 1);
    }

    #[test]
    fn every_entry_carries_the_launch_bounds() {
        // build.rs writes abi::PTX_LAUNCH_BOUNDS into the PTX: ptxas then keeps a thread's
        // chunk of loads in flight (NOTES.md, mul_mat_vec_f speed), and a launch above 256
        // threads would fail instead of overrunning the reduction buffer.
        let ptx = crate::kernels::PTX;
        for kind in 0..4 {
            for ncols in 1..=abi::MUL_MAT_VEC_MAX_COLS {
                for entry in [abi::mul_mat_vec_entry(kind, ncols), abi::mul_mat_vec_pair_entry(kind, ncols)] {
                    let entry = entry.unwrap();
                    let start = ptx.find(&format!(".entry {entry}(")).unwrap_or_else(|| panic!("{entry} missing"));
                    let header = &ptx[start..start + ptx[start..].find('{').unwrap()];
                    assert!(header.contains(".maxntid 256, 1, 1") && header.contains(".minnctapersm 1"), "{entry}: {header}");
                }
            }
        }
        // [layer-step] GDN_LAYER_STEP's bounds follow (its own test checks them).
        assert_eq!(abi::PTX_LAUNCH_BOUNDS[1], ("mul_mat_vec_", 256, 1));
        // [speed] Only the wide tiled pair's prefix comes before it (first match applies).
        assert!(abi::PTX_LAUNCH_BOUNDS[0].0.starts_with("mul_mat_vec_pair_tiles_wide_"));
        assert_eq!(abi::mul_mat_vec_block_size(usize::MAX / 4), 256);
    }

    #[test]
    fn refuses_more_than_eight_columns_and_odd_rows() {
        let mut mem = HostMemory::new();
        let o = op(&mut mem, DType::F32, 64, 4, 9);
        assert!(matches!(o.validate(&mem), Err(Error::Unsupported { op: OP, .. })));
        assert!(matches!(o.reference(&mut mem, &mut ExactMufu), Err(Error::Unsupported { .. })));
        let o = op(&mut mem, DType::F16, 63, 4, 1);
        assert!(matches!(o.validate(&mem), Err(Error::Unsupported { op: OP, .. })));
    }

    #[test]
    fn refuses_wrong_types() {
        let mut mem = HostMemory::new();
        let o = op(&mut mem, DType::I32, 64, 4, 1);
        assert!(matches!(o.validate(&mem), Err(Error::DType { arg: "weight", got: DType::I32, .. })));
        let mut o = op(&mut mem, DType::F32, 64, 4, 1);
        o.input = mem.alloc_tensor(DType::F16, [64, 1, 1, 1]);
        assert!(matches!(o.validate(&mem), Err(Error::DType { arg: "input", got: DType::F16, .. })));
        let mut o = op(&mut mem, DType::F16, 64, 4, 1);
        o.dst = mem.alloc_tensor(DType::F16, [4, 1, 1, 1]);
        assert!(matches!(o.validate(&mem), Err(Error::DType { arg: "dst", .. })));
    }

    #[test]
    fn refuses_inconsistent_shapes() {
        let mut mem = HostMemory::new();
        let mut o = op(&mut mem, DType::F32, 64, 4, 2);
        o.input = mem.alloc_tensor(DType::F32, [62, 2, 1, 1]);
        assert!(matches!(o.validate(&mem), Err(Error::Shape { arg: "input", .. })));
        let mut o = op(&mut mem, DType::F32, 64, 4, 2);
        o.dst = mem.alloc_tensor(DType::F32, [4, 3, 1, 1]);
        assert!(matches!(o.validate(&mem), Err(Error::Shape { arg: "dst", .. })));
        let mut o = op(&mut mem, DType::F32, 64, 4, 2);
        o.weight = mem.alloc_tensor(DType::F32, [64, 4, 2, 1]);
        assert!(matches!(o.validate(&mem), Err(Error::Shape { arg: "weight", .. })));
        let mut o = op(&mut mem, DType::F32, 64, 4, 2);
        o.input = mem.alloc_tensor(DType::F32, [64, 2, 2, 1]);
        assert!(matches!(o.validate(&mem), Err(Error::Shape { arg: "input", .. })));
    }

    #[test]
    fn refuses_empty_and_out_of_bounds_views() {
        let mut mem = HostMemory::new();
        let mut o = op(&mut mem, DType::F32, 64, 4, 1);
        o.weight = mem.alloc_tensor(DType::F32, [64, 0, 1, 1]);
        assert!(matches!(o.validate(&mem), Err(Error::Empty { arg: "weight", .. })));
        let mut o = op(&mut mem, DType::F32, 64, 4, 1);
        o.input = mem.alloc_tensor(DType::F32, [64, 0, 1, 1]);
        assert!(matches!(o.validate(&mem), Err(Error::Empty { arg: "input", .. })));
        let mut o = op(&mut mem, DType::BF16, 64, 4, 1);
        o.weight.layout.offset += 4;
        assert!(matches!(o.validate(&mem), Err(Error::OutOfBounds { arg: "weight", .. })));
        let mut o = op(&mut mem, DType::F32, 64, 4, 1);
        o.dst.buffer = BufferId(999);
        assert!(matches!(o.validate(&mem), Err(Error::Invalid { op: OP, .. })));
    }

    #[test]
    fn refuses_rows_that_are_not_pair_aligned_or_contiguous() {
        let mut mem = HostMemory::new();
        // Input columns 65 floats apart: column 1 starts at an odd element.
        let mut o = op(&mut mem, DType::F32, 64, 4, 2);
        let buf = mem.alloc(4 * 65 * 2);
        o.input = Tensor::new(buf, Layout { dtype: DType::F32, offset: 0, ne: [64, 2, 1, 1], nb: [4, 260, 520, 520] });
        assert!(matches!(o.validate(&mem), Err(Error::Stride { arg: "input", .. })));
        // The same stride with a single column is fine: only column 0 is read.
        o.input.layout.ne[1] = 1;
        o.dst = mem.alloc_tensor(DType::F32, [4, 1, 1, 1]);
        o.validate(&mem).unwrap();
        // F16 weight starting one element (2 bytes) into its buffer.
        let mut o = op(&mut mem, DType::F16, 64, 4, 1);
        let buf = mem.alloc(2 * 64 * 4 + 2);
        o.weight = Tensor::new(buf, Layout { offset: 2, ..o.weight.layout });
        assert!(matches!(o.validate(&mem), Err(Error::Stride { arg: "weight", .. })));
        // Weight elements two apart (a transposed or interleaved view).
        let mut o = op(&mut mem, DType::F32, 64, 4, 1);
        let buf = mem.alloc(4 * 128 * 4);
        o.weight = Tensor::new(buf, Layout { dtype: DType::F32, offset: 0, ne: [64, 4, 1, 1], nb: [8, 512, 2048, 2048] });
        assert!(matches!(o.validate(&mem), Err(Error::Stride { arg: "weight", .. })));
        // dst rows must be contiguous too.
        let mut o = op(&mut mem, DType::F32, 64, 4, 1);
        let buf = mem.alloc(4 * 8);
        o.dst = Tensor::new(buf, Layout { dtype: DType::F32, offset: 0, ne: [4, 1, 1, 1], nb: [8, 32, 32, 32] });
        assert!(matches!(o.validate(&mem), Err(Error::Stride { arg: "dst", .. })));
    }

    #[test]
    fn refuses_a_dst_that_overlaps_an_input() {
        let mut mem = HostMemory::new();
        let mut o = op(&mut mem, DType::F32, 64, 4, 2);
        o.dst = o.input.view([4, 2, 1, 1], [4, 16, 32, 32], 0);
        assert!(matches!(o.validate(&mem), Err(Error::Aliasing { a: "dst", b: "input", .. })));
        let mut o = op(&mut mem, DType::F32, 64, 4, 2);
        o.dst = o.weight.view([4, 2, 1, 1], [4, 16, 32, 32], 256);
        assert!(matches!(o.validate(&mem), Err(Error::Aliasing { a: "dst", b: "weight", .. })));
        // Weight and input may share memory: both are only read.
        let mut o = op(&mut mem, DType::F32, 64, 4, 1);
        o.input = o.weight.view([64, 1, 1, 1], o.weight.layout.nb, 256);
        o.validate(&mem).unwrap();
    }

    #[test]
    fn never_writes_index_buffers() {
        let mut mem = HostMemory::new();
        let mut o = op(&mut mem, DType::F32, 64, 2, 1);
        let idx = mem.alloc_indices(&[0, 1]);
        o.dst = Tensor::new(idx.buffer, Layout::contiguous(DType::F32, [2, 1, 1, 1]));
        assert!(matches!(o.validate(&mem), Err(Error::Invalid { .. })));
    }
}
