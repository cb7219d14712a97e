//! Functionalization: in-place operators (`add_.Tensor`, `relu_`, `index_put_`, `out=`
//! variants...), as torch.export's default IR keeps them, lowered with the semantics of
//! the functional graph `run_decompositions()` would give.
//!
//! A node that writes into a tensor lowers the functional form of its operator
//! (`add_.Tensor` → `add.Tensor`, the result cast to the written tensor's dtype), and the
//! result becomes the new value of the written tensor. Tensors that share memory form an
//! alias group: a base (a graph input or a node's own result) and the names derived from
//! it by view operators and by in-place operators (whose result is the tensor they wrote).
//! A write through a view becomes a new base, the old one with the new view values
//! scattered into it (`slice_scatter`, `select_scatter`, the inverse permutation, a
//! reshape); then every name of the group that is already defined is derived again from
//! the new base, so later reads through any alias see the write. A graph input written
//! this way is a mutation of the program: a buffer's final value is its new state, a user
//! input's is copied back into the caller's tensor (see `Lowerer::lower_outputs`).

use super::aten::{self, registry::LowerFn};
use super::tensor::{norm_dim, TensorValue};
use super::{args::Args, is_bookkeeping, output_names, tensor_names, Lowerer};
use crate::frontend::schema::{Argument, Graph, NamedArgument, Node, SymInt, TensorArgument, TensorMeta};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

type R<T> = Result<T, String>;

/// How a name shares the memory of its parent.
#[derive(Clone, Copy)]
enum How {
    /// Output `k` of the view operator of the node.
    View(usize),
    /// The result of an in-place operator: the tensor it wrote.
    Written,
}

#[derive(Clone)]
struct Link {
    parent: String,
    /// The node (index into the graph's nodes) that defines the name.
    node: usize,
    how: How,
}

/// The alias structure of a graph, read before lowering.
#[derive(Default)]
pub struct Aliases {
    links: HashMap<String, Link>,
    /// The names derived from each base, in graph order.
    members: HashMap<String, Vec<String>>,
    /// The nodes that write into each base (directly or through a view), in graph order.
    writes: HashMap<String, Vec<usize>>,
    /// The nodes reading each name, in graph order; `usize::MAX` for a graph output.
    uses: HashMap<String, Vec<usize>>,
    /// The graph's tensor inputs (parameters, buffers, constants, user inputs).
    inputs: HashSet<String>,
}

/// The functional form of an in-place node.
pub struct Functional<'n> {
    op: &'static str,
    lower: LowerFn,
    /// The node to lower with the functional operator (the in-place node itself, or a
    /// rewritten copy).
    node: Cow<'n, Node>,
    /// The argument the node writes.
    written: &'static str,
}

/// The operator name of a target ("add_.Tensor").
fn op_name(target: &str) -> Option<&str> {
    target.strip_prefix("torch.ops.aten.")
}

/// Operators whose result shares the memory of their `self` argument.
const VIEW_OPS: &[&str] = &[
    "view",
    "_unsafe_view",
    "slice",
    "select",
    "transpose",
    "t",
    "permute",
    "expand",
    "unsqueeze",
    "squeeze",
    "alias",
    "detach",
    "split",
    "split_with_sizes",
    "unbind",
    "diagonal",
    "as_strided",
    "narrow",
    "unfold",
    "unflatten",
    "view_as",
    "expand_as",
    "movedim",
    "swapaxes",
];

/// The tensor whose memory the results of node `n` share, if any: `self` of a view
/// operator, and of an operator that returns its input itself when no copy is needed, as
/// the recorded strides and dtypes tell (`contiguous`, `reshape` and `flatten` of a
/// contiguous tensor, `to` without a change of dtype).
fn viewed<'n>(graph: &Graph, n: &'n Node) -> Option<&'n str> {
    let parent = tensor_arg(n, "self")?;
    let name = op_name(&n.target)?.split('.').next()?;
    if VIEW_OPS.contains(&name) {
        return Some(parent);
    }
    let meta = |name: &str| graph.tensor_values.get(name);
    let keeps = match name {
        "contiguous" | "reshape" | "flatten" => meta(parent).is_some_and(is_contiguous),
        "to" => {
            let copy = n.inputs.iter().any(|a| a.name == "copy" && matches!(a.arg, Argument::Bool(true)));
            let out = output_names(n).into_iter().next().unwrap_or_default();
            !copy && meta(parent).zip(meta(&out)).is_some_and(|(a, b)| a.dtype == b.dtype)
        }
        _ => false,
    };
    keeps.then_some(parent)
}

