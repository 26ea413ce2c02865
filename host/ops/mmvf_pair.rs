//! MUL_MAT_VEC_PAIR — the alpha and beta mat-vecs of one GDN layer (two `mul_mat_vec_f` of the
//! same input) in one launch, each product computed with exactly the per-column arithmetic of
//! the unfused [`MulMatVec`] (spec §2.9), 1 ..= 16 columns — kernel: `kernels-gpu/src/mmvf.rs`
//! (`mul_mat_vec_pair_*` entries, the unfused kernel's bodies, grid y = 2 picks the product,
//! grid z the column group of at most 8), reference: the unfused [`crate::reference::mmvf`] per
//! product.
//!
//! [wide-pair] Over 8 columns ggml splits each product into launches of at most 8
//! (mul_mat_vec_f's limit); the pair takes the whole product and runs it in column groups of at
//! most 8 in one launch ([`super::mmvf::pair_cols_per_block`]). A column's per-thread loop, warp
//! butterflies and block sum do not depend on which other columns share its block (ggml's own
//! split relies on it), so every element has the bits of the split unfused launches. [pair-gate] And
//! [`MulMatVecPairGate`]: the pair with the gate path (SIGMOID; ADD, SOFTPLUS, MUL) as its
//! epilogue, the same entries with [`abi::PAIR_EPILOGUE_GATE`].

use super::mmvf::MatVecShape;
use super::overlap::{BeforeWait, Forms, Overlap};
use super::{MulMatVec, Op, PlainLaunch, check, knob};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, KernelArg, KernelParams, LaunchDims, ParamBlock, PreparedLaunch};
use crate::kernels::abi;
use crate::memory::{DeviceMemory, HostMemory, KernelAddresses, Memory};
use crate::reference::math::Mufu;
use crate::tensor::{DType, Tensor};

const OP: &str = "MUL_MAT_VEC_PAIR";

/// Two mat-vecs of the same `input` (same view), with weights of the same type and shape and
/// the same precision; `first.dst` and `second.dst` disjoint from each other and the inputs.
///
/// Each product must be a valid [`MulMatVec`] on its own (errors name the product:
/// `first.weight`, `second.dst`, …) except for its column count, which may go up to
/// [`abi::MUL_MAT_VEC_PAIR_MAX_COLS`] = 16 (what ggml runs as several ≤ 8-column launches);
/// 17 or more input columns → [`Error::Unsupported`].
#[derive(Clone, Debug)]
pub struct MulMatVecPair {
    pub first: MulMatVec,
    pub second: MulMatVec,
}

// SAFETY: `abi::MulMatVecPairGateParams` is `#[repr(C)]`: the 88-byte MulMatVecPairParams (ten
// u64, then n_pairs and the explicit `_pad` u32: alignment 8, no padding), six u64, then two u32
// (epilogue and the explicit `_pad`): 144 bytes, alignment 8, no padding bytes; it is the type the
// `mul_mat_vec_pair_*` entries take by value (the same abi.rs is compiled into both).
unsafe impl crate::gpu::KernelParams for abi::MulMatVecPairGateParams {}

