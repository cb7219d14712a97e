//! Every per-operator fixture (../shared/fixtures/ops, made from PyTorch's OpInfo samples)
//! and every model fixture (../shared/fixtures and its models/ folder), compiled and run
//! through the Rust API in parallel and compared with PyTorch's recorded outputs at the
//! tolerance in their info.json.
//!
//! Fixtures that do not pass yet are listed, each with its reason, in
//! tests/known_failures.tsv. The test fails when any other fixture fails and when
//! compiling or running anything panics; it prints the listed ones that pass now.

use aotc_tests::suite::{known_failures, run_all, Outcome};
use aotc_tests::{repo_root, shared_fixture_dirs, verify_fixture};

#[test]
fn every_op_and_model_fixture_matches_pytorch() {
    let Some((mut dirs, models)) = shared_fixture_dirs() else {
        eprintln!("../shared/fixtures is not there: nothing to check");
        return;
    };
    dirs.extend(models);
    let total = dirs.len();
    let outcomes = run_all(dirs, verify_fixture);
    let known = known_failures(&repo_root().join("tests/known_failures.tsv"));
    let mut problems = vec![];
    let (mut passed, mut failed) = (0, 0);
    for (name, outcome) in &outcomes {
        match outcome {
            Outcome::Pass => {
                passed += 1;
                if known.contains_key(name) {
                    println!("{name} passes now: take it off tests/known_failures.tsv");
                }
            }
            Outcome::Fail(e) => {
                failed += 1;
                if !known.contains_key(name) {
                    problems.push(format!("{name}: {}", e.chars().take(300).collect::<String>()));
                }
            }
            Outcome::Panic(p) => {
                failed += 1;
                problems.push(format!("{name}: PANIC {}", p.chars().take(300).collect::<String>()));
            }
        }
    }
    println!("op suite and models: {passed} of {total} fixtures pass, {failed} fail ({} listed as known failures)", known.len());
    assert!(problems.is_empty(), "{} problem(s):\n{}", problems.len(), problems.join("\n"));
}
