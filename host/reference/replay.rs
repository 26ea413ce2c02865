//! [replay] Exact-replay rollback (issue 26, `docs/rollback.md`): the CPU reference. A sequence
//! keeps one committed conv window and one committed ssm state (one row of each cache) and the
//! token log of its last verify step, instead of 1 + R snapshot rows. The next step takes the
//! sequence's accepted count `a` (0 … T of that step), first replays the `a` accepted tokens of
//! the log from the committed state and commits, then verifies its own tokens from the new
//! committed state, writing every output, no state slot, and the log of its tokens.
//!
//! Every float operation is an existing reference's helper, in the same order:
//! - **replay** ([`replay`]): per (sequence, head, column) the committed row's warp
//!   ([`Lanes`](super::gated_delta_net::Lanes)), then per logged token t < a `γ = exp(g)` and [`token_update`], the update
//!   half of [`super::gated_delta_net::token_step`], which the snapshot path ran on the same
//!   bits in the same order when it wrote the state after token a − 1. No output is computed;
//! - **commit**: that state written once over the committed row (a > 0); the committed window
//!   becomes window(a) of spec §1.3, the last K_c − 1 columns of
//!   [committed window ; logged conv inputs 0 … a − 1], bit copies;
//! - **verify** ([`verify`]): the conv chain's reference ([`gdn_conv_chain`]) reading the
//!   committed windows with no snapshot row, then GATED_DELTA_NET's per-token loop
//!   ([`super::gated_delta_net::token_step`], `mul(·, scale)`) from the committed states with
//!   no slot written; then the log, bit copies of values the step computed.
//!
//! The gate path (the alpha/beta products, SIGMOID, ADD, SOFTPLUS, MUL) does not change with
//! replay: [`verify`] takes its g and β.

use super::gated_delta_net::{read_lanes, token_step, token_update};
use super::gdn_conv_chain::{ChainViews, gdn_conv_chain};
use super::math::{Mufu, exp, mul};
use crate::error::{Error, Result};
use crate::kernels::abi::GDN_HEAD_DIM as D;
use crate::memory::HostMemory;
use crate::tensor::{DType, Tensor};

const OP: &str = "GDN_REPLAY";

/// What the sequences keep between steps besides the log, and the layer's conv parameters.
#[derive(Clone, Copy, Debug)]
pub struct CommittedViews {
    /// `[(K_c − 1)·C, rows]`: committed conv windows, a row laid out as a conv-cache row
    /// (`[C][K_c − 1]`: channel-major, oldest column first).
    pub conv_cache: Tensor,
    /// `[D·D·H_v, rows]`: committed ssm states, a row laid out as an ssm-cache row
    /// (`[H_v][col][i]`: element (i, col, h) at `(h·D + col)·D + i`).
    pub ssm_cache: Tensor,
    /// `[K_c, C]`: the conv taps.
    pub weight: Tensor,
    /// H_k.
    pub n_k_heads: usize,
    /// H_v.
    pub n_v_heads: usize,
    /// The L2 norm's epsilon.
    pub eps: f32,
}

impl CommittedViews {
    /// K_c − 1.
    fn window_len(&self) -> usize {
        self.weight.ne()[0] - 1
    }

    /// C.
    fn channels(&self) -> usize {
        self.weight.ne()[1]
    }
}

/// The token log of one verify step of n_s sequences of T tokens each: one of the two sets a
/// layer uses alternately (the step being verified writes one while the next step's replay
/// reads the other). Every value is one the verify step computes anyway, kept as bits. Per token
/// and sequence: C + (H_k + H_v)·D + 2·H_v floats (9B: 32 KiB of conv inputs and 24.25 KiB of
/// k, v, g, β). Each tensor is `[…, T, n_s]`: token t of sequence s at index `[…, t, s]`.
#[derive(Clone, Copy, Debug)]
pub struct TokenLog {
    /// `[C, T, n_s]`: each token's conv input, its `qkv_mixed` column (before the conv).
    pub qkv: Tensor,
    /// `[D, H_k, T, n_s]`: k after L2_NORM.
    pub k: Tensor,
    /// `[D, H_v, T, n_s]`: v after the conv and SiLU.
    pub v: Tensor,
    /// `[1, H_v, T, n_s]`: the gate g (log decay).
    pub g: Tensor,
    /// `[1, H_v, T, n_s]`: β.
    pub beta: Tensor,
}

