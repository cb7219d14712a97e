//! Programs in torch.export's default IR that write tensors in place (tests/fixtures/inplace,
//! made by make_inplace.py): in-place operators, mutation of buffers and user inputs,
//! writes through views, outputs aliasing mutated tensors. Each must give PyTorch's outputs,
//! buffer state and mutated inputs, call after call.

use aotc_tests::{fixture_dirs, repo_root, verify_fixture};

#[test]
fn inplace_programs_match_pytorch() {
    let dirs = fixture_dirs(&repo_root().join("tests/fixtures/inplace"));
    assert!(!dirs.is_empty(), "no fixtures in tests/fixtures/inplace (make them with make_inplace.py)");
    let mut failures = vec![];
    for dir in &dirs {
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        match verify_fixture(dir) {
            Ok(compared) if compared > 0 => eprintln!("{name}: {compared} tensors match"),
            Ok(_) => failures.push(format!("{name}: nothing compared")),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} in-place fixtures fail:\n{}",
        failures.len(),
        dirs.len(),
        failures.join("\n")
    );
}

#[test]
fn a_write_through_a_view_without_scatter_form_is_refused_naming_the_node() {
    let model = repo_root().join("tests/fixtures/inplace/errors/diagonal_write/model.pt2");
    let tmp = tempfile::tempdir().expect("temporary directory");
    let so = tmp.path().join("model.so");
    let Err(err) = aotc::compile(&model, &so, &aotc::CompileOptions::default()) else {
        panic!("a write through diagonal compiled");
    };
    let message = err.to_string();
    assert!(
        message.contains("add_") && message.contains("through the view diagonal.default"),
        "unexpected error: {message}"
    );
}
