//! Running a verification over many fixture folders in parallel (threads, or worker
//! processes where a process-wide lock would serialise the threads), panics caught, and
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
                let name = fixture_name(&dir);
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

/// Names the shard (`i/n`) a worker process of [`run_in_processes`] runs.
const SHARD_VAR: &str = "AOTC_SUITE_SHARD";
/// Prefix of the lines a worker reports its outcomes on.
const REPORT: &str = "aotc-suite-outcome\t";

/// [`run_all`] spread over worker processes, one per core, each running fixtures
/// `i, i + n, ...` of `dirs`: for verifications on the fake CUDA driver, whose one
/// process-wide state runs every launch under its lock (threads would take turns). The
/// workers are this test binary run again for `test` (the calling test's name) with
/// [`SHARD_VAR`] set: in a worker this runs its shard, prints the outcomes and ends the
/// process. A fixture a worker did not report (it crashed) is a panic outcome.
pub fn run_in_processes(
    test: &str,
    dirs: Vec<PathBuf>,
    verify: fn(&Path) -> Result<usize, String>,
) -> BTreeMap<String, Outcome> {
    if let Ok(shard) = std::env::var(SHARD_VAR) {
        run_shard(&shard, dirs, verify);
    }
    let n = std::thread::available_parallelism().map_or(1, |n| n.get()).min(dirs.len().max(1));
    let exe = std::env::current_exe().expect("the test binary's path");
    let workers: Vec<_> = (0..n)
        .map(|i| {
            std::process::Command::new(&exe)
                .args([test, "--exact", "--nocapture", "--test-threads=1"])
                .env(SHARD_VAR, format!("{i}/{n}"))
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("a worker process")
        })
        .collect();
    let mut results = BTreeMap::new();
    let mut exits = vec![];
    for worker in workers {
        let output = worker.wait_with_output().expect("the worker's output");
        exits.push(output.status);
        results.extend(String::from_utf8_lossy(&output.stdout).lines().filter_map(parse_report));
    }
    for dir in &dirs {
        results.entry(fixture_name(dir)).or_insert_with(|| {
            Outcome::Panic(format!("its worker process ended without reporting it (exits: {exits:?})"))
        });
    }
    results
}

/// A worker's part of [`run_in_processes`]: runs shard `shard` (`i/n`: fixtures `i, i + n,
/// ...` of `dirs`), prints one report line per fixture and ends the process.
fn run_shard(shard: &str, dirs: Vec<PathBuf>, verify: fn(&Path) -> Result<usize, String>) -> ! {
    let (i, n) = shard
        .split_once('/')
        .and_then(|(i, n)| Some((i.parse::<usize>().ok()?, n.parse::<usize>().ok()?)))
        .unwrap_or_else(|| panic!("{SHARD_VAR}={shard:?} is not i/n"));
    let mine = dirs.into_iter().enumerate().filter(|(k, _)| k % n == i).map(|(_, d)| d).collect();
    // (From a fresh line: the harness has printed the test's name without one.)
    let mut report = String::from("\n");
    for (fixture, outcome) in run_all(mine, verify) {
        let (kind, message) = match outcome {
            Outcome::Pass => ("pass", String::new()),
            Outcome::Fail(e) => ("fail", e),
            Outcome::Panic(p) => ("panic", p),
        };
        let message = message.replace('\\', "\\\\").replace('\n', "\\n");
        report.push_str(&format!("{REPORT}{fixture}\t{kind}\t{message}\n"));
    }
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(report.as_bytes()).and_then(|()| out.flush()).expect("report to the parent test");
    std::process::exit(0);
}

/// A fixture's outcome from one of [`run_shard`]'s report lines (None for other output).
fn parse_report(line: &str) -> Option<(String, Outcome)> {
    let mut fields = line.strip_prefix(REPORT)?.splitn(3, '\t');
    let (fixture, kind, message) = (fields.next()?, fields.next()?, unescape(fields.next()?));
    let outcome = match kind {
        "pass" => Outcome::Pass,
        "fail" => Outcome::Fail(message),
        _ => Outcome::Panic(message),
    };
    Some((fixture.to_string(), outcome))
}

/// A fixture's name: its folder's.
fn fixture_name(dir: &Path) -> String {
    dir.file_name().unwrap().to_string_lossy().into_owned()
}

/// The inverse of the workers' escaping of `\` and newlines.
fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
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
