//! GDN_CONV_CHAIN on the CPU: the fused op's reference equals the unfused chain's references
//! (GET_ROWS, CONCAT, CPY / CPY_SNAPSHOTS, SSM_CONV+SiLU, L2_NORM ×2, as `graph::layer::unfused_ops`
//! builds them) bit for bit — conv_out, q_norm, k_norm and the whole conv cache — on the
//! reference PR's sweep: n_t 1 … 16 × R ∈ {0, 2, 3, 7, 15} × 5 shapes (d_conv 3/4/5, head dims
//! 32–128, the read row among the written rows and not) = 400 comparisons, both sides with the
//! same deterministic software MUFU (`ExactMufu`). Plus the op's typed refusals.

use rgdn::Error;
use rgdn::memory::{HostMemory, Memory};
use rgdn::ops::{GdnConvChain, Op, SnapshotWrite};
use rgdn::reference::math::ExactMufu;
use rgdn::suite::Builder;
use rgdn::suite::cases::gdn_conv_chain::{ChainSetup, CommitSetup};
use rgdn::tensor::{DType, Layout, Tensor};

const ROLLBACKS: [usize; 5] = [0, 2, 3, 7, 15];

fn run(mem: &HostMemory, ops: &[Box<dyn Op>]) -> HostMemory {
    let mut mem = mem.clone();
    for op in ops {
        op.reference(&mut mem, &mut ExactMufu).unwrap_or_else(|e| panic!("{}: {e}", op.name()));
    }
    mem
}

fn bits(mem: &HostMemory, t: &Tensor) -> Vec<u32> {
    t.layout.indices().map(|i| mem.read_u32(t, i).unwrap()).collect()
}

#[test]
fn fused_reference_equals_the_unfused_chain_on_400_shapes() {
    let mut compared = 0;
    for shape in 0..5 {
        for n_t in 1..=16 {
            for r in ROLLBACKS {
                let setup = ChainSetup::sweep_shape(shape, n_t, r);
                let name = setup.name("sweep");
                let eq = setup.equivalence(Builder::new(rgdn::suite::cases::seed_of(&name)));
                let (fused, unfused) = (run(&eq.mem, &eq.a), run(&eq.mem, &eq.b));
                for (i, (a, b)) in eq.compare.iter().enumerate() {
                    let (x, y) = (bits(&fused, a), bits(&unfused, b));
                    assert!(x == y, "{name}: tensor pair {i} differs");
                    // The outputs were poisoned: make sure the fused run wrote them.
                    assert_ne!(x, bits(&eq.mem, a), "{name}: tensor pair {i} unchanged by the run");
                }
                compared += 1;
            }
        }
    }
    assert_eq!(compared, 400);
}

#[test]
fn a_wrong_window_offset_is_caught_by_the_comparison() {
    // The comparison has teeth: one slot with the unclamped offset n_t − j + 1 differs.
    let setup = ChainSetup::sweep_shape(0, 4, 3);
    let mut eq = setup.equivalence(Builder::new(1));
    let op = eq.a[0].as_ref().downcast_ref::<GdnConvChain>().unwrap().clone();
    let mut wrong = op.clone();
    wrong.snapshots[2] = SnapshotWrite { row: op.snapshots[2].row, offset: op.snapshots[2].offset + 1 };
    eq.a = vec![Box::new(wrong)];
    let (fused, unfused) = (run(&eq.mem, &eq.a), run(&eq.mem, &eq.b));
    let cache = eq.compare[3].0;
    assert_ne!(bits(&fused, &cache), bits(&unfused, &cache));
    assert_eq!(bits(&fused, &op.conv_out), bits(&unfused, &op.conv_out));
}

#[test]
fn the_fused_op_names_its_inputs_and_outputs() {
    let setup = ChainSetup::sweep_shape(3, 5, 2);
    let mut b = Builder::new(2);
    let op = setup.build(&mut b);
    assert_eq!(op.name(), "GDN_CONV_CHAIN");
    assert_eq!(op.inputs(), vec![op.conv_cache, op.source_row, op.qkv, op.weight]);
    let outputs = op.outputs();
    assert_eq!(&outputs[..3], &[op.conv_out, op.q_norm, op.k_norm]);
    assert_eq!(outputs.len(), 3 + 3);
    for (t, s) in outputs[3..].iter().zip(&op.snapshots) {
        assert_eq!(t.ne(), [op.conv_cache.ne()[0], 1, 1, 1]);
        assert_eq!(t.layout.offset, op.conv_cache.layout.offset + s.row * op.conv_cache.layout.nb[1]);
    }
    assert!(op.validate(&b.mem).is_ok());
}

