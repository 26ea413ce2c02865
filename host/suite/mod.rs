//! The op suite: named cases (as data) that run an op chain on the GPU and on the CPU reference
//! and compare every byte of every buffer — in the spirit of ggml's test-backend-ops, but
//! bitwise. Used by the GPU test binary (`tests/gpu_ops.rs`) and by `rgdn check`.
//!
//! Each case passes only if:
//! 1. **bits**: every buffer after the GPU run equals, byte for byte, the CPU reference run with
//!    the MUFU results the GPU's own instructions give ([`mufu_gpu`]) — inputs untouched, the
//!    poisoned padding around outputs untouched, every output element written. Any two NaNs
//!    count as equal only in the elements an arithmetic op writes ([`Op::must_write`]); guard
//!    bytes, padding, inputs and copies compare every bit, NaN payloads included.
//! 2. **bound**: the op outputs are within the case's [`Tolerance`] of the reference computed
//!    with exact math in place of MUFU approximations ([`crate::reference::math::ExactMufu`]).
//! 3. **hardware**: every MUFU result met is within its documented bound of the exact function.

pub mod cases;
pub mod inputs;
pub mod mufu_gpu;
pub mod parity;

use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::memory::{DeviceMemory, HostMemory};
use crate::ops::Op;
use crate::reference::math::{ExactMufu, MufuOp, MufuTable, exact_mufu, ulp_distance};
use crate::tensor::{DType, Layout, Tensor};
use inputs::Values;
use rand::SeedableRng;
use rand::rngs::StdRng;

/// How far the GPU may be from the exact-math reference (check 2).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Tolerance {
    /// No MUFU op enters: the exact-math reference must match bitwise too.
    BitExact,
    /// At most this many ulp per element (NaN matches NaN, infinities must agree).
    Ulps(u64),
    /// `|gpu − exact| ≤ abs + rel·|exact|` per element.
    AbsRel { abs: f64, rel: f64 },
}

/// Memory, an op chain to run on it, and how to judge the result.
pub struct Scenario {
    pub mem: HostMemory,
    pub ops: Vec<Box<dyn Op>>,
    pub tolerance: Tolerance,
    /// Copies move NaN payloads unchanged; arithmetic produces canonical NaNs on the GPU.
    pub exact_nan_payloads: bool,
}

/// Two op chains run from copies of the same memory (e.g. a fused op and the unfused chain it
/// replaces) that must leave the listed tensors byte for byte identical. On the GPU both chains
/// run on the device; on the CPU both run their references with the same deterministic MUFU
/// ([`ExactMufu`]).
pub struct Equivalence {
    pub mem: HostMemory,
    /// The chain under test (e.g. the fused op).
    pub a: Vec<Box<dyn Op>>,
    /// The chain it must equal (e.g. the unfused ops).
    pub b: Vec<Box<dyn Op>>,
    /// (tensor after chain `a`, tensor after chain `b`): equal element counts, compared element
    /// by element in logical order, every bit (NaN payloads included).
    pub compare: Vec<(Tensor, Tensor)>,
    /// Buffers only one chain uses (the unfused chain's intermediates): every other buffer —
    /// inputs, outputs, caches, guard bytes and padding — must also come out byte for byte
    /// identical after both chains.
    pub private: Vec<crate::tensor::BufferId>,
}

impl Equivalence {
    /// Two chains over `mem`; the buffers that one chain writes and the other never touches
    /// are its private intermediates ([`Equivalence::private`]), every other buffer is
    /// compared whole.
    pub fn new(mem: HostMemory, a: Vec<Box<dyn Op>>, b: Vec<Box<dyn Op>>, compare: Vec<(Tensor, Tensor)>) -> Self {
        use std::collections::BTreeSet;
        let touched = |ops: &[Box<dyn Op>]| -> BTreeSet<_> {
            ops.iter().flat_map(|op| op.inputs().into_iter().chain(op.outputs())).map(|t| t.buffer).collect()
        };
        let written = |ops: &[Box<dyn Op>]| -> BTreeSet<_> { ops.iter().flat_map(|op| op.outputs()).map(|t| t.buffer).collect() };
        let (ta, tb) = (touched(&a), touched(&b));
        let private = written(&a).difference(&tb).chain(written(&b).difference(&ta)).copied().collect();
        Equivalence { mem, a, b, compare, private }
    }
}

