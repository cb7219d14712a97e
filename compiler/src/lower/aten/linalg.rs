//! Matrix products, for every dtype PyTorch multiplies matrices of:
//! - float32/float64: the support library's GEMM, an extern kernel on strided operands;
//! - float16/bfloat16: the float32 GEMM on widened copies, rounded once at the end
//!   (PyTorch accumulates them in float32 too);
//! - integers: a sum reduction of products, wrapping on overflow as PyTorch does.

use super::reduction::reduce;
use super::registry::LowerFn;
use crate::ir::expr::{binary, cast, constant};
use crate::ir::{BufKind, Kernel, Matmul, Prim, ReduceOp, Scalar, StridedRef};
use crate::lower::args::Args;
use crate::lower::tensor::{vars, TensorValue};
use crate::lower::Lowerer;
use aotc_abi::gemm::Activation;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

type R = Result<Vec<TensorValue>, String>;

pub const OPS: &[(&str, LowerFn)] = &[("mm.default", mm), ("addmm.default", addmm), ("bmm.default", bmm)];

/// A term added to the product: `beta * value`, `value` broadcast to the result's shape.
pub type Addend<'a> = Option<(&'a TensorValue, f64)>;

fn check_dtype(a: &TensorValue, b: &TensorValue) -> Result<DType, String> {
    if a.dtype != b.dtype {
        return Err(format!("operands differ in dtype: {} vs {}", a.dtype, b.dtype));
    }
    match a.dtype {
        DType::Bool => Err("matrix products of bool are not defined (torch refuses them too)".into()),
        d => Ok(d),
    }
}

/// Adds a leading batch dimension of size 1 to a 2-D strided reference.
fn batched(r: StridedRef) -> StridedRef {
    let mut strides = r.strides;
    strides.insert(0, SymExpr::Int(0));
    StridedRef { strides, ..r }
}

/// `alpha * a @ b + beta * addend` for 3-D [batch, m, k] x [batch, k, n] operands (or
/// 2-D [m, k] x [k, n]) of one dtype. As in torch, `beta == 0` ignores the addend (NaN
/// in it included).
pub fn emit(
    lw: &mut Lowerer,
    name: &str,
    a: &TensorValue,
    b: &TensorValue,
    addend: Addend,
    alpha: f64,
) -> Result<TensorValue, String> {
    let dtype = check_dtype(a, b)?;
    let (ra, rb) = (a.rank(), b.rank());
    let (k, k2) = (&a.sizes[ra - 1], &b.sizes[rb - 2]);
    if k != k2 {
        return Err(format!("inner dimensions differ: [{}, {k}] @ [{k2}, {}]", a.sizes[ra - 2], b.sizes[rb - 1]));
    }
    let addend = addend.filter(|(_, beta)| *beta != 0.0);
    match dtype {
        DType::F32 | DType::F64 => gemm(lw, name, a, b, addend, alpha),
        DType::F16 | DType::BF16 => {
            let widen = |t: &TensorValue| TensorValue::lazy(DType::F32, t.sizes.clone(), t.load(&vars(t.rank())));
            let wide_addend = addend.map(|(c, beta)| (widen(c), beta));
            let product =
                gemm(lw, name, &widen(a), &widen(b), wide_addend.as_ref().map(|(c, beta)| (c, *beta)), alpha)?;
            Ok(TensorValue::lazy(dtype, product.sizes.clone(), product.load(&vars(product.rank()))))
        }
        _ => integer_product(lw, name, a, b, addend, alpha),
    }
}

/// The sizes of the product of `a` and `b` (2-D or 3-D, checked by the caller).
fn product_sizes(a: &TensorValue, b: &TensorValue) -> Vec<SymExpr> {
    let (ra, rb) = (a.rank(), b.rank());
    a.sizes[..ra - 1].iter().chain([&b.sizes[rb - 1]]).cloned().collect()
}

/// `beta * addend`, broadcast to `sizes` and computed in `dtype`, as a lazy value.
fn scaled_addend(addend: &TensorValue, beta: f64, sizes: &[SymExpr], dtype: DType) -> Result<TensorValue, String> {
    let mut body = cast(addend.expand(sizes)?.load(&vars(sizes.len())), dtype);
    if beta != 1.0 {
        body = binary(Prim::Mul, body, constant(Scalar::F(beta), dtype));
    }
    Ok(TensorValue::lazy(dtype, sizes.to_vec(), body))
}

