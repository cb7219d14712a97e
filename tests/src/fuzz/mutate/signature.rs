//! Program mutations on the calling convention: signature specs, the graph's input and
//! output lists, the pytree call specs, the schema version.

use super::super::interesting;
use super::super::json::{array_at, short, SIGNATURE};
use super::super::mutant::Mutant;
use super::super::rng::Rng;
use super::Mutator;
use serde_json::{json, Value};

pub const MUTATORS: &[(usize, Mutator)] =
    &[(3, spec_kind), (3, spec_name), (2, spec_list), (3, graph_inputs_outputs), (3, call_spec), (1, schema_version)];

/// "input_specs" or "output_specs", with a random spec index.
fn pick_spec<'v>(m: &'v mut Mutant, rng: &mut Rng) -> Option<(String, &'v mut Vec<Value>, usize)> {
    let list = *rng.pick(&["input_specs", "output_specs"]);
    let specs = array_at(&mut m.program, &format!("{SIGNATURE}/{list}"))?;
    if specs.is_empty() {
        return None;
    }
    let i = rng.below(specs.len());
    Some((list.to_string(), specs, i))
}

/// The tensor name a spec refers to, wherever its kind keeps it.
fn spec_tensor_name(spec: &Value) -> String {
    let body = spec.as_object().and_then(|m| m.values().next()).cloned().unwrap_or_default();
    body["arg"]["name"].as_str().or(body["arg"]["as_tensor"]["name"].as_str()).unwrap_or("x").to_string()
}

/// A spec changes kind: a parameter becomes a buffer or a user input, an output a mutation...
fn spec_kind(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let (list, specs, i) = pick_spec(m, rng)?;
    let name = spec_tensor_name(&specs[i]);
    let new = if list == "input_specs" {
        match rng.below(8) {
            0 => json!({"parameter": {"arg": {"name": name}, "parameter_name": "fuzz.weight"}}),
            1 => {
                json!({"buffer": {"arg": {"name": name}, "buffer_name": "fuzz.buffer", "persistent": rng.chance(1, 2)}})
            }
            2 => json!({"tensor_constant": {"arg": {"name": name}, "tensor_constant_name": "fuzz_constant"}}),
            3 => json!({"user_input": {"arg": {"as_tensor": {"name": name}}}}),
            4 => json!({"user_input": {"arg": {"as_int": interesting::int(rng, None)}}}),
            5 => json!({"constant_input": {"name": name, "value": interesting::any_value(rng)}}),
            6 => json!({"custom_obj": {"arg": {"name": name, "class_fqn": "__torch__.Fuzz"}}}),
            _ => json!({"token": {"arg": {"name": name}}}),
        }
    } else {
        match rng.below(7) {
            0 => json!({"user_output": {"arg": {"as_tensor": {"name": name}}}}),
            1 => json!({"user_output": {"arg": {"as_int": interesting::int(rng, None)}}}),
            2 => json!({"buffer_mutation": {"arg": {"name": name}, "buffer_name": "fuzz.buffer"}}),
            3 => json!({"user_input_mutation": {"arg": {"name": name}, "user_input_name": name}}),
            4 => json!({"loss_output": {"arg": {"name": name}}}),
            5 => json!({"gradient_to_parameter": {"arg": {"name": name}, "parameter_name": "fuzz.weight"}}),
            _ => json!({"bogus_spec": {"arg": {"name": name}}}),
        }
    };
    let old = std::mem::replace(&mut specs[i], new.clone());
    Some(format!("{list}[{i}]: {} -> {}", short(&old), short(&new)))
}

/// A name inside a spec (the tensor it binds, the weight or buffer or input it names)
/// points at nothing, or at another spec's name.
fn spec_name(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let (list, specs, i) = pick_spec(m, rng)?;
    let other = spec_tensor_name(&specs[rng.below(specs.len())]);
    let new = match rng.below(3) {
        0 => json!("no_such_name"),
        1 => json!(other),
        _ => json!(interesting::string(rng)),
    };
    let body = specs[i].as_object_mut()?.values_mut().next()?.as_object_mut()?;
    let fields: Vec<String> = body.keys().filter(|k| k.ends_with("_name") || *k == "arg").cloned().collect();
    if fields.is_empty() {
        return None;
    }
    let field = rng.pick(&fields).clone();
    let slot = body.get_mut(&field)?;
    let slot = if slot.get("name").is_some() {
        &mut slot["name"]
    } else if slot.get("as_tensor").is_some() {
        &mut slot["as_tensor"]["name"]
    } else {
        slot
    };
    let old = std::mem::replace(slot, new.clone());
    Some(format!("{list}[{i}].{field}: {} -> {}", short(&old), short(&new)))
}

