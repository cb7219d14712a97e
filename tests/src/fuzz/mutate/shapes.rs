//! Shape lies told consistently: an op's shape argument (or its source) changes *and*
//! the shape torch.export recorded for its result still matches, so the recorded-shape
//! check passes and only the op's own validation (element counts, split sums, sign,
//! overflow) stands between the lie and an out-of-bounds access.

use super::super::interesting;
use super::super::json::{
    array_at, as_int_list, node_label, object_at, short, sym_ints, NODES, SIGNATURE, TENSOR_VALUES,
};
use super::super::mutant::Mutant;
use super::super::rng::Rng;
use super::{inputs, Mutator};
use serde_json::{json, Value};

pub const MUTATORS: &[(usize, Mutator)] = &[(8, shape_argument), (6, split_sizes), (5, view_source), (5, input_shrink)];

/// (target substring, argument): ops whose result shape is that int-list argument.
const SHAPE_ARGUMENTS: &[(&str, &str)] = &[
    ("aten.view.", "size"),
    ("aten._unsafe_view.", "size"),
    ("aten.reshape.", "shape"),
    ("aten.expand.", "size"),
    ("aten.full.", "size"),
    ("aten.zeros.", "size"),
    ("aten.ones.", "size"),
    ("aten.empty.", "size"),
    ("aten.new_full.", "size"),
    ("aten.new_zeros.", "size"),
    ("aten.new_ones.", "size"),
    ("aten.new_empty.", "size"),
    ("aten.as_strided.", "size"),
    ("aten.empty_strided.", "size"),
];

/// Nodes matching `wanted`, as (node index, argument index).
fn find(nodes: &[Value], wanted: impl Fn(&str, &str) -> bool) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        let target = node["target"].as_str().unwrap_or("");
        for (k, input) in node["inputs"].as_array().into_iter().flatten().enumerate() {
            if input["arg"].get("as_ints").is_some() && wanted(target, input["name"].as_str().unwrap_or("")) {
                found.push((i, k));
            }
        }
    }
    found
}

/// Sets the recorded sizes (and contiguous strides) of tensor `name`.
fn record_sizes(m: &mut Mutant, name: &str, sizes: &[Value]) -> Option<()> {
    let meta = object_at(&mut m.program, TENSOR_VALUES)?.get_mut(name)?;
    let ints: Vec<i64> = sizes.iter().map(|v| v.as_i64().unwrap_or(1)).collect();
    meta["sizes"] = Value::Array(sizes.iter().map(|v| json!({"as_int": v})).collect());
    meta["strides"] = as_int_list(&interesting::contiguous_strides(&ints));
    Some(())
}

/// view/expand/full/...: the size argument changes, and usually the recorded result too.
fn shape_argument(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let nodes = array_at(&mut m.program, NODES)?;
    let found = find(nodes, |target, arg| SHAPE_ARGUMENTS.iter().any(|(t, a)| target.contains(t) && arg == *a));
    if found.is_empty() {
        return None;
    }
    let &(i, k) = rng.pick(&found);
    let label = node_label(i, &nodes[i]);
    let old: Vec<i64> = nodes[i]["inputs"][k]["arg"]["as_ints"].as_array()?.iter().filter_map(Value::as_i64).collect();
    let new = interesting::int_list(rng, &old);
    nodes[i]["inputs"][k]["arg"]["as_ints"] = Value::Array(new.clone());
    let result = nodes[i]["outputs"][0]["as_tensor"]["name"].as_str().map(String::from);
    let recorded = match result {
        Some(name) if rng.chance(3, 4) => record_sizes(m, &name, &new).is_some(),
        _ => false,
    };
    Some(format!(
        "{label}: size {old:?} -> {}{}",
        short(&Value::Array(new)),
        if recorded { ", recorded result shape too" } else { "" }
    ))
}

