//! The C-ABI misuse harness (`aotc-abi-misuse`) over every vendored fixture, under
//! valgrind when it is installed: hostile descriptors, wrong counts and null pointers
//! must each get a status and a message, never a crash or an access out of bounds.

use aotc_tests::{compile, repo_root};
use std::process::Command;

fn valgrind_installed() -> bool {
    Command::new("valgrind").arg("--version").output().is_ok_and(|o| o.status.success())
}

#[test]
fn hostile_calls_get_a_status_and_a_message_and_touch_no_memory_out_of_bounds() {
    let mut fixtures: Vec<_> = std::fs::read_dir(repo_root().join("tests/fixtures"))
        .expect("tests/fixtures")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.join("model.pt2").exists())
        .collect();
    fixtures.sort();
    assert!(!fixtures.is_empty(), "no fixtures in tests/fixtures");
    let compiled: Vec<_> = fixtures.iter().map(|f| compile(&f.join("model.pt2"))).collect();
    let harness = env!("CARGO_BIN_EXE_aotc-abi-misuse");
    let valgrind = valgrind_installed();
    let mut cmd = if valgrind {
        let mut c = Command::new("valgrind");
        c.args(["--error-exitcode=99", "--quiet", harness]);
        c
    } else {
        eprintln!("valgrind is not installed (scripts/setup.sh installs it): running the harness without it");
        Command::new(harness)
    };
    let out = cmd.args(compiled.iter().map(|(_, so)| so)).output().expect("run the harness");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "harness exited with {:?} (99: valgrind found errors)\n{stdout}\n{stderr}",
        out.status
    );
    let summary =
        stdout.lines().find(|l| l.starts_with("abi-misuse:")).unwrap_or_else(|| panic!("no summary line:\n{stdout}"));
    assert!(summary.ends_with(" 0 unexpected"), "{stdout}");
    println!("{summary} ({} valgrind)", if valgrind { "under" } else { "without" });
}
