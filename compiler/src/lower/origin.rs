//! Which graph nodes each kernel computes, for profiles (`aotc profile`) and the text IR.
//!
//! A lazy value carries its origin ([`Origin`]): the nodes fused into its body. Loading
//! it (`TensorValue::load`, the one way a body enters another) records the expression it
//! gives with that origin, for the node being lowered; the origin of any expression made
//! from such loads is then the union of those it contains, found by a walk that stops at
//! them. A kernel holds the nodes of its body plus the node it was made for, a lazy result
//! those of its body plus its node: exactly the bodies fused, never a value the lowering
//! read but realized first. A GEMM or a library call holds no body: only its node. A node
//! that computes a recognized subgraph (`recognize.rs`) counts its inner nodes as its own.
//!
//! A constant folded through a cast is a new expression: the node that made it (a
//! `full`, a `scalar_tensor`) computes nothing at run time and is not named.

use super::tensor::{Origin, Repr, TensorValue};
use super::Lowerer;
use crate::frontend::schema;
use crate::ir::expr::{Expr, ExprKind, E};
use crate::ir::Kernel;
use aotc_abi::manifest::GraphNode;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

thread_local! {
    /// The expressions loaded from lazy values with a non-empty origin since the current
    /// node's lowering began (each kept alive, so that its address stays its own).
    static LOADED: RefCell<HashMap<*const Expr, (E, Origin)>> = RefCell::new(HashMap::new());
}

/// `e`, just loaded from a lazy value of origin `origin`, recorded as such.
pub fn loaded(e: E, origin: &Origin) -> E {
    if !origin.is_empty() {
        LOADED.with(|l| l.borrow_mut().insert(Rc::as_ptr(&e), (e.clone(), origin.clone())));
    }
    e
}

/// The nodes whose bodies `body` holds: the union of the origins of the loads in it.
pub fn of_body(body: &E) -> Origin {
    fn go(e: &E, loaded: &HashMap<*const Expr, (E, Origin)>, seen: &mut HashSet<*const Expr>, nodes: &mut Vec<usize>) {
        if !seen.insert(Rc::as_ptr(e)) {
            return;
        }
        if let Some((_, origin)) = loaded.get(&Rc::as_ptr(e)) {
            return nodes.extend(origin.iter());
        }
        match &e.kind {
            ExprKind::Load { .. } | ExprKind::Const(_) | ExprKind::Index(_) => {}
            ExprKind::Unary(_, x)
            | ExprKind::Cast(x)
            | ExprKind::LoadAt { offset: x, .. }
            | ExprKind::CheckIndex { value: x, .. } => go(x, loaded, seen, nodes),
            ExprKind::Binary(_, a, b) => [a, b].into_iter().for_each(|x| go(x, loaded, seen, nodes)),
            ExprKind::Where(c, a, b) => [c, a, b].into_iter().for_each(|x| go(x, loaded, seen, nodes)),
        }
    }
    let mut nodes = vec![];
    LOADED.with(|l| {
        let loaded = l.borrow();
        if !loaded.is_empty() {
            go(body, &loaded, &mut HashSet::new(), &mut nodes);
        }
    });
    nodes.sort_unstable();
    nodes.dedup();
    nodes.into()
}

