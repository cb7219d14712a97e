//! Program mutations on the graph's structure: recorded tensor metadata, node targets,
//! tensor references, node outputs, node order.

use super::super::interesting;
use super::super::json::{array_at, node_label, object_at, pick_key, pick_node, short, NODES, TENSOR_VALUES};
use super::super::mutant::Mutant;
use super::super::rng::Rng;
use super::Mutator;
use serde_json::{json, Value};

pub const MUTATORS: &[(usize, Mutator)] = &[
    (6, tensor_meta_int),
    (2, tensor_meta_rank),
    (2, tensor_meta_dtype),
    (3, node_target),
    (4, tensor_reference),
    (3, node_outputs),
    (2, node_order),
];

/// Targets other programs use, ops that index memory, and names that are no op at all.
const TARGETS: &[&str] = &[
    "torch.ops.aten.view.default",
    "torch.ops.aten.as_strided.default",
    "torch.ops.aten.split_with_sizes.default",
    "torch.ops.aten.expand.default",
    "torch.ops.aten.full.default",
    "torch.ops.aten.slice.Tensor",
    "torch.ops.aten.select.int",
    "torch.ops.aten.permute.default",
    "torch.ops.aten.addmm.default",
    "torch.ops.aten.bmm.default",
    "torch.ops.aten.mm.default",
    "torch.ops.aten.gather.default",
    "torch.ops.aten.embedding.default",
    "torch.ops.aten.index_select.default",
    "torch.ops.aten.cat.default",
    "torch.ops.aten._softmax.default",
    "torch.ops.aten.native_layer_norm.default",
    "torch.ops.aten.sum.dim_IntList",
    "torch.ops.aten.arange.start_step",
    "torch.ops.aten.unsqueeze.default",
    "torch.ops.aten.where.self",
    "torch.ops.aten.sym_size.int",
    "_operator.add",
    "_operator.floordiv",
    "<built-in function getitem>",
    "torch.ops.aten._assert_tensor_metadata.default",
    "torch.ops.aten.copy_.default",
    "torch.ops.higher_order.cond",
    "torch.ops.aten.bogus.default",
    "torch.ops.aten.view",
    "",
    "view",
];

/// A recorded size, stride or storage offset becomes an edge value.
fn tensor_meta_int(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let values = object_at(&mut m.program, TENSOR_VALUES)?;
    let name = pick_key(rng, values)?;
    let meta = values.get_mut(&name)?;
    let change = super::edge_meta_int(meta, &["sizes", "sizes", "strides", "storage_offset"], rng)?;
    Some(format!("tensor_values[{name}].{change}"))
}

/// A recorded tensor gains or loses a dimension (sizes and strides, or sizes alone).
fn tensor_meta_rank(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let values = object_at(&mut m.program, TENSOR_VALUES)?;
    let name = pick_key(rng, values)?;
    let meta = values.get_mut(&name)?;
    let grow = rng.chance(1, 2);
    let fields: &[&str] = if rng.chance(1, 2) { &["sizes", "strides"] } else { &["sizes"] };
    for field in fields {
        let list = meta.get_mut(*field)?.as_array_mut()?;
        if grow {
            list.push(json!({"as_int": interesting::int(rng, Some(1))}));
        } else {
            list.pop()?;
        }
    }
    Some(format!(
        "tensor_values[{name}]: {} a dimension of {}",
        if grow { "added" } else { "removed" },
        fields.join(" and ")
    ))
}

fn tensor_meta_dtype(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let values = object_at(&mut m.program, TENSOR_VALUES)?;
    let name = pick_key(rng, values)?;
    let new = interesting::dtype_code(rng);
    let old = std::mem::replace(values.get_mut(&name)?.get_mut("dtype")?, new.clone());
    Some(format!("tensor_values[{name}].dtype: {old} -> {new}"))
}

