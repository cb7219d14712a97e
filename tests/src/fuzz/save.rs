//! Saving a failing mutant: its files, what was done to it, what happened, and the
//! commands that reproduce it, in one folder of its own.

use super::mutant::Mutant;
use super::outcome::Finding;
use std::path::Path;

/// What a failure's saved folder is called: `<index>-<fixture>-<failure>`.
pub fn folder_name(index: usize, mutant: &Mutant, finding: &Finding) -> String {
    format!("{index:05}-{}-{}", mutant.fixture.name(), format!("{:?}", finding.failure).to_lowercase())
}

/// `mutation.txt`: which mutant, what was done to it, what happened, how to reproduce it.
pub fn note(index: usize, seed: u64, mutant: &Mutant, finding: &Finding, reproduce: &[String]) -> String {
    let commands: String = reproduce.iter().map(|c| format!("  {c}\n")).collect();
    format!(
        "aotc-fuzz mutant {index} of seed {seed}\n{}{finding}\n\nreproduce, from this folder:\n{commands}",
        mutant.describe()
    )
}

/// Copies the mutant's folder `dir` (less the library and outputs) to `saved`, with the
/// note as `mutation.txt` and the failing command's `stderr.txt`.
pub fn failure(dir: &Path, saved: &Path, note: &str, stderr: &str) -> std::io::Result<()> {
    copy_tree(dir, saved, &|p| p.extension().is_some_and(|e| e == "so" || e == "stderr") || p.ends_with("out"))?;
    std::fs::write(saved.join("mutation.txt"), note)?;
    std::fs::write(saved.join("stderr.txt"), stderr)
}

/// Copies `from` into `to` recursively, leaving out paths `skip` names.
fn copy_tree(from: &Path, to: &Path, skip: &dyn Fn(&Path) -> bool) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let path = entry?.path();
        if skip(&path) {
            continue;
        }
        let target = to.join(path.file_name().expect("a directory entry has a name"));
        if path.is_dir() {
            copy_tree(&path, &target, skip)?;
        } else {
            std::fs::copy(&path, &target)?;
        }
    }
    Ok(())
}
