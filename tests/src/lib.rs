//! Helpers for the integration tests: finding fixtures, compiling them, comparing
//! outputs with PyTorch's recorded ones.

pub mod fuzz;
pub mod suite;

use aotc_runtime::{DType, Tensor};
use std::path::{Path, PathBuf};

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ sits in the repo").to_path_buf()
}

/// examples/c/run_model.c compiled with cc (warnings as errors) against aotc.h alone,
/// into `dir`: `run_model LIB [calls] [batch]`.
pub fn build_c_example(dir: &Path) -> PathBuf {
    let exe = dir.join("run_model");
    let root = repo_root();
    let cc = std::process::Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(root.join("abi/include"))
        .arg(root.join("examples/c/run_model.c"))
        .arg("-ldl")
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("a C compiler");
    assert!(cc.status.success(), "{}", String::from_utf8_lossy(&cc.stderr));
    exe
}

/// The repository's fixtures (tests/fixtures: model fixtures, with the op suite in ops/
/// and standard architectures in models/), or the folder $AOTC_FIXTURES names instead
/// (one of the same layout, such as ../shared/fixtures).
pub fn fixtures_root() -> PathBuf {
    match std::env::var_os("AOTC_FIXTURES") {
        Some(dir) => PathBuf::from(dir),
        None => repo_root().join("tests/fixtures"),
    }
}

/// A fixture folder by its path under [`fixtures_root`] ("small_cnn", "models/vit_tiny",
/// "ops/abs__float32__0"). A missing fixture fails the test that names it.
pub fn fixture(name: &str) -> PathBuf {
    let dir = fixtures_root().join(name);
    assert!(dir.join("model.pt2").exists(), "fixture {name} not found: no {}", dir.join("model.pt2").display());
    dir
}

/// The fixture folders (those holding a model.pt2) directly inside `folder`, sorted.
pub fn fixture_dirs(folder: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(folder)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.join("model.pt2").exists()).collect())
        .unwrap_or_default();
    dirs.sort();
    dirs
}

/// The fixture suite: (the op fixtures of ops/, the model fixtures of the root and of
/// models/). Fails the test when either is empty: a suite that checks nothing must not pass.
/// `AOTC_FIXTURE_FILTER=TEXT` keeps the fixtures whose folder name contains TEXT (while
/// working on one operator), and fails when none does.
pub fn suite_fixture_dirs() -> (Vec<PathBuf>, Vec<PathBuf>) {
    let root = fixtures_root();
    let mut ops = fixture_dirs(&root.join("ops"));
    let mut models = fixture_dirs(&root);
    models.extend(fixture_dirs(&root.join("models")));
    assert!(
        !ops.is_empty() && !models.is_empty(),
        "no op or model fixtures in {} (ops: {}, models: {})",
        root.display(),
        ops.len(),
        models.len()
    );
    if let Ok(filter) = std::env::var("AOTC_FIXTURE_FILTER") {
        let keep = |d: &PathBuf| d.file_name().is_some_and(|n| n.to_string_lossy().contains(&filter));
        ops.retain(keep);
        models.retain(keep);
        assert!(
            !ops.is_empty() || !models.is_empty(),
            "AOTC_FIXTURE_FILTER={filter} matches no fixture in {}",
            root.display()
        );
        eprintln!("AOTC_FIXTURE_FILTER={filter}: {} op and {} model fixtures", ops.len(), models.len());
    }
    (ops, models)
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
    let info: serde_json::Value = serde_json::from_slice(&std::fs::read(fixture.join("info.json")).expect("info.json"))
        .expect("info.json is JSON");
    match info.get("tolerance") {
        Some(t) => (t["rtol"].as_f64().unwrap(), t["atol"].as_f64().unwrap()),
        None => (1e-3, 1e-4),
    }
}

