//! Running a command with a deadline and a memory cap, keeping its stderr.

use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How a child process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Code(i32),
    Signal(i32),
    TimedOut,
}

pub struct Exit {
    pub status: Status,
    pub stderr: String,
}

#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub timeout: Duration,
    /// Address-space cap: a mutant that asks for terabytes gets a failed allocation
    /// instead of pushing the machine into the OOM killer.
    pub memory_kib: u64,
}

/// Keeps reports readable when a child writes megabytes (e.g. a long valgrind log).
const MAX_STDERR_BYTES: usize = 256 << 10;

/// Runs `argv` in `dir`, stdout discarded, stderr kept in `stderr_path` (a file rather
/// than a pipe, so a chatty child never stalls on a full pipe while we poll).
pub fn run(argv: &[OsString], dir: &Path, stderr_path: &Path, limits: Limits) -> std::io::Result<Exit> {
    let stderr = std::fs::File::create(stderr_path)?;
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {} && exec \"$@\"", limits.memory_kib))
        .arg("sh")
        .args(argv)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()?;
    let start = Instant::now();
    let mut pause = Duration::from_millis(1);
    let status = loop {
        if let Some(status) = child.try_wait()? {
            use std::os::unix::process::ExitStatusExt;
            break match (status.code(), status.signal()) {
                (Some(code), _) => Status::Code(code),
                (None, Some(signal)) => Status::Signal(signal),
                (None, None) => Status::Code(-1),
            };
        }
        if start.elapsed() >= limits.timeout {
            // `exec` made the shell's pid the command's own, so this ends the command itself.
            child.kill()?;
            child.wait()?;
            break Status::TimedOut;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    };
    let mut bytes = std::fs::read(stderr_path)?;
    bytes.truncate(MAX_STDERR_BYTES);
    Ok(Exit { status, stderr: String::from_utf8_lossy(&bytes).into_owned() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, timeout_ms: u64) -> Exit {
        let dir = tempfile::tempdir().expect("temporary directory");
        let argv: Vec<OsString> = vec!["sh".into(), "-c".into(), script.into()];
        let limits = Limits { timeout: Duration::from_millis(timeout_ms), memory_kib: 1 << 20 };
        run(&argv, dir.path(), &dir.path().join("stderr"), limits).expect("sh runs")
    }

    #[test]
    fn exit_codes_signals_timeouts_and_stderr_are_told_apart() {
        let exit = sh("echo 'error: no' >&2; exit 1", 10_000);
        assert_eq!((exit.status, exit.stderr.as_str()), (Status::Code(1), "error: no\n"));
        assert_eq!(sh("kill -SEGV $$", 10_000).status, Status::Signal(11));
        assert_eq!(sh("sleep 10", 200).status, Status::TimedOut);
    }
}
