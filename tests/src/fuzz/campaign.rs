//! A campaign: N mutants built from a seed, compiled and run by J worker threads, each
//! failure saved with everything needed to reproduce it.

use super::exec::{self, Exit, Limits};
use super::fixture::{discover, Fixture};
use super::outcome::{classify, Finding, Phase, Verdict};
use super::rng::Rng;
use super::summary::{Record, Summary};
use super::{baseline, commands, mutate, save};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Which compiled mutants also run under valgrind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Valgrind {
    Off,
    /// Compiled mutants whose index is a multiple of N: a fixed choice, so a campaign
    /// with the same seed checks the same mutants whatever the thread timing.
    Sample(usize),
    All,
}

impl FromStr for Valgrind {
    type Err = String;
    fn from_str(s: &str) -> Result<Valgrind, String> {
        match s {
            "none" => Ok(Valgrind::Off),
            "all" => Ok(Valgrind::All),
            _ => s
                .strip_prefix("sample:")
                .and_then(|n| n.parse().ok())
                .filter(|&n| n > 0)
                .map(Valgrind::Sample)
                .ok_or_else(|| format!("--valgrind takes none, all or sample:N, not {s:?}")),
        }
    }
}

impl Valgrind {
    fn checks(self, index: usize) -> bool {
        match self {
            Valgrind::Off => false,
            Valgrind::Sample(n) => index.is_multiple_of(n),
            Valgrind::All => true,
        }
    }
}

pub struct Config {
    pub aotc: PathBuf,
    /// Fixture folders, or folders of fixture folders.
    pub fixtures: Vec<PathBuf>,
    pub mutants: usize,
    pub seed: u64,
    pub jobs: usize,
    pub valgrind: Valgrind,
    /// Failing mutants are saved here.
    pub out: PathBuf,
    /// Stop starting new mutants after this long.
    pub time_limit: Option<Duration>,
    /// Per command; runs under valgrind get five times as long.
    pub timeout: Duration,
    /// Print every mutant's outcome, not only failures.
    pub verbose: bool,
}

/// Generous for these fixtures, small enough that a mutant asking for terabytes fails fast.
const MEMORY_KIB: u64 = 4 << 20;

struct Campaign<'c> {
    config: &'c Config,
    aotc: PathBuf,
    groups: Vec<Vec<Fixture>>,
    next: AtomicUsize,
    start: Instant,
    summary: Mutex<Summary>,
}

pub fn run(config: &Config) -> Result<Summary, String> {
    let aotc = config.aotc.canonicalize().map_err(|e| format!("aotc binary {}: {e}", config.aotc.display()))?;
    if config.valgrind != Valgrind::Off && std::process::Command::new("valgrind").arg("--version").output().is_err() {
        return Err("valgrind is not installed (use --valgrind none, or scripts/setup.sh)".into());
    }
    let loaded: Vec<Vec<Fixture>> = discover(&config.fixtures)
        .iter()
        .map(|group| {
            group
                .iter()
                .filter_map(|dir| Fixture::load(dir).map_err(|e| eprintln!("fuzz: skipping fixture: {e}")).ok())
                .collect()
        })
        .collect();
    let found: usize = loaded.iter().map(Vec::len).sum();
    let limits = Limits { timeout: config.timeout, memory_kib: MEMORY_KIB };
    let groups = baseline::compiling(&aotc, loaded, config.jobs, limits);
    let fixtures: usize = groups.iter().map(Vec::len).sum();
    if fixtures == 0 {
        return Err(format!(
            "no fixture that compiles unmutated (folders with model.pt2 and inputs_0.safetensors) in {:?}",
            config.fixtures
        ));
    }
    std::fs::create_dir_all(&config.out).map_err(|e| format!("{}: {e}", config.out.display()))?;
    println!("fuzz: {} mutants of the {fixtures} fixtures (of {found}) that compile unmutated, seed {}, {} jobs, valgrind {:?}, failures saved in {}",
        config.mutants, config.seed, config.jobs, config.valgrind, config.out.display());
    let campaign = Campaign {
        config,
        aotc,
        groups,
        next: AtomicUsize::new(0),
        start: Instant::now(),
        summary: Mutex::new(Summary::default()),
    };
    std::thread::scope(|s| {
        for _ in 0..config.jobs.max(1) {
            s.spawn(|| campaign.work());
        }
    });
    let summary = campaign.summary.into_inner().expect("no worker panicked holding the summary");
    println!("fuzz: done in {:.0} s", campaign.start.elapsed().as_secs_f64());
    Ok(summary)
}

