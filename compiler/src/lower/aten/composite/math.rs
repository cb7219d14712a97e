//! Pointwise and norm operators of the default IR outside Core ATen: `hardsigmoid`,
//! `clamp_min`/`clamp_max`, `addcmul`/`addcdiv`, `multiply`, `floor_divide`, `detach`,
//! `item`, `linalg_vector_norm` and `_weight_norm`, each onto the Core lowerings or the
//! typed helpers they decompose to.

use super::{delegate, none, same};
use crate::frontend::schema::Argument;
use crate::ir::expr::{binary, cast, constant, unary, E};
use crate::ir::{Prim, ReduceOp, Scalar};
use crate::lower::args::Args;
use crate::lower::aten::promote::{float_of, map, operand, result_type};
use crate::lower::aten::reduction::reduce;
use crate::lower::aten::registry::LowerFn;
use crate::lower::tensor::{norm_dim, vars, TensorValue};
use crate::lower::Lowerer;
use aotc_abi::DType;

type R = Result<Vec<TensorValue>, String>;

pub const OPS: &[(&str, LowerFn)] = &[
    ("hardsigmoid.default", hardsigmoid),
    ("clamp_min.default", |lw, a| clamp_one_side(lw, a, "min")),
    ("clamp_max.default", |lw, a| clamp_one_side(lw, a, "max")),
    ("addcmul.default", |lw, a| add_product(lw, a, Prim::Mul)),
    ("addcdiv.default", |lw, a| add_product(lw, a, Prim::Div)),
    ("multiply.Tensor", |lw, a| delegate(lw, a, "mul.Tensor", same(a, &["self", "other"]))),
    ("floor_divide.default", floor_divide),
    ("floor_divide.Scalar", floor_divide),
    ("detach.default", |lw, a| Ok(vec![a.tensor(lw, "self")?])),
    ("item.default", |lw, a| delegate(lw, a, "_local_scalar_dense.default", same(a, &["self"]))),
    ("linalg_vector_norm.default", linalg_vector_norm),
    ("_weight_norm.default", weight_norm),
];

/// `min(max(x / 6 + 1/2, 0), 1)`.
fn hardsigmoid(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    if !x.dtype.is_float() {
        return Err(format!("hardsigmoid is defined for floating dtypes only, not {}", x.dtype));
    }
    let c = |k: f64| constant(Scalar::F(k), x.dtype);
    let v = binary(Prim::Add, binary(Prim::Div, x.load(&vars(x.rank())), c(6.0)), c(0.5));
    let body = binary(Prim::Min, binary(Prim::Max, v, c(0.0)), c(1.0));
    Ok(vec![TensorValue::lazy(x.dtype, x.sizes.clone(), body)])
}

/// clamp_min / clamp_max: `clamp` with one bound.
fn clamp_one_side(lw: &mut Lowerer, a: &Args, bound: &str) -> R {
    let given = a.get(bound).cloned().ok_or_else(|| format!("missing argument '{bound}'"))?;
    let (min, max) = if bound == "min" { (given, none()) } else { (none(), given) };
    delegate(
        lw,
        a,
        "clamp.default",
        vec![("self", Argument::Tensor(tensor_arg(a, "self")?)), ("min", min), ("max", max)],
    )
}

fn tensor_arg(a: &Args, name: &str) -> Result<crate::frontend::schema::TensorArgument, String> {
    match a.get(name) {
        Some(Argument::Tensor(t)) => Ok(t.clone()),
        other => Err(format!("argument '{name}' should be a tensor, got {other:?}")),
    }
}

/// addcmul / addcdiv: `self + value * (tensor1 op tensor2)`, in the promoted dtype (a
/// division in its float dtype).
fn add_product(lw: &mut Lowerer, a: &Args, op: Prim) -> R {
    let (x, t1, t2) = (operand(lw, a, "self")?, operand(lw, a, "tensor1")?, operand(lw, a, "tensor2")?);
    let d = result_type(&[&x, &t1, &t2]);
    let d = if op == Prim::Div { float_of(d) } else { d };
    let value = match a.opt_scalar("value")? {
        Some(Scalar::F(v)) => v,
        Some(Scalar::I(v)) => v as f64,
        Some(Scalar::B(v)) => v as i64 as f64,
        None => 1.0,
    };
    let scale = constant(if d.is_float() { Scalar::F(value) } else { Scalar::I(value as i64) }, d);
    let out = map(&[&x, &t1, &t2], d, d, |v| {
        binary(Prim::Add, v[0].clone(), binary(Prim::Mul, scale.clone(), binary(op, v[1].clone(), v[2].clone())))
    })?;
    Ok(vec![out])
}

