//! Programs as users save them: `torch.export.export(model, args)` without
//! `run_decompositions()`, whose default IR keeps operators outside Core ATen (`linear`,
//! `conv2d`, `layer_norm`, `scaled_dot_product_attention`...). Every fixture of
//! tests/fixtures/raw (made by `make_raw.py` in the shared fixtures: `info.json` lists
//! the non-Core operators each one uses) is compiled, run and compared with PyTorch's
//! outputs.

use aotc_tests::{fixture_dirs, fixtures_root, verify_fixture};

#[test]
fn every_default_ir_fixture_matches_pytorch() {
    let dirs = fixture_dirs(&fixtures_root().join("raw"));
    assert!(!dirs.is_empty(), "no fixtures in {}", fixtures_root().join("raw").display());
    let failures: Vec<String> = dirs
        .iter()
        .filter_map(|dir| {
            let name = dir.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
            match verify_fixture(dir) {
                Ok(compared) if compared > 0 => None,
                Ok(_) => Some(format!("{name}: no tensor compared")),
                Err(e) => Some(format!("{name}: {e}")),
            }
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} default-IR fixtures fail:\n{}",
        failures.len(),
        dirs.len(),
        failures.join("\n")
    );
}
