//! A structure-aware fuzzer for the aotc CLI: it damages the fixture archives (the
//! program JSON, the weights configs and payloads, a `--weights` file, the caller's
//! inputs, and the raw bytes), compiles and runs each mutant in a subprocess, and flags
//! anything but success or a clean "error: ..." refusal: panics, crashes, hangs, and
//! (under valgrind) invalid memory accesses.
//!
//! Driven by `aotc-fuzz` (tests/src/bin), `tests/tests/fuzz.rs` (a bounded CI campaign)
//! and `scripts/fuzz.sh` (the long campaign).

mod archive;
mod baseline;
pub mod campaign;
mod commands;
mod exec;
mod fixture;
mod interesting;
mod json;
mod mutant;
mod mutate;
pub mod outcome;
mod rng;
mod safetensors_file;
mod save;
pub mod summary;

pub use campaign::{run, Config, Valgrind};
pub use summary::Summary;