/// `div(self, other, rounding_mode="floor")`.
fn floor_divide(lw: &mut Lowerer, a: &Args) -> R {
    let mut args = same(a, &["self", "other"]);
    args.push(("rounding_mode", Argument::String("floor".into())));
    let op = if matches!(a.get("other"), Some(Argument::Tensor(_))) { "div.Tensor_mode" } else { "div.Scalar_mode" };
    delegate(lw, a, op, args)
}

/// The dimensions `dim` names (all of them when None or empty), normalized.
fn reduced_dims(a: &Args, rank: usize) -> Result<Vec<usize>, String> {
    match a.opt_ints("dim")? {
        Some(dims) if !dims.is_empty() => dims.iter().map(|&d| norm_dim(d, rank.max(1))).collect(),
        _ => Ok((0..rank).collect()),
    }
}

/// The vector `ord`-norm of `x` over `dims`, computed in `dtype`: `sum(|x|^p)^(1/p)`,
/// with p = 2, 1, inf (max), -inf (min) and 0 (the count of nonzeros) as their own forms.
fn vector_norm(
    lw: &mut Lowerer,
    x: &TensorValue,
    ord: f64,
    dims: &[usize],
    keepdim: bool,
    dtype: DType,
    name: &str,
) -> TensorValue {
    let c = |k: f64| constant(Scalar::F(k), dtype);
    let v = cast(x.load(&vars(x.rank())), dtype);
    let magnitude = unary(Prim::Abs, v.clone());
    let (body, op): (E, ReduceOp) = if ord == f64::INFINITY {
        (magnitude, ReduceOp::Max)
    } else if ord == f64::NEG_INFINITY {
        (magnitude, ReduceOp::Min)
    } else if ord == 0.0 {
        (cast(binary(Prim::Ne, v, c(0.0)), dtype), ReduceOp::Sum)
    } else if ord == 1.0 {
        (magnitude, ReduceOp::Sum)
    } else if ord == 2.0 {
        (binary(Prim::Mul, v.clone(), v), ReduceOp::Sum)
    } else {
        (binary(Prim::Pow, magnitude, c(ord)), ReduceOp::Sum)
    };
    let terms = TensorValue::lazy(dtype, x.sizes.clone(), body);
    let total = reduce(lw, &terms, dims, keepdim, op, dtype, name);
    let root = |t: E| {
        if ord == 2.0 {
            unary(Prim::Sqrt, t)
        } else if ord == 1.0 || ord == 0.0 || ord.is_infinite() {
            t
        } else {
            binary(Prim::Pow, t, c(1.0 / ord))
        }
    };
    TensorValue::lazy(dtype, total.sizes.clone(), root(total.load(&vars(total.rank()))))
}

fn linalg_vector_norm(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let dtype = a.opt_dtype("dtype")?.unwrap_or(x.dtype);
    if !dtype.is_float() {
        return Err(format!("linalg.vector_norm is defined for floating dtypes only, not {dtype}"));
    }
    let ord = match a.opt_scalar("ord")? {
        Some(Scalar::F(v)) => v,
        Some(Scalar::I(v)) => v as f64,
        Some(Scalar::B(_)) => return Err("ord must be a number".into()),
        None => 2.0,
    };
    let dims = reduced_dims(a, x.rank())?;
    let keepdim = a.bool_or("keepdim", false)?;
    Ok(vec![vector_norm(lw, &x, ord, &dims, keepdim, dtype, &a.node_name())])
}

/// `v * (g / ||v||)`, the 2-norm over every dimension of `v` but `dim` (kept, so it
/// broadcasts against `v` like `g`).
fn weight_norm(lw: &mut Lowerer, a: &Args) -> R {
    let (v, g) = (a.tensor(lw, "v")?, a.tensor(lw, "g")?);
    let dim = norm_dim(a.int_or("dim", 0)?, v.rank().max(1))?;
    let dtype = float_of(v.dtype);
    let others: Vec<usize> = (0..v.rank()).filter(|&d| d != dim).collect();
    let norm = vector_norm(lw, &v, 2.0, &others, true, dtype, &a.node_name());
    let at = vars(v.rank());
    let body = binary(
        Prim::Mul,
        cast(v.load(&at), dtype),
        binary(Prim::Div, cast(g.expand(&v.sizes)?.load(&at), dtype), norm.expand(&v.sizes)?.load(&at)),
    );
    Ok(vec![TensorValue::lazy(dtype, v.sizes.clone(), body)])
}
