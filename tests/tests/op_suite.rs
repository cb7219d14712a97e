//! Every per-operator fixture (../shared/fixtures/ops, made from PyTorch's OpInfo samples)
//! and every model fixture (../shared/fixtures and its models/ folder), compiled and run
//! through the Rust API in parallel and compared with PyTorch's recorded outputs at the
//! tolerance in their info.json.
//!
//! Fixtures that do not pass yet are listed, each with its reason, in
//! tests/known_failures.tsv. The test fails when any other fixture fails and when
//! compiling or running anything panics; it prints the listed ones that pass now.

use aotc_tests::{repo_root, shared_fixture_dirs, verify_fixture};
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Mutex;

enum Outcome {
    Pass,
    Fail(String),
    Panic(String),
}

fn known_failures() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(repo_root().join("tests/known_failures.tsv")).unwrap_or_default();
    text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_once('\t').map_or((l.to_string(), String::new()), |(n, r)| (n.to_string(), r.to_string())))
        .collect()
}

/// Runs `verify_fixture` over `dirs` on every core; outcomes keyed by fixture name.
fn run_all(dirs: Vec<PathBuf>) -> BTreeMap<String, Outcome> {
    let queue = Mutex::new(dirs);
    let results = Mutex::new(BTreeMap::new());
    // Panics are caught and reported as outcomes: keep the default hook quiet.
    std::panic::set_hook(Box::new(|_| {}));
    std::thread::scope(|s| {
        for _ in 0..std::thread::available_parallelism().map_or(1, |n| n.get()) {
            s.spawn(|| loop {
                let Some(dir) = queue.lock().unwrap().pop() else { break };
                let name = dir.file_name().unwrap().to_string_lossy().into_owned();
                let outcome = match catch_unwind(AssertUnwindSafe(|| verify_fixture(&dir))) {
                    Ok(Ok(_)) => Outcome::Pass,
                    Ok(Err(e)) => Outcome::Fail(e),
                    Err(p) => Outcome::Panic(p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()),
                };
                results.lock().unwrap().insert(name, outcome);
            });
        }
    });
    let _ = std::panic::take_hook();
    results.into_inner().unwrap()
}

#[test]
fn every_op_and_model_fixture_matches_pytorch() {
    let Some((mut dirs, models)) = shared_fixture_dirs() else {
        eprintln!("../shared/fixtures is not there: nothing to check");
        return;
    };
    dirs.extend(models);
    let total = dirs.len();
    let outcomes = run_all(dirs);
    let known = known_failures();
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