impl Lowerer<'_> {
    /// Starts lowering `node` (`None`: the graph outputs and the interface's own kernels,
    /// which belong to no node). Kernels the previous node made get their nodes first.
    pub(super) fn begin_node(&mut self, node: Option<GraphNode>) {
        self.stamp_kernels();
        self.inner_nodes.clear();
        LOADED.with(|l| l.borrow_mut().clear());
        self.node = node.map(|n| {
            self.prog.nodes.push(n);
            self.prog.nodes.len() - 1
        });
    }

    /// `v` as a result of the current node: a lazy body is now also that node's.
    pub(super) fn stamp(&self, v: TensorValue) -> TensorValue {
        match v.repr {
            Repr::Lazy(body, origin) => TensorValue { repr: Repr::Lazy(body, self.with_node(&origin)), ..v },
            Repr::View(_) => v,
        }
    }

    /// Gives the kernels made since the last call their nodes (see the module doc).
    pub(super) fn stamp_kernels(&mut self) {
        for k in self.prog.kernel_nodes.len()..self.prog.kernels.len() {
            let nodes = match &self.prog.kernels[k] {
                Kernel::Matmul(_) | Kernel::Extern(_) => self.with_node(&Origin::default()).to_vec(),
                Kernel::Pointwise { body, .. } | Kernel::Reduction { body, .. } => {
                    self.with_node(&of_body(body)).to_vec()
                }
            };
            self.prog.kernel_nodes.push(nodes);
        }
    }

    /// Kernel `index`, made for an earlier node, now also computes the current one (an op
    /// folded into a library call's output pass).
    pub fn fold_node_into(&mut self, index: usize) {
        self.stamp_kernels();
        if let (Some(n), Some(nodes)) = (self.node, self.prog.kernel_nodes.get_mut(index)) {
            if let Err(at) = nodes.binary_search(&n) {
                nodes.insert(at, n);
            }
        }
    }

    /// `origin` and the current node, with the inner nodes it computes (recognize.rs).
    fn with_node(&self, origin: &Origin) -> Origin {
        let mut current = self.node.iter().chain(&self.inner_nodes);
        if current.all(|n| origin.contains(n)) {
            return origin.clone();
        }
        let mut nodes = origin.to_vec();
        for &n in self.node.iter().chain(&self.inner_nodes) {
            if let Err(at) = nodes.binary_search(&n) {
                nodes.insert(at, n);
            }
        }
        nodes.into()
    }
}

/// `node` as profiles name it: its name and target, the innermost module of its
/// `nn_module_stack` and the innermost frame of its `stack_trace`, when export recorded
/// them. Metadata is advisory: what does not parse is left out.
pub fn graph_node(node: &schema::Node, name: &str) -> GraphNode {
    let text = |key: &str| node.metadata.get(key).and_then(|v| v.as_str());
    // "key,path,type;key,path,type...": the last entry is the innermost module. The
    // key may hold commas (`getattr(L['self'].layers, '0')`); the path and type do not.
    let innermost =
        text("nn_module_stack").and_then(|s| s.rsplit(';').next()).map(|e| e.rsplitn(3, ',').collect::<Vec<_>>());
    let (module, module_type) = match innermost.as_deref() {
        Some([ty, path, _key]) if !path.is_empty() => {
            (Some(path.to_string()), ty.rsplit('.').next().map(str::to_string))
        }
        _ => (None, None),
    };
    GraphNode {
        name: name.to_string(),
        target: node.target.clone(),
        module,
        module_type,
        source: text("stack_trace").and_then(innermost_frame),
    }
}

/// `file.py:42` of the last `File "file.py", line 42, in f` line of a Python traceback.
fn innermost_frame(trace: &str) -> Option<String> {
    trace.lines().rev().find_map(|l| {
        let rest = l.trim_start().strip_prefix("File \"")?;
        let (file, rest) = rest.split_once("\", line ")?;
        let line: u32 = rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()?;
        Some(format!("{file}:{line}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(metadata: serde_json::Value) -> schema::Node {
        serde_json::from_value(serde_json::json!({"target": "torch.ops.aten.relu.default", "inputs": [], "outputs": [], "metadata": metadata})).unwrap()
    }

    #[test]
    fn module_and_source_come_from_the_innermost_entries() {
        let n = node(serde_json::json!({
            "nn_module_stack": "L__self__,,__main__.Net;getattr(L['self'].layers, '0'),layers.0,torch.nn.modules.linear.Linear",
            "stack_trace": "  File \"/src/net.py\", line 12, in forward\n    x = self.layers(x)\n  File \"/src/layer.py\", line 7, in forward\n    return relu(x)",
        }));
        let g = graph_node(&n, "relu");
        assert_eq!(
            (g.module.as_deref(), g.module_type.as_deref(), g.source.as_deref()),
            (Some("layers.0"), Some("Linear"), Some("/src/layer.py:7"))
        );
    }

    #[test]
    fn the_root_module_and_odd_metadata_give_nothing() {
        let root = graph_node(
            &node(serde_json::json!({"nn_module_stack": "L__self__,,__main__.Net", "stack_trace": "no frames"})),
            "relu",
        );
        assert_eq!((root.module, root.module_type, root.source), (None, None, None));
        let odd = graph_node(
            &node(serde_json::json!({"nn_module_stack": 7, "stack_trace": "File \"x.py\", line -1"})),
            "relu",
        );
        assert_eq!((odd.module, odd.source), (None, None));
    }
}
