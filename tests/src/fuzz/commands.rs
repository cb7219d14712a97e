//! The aotc command lines a mutant goes through, run from the mutant's own folder.

use super::outcome::VALGRIND_ERROR_EXIT;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The library is "./lib.so", not "lib.so": dlopen searches the library path for a bare name.
const LIBRARY: &str = "./lib.so";

pub fn compile(aotc: &Path, model: &Path, weights: Option<&Path>) -> Vec<OsString> {
    let mut argv: Vec<OsString> = vec![aotc.into(), "compile".into(), model.into(), "-o".into(), LIBRARY.into()];
    if let Some(w) = weights {
        argv.extend(["--weights".into(), w.into()]);
    }
    argv
}

/// `aotc run` on every call's inputs in order, under valgrind if asked.
pub fn run(aotc: &Path, inputs: &[PathBuf], valgrind: bool) -> Vec<OsString> {
    let mut argv: Vec<OsString> = Vec::new();
    if valgrind {
        argv.extend(["valgrind".into(), format!("--error-exitcode={VALGRIND_ERROR_EXIT}").into(), "--quiet".into()]);
    }
    argv.extend([aotc.into(), "run".into(), LIBRARY.into()]);
    for input in inputs {
        argv.extend(["--input".into(), input.into()]);
    }
    argv.extend(["--output-dir".into(), "out".into()]);
    argv
}

/// The command as one line to paste into a shell (arguments here have no spaces).
pub fn line(argv: &[OsString]) -> String {
    argv.iter().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ")
}
