//! Libraries compiled for CUDA, run by the library's own CUDA runtime (driver calls,
//! slot table, launch plan, mutations) on a fake driver that executes every launch in the
//! PTX interpreter (tests/fake_cuda on tests/ptx_interp, race checks on), compared with
//! PyTorch's recorded outputs: the model fixtures here, the op fixtures in
//! `cuda_op_suite.rs`. Programs with an extern kernel that has no CUDA form (none
//! left: FFT and nonzero have one) are counted, not failures. The fixtures run in one
//! worker process per core (`suite::run_in_processes`): the fake driver runs launches
//! under one process-wide lock.

use aotc_tests::suite::{run_in_processes, Tally};
use aotc_tests::{fake_cuda_driver, suite_fixture_dirs, verify_fixture_cuda};

#[test]
fn model_fixtures_match_pytorch_on_the_interpreted_gpu() {
    std::env::set_var("AOTC_CUDA_DRIVER", fake_cuda_driver());
    let (_, models) = suite_fixture_dirs();
    let total = models.len();
    let outcomes = run_in_processes("model_fixtures_match_pytorch_on_the_interpreted_gpu", models, verify_fixture_cuda);
    let t = Tally::of(&outcomes, "tests/known_failures_cuda.tsv");
    println!(
        "cuda (interpreted): {} of {total} pass, {} unsupported (extern kernels), {} fail ({} listed as known)",
        t.passed, t.unsupported, t.failed, t.known
    );
    assert!(t.problems.is_empty(), "{} problem(s):\n{}", t.problems.len(), t.problems.join("\n"));
}
