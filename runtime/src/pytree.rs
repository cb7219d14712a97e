//! torch.utils._pytree, for the call spec: TreeSpecs as torch.export serialises them
//! (`[1, {"type": "builtins.tuple", "context": "null", "children_spec": [...]}]`), and
//! flatten/unflatten of python-like values.

use crate::{Tensor, Value};
use serde_json::Value as Json;

/// A python value as the call spec sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum PyValue {
    #[default]
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Tensor(Tensor),
    Tuple(Vec<PyValue>),
    List(Vec<PyValue>),
    /// Keys in insertion order.
    Dict(Vec<(String, PyValue)>),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    Leaf,
    None,
    Tuple,
    List,
    /// A dict / OrderedDict / defaultdict with these keys, in flattening order.
    Dict(Vec<String>),
    /// A namedtuple (flattened like a tuple), by its serialized type name.
    NamedTuple(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct TreeSpec {
    pub node: Node,
    pub children: Vec<TreeSpec>,
    /// The node's type as serialised ("builtins.dict", "collections.OrderedDict"...;
    /// empty for a leaf), for bindings that rebuild the exact python type.
    pub type_name: String,
    /// A dict node's keys as JSON, with their python types (`Node::Dict` has them as
    /// strings); empty for other nodes.
    pub keys: Vec<Json>,
}

fn key_string(k: &Json) -> String {
    match k {
        Json::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl TreeSpec {
    /// Parses the serialised form (protocol 1).
    pub fn parse(text: &str) -> Result<TreeSpec, String> {
        let v: Json = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        match v.as_array().map(|a| a.as_slice()) {
            Some([Json::Number(p), spec]) if p.as_i64() == Some(1) => TreeSpec::from_json(spec),
            _ => Err("expected [1, {...}] (pytree protocol 1)".into()),
        }
    }

    fn from_json(v: &Json) -> Result<TreeSpec, String> {
        let ty = v.get("type").ok_or("a node without 'type'")?;
        let children = v
            .get("children_spec")
            .and_then(|c| c.as_array())
            .map(|c| c.iter().map(TreeSpec::from_json).collect::<Result<Vec<_>, _>>())
            .transpose()?
            .unwrap_or_default();
        let context = || -> Result<Json, String> {
            match v.get("context") {
                Some(Json::String(s)) => serde_json::from_str(s).map_err(|e| format!("bad context {s}: {e}")),
                Some(other) => Ok(other.clone()),
                None => Ok(Json::Null),
            }
        };
        let mut keys = vec![];
        let node = match ty {
            Json::Null => Node::Leaf,
            Json::String(t) => match t.as_str() {
                "builtins.tuple" => Node::Tuple,
                "builtins.list" => Node::List,
                "builtins.NoneType" | "NoneType" => Node::None,
                "builtins.dict" | "collections.OrderedDict" | "collections.defaultdict" => {
                    let ctx = context()?;
                    // defaultdict's context is [default_factory, keys].
                    let dict_keys = if t == "collections.defaultdict" {
                        ctx.get("dict_context").cloned().unwrap_or(ctx)
                    } else {
                        ctx
                    };
                    let list = dict_keys.as_array().ok_or("dict context is not a list of keys")?;
                    let names = list.iter().map(key_string).collect();
                    keys = list.clone();
                    Node::Dict(names)
                }
                // Its context is the type's serialized name as is, not a JSON text.
                "collections.namedtuple" => match v.get("context") {
                    Some(Json::String(name)) => Node::NamedTuple(name.clone()),
                    _ => return Err("a namedtuple node without its type name as context".into()),
                },
                other => return Err(format!("unsupported pytree node type '{other}'")),
            },
            _ => return Err("bad 'type'".into()),
        };
        let type_name = ty.as_str().unwrap_or_default().to_string();
        Ok(TreeSpec { node, children, type_name, keys })
    }

    pub fn num_leaves(&self) -> usize {
        match self.node {
            Node::Leaf => 1,
            _ => self.children.iter().map(|c| c.num_leaves()).sum(),
        }
    }
}

fn children<'v>(v: &'v PyValue, spec: &TreeSpec) -> Result<Vec<&'v PyValue>, String> {
    let want = spec.children.len();
    let items: Vec<&PyValue> = match (&spec.node, v) {
        (Node::Tuple | Node::NamedTuple(_), PyValue::Tuple(xs)) | (Node::List, PyValue::List(xs)) => {
            xs.iter().collect()
        }
        (Node::Dict(keys), PyValue::Dict(kv)) => {
            if kv.len() != keys.len() {
                return Err(format!(
                    "expected a dict with keys {keys:?}, got keys {:?}",
                    kv.iter().map(|(k, _)| k).collect::<Vec<_>>()
                ));
            }
            keys.iter()
                .map(|k| {
                    kv.iter().find(|(kk, _)| kk == k).map(|(_, x)| x).ok_or_else(|| format!("missing dict key '{k}'"))
                })
                .collect::<Result<_, _>>()?
        }
        (Node::None, PyValue::None) => vec![],
        (node, v) => return Err(format!("expected {node:?}, got {}", kind(v))),
    };
    if items.len() != want {
        return Err(format!("expected {want} elements in {:?}, got {}", spec.node, items.len()));
    }
    Ok(items)
}

fn kind(v: &PyValue) -> &'static str {
    match v {
        PyValue::None => "None",
        PyValue::Bool(_) => "bool",
        PyValue::Int(_) => "int",
        PyValue::Float(_) => "float",
        PyValue::Str(_) => "str",
        PyValue::Tensor(_) => "tensor",
        PyValue::Tuple(_) => "tuple",
        PyValue::List(_) => "list",
        PyValue::Dict(_) => "dict",
    }
}

