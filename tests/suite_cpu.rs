//! The GPU suite's cases, checked on the CPU: each builds, validates and runs its reference
//! (or is refused as it expects), so a broken case is found here rather than on the device.
//! `cargo test` checks one case in [`suite::TEST_SAMPLE_EVERY`] of every op group (a fixed
//! sample, [`suite::sample`]); `RGDN_FULL_TESTS=1` (`scripts/full-tests.sh`) checks them all.

use rgdn::suite;

#[test]
fn every_gpu_case_is_valid_on_the_cpu() {
    let all = suite::cases::all().len();
    let cases = suite::sample_for_tests(suite::cases::all());
    assert!(!cases.is_empty());
    if cases.len() < all {
        eprintln!(
            "suite_cpu: {} of the {all} cases (one in {} per op group; RGDN_FULL_TESTS=1 checks all)",
            cases.len(),
            suite::TEST_SAMPLE_EVERY
        );
    }
    let reports: Vec<_> = cases.iter().map(suite::run_case_cpu).collect();
    let failed: Vec<_> = reports.iter().filter(|r| !r.passed).map(|r| format!("{}: {}", r.name, r.detail)).collect();
    let mut table = Vec::new();
    suite::summarize(&reports, &mut table).unwrap();
    println!("{}", String::from_utf8_lossy(&table));
    assert!(failed.is_empty(), "{} case(s) fail on the CPU:\n{}", failed.len(), failed.join("\n"));
}

#[test]
fn case_names_are_unique() {
    let mut names: Vec<_> = suite::cases::all().into_iter().map(|c| c.name).collect();
    let n = names.len();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), n, "two cases share a name (and so a seed)");
}

#[test]
fn the_filter_selects_by_group() {
    let conv = suite::cases::filtered("ssm_conv");
    assert!(!conv.is_empty() && conv.iter().all(|c| c.group == "SSM_CONV"));
    assert_eq!(suite::cases::filtered("").len(), suite::cases::all().len());
}