impl Campaign<'_> {
    fn work(&self) {
        loop {
            let index = self.next.fetch_add(1, Ordering::Relaxed);
            let out_of_time = self.config.time_limit.is_some_and(|t| self.start.elapsed() >= t);
            if index >= self.config.mutants || out_of_time {
                return;
            }
            match self.fuzz_one(index) {
                Ok(record) => self.report(index, &record),
                Err(e) => eprintln!("fuzz: mutant {index}: could not set up: {e}"),
            }
        }
    }

    fn report(&self, index: usize, record: &Record) {
        let mut summary = self.summary.lock().expect("summary lock");
        summary.record(record);
        if self.config.verbose {
            println!(
                "fuzz: mutant {index}: {}\n      compile {:?}, run {:?}: {}",
                record.mutant, record.compile, record.run, record.said
            );
        }
        if let Some(finding) = &record.finding {
            println!(
                "fuzz: mutant {index}: {finding}\n      saved in {}",
                record.saved.as_deref().unwrap_or(Path::new("?")).display()
            );
        }
        if summary.tried.is_multiple_of(25) {
            println!(
                "fuzz: {}/{} tried, {} failures, {:.0} s",
                summary.tried,
                self.config.mutants,
                summary.failed(),
                self.start.elapsed().as_secs_f64()
            );
        }
    }

    /// Builds, writes, compiles and (if it compiled) runs mutant `index`.
    fn fuzz_one(&self, index: usize) -> Result<Record, String> {
        let mut rng = Rng::new(self.config.seed).fork(index as u64);
        let group = rng.pick(&self.groups);
        let mutant = mutate::build(rng.pick(group), &mut rng)?;
        let dir = tempfile::Builder::new().prefix("aotc-fuzz-").tempdir().map_err(|e| e.to_string())?;
        let files = mutant.write(dir.path()).map_err(|e| format!("writing the mutant: {e}"))?;
        let limits = Limits { timeout: self.config.timeout, memory_kib: MEMORY_KIB };

        let compile = commands::compile(&self.aotc, &files.model, files.weights.as_deref());
        let exit = self.exec(&compile, dir.path(), "compile", limits)?;
        let mut record = Record {
            mutant: format!("{}: {}", mutant.fixture.name(), mutant.mutations.join("; ")),
            said: first_line(&exit),
            compile: classify(&exit, false),
            run: None,
            valgrind: false,
            finding: None,
            saved: None,
        };
        let mut reproduce = vec![commands::line(&compile)];
        let (phase, verdict, exit, limits) = if record.compile == Verdict::Accepted {
            record.valgrind = self.config.valgrind.checks(index);
            let run = commands::run(&self.aotc, &files.inputs, record.valgrind);
            reproduce.push(commands::line(&run));
            let limits = Limits { timeout: limits.timeout * if record.valgrind { 5 } else { 1 }, ..limits };
            let exit = self.exec(&run, dir.path(), "run", limits)?;
            let verdict = classify(&exit, record.valgrind);
            record.run = Some(verdict);
            record.said = first_line(&exit);
            (Phase::Run, verdict, exit, limits)
        } else {
            (Phase::Compile, record.compile, exit, limits)
        };
        if let Verdict::Failed(failure) = verdict {
            let finding = Finding::new(phase, failure, &exit, limits.timeout.as_secs(), dir.path());
            let saved = self.config.out.join(save::folder_name(index, &mutant, &finding));
            let note = save::note(index, self.config.seed, &mutant, &finding, &reproduce);
            save::failure(dir.path(), &saved, &note, &exit.stderr).map_err(|e| format!("saving the failure: {e}"))?;
            record.saved = Some(saved);
            record.finding = Some(finding);
        }
        Ok(record)
    }

    fn exec(&self, argv: &[OsString], dir: &Path, step: &str, limits: Limits) -> Result<Exit, String> {
        exec::run(argv, dir, &dir.join(format!("{step}.stderr")), limits).map_err(|e| format!("running {step}: {e}"))
    }
}

fn first_line(exit: &Exit) -> String {
    exit.stderr.lines().next().unwrap_or("").chars().take(200).collect()
}
