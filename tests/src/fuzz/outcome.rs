//! What a compile or a run of a mutant amounts to: fine, a clean refusal, or a failure
//! (the things that must never happen whatever the archive, weights or caller say).

use super::exec::{Exit, Status};
use std::fmt;
use std::path::Path;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Failure {
    Panic,
    /// Killed by a signal: segfault, abort (stack overflow, failed allocation)...
    Crash,
    Hang,
    /// valgrind saw an invalid read/write or a use of uninitialised memory.
    InvalidAccess,
    /// Exited non-zero without the CLI's "error: " message.
    UnclearError,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Compiled, or ran to the end.
    Accepted,
    /// Exit 1 with a plain "error: ..." message.
    Refused,
    Failed(Failure),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    Compile,
    Run,
}

/// valgrind's exit status for "found errors" (`--error-exitcode`).
pub const VALGRIND_ERROR_EXIT: i32 = 99;

const PANIC_MARKERS: &[&str] = &["panicked", "internal error", "RUST_BACKTRACE"];

pub fn classify(exit: &Exit, under_valgrind: bool) -> Verdict {
    let stderr = exit.stderr.as_str();
    let valgrind_error = under_valgrind
        && (exit.status == Status::Code(VALGRIND_ERROR_EXIT)
            || stderr.contains("Invalid read")
            || stderr.contains("Invalid write"));
    match exit.status {
        Status::TimedOut => Verdict::Failed(Failure::Hang),
        _ if valgrind_error => Verdict::Failed(Failure::InvalidAccess),
        Status::Signal(_) => Verdict::Failed(Failure::Crash),
        Status::Code(101) => Verdict::Failed(Failure::Panic),
        _ if PANIC_MARKERS.iter().any(|m| stderr.contains(m)) => Verdict::Failed(Failure::Panic),
        Status::Code(0) => Verdict::Accepted,
        Status::Code(1) if stderr.starts_with("error: ") => Verdict::Refused,
        Status::Code(_) => Verdict::Failed(Failure::UnclearError),
    }
}

/// One failure: where, what, and the telling line of its stderr.
#[derive(Clone, Debug)]
pub struct Finding {
    pub phase: Phase,
    pub failure: Failure,
    pub symptom: String,
}

impl Finding {
    /// `dir` is the mutant's temporary folder: it is left out of the symptom, which names
    /// the library inside it in valgrind reports, so that findings group across mutants.
    pub fn new(phase: Phase, failure: Failure, exit: &Exit, timeout_s: u64, dir: &Path) -> Finding {
        let symptom = symptom(failure, exit, timeout_s).replace(&format!("{}/", dir.display()), "");
        Finding { phase, failure, symptom }
    }

    /// Groups findings that are very likely one bug: same place, numbers and addresses ignored.
    pub fn kind(&self) -> String {
        let what = match self.failure {
            // A panic's location identifies it; its message often holds mutated values.
            Failure::Panic => self.symptom.split(": ").next().unwrap_or(&self.symptom).to_string(),
            _ => without_numbers(&self.symptom),
        };
        format!("{:?} {:?}: {what}", self.phase, self.failure)
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{:?} at {:?}: {}", self.failure, self.phase, self.symptom)
    }
}

/// `text` with each hex address ("0x4E6D541") as "0x?" and each decimal digit as "N".
fn without_numbers(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("0x") {
        out += &rest[..at];
        out += "0x?";
        rest = rest[at + 2..].trim_start_matches(|c: char| c.is_ascii_hexdigit());
    }
    out += rest;
    out.chars().map(|c| if c.is_ascii_digit() { 'N' } else { c }).collect()
}

/// The stderr lines, without valgrind's "==pid== " prefixes.
fn lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .map(|l| if l.starts_with("==") { l.split("== ").nth(1).unwrap_or(l) } else { l })
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect()
}

