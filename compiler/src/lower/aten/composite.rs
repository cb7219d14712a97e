//! Operators outside Core ATen that `torch.export.export` leaves in its default IR (no
//! `run_decompositions()`): `linear`, `conv2d`, `layer_norm`, `softmax.int`, `to.dtype`...
//! Each is lowered onto the Core ATen lowering that computes it, so that it takes the
//! same fast paths (packed GEMM with its bias, native convolution with batch-norm
//! folding, row softmax and layer norm): either by calling that lowering with the node's
//! arguments renamed and completed ([`delegate`]), or through the typed helpers the
//! families share. `nn` holds the layers, `rnn` the recurrent ones, `tensor` the tensor
//! manipulations, `shape` the views and paddings, `math` pointwise helpers and norms.

pub mod math;
pub mod nn;
pub mod rnn;
pub mod shape;
pub mod tensor;

use super::registry;
use super::signatures;
use crate::frontend::schema::{Argument, NamedArgument, Node};
use crate::ir::expr::cast;
use crate::lower::args::Args;
use crate::lower::tensor::{vars, TensorValue};
use crate::lower::Lowerer;
use aotc_abi::DType;

type R = Result<Vec<TensorValue>, String>;

/// Lowers the node as the operator `op` ("convolution.default") called with `args`: the
/// node's own arguments, renamed or completed with the values the node's operator
/// defaults them to. The node's outputs stay its own, so a lowering that looks at which
/// of its extra outputs are read (indices, statistics) sees them unread.
fn delegate(lw: &mut Lowerer, a: &Args, op: &str, args: Vec<(&str, Argument)>) -> R {
    let target = format!("torch.ops.aten.{op}");
    let (_, lower) = registry::lookup(&target).ok_or_else(|| format!("internal error: no lowering of {op}"))?;
    let node = Node {
        target,
        inputs: args.into_iter().map(|(name, arg)| NamedArgument { name: name.into(), arg, kind: None }).collect(),
        outputs: a.node.outputs.clone(),
        name: a.node.name.clone(),
        metadata: serde_json::Value::Null,
    };
    let signature = signatures::lookup(op).ok_or_else(|| format!("internal error: no signature for {op}"))?;
    signatures::check_args(&node, signature).map_err(|m| format!("internal error lowering as {op}: {m}"))?;
    lower(lw, &Args { node: &node })
}

/// The first result of [`delegate`]: the one a single-output operator keeps of an
/// operator that also returns statistics or indices.
fn delegate_first(lw: &mut Lowerer, a: &Args, op: &str, args: Vec<(&str, Argument)>) -> R {
    let mut results = delegate(lw, a, op, args)?;
    results.truncate(1);
    Ok(results)
}

/// The node's argument `name`, or `default` when the node leaves it out.
fn arg_or(a: &Args, name: &str, default: Argument) -> Argument {
    a.get(name).cloned().unwrap_or(default)
}

/// The node's argument `name` as the argument `to` of another operator, when given.
fn renamed<'t>(a: &Args, name: &str, to: &'t str) -> Option<(&'t str, Argument)> {
    a.get(name).map(|arg| (to, arg.clone()))
}

/// The node's arguments `names`, under the same names, those it gives.
fn same<'t>(a: &Args, names: &[&'t str]) -> Vec<(&'t str, Argument)> {
    names.iter().filter_map(|n| renamed(a, n, n)).collect()
}

/// An absent optional argument.
fn none() -> Argument {
    Argument::None(serde_json::Value::Null)
}

/// `x` converted to `dtype` (itself when it has that dtype already).
fn converted(x: &TensorValue, dtype: DType) -> TensorValue {
    if x.dtype == dtype {
        return x.clone();
    }
    TensorValue::lazy(dtype, x.sizes.clone(), cast(x.load(&vars(x.rank())), dtype))
}
