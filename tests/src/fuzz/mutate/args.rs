//! Program mutations on node arguments: values, kinds, names.

use super::super::interesting;
use super::super::json::{array_at, node_label, pick_node, short, union_kind, NODES};
use super::super::mutant::Mutant;
use super::super::rng::Rng;
use super::Mutator;
use serde_json::{json, Value};

pub const MUTATORS: &[(usize, Mutator)] =
    &[(8, arg_value), (5, index_arg), (3, arg_kind), (2, arg_remove), (2, arg_rename)];

/// Arguments that index into a tensor's dimensions or memory without changing the
/// recorded output shape, so a bad value gets past the shape check to the lowering.
const INDEX_ARGS: &[&str] = &[
    "dim",
    "dims",
    "dim0",
    "dim1",
    "dim2",
    "index",
    "start",
    "end",
    "step",
    "stride",
    "storage_offset",
    "length",
    "offset",
    "chunks",
    "split_size",
    "padding_idx",
    "diagonal",
    "shifts",
];

const INDEX_VALUES: &[i64] = &[-1, -5, -9, 0, 4, 5, 8, 64, 1000, -1000, 1 << 31, 1 << 62, i64::MIN, i64::MAX];

/// A random argument of a random node: (description label, the `{name, arg, kind}` object).
fn pick_argument<'v>(m: &'v mut Mutant, rng: &mut Rng) -> Option<(String, &'v mut Value)> {
    let (i, node) = pick_node(&mut m.program, rng)?;
    let label = node_label(i, node);
    let inputs = node.get_mut("inputs")?.as_array_mut()?;
    if inputs.is_empty() {
        return None;
    }
    let k = rng.below(inputs.len());
    let name = inputs[k]["name"].as_str().unwrap_or("?").to_string();
    Some((format!("{label} argument '{name}'"), &mut inputs[k]))
}

/// An argument keeps its kind but gets an edge value.
fn arg_value(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let (label, input) = pick_argument(m, rng)?;
    let arg = input.get_mut("arg")?;
    let kind = union_kind(arg)?.to_string();
    let old = arg[&kind].clone();
    let new = match kind.as_str() {
        "as_int" => interesting::int_json(rng, old.as_i64()),
        "as_ints" => {
            let ints: Vec<i64> = old.as_array()?.iter().filter_map(Value::as_i64).collect();
            Value::Array(interesting::int_list(rng, &ints))
        }
        "as_float" => interesting::float_json(rng),
        "as_floats" => json!([interesting::float_json(rng)]),
        "as_bool" => {
            if rng.chance(1, 2) {
                json!(!old.as_bool().unwrap_or(false))
            } else {
                json!(2)
            }
        }
        "as_string" => json!(interesting::string(rng)),
        "as_scalar_type" | "as_layout" | "as_memory_format" => interesting::dtype_code(rng),
        "as_device" => json!({"type": *rng.pick(&["cuda", "meta", "bogus"]), "index": interesting::int(rng, None)}),
        "as_tensors" => {
            let mut list = old.as_array()?.clone();
            match rng.below(3) {
                0 => list.clear(),
                1 if !list.is_empty() => list.push(list[0].clone()),
                _ => list.push(json!({"name": "no_such_tensor"})),
            }
            Value::Array(list)
        }
        "as_sym_int" => {
            if rng.chance(1, 2) {
                json!({"as_name": "no_such_symint"})
            } else {
                json!({"as_int": interesting::int(rng, None)})
            }
        }
        _ => interesting::any_value(rng),
    };
    let description = format!("{label}: {kind} {} -> {}", short(&old), short(&new));
    arg[&kind] = new;
    Some(description)
}

/// A dimension, index, start/end or stride argument goes out of range.
fn index_arg(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let nodes = array_at(&mut m.program, NODES)?;
    let mut candidates = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        for (k, input) in node["inputs"].as_array().into_iter().flatten().enumerate() {
            let is_int = matches!(union_kind(&input["arg"]), Some("as_int" | "as_ints" | "as_sym_int"));
            if is_int && INDEX_ARGS.contains(&input["name"].as_str().unwrap_or("")) {
                candidates.push((i, k));
            }
        }
    }
    if candidates.is_empty() {
        return None;
    }
    let &(i, k) = rng.pick(&candidates);
    let label = node_label(i, &nodes[i]);
    let input = &mut nodes[i]["inputs"][k];
    let name = input["name"].as_str().unwrap_or("?").to_string();
    let old = input["arg"].clone();
    let value = *rng.pick(INDEX_VALUES);
    let new = match union_kind(&old) {
        Some("as_ints") => {
            let mut list = old["as_ints"].as_array()?.clone();
            match list.len() {
                0 => list.push(json!(value)),
                n if rng.chance(1, 2) => list[rng.below(n)] = json!(value),
                n => list[rng.below(n)] = list[0].clone(),
            }
            json!({"as_ints": list})
        }
        _ => json!({"as_int": value}),
    };
    input["arg"] = new.clone();
    Some(format!("{label} argument '{name}': {} -> {}", short(&old), short(&new)))
}

/// An argument changes kind: an int becomes a list, a tensor, a float, none, a string...
fn arg_kind(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let (label, input) = pick_argument(m, rng)?;
    let old = input.get("arg")?.clone();
    let int = old.get("as_int").and_then(Value::as_i64).unwrap_or(2);
    let new = match rng.below(9) {
        0 => json!({"as_int": int}),
        1 => json!({"as_ints": [int, int]}),
        2 => json!({"as_float": int as f64 + 0.5}),
        3 => json!({"as_tensor": {"name": old.get("as_tensor").map_or("x".into(), |t| t["name"].clone())}}),
        4 => json!({"as_tensors": [{"name": "x"}]}),
        5 => json!({"as_none": true}),
        6 => json!({"as_string": int.to_string()}),
        7 => json!({"as_sym_int": {"as_name": "s0"}}),
        _ => json!({"as_bogus_kind": int}),
    };
    input["arg"] = new.clone();
    Some(format!("{label}: {} -> {}", short(&old), short(&new)))
}

fn arg_remove(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let (i, node) = pick_node(&mut m.program, rng)?;
    let label = node_label(i, node);
    let inputs = node.get_mut("inputs")?.as_array_mut()?;
    if inputs.is_empty() {
        return None;
    }
    let removed = inputs.remove(rng.below(inputs.len()));
    Some(format!("{label}: removed argument '{}'", removed["name"].as_str().unwrap_or("?")))
}

/// An argument is renamed: to an unknown name, or to its neighbour's (a duplicate).
fn arg_rename(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let (i, node) = pick_node(&mut m.program, rng)?;
    let label = node_label(i, node);
    let inputs = node.get_mut("inputs")?.as_array_mut()?;
    if inputs.is_empty() {
        return None;
    }
    let k = rng.below(inputs.len());
    let new = match rng.below(3) {
        0 => json!("bogus_argument"),
        1 => inputs[rng.below(inputs.len())]["name"].clone(),
        _ => {
            inputs.push(inputs[k].clone());
            return Some(format!("{label}: argument '{}' given twice", inputs[k]["name"].as_str().unwrap_or("?")));
        }
    };
    let old = std::mem::replace(&mut inputs[k]["name"], new.clone());
    Some(format!("{label}: argument {old} renamed {new}"))
}
