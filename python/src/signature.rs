//! The program's parameters, and a call's `(args, kwargs)` bound to them as Python binds
//! a call to a function: errors name the parameter ("missing required argument 'x'"),
//! never a position in the flattened tree.
//!
//! torch.export's in_spec is the tuple `(args, kwargs)` of the exporting call: one child
//! per positional argument, one dict key per keyword argument. The keyword names are the
//! dict's keys. The positional ones come from the inputs' names, which torch.export
//! gives its placeholders: a tensor or scalar argument's input is named after the
//! parameter ("x"), a container's leaves after the parameter and their key path
//! ("inputs_a" for `inputs["a"]`, "xs_0" for `xs[0]`). Where the names do not tell, the
//! argument is known by its position ("args[1]") and can only be passed positionally.

use crate::tree::{flatten, Mismatch};
use aotc_runtime::pytree::{Node, TreeSpec};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

/// The parameters of a program, from its in_spec and its inputs' names.
pub struct Signature {
    /// Per positional parameter: its name, when the input names tell it.
    positional: Vec<Option<String>>,
    /// The keyword parameters, in the in_spec's order.
    keywords: Vec<String>,
}

/// A positional parameter in messages: `x`, or `args[1]` when its name is unknown.
fn shown(name: &Option<String>, index: usize) -> String {
    name.clone().unwrap_or_else(|| format!("args[{index}]"))
}

/// "argument 'x'" / "arguments 'x', 'y'".
fn arguments(names: &[String]) -> String {
    let list = names.iter().map(|n| format!("'{n}'")).collect::<Vec<_>>().join(", ");
    format!("argument{} {list}", if names.len() == 1 { "" } else { "s" })
}

/// The key of a child in torch.export's placeholder names: a sequence index, or a dict
/// key with anything but letters, digits and '_' replaced by '_'.
fn key_part(spec: &TreeSpec, child: usize) -> Option<String> {
    match &spec.node {
        Node::Tuple | Node::List => Some(child.to_string()),
        Node::Dict(keys) => {
            Some(keys[child].chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect())
        }
        // A namedtuple's path names its fields, which the spec does not hold.
        _ => None,
    }
}

/// The suffix of each leaf's placeholder name under `spec` ("_a", "_0_b"...), in order.
fn leaf_suffixes(spec: &TreeSpec, prefix: &str, out: &mut Vec<Option<String>>) {
    match spec.node {
        Node::Leaf => out.push(Some(prefix.to_string())),
        _ => {
            for (i, child) in spec.children.iter().enumerate() {
                match key_part(spec, i) {
                    Some(part) => leaf_suffixes(child, &format!("{prefix}_{part}"), out),
                    None => out.extend(std::iter::repeat_n(None, child.num_leaves())),
                }
            }
        }
    }
}

/// The parameter an argument of spec `spec` stands for, from its leaves' input names:
/// the name every leaf's placeholder name starts with, before its key path (compared
/// without case: the names may be lowercased).
fn parameter_name(spec: &TreeSpec, leaf_names: &[&str]) -> Option<String> {
    let mut suffixes = vec![];
    leaf_suffixes(spec, "", &mut suffixes);
    let mut found: Option<&str> = None;
    for (name, suffix) in leaf_names.iter().zip(&suffixes) {
        let suffix = suffix.as_deref()?;
        let cut = name.len().checked_sub(suffix.len())?;
        let (stem, tail) = (name.get(..cut)?, name.get(cut..)?);
        if stem.is_empty() || !tail.eq_ignore_ascii_case(suffix) || found.is_some_and(|f| f != stem) {
            return None;
        }
        found = Some(stem);
    }
    found.map(str::to_string)
}