pub fn calls(fixture: &Path) -> usize {
    let info: serde_json::Value = serde_json::from_slice(&std::fs::read(fixture.join("info.json")).expect("info.json"))
        .expect("info.json is JSON");
    info["calls"].as_u64().expect("calls") as usize
}

/// The first element out of tolerance (|got - want| > atol + rtol * |want|), as an error.
pub fn compare(what: &str, want: &Tensor, got: &Tensor, rtol: f64, atol: f64) -> Result<(), String> {
    if (want.dtype, &want.shape) != (got.dtype, &got.shape) {
        return Err(format!("{what}: want {}{:?}, got {}{:?}", want.dtype, want.shape, got.dtype, got.shape));
    }
    let (w, g) = (want.to_f64_vec(), got.to_f64_vec());
    let float = matches!(want.dtype, DType::F16 | DType::F32 | DType::F64 | DType::BF16);
    for (i, (a, b)) in w.iter().zip(&g).enumerate() {
        let ok = (a.is_nan() && b.is_nan()) || a == b || (float && (a - b).abs() <= atol + rtol * a.abs());
        if !ok {
            return Err(format!("{what}: element {i}: want {a}, got {b} (rtol {rtol}, atol {atol})"));
        }
    }
    Ok(())
}

/// The inputs and PyTorch's outputs of call `call` of the fixture in `dir`.
pub fn recorded(dir: &Path, call: usize) -> (Vec<aotc_runtime::Value>, Vec<(String, Tensor)>) {
    let file = dir.join(format!("inputs_{call}.safetensors"));
    let (tensors, scalars) = aotc::tensor_io::read(&file).expect("inputs");
    let inputs = aotc::tensor_io::read_inputs(&file, tensors.len() + scalars.len()).expect("inputs");
    let (expected, _) =
        aotc::tensor_io::read(&dir.join(format!("expected_{call}.safetensors"))).expect("expected outputs");
    (inputs, expected.into_iter().collect())
}

/// Runs `model` on `inputs`, panicking at the first output out of tolerance.
pub fn check_call(
    model: &mut aotc_runtime::Model,
    inputs: &[aotc_runtime::Value],
    expected: &[(String, Tensor)],
    tol: (f64, f64),
    what: &str,
) {
    let outputs = model.run(&mut inputs.to_vec()).unwrap_or_else(|e| panic!("{what}: {e}"));
    for (k, want) in expected {
        let got = &outputs[k.parse::<usize>().expect("output index")];
        assert_close(&format!("{what} output {k}"), want, got, tol.0, tol.1);
    }
}

/// Panics with the first element out of tolerance.
pub fn assert_close(what: &str, want: &Tensor, got: &Tensor, rtol: f64, atol: f64) {
    if let Err(e) = compare(what, want, got, rtol, atol) {
        panic!("{e}");
    }
}

/// Compiles a fixture, runs every recorded call in order on one instance, and checks
/// outputs and mutated inputs against PyTorch's. Returns the number of tensors compared.
pub fn check_fixture(name: &str) -> usize {
    verify_fixture(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// How a fixture's outputs come back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outputs {
    /// `aotc_run`: described in the instance's memory, copied into new tensors.
    Returned,
    /// `aotc_run_into`: written into tensors allocated from `aotc_output_shapes` (a program
    /// whose output shapes depend on the data falls back to `aotc_run`).
    IntoCaller,
}

/// [`check_fixture`] for a fixture folder, every failure (compile, run, comparison) as an
/// error: one library, checked through both ways outputs come back ([`Outputs`]), each on
/// an instance of its own. Returns the tensors compared per way.
pub fn verify_fixture(dir: &Path) -> Result<usize, String> {
    let tmp = tempfile::tempdir().map_err(|e| format!("temporary directory: {e}"))?;
    let so = tmp.path().join("model.so");
    aotc::compile(&dir.join("model.pt2"), &so, &aotc::CompileOptions::default())
        .map_err(|e| format!("compile: {e}"))?;
    let compared = verify_library(dir, &so, aotc_runtime::Device::Cpu, Outputs::Returned)?;
    verify_library(dir, &so, aotc_runtime::Device::Cpu, Outputs::IntoCaller)
        .map_err(|e| format!("through aotc_run_into: {e}"))?;
    Ok(compared)
}

/// The fake CUDA driver (tests/fake_cuda: every launch executed by the PTX interpreter),
/// built beside this test binary; built here first when missing.
pub fn fake_cuda_driver() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>");
    let lib = profile_dir.join("libaotc_fake_cuda.so");
    if !lib.exists() {
        let release = profile_dir.file_name().is_some_and(|n| n == "release");
        let mut cargo = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cargo.args(["build", "-p", "aotc-fake-cuda"]).current_dir(repo_root());
        if release {
            cargo.arg("--release");
        }
        let status = cargo.status().expect("cargo runs");
        assert!(status.success() && lib.exists(), "building aotc-fake-cuda did not give {}", lib.display());
    }
    lib
}