impl TokenLog {
    /// A log of `n_tokens` tokens of `n_seqs` sequences for `views`' layer, each tensor
    /// contiguous in a zero-filled buffer of its own.
    pub fn alloc(mem: &mut HostMemory, views: &CommittedViews, n_tokens: usize, n_seqs: usize) -> Result<TokenLog> {
        let (c, hk, hv) = (views.channels(), views.n_k_heads, views.n_v_heads);
        let mut f32s = |ne| mem.try_alloc_tensor(DType::F32, ne);
        Ok(TokenLog {
            qkv: f32s([c, n_tokens, n_seqs, 1])?,
            k: f32s([D, hk, n_tokens, n_seqs])?,
            v: f32s([D, hv, n_tokens, n_seqs])?,
            g: f32s([1, hv, n_tokens, n_seqs])?,
            beta: f32s([1, hv, n_tokens, n_seqs])?,
        })
    }

    /// T, the logged step's tokens per sequence.
    pub fn n_tokens(&self) -> usize {
        self.qkv.ne()[1]
    }

    /// n_s.
    pub fn n_seqs(&self) -> usize {
        self.qkv.ne()[2]
    }

    fn tensors(&self) -> [Tensor; 5] {
        [self.qkv, self.k, self.v, self.g, self.beta]
    }
}

/// One verify step's own views: its tokens, the gate path's g and β, and its outputs (the
/// GATED_DELTA_NET output and the conv chain's).
#[derive(Clone, Copy, Debug)]
pub struct VerifyViews {
    /// `[C, T, n_s]`: the step's tokens (`qkv_mixed`).
    pub qkv: Tensor,
    /// `[1, H_v, T, n_s]`: the gate g of every token.
    pub g: Tensor,
    /// `[1, H_v, T, n_s]`: β of every token.
    pub beta: Tensor,
    /// `[C, T, n_s]`: the SSM_CONV + SiLU output (q, k, v channels).
    pub conv_out: Tensor,
    /// `[D, H_k, T, n_s]`: the normalised q heads.
    pub q_norm: Tensor,
    /// `[D, H_k, T, n_s]`: the normalised k heads.
    pub k_norm: Tensor,
    /// `[D, H_v, T, n_s]`: the attention output.
    pub out: Tensor,
}

/// Sequence s's committed rows are `rows[s]` of both caches: one per sequence, in range.
fn check_rows(views: &CommittedViews, rows: &[usize], n_seqs: usize) -> Result<()> {
    let bad = |what: String| Err(Error::Invalid { op: OP, what });
    if rows.len() != n_seqs {
        return bad(format!("{} committed rows for {n_seqs} sequences", rows.len()));
    }
    let n_rows = views.conv_cache.ne()[1].min(views.ssm_cache.ne()[1]);
    if let Some((s, row)) = rows.iter().enumerate().find(|(_, r)| **r >= n_rows) {
        return bad(format!("sequence {s}: committed row {row} out of range 0 … {}", n_rows.saturating_sub(1)));
    }
    if let Some(s) = (1..rows.len()).find(|&s| rows[..s].contains(&rows[s])) {
        return bad(format!("sequence {s}: committed row {} is another sequence's", rows[s]));
    }
    Ok(())
}

