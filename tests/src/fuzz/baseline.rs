//! Which fixtures the compiler accepts unmutated. Only those are mutated: damaging a
//! program it refuses anyway (an operator it lacks) mostly tests that refusal again.

use super::commands;
use super::exec::{self, Limits};
use super::fixture::Fixture;
use super::outcome::{classify, Verdict};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// `groups` less the fixtures that do not compile, compiled `jobs` at a time; empty
/// groups are dropped. Order is kept, so a campaign's mutants stay a function of its seed.
pub fn compiling(aotc: &Path, groups: Vec<Vec<Fixture>>, jobs: usize, limits: Limits) -> Vec<Vec<Fixture>> {
    let all: Vec<(usize, Fixture)> =
        groups.into_iter().enumerate().flat_map(|(g, fs)| fs.into_iter().map(move |f| (g, f))).collect();
    let next = AtomicUsize::new(0);
    let compiles = Mutex::new(vec![false; all.len()]);
    std::thread::scope(|s| {
        for _ in 0..jobs.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((_, fixture)) = all.get(i) else { return };
                let ok = compiles_unmutated(aotc, fixture, limits);
                compiles.lock().expect("baseline lock")[i] = ok;
            });
        }
    });
    let compiles = compiles.into_inner().expect("baseline lock");
    let mut kept: Vec<Vec<Fixture>> = Vec::new();
    let mut last_group = None;
    for ((group, fixture), ok) in all.into_iter().zip(compiles) {
        if !ok {
            continue;
        }
        if last_group != Some(group) {
            kept.push(Vec::new());
            last_group = Some(group);
        }
        kept.last_mut().expect("just pushed").push(fixture);
    }
    kept
}

fn compiles_unmutated(aotc: &Path, fixture: &Fixture, limits: Limits) -> bool {
    let Ok(dir) = tempfile::Builder::new().prefix("aotc-fuzz-baseline-").tempdir() else { return false };
    let argv = commands::compile(aotc, &fixture.dir.join("model.pt2"), None);
    match exec::run(&argv, dir.path(), &dir.path().join("compile.stderr"), limits)
        .map(|exit| (classify(&exit, false), exit))
    {
        Ok((Verdict::Accepted, _)) => true,
        Ok((Verdict::Refused, _)) => false,
        Ok((Verdict::Failed(failure), exit)) => {
            eprintln!(
                "fuzz: fixture {} does not compile even unmutated: {failure:?}: {}",
                fixture.dir.display(),
                exit.stderr.lines().next().unwrap_or("")
            );
            false
        }
        Err(e) => {
            eprintln!("fuzz: fixture {}: could not run aotc: {e}", fixture.dir.display());
            false
        }
    }
}