/// Whether recorded strides are row-major (size-1 dimensions' strides aside); dynamic
/// ones are taken to be.
fn is_contiguous(m: &TensorMeta) -> bool {
    let ints = |xs: &[SymInt]| xs.iter().map(|x| if let SymInt::Int(i) = x { Some(*i) } else { None }).collect();
    let (Some(sizes), Some(strides)): (Option<Vec<i64>>, Option<Vec<i64>>) = (ints(&m.sizes), ints(&m.strides)) else {
        return true;
    };
    let mut expected = 1i64;
    for (&size, &stride) in sizes.iter().zip(&strides).rev() {
        if size != 1 && stride != expected {
            return sizes.contains(&0);
        }
        expected = expected.saturating_mul(size);
    }
    true
}

/// The argument an in-place operator writes: `self` for `X_.overload`, `out` for the
/// `out=` variants (`X.out`, `X.Y_out`).
pub fn written_arg(target: &str) -> Option<&'static str> {
    let (name, overload) = op_name(target)?.split_once('.')?;
    if name.ends_with('_') && !name.ends_with("__") {
        Some("self")
    } else if overload == "out" || overload.ends_with("_out") {
        Some("out")
    } else {
        None
    }
}

/// A copy of `node` for another operator with the given arguments.
fn rewritten(node: &Node, target: String, inputs: Vec<NamedArgument>) -> Node {
    Node { target, inputs, outputs: node.outputs.clone(), name: node.name.clone(), metadata: node.metadata.clone() }
}

fn named(name: &str, arg: Argument) -> NamedArgument {
    NamedArgument { name: name.into(), arg, kind: None }
}

/// The functional form of `node` when its operator is an in-place one: `None` for other
/// operators, an error naming the operator when aotc lowers no functional form of it.
pub fn functional(node: &Node) -> Option<R<Functional<'_>>> {
    let written = written_arg(&node.target)?;
    let (name, overload) = op_name(&node.target)?.split_once('.')?;
    let found = |op: &str| aten::registry::lookup(&format!("torch.ops.aten.{op}"));
    let result = if written == "self" {
        let base = name.trim_end_matches('_');
        match (base, overload) {
            // zero_ is fill_ with 0.
            ("zero", "default") => found("fill.Scalar").map(|(op, lower)| {
                let mut inputs: Vec<NamedArgument> =
                    node.inputs.iter().filter(|a| a.name == "self").map(|a| named("self", a.arg.clone())).collect();
                inputs.push(named("value", Argument::Int(0)));
                let node = rewritten(node, format!("torch.ops.aten.{op}"), inputs);
                Functional { op, lower, node: Cow::Owned(node), written }
            }),
            _ => found(&format!("{base}.{overload}")).map(|(op, lower)| {
                // The functional schema may name the first argument otherwise
                // (`dropout_(Tensor(a!) self, ...)`, `dropout(Tensor input, ...)`).
                let first = aten::signatures::lookup(op).and_then(|s| s.params.first()).map(|p| p.name.as_str());
                let node = match first {
                    Some(first) if first != "self" => {
                        let inputs = node
                            .inputs
                            .iter()
                            .map(|a| named(if a.name == "self" { first } else { &a.name }, a.arg.clone()))
                            .collect();
                        Cow::Owned(rewritten(node, node.target.clone(), inputs))
                    }
                    _ => Cow::Borrowed(node),
                };
                Functional { op, lower, node, written }
            }),
        }
    } else {
        // X.out → X.default or X.Tensor; X.Y_out → X.Y. The functional node has the
        // arguments of the out= node but `out`.
        let candidates: Vec<String> = match overload.strip_suffix("_out") {
            Some(o) => vec![format!("{name}.{o}")],
            None => vec![format!("{name}.default"), format!("{name}.Tensor")],
        };
        let inputs: Vec<NamedArgument> =
            node.inputs.iter().filter(|a| a.name != "out").map(|a| named(&a.name, a.arg.clone())).collect();
        candidates.iter().find_map(|c| found(c)).map(|(op, lower)| {
            let node = rewritten(node, format!("torch.ops.aten.{op}"), inputs);
            Functional { op, lower, node: Cow::Owned(node), written }
        })
    };
    Some(result.ok_or_else(|| {
        format!("in-place operator {} has no functional form that aotc lowers", op_name(&node.target).unwrap_or(""))
    }))
}

