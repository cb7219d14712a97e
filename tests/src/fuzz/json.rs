//! Navigating and describing the JSON documents being mutated.

use super::rng::Rng;
use serde_json::{Map, Value};

pub const TENSOR_VALUES: &str = "/graph_module/graph/tensor_values";
pub const NODES: &str = "/graph_module/graph/nodes";
pub const SIGNATURE: &str = "/graph_module/signature";

pub fn object_at<'v>(doc: &'v mut Value, pointer: &str) -> Option<&'v mut Map<String, Value>> {
    doc.pointer_mut(pointer)?.as_object_mut()
}

pub fn array_at<'v>(doc: &'v mut Value, pointer: &str) -> Option<&'v mut Vec<Value>> {
    doc.pointer_mut(pointer)?.as_array_mut()
}

/// A random key of `map`, if it has any.
pub fn pick_key(rng: &mut Rng, map: &Map<String, Value>) -> Option<String> {
    if map.is_empty() {
        return None;
    }
    map.keys().nth(rng.below(map.len())).cloned()
}

/// The only key of a one-key object such as `{"as_int": 3}` (torch.export's unions).
pub fn union_kind(v: &Value) -> Option<&str> {
    match v.as_object() {
        Some(m) if m.len() == 1 => m.keys().next().map(String::as_str),
        _ => None,
    }
}

/// JSON pointers of every value under `root` (root itself excluded), depth first.
pub fn all_pointers(root: &Value, prefix: &str, out: &mut Vec<String>) {
    let children: Vec<(String, &Value)> = match root {
        Value::Object(m) => m.iter().map(|(k, v)| (escape(k), v)).collect(),
        Value::Array(a) => a.iter().enumerate().map(|(i, v)| (i.to_string(), v)).collect(),
        _ => return,
    };
    for (key, child) in children {
        let pointer = format!("{prefix}/{key}");
        all_pointers(child, &pointer, out);
        out.push(pointer);
    }
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Removes the value at `pointer` from its parent object or array.
pub fn remove_at(doc: &mut Value, pointer: &str) -> Option<Value> {
    let (parent, key) = pointer.rsplit_once('/')?;
    match doc.pointer_mut(parent)? {
        Value::Object(m) => m.remove(&key.replace("~1", "/").replace("~0", "~")),
        Value::Array(a) => {
            let i: usize = key.parse().ok()?;
            (i < a.len()).then(|| a.remove(i))
        }
        _ => None,
    }
}

/// A value as compact JSON, cut to a readable length for mutation descriptions.
pub fn short(v: &Value) -> String {
    let text = v.to_string();
    if text.chars().count() <= 80 {
        return text;
    }
    let head: String = text.chars().take(60).collect();
    format!("{head}... ({} chars)", text.len())
}

/// A random node of the graph, with its index.
pub fn pick_node<'v>(program: &'v mut Value, rng: &mut Rng) -> Option<(usize, &'v mut Value)> {
    let nodes = array_at(program, NODES)?;
    if nodes.is_empty() {
        return None;
    }
    let i = rng.below(nodes.len());
    Some((i, &mut nodes[i]))
}

/// "node 3 (torch.ops.aten.view.default)" for mutation descriptions.
pub fn node_label(i: usize, node: &Value) -> String {
    format!("node {i} ({})", node["target"].as_str().unwrap_or("?"))
}

/// The integers of an `{"as_int": N}` list such as tensor_meta sizes (symbolic ones as 1).
pub fn sym_ints(list: &Value) -> Vec<i64> {
    list.as_array().map(|a| a.iter().map(|v| v["as_int"].as_i64().unwrap_or(1)).collect()).unwrap_or_default()
}

pub fn as_int_list(values: &[i64]) -> Value {
    Value::Array(values.iter().map(|v| serde_json::json!({"as_int": v})).collect())
}
