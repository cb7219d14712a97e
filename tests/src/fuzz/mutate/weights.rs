//! Weights and constants: their configs (tensor_meta, path_name, use_pickle) and the raw
//! payload files those configs describe.

use super::super::interesting;
use super::super::json::{as_int_list, object_at, pick_key, sym_ints, SIGNATURE, TENSOR_VALUES};
use super::super::mutant::Mutant;
use super::super::rng::Rng;
use super::Mutator;
use serde_json::{json, Map, Value};

pub const MUTATORS: &[(usize, Mutator)] = &[
    (5, meta_int),
    (2, meta_rank),
    (5, meta_consistent),
    (4, strides),
    (2, meta_dtype),
    (3, path_name),
    (2, entry_fields),
    (4, payload_size),
    (1, payload_missing),
];

/// A random (group, FQN) of the weights or constants config, with that entry's object.
fn pick_entry<'m>(m: &'m mut Mutant, rng: &mut Rng) -> Option<(&'static str, String, &'m mut Map<String, Value>)> {
    let use_weights = |m: &Mutant| m.weights_config.as_ref().is_some_and(has_entries);
    let use_constants = |m: &Mutant| m.constants_config.as_ref().is_some_and(has_entries);
    let (group, config) = if use_weights(m) && (rng.chance(4, 5) || !use_constants(m)) {
        ("weights", m.weights_config.as_mut()?)
    } else if use_constants(m) {
        ("constants", m.constants_config.as_mut()?)
    } else {
        return None;
    };
    let entries = config.get_mut("config")?.as_object_mut()?;
    let fqn = pick_key(rng, entries)?;
    let entry = entries.get_mut(&fqn)?.as_object_mut()?;
    Some((group, fqn, entry))
}

fn has_entries(config: &Value) -> bool {
    config["config"].as_object().is_some_and(|m| !m.is_empty())
}

fn meta_int(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let (group, fqn, entry) = pick_entry(m, rng)?;
    let meta = entry.get_mut("tensor_meta")?;
    let change = super::edge_meta_int(meta, &["sizes", "strides", "storage_offset"], rng)?;
    Some(format!("{group}[{fqn}].tensor_meta.{change}"))
}

fn meta_rank(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let (group, fqn, entry) = pick_entry(m, rng)?;
    let meta = entry.get_mut("tensor_meta")?;
    let field = *rng.pick(&["sizes", "strides"]);
    let list = meta.get_mut(field)?.as_array_mut()?;
    let grow = list.is_empty() || rng.chance(1, 2);
    if grow {
        list.push(json!({"as_int": interesting::int(rng, Some(2))}));
    } else {
        list.pop();
    }
    Some(format!("{group}[{fqn}].tensor_meta.{field}: {} a dimension", if grow { "added" } else { "removed" }))
}

/// The graph placeholder bound to weight `fqn` (through the signature's input specs).
fn placeholder(program: &Value, fqn: &str) -> Option<String> {
    program.pointer(&format!("{SIGNATURE}/input_specs"))?.as_array()?.iter().find_map(|spec| {
        let body = spec.as_object()?.values().next()?;
        let named = ["parameter_name", "buffer_name", "tensor_constant_name"].iter().any(|k| body[*k] == fqn);
        named.then(|| body["arg"]["name"].as_str().map(String::from)).flatten()
    })
}

/// A weight claims a bigger (or negative, or overflowing) shape in its config and in the
/// program, with contiguous strides: only the payload size check stands in the way.
fn meta_consistent(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let (group, fqn, entry) = pick_entry(m, rng)?;
    let meta = entry.get_mut("tensor_meta")?;
    let mut sizes = sym_ints(&meta["sizes"]);
    if sizes.is_empty() {
        sizes.push(1);
    }
    let at = rng.below(sizes.len());
    sizes[at] = match rng.below(5) {
        0 => sizes[at] + 1,
        1 => sizes[at] * 2,
        2 => sizes[at].wrapping_mul(1 << 31),
        3 => -sizes[at],
        _ => i64::MAX / 2,
    };
    let strides = interesting::contiguous_strides(&sizes);
    meta["sizes"] = as_int_list(&sizes);
    meta["strides"] = as_int_list(&strides);
    let name = placeholder(&m.program, &fqn);
    if let Some(recorded) = name.as_ref().and_then(|n| object_at(&mut m.program, TENSOR_VALUES)?.get_mut(n)) {
        recorded["sizes"] = as_int_list(&sizes);
        recorded["strides"] = as_int_list(&strides);
    }
    Some(format!(
        "{group}[{fqn}] sizes -> {sizes:?} in its tensor_meta{}",
        if name.is_some() { " and the program" } else { "" }
    ))
}

