//! Broadcast ADD / MUL cases: the alpha path's `alpha + dt_bias[h]` and `softplus · ssm_a[h]`
//! ([H_v, n_t] with a \[H_v\] vector), full-shape, 4-D broadcasts, padded views, in place, specials.

use crate::ops::{Binary, BinaryKind};
use crate::suite::inputs::Values;
use crate::suite::{Case, Tolerance};
use crate::tensor::DType;

pub const GROUP: &str = "BINARY";

pub fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for kind in [BinaryKind::Add, BinaryKind::Mul] {
        for (ne, ne_b, pad, values, in_place, label) in [
            ([32, 1, 1, 1], [32, 1, 1, 1], 0, Values::Uniform(4.0), false, "H_v=32,n_t=1"),
            ([32, 16, 1, 1], [32, 1, 1, 1], 0, Values::Uniform(4.0), false, "H_v=32,n_t=16,bcast"),
            ([48, 5, 1, 1], [48, 1, 1, 1], 0, Values::Uniform(4.0), true, "H_v=48,n_t=5,in_place"),
            ([6, 4, 3, 2], [3, 2, 1, 2], 0, Values::Uniform(4.0), false, "4d_bcast"),
            ([40, 7, 2, 1], [40, 7, 2, 1], 3, Values::WithSpecials { scale: 1e20, every: 10 }, false, "padded,specials"),
        ] {
            let name = format!("{GROUP}({},{label})", kind.name());
            out.push(Case::seeded(GROUP, name, move |mut b| {
                let a = b.tensor_padded(DType::F32, ne, [pad, 1.min(pad), 0, 0], values);
                let bt = b.tensor_padded(DType::F32, ne_b, [pad, 0, 0, 0], values);
                let dst = if in_place { a } else { b.tensor_padded(DType::F32, ne, [pad, 0, 0, 0], Values::AnyBits) };
                Ok(b.finish(vec![Box::new(Binary { kind, a, b: bt, dst })], Tolerance::BitExact, false))
            }));
        }
    }
    out
}
