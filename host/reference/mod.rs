//! CPU references: one file per op, each in the kernel's exact float-operation order, built on
//! [`math`] (bit-exact `.ftz` arithmetic and pluggable MUFU results).
//!
//! They take a validated op's views; they read and write through [`crate::memory::HostMemory`]'s
//! checked accessors, so a view outside its buffer ends in that typed error (possibly after
//! earlier elements were written), never a panic.

pub mod l2_norm;
pub mod math;
pub mod ssm_conv;

// [copies]
pub mod concat;
pub mod cpy;
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

// [replay]
pub mod replay;

#[cfg(test)]
mod tests {
    /// The dependency runs one way, op → reference: a reference takes plain views, sizes and
    /// parameters, and no file here names `crate::ops` (an op's reference tests live in
    /// `host/ops/reference_tests.rs`).
    #[test]
    fn no_reference_file_imports_the_ops() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("host/reference");
        let mut files = 0;
        for entry in std::fs::read_dir(&dir).expect("host/reference is readable") {
            let path = entry.expect("a directory entry").path();
            let text = std::fs::read_to_string(&path).expect("a reference file is readable");
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                // Spelled in pieces so that this test's own source does not match.
                for needle in [concat!("crate::", "ops"), concat!("crate::", "{"), concat!("super::", "super")] {
                    assert!(!code.contains(needle), "{}:{}: `{needle}` — a reference must not depend on the ops", path.display(), n + 1);
                }
            }
            files += 1;
        }
        assert!(files >= 12, "found {files} reference files in {}", dir.display());
    }
}
