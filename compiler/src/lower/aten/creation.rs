//! Tensors made from nothing but sizes and values: full, fill, empty, arange,
//! scalar_tensor.

use super::registry::LowerFn;
use crate::ir::expr::{self, binary, cast, constant, Affine};
use crate::ir::{Prim, Scalar};
use crate::lower::args::Args;
use crate::lower::tensor::TensorValue;
use crate::lower::Lowerer;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

type R = Result<Vec<TensorValue>, String>;

pub const OPS: &[(&str, LowerFn)] = &[
    ("full.default", full),
    ("full_like.default", full_like),
    ("zeros_like.default", |lw, a| fill_like(lw, a, Scalar::I(0))),
    ("ones_like.default", |lw, a| fill_like(lw, a, Scalar::I(1))),
    ("fill.Scalar", |lw, a| {
        let v = a.scalar("value")?;
        fill_like(lw, a, v)
    }),
    ("empty.memory_format", empty),
    ("empty_strided.default", empty_strided),
    ("scalar_tensor.default", scalar_tensor),
    ("arange.start_step", arange),
    ("arange.start", arange),
    ("arange.default", arange),
];

/// The dtype torch infers for a python number when none is given.
fn default_dtype(s: Scalar) -> DType {
    match s {
        Scalar::F(_) => DType::F32,
        Scalar::I(_) => DType::I64,
        Scalar::B(_) => DType::Bool,
    }
}

fn full(lw: &mut Lowerer, a: &Args) -> R {
    let sizes = a.sym_ints(lw, "size")?;
    let v = a.scalar("fill_value")?;
    let d = a.opt_dtype("dtype")?.unwrap_or(default_dtype(v));
    Ok(vec![TensorValue::lazy(d, sizes, constant(v, d))])
}

fn full_like(lw: &mut Lowerer, a: &Args) -> R {
    let v = a.scalar("fill_value")?;
    fill_like(lw, a, v)
}

fn fill_like(lw: &mut Lowerer, a: &Args, v: Scalar) -> R {
    let x = a.tensor(lw, "self")?;
    let d = a.opt_dtype("dtype")?.unwrap_or(x.dtype);
    Ok(vec![TensorValue::lazy(d, x.sizes.clone(), constant(v, d))])
}

/// Uninitialised memory in torch; zeros here, so that results never depend on stale data.
fn empty(lw: &mut Lowerer, a: &Args) -> R {
    let sizes = a.sym_ints(lw, "size")?;
    let d = a.opt_dtype("dtype")?.unwrap_or(DType::F32);
    Ok(vec![TensorValue::lazy(d, sizes, constant(Scalar::I(0), d))])
}

/// Its strides do not matter: every layout of zeros reads the same.
fn empty_strided(lw: &mut Lowerer, a: &Args) -> R {
    let (sizes, strides) = (a.sym_ints(lw, "size")?, a.sym_ints(lw, "stride")?);
    if sizes.len() != strides.len() {
        return Err(format!("empty_strided got {} sizes and {} strides", sizes.len(), strides.len()));
    }
    empty(lw, a)
}

fn scalar_tensor(_lw: &mut Lowerer, a: &Args) -> R {
    let v = a.scalar("s")?;
    let d = a.opt_dtype("dtype")?.unwrap_or(DType::F32);
    Ok(vec![TensorValue::lazy(d, vec![], constant(v, d))])
}

/// `start + i * step` for i in 0..ceil((end - start) / step).
fn arange(lw: &mut Lowerer, a: &Args) -> R {
    let symbolic = |name| matches!(a.get(name), Some(crate::frontend::schema::Argument::SymInt(_)));
    if ["start", "end", "step"].into_iter().any(symbolic) {
        return arange_symbolic(lw, a);
    }
    let start = a.opt_scalar("start")?.unwrap_or(Scalar::I(0));
    let end = a.scalar("end")?;
    let step = a.opt_scalar("step")?.unwrap_or(Scalar::I(1));
    let all_int = [start, end, step].iter().all(|s| matches!(s, Scalar::I(_)));
    let d = a.opt_dtype("dtype")?.unwrap_or(if all_int { DType::I64 } else { DType::F32 });
    let (s, e, st) = (start.as_f64(), end.as_f64(), step.as_f64());
    if st == 0.0 {
        return Err("arange step must be non-zero".into());
    }
    let n = ((e - s) / st).ceil().max(0.0);
    if !n.is_finite() || n >= i64::MAX as f64 {
        return Err(format!("arange({s}, {e}, {st}) has no finite length"));
    }
    let n = n as i64;
    let i = expr::index_value(Affine::var(0));
    let body = if all_int && !d.is_float() {
        cast(binary(Prim::Add, constant(start, DType::I64), binary(Prim::Mul, i, constant(step, DType::I64))), d)
    } else {
        let f = DType::F64;
        cast(binary(Prim::Add, constant(Scalar::F(s), f), binary(Prim::Mul, cast(i, f), constant(Scalar::F(st), f))), d)
    };
    Ok(vec![TensorValue::lazy(d, vec![SymExpr::Int(n)], body)])
}

/// arange with integer bounds of which some are sizes known at run time (a sequence length):
/// `start + i * step` for i in 0..max(0, ceil((end - start) / step)).
fn arange_symbolic(lw: &mut Lowerer, a: &Args) -> R {
    let bound = |name: &str, default: i64| -> Result<SymExpr, String> {
        match a.get(name) {
            None => Ok(SymExpr::Int(default)),
            Some(_) => a.sym_int(lw, name),
        }
    };
    let (start, end) = (bound("start", 0)?, bound("end", 0)?);
    let step = a.int_or("step", 1)?;
    if step <= 0 {
        return Err(format!("arange with a symbolic bound needs a positive constant step, got {step}"));
    }
    let d = a.opt_dtype("dtype")?.unwrap_or(DType::I64);
    let span = SymExpr::add([end, SymExpr::mul([start.clone(), SymExpr::Int(-1)]), SymExpr::Int(step - 1)]);
    let n = SymExpr::floor_div(span, SymExpr::Int(step));
    let n = if lw.non_negative(&n) { n } else { SymExpr::max(n, SymExpr::Int(0)) };
    let i = expr::index_value(Affine::var(0));
    let first = expr::index_value(Affine::constant(start));
    let body = cast(binary(Prim::Add, first, binary(Prim::Mul, i, constant(Scalar::I(step), DType::I64))), d);
    Ok(vec![TensorValue::lazy(d, vec![n], body)])
}