/// The tensor a node passes as argument `name`.
fn tensor_arg<'n>(node: &'n Node, name: &str) -> Option<&'n str> {
    match node.inputs.iter().find(|a| a.name == name).map(|a| &a.arg) {
        Some(Argument::Tensor(t)) => Some(&t.name),
        _ => None,
    }
}

impl Aliases {
    pub fn new(graph: &Graph) -> Aliases {
        let mut al = Aliases { inputs: graph.inputs.iter().flat_map(tensor_names).collect(), ..Aliases::default() };
        for (i, n) in graph.nodes.iter().enumerate() {
            if is_bookkeeping(&n.target) {
                continue;
            }
            for a in &n.inputs {
                for name in tensor_names(&a.arg) {
                    al.uses.entry(name).or_default().push(i);
                }
            }
            let outs = output_names(n);
            if let Some(written) = written_arg(&n.target).and_then(|w| tensor_arg(n, w)) {
                let base = al.base(written).to_string();
                al.writes.entry(base).or_default().push(i);
                if let Some(out) = outs.first().filter(|o| !o.is_empty()) {
                    al.link(out, written, i, How::Written);
                }
            } else if let Some(parent) = viewed(graph, n) {
                for (k, out) in outs.iter().enumerate().filter(|(_, o)| !o.is_empty()) {
                    al.link(out, parent, i, How::View(k));
                }
            }
        }
        for o in &graph.outputs {
            for name in tensor_names(o) {
                al.uses.entry(name).or_default().push(usize::MAX);
            }
        }
        al
    }

    fn link(&mut self, name: &str, parent: &str, node: usize, how: How) {
        let base = self.base(parent).to_string();
        self.links.insert(name.into(), Link { parent: parent.into(), node, how });
        self.members.entry(base).or_default().push(name.into());
    }

    /// The name whose memory `name` shares (itself when it owns its memory).
    pub fn base<'a>(&'a self, mut name: &'a str) -> &'a str {
        while let Some(l) = self.links.get(name) {
            name = &l.parent;
        }
        name
    }

    /// Whether some node writes into `name`'s memory (for graph inputs: a mutation).
    pub fn is_written(&self, name: &str) -> bool {
        self.writes.contains_key(name)
    }

    /// The reads of `base`'s memory after node `at` that see the value node `at` writes:
    /// up to and including the next write into it (which reads it once), else every later
    /// read, the graph outputs and, for a written graph input, its final value.
    fn reads_after(&self, base: &str, at: usize) -> usize {
        let next = self.writes.get(base).and_then(|w| w.iter().copied().find(|&j| j > at));
        let names = std::iter::once(base).chain(self.members.get(base).into_iter().flatten().map(String::as_str));
        let reads: usize = names
            .flat_map(|n| self.uses.get(n).into_iter().flatten())
            .filter(|&&j| j > at && next.is_none_or(|nx| j < nx))
            .count();
        reads + next.map_or(self.inputs.contains(base) as usize, |_| 1)
    }
}