/// The accepted counts, validated like an index: one per logged sequence, each in 0 ..= T of
/// the logged step; a typed refusal names the value out of range.
pub fn check_accepted(log: &TokenLog, accepted: &[usize]) -> Result<()> {
    let bad = |what: String| Err(Error::Invalid { op: OP, what });
    if accepted.len() != log.n_seqs() {
        return bad(format!("{} accepted counts for a log of {} sequences", accepted.len(), log.n_seqs()));
    }
    match accepted.iter().enumerate().find(|(_, a)| **a > log.n_tokens()) {
        Some((s, a)) => bad(format!("sequence {s}: accepted count {a} out of range 0 ..= {} (the logged step's tokens)", log.n_tokens())),
        None => Ok(()),
    }
}

/// Replay and commit: for each sequence s with `a = accepted[s] > 0`, the state after token
/// a − 1 of the logged step ([`token_update`] over the logged k, v, g, β of tokens 0 … a − 1 in
/// order, from the committed state) is written over committed row `rows[s]`, and the committed
/// window becomes the last K_c − 1 columns of [committed window ; logged conv inputs 0 … a − 1].
/// With a = 0 both rows stay as they are. Everything is validated before anything is written.
pub fn replay(
    views: &CommittedViews,
    rows: &[usize],
    log: &TokenLog,
    accepted: &[usize],
    mem: &mut HostMemory,
    mufu: &mut dyn Mufu,
) -> Result<()> {
    check_rows(views, rows, log.n_seqs())?;
    check_accepted(log, accepted)?;
    // 1. Replay and 2. commit the states (the committed row is read and written).
    let states = StateLog { ssm_cache: views.ssm_cache, k: log.k, v: log.v, g: log.g, beta: log.beta, n_k_heads: views.n_k_heads };
    replay_states(&states, rows, rows, accepted, mem, mufu)?;
    let (kc1, c) = (views.window_len(), views.channels());
    for (s, (&row, &a)) in rows.iter().zip(accepted).enumerate() {
        if a == 0 {
            continue;
        }
        // 2. Commit the window: window(a) of [committed window ; logged inputs 0 … a − 1].
        for ch in 0..c {
            let old = (0..kc1).map(|j| mem.read_u32(&views.conv_cache, [ch * kc1 + j, row, 0, 0]));
            let column: Vec<u32> = old.chain((0..a).map(|t| mem.read_u32(&log.qkv, [ch, t, s, 0]))).collect::<Result<_>>()?;
            for j in 0..kc1 {
                mem.write_u32(&views.conv_cache, [ch * kc1 + j, row, 0, 0], column[a + j])?;
            }
        }
    }
    Ok(())
}

/// What the state half of replay reads and writes: the ssm cache (`[D·D·H_v, rows]`, a row laid
/// out as an ssm-cache row) and the logged k, v, g, β of [`TokenLog`] (`[…, T, n_s]`).
#[derive(Clone, Copy, Debug)]
pub struct StateLog {
    /// `[D·D·H_v, rows]`: element (i, col, h) of row r at `[(h·D + col)·D + i, r]`.
    pub ssm_cache: Tensor,
    /// `[D, H_k, T, n_s]`.
    pub k: Tensor,
    /// `[D, H_v, T, n_s]`.
    pub v: Tensor,
    /// `[1, H_v, T, n_s]`.
    pub g: Tensor,
    /// `[1, H_v, T, n_s]`.
    pub beta: Tensor,
    /// H_k: value head h reads key head h mod H_k.
    pub n_k_heads: usize,
}

