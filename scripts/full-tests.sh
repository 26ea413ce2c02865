#!/usr/bin/env bash
# The full test runs behind `cargo test`'s sampled defaults — the same tests with every case:
# every op-suite case on the CPU (tests/suite_cpu.rs and the fused groups' unit tests), the
# fusion fuzzer's 2000 cases, 2048 hostile-view cases per op. No GPU needed.
#
#   scripts/full-tests.sh                      # RGDN_FULL_TESTS=1 cargo test
#   scripts/full-tests.sh --release            # quicker on a machine with more cores
#   RGDN_FUZZ_CASES=120000 scripts/full-tests.sh --release --test fusion_fuzz   # a long fuzz run
set -euo pipefail
cd "$(dirname "$0")/.."
RGDN_FULL_TESTS=1 exec cargo test "$@"