/// Refusals the suite's cases do not cover.
#[test]
fn typed_refusals() {
    let setup = ChainSetup::sweep_shape(0, 4, 3);
    let check = |edit: &dyn Fn(&mut GdnConvChain, &mut Builder), want: &dyn Fn(&Error) -> bool| {
        let mut b = Builder::new(3);
        let mut op = setup.build(&mut b);
        edit(&mut op, &mut b);
        let err = op.validate(&b.mem).expect_err("must be refused");
        assert!(want(&err), "unexpected error {err}");
    };
    check(&|op, _| op.snapshots.clear(), &|e| matches!(e, Error::Invalid { op: "GDN_CONV_CHAIN", .. }));
    check(&|op, _| op.n_k_heads = 4, &|e| matches!(e, Error::Invalid { op: "GDN_CONV_CHAIN", .. }));
    check(&|op, _| op.n_k_heads = 0, &|e| matches!(e, Error::Invalid { op: "GDN_CONV_CHAIN", .. }));
    check(&|op, _| op.eps = f32::NAN, &|e| matches!(e, Error::Invalid { op: "GDN_CONV_CHAIN", .. }));
    // An index tensor whose values the host does not know.
    check(&|op, b| op.source_row = b.mem.alloc_tensor(DType::I32, [1, 1, 1, 1]), &|e| {
        matches!(e, Error::Invalid { op: "GDN_CONV_CHAIN", .. })
    });
    // C not a multiple of 128 (one channel more in every tensor).
    check(
        &|op, b| {
            let c = op.weight.ne()[1] + 1;
            op.weight = b.input([4, c, 1, 1], rgdn::suite::inputs::Values::Uniform(0.5));
        },
        &|e| matches!(e, Error::Unsupported { op: "GDN_CONV_CHAIN", .. }),
    );
    // q_norm and k_norm on the same bytes; conv_out on the weights.
    check(&|op, _| op.k_norm = op.q_norm, &|e| matches!(e, Error::Aliasing { a: "q_norm", b: "k_norm", .. }));
    check(
        &|op, _| op.conv_out = Tensor::new(op.weight.buffer, op.conv_out.layout.view(op.conv_out.ne(), op.conv_out.layout.nb, 0)),
        &|e| matches!(e, Error::OutOfBounds { arg: "conv_out", .. } | Error::Aliasing { a: "conv_out", .. }),
    );
    // The cache in an index buffer is refused as an output.
    check(
        &|op, b| {
            let idx = b.mem.alloc_indices(&vec![0; op.conv_cache.layout.n_elements()]);
            op.conv_cache = Tensor::new(idx.buffer, Layout::contiguous(DType::F32, op.conv_cache.ne()));
        },
        &|e| matches!(e, Error::Invalid { op: "GDN_CONV_CHAIN", .. }),
    );
    // The reference refuses too instead of reading out of bounds.
    let mut b = Builder::new(4);
    let mut op = setup.build(&mut b);
    op.snapshots[0].row = 1 << 20;
    assert!(matches!(op.reference(&mut b.mem, &mut ExactMufu), Err(Error::IndexOutOfRange { arg: "snapshots", .. })));
}