/// The state half of [`replay`] (and GATED_DELTA_NET_REPLAY's reference, `ops::GatedDeltaNetReplay`):
/// for each sequence s with `a = accepted[s] > 0`, head by head, the committed state of row
/// `source_rows[s]` in the warps' registers ([`Lanes`](super::gated_delta_net::Lanes)), then per logged token t < a
/// `γ = exp(g)` (one ex2 per token and head) and [`token_update`] on every column, no output;
/// then the state written once to row `dest_rows[s]`. With a = 0 nothing is read or written.
///
/// The views and values are the caller's to validate: H_v = `v.ne()[1]` heads, every row in the
/// cache, every count ≤ T, and no row that one sequence writes read or written by another (then
/// the sequences' order does not matter, and a sequence whose destination is its source reads
/// each head block before it writes it, as the kernel's threads do).
pub fn replay_states(
    log: &StateLog,
    source_rows: &[usize],
    dest_rows: &[usize],
    accepted: &[usize],
    mem: &mut HostMemory,
    mufu: &mut dyn Mufu,
) -> Result<()> {
    let (hk, hv) = (log.n_k_heads, log.v.ne()[1]);
    for (s, ((&source, &dest), &a)) in source_rows.iter().zip(dest_rows).zip(accepted).enumerate() {
        if a == 0 {
            continue;
        }
        for h in 0..hv {
            let kh = h % hk;
            let at = |col: usize, i: usize, row: usize| [(h * D + col) * D + i, row, 0, 0];
            let mut cols = read_lanes(|i, col| mem.read_f32(&log.ssm_cache, at(col, i, source)))?;
            for t in 0..a {
                let k: Vec<f32> = (0..D).map(|i| mem.read_f32(&log.k, [i, kh, t, s])).collect::<Result<_>>()?;
                let beta = mem.read_f32(&log.beta, [0, h, t, s])?;
                // One ex2 per (token, head), as the kernel's lanes all evaluate the same one.
                let gamma = exp(mem.read_f32(&log.g, [0, h, t, s])?, mufu);
                for (col, lanes) in cols.iter_mut().enumerate() {
                    token_update(lanes, &k, mem.read_f32(&log.v, [col, h, t, s])?, gamma, beta);
                }
            }
            // The state, written once.
            for (col, lanes) in cols.iter().enumerate() {
                for (l, lane) in lanes.iter().enumerate() {
                    for (r, x) in lane.iter().enumerate() {
                        mem.write_f32(&log.ssm_cache, at(col, 32 * r + l, dest), *x)?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// A verify step in replay mode: the T tokens of every sequence from its committed window and
/// state (rows `rows[s]`, read only): the conv chain's outputs, the attention output (`scale`:
/// the attention scale GATED_DELTA_NET's op passes its kernel), no state slot and no conv row
/// written; then `log` receives the step's tokens.
pub fn verify(
    views: &CommittedViews,
    rows: &[usize],
    step: &VerifyViews,
    log: &TokenLog,
    scale: f32,
    mem: &mut HostMemory,
    mufu: &mut dyn Mufu,
) -> Result<()> {
    let [c, n_t, n_s, _] = step.qkv.ne();
    check_rows(views, rows, n_s)?;
    if (log.n_tokens(), log.n_seqs()) != (n_t, n_s) {
        return Err(Error::Invalid {
            op: OP,
            what: format!("a log of {} tokens × {} sequences for a step of {n_t} × {n_s}", log.n_tokens(), log.n_seqs()),
        });
    }
    let (hk, hv) = (views.n_k_heads, views.n_v_heads);
    // The conv chain: the committed windows are its source rows; no snapshot row.
    let chain = ChainViews {
        conv_cache: views.conv_cache,
        qkv: step.qkv,
        weight: views.weight,
        conv_out: step.conv_out,
        q_norm: step.q_norm,
        k_norm: step.k_norm,
        head_dim: D,
        n_k_heads: hk,
        eps: views.eps,
    };
    gdn_conv_chain(&chain, rows, &[], mem, mufu)?;
    // v of value head h: channels 2·H_k·D + h·D … of the SiLU output.
    let v_at = |col: usize, h: usize, t: usize, s: usize| [2 * hk * D + h * D + col, t, s, 0];
    // GATED_DELTA_NET from the committed states (GATED_DELTA_NET_FROM_CACHE's reads), no slot.
    for (s, &row) in rows.iter().enumerate() {
        for h in 0..hv {
            let kh = h % hk;
            let mut cols = read_lanes(|i, col| mem.read_f32(&views.ssm_cache, [(h * D + col) * D + i, row, 0, 0]))?;
            for t in 0..n_t {
                let k: Vec<f32> = (0..D).map(|i| mem.read_f32(&step.k_norm, [i, kh, t, s])).collect::<Result<_>>()?;
                let q: Vec<f32> = (0..D).map(|i| mem.read_f32(&step.q_norm, [i, kh, t, s])).collect::<Result<_>>()?;
                let beta = mem.read_f32(&step.beta, [0, h, t, s])?;
                let gamma = exp(mem.read_f32(&step.g, [0, h, t, s])?, mufu);
                for (col, lanes) in cols.iter_mut().enumerate() {
                    let a = token_step(lanes, &k, &q, mem.read_f32(&step.conv_out, v_at(col, h, t, s))?, gamma, beta);
                    mem.write_f32(&step.out, [col, h, t, s], mul(a, scale))?;
                }
            }
        }
    }
    // The log: bit copies of the step's inputs and of values it computed.
    for s in 0..n_s {
        for t in 0..n_t {
            for ch in 0..c {
                let x = mem.read_u32(&step.qkv, [ch, t, s, 0])?;
                mem.write_u32(&log.qkv, [ch, t, s, 0], x)?;
            }
            for kh in 0..hk {
                for i in 0..D {
                    let x = mem.read_u32(&step.k_norm, [i, kh, t, s])?;
                    mem.write_u32(&log.k, [i, kh, t, s], x)?;
                }
            }
            for h in 0..hv {
                for col in 0..D {
                    let x = mem.read_u32(&step.conv_out, v_at(col, h, t, s))?;
                    mem.write_u32(&log.v, [col, h, t, s], x)?;
                }
                for (from, to) in [(&step.g, &log.g), (&step.beta, &log.beta)] {
                    let x = mem.read_u32(from, [0, h, t, s])?;
                    mem.write_u32(to, [0, h, t, s], x)?;
                }
            }
        }
    }
    Ok(())
}

/// One step of a layer in replay mode, as one launch will run it: with `previous` (the last
/// step's log and each sequence's accepted count of it), [`replay`] then [`verify`]; without
/// (a sequence's first step), [`verify`] alone. `log` (this step's) must be the other set:
/// sharing a byte with the previous log is refused. Everything is validated before anything is
/// written.
#[allow(clippy::too_many_arguments)]
pub fn replay_step(
    views: &CommittedViews,
    rows: &[usize],
    previous: Option<(&TokenLog, &[usize])>,
    step: &VerifyViews,
    log: &TokenLog,
    scale: f32,
    mem: &mut HostMemory,
    mufu: &mut dyn Mufu,
) -> Result<()> {
    check_rows(views, rows, step.qkv.ne()[2])?;
    if let Some((prev, accepted)) = previous {
        check_accepted(prev, accepted)?;
        if prev.n_seqs() != step.qkv.ne()[2] {
            return Err(Error::Invalid {
                op: OP,
                what: format!("a log of {} sequences for a step of {}", prev.n_seqs(), step.qkv.ne()[2]),
            });
        }
        if prev.tensors().iter().any(|p| log.tensors().iter().any(|l| p.overlaps(l))) {
            return Err(Error::Invalid { op: OP, what: "the step's log shares bytes with the previous step's (use the other set)".into() });
        }
        replay(views, rows, prev, accepted, mem, mufu)?;
    }
    verify(views, rows, step, log, scale, mem, mufu)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::math::ExactMufu;

    /// A one-sequence layer with H_k = 1, H_v = 2, C = 512, K_c = 4, its committed rows
    /// random, and a log of `n_t` random tokens.
    fn setup(n_t: usize) -> (HostMemory, CommittedViews, TokenLog) {
        let (hk, hv, kc) = (1, 2, 4);
        let c = (2 * hk + hv) * D;
        let mut mem = HostMemory::new();
        let views = CommittedViews {
            conv_cache: mem.alloc_tensor(DType::F32, [(kc - 1) * c, 2, 1, 1]),
            ssm_cache: mem.alloc_tensor(DType::F32, [D * D * hv, 2, 1, 1]),
            weight: mem.alloc_tensor(DType::F32, [kc, c, 1, 1]),
            n_k_heads: hk,
            n_v_heads: hv,
            eps: 1e-6,
        };
        let log = TokenLog::alloc(&mut mem, &views, n_t, 1).unwrap();
        let mut x = 0x1234_5678u32;
        for t in [views.conv_cache, views.ssm_cache].into_iter().chain(log.tensors()) {
            let n = t.layout.n_elements();
            let v: Vec<f32> = (0..n)
                .map(|_| {
                    x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (x >> 8) as f32 / (1u32 << 24) as f32 - 0.5
                })
                .collect();
            mem.fill_f32(&t, &v).unwrap();
        }
        (mem, views, log)
    }

    #[test]
    fn an_accepted_count_out_of_range_is_refused_by_value() {
        let (mut mem, views, log) = setup(4);
        let before = mem.clone();
        let err = replay(&views, &[1], &log, &[5], &mut mem, &mut ExactMufu).unwrap_err();
        assert!(matches!(&err, Error::Invalid { op: OP, what } if what.contains("accepted count 5 out of range 0 ..= 4")), "{err}");
        assert!(matches!(replay(&views, &[1], &log, &[1, 1], &mut mem, &mut ExactMufu), Err(Error::Invalid { .. })));
        assert!(matches!(replay(&views, &[2], &log, &[1], &mut mem, &mut ExactMufu), Err(Error::Invalid { .. })));
        // Nothing was written.
        for t in [views.conv_cache, views.ssm_cache] {
            assert_eq!(
                mem.to_f32_vec(&t).unwrap().iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                before.to_f32_vec(&t).unwrap().iter().map(|x| x.to_bits()).collect::<Vec<_>>()
            );
        }
    }

    /// a = 0 keeps both committed rows; a > 0 changes the state and shifts the window by a
    /// columns: column j of the new window is column a + j of [window ; logged inputs].
    #[test]
    fn the_committed_rows_move_by_the_accepted_count() {
        for a in 0..=4 {
            let (mut mem, views, log) = setup(4);
            let before = mem.clone();
            replay(&views, &[1], &log, &[a], &mut mem, &mut ExactMufu).unwrap();
            let state_changed = (0..D * D * 2)
                .any(|e| mem.read_u32(&views.ssm_cache, [e, 1, 0, 0]).unwrap() != before.read_u32(&views.ssm_cache, [e, 1, 0, 0]).unwrap());
            assert_eq!(state_changed, a > 0, "a = {a}");
            for ch in [0, 1, 255, 511] {
                for j in 0..3 {
                    let col = a + j;
                    let want = if col < 3 {
                        before.read_u32(&views.conv_cache, [ch * 3 + col, 1, 0, 0]).unwrap()
                    } else {
                        before.read_u32(&log.qkv, [ch, col - 3, 0, 0]).unwrap()
                    };
                    assert_eq!(mem.read_u32(&views.conv_cache, [ch * 3 + j, 1, 0, 0]).unwrap(), want, "a = {a}, channel {ch}, column {j}");
                }
            }
            // The other row is untouched.
            for t in [views.conv_cache, views.ssm_cache] {
                assert_eq!(mem.read_u32(&t, [7, 0, 0, 0]).unwrap(), before.read_u32(&t, [7, 0, 0, 0]).unwrap());
            }
        }
    }
}
