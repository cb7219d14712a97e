//! Subgraphs that `run_decompositions()` made out of one operator, recognized before
//! lowering so that the operator is lowered whole.
//!
//! - **`_safe_softmax`** (the softmax of `scaled_dot_product_attention`, which gives zeros,
//!   not NaN, for a row that a mask hides completely) decomposes into
//!   `where(logical_not(any(logical_not(eq(x, -inf)), dim, keepdim)), full_like(s, 0), s)`
//!   with `s = _softmax(x, dim)`: a softmax, a reduction and a pointwise kernel that each
//!   read the whole scores. Lowered whole, it is one pass of the support library's softmax
//!   (`aotc_abi::softmax::SAFE_SOFTMAX`). (ViT-B/16 on 2 threads: the softmax, the
//!   reduction and the where took 12 ms of 220 per call, the one call 2.)
//!
//! A subgraph is recognized only when none of its inner values is read elsewhere, so
//! that skipping the nodes that compute them loses nothing. The kernels of the node that
//! ends it name the inner nodes too (`origin.rs`), as profiles name every node.

use super::args::Args;
use super::aten::reduction::softmax_of;
use super::tensor::{norm_dim, TensorValue};
use super::{output_names, Lowerer};
use crate::frontend::schema::{Argument, Graph, Node};
use crate::ir::Scalar;
use std::collections::HashMap;

/// What [`recognize`] found: nodes (indices into the graph's nodes) that are lowered as
/// something else, and nodes whose only readers are inside such subgraphs, each with the
/// node that computes it (which names it in profiles).
#[derive(Default)]
pub struct Recognized {
    safe_softmax: HashMap<usize, SafeSoftmax>,
    absorbed: HashMap<usize, usize>,
}

/// A `where` node that is the safe softmax of tensor `x` along `dim` (as the graph gives
/// it: may be negative).
#[derive(Clone)]
pub struct SafeSoftmax {
    pub x: String,
    pub dim: i64,
}

impl Recognized {
    /// The safe softmax node `at` computes, if it ends such a subgraph.
    pub fn safe_softmax(&self, at: usize) -> Option<&SafeSoftmax> {
        self.safe_softmax.get(&at)
    }

    /// The node that computes node `at` as part of its subgraph, when `at` is not lowered
    /// itself.
    pub fn absorbed_by(&self, at: usize) -> Option<usize> {
        self.absorbed.get(&at).copied()
    }
}

/// The value of a recognized safe softmax, lowered for node `name`.
pub fn lower_safe_softmax(lw: &mut Lowerer, s: &SafeSoftmax, name: &str) -> Result<Vec<TensorValue>, String> {
    let x = lw.value(&s.x)?;
    let dim = norm_dim(s.dim, x.rank())?;
    Ok(vec![softmax_of(lw, &x, dim, aotc_abi::softmax::SAFE_SOFTMAX, name)?])
}

/// The subgraphs of `graph` (its main graph, not control-flow bodies) lowered whole;
/// `users` counts the readers of each tensor name.
pub fn recognize(graph: &Graph, users: &HashMap<String, usize>) -> Recognized {
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (at, node) in graph.nodes.iter().enumerate() {
        for out in &node.outputs {
            if let Argument::Tensor(t) = out {
                producer.insert(&t.name, at);
            }
        }
    }
    let view = View { graph, producer, users };
    let mut found = Recognized::default();
    for (at, node) in graph.nodes.iter().enumerate() {
        if let Some((softmax, inner)) = view.safe_softmax(node) {
            found.safe_softmax.insert(at, softmax);
            found.absorbed.extend(inner.into_iter().map(|i| (i, at)));
        }
    }
    found
}

struct View<'g> {
    graph: &'g Graph,
    producer: HashMap<&'g str, usize>,
    users: &'g HashMap<String, usize>,
}

impl<'g> View<'g> {
    /// The node that computes tensor argument `name` of `node`, when it runs `target` and
    /// its value has exactly `readers` readers; with its index.
    fn input(&self, node: &Node, name: &str, target: &str, readers: usize) -> Option<(usize, &'g Node)> {
        let tensor = tensor(&Args { node }, name)?;
        let at = *self.producer.get(tensor)?;
        let producer = &self.graph.nodes[at];
        (producer.target == target && self.users.get(tensor).copied() == Some(readers)).then_some((at, producer))
    }

    /// `node` as the end of `_safe_softmax`'s decomposition: the softmax and the indices
    /// of the nodes inside it.
    fn safe_softmax(&self, node: &Node) -> Option<(SafeSoftmax, Vec<usize>)> {
        if node.target != "torch.ops.aten.where.self" {
            return None;
        }
        // The softmax is read by the where and by the zeros shaped like it.
        let (softmax_at, softmax) = self.input(node, "other", "torch.ops.aten._softmax.default", 2)?;
        let (zeros_at, zeros) = self.input(node, "self", "torch.ops.aten.full_like.default", 1)?;
        let (not_any_at, not_any) = self.input(node, "condition", "torch.ops.aten.logical_not.default", 1)?;
        let (any_at, any) = self.input(not_any, "self", "torch.ops.aten.any.dim", 1)?;
        let (live_at, live) = self.input(any, "self", "torch.ops.aten.logical_not.default", 1)?;
        let (masked_at, masked) = self.input(live, "self", "torch.ops.aten.eq.Scalar", 1)?;
        let (softmax, zeros, any, masked) =
            (Args { node: softmax }, Args { node: zeros }, Args { node: any }, Args { node: masked });
        let x = tensor(&softmax, "self")?;
        let rank = self.graph.tensor_values.get(x).map_or(0, |m| m.sizes.len() as i64).max(1);
        let dim = softmax.int("dim").ok()?;
        let same_dim = any.int("dim").is_ok_and(|d| d.rem_euclid(rank) == dim.rem_euclid(rank));
        let zero = matches!(zeros.scalar("fill_value"), Ok(Scalar::I(0)) | Ok(Scalar::F(0.0)));
        let dtype = |a: &Args| match output_names(a.node).as_slice() {
            [name] => self.graph.tensor_values.get(name).map(|m| m.dtype),
            _ => None,
        };
        let recognized = tensor(&zeros, "self") == tensor(&Args { node }, "other")
            && zero
            && dtype(&zeros).is_some_and(|d| dtype(&softmax) == Some(d))
            && softmax.bool_or("half_to_float", false) == Ok(false)
            && tensor(&masked, "self") == Some(x)
            && masked.scalar("other") == Ok(Scalar::F(f64::NEG_INFINITY))
            && same_dim
            && any.bool_or("keepdim", false) == Ok(true);
        recognized.then(|| {
            (SafeSoftmax { x: x.to_string(), dim }, vec![softmax_at, zeros_at, not_any_at, any_at, live_at, masked_at])
        })
    }
}

/// The name of `node`'s tensor argument `name`.
fn tensor<'n>(node: &Args<'n>, name: &str) -> Option<&'n str> {
    match node.get(name)? {
        Argument::Tensor(t) => Some(&t.name),
        _ => None,
    }
}
