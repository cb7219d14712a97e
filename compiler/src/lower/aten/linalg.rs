//! Matrix products: extern GEMM kernels on strided operands.

use super::registry::LowerFn;
use crate::ir::expr::{binary, cast, constant};
use crate::ir::{BufKind, Kernel, Matmul, Prim, Scalar, StridedRef};
use crate::lower::args::Args;
use crate::lower::tensor::{vars, TensorValue};
use crate::lower::Lowerer;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

type R = Result<Vec<TensorValue>, String>;

pub const OPS: &[(&str, LowerFn)] = &[("mm.default", mm), ("addmm.default", addmm), ("bmm.default", bmm)];

fn check_dtype(a: &TensorValue, b: &TensorValue) -> Result<DType, String> {
    if a.dtype != b.dtype {
        return Err(format!("operands differ in dtype: {} vs {}", a.dtype, b.dtype));
    }
    match a.dtype {
        DType::F32 | DType::F64 => Ok(a.dtype),
        d => Err(format!("matrix products of {d} are not supported yet (float32/float64 only)")),
    }
}

/// Adds a leading batch dimension of size 1 to a 2-D strided reference.
fn batched(r: StridedRef) -> StridedRef {
    let mut strides = r.strides;
    strides.insert(0, SymExpr::Int(0));
    StridedRef { strides, ..r }
}

/// Emits `out = alpha * a @ b (+ out)` for 3-D [batch, m, k] x [batch, k, n] operands
/// (or 2-D [m, k] x [k, n]); `out`, when given, already holds the addend.
pub fn emit(lw: &mut Lowerer, name: &str, a: &TensorValue, b: &TensorValue, out: Option<crate::ir::BufId>, alpha: f64) -> Result<TensorValue, String> {
    let dtype = check_dtype(a, b)?;
    let (ra, rb) = (a.rank(), b.rank());
    let (m, k) = (a.sizes[ra - 2].clone(), a.sizes[ra - 1].clone());
    let (k2, n) = (b.sizes[rb - 2].clone(), b.sizes[rb - 1].clone());
    if k != k2 {
        return Err(format!("inner dimensions differ: [{m}, {k}] @ [{k2}, {n}]"));
    }
    let batch = if ra == 3 { a.sizes[0].clone() } else { SymExpr::Int(1) };
    let (_, sa) = lw.strided(a, &format!("{name}.lhs"));
    let (_, sb) = lw.strided(b, &format!("{name}.rhs"));
    let (sa, sb) = if ra == 3 { (sa, sb) } else { (batched(sa), batched(sb)) };
    let sizes: Vec<SymExpr> = if ra == 3 { vec![batch.clone(), m.clone(), n.clone()] } else { vec![m.clone(), n.clone()] };
    let accumulate = out.is_some();
    let out = out.unwrap_or_else(|| lw.prog.add_buffer(name, dtype, sizes.clone(), BufKind::Scratch));
    lw.prog.kernels.push(Kernel::Matmul(Box::new(Matmul { out, dtype, batch, m, n, k, a: sa, b: sb, alpha, accumulate })));
    Ok(TensorValue::view_of(out, dtype, sizes))
}

fn name(a: &Args) -> String {
    a.node.name.clone().unwrap_or_else(|| "matmul".into())
}

fn mm(lw: &mut Lowerer, a: &Args) -> R {
    let (x, y) = (a.tensor(lw, "self")?, a.tensor(lw, "mat2")?);
    if x.rank() != 2 || y.rank() != 2 {
        return Err(format!("mm expects 2-D operands, got ranks {} and {}", x.rank(), y.rank()));
    }
    Ok(vec![emit(lw, &name(a), &x, &y, None, 1.0)?])
}

fn bmm(lw: &mut Lowerer, a: &Args) -> R {
    let (x, y) = (a.tensor(lw, "self")?, a.tensor(lw, "mat2")?);
    if x.rank() != 3 || y.rank() != 3 || x.sizes[0] != y.sizes[0] {
        return Err("bmm expects 3-D operands with one batch size".into());
    }
    Ok(vec![emit(lw, &name(a), &x, &y, None, 1.0)?])
}

/// `beta * bias + alpha * (mat1 @ mat2)`: the broadcast bias is written first, then the
/// GEMM accumulates onto it.
fn addmm(lw: &mut Lowerer, a: &Args) -> R {
    let (bias, x, y) = (a.tensor(lw, "self")?, a.tensor(lw, "mat1")?, a.tensor(lw, "mat2")?);
    if x.rank() != 2 || y.rank() != 2 {
        return Err(format!("addmm expects 2-D operands, got ranks {} and {}", x.rank(), y.rank()));
    }
    let beta = a.opt_scalar("beta")?.unwrap_or(Scalar::F(1.0)).as_f64();
    let alpha = a.opt_scalar("alpha")?.unwrap_or(Scalar::F(1.0)).as_f64();
    let dtype = check_dtype(&x, &y)?;
    let sizes = vec![x.sizes[0].clone(), y.sizes[1].clone()];
    let b = bias.expand(&sizes)?;
    let mut body = cast(b.load(&vars(2)), dtype);
    if beta != 1.0 {
        body = binary(Prim::Mul, body, constant(Scalar::F(beta), dtype));
    }
    let out = lw.materialize(&TensorValue::lazy(dtype, sizes, body), &name(a));
    Ok(vec![emit(lw, &name(a), &x, &y, Some(out), alpha)?])
}