/// The kernel's index arithmetic, emulated thread by thread on the CPU (same phases, same
/// shared-memory layout from `abi`, the same `[u32; 16]` row tables), must give the reference's
/// bytes: checks the tile/slice/window/head mapping and that every shared access stays inside
/// the launch's dynamic shared memory, before any device time is spent.
#[test]
#[allow(clippy::needless_range_loop)] // indices are the kernel's thread, lane and column numbers
fn an_emulation_of_the_kernels_mapping_equals_the_reference() {
    use rgdn::kernels::abi;
    use rgdn::reference::l2_norm::l2_normalize;
    use rgdn::reference::math::{fma, l2_scale, mul, warp_sum};
    use rgdn::reference::ssm_conv::conv_output;
    let setups = [
        ChainSetup::sweep_shape(0, 4, 3),
        ChainSetup::sweep_shape(1, 16, 15),
        ChainSetup::sweep_shape(2, 1, 2),
        ChainSetup { pad: 8, ..ChainSetup::sweep_shape(3, 7, 7) },
        ChainSetup::sweep_shape(4, 12, 0),
        ChainSetup { n_t: 3, n_rollback: 3, alias_out: true, source_row: 1, ..ChainSetup::sweep_shape(0, 1, 0) },
        // Blocks holding q and k heads, and k and v heads.
        ChainSetup { d_conv: 3, head_dim: 32, n_k_heads: 3, n_v_heads: 2, ..ChainSetup::sweep_shape(1, 5, 3) },
    ];
    for setup in setups {
        let name = setup.name("emulated");
        let mut b = Builder::new(rgdn::suite::cases::seed_of(&name));
        let op = setup.build(&mut b);
        let mut want = b.mem.clone();
        op.reference(&mut want, &mut ExactMufu).unwrap();

        let mut mem = b.mem.clone();
        let (c_all, n_t) = (op.qkv.ne()[0], op.qkv.ne()[1]);
        let d_conv = op.weight.ne()[0];
        let s = d_conv - 1;
        let block = abi::GDN_CONV_CHAIN_BLOCK as usize;
        let stride = abi::gdn_conv_chain_tile_stride(d_conv, n_t);
        let smem_len = abi::gdn_conv_chain_shared_bytes(d_conv, n_t) as usize / 4;
        // Global memory as (tensor, element offset from its element 0), like the kernel's pointers.
        let el = |t: &Tensor, i: usize| (t.buffer, t.layout.offset + 4 * i);
        let read =
            |m: &HostMemory, (buf, o): (rgdn::tensor::BufferId, usize)| u32::from_le_bytes(m.bytes(buf)[o..o + 4].try_into().unwrap());
        let write = |m: &mut HostMemory, (buf, o): (rgdn::tensor::BufferId, usize), v: u32| {
            m.bytes_mut(buf)[o..o + 4].copy_from_slice(&v.to_le_bytes())
        };
        let e = |t: &Tensor, d: usize| t.layout.nb[d] / 4;
        let src_row = read(&mem, el(&op.source_row, 0)) as usize;
        let (rows, offsets): (Vec<usize>, Vec<usize>) = op.snapshots.iter().map(|w| (w.row, w.offset)).unzip();
        for by in 0..c_all / block {
            let c0 = by * block;
            let mut smem = vec![None::<u32>; smem_len];
            let staged = block * stride;
            // Phase 1 (all threads), then the barrier.
            let mut w = vec![[0f32; 5]; block];
            for tid in 0..block {
                let c = c0 + tid;
                for k in 0..s {
                    let f = k * block + tid;
                    let v = read(&mem, el(&op.conv_cache, src_row * e(&op.conv_cache, 1) + c0 * s + f));
                    smem[(f / s) * stride + f % s] = Some(v);
                }
                for t in 0..n_t {
                    smem[tid * stride + s + t] = Some(read(&mem, el(&op.qkv, c + t * e(&op.qkv, 1))));
                }
                for j in 0..d_conv {
                    w[tid][j] = f32::from_bits(read(&mem, el(&op.weight, c * e(&op.weight, 1) + j)));
                }
            }
            // Phase 2: rows; phase 3: conv.
            for tid in 0..block {
                for (&row, &offset) in rows.iter().zip(&offsets) {
                    for k in 0..s {
                        let f = k * block + tid;
                        let v = smem[(f / s) * stride + f % s + offset].expect("tile read before written");
                        write(&mut mem, el(&op.conv_cache, row * e(&op.conv_cache, 1) + c0 * s + k * block + tid), v);
                    }
                }
                let x: Vec<f32> = (0..s + n_t).map(|col| f32::from_bits(smem[tid * stride + col].unwrap())).collect();
                for t in 0..n_t {
                    let y = conv_output(&x[t..t + d_conv], &w[tid][..d_conv], 0.0, true, &mut ExactMufu);
                    write(&mut mem, el(&op.conv_out, c0 + tid + t * e(&op.conv_out, 1)), y.to_bits());
                    smem[staged + t * block + tid] = Some(y.to_bits());
                }
            }
            // Phase 4: warps over (token, head) items.
            let (d, h_k) = (op.head_dim, op.n_k_heads);
            if c0 >= 2 * h_k * d {
                continue;
            }
            let d_log2 = d.trailing_zeros();
            let heads_log2 = block.trailing_zeros() - d_log2;
            for warp in 0..block / 32 {
                let mut item = warp;
                while item < n_t << heads_log2 {
                    let (t, hl) = (item >> heads_log2, item & ((1 << heads_log2) - 1));
                    let head = (c0 >> d_log2) + hl;
                    if head < 2 * h_k {
                        let (dst, h) = if head < h_k { (&op.q_norm, head) } else { (&op.k_norm, head - h_k) };
                        let row: Vec<f32> = (0..d).map(|col| f32::from_bits(smem[staged + t * block + hl * d + col].unwrap())).collect();
                        let mut lanes = [0f32; 32];
                        for lane in 0..32 {
                            let mut col = lane;
                            while col < d {
                                lanes[lane] = fma(row[col], row[col], lanes[lane]);
                                col += 32;
                            }
                        }
                        let scale = l2_scale(warp_sum(&lanes), op.eps, &mut ExactMufu);
                        assert_eq!(row.iter().map(|x| mul(scale, *x).to_bits()).collect::<Vec<_>>(), {
                            l2_normalize(&row, op.eps, &mut ExactMufu).iter().map(|y| y.to_bits()).collect::<Vec<_>>()
                        });
                        for col in 0..d {
                            write(&mut mem, el(dst, col + h * e(dst, 1) + t * e(dst, 2)), mul(scale, row[col]).to_bits());
                        }
                    }
                    item += block / 32;
                }
            }
        }
        for id in 0..want.n_buffers() {
            let id = rgdn::tensor::BufferId(id);
            assert!(mem.bytes(id) == want.bytes(id), "{name}: buffer {id:?} differs from the reference");
        }
    }
}

