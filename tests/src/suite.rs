//! Running a verification over many fixture folders in parallel, panics caught, and
//! reading a list of known failures (`name<TAB>reason` per line, `#` comments).

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub enum Outcome {
    Pass,
    Fail(String),
    Panic(String),
}

/// The known failures listed in `file` (missing file: none).
fn known_failures(file: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_once('\t').map_or((l.to_string(), String::new()), |(n, r)| (n.to_string(), r.to_string())))
        .collect()
}

/// Runs `verify` over `dirs` on every core; outcomes keyed by fixture name.
pub fn run_all(dirs: Vec<PathBuf>, verify: fn(&Path) -> Result<usize, String>) -> BTreeMap<String, Outcome> {
    let queue = Mutex::new(dirs);
    let results = Mutex::new(BTreeMap::new());
    // Panics are caught and reported as outcomes: keep the default hook quiet.
    std::panic::set_hook(Box::new(|_| {}));
    std::thread::scope(|s| {
        for _ in 0..std::thread::available_parallelism().map_or(1, |n| n.get()) {
            s.spawn(|| loop {
                let Some(dir) = queue.lock().unwrap().pop() else { break };
                let name = dir.file_name().unwrap().to_string_lossy().into_owned();
                let outcome = match catch_unwind(AssertUnwindSafe(|| verify(&dir))) {
                    Ok(Ok(_)) => Outcome::Pass,
                    Ok(Err(e)) => Outcome::Fail(e),
                    Err(p) => Outcome::Panic(
                        p.downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default(),
                    ),
                };
                results.lock().unwrap().insert(name, outcome);
            });
        }
    });
    let _ = std::panic::take_hook();
    results.into_inner().unwrap()
}

/// The outcomes of a suite counted against its known-failures list.
pub struct Tally {
    pub passed: usize,
    /// Failures whose error starts with "unsupported:" (no form for this device yet).
    pub unsupported: usize,
    pub failed: usize,
    /// How many fixtures the list names.
    pub known: usize,
    /// Failures the list does not name, and every panic.
    pub problems: Vec<String>,
}

impl Tally {
    /// Counts `outcomes` against the known failures listed in `list` (a file of the
    /// repository); prints the listed fixtures that pass now.
    pub fn of(outcomes: &BTreeMap<String, Outcome>, list: &str) -> Tally {
        let known = known_failures(&crate::repo_root().join(list));
        let mut t = Tally { passed: 0, unsupported: 0, failed: 0, known: known.len(), problems: vec![] };
        for (name, outcome) in outcomes {
            match outcome {
                Outcome::Pass => {
                    t.passed += 1;
                    if known.contains_key(name) {
                        println!("{name} passes now: take it off {list}");
                    }
                }
                Outcome::Fail(e) if e.starts_with("unsupported:") => t.unsupported += 1,
                Outcome::Fail(e) => {
                    t.failed += 1;
                    if !known.contains_key(name) {
                        t.problems.push(format!("{name}: {}", e.chars().take(300).collect::<String>()));
                    }
                }
                Outcome::Panic(p) => {
                    t.failed += 1;
                    t.problems.push(format!("{name}: PANIC {}", p.chars().take(300).collect::<String>()));
                }
            }
        }
        t
    }
}
