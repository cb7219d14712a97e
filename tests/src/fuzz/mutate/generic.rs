//! Structure-blind program mutations: any value anywhere is replaced, removed or repeated.
//! They reach the fields no targeted mutator thinks of.

use super::super::interesting;
use super::super::json::{all_pointers, remove_at, short};
use super::super::mutant::Mutant;
use super::super::rng::Rng;
use super::Mutator;
use serde_json::Value;

pub const MUTATORS: &[(usize, Mutator)] = &[(4, replace_value), (2, remove_value), (1, repeat_item)];

fn pick_pointer(program: &Value, rng: &mut Rng, keep: impl Fn(&Value) -> bool) -> Option<String> {
    let mut pointers = Vec::new();
    all_pointers(program, "", &mut pointers);
    // Node metadata (stack traces, module paths) is most of the text and none of the meaning.
    pointers.retain(|p| !p.contains("/metadata/") && program.pointer(p).is_some_and(&keep));
    (!pointers.is_empty()).then(|| rng.pick(&pointers).clone())
}

fn replace_value(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let pointer = pick_pointer(&m.program, rng, |_| true)?;
    let new = interesting::any_value(rng);
    let old = std::mem::replace(m.program.pointer_mut(&pointer)?, new.clone());
    Some(format!("{pointer}: {} -> {}", short(&old), short(&new)))
}

fn remove_value(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let pointer = pick_pointer(&m.program, rng, |_| true)?;
    let old = remove_at(&mut m.program, &pointer)?;
    Some(format!("{pointer}: {} removed", short(&old)))
}

fn repeat_item(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let pointer = pick_pointer(&m.program, rng, |v| v.as_array().is_some_and(|a| !a.is_empty()))?;
    let list = m.program.pointer_mut(&pointer)?.as_array_mut()?;
    let i = rng.below(list.len());
    let copy = list[i].clone();
    list.insert(rng.below(list.len() + 1), copy);
    Some(format!("{pointer}[{i}] repeated"))
}