/// [`verify_fixture`] for a library compiled for CUDA, run on `cuda:0` through whatever
/// driver `$AOTC_CUDA_DRIVER` names (the tests' fake one executes the PTX in the
/// interpreter); host tensors staged by the loader. `Err` starting with "unsupported:"
/// when the program has no CUDA form.
pub fn verify_fixture_cuda(dir: &Path) -> Result<usize, String> {
    let tmp = tempfile::tempdir().map_err(|e| format!("temporary directory: {e}"))?;
    let so = tmp.path().join("model.so");
    let opts = aotc::CompileOptions { device: aotc::Target::Cuda, ..Default::default() };
    aotc::compile(&dir.join("model.pt2"), &so, &opts).map_err(|e| match e {
        aotc::Error::Unsupported(m) => format!("unsupported: {m}"),
        e => format!("compile: {e}"),
    })?;
    verify_library(dir, &so, aotc_runtime::Device::Cuda(0), Outputs::Returned)
}

/// One call of `model` on `inputs`, its outputs coming back as `how` says.
pub fn run_with(
    model: &mut aotc_runtime::Model,
    inputs: &mut [aotc_runtime::Value],
    how: Outputs,
) -> Result<Vec<Tensor>, aotc_runtime::Error> {
    if how == Outputs::IntoCaller {
        let shapes = model.output_shapes(inputs)?;
        if shapes.iter().all(|s| s.iter().all(|&n| n >= 0)) {
            let mut outputs: Vec<Tensor> = model
                .outputs()
                .iter()
                .zip(&shapes)
                .map(|(info, shape)| Tensor::zeros(info.dtype.expect("output dtype"), shape))
                .collect();
            model.run_into(inputs, &mut outputs)?;
            return Ok(outputs);
        }
    }
    model.run(inputs)
}

