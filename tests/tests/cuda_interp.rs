//! Libraries compiled for CUDA, run by the library's own CUDA runtime (driver calls,
//! slot table, launch plan, mutations) on a fake driver that executes every launch in the
//! PTX interpreter (tests/fake_cuda on tests/ptx_interp, race checks on), compared with
//! PyTorch's recorded outputs: the model fixtures here, the op fixtures in
//! `cuda_op_suite.rs`. Programs with an extern kernel that has no CUDA form (none
//! left: FFT and nonzero have one) are listed, not failures.

use aotc_tests::{fake_cuda_driver, suite_fixture_dirs, verify_fixture_cuda};

#[test]
fn model_fixtures_match_pytorch_on_the_interpreted_gpu() {
    std::env::set_var("AOTC_CUDA_DRIVER", fake_cuda_driver());
    let (_, dirs) = suite_fixture_dirs();
    let (mut passed, mut failed, mut unsupported) = (vec![], vec![], vec![]);
    for dir in &dirs {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        match verify_fixture_cuda(dir) {
            Ok(_) => passed.push(name),
            Err(e) if e.starts_with("unsupported:") => unsupported.push(format!("{name}: {e}")),
            Err(e) => failed.push(format!("{name}: {e}")),
        }
    }
    println!(
        "cuda (interpreted): {} passed, {} failed, {} unsupported of {}",
        passed.len(),
        failed.len(),
        unsupported.len(),
        dirs.len()
    );
    unsupported.iter().for_each(|u| println!("  unsupported {u}"));
    assert!(failed.is_empty(), "failed:\n{}", failed.join("\n"));
}
