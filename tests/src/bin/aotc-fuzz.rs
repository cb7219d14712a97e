//! aotc-fuzz: mutates fixture archives, compiles and runs each mutant with the aotc CLI,
//! and reports every panic, crash, hang or invalid memory access (see `aotc_tests::fuzz`).

use aotc_tests::fuzz::{self, Config, Valgrind};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

const USAGE: &str = "usage: aotc-fuzz --aotc PATH --fixtures DIR[,DIR...] [--mutants N] [--seed S] [--jobs J]
                 [--valgrind none|sample:N|all] [--out DIR] [--time-limit SECS] [--timeout SECS] [--verbose]

  --fixtures   fixture folders (model.pt2 + inputs_N.safetensors) and folders of them; each folder
               of fixtures is a group, the fixtures named directly another; groups are
               picked equally often, and only fixtures that compile unmutated are used
  --mutants    how many mutants to try (default 300)
  --seed       campaign seed; mutant i is the same for the same seed (default 1)
  --jobs       worker threads, each running one aotc at a time (default: the CPU count)
  --valgrind   run compiled mutants under valgrind: none (default), every Nth, or all
  --out        where failing mutants are saved (default fuzz-failures)
  --time-limit stop starting new mutants after this many seconds
  --timeout    seconds before a compile or run counts as a hang (default 60; x5 under valgrind)
  --verbose    print every mutant's mutations and outcome, not only the failures";

fn main() -> ExitCode {
    let config = match parse(std::env::args().skip(1).collect()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("aotc-fuzz: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match fuzz::run(&config) {
        Ok(summary) => {
            println!("{summary}");
            if summary.failed() == 0 {
                return ExitCode::SUCCESS;
            }
            println!("distinct failures:\n{}", summary.kinds_report());
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("aotc-fuzz: {e}");
            ExitCode::from(2)
        }
    }
}

fn parse(args: Vec<String>) -> Result<Config, String> {
    let mut config = Config {
        aotc: PathBuf::new(),
        fixtures: Vec::new(),
        mutants: 300,
        seed: 1,
        jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
        valgrind: Valgrind::Off,
        out: PathBuf::from("fuzz-failures"),
        time_limit: None,
        timeout: Duration::from_secs(60),
        verbose: false,
    };
    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        if flag == "-h" || flag == "--help" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        if flag == "--verbose" {
            config.verbose = true;
            continue;
        }
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = |v: &str| v.parse::<u64>().map_err(|_| format!("{flag} takes a number, not {v:?}"));
        match flag.as_str() {
            "--aotc" => config.aotc = PathBuf::from(value),
            "--fixtures" => config.fixtures.extend(value.split(',').filter(|d| !d.is_empty()).map(PathBuf::from)),
            "--mutants" => config.mutants = number(&value)? as usize,
            "--seed" => config.seed = number(&value)?,
            "--jobs" => config.jobs = number(&value)?.max(1) as usize,
            "--valgrind" => config.valgrind = value.parse()?,
            "--out" => config.out = PathBuf::from(value),
            "--time-limit" => config.time_limit = Some(Duration::from_secs(number(&value)?)),
            "--timeout" => config.timeout = Duration::from_secs(number(&value)?),
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    if config.aotc.as_os_str().is_empty() || config.fixtures.is_empty() {
        return Err("--aotc and --fixtures are required".into());
    }
    Ok(config)
}