/// Every recorded call of the fixture in `dir` on a fresh instance of the library `so`,
/// the outputs coming back as `how` says.
fn verify_library(dir: &Path, so: &Path, device: aotc_runtime::Device, how: Outputs) -> Result<usize, String> {
    // One thread: the op suite loads ~1500 libraries into one process, and each library
    // that starts its worker pool costs a pthread key (glibc has 1024). tests/threads.rs
    // checks the threaded paths.
    let mut model = aotc_runtime::Model::load_with_threads(so, device, 1).map_err(|e| format!("load: {e}"))?;
    let (rtol, atol) = tolerance(dir);
    let mut compared = 0;
    for call in 0..calls(dir) {
        let mut inputs =
            aotc::tensor_io::read_inputs(&dir.join(format!("inputs_{call}.safetensors")), model.inputs().len())?;
        let outputs = run_with(&mut model, &mut inputs, how).map_err(|e| format!("call {call}: {e}"))?;
        let (expected, scalars) = aotc::tensor_io::read(&dir.join(format!("expected_{call}.safetensors")))?;
        if expected.len() + scalars.len() != outputs.len() {
            return Err(format!(
                "call {call}: {} outputs, PyTorch gave {}",
                outputs.len(),
                expected.len() + scalars.len()
            ));
        }
        // Python-scalar outputs (SymInt...): the value PyTorch returned, as the CLI writes it.
        for (k, want) in &scalars {
            let i = k.parse::<usize>().map_err(|_| format!("call {call}: scalar output key {k}"))?;
            let got = outputs.get(i).zip(model.outputs().get(i)).and_then(|(t, info)| t.scalar(info.kind));
            if got.as_ref().and_then(aotc::tensor_io::scalar_json).as_ref() != Some(want) {
                return Err(format!("call {call} output {k}: want the python scalar {want}, got {got:?}"));
            }
            compared += 1;
        }
        for (k, want) in &expected {
            let got = k
                .parse::<usize>()
                .ok()
                .and_then(|i| outputs.get(i))
                .ok_or_else(|| format!("call {call}: no output {k}"))?;
            compare(&format!("call {call} output {k}"), want, got, rtol, atol)?;
            compared += 1;
        }
        let mutated = dir.join(format!("mutated_{call}.safetensors"));
        if mutated.exists() {
            for (k, want) in aotc::tensor_io::read(&mutated)?.0 {
                let Some(aotc_runtime::Value::Tensor(got)) = k.parse::<usize>().ok().and_then(|i| inputs.get(i)) else {
                    return Err(format!("call {call}: mutated input {k} is not a tensor input"));
                };
                compare(&format!("call {call} mutated input {k}"), &want, got, rtol, atol)?;
                compared += 1;
            }
        }
    }
    Ok(compared)
}

/// A float32 tensor of ones.
pub fn ones(shape: &[i64]) -> aotc_runtime::Value {
    aotc_runtime::Value::Tensor(Tensor::from_f32(shape, &vec![1.0; shape.iter().product::<i64>() as usize]))
}

/// The program (models/*.json) of a .pt2 archive as JSON, for tests that edit it.
pub fn program_json(archive: &Path) -> serde_json::Value {
    use std::io::Read;
    let mut zip = zip::ZipArchive::new(std::fs::File::open(archive).expect("the archive")).expect("a zip archive");
    let name = (0..zip.len())
        .map(|i| zip.by_index(i).expect("an entry").name().to_string())
        .find(|n| n.ends_with("models/model.json"))
        .expect("a models/model.json entry");
    let mut text = String::new();
    zip.by_name(&name).expect("the program").read_to_string(&mut text).expect("UTF-8");
    serde_json::from_str(&text).expect("the program is JSON")
}

/// Compiles an edited program (a bare model.json) with the weights `weights`, in a fresh
/// temporary directory: the library's path, or the compiler's error.
pub fn compile_json(
    program: &serde_json::Value,
    weights: &[(String, &Tensor)],
) -> (tempfile::TempDir, Result<PathBuf, aotc::Error>) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let json = dir.path().join("model.json");
    std::fs::write(&json, program.to_string()).expect("model.json written");
    let file = dir.path().join("w.safetensors");
    aotc::tensor_io::write(&file, weights).expect("weights written");
    let so = dir.path().join("m.so");
    let options = aotc::CompileOptions { weights: Some(file), ..Default::default() };
    let built = aotc::compile(&json, &so, &options).map(|_| so);
    (dir, built)
}

/// $AOTC_BIN, else the `aotc` built beside the running test: a test runs from
/// target/<profile>/deps/, the binary is target/<profile>/aotc.
pub fn aotc_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("AOTC_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the test executable's path");
    let profile_dir = exe.parent().and_then(Path::parent).expect("the test runs from target/<profile>/deps/");
    let aotc = profile_dir.join("aotc");
    assert!(
        aotc.exists(),
        "no aotc binary at {}: build it (`cargo build -p aotc`, or `cargo test --workspace`) or set AOTC_BIN",
        aotc.display()
    );
    aotc
}
