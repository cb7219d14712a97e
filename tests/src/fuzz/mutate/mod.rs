//! Mutators, grouped by what they damage. A mutant gets one to three mutations; they run
//! in stage order so that byte-level damage always comes last, on the finished text or zip.

mod args;
mod bytes;
mod generic;
mod graph;
pub mod inputs;
mod shapes;
mod signature;
mod symbolic;
mod weights;
mod weights_file;

use super::fixture::Fixture;
use super::mutant::{Layout, Mutant};
use super::rng::Rng;

/// Applies one mutation, returning its description, or None where it does not apply
/// (e.g. a weights mutation on a program without weights).
pub type Mutator = fn(&mut Mutant, &mut Rng) -> Option<String>;

/// One of `fields` of a tensor meta (a size, a stride or the storage offset) set to an
/// edge value; the change as "sizes[1]: 4 -> -1".
fn edge_meta_int(meta: &mut serde_json::Value, fields: &[&str], rng: &mut Rng) -> Option<String> {
    let field = *rng.pick(fields);
    let (slot, at) = match meta.get_mut(field)? {
        serde_json::Value::Array(list) if !list.is_empty() => {
            let i = rng.below(list.len());
            (&mut list[i], format!("[{i}]"))
        }
        serde_json::Value::Array(_) => return None,
        other => (other, String::new()),
    };
    let new = serde_json::json!({"as_int": super::interesting::int_json(rng, slot["as_int"].as_i64())});
    let change = format!("{field}{at}: {} -> {}", super::json::short(slot), super::json::short(&new));
    *slot = new;
    Some(change)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    /// model.json as JSON: tensor metadata, nodes, arguments, symbols, signature.
    Program,
    /// Payload configs (tensor_meta, path_name, use_pickle) and payload files.
    Weights,
    /// A `--weights FILE.safetensors` passed to compile.
    WeightsFile,
    /// The caller's inputs for the first call.
    Inputs,
    /// model.json as bytes.
    ProgramText,
    /// The finished .pt2 as bytes.
    ArchiveBytes,
}

const STAGES: &[(usize, Stage)] = &[
    (55, Stage::Program),
    (12, Stage::Weights),
    (6, Stage::WeightsFile),
    (7, Stage::Inputs),
    (10, Stage::ProgramText),
    (10, Stage::ArchiveBytes),
];

fn mutators(stage: Stage) -> Vec<(usize, Mutator)> {
    match stage {
        Stage::Program => [
            graph::MUTATORS,
            args::MUTATORS,
            shapes::MUTATORS,
            symbolic::MUTATORS,
            signature::MUTATORS,
            generic::MUTATORS,
        ]
        .concat(),
        Stage::Weights => weights::MUTATORS.to_vec(),
        Stage::WeightsFile => weights_file::MUTATORS.to_vec(),
        Stage::Inputs => inputs::MUTATORS.to_vec(),
        Stage::ProgramText => vec![(1, bytes::program_text as Mutator)],
        Stage::ArchiveBytes => vec![(1, bytes::archive as Mutator)],
    }
}

/// Mutant number `index` of a campaign: a fixture damaged one to three times.
pub fn build(fixture: &Fixture, rng: &mut Rng) -> Result<Mutant, String> {
    let mut mutant = Mutant::new(fixture)?;
    mutant.layout = match rng.below(10) {
        0..=6 => Layout::ZipStored,
        7 | 8 => Layout::ZipDeflated,
        _ => Layout::Directory,
    };
    let weights: Vec<usize> = STAGES.iter().map(|s| s.0).collect();
    // Mostly one mutation: each extra one is another chance to be refused early and hide the rest.
    let count = 1 + rng.weighted(&[6, 3, 1]);
    let mut stages: Vec<Stage> = (0..count).map(|_| STAGES[rng.weighted(&weights)].1).collect();
    stages.sort();
    for stage in stages {
        apply(&mut mutant, stage, rng);
    }
    if mutant.mutations.is_empty() {
        apply(&mut mutant, Stage::Program, rng);
    }
    Ok(mutant)
}

/// Tries mutators of `stage` until one applies (a few attempts: some need a feature the
/// fixture lacks, such as weights or symbolic sizes).
fn apply(mutant: &mut Mutant, stage: Stage, rng: &mut Rng) {
    let table = mutators(stage);
    let weights: Vec<usize> = table.iter().map(|m| m.0).collect();
    for _ in 0..16 {
        if let Some(description) = table[rng.weighted(&weights)].1(mutant, rng) {
            mutant.mutations.push(format!("{stage:?}: {description}"));
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The model fixtures of the repository.
    fn fixtures() -> Vec<Fixture> {
        let dirs = [crate::fixtures_root()];
        super::super::fixture::discover(&dirs).concat().iter().map(|d| Fixture::load(d).expect("fixture")).collect()
    }

    /// Mutant i is a function of (seed, i) alone, and the mutators survive hundreds of
    /// tries on every fixture (a panicking mutator would stop a campaign).
    #[test]
    fn mutants_are_deterministic_and_always_built() {
        let fixtures = fixtures();
        let campaign = Rng::new(42);
        let dir = tempfile::tempdir().expect("temporary directory");
        for i in 0..300 {
            let fixture = &fixtures[i % fixtures.len()];
            let a = build(fixture, &mut campaign.fork(i as u64)).expect("mutant");
            let b = build(fixture, &mut campaign.fork(i as u64)).expect("mutant");
            assert!(!a.mutations.is_empty(), "mutant {i} has no mutation");
            assert_eq!(a.describe(), b.describe(), "mutant {i}");
            a.write(dir.path()).expect("mutant written");
        }
    }
}