/// The parameter block travels as raw bytes (`KernelParams`): no padding anywhere, the tables
/// where the kernel's PTX reads them (`ld.param` at byte 184 + 4·i and 248 + 4·i).
#[test]
fn the_parameter_struct_has_no_padding() {
    use rgdn::kernels::abi::GdnConvChainParams as P;
    use std::mem::{offset_of, size_of};
    assert_eq!(size_of::<P>(), 20 * 8 + 6 * 4 + 2 * 16 * 4);
    assert_eq!(std::mem::align_of::<P>(), 8);
    assert_eq!(offset_of!(P, k_token), 14 * 8);
    assert_eq!(offset_of!(P, k_seq), 19 * 8);
    assert_eq!(offset_of!(P, n_tokens), 20 * 8);
    assert_eq!(offset_of!(P, n_seqs), 20 * 8 + 5 * 4);
    assert_eq!(offset_of!(P, rows), 184);
    assert_eq!(offset_of!(P, offsets), 248);
    assert!(size_of::<P>() <= rgdn::gpu::PARAM_BLOCK_BYTES);
}

/// [replay] The suite's commit setup's channels and first committed row.
const COMMIT_CHANNELS: usize = CommitSetup::CHANNELS;
const COMMIT_ROW: usize = CommitSetup::ROW;

/// [replay] A GDN_CONV_CHAIN with a window commit ([`CommitSetup`]), on a builder of its own,
/// and each sequence's accepted count.
fn commit_case(n_s: usize, log_t: usize, n_t: usize, d_conv: usize, shift: usize) -> (Builder, GdnConvChain, Vec<usize>) {
    let setup = CommitSetup { n_s, log_t, n_t, d_conv, shift };
    let mut b = Builder::new(rgdn::suite::cases::seed_of(&format!("commit {n_s} {log_t} {n_t} {d_conv} {shift}")));
    let fused = setup.build(&mut b);
    (b, fused, setup.accepted())
}

