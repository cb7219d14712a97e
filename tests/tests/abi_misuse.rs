//! The C-ABI misuse harness (`aotc-abi-misuse`) over every vendored fixture, under
//! valgrind when it is installed: hostile descriptors, wrong counts and null pointers
//! must each get a status and a message, never a crash or an access out of bounds.

use aotc_tests::{compile, repo_root};
use std::process::{Command, Stdio};

fn valgrind_installed() -> bool {
    Command::new("valgrind").arg("--version").output().is_ok_and(|o| o.status.success())
}

/// The largest archive the harness runs under valgrind.
const MAX_ARCHIVE_BYTES: u64 = 512 << 10;

fn archive_bytes(fixture: &std::path::Path) -> u64 {
    std::fs::metadata(fixture.join("model.pt2")).map_or(0, |m| m.len())
}

#[test]
fn hostile_calls_get_a_status_and_a_message_and_touch_no_memory_out_of_bounds() {
    let mut fixtures: Vec<_> = std::fs::read_dir(repo_root().join("tests/fixtures"))
        .expect("tests/fixtures")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.join("model.pt2").exists())
        // The ABI's checks do not depend on a model's size; valgrind's time does (the
        // benchmark-sized convnet alone takes minutes): the small programs cover every path.
        .filter(|p| archive_bytes(p) <= MAX_ARCHIVE_BYTES)
        .collect();
    fixtures.sort();
    assert!(!fixtures.is_empty(), "no fixtures in tests/fixtures");
    let compiled: Vec<_> = fixtures.iter().map(|f| compile(&f.join("model.pt2"))).collect();
    let harness = env!("CARGO_BIN_EXE_aotc-abi-misuse");
    let valgrind = valgrind_installed();
    if !valgrind {
        eprintln!("valgrind is not installed (scripts/setup.sh installs it): running the harness without it");
    }
    // Valgrind runs a program on one core: one harness per core, run at once, each on a
    // share of the libraries balanced by their archives' sizes (largest first, each to
    // the lightest share).
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()).min(compiled.len());
    let mut by_size: Vec<_> = fixtures.iter().zip(&compiled).map(|(f, (_, so))| (archive_bytes(f), so)).collect();
    by_size.sort_by_key(|(bytes, _)| std::cmp::Reverse(*bytes));
    let mut shares = vec![(0u64, vec![]); cores];
    for (bytes, so) in by_size {
        let lightest = shares.iter_mut().min_by_key(|(total, _)| *total).expect("at least one share");
        lightest.0 += bytes;
        lightest.1.push(so);
    }
    let children: Vec<_> = shares
        .iter()
        .map(|(_, share)| {
            let mut cmd = if valgrind {
                let mut c = Command::new("valgrind");
                c.args(["--error-exitcode=99", "--quiet", harness]);
                c
            } else {
                Command::new(harness)
            };
            cmd.args(share).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run the harness")
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().expect("the harness's output");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "harness exited with {:?} (99: valgrind found errors)\n{stdout}\n{stderr}",
            out.status
        );
        let summary = stdout
            .lines()
            .find(|l| l.starts_with("abi-misuse:"))
            .unwrap_or_else(|| panic!("no summary line:\n{stdout}"));
        assert!(summary.ends_with(" 0 unexpected"), "{stdout}");
        println!("{summary} ({} valgrind)", if valgrind { "under" } else { "without" });
    }
}