/// A node calls another op (one with other arguments and shape rules) or no op at all.
fn node_target(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let seen: Vec<String> =
        array_at(&mut m.program, NODES)?.iter().filter_map(|n| n["target"].as_str().map(String::from)).collect();
    let new =
        if rng.chance(1, 2) && !seen.is_empty() { rng.pick(&seen).clone() } else { rng.pick(TARGETS).to_string() };
    let (i, node) = pick_node(&mut m.program, rng)?;
    let label = node_label(i, node);
    node["target"] = json!(new);
    Some(format!("{label}: target -> {new:?}"))
}

/// All tensor names a node reads, as (input index, position in an as_tensors list).
fn tensor_arguments(node: &Value) -> Vec<(usize, Option<usize>)> {
    let mut found = Vec::new();
    for (i, input) in node["inputs"].as_array().into_iter().flatten().enumerate() {
        if input["arg"].get("as_tensor").is_some() {
            found.push((i, None));
        }
        for (k, _) in input["arg"]["as_tensors"].as_array().into_iter().flatten().enumerate() {
            found.push((i, Some(k)));
        }
    }
    found
}

/// A node reads a tensor that is undefined, defined later, its own output, or of another shape.
fn tensor_reference(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let known: Vec<String> = object_at(&mut m.program, TENSOR_VALUES)?.keys().cloned().collect();
    let nodes = array_at(&mut m.program, NODES)?;
    let i = rng.below(nodes.len().max(1));
    let later: Vec<String> =
        nodes.iter().skip(i).filter_map(|n| n["outputs"][0]["as_tensor"]["name"].as_str().map(String::from)).collect();
    let node = nodes.get_mut(i)?;
    let refs = tensor_arguments(node);
    if refs.is_empty() {
        return None;
    }
    let &(input, position) = rng.pick(&refs);
    let new = match rng.below(3) {
        0 => "no_such_tensor".to_string(),
        1 if !later.is_empty() => rng.pick(&later).clone(),
        _ => rng.pick(&known).clone(),
    };
    let label = node_label(i, node);
    let arg = &mut node["inputs"][input]["arg"];
    let slot = match position {
        None => &mut arg["as_tensor"],
        Some(k) => &mut arg["as_tensors"][k],
    };
    let old = std::mem::replace(slot, json!({"name": new}));
    Some(format!("{label}: input {input} reads {new:?} instead of {}", short(&old)))
}

/// A node's outputs are renamed (to a fresh name or one already defined), dropped,
/// duplicated, or given another kind.
fn node_outputs(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let known: Vec<String> = object_at(&mut m.program, TENSOR_VALUES)?.keys().cloned().collect();
    let (i, node) = pick_node(&mut m.program, rng)?;
    let label = node_label(i, node);
    let outputs = node.get_mut("outputs")?.as_array_mut()?;
    let old = short(&Value::Array(outputs.clone()));
    match rng.below(5) {
        0 => outputs.clear(),
        1 if !outputs.is_empty() => outputs.push(outputs[0].clone()),
        2 => *outputs = vec![json!({"as_tensor": {"name": rng.pick(&known)}})],
        3 => *outputs = vec![json!({"as_tensor": {"name": "fuzz_fresh_name"}})],
        _ => {
            *outputs = vec![
                json!({"as_tensors": [{"name": rng.pick(&known)}, {"name": "fuzz_fresh_name"}]}),
                json!({"as_none": true}),
            ]
        }
    }
    Some(format!("{label}: outputs {old} -> {}", short(&Value::Array(outputs.clone()))))
}

/// A node is deleted, duplicated, or swapped with another (uses before definitions).
fn node_order(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let nodes = array_at(&mut m.program, NODES)?;
    if nodes.is_empty() {
        return None;
    }
    let (a, b) = (rng.below(nodes.len()), rng.below(nodes.len()));
    let label = node_label(a, &nodes[a]);
    Some(match rng.below(3) {
        0 => {
            nodes.remove(a);
            format!("{label}: deleted")
        }
        1 => {
            let copy = nodes[a].clone();
            nodes.insert(b, copy);
            format!("{label}: duplicated at {b}")
        }
        _ => {
            nodes.swap(a, b);
            format!("{label}: swapped with node {b}")
        }
    })
}
