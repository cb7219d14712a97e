//! Every fixture lowered for CUDA (`aotc::ptx_module`: the op fixtures of
//! tests/fixtures/ops, the model fixtures of tests/fixtures and its models/ folder) gives a PTX module that ptxas assembles for sm_80 (and the model fixtures for sm_90
//! too: the op fixtures' kernels are the models' building blocks, and a second
//! architecture for all 1500 of them cost CI a minute), and
//! the model fixtures' kernels spill no registers. Programs whose only obstacle is an
//! extern kernel with no CUDA form (none left: FFT and nonzero have one) are listed,
//! not failures.
//!
//! ptxas comes from `scripts/install_ptxas.sh` (.tools/ptxas) or $AOTC_PTXAS.

use aotc_tests::{repo_root, suite_fixture_dirs};
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

const ARCHS: [&str; 2] = ["sm_80", "sm_90"];
/// The architectures of the op fixtures.
const OP_ARCHS: [&str; 1] = ["sm_80"];

fn ptxas() -> PathBuf {
    let path = std::env::var_os("AOTC_PTXAS").map(PathBuf::from).unwrap_or_else(|| repo_root().join(".tools/ptxas"));
    assert!(path.exists(), "ptxas not found at {} (set AOTC_PTXAS, or run scripts/install_ptxas.sh)", path.display());
    path
}

enum Outcome {
    /// Kernels assembled, and bytes of spill stores and loads (summed over both archs).
    Assembled {
        kernels: usize,
        spills: u64,
    },
    /// An extern kernel with no CUDA form.
    Skipped(String),
    Failed(String),
}

/// The spill bytes `ptxas -v` reports ("N bytes spill stores, M bytes spill loads").
fn spill_bytes(report: &str) -> u64 {
    report
        .lines()
        .filter_map(|l| l.split_once(" bytes spill stores, "))
        .map(|(stores, loads)| {
            let stores = stores.rsplit(' ').next().and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
            let loads = loads.split(' ').next().and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
            stores + loads
        })
        .sum()
}

fn assemble(dir: &Path, archs: &[&str], ptxas: &Path, scratch: &Path) -> Outcome {
    let module = match aotc::ptx_module(&dir.join("model.pt2"), &Default::default()) {
        Ok(m) => m,
        Err(aotc::Error::Unsupported(m)) if m.contains("no CUDA form") => return Outcome::Skipped(m),
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let name = dir.file_name().unwrap_or_default().to_string_lossy().into_owned();
    let file = scratch.join(format!("{name}.ptx"));
    if let Err(e) = std::fs::write(&file, &module.text) {
        return Outcome::Failed(format!("{}: {e}", file.display()));
    }
    let mut spills = 0;
    for arch in archs {
        let cubin = scratch.join(format!("{name}.{arch}.cubin"));
        let run = Command::new(ptxas).arg(format!("-arch={arch}")).arg("-v").arg(&file).arg("-o").arg(&cubin).output();
        match run {
            Ok(out) if out.status.success() => spills += spill_bytes(&String::from_utf8_lossy(&out.stderr)),
            Ok(out) => {
                return Outcome::Failed(format!(
                    "ptxas -arch={arch} {}: {}",
                    file.display(),
                    String::from_utf8_lossy(&out.stderr).chars().take(600).collect::<String>()
                ))
            }
            Err(e) => return Outcome::Failed(format!("running {}: {e}", ptxas.display())),
        }
        let _ = std::fs::remove_file(&cubin);
    }
    let _ = std::fs::remove_file(&file);
    let kernels = module.kernels.iter().filter(|k| matches!(k, aotc::codegen::cuda::PtxKernel::Entry { .. })).count();
    Outcome::Assembled { kernels, spills }
}

/// `assemble` over `dirs` on every core, keyed by folder.
fn assemble_all(dirs: &[PathBuf], archs: &[&str], ptxas: &Path, scratch: &Path) -> BTreeMap<PathBuf, Outcome> {
    let queue = Mutex::new(dirs.to_vec());
    let results = Mutex::new(BTreeMap::new());
    std::thread::scope(|s| {
        for _ in 0..std::thread::available_parallelism().map_or(1, |n| n.get()) {
            s.spawn(|| loop {
                let Some(dir) = queue.lock().unwrap().pop() else { break };
                let outcome =
                    catch_unwind(AssertUnwindSafe(|| assemble(&dir, archs, ptxas, scratch))).unwrap_or_else(|p| {
                        Outcome::Failed(format!(
                            "PANIC {}",
                            p.downcast_ref::<String>()
                                .cloned()
                                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                                .unwrap_or_default()
                        ))
                    });
                results.lock().unwrap().insert(dir, outcome);
            });
        }
    });
    results.into_inner().unwrap()
}

#[test]
fn every_fixture_assembles_for_sm80_and_sm90() {
    let ptxas = ptxas();
    let (ops, models) = suite_fixture_dirs();
    let scratch = tempfile::tempdir().expect("temporary directory");
    let mut problems = vec![];
    for (what, dirs, archs, spills_allowed) in
        [("op", &ops, &OP_ARCHS[..], true), ("model", &models, &ARCHS[..], false)]
    {
        let outcomes = assemble_all(dirs, archs, &ptxas, scratch.path());
        let (mut modules, mut kernels, mut skipped, mut spilling) = (0, 0, vec![], 0);
        for (dir, outcome) in &outcomes {
            let name = dir.file_name().unwrap_or_default().to_string_lossy();
            match outcome {
                Outcome::Assembled { kernels: k, spills } => {
                    modules += 1;
                    kernels += k;
                    if *spills > 0 {
                        spilling += 1;
                        println!("{what} fixture {name}: {spills} bytes of register spills");
                        if !spills_allowed {
                            problems.push(format!("{name}: {spills} bytes of register spills"));
                        }
                    }
                }
                Outcome::Skipped(why) => skipped.push(format!("{name}: {why}")),
                Outcome::Failed(e) => problems.push(format!("{name}: {}", e.chars().take(800).collect::<String>())),
            }
        }
        println!(
            "{what} fixtures: {modules} modules ({kernels} kernels) assembled for {}, {} with spills, {} skipped:",
            archs.join(" and "),
            spilling,
            skipped.len()
        );
        for s in &skipped {
            println!("  skipped {s}");
        }
    }
    assert!(problems.is_empty(), "{} problem(s):\n{}", problems.len(), problems.join("\n"));
}
