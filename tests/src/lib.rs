//! Helpers for the integration tests: finding fixtures, compiling them, comparing
//! outputs with PyTorch's recorded ones.

pub mod fuzz;

use aotc_runtime::{DType, Tensor};
use std::path::{Path, PathBuf};

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ sits in the repo").to_path_buf()
}

/// A fixture folder: vendored in tests/fixtures, or in ../shared/fixtures (or $AOTC_FIXTURES).
pub fn fixture(name: &str) -> PathBuf {
    let mut places = vec![repo_root().join("tests/fixtures"), repo_root().join("../shared/fixtures")];
    if let Ok(dir) = std::env::var("AOTC_FIXTURES") {
        places.insert(0, PathBuf::from(dir));
    }
    places.iter().map(|p| p.join(name)).find(|p| p.join("model.pt2").exists())
        .unwrap_or_else(|| panic!("fixture {name} not found in {places:?}"))
}

/// Compiles `model` into a library inside a fresh temporary directory.
pub fn compile(model: &Path) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let so = dir.path().join("model.so");
    if let Err(e) = aotc::compile(model, &so, &aotc::CompileOptions::default()) {
        panic!("compiling {}: {e}", model.display());
    }
    (dir, so)
}

/// Tolerances: the fixture's own (info.json "tolerance") or run_fixtures.sh's defaults.
pub fn tolerance(fixture: &Path) -> (f64, f64) {
    let info: serde_json::Value = serde_json::from_slice(&std::fs::read(fixture.join("info.json")).expect("info.json")).expect("info.json is JSON");
    match info.get("tolerance") {
        Some(t) => (t["rtol"].as_f64().unwrap(), t["atol"].as_f64().unwrap()),
        None => (1e-3, 1e-4),
    }
}

pub fn calls(fixture: &Path) -> usize {
    let info: serde_json::Value = serde_json::from_slice(&std::fs::read(fixture.join("info.json")).expect("info.json")).expect("info.json is JSON");
    info["calls"].as_u64().expect("calls") as usize
}

/// Panics with the first element out of tolerance (|got - want| > atol + rtol * |want|).
pub fn assert_close(what: &str, want: &Tensor, got: &Tensor, rtol: f64, atol: f64) {
    assert_eq!((want.dtype, &want.shape), (got.dtype, &got.shape), "{what}: dtype/shape");
    let (w, g) = (want.to_f64_vec(), got.to_f64_vec());
    if !matches!(want.dtype, DType::F16 | DType::F32 | DType::F64 | DType::BF16) {
        assert_eq!(w, g, "{what}: values");
        return;
    }
    for (i, (a, b)) in w.iter().zip(&g).enumerate() {
        let ok = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= atol + rtol * a.abs();
        assert!(ok, "{what}: element {i}: want {a}, got {b} (rtol {rtol}, atol {atol})");
    }
}

/// Compiles a fixture, runs every recorded call in order on one instance, and checks
/// outputs and mutated inputs against PyTorch's. Returns the number of tensors compared.
pub fn check_fixture(name: &str) -> usize {
    let dir = fixture(name);
    let (_tmp, so) = compile(&dir.join("model.pt2"));
    let mut model = aotc_runtime::Model::load(&so, aotc_runtime::Device::Cpu).expect("load");
    let (rtol, atol) = tolerance(&dir);
    let mut compared = 0;
    for call in 0..calls(&dir) {
        let mut inputs = aotc::tensor_io::read_inputs(&dir.join(format!("inputs_{call}.safetensors")), model.inputs().len()).expect("inputs");
        let outputs = model.run(&mut inputs).unwrap_or_else(|e| panic!("{name} call {call}: {e}"));
        let (expected, _) = aotc::tensor_io::read(&dir.join(format!("expected_{call}.safetensors"))).expect("expected");
        assert_eq!(expected.len(), outputs.len(), "{name} call {call}: output count");
        for (k, want) in &expected {
            let got = &outputs[k.parse::<usize>().expect("flat index")];
            assert_close(&format!("{name} call {call} output {k}"), want, got, rtol, atol);
            compared += 1;
        }
        let mutated = dir.join(format!("mutated_{call}.safetensors"));
        if mutated.exists() {
            for (k, want) in aotc::tensor_io::read(&mutated).expect("mutated").0 {
                let aotc_runtime::Value::Tensor(got) = &inputs[k.parse::<usize>().expect("flat index")] else { panic!("input {k} is not a tensor") };
                assert_close(&format!("{name} call {call} mutated input {k}"), &want, got, rtol, atol);
                compared += 1;
            }
        }
    }
    compared
}