impl Signature {
    /// The signature of a program whose call spec is `in_spec` and whose inputs (the
    /// spec's leaves, in order) are named `input_names`.
    pub fn new(in_spec: &TreeSpec, input_names: &[&str]) -> Result<Signature, String> {
        let (args, kwargs) = match (&in_spec.node, in_spec.children.as_slice()) {
            (Node::Tuple, [args, kwargs]) if matches!(args.node, Node::Tuple | Node::List) => (args, kwargs),
            _ => return Err("the in_spec is not the (args, kwargs) tuple torch.export writes".into()),
        };
        let Node::Dict(keywords) = &kwargs.node else { return Err("the in_spec's kwargs are not a dict".into()) };
        let mut start = 0;
        let positional = args
            .children
            .iter()
            .map(|child| {
                let end = start + child.num_leaves();
                let name = input_names.get(start..end).and_then(|names| parameter_name(child, names));
                start = end;
                name
            })
            .collect();
        Ok(Signature { positional, keywords: keywords.clone() })
    }

    /// "(x, y, *, mask)": the parameters as a Python signature shows them.
    fn describe(&self) -> String {
        let mut parts: Vec<String> = self.positional.iter().enumerate().map(|(i, n)| shown(n, i)).collect();
        if !self.keywords.is_empty() {
            parts.push("*".into());
            parts.extend(self.keywords.iter().cloned());
        }
        format!("({})", parts.join(", "))
    }

    /// The leaves of a call `(args, kwargs)` in the spec's order; on a mismatch, what is
    /// wrong, naming the parameter.
    pub fn flatten_call<'py>(
        &self,
        spec: &TreeSpec,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
        out: &mut Vec<Bound<'py, PyAny>>,
    ) -> Result<(), String> {
        let takes = || format!("the model takes {}", self.describe());
        if args.len() > self.positional.len() {
            let names: Vec<String> = self.positional.iter().enumerate().map(|(i, n)| shown(n, i)).collect();
            let plural = if names.len() == 1 { "" } else { "s" };
            let keywords =
                if self.keywords.is_empty() { String::new() } else { format!(" ({}: the others by name)", takes()) };
            return Err(format!(
                "takes {} positional argument{plural} ({}) but {} were given{keywords}",
                names.len(),
                names.join(", "),
                args.len()
            ));
        }
        let mut positional: Vec<Option<Bound<'py, PyAny>>> = args.iter().map(Some).collect();
        positional.resize(self.positional.len(), None);
        let mut keywords: Vec<Option<Bound<'py, PyAny>>> = vec![None; self.keywords.len()];
        let mut unexpected = vec![];
        for (key, value) in kwargs.into_iter().flat_map(|k| k.iter()) {
            let key: String = key.extract().map_err(|_| {
                format!(
                    "keyword argument names must be strings, got {}",
                    key.repr().map(|r| r.to_string()).unwrap_or_default()
                )
            })?;
            if let Some(k) = self.keywords.iter().position(|n| *n == key) {
                keywords[k] = Some(value);
            } else if let Some(i) = self.positional.iter().position(|n| n.as_deref() == Some(key.as_str())) {
                if i < args.len() {
                    return Err(format!("got multiple values for argument '{key}' ({})", takes()));
                }
                positional[i] = Some(value);
            } else {
                unexpected.push(key);
            }
        }
        if !unexpected.is_empty() {
            return Err(format!("unexpected keyword {} ({})", arguments(&unexpected), takes()));
        }
        let missing: Vec<String> = positional
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_none())
            .map(|(i, _)| shown(&self.positional[i], i))
            .chain(keywords.iter().zip(&self.keywords).filter(|(v, _)| v.is_none()).map(|(_, n)| n.clone()))
            .collect();
        if !missing.is_empty() {
            return Err(format!("missing required {} ({})", arguments(&missing), takes()));
        }
        let arg_specs = spec.children[0].children.iter().chain(&spec.children[1].children);
        let names = self.positional.iter().enumerate().map(|(i, n)| shown(n, i)).chain(self.keywords.iter().cloned());
        for ((value, child), name) in positional.iter().chain(&keywords).flatten().zip(arg_specs).zip(names) {
            flatten(value, child, out).map_err(|m| describe(&name, &m))?;
        }
        Ok(())
    }
}

/// "argument 'inputs': missing key 'b'", "argument 'inputs' at ['a']: expected None...".
fn describe(name: &str, m: &Mismatch) -> String {
    if m.path.is_empty() {
        format!("argument '{name}': {}", m.message)
    } else {
        format!("argument '{name}' at {}: {}", m.path, m.message)
    }
}