/// [replay] [host-cost] The commit's index rules prepared once (`Op::index_rules`, what a plan
/// runs each step) give the full validation's verdict, error for error, on random source and
/// window rows: each index alone perturbed (a value replaced by a random one around its range,
/// or by another sequence's), and both random; every verdict occurs.
#[test]
fn the_commits_prepared_index_rules_are_its_validation() {
    use rand::{Rng, SeedableRng};
    let (n_s, log_t) = (3, 4);
    let (mut b, fused, _) = commit_case(n_s, log_t, 2, 4, 1);
    fused.validate(&b.mem).unwrap();
    let rules = fused.index_rules();
    let commit = fused.commit.expect("a commit");
    let (source_row, window_rows) = (fused.source_row, commit.window_rows);
    let valid = [b.mem.index_values(&source_row).unwrap(), b.mem.index_values(&window_rows).unwrap()];
    let bounds = [2 * n_s as i32 + 4, ((log_t + 1) * n_s) as i32];
    let mut rng = rand::rngs::StdRng::seed_from_u64(41);
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    let debug = |r: rgdn::Result<()>| r.map_err(|e| format!("{e:?}"));
    for trial in 0..4000 {
        let mut values = valid.clone();
        if trial % 4 == 3 {
            for (k, v) in values.iter_mut().enumerate() {
                v.iter_mut().for_each(|x| *x = rng.random_range(-1..=bounds[k]));
            }
        } else {
            let k = trial % 2;
            let s = rng.random_range(0..n_s);
            values[k][s] = match rng.random_range(0..3) {
                0 => rng.random_range(-1..=bounds[k]),
                1 => values[k][rng.random_range(0..n_s)],
                _ => values[k][s] + n_s as i32 * rng.random_range(-1..=1),
            };
        }
        for (t, v) in [(&source_row, &values[0]), (&window_rows, &values[1])] {
            for (i, &x) in v.iter().enumerate() {
                b.mem.write_u32(t, [i, 0, 0, 0], x as u32).unwrap();
            }
        }
        let validated = fused.validate(&b.mem);
        let kind = match &validated {
            Ok(()) => "accepted".to_string(),
            Err(Error::IndexOutOfRange { arg, .. }) => format!("out of range: {arg}"),
            Err(Error::Aliasing { a, b, .. }) => format!("aliasing: {a} / {b}"),
            Err(e) => panic!("a verdict no index rule gives: {e}"),
        };
        *seen.entry(kind).or_default() += 1;
        let full = debug(validated);
        assert_eq!(full, debug(fused.check_indices(&b.mem)), "{values:?}: check_indices");
        assert_eq!(full, debug(rules.check(&b.mem)), "{values:?}: prepared rules");
    }
    // Accepted, each index out of range, a foreign source row, another sequence's window row.
    assert_eq!(seen.len(), 5, "{seen:?}");
    assert!(seen.values().all(|&n| n >= 20), "{seen:?}");
}