/// split_with_sizes: the sizes stop summing to the dimension (or still do, through a
/// negative or wrapping part), and each recorded part follows.
fn split_sizes(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let nodes = array_at(&mut m.program, NODES)?;
    let found = find(nodes, |target, arg| target.contains("split") && (arg == "split_sizes" || arg == "split_size"));
    if found.is_empty() {
        return None;
    }
    let &(i, k) = rng.pick(&found);
    let label = node_label(i, &nodes[i]);
    let node = &mut nodes[i];
    let old: Vec<i64> = node["inputs"][k]["arg"]["as_ints"].as_array()?.iter().filter_map(Value::as_i64).collect();
    if old.is_empty() {
        return None;
    }
    let dim = node["inputs"]
        .as_array()?
        .iter()
        .find(|a| a["name"] == "dim")
        .and_then(|a| a["arg"]["as_int"].as_i64())
        .unwrap_or(0);
    let delta = *rng.pick(&[1, 16, 1 << 31, 1 << 62, i64::MAX]);
    let (a, b) = (rng.below(old.len()), rng.below(old.len()));
    let mut new = old.clone();
    new[a] = new[a].wrapping_add(delta);
    let keep_sum = a != b && rng.chance(1, 2);
    if keep_sum {
        new[b] = new[b].wrapping_sub(delta);
    }
    node["inputs"][k]["arg"]["as_ints"] = json!(new);
    let parts: Vec<String> = node["outputs"][0]["as_tensors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(String::from))
        .collect();
    for (part, &size) in parts.iter().zip(&new) {
        let meta = object_at(&mut m.program, TENSOR_VALUES)?.get_mut(part)?;
        let mut sizes = sym_ints(&meta["sizes"]);
        let d = if dim < 0 { dim + sizes.len() as i64 } else { dim };
        if let Some(s) = usize::try_from(d).ok().and_then(|d| sizes.get_mut(d)) {
            *s = size;
        }
        meta["sizes"] = as_int_list(&sizes);
    }
    Some(format!(
        "{label}: split sizes {old:?} -> {new:?}{}, recorded parts follow",
        if keep_sum { " (same sum)" } else { "" }
    ))
}

/// A view-like op reads another, smaller tensor of the same dtype that is defined before
/// it. Its result shape comes from its size argument, so the recorded shape still holds:
/// only an element-count check stops it from reading past the end of the smaller tensor.
fn view_source(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let values = object_at(&mut m.program, TENSOR_VALUES)?.clone();
    let numel = |name: &str| values.get(name).map(|v| sym_ints(&v["sizes"]).iter().product::<i64>());
    let dtype = |name: &str| values.get(name).map(|v| v["dtype"].clone());
    let mut defined: Vec<String> = m.program["graph_module"]["graph"]["inputs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a["as_tensor"]["name"].as_str().map(String::from))
        .collect();
    let nodes = array_at(&mut m.program, NODES)?;
    let mut candidates = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        let target = node["target"].as_str().unwrap_or("");
        let result = node["outputs"][0]["as_tensor"]["name"].as_str().unwrap_or("");
        let source = node["inputs"]
            .as_array()
            .into_iter()
            .flatten()
            .position(|a| a["name"] == "self" && a["arg"].get("as_tensor").is_some());
        if let (Some(k), true) = (source, SHAPE_ARGUMENTS.iter().any(|(t, _)| target.contains(t))) {
            let smaller: Vec<String> =
                defined.iter().filter(|d| dtype(d) == dtype(result) && numel(d) < numel(result)).cloned().collect();
            if !smaller.is_empty() {
                candidates.push((i, k, smaller));
            }
        }
        for output in node["outputs"].as_array().into_iter().flatten() {
            let names = output
                .get("as_tensors")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_else(|| vec![output["as_tensor"].clone()]);
            defined.extend(names.iter().filter_map(|t| t["name"].as_str().map(String::from)));
        }
    }
    if candidates.is_empty() {
        return None;
    }
    let (i, k, smaller) = rng.pick(&candidates);
    let source = rng.pick(smaller).clone();
    let label = node_label(*i, &nodes[*i]);
    let old = std::mem::replace(&mut nodes[*i]["inputs"][*k]["arg"]["as_tensor"]["name"], json!(source));
    Some(format!("{label}: reads {source:?} ({} elements) instead of {old}", numel(&source).unwrap_or(0)))
}

/// A user input shrinks, in the program and in the caller's inputs alike. Ops whose result
/// shape comes from their arguments (views, reshapes) keep their recorded shapes, so only
/// their element-count checks stop them from reading past the end of the smaller input.
fn input_shrink(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let users: Vec<String> = m
        .program
        .pointer(&format!("{SIGNATURE}/input_specs"))?
        .as_array()?
        .iter()
        .filter_map(|s| s["user_input"]["arg"]["as_tensor"]["name"].as_str().map(String::from))
        .collect();
    if users.is_empty() {
        return None;
    }
    let flat = rng.below(users.len());
    let meta = object_at(&mut m.program, TENSOR_VALUES)?.get_mut(&users[flat])?;
    let sizes = meta["sizes"].as_array()?;
    // Static dimensions above 1 only: a dynamic one is the caller's to choose already.
    let dims: Vec<usize> = (0..sizes.len()).filter(|&d| sizes[d]["as_int"].as_i64().is_some_and(|n| n > 1)).collect();
    if dims.is_empty() {
        return None;
    }
    let d = *rng.pick(&dims);
    let mut shape = sym_ints(&meta["sizes"]);
    let old = shape[d];
    shape[d] = *rng.pick(&[1, old / 2, old - 1]);
    meta["sizes"][d] = json!({"as_int": shape[d]});
    meta["strides"] = as_int_list(&interesting::contiguous_strides(&shape));
    let key = flat.to_string();
    let name = users[flat].clone();
    m.edit_first_inputs(|tensors, _| {
        let t = tensors.iter_mut().find(|t| t.name == key)?;
        t.shape = shape.clone();
        inputs::fit_data(t, rng);
        Some(String::new())
    })?;
    Some(format!(
        "user input {name:?} (flat input {flat}) dimension {d}: {old} -> {} in the program and inputs_0",
        shape[d]
    ))
}