/// The leaves of `v` in `spec`'s order.
pub fn flatten(v: &PyValue, spec: &TreeSpec) -> Result<Vec<Value>, String> {
    let mut out = vec![];
    fn go(v: &PyValue, spec: &TreeSpec, out: &mut Vec<Value>) -> Result<(), String> {
        if spec.node == Node::Leaf {
            out.push(match v {
                PyValue::Tensor(t) => Value::Tensor(t.clone()),
                PyValue::Float(f) => Value::Float(*f),
                PyValue::Int(i) => Value::Int(*i),
                PyValue::Bool(b) => Value::Bool(*b),
                PyValue::Str(s) => Value::Str(s.clone()),
                PyValue::None => Value::None,
                other => return Err(format!("leaf {} of kind {} cannot be passed", out.len(), kind(other))),
            });
            return Ok(());
        }
        for (c, s) in children(v, spec)?.into_iter().zip(&spec.children) {
            go(c, s, out)?;
        }
        Ok(())
    }
    go(v, spec, &mut out)?;
    Ok(out)
}

/// Copies tensor leaves back into `v` (after a call mutated some of them).
pub fn write_back(v: &mut PyValue, spec: &TreeSpec, leaves: &[Value]) {
    fn go(v: &mut PyValue, spec: &TreeSpec, leaves: &mut std::slice::Iter<Value>) {
        match (&spec.node, v) {
            (Node::Leaf, v) => {
                if let (PyValue::Tensor(t), Some(Value::Tensor(new))) = (v, leaves.next()) {
                    *t = new.clone();
                }
            }
            (Node::Dict(keys), PyValue::Dict(kv)) => {
                for (k, s) in keys.iter().zip(&spec.children) {
                    if let Some((_, x)) = kv.iter_mut().find(|(kk, _)| kk == k) {
                        go(x, s, leaves);
                    }
                }
            }
            (_, PyValue::Tuple(xs) | PyValue::List(xs)) => {
                for (x, s) in xs.iter_mut().zip(&spec.children) {
                    go(x, s, leaves);
                }
            }
            _ => {}
        }
    }
    go(v, spec, &mut leaves.iter());
}

