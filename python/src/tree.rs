//! The call spec on Python values (torch.utils._pytree, as torch.export serialises it):
//! each argument of a call (bound to its parameter by `signature.rs`) flattened into the
//! program's leaves, outputs rebuilt into tuples, lists, dicts (OrderedDicts), None, like
//! `torch._export.aot_load`.

use aotc_runtime::pytree::{Node, TreeSpec};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use serde_json::Value as Json;
use std::collections::HashMap;

/// A mismatch between a value and the spec: where (a path such as "[0][1]['a']") and what.
pub struct Mismatch {
    pub path: String,
    pub message: String,
}

impl Mismatch {
    fn new(message: String) -> Mismatch {
        Mismatch { path: String::new(), message }
    }

    fn under(mut self, step: String) -> Mismatch {
        self.path.insert_str(0, &step);
        self
    }
}

fn kind_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
}

/// The python key a spec's JSON key stands for.
pub fn py_key<'py>(py: Python<'py>, key: &Json) -> PyResult<Bound<'py, PyAny>> {
    Ok(match key {
        Json::String(s) => s.into_pyobject(py)?.into_any(),
        Json::Number(n) if n.is_i64() => n.as_i64().unwrap_or_default().into_pyobject(py)?.into_any(),
        Json::Bool(b) => b.into_pyobject(py)?.to_owned().into_any(),
        other => other.to_string().into_pyobject(py)?.into_any(),
    })
}

/// The leaves of `obj` in `spec`'s order.
pub fn flatten<'py>(
    obj: &Bound<'py, PyAny>,
    spec: &TreeSpec,
    out: &mut Vec<Bound<'py, PyAny>>,
) -> Result<(), Mismatch> {
    let py = obj.py();
    let err = |e: PyErr| Mismatch::new(e.to_string());
    match &spec.node {
        Node::Leaf => out.push(obj.clone()),
        Node::None => {
            if !obj.is_none() {
                return Err(Mismatch::new(format!("expected None, got {}", kind_name(obj))));
            }
        }
        Node::Tuple | Node::List | Node::NamedTuple(_) => {
            let items: Vec<Bound<'py, PyAny>> = if let Ok(t) = obj.cast::<PyTuple>() {
                t.iter().collect()
            } else if let Ok(l) = obj.cast::<PyList>() {
                l.iter().collect()
            } else {
                return Err(Mismatch::new(format!(
                    "expected a {} of {} elements, got {}",
                    seq_name(&spec.node),
                    spec.children.len(),
                    kind_name(obj)
                )));
            };
            if items.len() != spec.children.len() {
                return Err(Mismatch::new(format!("expected {} elements, got {}", spec.children.len(), items.len())));
            }
            for (i, (item, child)) in items.iter().zip(&spec.children).enumerate() {
                flatten(item, child, out).map_err(|m| m.under(format!("[{i}]")))?;
            }
        }
        Node::Dict(names) => {
            let dict = obj
                .cast::<PyDict>()
                .map_err(|_| Mismatch::new(format!("expected a dict with keys {names:?}, got {}", kind_name(obj))))?;
            for ((key, name), child) in spec.keys.iter().zip(names).zip(&spec.children) {
                let k = py_key(py, key).map_err(err)?;
                let item = dict
                    .get_item(&k)
                    .map_err(err)?
                    .ok_or_else(|| Mismatch::new(format!("missing key {}", repr(&k))))?;
                flatten(&item, child, out).map_err(|m| m.under(format!("['{name}']")))?;
            }
            if dict.len() != names.len() {
                let extra: Vec<String> = dict
                    .keys()
                    .iter()
                    .filter(|k| !spec.keys.iter().any(|j| py_key(py, j).and_then(|p| p.eq(k)).unwrap_or(false)))
                    .map(|k| repr(&k))
                    .collect();
                return Err(Mismatch::new(format!(
                    "unexpected key(s) {} (the program takes {names:?})",
                    extra.join(", ")
                )));
            }
        }
    }
    Ok(())
}

fn seq_name(node: &Node) -> &'static str {
    match node {
        Node::List => "list",
        Node::NamedTuple(_) => "namedtuple",
        _ => "tuple",
    }
}

fn repr(k: &Bound<'_, PyAny>) -> String {
    k.repr().map(|r| r.to_string()).unwrap_or_else(|_| "?".into())
}

/// The Python types a rebuilt tree's nodes are made of, beyond the builtins.
pub struct NodeTypes {
    /// `collections.OrderedDict`, for the nodes that were one.
    pub ordered_dict: Py<PyAny>,
    /// Per namedtuple node context (its serialized type name): a namedtuple type of its
    /// fields (the library's manifest has them); a plain tuple where it lacks them.
    pub namedtuples: HashMap<String, Py<PyAny>>,
}

/// Rebuilds `spec`'s tree from its leaves, in order.
pub fn unflatten<'py>(
    py: Python<'py>,
    spec: &TreeSpec,
    leaves: &mut impl Iterator<Item = Bound<'py, PyAny>>,
    types: &NodeTypes,
) -> PyResult<Bound<'py, PyAny>> {
    let mut kids = || spec.children.iter().map(|c| unflatten(py, c, leaves, types)).collect::<PyResult<Vec<_>>>();
    Ok(match &spec.node {
        Node::Leaf => leaves.next().ok_or_else(|| {
            pyo3::exceptions::PyRuntimeError::new_err("out_spec has more leaves than the program has outputs")
        })?,
        Node::None => py.None().into_bound(py),
        Node::NamedTuple(name) => match types.namedtuples.get(name) {
            Some(t) => t.bind(py).call1(PyTuple::new(py, kids()?)?)?,
            None => PyTuple::new(py, kids()?)?.into_any(),
        },
        Node::Tuple => PyTuple::new(py, kids()?)?.into_any(),
        Node::List => PyList::new(py, kids()?)?.into_any(),
        Node::Dict(_) => {
            let values = kids()?;
            let dict = if spec.type_name == "collections.OrderedDict" {
                types.ordered_dict.bind(py).call0()?
            } else {
                PyDict::new(py).into_any()
            };
            for (k, v) in spec.keys.iter().zip(values) {
                dict.set_item(py_key(py, k)?, v)?;
            }
            dict
        }
    })
}
