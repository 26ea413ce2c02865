//! MUL_MAT_VEC_PAIR — the alpha and beta mat-vecs of one GDN layer (two `mul_mat_vec_f` of the
//! same input) in one launch, each product computed with exactly the per-column arithmetic of
//! the unfused [`MulMatVec`] (spec §2.9), 1 ..= 8 columns.

use super::MulMatVec;

/// Two mat-vecs of the same `input` (same view), with weights of the same type and shape and
/// the same precision; `first.dst` and `second.dst` disjoint from each other and the inputs.
#[derive(Clone, Debug)]
pub struct MulMatVecPair {
    pub first: MulMatVec,
    pub second: MulMatVec,
}
