//! Every op fixture (../shared/fixtures/ops) compiled for CUDA and run by the library's
//! CUDA runtime on the fake driver, which executes each launch in the PTX interpreter
//! with race checks (see cuda_interp.rs), compared with PyTorch's recorded outputs.
//!
//! Programs with an extern kernel that has no CUDA form (none left: FFT and nonzero have
//! one) are counted as unsupported; fixtures that fail for a known reason are listed in
//! tests/known_failures_cuda.tsv. Anything else failing fails the test.

use aotc_tests::suite::{known_failures, run_all, Outcome};
use aotc_tests::{fake_cuda_driver, repo_root, shared_fixture_dirs, verify_fixture_cuda};

#[test]
fn every_op_fixture_matches_pytorch_on_the_interpreted_gpu() {
    std::env::set_var("AOTC_CUDA_DRIVER", fake_cuda_driver());
    let Some((ops, _)) = shared_fixture_dirs() else {
        eprintln!("../shared/fixtures is not there: nothing to check");
        return;
    };
    let total = ops.len();
    let outcomes = run_all(ops, verify_fixture_cuda);
    let known = known_failures(&repo_root().join("tests/known_failures_cuda.tsv"));
    let (mut passed, mut unsupported, mut failed, mut problems) = (0, 0, 0, vec![]);
    for (name, outcome) in &outcomes {
        match outcome {
            Outcome::Pass => {
                passed += 1;
                if known.contains_key(name) {
                    println!("{name} passes now: take it off tests/known_failures_cuda.tsv");
                }
            }
            Outcome::Fail(e) if e.starts_with("unsupported:") => unsupported += 1,
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
    println!("cuda op suite (interpreted): {passed} of {total} pass, {unsupported} unsupported (extern kernels), {failed} fail ({} listed as known)", known.len());
    assert!(problems.is_empty(), "{} problem(s):\n{}", problems.len(), problems.join("\n"));
}