fn symptom(failure: Failure, exit: &Exit, timeout_s: u64) -> String {
    let lines = lines(&exit.stderr);
    let last = lines.last().copied().unwrap_or("(no stderr)");
    match failure {
        Failure::Panic => match lines.iter().position(|l| l.contains("panicked at")) {
            Some(i) => {
                let at = lines[i].split("panicked at ").nth(1).unwrap_or(lines[i]).trim_end_matches(':');
                format!("panicked at {at}: {}", lines.get(i + 1).copied().unwrap_or(""))
            }
            None => last.to_string(),
        },
        Failure::Crash => {
            let signal = match exit.status {
                Status::Signal(s) => signal_name(s),
                _ => "signal".into(),
            };
            // What the Rust runtime says before it aborts, rather than a backtrace's last line.
            const TELLING: &[&str] =
                &["panicked at", "has overflowed its stack", "memory allocation of", "fatal runtime error"];
            let telling = lines.iter().find(|l| TELLING.iter().any(|t| l.contains(t))).copied();
            format!("{signal}: {}", telling.unwrap_or(last))
        }
        Failure::Hang => format!("still running after {timeout_s} s"),
        Failure::InvalidAccess => {
            let i = lines
                .iter()
                .position(|l| {
                    l.starts_with("Invalid") || l.contains("uninitialised") || l.starts_with("Process terminating")
                })
                .unwrap_or(0);
            let frame = lines.iter().skip(i + 1).find(|l| l.starts_with("at 0x")).copied().unwrap_or("");
            format!("{} {frame}", lines.get(i).copied().unwrap_or(last))
        }
        Failure::UnclearError => format!("{:?}: {}", exit.status, lines.first().copied().unwrap_or("(no stderr)")),
    }
}

fn signal_name(signal: i32) -> String {
    match signal {
        4 => "SIGILL".into(),
        6 => "SIGABRT".into(),
        7 => "SIGBUS".into(),
        8 => "SIGFPE".into(),
        9 => "SIGKILL".into(),
        11 => "SIGSEGV".into(),
        n => format!("signal {n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exit(status: Status, stderr: &str) -> Exit {
        Exit { status, stderr: stderr.into() }
    }

    #[test]
    fn only_a_plain_error_message_is_a_clean_refusal() {
        assert_eq!(classify(&exit(Status::Code(0), ""), false), Verdict::Accepted);
        assert_eq!(classify(&exit(Status::Code(1), "error: bad sizes\n"), false), Verdict::Refused);
        assert_eq!(
            classify(&exit(Status::Code(1), "error: internal error: oops\n"), false),
            Verdict::Failed(Failure::Panic)
        );
        assert_eq!(
            classify(&exit(Status::Code(101), "thread 'main' panicked at a.rs:1:2:\nboom\n"), false),
            Verdict::Failed(Failure::Panic)
        );
        assert_eq!(classify(&exit(Status::Code(2), "usage\n"), false), Verdict::Failed(Failure::UnclearError));
        assert_eq!(classify(&exit(Status::Signal(6), ""), false), Verdict::Failed(Failure::Crash));
        assert_eq!(classify(&exit(Status::TimedOut, ""), false), Verdict::Failed(Failure::Hang));
        assert_eq!(
            classify(&exit(Status::Code(VALGRIND_ERROR_EXIT), "==1== Invalid read of size 4\n"), true),
            Verdict::Failed(Failure::InvalidAccess)
        );
    }

    #[test]
    fn findings_of_one_bug_group_together() {
        let invalid = |address: &str| {
            let stderr = format!("==7== Invalid read of size 16\n==7==    at {address}: ??? (in /tmp/d/lib.so)\n");
            Finding::new(
                Phase::Run,
                Failure::InvalidAccess,
                &exit(Status::Code(VALGRIND_ERROR_EXIT), &stderr),
                60,
                Path::new("/tmp/d"),
            )
        };
        assert_eq!(invalid("0x4E6DDB9").symptom, "Invalid read of size 16 at 0x4E6DDB9: ??? (in lib.so)");
        assert_eq!(invalid("0x4E6DDB9").kind(), invalid("0x4E6D520").kind());
        let panic = |value: &str| {
            let stderr = format!("thread 'main' panicked at src/w.rs:38:16:\nindex {value} out of range\n");
            Finding::new(Phase::Compile, Failure::Panic, &exit(Status::Code(101), &stderr), 60, Path::new("/tmp/d"))
        };
        assert_eq!(panic("7").symptom, "panicked at src/w.rs:38:16: index 7 out of range");
        assert_eq!(panic("7").kind(), panic("99").kind());
    }
}