/// A spec is duplicated (e.g. one buffer mutated twice), removed, or moved.
fn spec_list(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let (list, specs, i) = pick_spec(m, rng)?;
    let j = rng.below(specs.len());
    Some(match rng.below(3) {
        0 => {
            let copy = specs[i].clone();
            specs.insert(j, copy);
            format!("{list}[{i}] duplicated at {j}")
        }
        1 => {
            specs.remove(i);
            format!("{list}[{i}] removed")
        }
        _ => {
            specs.swap(i, j);
            format!("{list}[{i}] swapped with [{j}]")
        }
    })
}

/// The graph's own input or output list loses, repeats, renames or retypes an entry.
fn graph_inputs_outputs(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let which = *rng.pick(&["inputs", "outputs"]);
    let list = array_at(&mut m.program, &format!("/graph_module/graph/{which}"))?;
    if list.is_empty() {
        return None;
    }
    let i = rng.below(list.len());
    let old = short(&list[i]);
    Some(match rng.below(5) {
        0 => {
            list.remove(i);
            format!("graph.{which}[{i}] {old} removed")
        }
        1 => {
            let copy = list[i].clone();
            list.push(copy);
            format!("graph.{which}[{i}] {old} repeated at the end")
        }
        2 => {
            list[i] = json!({"as_tensor": {"name": "no_such_tensor"}});
            format!("graph.{which}[{i}] {old} -> undefined tensor")
        }
        3 => {
            list[i] = json!({"as_int": interesting::int(rng, None)});
            format!("graph.{which}[{i}] {old} -> {}", short(&list[i]))
        }
        _ => {
            list[i] = json!({"as_none": true});
            format!("graph.{which}[{i}] {old} -> none")
        }
    })
}

/// A pytree spec string of a tuple nested `depth` deep around one leaf.
fn nested_spec(depth: usize) -> String {
    let open = r#"{"type": "builtins.tuple", "context": "null", "children_spec": ["#;
    let leaf = r#"{"type": null, "context": null, "children_spec": []}"#;
    format!("[1, {}{leaf}{}]", open.repeat(depth), "]}".repeat(depth))
}

/// in_spec/out_spec become garbage, deeply nested, or plausible with the wrong leaf count.
fn call_spec(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let which = *rng.pick(&["in_spec", "out_spec"]);
    let pointer = format!("/graph_module/module_call_graph/0/signature/{which}");
    let slot = m.program.pointer_mut(&pointer)?;
    let (new, label) = match rng.below(8) {
        0 => {
            let depth = *rng.pick(&[200, 5_000, 100_000]);
            (nested_spec(depth), format!("a tuple nested {depth} deep"))
        }
        1 => {
            let depth = *rng.pick(&[5_000, 100_000]);
            ("[".repeat(depth), format!("{depth} unclosed brackets"))
        }
        2 => (nested_spec(0).replace("builtins.tuple", "collections.defaultdict"), "an unknown container type".into()),
        3 => (r#"[1, {"type": "builtins.dict", "context": "[\"a\"", "children_spec": [{"type": null, "context": null, "children_spec": []}]}]"#.into(), "a dict whose context is not JSON".into()),
        4 => (r#"[1, {"type": "builtins.dict", "context": "[\"a\", \"b\", \"c\"]", "children_spec": [{"type": null, "context": null, "children_spec": []}]}]"#.into(), "a dict with more keys than children".into()),
        5 => (r#"[1, {"type": "builtins.tuple", "context": "null", "children_spec": []}]"#.into(), "no leaves".into()),
        6 => (format!("[{}, null]", interesting::int(rng, None)), "an unknown protocol version".into()),
        _ => {
            let text = interesting::string(rng);
            let label = format!("{:?}", text.chars().take(20).collect::<String>());
            (text, label)
        }
    };
    *slot = json!(new);
    Some(format!("module_call_graph[0].{which} = {label}"))
}

fn schema_version(m: &mut Mutant, rng: &mut Rng) -> Option<String> {
    let version = m.program.get_mut("schema_version")?;
    let field = *rng.pick(&["major", "minor"]);
    let new = interesting::int_json(rng, version[field].as_i64());
    version[field] = new.clone();
    Some(format!("schema_version.{field} = {new}"))
}