/// What a case expects.
pub enum Expect {
    /// Run two chains on the same inputs and compare the listed tensors bitwise.
    Equivalent(Equivalence),
    /// Run on both sides and compare.
    Match(Scenario),
    /// The op chain must be refused with an error for which the predicate holds; nothing may
    /// launch.
    Refusal { scenario: Scenario, predicate: fn(&Error) -> bool, expected: &'static str },
}

/// A named, seeded case of one op group.
pub struct Case {
    pub group: &'static str,
    pub name: String,
    build: Box<dyn Fn() -> Result<Expect> + Send + Sync>,
    /// [seq-batch] Too large for the CPU run (`run_case_cpu` reports it skipped): a GPU-only twin
    /// whose references would take minutes on the CPU.
    pub gpu_only: bool,
}

impl Case {
    pub fn new(group: &'static str, name: String, build: impl Fn() -> Result<Expect> + Send + Sync + 'static) -> Self {
        Case { group, name, build: Box::new(build), gpu_only: false }
    }

    /// [seq-batch] This case, run on the GPU only (see [`Case::gpu_only`]).
    pub fn on_gpu_only(self) -> Self {
        Case { gpu_only: true, ..self }
    }

    /// A case whose data comes from a [`Builder`] seeded by the case name (so each case is
    /// reproducible alone, whatever runs before it).
    pub fn seeded(group: &'static str, name: String, build: impl Fn(Builder) -> Result<Expect> + Send + Sync + 'static) -> Self {
        let seed = cases::seed_of(&name);
        Case::new(group, name, move || build(Builder::new(seed)))
    }

    pub fn build(&self) -> Result<Expect> {
        (self.build)()
    }
}

/// The outcome of one case.
#[derive(Clone, Debug)]
pub struct CaseReport {
    pub group: &'static str,
    pub name: String,
    pub passed: bool,
    pub detail: String,
}

/// Allocates a case's tensors in one [`HostMemory`] from one seed.
pub struct Builder {
    pub rng: StdRng,
    pub mem: HostMemory,
}

/// Poisoned bytes kept before and after every output view (stray writes land there).
pub const GUARD_BYTES: usize = 64;

impl Builder {
    pub fn new(seed: u64) -> Self {
        Builder { rng: StdRng::seed_from_u64(seed), mem: HostMemory::new() }
    }

    /// A tensor of `ne` inside a buffer padded by `pad[d]` extra elements along each dimension
    /// (so its strides are not the contiguous ones when any pad is non-zero) and by guard
    /// bytes; the whole buffer, padding included, is filled with `values`. Panics (with the
    /// typed error's message) when the allocation or `inputs::fill` refuses.
    pub fn tensor_padded(&mut self, dtype: DType, ne: [usize; 4], pad: [usize; 4], values: Values) -> Tensor {
        let outer = [ne[0] + pad[0], ne[1] + pad[1], ne[2] + pad[2], ne[3] + pad[3]];
        let full = Layout::contiguous(dtype, outer);
        let bytes = full.n_elements() * dtype.size() + 2 * GUARD_BYTES;
        let id = self.mem.alloc(bytes);
        let words = inputs::fill(&mut self.rng, bytes / 4, values).unwrap_or_else(|e| panic!("{e}"));
        let buf = self.mem.bytes_mut(id);
        for (chunk, w) in buf.chunks_exact_mut(4).zip(words) {
            chunk.copy_from_slice(&w.to_bits().to_le_bytes());
        }
        Tensor::new(id, full.view(ne, full.nb, GUARD_BYTES))
    }

    /// A contiguous F32 input.
    pub fn input(&mut self, ne: [usize; 4], values: Values) -> Tensor {
        self.tensor_padded(DType::F32, ne, [0; 4], values)
    }

    /// A contiguous F32 output, poisoned with random bits, inside guard bytes.
    pub fn output(&mut self, ne: [usize; 4]) -> Tensor {
        self.tensor_padded(DType::F32, ne, [0; 4], Values::AnyBits)
    }

