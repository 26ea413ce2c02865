//! The case registry: one file per op, each a function returning its cases.

pub mod l2_norm;
pub mod layer;
pub mod ssm_conv;

// [copies]
pub mod concat;
pub mod conv_layer;
pub mod cpy;
pub mod cpy_snapshots;
pub mod get_rows;
pub mod scale;

// [unary]
pub mod binary;
pub mod unary;

// [mmvf]
pub mod mmvf;

// [gdn]
pub mod gated_delta_net;

// [convchain]
pub mod gdn_conv_chain;

// [mmvf-pair]
pub mod mmvf_pair;

// [pair-gate]
pub mod mmvf_pair_gate;

// [gdn-from-cache]
pub mod gated_delta_net_from_cache;

// [replay]
pub mod gated_delta_net_replay;
pub mod gated_delta_net_replay_verify;

// [layer-step]
pub mod gdn_layer_step;
pub mod gdn_layer_step_replay;

use super::Case;

/// Every case, grouped by op, in a stable order.
pub fn all() -> Vec<Case> {
    let mut cases = Vec::new();
    cases.extend(ssm_conv::cases());
    cases.extend(l2_norm::cases());

    // [copies]
    cases.extend(get_rows::cases());
    cases.extend(concat::cases());
    cases.extend(cpy::cases());
    cases.extend(cpy_snapshots::cases());
    cases.extend(scale::cases());

    // [unary]
    cases.extend(unary::cases());
    cases.extend(binary::cases());

    // [mmvf]
    cases.extend(mmvf::cases());

    // [gdn]
    cases.extend(gated_delta_net::cases());

    // [convchain]
    cases.extend(gdn_conv_chain::cases());

    // [mmvf-pair]
    cases.extend(mmvf_pair::cases());

    // [pair-gate]
    cases.extend(mmvf_pair_gate::cases());

    // [gdn-from-cache]
    cases.extend(gated_delta_net_from_cache::cases());

    // [replay]
    cases.extend(gated_delta_net_replay::cases());
    cases.extend(gated_delta_net_replay_verify::cases());

    // [layer-step]
    cases.extend(gdn_layer_step::cases());
    // [replay] a replay layer's step in one launch
    cases.extend(gdn_layer_step_replay::cases());

    cases.extend(layer::cases());
    cases
}

/// The cases whose group or name contains one of the comma-separated filters (`RGDN_OPS`,
/// like test-backend-ops' `-o`); all cases for an empty filter.
pub fn filtered(filter: &str) -> Vec<Case> {
    let wanted: Vec<String> = filter.split(',').map(|f| f.trim().to_ascii_uppercase()).filter(|f| !f.is_empty()).collect();
    all()
        .into_iter()
        .filter(|c| {
            wanted.is_empty()
                || wanted
                    .iter()
                    .any(|w| c.group.to_ascii_uppercase().contains(w.as_str()) || c.name.to_ascii_uppercase().contains(w.as_str()))
        })
        .collect()
}

/// A stable per-case seed from the case name (so each case's data is reproducible alone).
pub fn seed_of(name: &str) -> u64 {
    // FNV-1a.
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3))
}
