//! Every per-operator fixture (tests/fixtures/ops, made from PyTorch's OpInfo samples)
//! and every model fixture (tests/fixtures and its models/ folder), compiled and run
//! through the Rust API in parallel and compared with PyTorch's recorded outputs at the
//! tolerance in their info.json.
//!
//! Fixtures that do not pass yet are listed, each with its reason, in
//! tests/known_failures.tsv. The test fails when any other fixture fails and when
//! compiling or running anything panics; it prints the listed ones that pass now.

use aotc_tests::suite::{run_all, Tally};
use aotc_tests::{suite_fixture_dirs, verify_fixture};

#[test]
fn every_op_and_model_fixture_matches_pytorch() {
    let (mut dirs, models) = suite_fixture_dirs();
    dirs.extend(models);
    let total = dirs.len();
    let outcomes = run_all(dirs, verify_fixture);
    let t = Tally::of(&outcomes, "tests/known_failures.tsv");
    println!(
        "op suite and models: {} of {total} fixtures pass, {} fail ({} listed as known failures)",
        t.passed, t.failed, t.known
    );
    assert!(t.problems.is_empty(), "{} problem(s):\n{}", t.problems.len(), t.problems.join("\n"));
}
