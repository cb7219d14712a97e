//! Sorting without a sort kernel: the rank of element `i` along `dim` is the number of
//! elements that come before it, `#{ j : x_j < x_i or (x_j == x_i and j < i) }` (a
//! Reduction), and the k-th output is the element of rank k (another masked Reduction).
//! O(n^2) along `dim`; stable, with NaN sorting as the largest value as torch does.

use super::registry::LowerFn;
use super::scatter::{reduce_where, var_value};
use crate::ir::expr::int;
use crate::ir::expr::{binary, unary, Affine, E};
use crate::ir::{Prim, ReduceOp};
use crate::lower::args::Args;
use crate::lower::tensor::{norm_dim, vars, TensorValue};
use crate::lower::Lowerer;
use aotc_abi::manifest::GuardOp;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

type R = Result<Vec<TensorValue>, String>;

pub const OPS: &[(&str, LowerFn)] = &[("sort.default", sort), ("topk.default", topk)];

fn is_nan(x: &E) -> E {
    binary(Prim::Ne, x.clone(), x.clone())
}

/// `a < b` in sort order: NaN is larger than every number.
fn less(a: &E, b: &E) -> E {
    let lt = binary(Prim::Lt, a.clone(), b.clone());
    if !a.dtype.is_float() {
        return lt;
    }
    let only_b_nan = binary(Prim::And, is_nan(b), unary(Prim::Not, is_nan(a)));
    binary(Prim::Or, lt, only_b_nan)
}

/// `a == b` in sort order: NaNs are equal to each other.
fn same(a: &E, b: &E) -> E {
    let eq = binary(Prim::Eq, a.clone(), b.clone());
    if !a.dtype.is_float() {
        return eq;
    }
    binary(Prim::Or, eq, binary(Prim::And, is_nan(a), is_nan(b)))
}

/// Whether `x_j` (at position `j`) comes before `x_i` (at `i`): smaller, or larger when
/// `descending`; equal elements keep their order (a stable sort).
fn precedes(x_j: &E, x_i: &E, j: E, i: E, descending: bool) -> E {
    let before = if descending { less(x_i, x_j) } else { less(x_j, x_i) };
    binary(Prim::Or, before, binary(Prim::And, same(x_j, x_i), binary(Prim::Lt, j, i)))
}

/// The first `len` elements of `x` along `dim` in sort order, and their positions in `x`.
fn sorted_prefix(
    lw: &mut Lowerer,
    x: &TensorValue,
    dim: usize,
    descending: bool,
    len: SymExpr,
    name: &str,
) -> (TensorValue, TensorValue) {
    let rank = x.rank();
    let n = x.sizes[dim].clone();
    // ranks[i] = #{ j : x_j precedes x_i }
    let mut at_j = vars(rank);
    at_j[dim] = Affine::var(rank);
    let (x_i, x_j) = (x.load(&vars(rank)), x.load(&at_j));
    let before = precedes(&x_j, &x_i, var_value(rank), var_value(dim), descending);
    let ranks =
        reduce_where(lw, &format!("{name}.rank"), &x.sizes, std::slice::from_ref(&n), ReduceOp::Sum, before, int(1));
    // indices[k] = the i with ranks[i] == k: exactly one, as the ranks are a permutation.
    let mut sizes = x.sizes.clone();
    sizes[dim] = len;
    let has_rank_k = binary(Prim::Eq, ranks.load(&at_j), var_value(dim));
    let indices =
        reduce_where(lw, &format!("{name}.indices"), &sizes, &[n], ReduceOp::Max, has_rank_k, var_value(rank));
    let mut at: Vec<E> = (0..rank).map(var_value).collect();
    at[dim] = indices.load(&vars(rank));
    let values = TensorValue::lazy(x.dtype, sizes, lw.load_at_indices(x, &at, name));
    (values, indices)
}

fn sort(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let dim = norm_dim(a.int_or("dim", -1)?, x.rank())?;
    let descending = a.bool_or("descending", false)?;
    if x.rank() == 0 {
        return Ok(vec![x, TensorValue::lazy(DType::I64, vec![], int(0))]);
    }
    let n = x.sizes[dim].clone();
    let (values, indices) = sorted_prefix(lw, &x, dim, descending, n, &a.node_name());
    Ok(vec![values, indices])
}

/// The k largest (or smallest) elements along `dim`, in sort order (also when `sorted`
/// is false, where torch leaves the order unspecified); ties keep their order.
fn topk(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let dim = norm_dim(a.int_or("dim", -1)?, x.rank())?;
    let k = a.sym_int(lw, "k")?;
    let largest = a.bool_or("largest", true)?;
    a.bool_or("sorted", true)?;
    let n = if x.rank() == 0 { SymExpr::Int(1) } else { x.sizes[dim].clone() };
    lw.require(SymExpr::Int(0), GuardOp::Le, k.clone(), "topk: k must not be negative")?;
    lw.require(k.clone(), GuardOp::Le, n, &format!("topk: k must not exceed the size of dimension {dim}"))?;
    if x.rank() == 0 {
        return Ok(vec![x, TensorValue::lazy(DType::I64, vec![], int(0))]);
    }
    let (values, indices) = sorted_prefix(lw, &x, dim, largest, k, &a.node_name());
    Ok(vec![values, indices])
}
