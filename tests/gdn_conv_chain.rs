//! GDN_CONV_CHAIN on the CPU: the fused op's reference equals the unfused chain's references
//! (GET_ROWS, CONCAT, CPY / CPY_SNAPSHOTS, SSM_CONV+SiLU, L2_NORM ×2, as `layer::unfused_ops`
//! builds them) bit for bit — conv_out, q_norm, k_norm and the whole conv cache — on the
//! reference PR's sweep: n_t 1 … 16 × R ∈ {0, 2, 3, 7, 15} × 5 shapes (d_conv 3/4/5, head dims
//! 32–128, the read row among the written rows and not) = 400 comparisons, both sides with the
//! same deterministic software MUFU (`ExactMufu`). Plus the op's typed refusals.

use rgdn::Error;
use rgdn::memory::HostMemory;
use rgdn::ops::{GdnConvChain, Op, SnapshotWrite};
use rgdn::reference::math::ExactMufu;
use rgdn::suite::Builder;
use rgdn::suite::cases::gdn_conv_chain::ChainSetup;
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
    t.layout.indices().map(|i| mem.read_u32(t, i)).collect()
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