/// Rebuilds the tree `spec` describes from its leaves.
pub fn unflatten(spec: &TreeSpec, leaves: Vec<Tensor>) -> Result<PyValue, String> {
    unflatten_values(spec, leaves.into_iter().map(PyValue::Tensor).collect())
}

/// [`unflatten`] from leaves that may be python scalars too (a SymInt output).
pub fn unflatten_values(spec: &TreeSpec, leaves: Vec<PyValue>) -> Result<PyValue, String> {
    if leaves.len() != spec.num_leaves() {
        return Err(format!("out_spec has {} leaves, the call returned {} outputs", spec.num_leaves(), leaves.len()));
    }
    fn go(spec: &TreeSpec, leaves: &mut std::vec::IntoIter<PyValue>) -> PyValue {
        let mut kids = || spec.children.iter().map(|c| go(c, leaves)).collect::<Vec<_>>();
        match &spec.node {
            Node::Leaf => leaves.next().expect("counted"),
            Node::None => PyValue::None,
            Node::Tuple | Node::NamedTuple(_) => PyValue::Tuple(kids()),
            Node::List => PyValue::List(kids()),
            Node::Dict(keys) => PyValue::Dict(keys.iter().cloned().zip(kids()).collect()),
        }
    }
    Ok(go(spec, &mut leaves.into_iter()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const IN_SPEC: &str = r#"[1, {"type": "builtins.tuple", "context": "null", "children_spec": [{"type": "builtins.tuple", "context": "null", "children_spec": [{"type": "builtins.dict", "context": "[\"a\", \"b\"]", "children_spec": [{"type": null, "context": null, "children_spec": []}, {"type": null, "context": null, "children_spec": []}]}, {"type": null, "context": null, "children_spec": []}]}, {"type": "builtins.dict", "context": "[]", "children_spec": []}]}]"#;

    #[test]
    fn flattens_dict_in_spec_key_order_and_rebuilds() {
        let spec = TreeSpec::parse(IN_SPEC).unwrap();
        assert_eq!(spec.num_leaves(), 3);
        let a = Tensor::from_f32(&[1], &[1.0]);
        let b = Tensor::from_f32(&[1], &[2.0]);
        // Keys given in the other order still flatten as a, b.
        let call = PyValue::Tuple(vec![
            PyValue::Tuple(vec![
                PyValue::Dict(vec![("b".into(), PyValue::Tensor(b.clone())), ("a".into(), PyValue::Tensor(a.clone()))]),
                PyValue::Float(3.0),
            ]),
            PyValue::Dict(vec![]),
        ]);
        let leaves = flatten(&call, &spec).unwrap();
        assert_eq!(leaves, vec![Value::Tensor(a), Value::Tensor(b), Value::Float(3.0)]);
        let bad = PyValue::Tuple(vec![
            PyValue::Tuple(vec![PyValue::Dict(vec![]), PyValue::Float(3.0)]),
            PyValue::Dict(vec![]),
        ]);
        assert!(flatten(&bad, &spec).unwrap_err().contains("keys"));
    }

    #[test]
    fn a_namedtuple_node_keeps_its_type_name_which_is_not_json() {
        // torch.export's out_spec of `return Pair(x + y, 2 * x)`, Pair registered as
        // "aotc_tests.Pair": the context is the bare name.
        let spec = TreeSpec::parse(r#"[1, {"type": "collections.namedtuple", "context": "aotc_tests.Pair", "children_spec": [{"type": null, "context": null, "children_spec": []}, {"type": null, "context": null, "children_spec": []}]}]"#).unwrap();
        assert_eq!((spec.node.clone(), spec.num_leaves()), (Node::NamedTuple("aotc_tests.Pair".into()), 2));
    }
}