    pub fn finish(self, ops: Vec<Box<dyn Op>>, tolerance: Tolerance, exact_nan_payloads: bool) -> Expect {
        Expect::Match(Scenario { mem: self.mem, ops, tolerance, exact_nan_payloads })
    }
}

/// Runs one case on the GPU (both checks), never panicking: errors become a failed report.
/// Matches and equivalences run with the launch recorder and timing off — the path an engine
/// runs; refusals run with it on (to count what a refused op launched: nothing) and off.
pub fn run_case(gpu: &Gpu, case: &Case, table: &mut MufuTable) -> CaseReport {
    let result = match case.build() {
        Ok(Expect::Match(s)) => gpu.with_recorder(false, || run_match(gpu, &s, table)),
        Ok(Expect::Refusal { scenario, predicate, expected }) => run_refusal(gpu, &scenario, predicate, expected),
        Ok(Expect::Equivalent(eq)) => gpu.with_recorder(false, || run_equivalent(gpu, &eq)),
        Err(e) => Err(format!("the case did not build: {e}")),
    };
    let (passed, detail) = match result {
        Ok(detail) => (true, detail),
        Err(detail) => (false, detail),
    };
    CaseReport { group: case.group, name: case.name.clone(), passed, detail }
}

/// Test helper: panics naming every case of `cases` that fails on the CPU ([`run_case_cpu`]);
/// a deterministic sample of them ([`sample_for_tests`]) unless `RGDN_FULL_TESTS=1`.
#[cfg(test)]
pub(crate) fn assert_cpu_passes(cases: Vec<Case>) {
    let cases = sample_for_tests(cases);
    let failed: Vec<String> = cases.iter().map(run_case_cpu).filter(|r| !r.passed).map(|r| format!("{}: {}", r.name, r.detail)).collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Whether the test suites run in full (`RGDN_FULL_TESTS=1`, what `scripts/full-tests.sh`
/// sets): every op-suite case on the CPU and the long property and fuzz runs. Otherwise
/// `cargo test` runs a deterministic sample of the same kinds of checks, in minutes.
pub fn full_tests() -> bool {
    std::env::var("RGDN_FULL_TESTS").is_ok_and(|v| v == "1")
}

/// One case in this many of each op group runs in a sampled (not full) test run.
pub const TEST_SAMPLE_EVERY: usize = 8;

/// `cases` as a test run checks them: all of them with `RGDN_FULL_TESTS=1`, else
/// [`sample`]`(cases, TEST_SAMPLE_EVERY)`.
pub fn sample_for_tests(cases: Vec<Case>) -> Vec<Case> {
    if full_tests() { cases } else { sample(cases, TEST_SAMPLE_EVERY) }
}

/// A deterministic sample of `cases`: in the g-th op group (in order of appearance), the cases
/// at positions j with (j + g) mod `every` = 0 — one in `every`, at an offset that rotates from
/// group to group so that neighbouring groups sample different positions (shape, dtype, edge
/// case) — and at least one case of every group. The order is kept.
pub fn sample(cases: Vec<Case>, every: usize) -> Vec<Case> {
    let every = every.max(1);
    let mut groups: Vec<&'static str> = Vec::new();
    let mut sizes: Vec<usize> = Vec::new();
    let mut position = Vec::with_capacity(cases.len());
    for c in &cases {
        let g = groups.iter().position(|x| *x == c.group).unwrap_or_else(|| {
            groups.push(c.group);
            sizes.push(0);
            groups.len() - 1
        });
        position.push((g, sizes[g]));
        sizes[g] += 1;
    }
    let keep = |(g, j): (usize, usize)| {
        let first = (every - g % every) % every;
        // A group smaller than its offset keeps one case all the same.
        if first >= sizes[g] { j == g % sizes[g] } else { (j + g) % every == 0 }
    };
    cases.into_iter().zip(position).filter(|(_, p)| keep(*p)).map(|(c, _)| c).collect()
}

/// Runs one case on the CPU only (no GPU): the case must build, a `Match` case's ops must
/// validate and run their exact-math reference, a `Refusal` case must be refused by validation.
pub fn run_case_cpu(case: &Case) -> CaseReport {
    if case.gpu_only {
        return CaseReport { group: case.group, name: case.name.clone(), passed: true, detail: "GPU only: not run on the CPU".into() };
    }
    let result = match case.build() {
        Ok(Expect::Match(s)) => {
            let mut mem = s.mem.clone();
            s.ops
                .iter()
                .try_for_each(|op| op.reference(&mut mem, &mut ExactMufu))
                .map(|_| "reference ran (exact math)".to_string())
                .map_err(|e| e.to_string())
        }
        Ok(Expect::Refusal { scenario, predicate, expected }) => {
            match scenario.ops.iter().map(|op| op.validate(&scenario.mem)).find_map(|r| r.err()) {
                Some(err) if predicate(&err) => Ok(format!("refused as expected: {err}")),
                Some(err) => Err(format!("refused with the wrong error: {err} (expected {expected})")),
                None => Err(format!("was not refused (expected {expected})")),
            }
        }
        Ok(Expect::Equivalent(eq)) => {
            let run = |ops: &[Box<dyn Op>]| {
                let mut mem = eq.mem.clone();
                ops.iter().try_for_each(|op| op.reference(&mut mem, &mut ExactMufu)).map(|_| mem).map_err(|e| e.to_string())
            };
            run(&eq.a)
                .and_then(|a| Ok((a, run(&eq.b)?)))
                .and_then(|(a, b)| {
                    Ok(format!(
                        "{}; {}",
                        compare_pairs(&a, &b, &eq.compare, true)?,
                        compare_shared_buffers(&a, &b, &eq.private, &eq.compare)?
                    ))
                })
                .map(|d| format!("references agree: {d}"))
        }
        Err(e) => Err(format!("the case did not build: {e}")),
    };
    let (passed, detail) = match result {
        Ok(d) => (true, d),
        Err(d) => (false, d),
    };
    CaseReport { group: case.group, name: case.name.clone(), passed, detail }
}

type Verdict = std::result::Result<String, String>;

fn run_match(gpu: &Gpu, s: &Scenario, table: &mut MufuTable) -> Verdict {
    let e = |e: Error| e.to_string();
    let dev = DeviceMemory::upload(gpu, &s.mem).map_err(e)?;
    for op in &s.ops {
        op.launch(gpu, &dev).map_err(e)?;
    }
    gpu.synchronize().map_err(e)?;
    let got = dev.download(gpu).map_err(e)?;
    let want = mufu_gpu::reference_with_hardware_mufu(gpu, &s.mem, &s.ops, table).map_err(e)?;
    compare_all_bytes(&got, &want, &nan_lenient_words(&want, &s.ops, s.exact_nan_payloads))?;
    let mut exact = s.mem.clone();
    for op in &s.ops {
        op.reference(&mut exact, &mut ExactMufu).map_err(e)?;
    }
    let outputs: Vec<Tensor> = s.ops.iter().flat_map(|op| op.outputs()).collect();
    let bound = check_tolerance(&got, &exact, &outputs, s.tolerance)?;
    Ok(format!("bit-exact; {bound}"))
}

fn run_equivalent(gpu: &Gpu, eq: &Equivalence) -> Verdict {
    let e = |e: Error| e.to_string();
    let run = |ops: &[Box<dyn Op>]| -> std::result::Result<HostMemory, String> {
        let dev = DeviceMemory::upload(gpu, &eq.mem).map_err(e)?;
        for op in ops {
            op.launch(gpu, &dev).map_err(e)?;
        }
        gpu.synchronize().map_err(e)?;
        dev.download(gpu).map_err(e)
    };
    let (a, b) = (run(&eq.a)?, run(&eq.b)?);
    let pairs = compare_pairs(&a, &b, &eq.compare, false)?;
    let whole = compare_shared_buffers(&a, &b, &eq.private, &[])?;
    Ok(format!("GPU runs agree: {pairs}; {whole}"))
}

/// Every buffer but the `private` ones, byte for byte (every bit: guard bytes, padding and
/// inputs included) — except, for two CPU runs, an F32 element of a `nan_lenient` tensor that is
/// NaN in both (see [`compare_pairs`]).
fn compare_shared_buffers(
    a: &HostMemory,
    b: &HostMemory,
    private: &[crate::tensor::BufferId],
    nan_lenient: &[(Tensor, Tensor)],
) -> Verdict {
    if a.n_buffers() != b.n_buffers() {
        return Err(format!("{} buffers after chain a, {} after chain b", a.n_buffers(), b.n_buffers()));
    }
    let mut lenient = std::collections::HashSet::new();
    for (t, _) in nan_lenient.iter().filter(|(t, _)| t.dtype() == crate::tensor::DType::F32) {
        for i in t.layout.indices() {
            if let Some(o) = t.layout.checked_byte_offset(i) {
                lenient.insert((t.buffer.0, o / 4));
            }
        }
    }
    let (mut buffers, mut bytes) = (0usize, 0usize);
    for id in (0..a.n_buffers()).map(crate::tensor::BufferId).filter(|id| !private.contains(id)) {
        let (x, y) = (a.bytes(id), b.bytes(id));
        if x.len() != y.len() {
            return Err(format!("buffer {}: {} vs {} bytes", id.0, x.len(), y.len()));
        }
        let nan_word = |w: usize| {
            let word = |m: &[u8]| m.get(4 * w..4 * w + 4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]).is_nan());
            lenient.contains(&(id.0, w)) && word(x) == Some(true) && word(y) == Some(true)
        };
        let differ: Vec<usize> = x.iter().zip(y).enumerate().filter(|(i, (p, q))| p != q && !nan_word(i / 4)).map(|(i, _)| i).collect();
        if let Some(&i) = differ.first() {
            return Err(format!("buffer {}: {} byte(s) differ, first at byte {i}: {:#04x} vs {:#04x}", id.0, differ.len(), x[i], y[i]));
        }
        buffers += 1;
        bytes += x.len();
    }
    Ok(format!("{buffers} whole buffer(s), {bytes} bytes identical"))
}

/// Compares each (tensor in `a`, tensor in `b`) pair element by element, every bit — except,
/// with `any_nan` (two runs of the CPU reference), that two F32 NaNs are equal: a CPU
/// propagates an operand's NaN (which one depends on the operand order and, through glibc's
/// run-time choice of `fmaf`, on the processor), where the GPU makes its canonical NaN; the GPU
/// runs of the same twins compare every bit.
fn compare_pairs(a: &HostMemory, b: &HostMemory, pairs: &[(Tensor, Tensor)], any_nan: bool) -> Verdict {
    let mut words = 0usize;
    for (i, (ta, tb)) in pairs.iter().enumerate() {
        if ta.layout.n_elements() != tb.layout.n_elements() || ta.dtype() != tb.dtype() {
            return Err(format!("pair {i}: {:?} {:?} vs {:?} {:?}", ta.dtype(), ta.ne(), tb.dtype(), tb.ne()));
        }
        let mut differ = 0usize;
        let mut first = None;
        for (ia, ib) in ta.layout.indices().zip(tb.layout.indices()) {
            let (x, y) = match ta.dtype().size() {
                4 => (a.read_u32(ta, ia), b.read_u32(tb, ib)),
                _ => (a.read_u16(ta, ia).map(u32::from), b.read_u16(tb, ib).map(u32::from)),
            };
            let (x, y) = (x.map_err(|e| format!("pair {i}: {e}"))?, y.map_err(|e| format!("pair {i}: {e}"))?);
            let both_nan = any_nan && ta.dtype() == crate::tensor::DType::F32 && f32::from_bits(x).is_nan() && f32::from_bits(y).is_nan();
            if x != y && !both_nan {
                differ += 1;
                first.get_or_insert((ia, x, y));
            }
        }
        if let Some((at, x, y)) = first {
            return Err(format!(
                "pair {i} (buffers {:?}/{:?}): {differ} element(s) differ, first at {at:?}: {x:#010x} vs {y:#010x}",
                ta.buffer, tb.buffer
            ));
        }
        words += ta.layout.n_elements();
    }
    Ok(format!("{} tensor pair(s), {words} elements bit-identical", pairs.len()))
}

fn run_refusal(gpu: &Gpu, s: &Scenario, predicate: fn(&Error) -> bool, expected: &str) -> Verdict {
    let [op] = s.ops.as_slice() else {
        return Err(format!("a refusal case holds exactly one op, this one {}", s.ops.len()));
    };
    let dev = DeviceMemory::upload(gpu, &s.mem).map_err(|e| e.to_string())?;
    // The recorder counts what the refused op launched (nothing, if the refusal is right).
    let (result, launched) = gpu.with_recorder(true, || {
        let before: usize = gpu.launch_counts().values().sum();
        let result = op.launch(gpu, &dev);
        (result, gpu.launch_counts().values().sum::<usize>() - before)
    });
    // And with the recorder off (the engine's path): the same refusal.
    let unrecorded = gpu.with_recorder(false, || op.launch(gpu, &dev));
    match (result, unrecorded) {
        (Err(err), Err(off)) if predicate(&err) && launched == 0 && err.to_string() == off.to_string() => {
            Ok(format!("refused as expected (recorder on and off): {err}"))
        }
        (Err(err), Err(off)) if predicate(&err) && launched == 0 => Err(format!("refused ({err}) with the recorder on, but off: {off}")),
        (Err(err), Ok(())) if predicate(&err) => Err(format!("refused ({err}) with the recorder on, NOT with it off")),
        (Err(err), _) if predicate(&err) => Err(format!("refused ({err}) but launched {launched} kernel(s)")),
        (Err(err), _) => Err(format!("refused with the wrong error: {err} (expected {expected})")),
        (Ok(()), _) => Err(format!("was not refused (expected {expected})")),
    }
}

/// Per buffer, the 4-byte words in which any NaN matches any NaN: the F32 elements the ops
/// always write (arithmetic yields the GPU's canonical NaN where the CPU keeps a payload) —
/// none when the case keeps NaN payloads. Guard bytes, padding and every word no op writes
/// stay bit for bit.
fn nan_lenient_words(mem: &HostMemory, ops: &[Box<dyn Op>], exact_nan_payloads: bool) -> Vec<Vec<bool>> {
    let mut lenient: Vec<Vec<bool>> = (0..mem.n_buffers()).map(|b| vec![false; mem.bytes(crate::tensor::BufferId(b)).len() / 4]).collect();
    if exact_nan_payloads {
        return lenient;
    }
    for t in ops.iter().flat_map(|op| op.must_write()).filter(|t| t.dtype() == DType::F32) {
        let Some(words) = lenient.get_mut(t.buffer.0) else { continue };
        for i in t.layout.indices() {
            if let Some(w) = t.layout.checked_byte_offset(i).filter(|o| o % 4 == 0).and_then(|o| words.get_mut(o / 4)) {
                *w = true;
            }
        }
    }
    lenient
}

/// Check 1: every byte of every buffer (NaN = NaN only in the `lenient` words).
fn compare_all_bytes(got: &HostMemory, want: &HostMemory, lenient: &[Vec<bool>]) -> Verdict {
    const SHOW: usize = 4;
    let mut shown = Vec::new();
    let mut total = 0usize;
    for b in 0..want.n_buffers() {
        let id = crate::tensor::BufferId(b);
        let (g, w) = (got.bytes(id), want.bytes(id));
        if g.len() != w.len() {
            return Err(format!("buffer {b}: {} bytes back, expected {}", g.len(), w.len()));
        }
        for (i, (gw, ww)) in g.chunks(4).zip(w.chunks(4)).enumerate() {
            if gw == ww {
                continue;
            }
            if gw.len() == 4 && lenient.get(b).and_then(|l| l.get(i)).copied().unwrap_or(false) {
                let (x, y) = (f32::from_le_bytes(gw.try_into().unwrap()), f32::from_le_bytes(ww.try_into().unwrap()));
                if x.is_nan() && y.is_nan() {
                    continue;
                }
            }
            total += 1;
            if shown.len() < SHOW {
                shown.push(format!("buffer {b} byte {}: gpu {:02x?} reference {:02x?}", 4 * i, gw, ww));
            }
        }
    }
    if total == 0 { Ok(String::new()) } else { Err(format!("{total} word(s) differ from the reference: {}", shown.join("; "))) }
}

/// Check 2: outputs against the exact-math reference.
fn check_tolerance(got: &HostMemory, exact: &HostMemory, outputs: &[Tensor], tol: Tolerance) -> Verdict {
    let mut worst_ulp = 0u64;
    let mut worst_err = 0f64;
    for t in outputs.iter().filter(|t| t.dtype() == DType::F32) {
        for i in t.layout.indices() {
            let (g, x) = (got.read_f32(t, i).map_err(|e| e.to_string())?, exact.read_f32(t, i).map_err(|e| e.to_string())?);
            if g.is_nan() && x.is_nan() {
                continue;
            }
            let ok = match tol {
                Tolerance::BitExact => g.to_bits() == x.to_bits(),
                Tolerance::Ulps(n) => {
                    let u = ulp_distance(g, x);
                    worst_ulp = worst_ulp.max(u);
                    u <= n && g.is_nan() == x.is_nan()
                }
                Tolerance::AbsRel { abs, rel } => {
                    if g.is_infinite() || x.is_infinite() {
                        g == x
                    } else {
                        let err = (g as f64 - x as f64).abs();
                        let scaled = err / (abs + rel * (x as f64).abs());
                        worst_err = worst_err.max(scaled);
                        scaled <= 1.0
                    }
                }
            };
            if !ok {
                return Err(format!(
                    "output {:?} at {i:?}: gpu {g:e} ({:#010x}) vs exact-math {x:e} ({:#010x}), beyond {tol:?}",
                    t.buffer,
                    g.to_bits(),
                    x.to_bits()
                ));
            }
        }
    }
    Ok(match tol {
        Tolerance::BitExact => "exact math agrees bitwise".into(),
        Tolerance::Ulps(n) => format!("≤ {worst_ulp} ulp from exact math (bound {n})"),
        Tolerance::AbsRel { .. } => format!("error ≤ {:.2} of the abs+rel bound", worst_err),
    })
}

/// Check 3: each MUFU result in `table` against the exact function. Returns the worst
/// deviation seen per instruction, or the first violation.
pub fn check_mufu_bounds(table: &MufuTable) -> std::result::Result<Vec<(MufuOp, u64, usize)>, String> {
    let mut worst: Vec<(MufuOp, u64, usize)> = MufuOp::ALL.iter().map(|op| (*op, 0, 0)).collect();
    for (op, x, hw) in table.entries() {
        let exact = exact_mufu(op, x);
        let slot = worst.iter_mut().find(|w| w.0 == op).expect("every op has a slot");
        slot.2 += 1;
        if hw.is_nan() && exact.is_nan() {
            continue;
        }
        // lg2.approx has an absolute error bound near 1 (where log2 is near 0): 2^-22 in the
        // PTX ISA; allow 2^-21 there and 2 ulp elsewhere. Results that flush or overflow must
        // agree exactly.
        if op == MufuOp::Lg2 && (0.5..=2.0).contains(&x) {
            let err = (hw as f64 - exact as f64).abs();
            if err > 2f64.powi(-21) {
                return Err(format!("lg2.approx({x:e}) = {hw:e}, exact {exact:e}: absolute error {err:e} > 2^-21"));
            }
            continue;
        }
        let u = ulp_distance(hw, exact);
        slot.1 = slot.1.max(u);
        if u > crate::reference::math::MUFU_ULP_BOUND as u64 {
            return Err(format!("{op:?}.approx({x:e} = {:#010x}) = {hw:e}, exact {exact:e}: {u} ulp", x.to_bits()));
        }
    }
    Ok(worst)
}

/// Prints a test-backend-ops-like table (op, cases, passed) and returns whether all passed.
pub fn summarize(reports: &[CaseReport], out: &mut dyn std::io::Write) -> std::io::Result<bool> {
    let groups = group_counts(reports, |r| [1, r.passed as usize]);
    let w = name_width(&groups, "op");
    writeln!(out, "{:<w$} {:>6} {:>7}", "op", "cases", "passed")?;
    for (g, [n, p]) in &groups {
        writeln!(out, "{:<w$} {:>6} {:>7}{}", g, n, p, if n == p { "" } else { "   FAIL" })?;
    }
    let [n, p] = totals(&groups);
    writeln!(out, "{:<w$} {:>6} {:>7}", "total", n, p)?;
    Ok(n == p)
}

/// The table of a run without a GPU: per group, how many cases ran their CPU reference, how
/// many were refused as they expect, how many failed (did not build, reference refused, wrong
/// refusal). Nothing was compared with a GPU, so no column says "passed". `Ok(true)` when
/// none failed.
pub fn summarize_cpu(reports: &[CaseReport], out: &mut dyn std::io::Write) -> std::io::Result<bool> {
    let groups = group_counts(reports, |r| match (r.passed, r.detail.starts_with("refused as expected")) {
        (true, false) => [1, 1, 0, 0],
        (true, true) => [1, 0, 1, 0],
        (false, _) => [1, 0, 0, 1],
    });
    let w = name_width(&groups, "op (CPU only)");
    let row = |name: &str, c: [usize; 4]| format!("{name:<w$} {:>6} {:>14} {:>20} {:>7}", c[0], c[1], c[2], c[3]);
    writeln!(out, "{:<w$} {:>6} {:>14} {:>20} {:>7}", "op (CPU only)", "cases", "reference ran", "refused as expected", "failed")?;
    for (g, c) in &groups {
        writeln!(out, "{}{}", row(g, *c), if c[3] == 0 { "" } else { "   FAIL" })?;
    }
    let total = totals(&groups);
    writeln!(out, "{}", row("total", total))?;
    writeln!(out, "(no GPU: nothing was compared; run on a GPU machine for the bit-exactness check)")?;
    Ok(total[3] == 0)
}

/// Per group (in first-seen order), the sum of `count` over its reports.
fn group_counts<const N: usize>(reports: &[CaseReport], count: impl Fn(&CaseReport) -> [usize; N]) -> Vec<(&'static str, [usize; N])> {
    let mut groups: Vec<(&'static str, [usize; N])> = Vec::new();
    for r in reports {
        let i = match groups.iter().position(|g| g.0 == r.group) {
            Some(i) => i,
            None => {
                groups.push((r.group, [0; N]));
                groups.len() - 1
            }
        };
        for (sum, c) in groups[i].1.iter_mut().zip(count(r)) {
            *sum += c;
        }
    }
    groups
}

/// The first column's width: the longest group name or the header, so that the columns stay
/// aligned whatever the op names.
fn name_width<const N: usize>(groups: &[(&str, [usize; N])], header: &str) -> usize {
    groups.iter().map(|g| g.0.chars().count()).chain([header.chars().count(), "total".len()]).max().unwrap_or(0)
}

fn totals<const N: usize>(groups: &[(&str, [usize; N])]) -> [usize; N] {
    groups.iter().fold([0; N], |mut acc, g| {
        acc.iter_mut().zip(g.1).for_each(|(a, c)| *a += c);
        acc
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::Scale;
    use crate::tensor::BufferId;

    /// The sample keeps about one case in `every` of each group, at least one of every group,
    /// at offsets that differ between neighbouring groups, in order, and the same every time.
    #[test]
    fn the_test_sample_covers_every_group_deterministically() {
        let all = cases::all();
        let names = |cases: &[Case]| cases.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
        let picked = sample(cases::all(), 8);
        assert_eq!(names(&picked), names(&sample(cases::all(), 8)));
        let groups = |cases: &[Case]| cases.iter().map(|c| c.group).collect::<std::collections::BTreeSet<_>>();
        assert_eq!(groups(&picked), groups(&all));
        assert!(picked.len() * 8 <= all.len() + 8 * groups(&all).len(), "{} of {}", picked.len(), all.len());
        let order: Vec<usize> = picked.iter().map(|c| all.iter().position(|a| a.name == c.name).unwrap()).collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]));
        // Groups 0 and 1 start at different positions.
        let first_of =
            |g: &str| all.iter().filter(|c| c.group == g).position(|c| c.name == picked.iter().find(|p| p.group == g).unwrap().name);
        let (g0, g1) = (all[0].group, all.iter().find(|c| c.group != all[0].group).unwrap().group);
        assert_ne!(first_of(g0), first_of(g1));
        assert_eq!(sample(cases::all(), 1).len(), all.len());
        // Groups smaller than their offset keep a case too.
        let tiny = |group: &'static str, n: usize| {
            (0..n).map(move |i| Case::new(group, format!("{group}#{i}"), || Err(crate::Error::Invalid { op: "test", what: String::new() })))
        };
        let few: Vec<Case> = tiny("A", 9).chain(tiny("B", 1)).chain(tiny("C", 2)).collect();
        let kept: Vec<String> = sample(few, 8).into_iter().map(|c| c.name).collect();
        assert_eq!(kept, ["A#0", "A#8", "B#0", "C#0"]);
    }

