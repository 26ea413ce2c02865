//! The committed PTX (`kernels-gpu/ptx/<arch>.ptx.gz`, what a stable-Rust build embeds once
//! decompressed) is exactly the PTX the pinned nightly builds from `kernels-gpu/src`, byte for byte.

use rgdn::kernels::{PTX, PTX_ARCH, PTX_ORIGIN};
use std::io::Read;
use std::path::Path;

const REFRESH: &str = "refresh it with `scripts/refresh-ptx.sh` and commit kernels-gpu/ptx/";

#[test]
fn committed_ptx_is_the_ptx_built_from_source() {
    assert_eq!(
        PTX_ORIGIN, "source",
        "this build embedded the committed PTX (no kernel toolchain), so there is nothing to compare it with: \
         run the tests under the pinned nightly (`rustup toolchain install` in the repository root)"
    );
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels-gpu/ptx").join(format!("{PTX_ARCH}.ptx.gz"));
    let file =
        std::fs::File::open(&path).unwrap_or_else(|e| panic!("no committed PTX for {PTX_ARCH} at {} ({e}); {REFRESH}", path.display()));
    let mut committed = Vec::new();
    flate2::read::GzDecoder::new(file)
        .read_to_end(&mut committed)
        .unwrap_or_else(|e| panic!("{} is not gzipped ({e}); {REFRESH}", path.display()));
    if let Some(why) = first_difference(&committed, PTX.as_bytes()) {
        panic!("{} is not the PTX built from kernels-gpu/src: {why}; {REFRESH}", path.display());
    }
}

/// Where two byte strings first differ (line and byte), `None` when they are equal.
fn first_difference(committed: &[u8], built: &[u8]) -> Option<String> {
    if committed == built {
        return None;
    }
    let at = committed.iter().zip(built).position(|(a, b)| a != b).unwrap_or(committed.len().min(built.len()));
    let line = 1 + built[..at].iter().filter(|&&b| b == b'\n').count();
    Some(format!("first difference at byte {at} (line {line}); committed {} bytes, built {} bytes", committed.len(), built.len()))
}

#[test]
fn first_difference_finds_a_changed_byte_and_a_truncation() {
    assert_eq!(first_difference(b"a\nb", b"a\nb"), None);
    assert!(first_difference(b"a\nb", b"a\nc").is_some_and(|s| s.contains("byte 2 (line 2)")));
    assert!(first_difference(b"a\nb", b"a\nbc").is_some_and(|s| s.contains("byte 3")));
}
