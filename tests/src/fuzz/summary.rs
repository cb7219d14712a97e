//! Counting a campaign's outcomes and printing its one-line summary.

use super::outcome::{Failure, Finding, Verdict};
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

/// What happened to one mutant.
pub struct Record {
    /// "fixture: mutation; mutation" on one line.
    pub mutant: String,
    /// The first stderr line of the last step (compile, or run if it compiled).
    pub said: String,
    pub compile: Verdict,
    /// None when it did not compile.
    pub run: Option<Verdict>,
    pub valgrind: bool,
    pub finding: Option<Finding>,
    /// Where the failing mutant was saved.
    pub saved: Option<PathBuf>,
}

/// One kind of failure: how often it was seen, and the first mutant saved for it.
pub struct Kind {
    pub count: usize,
    pub example: Option<PathBuf>,
    pub symptom: String,
}

#[derive(Default)]
pub struct Summary {
    pub tried: usize,
    pub refused: usize,
    pub compiled: usize,
    pub ran_clean: usize,
    pub refused_at_run: usize,
    pub failed_at_run: usize,
    pub valgrind_checked: usize,
    pub failures: BTreeMap<Failure, usize>,
    /// Findings grouped by `Finding::kind`.
    pub kinds: BTreeMap<String, Kind>,
}

impl Summary {
    pub fn record(&mut self, r: &Record) {
        self.tried += 1;
        match r.compile {
            Verdict::Accepted => self.compiled += 1,
            Verdict::Refused => self.refused += 1,
            Verdict::Failed(_) => {}
        }
        match r.run {
            Some(Verdict::Accepted) => self.ran_clean += 1,
            Some(Verdict::Refused) => self.refused_at_run += 1,
            Some(Verdict::Failed(_)) => self.failed_at_run += 1,
            None => {}
        }
        self.valgrind_checked += usize::from(r.valgrind);
        if let Some(f) = &r.finding {
            *self.failures.entry(f.failure).or_default() += 1;
            let kind = self.kinds.entry(f.kind()).or_insert_with(|| Kind {
                count: 0,
                example: r.saved.clone(),
                symptom: f.to_string(),
            });
            kind.count += 1;
        }
    }

    pub fn failed(&self) -> usize {
        self.failures.values().sum()
    }

    fn count(&self, failure: Failure) -> usize {
        self.failures.get(&failure).copied().unwrap_or(0)
    }

    /// The distinct failure kinds, most frequent first, with an example each.
    pub fn kinds_report(&self) -> String {
        let mut kinds: Vec<&Kind> = self.kinds.values().collect();
        kinds.sort_by_key(|k| std::cmp::Reverse(k.count));
        kinds
            .iter()
            .map(|k| {
                let example = k.example.as_ref().map(|p| format!("\n    e.g. {}", p.display())).unwrap_or_default();
                format!("  {} x {}{example}\n", k.count, k.symptom)
            })
            .collect()
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let run_failed =
            if self.failed_at_run > 0 { format!(", {} failed", self.failed_at_run) } else { String::new() };
        write!(f, "fuzz: {} tried, {} refused with a clear error, {} compiled ({} ran clean, {} refused at run time{run_failed}), valgrind-checked {}; ",
            self.tried, self.refused, self.compiled, self.ran_clean, self.refused_at_run, self.valgrind_checked)?;
        write!(
            f,
            "{} panics, {} crashes, {} hangs, {} invalid memory accesses",
            self.count(Failure::Panic),
            self.count(Failure::Crash),
            self.count(Failure::Hang),
            self.count(Failure::InvalidAccess)
        )?;
        match self.count(Failure::UnclearError) {
            0 => Ok(()),
            n => write!(f, ", {n} exits without a clear error"),
        }
    }
}