    /// Column k of every line starts where the header's does, for group names longer than
    /// the old fixed 24-character column.
    #[test]
    fn summary_columns_stay_aligned_for_long_op_names() {
        let report =
            |group: &'static str, passed: bool, detail: &str| CaseReport { group, name: group.into(), passed, detail: detail.into() };
        let reports = [
            report("SCALE", true, ""),
            report("GDN_LAYER_STEP_VS_UNFUSED_AND_THEN_SOME", true, "refused as expected: x"),
            report("GDN_LAYER_STEP_VS_UNFUSED_AND_THEN_SOME", false, "wrong"),
        ];
        for table in [0, 1] {
            let mut out = Vec::new();
            let ok = if table == 0 { summarize(&reports, &mut out) } else { summarize_cpu(&reports, &mut out) }.unwrap();
            assert!(!ok);
            let text = String::from_utf8(out).unwrap();
            let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('(')).collect();
            // Where each right-aligned column ends: the header's column ends are every line's.
            let ends = |l: &str| -> Vec<usize> {
                let l = l.trim_end_matches("   FAIL");
                let chars: Vec<char> = l.chars().collect();
                (1..=chars.len()).filter(|&i| chars[i - 1] != ' ' && (i == chars.len() || chars[i] == ' ')).collect()
            };
            let want: Vec<usize> = ends(lines[0]).into_iter().rev().take(2).collect();
            for l in &lines {
                let got: Vec<usize> = ends(l).into_iter().rev().take(2).collect();
                assert_eq!(got, want, "table {table}, line {l:?} in\n{text}");
            }
        }
    }

    /// A Scale writing a 4-float output inside guard bytes, and two memories that differ by
    /// NaN payloads in one output element and, optionally, one guard word.
    fn nan_case(guard_nan: bool) -> (HostMemory, HostMemory, Vec<Box<dyn Op>>) {
        let mut b = Builder::new(1);
        let src = b.input([4, 1, 1, 1], Values::Uniform(1.0));
        let dst = b.output([4, 1, 1, 1]);
        let ops: Vec<Box<dyn Op>> = vec![Box::new(Scale { src, dst, scale: 1.0, bias: 0.0 })];
        let (mut got, mut want) = (b.mem.clone(), b.mem);
        let element = dst.layout.offset;
        got.bytes_mut(dst.buffer)[element..element + 4].copy_from_slice(&0x7fc0_0001u32.to_le_bytes());
        want.bytes_mut(dst.buffer)[element..element + 4].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
        if guard_nan {
            got.bytes_mut(dst.buffer)[..4].copy_from_slice(&0x7fc0_0002u32.to_le_bytes());
            want.bytes_mut(dst.buffer)[..4].copy_from_slice(&0x7fc0_0003u32.to_le_bytes());
        }
        (got, want, ops)
    }

    #[test]
    fn nans_match_only_in_written_elements() {
        let (got, want, ops) = nan_case(false);
        compare_all_bytes(&got, &want, &nan_lenient_words(&want, &ops, false)).unwrap();
        assert!(compare_all_bytes(&got, &want, &nan_lenient_words(&want, &ops, true)).is_err());
        // Two different NaNs in a guard word are a difference, payloads or not.
        let (got, want, ops) = nan_case(true);
        let e = compare_all_bytes(&got, &want, &nan_lenient_words(&want, &ops, false)).unwrap_err();
        assert!(e.contains("byte 0"), "{e}");
    }

    #[test]
    fn an_equivalence_compares_every_shared_buffer() {
        let setup = cases::gdn_conv_chain::ChainSetup::sweep_shape(0, 4, 3);
        let eq = setup.equivalence(Builder::new(3));
        // The unfused chain's GET_ROWS and CONCAT outputs are its own.
        assert_eq!(eq.private.len(), 2, "{:?}", eq.private);
        let run = |ops: &[Box<dyn Op>]| {
            let mut mem = eq.mem.clone();
            ops.iter().for_each(|op| op.reference(&mut mem, &mut ExactMufu).unwrap());
            mem
        };
        let (a, mut b) = (run(&eq.a), run(&eq.b));
        compare_shared_buffers(&a, &b, &eq.private, &[]).unwrap();
        // A stray write into the guard bytes of the cache, or into an input, is caught.
        for id in [eq.compare[3].0.buffer, BufferId(2)] {
            let saved = b.bytes(id)[0];
            b.bytes_mut(id)[0] ^= 1;
            assert!(compare_shared_buffers(&a, &b, &eq.private, &[]).is_err(), "buffer {}", id.0);
            b.bytes_mut(id)[0] = saved;
        }
    }
}