/// [replay] The window commit in front of the chain (`ConvCommit`): the fused op equals the
/// unfused commit (GET_ROWS of the committed rows, CONCAT with the log, CPY_SNAPSHOTS of the
/// T_log + 1 windows, GET_ROWS of each sequence's window over its row) followed by the chain
/// from those rows and the log CPYs of the inputs, the k heads and the v heads — the whole cache,
/// conv_out, the norms and the logs — at n_s 1–3, T_log and n_t 1–16, every accepted count 0 … T_log; and its index rules
/// refuse a window row of another sequence, one past the table, and a source row that is not
/// the row the sequence commits.
#[test]
fn the_window_commit_equals_its_unfused_ops_and_refuses_foreign_rows() {
    use rgdn::ops::{ConcatDim0, Cpy, CpySnapshots, GetRows};
    let mut cases = 0;
    for (n_s, log_t, n_t, d_conv) in [(1, 1, 1, 4), (1, 4, 4, 4), (2, 3, 5, 3), (3, 16, 16, 4), (2, 8, 2, 5), (3, 4, 4, 4)] {
        for shift in 0..=log_t {
            let (mut b, fused, accepted) = commit_case(n_s, log_t, n_t, d_conv, shift);
            let (c, state_len, kv_head) = (COMMIT_CHANNELS, d_conv - 1, COMMIT_ROW);
            let out = |b: &mut Builder, ne| b.output(ne);
            let (conv_cache, source_row, qkv, conv_out, q_norm, k_norm) =
                (fused.conv_cache, fused.source_row, fused.qkv, fused.conv_out, fused.q_norm, fused.k_norm);
            let commit = fused.commit.expect("a commit");
            let (log_qkv, window_rows) = (commit.log_qkv, commit.window_rows);
            let (log_out, log_k, log_v) = (commit.log_out.expect("log_out"), commit.log_k.expect("log_k"), commit.log_v.expect("log_v"));
            // Unfused: the commit's four ops, then the chain's (the fused op with one snapshot row
            // written to a spare row, compared only where the fused op writes).
            let commit_states = out(&mut b, [state_len * c, n_s, 1, 1]);
            let commit_input = out(&mut b, [state_len + log_t, c, n_s, 1]);
            let windows = out(&mut b, [state_len * c, (log_t + 1) * n_s, 1, 1]);
            let own_rows = conv_cache.view([state_len * c, n_s, 1, 1], conv_cache.layout.nb, kv_head * conv_cache.layout.nb[1]);
            let committed = commit_states.reshape([state_len, c, n_s, 1]).unwrap();
            let unfused: Vec<Box<dyn Op>> = vec![
                Box::new(GetRows { src: conv_cache, rows: source_row, dst: commit_states }),
                Box::new(ConcatDim0 { a: committed, b: log_qkv.transpose(), dst: commit_input }),
                Box::new(CpySnapshots {
                    conv_input: commit_input,
                    cache: windows,
                    d_conv,
                    first_row: 0,
                    group_stride: n_s,
                    n_slots: log_t + 1,
                }),
                Box::new(GetRows { src: windows, rows: window_rows, dst: own_rows }),
                Box::new(Cpy { src: qkv, dst: log_out }),
                Box::new(GdnConvChain { commit: None, snapshots: vec![SnapshotWrite { row: kv_head + n_s, offset: 0 }], ..fused.clone() }),
                Box::new(Cpy { src: k_norm, dst: log_k }),
                Box::new(Cpy { src: fused.v_heads().expect("whole v heads"), dst: log_v }),
            ];
            let (f, u) = (run(&b.mem, &[Box::new(fused.clone())]), run(&b.mem, &unfused));
            let spare = conv_cache.view([state_len * c, n_s, 1, 1], conv_cache.layout.nb, (kv_head + n_s) * conv_cache.layout.nb[1]);
            for (name, t) in [
                ("conv_out", conv_out),
                ("q_norm", q_norm),
                ("k_norm", k_norm),
                ("log_out", log_out),
                ("log_k", log_k),
                ("log_v", log_v),
                ("own rows", own_rows),
            ] {
                assert!(bits(&f, &t) == bits(&u, &t), "n_s {n_s}, T_log {log_t}, n_t {n_t}, a {accepted:?}: {name} differs");
            }
            // Every other cache row is untouched by the fused op (the spare row is the unfused
            // side's only extra write).
            let whole = |m: &HostMemory| bits(m, &conv_cache);
            let (fw, uw, before) = (whole(&f), whole(&u), whole(&b.mem));
            let row_len = state_len * c;
            for row in 0..2 * n_s + 4 {
                let r = row * row_len..(row + 1) * row_len;
                if (kv_head..kv_head + n_s).contains(&row) {
                    continue;
                }
                assert_eq!(fw[r.clone()], before[r.clone()], "row {row} written by the fused op");
                if row < kv_head + n_s || row >= kv_head + 2 * n_s {
                    assert_eq!(uw[r.clone()], before[r], "row {row}");
                }
            }
            let _ = spare;
            cases += 1;

            if n_s >= 2 && shift == 0 {
                // Another sequence's window row, a row past the table, a foreign source row.
                let mut mem = b.mem.clone();
                let wrong = (log_t * n_s + 1) as i32; // sequence 1's window(0), given to sequence 0
                mem.write_u32(&window_rows, [0, 0, 0, 0], wrong as u32).unwrap();
                assert!(matches!(fused.validate(&mem), Err(Error::Aliasing { a: "window_rows", .. })), "{:?}", fused.validate(&mem));
                mem.write_u32(&window_rows, [0, 0, 0, 0], ((log_t + 1) * n_s) as u32).unwrap();
                assert!(matches!(fused.validate(&mem), Err(Error::IndexOutOfRange { arg: "window_rows", .. })));
                let mut mem = b.mem.clone();
                mem.write_u32(&source_row, [1, 0, 0, 0], kv_head as u32).unwrap();
                assert!(matches!(fused.validate(&mem), Err(Error::Aliasing { a: "source_row", b: "commit.row", .. })));
                assert!(fused.check_indices(&mem).is_err());
                // A snapshot row beside a commit is out of scope.
                let mut both = fused.clone();
                both.snapshots = vec![SnapshotWrite { row: kv_head + n_s, offset: 0 }];
                assert!(matches!(both.validate(&b.mem), Err(Error::Unsupported { .. })));
            }
        }
    }
    assert_eq!(cases, 2 + 5 + 4 + 17 + 9 + 5);
}
