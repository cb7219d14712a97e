//! Every op fixture (tests/fixtures/ops) compiled for CUDA and run by the library's
//! CUDA runtime on the fake driver, which executes each launch in the PTX interpreter
//! with race checks (see cuda_interp.rs), compared with PyTorch's recorded outputs.
//!
//! Programs with an extern kernel that has no CUDA form (none left: FFT and nonzero have
//! one) are counted as unsupported; fixtures that fail for a known reason are listed in
//! tests/known_failures_cuda.tsv. Anything else failing fails the test.

use aotc_tests::suite::{run_all, Tally};
use aotc_tests::{fake_cuda_driver, suite_fixture_dirs, verify_fixture_cuda};

#[test]
fn every_op_fixture_matches_pytorch_on_the_interpreted_gpu() {
    std::env::set_var("AOTC_CUDA_DRIVER", fake_cuda_driver());
    let (ops, _) = suite_fixture_dirs();
    let total = ops.len();
    let outcomes = run_all(ops, verify_fixture_cuda);
    let t = Tally::of(&outcomes, "tests/known_failures_cuda.tsv");
    println!("cuda op suite (interpreted): {} of {total} pass, {} unsupported (extern kernels), {} fail ({} listed as known)", t.passed, t.unsupported, t.failed, t.known);
    assert!(t.problems.is_empty(), "{} problem(s):\n{}", t.problems.len(), t.problems.join("\n"));
}