/// Strides (and offset) that overflow, go negative, or overlap, keeping the sizes.
fn strides(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let (group, fqn, entry) = pick_entry(m, rng)?;
    let meta = entry.get_mut("tensor_meta")?;
    let sizes = sym_ints(&meta["sizes"]);
    if sizes.is_empty() {
        return None;
    }
    let mut strides = sym_ints(&meta["strides"]);
    strides.resize(sizes.len(), 1);
    let at = rng.below(strides.len());
    let mut offset = 0;
    match rng.below(5) {
        0 => strides[at] = *rng.pick(&[1 << 31, 1 << 62, i64::MAX, i64::MAX / 2 + 1]),
        1 => strides[at] = -1,
        2 => {
            // A reversed view that is in bounds only with the offset at the end.
            strides[at] = -strides[at].max(1);
            offset = (sizes[at] - 1) * strides[at].abs() * i64::from(rng.chance(1, 2));
        }
        3 => strides.iter_mut().for_each(|s| *s = 0),
        _ => strides[at] = strides[at].wrapping_mul(*rng.pick(&[2, 1000])),
    }
    meta["strides"] = as_int_list(&strides);
    meta["storage_offset"] = json!({"as_int": offset});
    Some(format!("{group}[{fqn}].tensor_meta: sizes {sizes:?} strides -> {strides:?} offset {offset}"))
}

fn meta_dtype(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let (group, fqn, entry) = pick_entry(m, rng)?;
    let new = interesting::dtype_code(rng);
    let old = std::mem::replace(entry.get_mut("tensor_meta")?.get_mut("dtype")?, new.clone());
    Some(format!("{group}[{fqn}].tensor_meta.dtype: {old} -> {new}"))
}

/// path_name names another payload, a missing one, or a path that climbs out of the archive.
fn path_name(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let payloads: Vec<String> = m.entries.iter().filter_map(|e| e.name.rsplit('/').next().map(String::from)).collect();
    let (group, fqn, entry) = pick_entry(m, rng)?;
    let new = match rng.below(6) {
        0 => json!(rng.pick(&payloads)),
        1 => json!("no_such_payload"),
        2 => json!(""),
        3 => json!("../../models/model.json"),
        4 => json!("/etc/passwd"),
        _ => json!(*rng.pick(&["model_weights_config.json", ".", "..", "weight_0/"])),
    };
    let old = std::mem::replace(entry.get_mut("path_name")?, new.clone());
    Some(format!("{group}[{fqn}].path_name: {old} -> {new}"))
}

/// use_pickle turns on, tensor_meta goes missing or null, or the entry disappears.
fn entry_fields(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let (group, fqn, entry) = pick_entry(m, rng)?;
    Some(match rng.below(4) {
        0 => {
            entry.insert("use_pickle".into(), json!(true));
            format!("{group}[{fqn}].use_pickle = true")
        }
        1 => {
            entry.remove("tensor_meta");
            format!("{group}[{fqn}].tensor_meta removed")
        }
        2 => {
            entry.insert("tensor_meta".into(), Value::Null);
            format!("{group}[{fqn}].tensor_meta = null")
        }
        _ => {
            entry.clear();
            format!("{group}[{fqn}] emptied")
        }
    })
}

/// The payload file of a random entry, as its archive-relative name.
fn payload_of(m: &mut Mutant, rng: &mut Rng) -> Option<(String, String)> {
    let (group, fqn, entry) = pick_entry(m, rng)?;
    let rel = format!("data/{group}/{}", entry.get("path_name")?.as_str()?);
    Some((fqn, rel))
}

/// A payload file shrinks or grows.
fn payload_size(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let (fqn, rel) = payload_of(m, rng)?;
    let extra = rng.bytes(4096);
    let payload = m.entry_mut(&rel)?;
    let old = payload.len();
    match rng.below(6) {
        0 => payload.clear(),
        1 => payload.truncate(1),
        2 => payload.truncate(old / 2),
        3 => payload.truncate(old.saturating_sub(1)),
        4 => payload.push(0),
        _ => payload.extend_from_slice(&extra),
    }
    Some(format!("payload {rel} of {fqn}: {old} -> {} bytes", payload.len()))
}

fn payload_missing(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let (fqn, rel) = payload_of(m, rng)?;
    let name = format!("{}{rel}", m.fixture.root);
    let before = m.entries.len();
    m.entries.retain(|e| e.name != name);
    (m.entries.len() < before).then(|| format!("payload {rel} of {fqn} removed from the archive"))
}