/// The argument name of `arg` inside product `first`/`second` (a static name for the error).
fn product_arg(first: bool, arg: &'static str) -> &'static str {
    match (first, arg) {
        (true, "weight") => "first.weight",
        (true, "input") => "first.input",
        (true, "dst") => "first.dst",
        (false, "weight") => "second.weight",
        (false, "input") => "second.input",
        (false, "dst") => "second.dst",
        (true, _) => "first",
        (false, _) => "second",
    }
}

/// A product's own validation error, re-labelled as this op's, naming the product.
fn in_pair(first: bool, e: Error) -> Error {
    let arg = |a| product_arg(first, a);
    match e {
        Error::Shape { arg: a, expected, got, .. } => Error::Shape { op: OP, arg: arg(a), expected, got },
        Error::Stride { arg: a, nb, offset, reason, .. } => Error::Stride { op: OP, arg: arg(a), nb, offset, reason },
        Error::DType { arg: a, expected, got, .. } => Error::DType { op: OP, arg: arg(a), expected, got },
        Error::Empty { arg: a, ne, .. } => Error::Empty { op: OP, arg: arg(a), ne },
        Error::OutOfBounds { arg: a, buffer, start, end, len, .. } => Error::OutOfBounds { op: OP, arg: arg(a), buffer, start, end, len },
        Error::Aliasing { a, b, why, .. } => Error::Aliasing { op: OP, a: arg(a), b: arg(b), why },
        Error::IndexOutOfRange { arg: a, position, index, rows, .. } => {
            Error::IndexOutOfRange { op: OP, arg: arg(a), position, index, rows }
        }
        Error::Unsupported { what, .. } => Error::Unsupported { op: OP, what: format!("{}: {what}", product_arg(first, "")) },
        Error::Invalid { what, .. } => Error::Invalid { op: OP, what: format!("{}: {what}", product_arg(first, "")) },
        // [hostile] an overflowing view was reported as the unfused MUL_MAT_VEC's, unnamed.
        Error::Overflow { arg: a, what, .. } => Error::Overflow { op: OP, arg: arg(a), what },
        other => other,
    }
}

impl MulMatVecPair {
    /// Validates the pair and returns the (common) sizes of its products.
    pub fn check(&self, mem: &dyn Memory) -> Result<MatVecShape> {
        let (a, b) = (&self.first, &self.second);
        // The column limit first, with the pair's own reason.
        let ncols = a.input.ne()[1];
        if ncols > abi::MUL_MAT_VEC_PAIR_MAX_COLS {
            return Err(Error::Unsupported {
                op: OP,
                what: format!(
                    "{ncols} input columns: the pair takes 1 to {} (MUL_MAT_VEC_PAIR_MAX_COLS; mul_mat_vec_f column groups of at most {})",
                    abi::MUL_MAT_VEC_PAIR_MAX_COLS,
                    abi::MUL_MAT_VEC_MAX_COLS
                ),
            });
        }
        // Each product as an unfused MUL_MAT_VEC but for the column count (its other rules
        // are per column: each ≤ 8-column group the launch runs passes them too).
        let shape = a.check_up_to(mem, abi::MUL_MAT_VEC_PAIR_MAX_COLS).map_err(|e| in_pair(true, e))?;
        let shape_b = b.check_up_to(mem, abi::MUL_MAT_VEC_PAIR_MAX_COLS).map_err(|e| in_pair(false, e))?;
        if a.input != b.input {
            return Err(Error::Invalid { op: OP, what: "the two products must read the same input view".into() });
        }
        if b.weight.dtype() != a.weight.dtype() {
            return Err(Error::DType {
                op: OP,
                arg: "second.weight",
                expected: format!("{:?} (the first weight's type)", a.weight.dtype()),
                got: b.weight.dtype(),
            });
        }
        check::shape(OP, "second.weight", &b.weight, a.weight.ne())?;
        if shape_b.kind != shape.kind {
            return Err(Error::Invalid {
                op: OP,
                what: format!("the products' precisions differ ({:?} and {:?})", a.precision, b.precision),
            });
        }
        check::disjoint(OP, "first.dst", &a.dst, "second.dst", &b.dst)?;
        check::disjoint(OP, "first.dst", &a.dst, "second.weight", &b.weight)?;
        check::disjoint(OP, "second.dst", &b.dst, "first.weight", &a.weight)?;
        Ok(shape)
    }
}

impl MulMatVecPair {
    /// \[test\] The tiled launch of this pair (the epilogue off), whatever its column count, in
    /// the wide form or not — what [`Op::prepare`] launches from [`PAIR_TILES_MIN_COLS`] columns:
    /// for running the entry's source on the CPU.
    pub fn tiles_launch(
        &self,
        mem: &dyn Memory,
        addresses: &dyn KernelAddresses,
        wide: bool,
    ) -> Result<PlainLaunch<abi::MulMatVecPairTilesParams>> {
        let shape = self.check(mem)?;
        let params =
            abi::MulMatVecPairGateParams { pair: self.params(addresses, &shape), epilogue: abi::PAIR_EPILOGUE_NONE, ..Default::default() };
        Ok(tiles_plain(&shape, params, Overlap::NONE, wide))
    }

    /// The products' part of the entries' parameters (`shape` from [`MulMatVecPair::check`]).
    fn params(&self, mem: &dyn KernelAddresses, shape: &MatVecShape) -> abi::MulMatVecPairParams {
        let (a, b) = (&self.first, &self.second);
        abi::MulMatVecPairParams {
            weight_0: mem.address(&a.weight),
            weight_1: mem.address(&b.weight),
            w_row_0: check::elem_strides(&a.weight)[1],
            w_row_1: check::elem_strides(&b.weight)[1],
            input: mem.address(&a.input),
            in_col: check::elem_strides(&a.input)[1],
            dst_0: mem.address(&a.dst),
            dst_1: mem.address(&b.dst),
            dst_col_0: check::elem_strides(&a.dst)[1],
            dst_col_1: check::elem_strides(&b.dst)[1],
            n_pairs: (shape.row_len / 2) as u32,
            _pad: 0,
        }
    }
}

/// \[speed\] Columns from which MUL_MAT_VEC_PAIR(_GATE) runs as tiles
/// (`abi::MulMatVecPairTilesParams`: each block 4 heads of both products × 4 columns, its columns
/// read once for 8 weight rows) instead of one block per row and column group, which re-reads
/// every column for every row. `RGDN_PAIR_TILES` = 0 / 1 forces either for measurements.
pub const PAIR_TILES_MIN_COLS: usize = 32;

/// Whether a pair of `ncols` columns runs as tiles: the default rule, or the measurement knob
/// `RGDN_PAIR_TILES` = 0 / 1 (read once per process, as the other launch knobs).
pub fn pair_tiles(ncols: usize) -> bool {
    static KNOB: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    match *KNOB.get_or_init(|| knob("RGDN_PAIR_TILES", 0, 1)) {
        Some(k) => k == 1,
        None => ncols >= PAIR_TILES_MIN_COLS,
    }
}

/// \[speed\] Whether a tiled pair of `rows` rows and `ncols` columns runs as the wide tiles
/// (`mul_mat_vec_pair_tiles_wide_*`: 256 threads, each warp one virtual warp's 8 ring iterations
/// at E = 4096, two blocks a multiprocessor) rather than the 128-thread ones (two virtual warps
/// a warp, 16 iterations, four blocks a multiprocessor): where every tile of the grid is
/// resident at once as a wide block (at most `multiprocessors` × 2 tiles). There each block
/// is a chain a warp runs alone, and half as long a chain is what pays; above it the wide blocks
/// would run in two or more rounds where the narrow ones run in one. Measured on an H100
/// (`results/2026-12-06-pair-tiles-256-h100/`): n_s = 16, T = 4 (128 tiles) 5.02 against 6.56 µs,
/// T = 8 (256 tiles) 6.66 against 7.10; n_s = 64, T = 4 (512 tiles) 12.19 against 10.02.
/// `RGDN_PAIR_TILES_WIDE` = 0 / 1 forces either for measurements and the suite's forced runs.
pub fn pair_tiles_wide(rows: usize, ncols: usize, multiprocessors: u32) -> bool {
    static KNOB: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    match *KNOB.get_or_init(|| knob("RGDN_PAIR_TILES_WIDE", 0, 1)) {
        Some(k) => k == 1,
        None => wide_tiles_fit(rows, ncols, multiprocessors),
    }
}

/// The default rule of [`pair_tiles_wide`]: every tile resident at once as a wide block.
fn wide_tiles_fit(rows: usize, ncols: usize, multiprocessors: u32) -> bool {
    let tiles = rows.div_ceil(abi::BATCH_ROW_HEADS as usize).saturating_mul(ncols.div_ceil(abi::BATCH_ROW_COLS as usize));
    tiles <= (multiprocessors as usize).saturating_mul(abi::PAIR_TILES_WIDE_BLOCKS_PER_SM as usize)
}

/// \[overlap\] The overlap forms of a pair whose input `input` has the columns: with tiles, the
/// tiles' twin entry that lets the next grid start at its start and may itself start early, and
/// waits for the grids before it only after all its work — so everything it touches is touched
/// before its wait, and no block waits with work left. Without tiles, none.
fn pair_forms(op: &dyn Op, input: &Tensor) -> Forms {
    if !pair_tiles(input.ne()[1]) {
        return Forms::NONE;
    }
    Forms { lets_next_start: true, early: Some(BeforeWait { reads: op.inputs(), writes: op.outputs(), parked_blocks: 0 }) }
}

/// The tiled launch of a validated pair (`params` with its epilogue set) in form `overlap`:
/// grid (⌈rows/4⌉, ⌈ncols/4⌉), [`abi::PAIR_TILES_BLOCK`] threads and its shared memory, or with
/// `wide` [`abi::PAIR_TILES_WIDE_BLOCK`] threads and theirs; with any overlap the twin entry.
fn tiles_plain(
    shape: &MatVecShape,
    params: abi::MulMatVecPairGateParams,
    overlap: Overlap,
    wide: bool,
) -> PlainLaunch<abi::MulMatVecPairTilesParams> {
    let entry = if overlap == Overlap::NONE {
        abi::mul_mat_vec_pair_tiles_entry(shape.kind, wide)
    } else {
        abi::mul_mat_vec_pair_tiles_overlap_entry(shape.kind, wide)
    }
    .expect("checked: the kind has an entry");
    let tiles = abi::MulMatVecPairTilesParams {
        gate: params,
        pair_block: shape.block_size,
        // Validated: rows ≤ 2^31 (grid x of the unfused entries), ncols ≤ MUL_MAT_VEC_PAIR_MAX_COLS.
        n_rows: shape.rows as u32,
        n_cols: shape.ncols as u32,
        _pad: 0,
    };
    let (heads, cols) = (abi::BATCH_ROW_HEADS as usize, abi::BATCH_ROW_COLS as usize);
    let (block, shared) = if wide {
        (abi::PAIR_TILES_WIDE_BLOCK, abi::PAIR_TILES_WIDE_SHARED_BYTES)
    } else {
        (abi::PAIR_TILES_BLOCK, abi::PAIR_TILES_SHARED_BYTES)
    };
    let dims =
        LaunchDims::new((shape.rows.div_ceil(heads) as u32, shape.ncols.div_ceil(cols) as u32, 1), (block, 1, 1)).with_shared_bytes(shared);
    PlainLaunch { entry, dims, params: tiles }
}

/// [`tiles_plain`] prepared, launched programmatically when `overlap` (validated against the
/// op's forms) starts early.
fn tiles_launch(gpu: &Gpu, shape: &MatVecShape, params: abi::MulMatVecPairGateParams, overlap: Overlap) -> Result<PreparedLaunch> {
    let wide = pair_tiles_wide(shape.rows, shape.ncols, gpu.multiprocessors()?);
    let PlainLaunch { entry, dims, params: tiles } = tiles_plain(shape, params, overlap, wide);
    let args = [KernelArg::Params(ParamBlock::of(&tiles)?)];
    // SAFETY: the caller's `check` proved the pair (and, with the gate epilogue, its views)
    // valid for `rows` rows and `ncols` columns — everything `mmvf::pair_gate_tile` relies on
    // as GDN_LAYER_STEP's mat-vec items do (the same validation); the grid covers them in tiles
    // of 4 heads × 4 columns (the entry clips the last ones), the block is PAIR_TILES_BLOCK (128)
    // or, for the wide entry, PAIR_TILES_WIDE_BLOCK (256) threads, with the item's reduction
    // buffer and one ring a warp as dynamic shared memory (that form's size), and
    // `pair_block` is ggml's block size for E (≤ 256). [overlap] The twin entry runs the same body between its two
    // `griddepcontrol` instructions; launched programmatically only in the form the overlap pass
    // gave the op, which proved that nothing this grid touches is touched by a grid that may run
    // beside it (`fusion::overlap`).
    unsafe { if overlap.starts_early { gpu.prepare_programmatic(entry, dims, &args) } else { gpu.prepare(entry, dims, &args) } }
}

// SAFETY: `#[repr(C)]`, `Copy`: the 144-byte MulMatVecPairGateParams and four u32 — 160 bytes,
// no padding (`param_struct!` asserts it), alignment 8; the `mul_mat_vec_pair_tiles_*` entries'
// parameter struct.
unsafe impl KernelParams for abi::MulMatVecPairTilesParams {}

impl Op for MulMatVecPair {
    fn name(&self) -> &'static str {
        OP
    }

    fn validate(&self, mem: &dyn Memory) -> Result<()> {
        self.check(mem).map(|_| ())
    }

    fn prepare(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<PreparedLaunch> {
        self.prepare_overlapped(gpu, mem, Overlap::NONE)
    }

    /// \[overlap\] As tiles (from `PAIR_TILES_MIN_COLS` columns): the tiles' twin entry, which lets
    /// the next grid start, may start early, and waits only after all its work.
    fn overlap_forms(&self) -> Forms {
        pair_forms(self, &self.first.input)
    }

    fn prepare_overlapped(&self, gpu: &Gpu, mem: &DeviceMemory, overlap: Overlap) -> Result<PreparedLaunch> {
        if !self.overlap_forms().allow(overlap) {
            return Err(super::overlap::unsupported(OP, overlap));
        }
        let shape = self.check(mem)?;
        let per_block = super::mmvf::pair_cols_per_block(shape.ncols);
        let entry = abi::mul_mat_vec_pair_entry(shape.kind, per_block).expect("checked: kind and ncols have an entry");
        let params =
            abi::MulMatVecPairGateParams { pair: self.params(mem, &shape), epilogue: abi::PAIR_EPILOGUE_NONE, ..Default::default() };
        if pair_tiles(shape.ncols) {
            return tiles_launch(gpu, &shape, params, overlap);
        }
        let groups = (shape.ncols / per_block) as u32;
        let dims =
            LaunchDims::new((shape.rows as u32, 2, groups), (shape.block_size, 1, 1)).with_shared_bytes(abi::MUL_MAT_VEC_SHARED_BYTES);
        let args = [KernelArg::Params(ParamBlock::of(&params)?)];
        // SAFETY: `check` proved each product valid as an unfused MUL_MAT_VEC but for its column
        // count (views inside their buffers for E = 2·n_pairs elements, rows = grid.x weight
        // rows, ncols = grid.z × (the entry's column count, ≤ 8 and dividing ncols:
        // `pair_cols_per_block`) input and dst columns; weight rows and input columns pair-aligned; each dst disjoint from its weight
        // and the input), that both read the same input with weights of one type and shape and
        // one precision (so one entry serves both), and that each dst is disjoint from the other
        // dst and the other weight; the block size is ggml's rule (≤ 256, the PTX launch bound)
        // with the reduction buffer of MUL_MAT_VEC_SHARED_BYTES; `params` is the entry's
        // parameter struct, with the epilogue off (its addresses unused).
        unsafe { gpu.prepare(entry, dims, &args) }
    }

    fn reference(&self, mem: &mut HostMemory, _mufu: &mut dyn Mufu) -> Result<()> {
        self.check(mem)?;
        // The unfused op's reference per product: the pair is bit-identical to two MUL_MAT_VECs
        // (over 8 columns, to the ≤ 8-column launches ggml splits each into; the reference is
        // per column, so one call over all the columns is the same).
        let shape = self.first.check_up_to(mem, abi::MUL_MAT_VEC_PAIR_MAX_COLS)?;
        crate::reference::mmvf::mul_mat_vec(&self.first.weight, &self.first.input, &self.first.dst, &shape, mem)?;
        let shape = self.second.check_up_to(mem, abi::MUL_MAT_VEC_PAIR_MAX_COLS)?;
        crate::reference::mmvf::mul_mat_vec(&self.second.weight, &self.second.input, &self.second.dst, &shape, mem)?;
        Ok(())
    }

    fn inputs(&self) -> Vec<Tensor> {
        vec![self.first.weight, self.second.weight, self.first.input]
    }

    fn outputs(&self) -> Vec<Tensor> {
        vec![self.first.dst, self.second.dst]
    }

    fn must_write(&self) -> Vec<Tensor> {
        self.outputs()
    }
}

// ---- [pair-gate] MUL_MAT_VEC_PAIR_GATE ----

const GATE_OP: &str = "MUL_MAT_VEC_PAIR_GATE";

/// MUL_MAT_VEC_PAIR with the GDN gate path as its epilogue, in one launch: the alpha and beta_raw
/// products as [`MulMatVecPair`] computes and writes them, then per element (r, j)
/// `beta = SIGMOID(beta_raw)` and `gate = MUL(SOFTPLUS(ADD(alpha, dt_bias[r])), ssm_a[r])` —
/// the unfused SIGMOID, ADD (dt_bias \[H_v\] broadcast over the columns), SOFTPLUS and MUL (ssm_a
/// broadcast; at n_t = 1 ggml's fused SOFTPLUS·MUL, the same two roundings), bit for bit:
/// the kernel runs the unary and binary kernels' own bodies on the very f32 the pair stores.
/// Kernel: the `mul_mat_vec_pair_*` entries of `kernels-gpu/src/mmvf.rs` with
/// [`abi::PAIR_EPILOGUE_GATE`]; reference: the pair's, then the unfused element references.
///
/// Valid when `pair` is a valid [`MulMatVecPair`] (1 ..= 16 columns, F32/F16/BF16 weights, both F16
/// precisions; its errors are relabelled as this op's); `dt_bias`, `ssm_a` F32 [H_v, 1, 1, 1]
/// contiguous; `beta`, `gate` F32 [H_v, ncols, 1, 1] with contiguous columns; the four outputs
/// (alpha = `pair.first.dst`, beta_raw = `pair.second.dst`, `beta`, `gate`) disjoint from every
/// input and from each other.
#[derive(Clone, Debug)]
pub struct MulMatVecPairGate {
    /// The alpha product (`pair.first`, writes alpha) and the beta product (`pair.second`, writes beta_raw),
    /// computed and written exactly as MulMatVecPair computes and writes them.
    pub pair: MulMatVecPair,
    /// F32 [H_v, 1, 1, 1] contiguous (H_v = the products' rows): ADD's broadcast operand.
    pub dt_bias: Tensor,
    /// F32 [H_v, 1, 1, 1] contiguous: MUL's broadcast operand.
    pub ssm_a: Tensor,
    /// F32 [H_v, ncols, 1, 1]: SIGMOID(beta_raw).
    pub beta: Tensor,
    /// F32 [H_v, ncols, 1, 1]: softplus(alpha + dt_bias)·ssm_a.
    pub gate: Tensor,
}

/// A pair error, relabelled as [`GATE_OP`]'s (argument names stay `first.weight`, …).
fn as_gate_op(e: Error) -> Error {
    const OP: &str = GATE_OP;
    match e {
        Error::Shape { arg, expected, got, .. } => Error::Shape { op: OP, arg, expected, got },
        Error::Stride { arg, nb, offset, reason, .. } => Error::Stride { op: OP, arg, nb, offset, reason },
        Error::DType { arg, expected, got, .. } => Error::DType { op: OP, arg, expected, got },
        Error::Empty { arg, ne, .. } => Error::Empty { op: OP, arg, ne },
        Error::OutOfBounds { arg, buffer, start, end, len, .. } => Error::OutOfBounds { op: OP, arg, buffer, start, end, len },
        Error::Aliasing { a, b, why, .. } => Error::Aliasing { op: OP, a, b, why },
        Error::IndexOutOfRange { arg, position, index, rows, .. } => Error::IndexOutOfRange { op: OP, arg, position, index, rows },
        Error::Unsupported { what, .. } => Error::Unsupported { op: OP, what },
        Error::Invalid { what, .. } => Error::Invalid { op: OP, what },
        Error::Overflow { arg, what, .. } => Error::Overflow { op: OP, arg, what },
        other => other,
    }
}

impl MulMatVecPairGate {
    /// Validates the op and returns the products' (common) sizes.
    pub fn check(&self, mem: &dyn Memory) -> Result<MatVecShape> {
        const OP: &str = GATE_OP;
        let shape = self.pair.check(mem).map_err(as_gate_op)?;
        let (rows, ncols) = (shape.rows, shape.ncols);
        for (arg, t) in [("dt_bias", &self.dt_bias), ("ssm_a", &self.ssm_a)] {
            check::tensor(OP, arg, t, DType::F32, mem)?;
            check::shape(OP, arg, t, [rows, 1, 1, 1])?;
            check::rows_contiguous(OP, arg, t)?;
        }
        for (arg, t) in [("beta", &self.beta), ("gate", &self.gate)] {
            check::output(OP, arg, t, DType::F32, mem)?;
            check::shape(OP, arg, t, [rows, ncols, 1, 1])?;
            check::rows_contiguous(OP, arg, t)?;
        }
        let (first, second) = (&self.pair.first, &self.pair.second);
        let inputs = [
            ("first.weight", &first.weight),
            ("second.weight", &second.weight),
            ("input", &first.input),
            ("dt_bias", &self.dt_bias),
            ("ssm_a", &self.ssm_a),
        ];
        let outputs = [("alpha", &first.dst), ("beta_raw", &second.dst), ("beta", &self.beta), ("gate", &self.gate)];
        for (i, (out, t_out)) in outputs.iter().enumerate() {
            for (arg, t_in) in inputs {
                check::disjoint(OP, out, t_out, arg, t_in)?;
            }
            for (other, t_other) in &outputs[i + 1..] {
                check::disjoint(OP, out, t_out, other, t_other)?;
            }
        }
        Ok(shape)
    }
}

impl MulMatVecPairGate {
    /// \[test\] The tiled launch of this pair (entry, grid, block, shared bytes, parameters over
    /// `addresses`), whatever its column count, in the wide form or not — what [`Op::prepare`]
    /// launches from [`PAIR_TILES_MIN_COLS`] columns: for running the entry's source on the CPU.
    pub fn tiles_launch(
        &self,
        mem: &dyn Memory,
        addresses: &dyn KernelAddresses,
        wide: bool,
    ) -> Result<PlainLaunch<abi::MulMatVecPairTilesParams>> {
        let shape = self.check(mem)?;
        Ok(tiles_plain(&shape, self.params(addresses, &shape), Overlap::NONE, wide))
    }

    /// The entries' parameters with the gate epilogue on, for a validated op (`shape` from
    /// [`MulMatVecPairGate::check`]).
    pub(crate) fn params(&self, mem: &dyn KernelAddresses, shape: &MatVecShape) -> abi::MulMatVecPairGateParams {
        abi::MulMatVecPairGateParams {
            pair: self.pair.params(mem, shape),
            dt_bias: mem.address(&self.dt_bias),
            ssm_a: mem.address(&self.ssm_a),
            beta: mem.address(&self.beta),
            beta_col: check::elem_strides(&self.beta)[1],
            gate: mem.address(&self.gate),
            gate_col: check::elem_strides(&self.gate)[1],
            epilogue: abi::PAIR_EPILOGUE_GATE,
            _pad: 0,
        }
    }
}

impl Op for MulMatVecPairGate {
    fn name(&self) -> &'static str {
        GATE_OP
    }

    fn validate(&self, mem: &dyn Memory) -> Result<()> {
        self.check(mem).map(|_| ())
    }

    fn prepare(&self, gpu: &Gpu, mem: &DeviceMemory) -> Result<PreparedLaunch> {
        self.prepare_overlapped(gpu, mem, Overlap::NONE)
    }

    /// \[overlap\] As tiles (from `PAIR_TILES_MIN_COLS` columns): the tiles' twin entry, which lets
    /// the next grid start, may start early, and waits only after all its work.
    fn overlap_forms(&self) -> Forms {
        pair_forms(self, &self.pair.first.input)
    }

    fn prepare_overlapped(&self, gpu: &Gpu, mem: &DeviceMemory, overlap: Overlap) -> Result<PreparedLaunch> {
        if !self.overlap_forms().allow(overlap) {
            return Err(super::overlap::unsupported(GATE_OP, overlap));
        }
        let shape = self.check(mem)?;
        let per_block = super::mmvf::pair_cols_per_block(shape.ncols);
        let entry = abi::mul_mat_vec_pair_gate_entry(shape.kind, per_block).expect("checked: kind and ncols have an entry");
        let params = self.params(mem, &shape);
        if pair_tiles(shape.ncols) {
            return tiles_launch(gpu, &shape, params, overlap);
        }
        let groups = (shape.ncols / per_block) as u32;
        let dims =
            LaunchDims::new((shape.rows as u32, 2, groups), (shape.block_size, 1, 1)).with_shared_bytes(abi::MUL_MAT_VEC_SHARED_BYTES);
        let args = [KernelArg::Params(ParamBlock::of(&params)?)];
        // SAFETY: `check` proved the pair valid (everything MulMatVecPair::launch relies on, for
        // the same grid, block and shared memory), dt_bias and ssm_a [rows] contiguous f32
        // inside their buffers, beta and gate [rows, ncols] f32 with contiguous columns inside
        // theirs (element (r, j) at r + j·*_col, the strides passed), each output
        // element-distinct and disjoint from every input (so the `.nc` loads of weights, input,
        // dt_bias and ssm_a see no write) and from every other output; `params` is the entry's
        // parameter struct with the gate epilogue on.
        unsafe { gpu.prepare(entry, dims, &args) }
    }

    fn reference(&self, mem: &mut HostMemory, mufu: &mut dyn Mufu) -> Result<()> {
        let shape = self.check(mem)?;
        // The pair's own reference (the unfused MUL_MAT_VEC per product), then the unfused ops'
        // element references in graph order: equal to the unfused chain by construction.
        self.pair.reference(mem, mufu)?;
        let views = crate::reference::mmvf::GateViews {
            alpha: self.pair.first.dst,
            beta_raw: self.pair.second.dst,
            dt_bias: self.dt_bias,
            ssm_a: self.ssm_a,
            beta: self.beta,
            gate: self.gate,
        };
        crate::reference::mmvf::pair_gate_epilogue(&views, &shape, mem, mufu)?;
        Ok(())
    }

    fn inputs(&self) -> Vec<Tensor> {
        vec![self.pair.first.weight, self.pair.second.weight, self.pair.first.input, self.dt_bias, self.ssm_a]
    }

    fn outputs(&self) -> Vec<Tensor> {
        vec![self.pair.first.dst, self.pair.second.dst, self.beta, self.gate]
    }

    fn must_write(&self) -> Vec<Tensor> {
        self.outputs()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::Precision;
    use crate::reference::math::ExactMufu;
    use crate::tensor::DType;

    fn pair(mem: &mut HostMemory, dtype: DType, e: usize, rows: usize, ncols: usize) -> MulMatVecPair {
        let input = mem.alloc_tensor(DType::F32, [e, ncols, 1, 1]);
        let product = |mem: &mut HostMemory| MulMatVec {
            weight: mem.alloc_tensor(dtype, [e, rows, 1, 1]),
            input,
            dst: mem.alloc_tensor(DType::F32, [rows, ncols, 1, 1]),
            precision: Precision::Default,
        };
        let first = product(mem);
        let second = product(mem);
        MulMatVecPair { first, second }
    }

    #[test]
    fn params_have_no_padding() {
        assert_eq!(std::mem::size_of::<abi::MulMatVecPairParams>(), 10 * 8 + 2 * 4);
        assert_eq!(std::mem::align_of::<abi::MulMatVecPairParams>(), 8);
        assert_eq!(std::mem::size_of::<abi::MulMatVecPairGateParams>(), 10 * 8 + 2 * 4 + 6 * 8 + 2 * 4);
        assert_eq!(std::mem::align_of::<abi::MulMatVecPairGateParams>(), 8);
    }

    #[test]
    fn entries_are_named_per_kind_and_column_count() {
        use abi::mul_mat_vec_kind::*;
        assert_eq!(abi::mul_mat_vec_pair_entry(F32, 1), Some("mul_mat_vec_pair_f32_c1"));
        assert_eq!(abi::mul_mat_vec_pair_entry(BF16, 4), Some("mul_mat_vec_pair_bf16_c4"));
        assert_eq!(abi::mul_mat_vec_pair_entry(F16_HALF, 8), Some("mul_mat_vec_pair_f16_c8"));
        assert_eq!(abi::mul_mat_vec_pair_entry(F16_F32, 3), Some("mul_mat_vec_pair_f16_f32acc_c3"));
        assert_eq!(abi::mul_mat_vec_pair_entry(F32, 0), None);
        assert_eq!(abi::mul_mat_vec_pair_entry(F32, 9), None);
        assert_eq!(abi::mul_mat_vec_pair_entry(4, 1), None);
    }

    #[test]
    fn reference_equals_two_unfused_products() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for (dtype, precision) in [
            (DType::F32, Precision::Default),
            (DType::BF16, Precision::Default),
            (DType::F16, Precision::Default),
            (DType::F16, Precision::F32),
        ] {
            for ncols in [1, 3, 8, 9, 13, 16] {
                let mut mem = HostMemory::new();
                let mut p = pair(&mut mem, dtype, 300, 5, ncols);
                p.first.precision = precision;
                p.second.precision = precision;
                for t in [p.first.weight, p.second.weight] {
                    for i in t.layout.indices().collect::<Vec<_>>() {
                        let v: f32 = rng.random_range(-1.0..1.0);
                        match dtype {
                            DType::F32 => mem.write_f32(&t, i, v).unwrap(),
                            DType::BF16 => mem.write_u16(&t, i, half::bf16::from_f32(v).to_bits()).unwrap(),
                            _ => mem.write_u16(&t, i, half::f16::from_f32(v).to_bits()).unwrap(),
                        }
                    }
                }
                let n = p.first.input.layout.indices().count();
                mem.fill_f32(&p.first.input, &(0..n).map(|_| rng.random_range(-2.0..2.0)).collect::<Vec<f32>>()).unwrap();
                let mut unfused = mem.clone();
                p.reference(&mut mem, &mut ExactMufu).unwrap();
                // The unfused side as ggml runs it: over 8 columns, launches of ≤ 8 columns
                // on column slices of the input and dst.
                for product in [&p.first, &p.second] {
                    for (first, cols) in column_groups(ncols) {
                        let slice = |t: &Tensor, rows: usize| t.view([rows, cols, 1, 1], t.layout.nb, first * t.layout.nb[1]);
                        let part = MulMatVec { input: slice(&product.input, 300), dst: slice(&product.dst, 5), ..product.clone() };
                        part.reference(&mut unfused, &mut ExactMufu).unwrap();
                    }
                }
                for d in [p.first.dst, p.second.dst] {
                    let got: Vec<u32> = d.layout.indices().map(|i| mem.read_u32(&d, i).unwrap()).collect();
                    let want: Vec<u32> = d.layout.indices().map(|i| unfused.read_u32(&d, i).unwrap()).collect();
                    assert_eq!(got, want, "{dtype:?} {precision:?} ncols {ncols}");
                }
            }
        }
    }

    #[test]
    fn valid_pairs_pass_and_too_many_columns_are_refused() {
        let mut mem = HostMemory::new();
        // [seq-batch] Up to 16 tokens of 256 sequences: any count, in column groups of ≤ 8.
        for ncols in (1..=16).chain([24, 60, 255, abi::MUL_MAT_VEC_PAIR_MAX_COLS]) {
            let p = pair(&mut mem, DType::BF16, 64, 32, ncols);
            let shape = p.check(&mem).unwrap();
            assert_eq!((shape.ncols, shape.rows), (ncols, 32));
            // The launch's column groups: one entry's width (≤ 8), dividing the columns.
            let per_block = crate::ops::mmvf::pair_cols_per_block(ncols);
            assert!(per_block <= abi::MUL_MAT_VEC_MAX_COLS && ncols.is_multiple_of(per_block), "{ncols}: {per_block}");
            assert!(abi::mul_mat_vec_pair_entry(shape.kind, per_block).is_some());
        }
        let too_many = abi::MUL_MAT_VEC_PAIR_MAX_COLS + 1;
        let p = pair(&mut mem, DType::F32, 64, 32, too_many);
        match p.validate(&mem) {
            Err(Error::Unsupported { op: OP, what }) => {
                assert!(what.contains(&format!("{too_many} input columns")) && what.contains("MUL_MAT_VEC_PAIR_MAX_COLS"), "{what}")
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(p.reference(&mut mem, &mut ExactMufu), Err(Error::Unsupported { op: OP, .. })));
        // ... and so does the pair-gate, as its own error.
        let gate = MulMatVecPairGate {
            dt_bias: mem.alloc_tensor(DType::F32, [32, 1, 1, 1]),
            ssm_a: mem.alloc_tensor(DType::F32, [32, 1, 1, 1]),
            beta: mem.alloc_tensor(DType::F32, [32, too_many, 1, 1]),
            gate: mem.alloc_tensor(DType::F32, [32, too_many, 1, 1]),
            pair: p,
        };
        let expected = format!("{too_many} input columns");
        assert!(matches!(gate.validate(&mem), Err(Error::Unsupported { op: GATE_OP, what }) if what.contains(&expected)));
    }

    #[test]
    fn wide_pairs_keep_the_unfused_rules_per_column() {
        let mut mem = HostMemory::new();
        // A 12-column pair whose input columns are not pair-aligned (a stride of 65 F32):
        // refused as the unfused op refuses it, whatever the column count.
        let mut p = pair(&mut mem, DType::F32, 64, 4, 12);
        let wide = mem.alloc_tensor(DType::F32, [65, 12, 1, 1]);
        p.first.input = wide.view([64, 12, 1, 1], wide.layout.nb, 0);
        p.second.input = p.first.input;
        assert!(matches!(p.validate(&mem), Err(Error::Stride { op: OP, arg: "first.input", .. })), "{:?}", p.validate(&mem));
        // A dst one column short of the input's 12.
        let mut p = pair(&mut mem, DType::F32, 64, 4, 12);
        p.second.dst = mem.alloc_tensor(DType::F32, [4, 11, 1, 1]);
        assert!(matches!(p.validate(&mem), Err(Error::Shape { op: OP, arg: "second.dst", .. })));
        // The unfused MUL_MAT_VEC itself still takes at most 8.
        let p = pair(&mut mem, DType::F32, 64, 4, 9);
        assert!(matches!(p.first.validate(&mem), Err(Error::Unsupported { op: "MUL_MAT_VEC", .. })));
    }

    /// ggml's split of `ncols` columns into launches: groups of 8, then the rest.
    fn column_groups(ncols: usize) -> Vec<(usize, usize)> {
        (0..ncols).step_by(abi::MUL_MAT_VEC_MAX_COLS).map(|first| (first, abi::MUL_MAT_VEC_MAX_COLS.min(ncols - first))).collect()
    }

    #[test]
    fn refuses_mismatched_products() {
        let mut mem = HostMemory::new();
        // Different input views.
        let mut p = pair(&mut mem, DType::F32, 64, 4, 2);
        p.second.input = mem.alloc_tensor(DType::F32, [64, 2, 1, 1]);
        assert!(matches!(p.validate(&mem), Err(Error::Invalid { op: OP, .. })));
        // Different weight types.
        let mut p = pair(&mut mem, DType::F32, 64, 4, 2);
        p.second.weight = mem.alloc_tensor(DType::F16, [64, 4, 1, 1]);
        assert!(matches!(p.validate(&mem), Err(Error::DType { op: OP, arg: "second.weight", .. })));
        // Different weight shapes (rows): the second dst follows, so only the weight differs.
        let mut p = pair(&mut mem, DType::F32, 64, 4, 2);
        p.second.weight = mem.alloc_tensor(DType::F32, [64, 5, 1, 1]);
        p.second.dst = mem.alloc_tensor(DType::F32, [5, 2, 1, 1]);
        assert!(matches!(p.validate(&mem), Err(Error::Shape { op: OP, arg: "second.weight", .. })));
        // Different precisions (F16 weights).
        let mut p = pair(&mut mem, DType::F16, 64, 4, 2);
        p.second.precision = Precision::F32;
        assert!(matches!(p.validate(&mem), Err(Error::Invalid { op: OP, .. })));
        // ... while F32 weights ignore the precision, as the unfused op does.
        let mut p = pair(&mut mem, DType::F32, 64, 4, 2);
        p.second.precision = Precision::F32;
        p.validate(&mem).unwrap();
    }

    #[test]
    fn refuses_overlapping_dsts_and_names_the_product() {
        let mut mem = HostMemory::new();
        let mut p = pair(&mut mem, DType::F32, 64, 4, 2);
        p.second.dst = p.first.dst;
        assert!(matches!(p.validate(&mem), Err(Error::Aliasing { op: OP, a: "first.dst", b: "second.dst", .. })));
        let mut p = pair(&mut mem, DType::F32, 64, 4, 2);
        p.first.dst = p.second.weight.view([4, 2, 1, 1], [4, 16, 32, 32], 0);
        assert!(matches!(p.validate(&mem), Err(Error::Aliasing { op: OP, a: "first.dst", b: "second.weight", .. })));
        let mut p = pair(&mut mem, DType::F32, 64, 4, 2);
        p.second.dst = p.first.weight.view([4, 2, 1, 1], [4, 16, 32, 32], 0);
        assert!(matches!(p.validate(&mem), Err(Error::Aliasing { op: OP, a: "second.dst", b: "first.weight", .. })));
        // A product's own checks, relabelled: dst overlapping the shared input.
        let mut p = pair(&mut mem, DType::F32, 64, 4, 2);
        p.second.dst = p.second.input.view([4, 2, 1, 1], [4, 16, 32, 32], 0);
        assert!(matches!(p.validate(&mem), Err(Error::Aliasing { op: OP, a: "second.dst", b: "second.input", .. })));
        // Odd E in one product.
        let mut p = pair(&mut mem, DType::F16, 63, 4, 1);
        p.first.precision = Precision::Default;
        assert!(matches!(p.validate(&mem), Err(Error::Unsupported { op: OP, .. })));
    }
}

#[cfg(test)]
mod tile_rule_tests {
    use super::*;

    /// \[speed\] The products run as tiles from [`PAIR_TILES_MIN_COLS`] columns on (the defaults
    /// only: a process with `RGDN_PAIR_TILES` set says so and checks nothing).
    #[test]
    fn pairs_run_as_tiles_from_the_column_threshold_on() {
        if std::env::var_os("RGDN_PAIR_TILES").is_some() {
            eprintln!("RGDN_PAIR_TILES is set: the defaults are not what this process runs; not checked");
            return;
        }
        for (ncols, tiles) in
            [(1, false), (16, false), (PAIR_TILES_MIN_COLS - 1, false), (PAIR_TILES_MIN_COLS, true), (256, true), (4096, true)]
        {
            assert_eq!(pair_tiles(ncols), tiles, "{ncols} columns");
        }
        // Every kind has a tiles entry in both forms.
        for kind in 0..4 {
            for wide in [false, true] {
                assert!(abi::mul_mat_vec_pair_tiles_entry(kind, wide).is_some());
                assert!(abi::mul_mat_vec_pair_tiles_overlap_entry(kind, wide).is_some());
            }
        }
    }

    /// \[speed\] The wide tiles where every tile is resident at once as a wide block (two a
    /// multiprocessor), the 128-thread ones above: with the H100's and H200's 132
    /// multiprocessors, the 9B's 32 heads (8 head tiles) at n_s = 16, T = 4 (16 column tiles) and
    /// T = 8 (32) wide, at n_s = 64, T = 4 (64) not; one tile past the round flips it.
    #[test]
    fn the_wide_tiles_where_the_grid_fits_one_round_of_them() {
        for (rows, ncols, sms, wide) in [
            (32, 64, 132, true),
            (32, 128, 132, true),
            (32, 132, 132, true),
            (32, 133, 132, false),
            (32, 256, 132, false),
            (32, 512, 132, false),
            (32, 64, 8, false),
            (4, 4, 1, true),
            (5, 4, 1, true),
            (9, 4, 1, false),
        ] {
            assert_eq!(wide_tiles_fit(rows, ncols, sms), wide, "{rows} rows, {ncols} columns, {sms} multiprocessors");
        }
    }
}