impl Lowerer<'_> {
    /// Lowers in-place node `at` (the graph's node index) through its functional form `f`.
    pub(super) fn lower_inplace(&mut self, at: usize, node: &Node, f: Functional) -> R<()> {
        let written = tensor_arg(node, f.written)
            .ok_or_else(|| format!("argument '{}' (the tensor written in place) should be a tensor", f.written))?
            .to_string();
        let signature =
            aten::signatures::lookup(f.op).ok_or_else(|| format!("internal error: no signature for {}", f.op))?;
        aten::signatures::check_args(&f.node, signature)?;
        let old = self.value(&written)?;
        let lower = aten::complex::route(self, &f.node, f.op, f.lower)?;
        // A lowering may fold its result into the kernel computing an argument read only
        // by it: not when the written tensor shares memory another name reads.
        let base = self.aliases.base(&written).to_string();
        let shared = base != written
            || self.aliases.members.get(&base).is_some_and(|m| m.iter().any(|n| self.env.contains_key(n)));
        if shared {
            *self.users.entry(written.clone()).or_default() += 1;
        }
        let results = lower(self, &Args { node: &f.node });
        if shared {
            *self.users.entry(written.clone()).or_default() -= 1;
        }
        let results = results?;
        let [new] = <[TensorValue; 1]>::try_from(results)
            .map_err(|r| format!("the functional form {} gives {} results, not 1", f.op, r.len()))?;
        if new.sizes != old.sizes {
            let show = |v: &TensorValue| v.sizes.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", ");
            return Err(format!(
                "{} gives shape [{}] for '{written}' of shape [{}]: an in-place result must keep the written tensor's shape",
                f.op,
                show(&new),
                show(&old)
            ));
        }
        let new = self.stamp(aten::scatter::converted(&new, old.dtype));
        self.write(at, &written, new)?;
        if let Some(out) = output_names(node).into_iter().find(|o| !o.is_empty()) {
            let value = self.value(&written)?;
            self.check_meta(&out, &value)?;
            self.env.insert(out, value);
        }
        Ok(())
    }

    /// `value` becomes the content of `name`'s memory at node `at`: the new base is
    /// scattered together, bound, and every defined alias derived from it again.
    fn write(&mut self, at: usize, name: &str, mut value: TensorValue) -> R<()> {
        let mut name = name.to_string();
        while let Some(link) = self.aliases.links.get(&name).cloned() {
            if let How::View(k) = link.how {
                let parent = self.value(&link.parent)?;
                value = self.unview(link.node, k, &parent, value)?;
            }
            name = link.parent;
        }
        if self.aliases.reads_after(&name, at) > 1 || super::too_big(&value) {
            value = self.realize(&value, &name);
        }
        self.env.insert(name.clone(), value);
        let members = self.aliases.members.get(&name).cloned().unwrap_or_default();
        for m in &members {
            if !self.env.contains_key(m) {
                continue;
            }
            let link = self.aliases.links[m].clone();
            let derived = match link.how {
                How::Written => self.value(&link.parent)?,
                How::View(k) => {
                    let node = &self.src.program.graph_module.graph.nodes[link.node];
                    let (_, lower) = aten::registry::lookup(&node.target)
                        .ok_or_else(|| format!("the view '{m}' ({}) cannot be derived again", node.target))?;
                    let mut results = lower(self, &Args { node })?;
                    if k >= results.len() {
                        return Err(format!("the view '{m}' ({}) gives no output {k}", node.target));
                    }
                    results.swap_remove(k)
                }
            };
            self.env.insert(m.clone(), derived);
        }
        Ok(())
    }

    /// The new value of a view's parent when output `k` of view node `view` (of `parent`)
    /// becomes `value`.
    fn unview(&mut self, view: usize, k: usize, parent: &TensorValue, value: TensorValue) -> R<TensorValue> {
        let node = &self.src.program.graph_module.graph.nodes[view];
        let op = op_name(&node.target).unwrap_or(&node.target);
        let a = Args { node };
        let inverse = |perm: &[usize]| {
            let mut inv = vec![0; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inv[p] = i;
            }
            inv
        };
        match op.split('.').next().unwrap_or(op) {
            "view" | "_unsafe_view" | "reshape" | "unsqueeze" | "squeeze" | "flatten" | "unflatten" | "view_as" => {
                Ok(self.reshape(&value, &parent.sizes, &a.node_name()))
            }
            "alias" | "detach" | "contiguous" | "to" => Ok(value),
            "permute" => {
                let dims = a.ints("dims")?.iter().map(|&d| norm_dim(d, parent.rank())).collect::<R<Vec<usize>>>()?;
                value.permute(&inverse(&dims))
            }
            "transpose" | "t" | "swapaxes" => {
                let (d0, d1) = match op {
                    "t.default" => (0, 1),
                    _ => (a.int("dim0")?, a.int("dim1")?),
                };
                let mut perm: Vec<usize> = (0..parent.rank()).collect();
                if parent.rank() >= 2 {
                    perm.swap(norm_dim(d0, parent.rank())?, norm_dim(d1, parent.rank())?);
                }
                value.permute(&perm)
            }
            "slice" => {
                let copied = ["dim", "start", "end", "step"];
                self.scatter_op("slice_scatter.default", node, &copied, vec![], parent, value)
            }
            "select" => self.scatter_op("select_scatter.default", node, &["dim", "index"], vec![], parent, value),
            "unbind" => {
                let extra =
                    vec![named("dim", Argument::Int(a.int_or("dim", 0)?)), named("index", Argument::Int(k as i64))];
                self.scatter_op("select_scatter.default", node, &[], extra, parent, value)
            }
            // Pieces along `dim` at static offsets: slices.
            "split" | "split_with_sizes" | "narrow" => {
                let dim = a.int_or("dim", 0)?;
                let d = norm_dim(dim, parent.rank())?;
                let dynamic = || format!("aotc cannot write through {op} (node '{}') of a dynamic size", a.node_name());
                let start = match op {
                    "split.Tensor" => a.int("split_size").map_err(|_| dynamic())?.saturating_mul(k as i64),
                    "narrow.default" => a.int("start").map_err(|_| dynamic())?,
                    _ => a.ints("split_sizes").map_err(|_| dynamic())?.iter().take(k).sum(),
                };
                let (size, len) =
                    (parent.sizes[d].as_int().ok_or_else(dynamic)?, value.sizes[d].as_int().ok_or_else(dynamic)?);
                let start = if start < 0 { start + size } else { start };
                let extra = vec![
                    named("dim", Argument::Int(dim)),
                    named("start", Argument::Int(start.min(size))),
                    named("end", Argument::Int(start.saturating_add(len).min(size))),
                ];
                self.scatter_op("slice_scatter.default", node, &[], extra, parent, value)
            }
            _ => Err(format!("aotc cannot write into a tensor through the view {op} (node '{}')", a.node_name())),
        }
    }

    /// `op(self=parent, src=value, ...)`: the view's arguments named in `copied`, then `extra`.
    fn scatter_op(
        &mut self,
        op: &str,
        view: &Node,
        copied: &[&str],
        extra: Vec<NamedArgument>,
        parent: &TensorValue,
        value: TensorValue,
    ) -> R<TensorValue> {
        const PARENT: &str = "\u{1}functionalize.parent";
        const SRC: &str = "\u{1}functionalize.src";
        let (_, lower) = aten::registry::lookup(&format!("torch.ops.aten.{op}"))
            .ok_or_else(|| format!("internal error: no {op}"))?;
        let tensor = |name: &str| Argument::Tensor(TensorArgument { name: name.into() });
        let mut inputs = vec![named("self", tensor(PARENT)), named("src", tensor(SRC))];
        inputs.extend(
            view.inputs.iter().filter(|a| copied.contains(&a.name.as_str())).map(|a| named(&a.name, a.arg.clone())),
        );
        inputs.extend(extra);
        let node = rewritten(view, format!("torch.ops.aten.{op}"), inputs);
        self.env.insert(PARENT.into(), parent.clone());
        self.env.insert(SRC.into(), value);
        let results = lower(self, &Args { node: &node });
        self.env.remove(PARENT);
        self.env.remove(SRC);
        results?.pop().ok_or_else(|| format!("{op} gave no result"))
    }
}
