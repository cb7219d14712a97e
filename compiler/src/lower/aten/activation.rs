//! Activation functions with parameters: hardtanh (relu6), elu (selu, celu) and
//! leaky_relu. relu, gelu and silu are plain pointwise ops, in `pointwise`.

use super::registry::LowerFn;
use crate::ir::expr::{binary, constant, select, unary, E};
use crate::ir::{Prim, Scalar};
use crate::lower::args::Args;
use crate::lower::tensor::{vars, TensorValue};
use crate::lower::Lowerer;
use aotc_abi::DType;

type R = Result<Vec<TensorValue>, String>;

pub const OPS: &[(&str, LowerFn)] =
    &[("hardtanh.default", hardtanh), ("elu.default", elu), ("leaky_relu.default", leaky_relu)];

/// `f(x)` for each element of `self`, in its dtype: any dtype but bool, or only floating
/// ones when `float_only` (torch has no integer kernel for them).
fn elementwise(lw: &mut Lowerer, a: &Args, float_only: bool, f: impl Fn(&E) -> E) -> R {
    let x = a.tensor(lw, "self")?;
    if x.dtype == DType::Bool || (float_only && !x.dtype.is_float()) {
        return Err(format!("not defined for {} tensors", x.dtype));
    }
    let body = f(&x.load(&vars(x.rank())));
    Ok(vec![TensorValue::lazy(x.dtype, x.sizes.clone(), body)])
}

/// clamp(x, min_val, max_val); NaN stays NaN.
fn hardtanh(lw: &mut Lowerer, a: &Args) -> R {
    let lo = a.opt_scalar("min_val")?.unwrap_or(Scalar::I(-1));
    let hi = a.opt_scalar("max_val")?.unwrap_or(Scalar::I(1));
    elementwise(lw, a, false, |x| {
        let at_least_lo = binary(Prim::Max, x.clone(), constant(lo, x.dtype));
        binary(Prim::Min, at_least_lo, constant(hi, x.dtype))
    })
}

/// `scale * x` for x > 0, else `scale * alpha * (exp(input_scale * x) - 1)`.
fn elu(lw: &mut Lowerer, a: &Args) -> R {
    let number = |name, default| a.opt_scalar(name).map(|s| s.map_or(default, Scalar::as_f64));
    let (alpha, scale, input_scale) = (number("alpha", 1.0)?, number("scale", 1.0)?, number("input_scale", 1.0)?);
    elementwise(lw, a, true, |x| {
        let c = |v: f64| constant(Scalar::F(v), x.dtype);
        let negative =
            binary(Prim::Mul, unary(Prim::Expm1, binary(Prim::Mul, x.clone(), c(input_scale))), c(alpha * scale));
        let positive = binary(Prim::Mul, x.clone(), c(scale));
        select(binary(Prim::Le, x.clone(), c(0.0)), negative, positive)
    })
}

/// x for x > 0, else `negative_slope * x`.
fn leaky_relu(lw: &mut Lowerer, a: &Args) -> R {
    let slope = a.opt_scalar("negative_slope")?.map_or(0.01, Scalar::as_f64);
    elementwise(lw, a, true, |x| {
        let zero = constant(Scalar::F(0.0), x.dtype);
        select(
            binary(Prim::Gt, x.clone(), zero),
            x.clone(),
            binary(Prim::Mul, x.clone(), constant(Scalar::F(slope), x.dtype)),
        )
    })
}