/// The GEMM extern kernel (float32/float64): the addend, when there is one, is written
/// into the result first and the GEMM accumulates onto it.
fn gemm(
    lw: &mut Lowerer,
    name: &str,
    a: &TensorValue,
    b: &TensorValue,
    addend: Addend,
    alpha: f64,
) -> Result<TensorValue, String> {
    let dtype = a.dtype;
    let sizes = product_sizes(a, b);
    let three_d = a.rank() == 3;
    let (m, k, n) = (a.sizes[a.rank() - 2].clone(), a.sizes[a.rank() - 1].clone(), b.sizes[b.rank() - 1].clone());
    let batch = if three_d { a.sizes[0].clone() } else { SymExpr::Int(1) };
    let (_, sa) = lw.strided(a, &format!("{name}.lhs"));
    let (_, sb) = lw.strided(b, &format!("{name}.rhs"));
    let (sa, sb) = if three_d { (sa, sb) } else { (batched(sa), batched(sb)) };
    let out = match addend {
        Some((c, beta)) => lw.materialize(&scaled_addend(c, beta, &sizes, dtype)?, name),
        None => lw.prog.add_buffer(name, dtype, sizes.clone(), BufKind::Scratch),
    };
    let accumulate = addend.is_some();
    lw.prog.kernels.push(Kernel::Matmul(Box::new(Matmul {
        out,
        dtype,
        batch,
        m,
        n,
        k,
        a: sa,
        b: sb,
        alpha,
        accumulate,
        packed_b: false,
        bias: None,
        activation: Activation::None,
    })));
    Ok(TensorValue::view_of(out, dtype, sizes))
}

/// Integer products: `out[b, i, j] = sum over p of a[b, i, p] * b[b, p, j]`, a reduction
/// in the operands' dtype, then scaled and added to lazily.
fn integer_product(
    lw: &mut Lowerer,
    name: &str,
    a: &TensorValue,
    b: &TensorValue,
    addend: Addend,
    alpha: f64,
) -> Result<TensorValue, String> {
    let dtype = a.dtype;
    let sizes = product_sizes(a, b);
    let three_d = a.rank() == 3;
    let (a3, b3) = if three_d { (a.clone(), b.clone()) } else { (a.unsqueeze(0), b.unsqueeze(0)) };
    // Variables: batch, row, column, then the reduced inner index.
    let v = vars(4);
    let product = binary(
        Prim::Mul,
        a3.load(&[v[0].clone(), v[1].clone(), v[3].clone()]),
        b3.load(&[v[0].clone(), v[3].clone(), v[2].clone()]),
    );
    let ranges = vec![a3.sizes[0].clone(), a3.sizes[1].clone(), b3.sizes[2].clone(), a3.sizes[2].clone()];
    let sum = reduce(lw, &TensorValue::lazy(dtype, ranges, product), &[3], false, ReduceOp::Sum, dtype, name);
    let sum = if three_d { sum } else { sum.squeeze(&[0]) };
    let idx = vars(sizes.len());
    let mut body = sum.load(&idx);
    if alpha != 1.0 {
        body = binary(Prim::Mul, body, constant(Scalar::F(alpha), dtype));
    }
    if let Some((c, beta)) = addend {
        body = binary(Prim::Add, body, scaled_addend(c, beta, &sizes, dtype)?.load(&idx));
    }
    Ok(TensorValue::lazy(dtype, sizes, body))
}

fn mm(lw: &mut Lowerer, a: &Args) -> R {
    let (x, y) = (a.tensor(lw, "self")?, a.tensor(lw, "mat2")?);
    if x.rank() != 2 || y.rank() != 2 {
        return Err(format!("mm expects 2-D operands, got ranks {} and {}", x.rank(), y.rank()));
    }
    Ok(vec![emit(lw, &a.node_name(), &x, &y, None, 1.0)?])
}

fn bmm(lw: &mut Lowerer, a: &Args) -> R {
    let (x, y) = (a.tensor(lw, "self")?, a.tensor(lw, "mat2")?);
    if x.rank() != 3 || y.rank() != 3 || x.sizes[0] != y.sizes[0] {
        return Err("bmm expects 3-D operands with one batch size".into());
    }
    Ok(vec![emit(lw, &a.node_name(), &x, &y, None, 1.0)?])
}

/// `beta * bias + alpha * (mat1 @ mat2)`.
fn addmm(lw: &mut Lowerer, a: &Args) -> R {
    let (bias, x, y) = (a.tensor(lw, "self")?, a.tensor(lw, "mat1")?, a.tensor(lw, "mat2")?);
    if x.rank() != 2 || y.rank() != 2 {
        return Err(format!("addmm expects 2-D operands, got ranks {} and {}", x.rank(), y.rank()));
    }
    let beta = a.opt_scalar("beta")?.unwrap_or(Scalar::F(1.0)).as_f64();
    let alpha = a.opt_scalar("alpha")?.unwrap_or(Scalar::F(1.0)).as_f64();
    Ok(vec![emit(lw, &a.node_name(), &x, &y, Some((&bias, beta)), alpha)?])
}
