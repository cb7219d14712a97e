//! Helpers shared by the CLI test files: finding fixtures, running the `aotc` binary and
//! checking that a failure is clean. `AOTC=/path/to/aotc` runs the tests against another
//! build (e.g. an older one, to see a test fail there).
#![allow(dead_code)] // each test file uses its own subset

use aotc_runtime::{Device, Model, Tensor, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn fixture(name: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    [root.join("tests/fixtures").join(name), root.join("../shared/fixtures").join(name)]
        .into_iter()
        .find(|p| p.join("model.pt2").exists())
        .unwrap_or_else(|| panic!("fixture {name} not found"))
}

pub fn aotc_bin() -> std::ffi::OsString {
    std::env::var_os("AOTC").unwrap_or_else(|| env!("CARGO_BIN_EXE_aotc").into())
}

pub fn aotc(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    Command::new(aotc_bin()).args(args.iter().map(|a| a.as_ref())).output().expect("run aotc")
}

/// A clean failure: exit status 1, `needle` in the message, no panic or internal error.
pub fn fails_with(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "expected a clean failure; stdout: {} stderr: {}",
        String::from_utf8_lossy(&out.stdout),
        shorten(&err)
    );
    assert!(err.contains(needle), "stderr {:?} lacks {needle:?}", shorten(&err));
    assert!(!err.contains("panicked") && !err.contains("internal error"), "{}", shorten(&err));
}

pub fn succeeds(out: &Output) {
    assert!(out.status.success(), "{}", shorten(&String::from_utf8_lossy(&out.stderr)));
}

/// Messages quoting a 20,000-deep expression are long; a test failure shows their ends.
pub fn shorten(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    if chars.len() <= 2000 {
        s.into()
    } else {
        format!("{}[...]{}", String::from_iter(&chars[..1000]), String::from_iter(&chars[chars.len() - 1000..]))
    }
}

/// The compiled op fixture `name` (kept alive by the returned directory).
pub fn compiled(name: &str) -> (tempfile::TempDir, Model) {
    let dir = tempfile::tempdir().unwrap();
    let so = dir.path().join("m.so");
    succeeds(&aotc(&[&"compile", &fixture(&format!("ops/{name}")).join("model.pt2"), &"-o", &so]));
    let model = Model::load(&so, Device::Cpu).unwrap();
    (dir, model)
}

pub fn floats(shape: &[i64], values: &[f32]) -> Value {
    Value::Tensor(Tensor::from_f32(shape, values))
}
