//! complex64 values, which exist only between operators inside a graph (FFTs and what
//! joins them). A complex value is a float32 value with a hidden trailing dimension of 2
//! holding (re, im), torch's `view_as_real` layout, and `TensorValue::complex` set.
//!
//! Any other lowering would read that hidden dimension as data, so [`route`] sends every
//! node with a complex operand or result to the lowerings of [`OPS`], written for them,
//! and refuses the node when its operator is not there.

use super::fft;
use super::registry::LowerFn;
use super::view::slice_range;
use crate::frontend::schema::{Argument, Node};
use crate::ir::expr::{binary, cast, constant, index_value, int, select, unary, E};
use crate::ir::{Affine, Prim, Scalar};
use crate::lower::args::Args;
use crate::lower::tensor::{norm_dim, vars, TensorValue};
use crate::lower::{output_names, tensor_names, Lowerer};
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

type R = Result<Vec<TensorValue>, String>;

/// torch.export's ScalarType code of complex64.
pub const COMPLEX64: i64 = 10;

/// The codes of complex32, complex64 and complex128.
const COMPLEX_CODES: std::ops::RangeInclusive<i64> = 9..=11;

/// The lowerings that accept complex operands or give complex results.
const OPS: &[(&str, LowerFn)] = &[
    ("_fft_r2c.default", fft::r2c),
    ("_fft_c2r.default", fft::c2r),
    ("_to_copy.default", to_copy),
    ("slice.Tensor", slice),
    ("mul.Tensor", scale),
    ("mul.Scalar", scale),
    ("abs.default", abs),
];

/// A recorded dtype code aotc does not compute in, named for a message.
pub fn code_name(code: i64) -> String {
    match code {
        9 => "complex32".into(),
        11 => "complex128 (complex tensors are supported as complex64 only)".into(),
        c => format!("code {c}"),
    }
}

fn dtype_name(code: i64) -> String {
    DType::from_torch_code(code).map_or_else(|| code_name(code), |d| d.to_string())
}

/// The lowering for `node`: `lower_fn` when no complex value is involved, else the one
/// written for complex values, if its operator has one.
pub fn route(lw: &Lowerer, node: &Node, op: &str, lower_fn: LowerFn) -> Result<LowerFn, String> {
    let complex_input =
        node.inputs.iter().flat_map(|a| tensor_names(&a.arg)).any(|name| lw.value(&name).is_ok_and(|v| v.complex));
    // Recorded complex results of any width: complex32 and complex128 are refused by the
    // lowerings below with a message naming them.
    let complex_result =
        output_names(node).iter().any(|name| lw.meta(name).is_ok_and(|m| COMPLEX_CODES.contains(&m.dtype)));
    if !complex_input && !complex_result {
        return Ok(lower_fn);
    }
    match OPS.iter().find(|(name, _)| *name == op) {
        Some((_, f)) => Ok(*f),
        None if complex_input => Err(format!("complex inputs are not supported by aten.{op}")),
        None => Err(format!("complex results are not supported by aten.{op}")),
    }
}

/// A complex value of logical `sizes` whose body gives (re, im) by the hidden index,
/// the variable after the logical ones.
fn complex_lazy(sizes: &[SymExpr], body: E) -> TensorValue {
    let sizes = sizes.iter().cloned().chain([SymExpr::Int(2)]).collect();
    TensorValue { complex: true, ..TensorValue::lazy(DType::F32, sizes, body) }
}

/// The real part (`which` 0) or imaginary part (1) of complex `x` at the logical index `at`.
fn part(x: &TensorValue, at: &[Affine], which: i64) -> E {
    x.load(&at.iter().cloned().chain([Affine::constant(SymExpr::Int(which))]).collect::<Vec<_>>())
}

/// In a complex body of logical rank `rank`: whether the element is the real part.
fn real_part(rank: usize) -> E {
    binary(Prim::Eq, index_value(Affine::var(rank)), int(0))
}

fn zero() -> E {
    constant(Scalar::F(0.0), DType::F32)
}

/// `self`, which must be complex: a real one here means a complex result was recorded for
/// an operator that gives a real one.
fn complex_self(lw: &Lowerer, a: &Args) -> Result<TensorValue, String> {
    let x = a.tensor(lw, "self")?;
    if !x.complex {
        return Err(format!("self is {}, but a complex result is recorded", x.dtype));
    }
    Ok(x)
}

/// _to_copy to complex64: a real value becomes (x, 0); a complex one is copied. Casting
/// complex to real (which drops the imaginary part) is refused.
fn to_copy(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let code = match a.get("dtype") {
        None | Some(Argument::None(_)) => None,
        Some(Argument::ScalarType(code)) => Some(*code),
        Some(other) => return Err(format!("argument 'dtype' should be a dtype, got {other:?}")),
    };
    let rank = x.logical_sizes().len();
    match (x.complex, code) {
        (true, None | Some(COMPLEX64)) => Ok(vec![complex_lazy(x.logical_sizes(), x.load(&vars(rank + 1)))]),
        (false, Some(COMPLEX64)) if x.dtype == DType::F64 => {
            Err("float64 to complex64 is not supported: complex tensors hold float32 parts, and float64 FFTs (complex128) are not supported".into())
        }
        (false, Some(COMPLEX64)) => {
            Ok(vec![complex_lazy(&x.sizes, select(real_part(rank), cast(x.load(&vars(rank)), DType::F32), zero()))])
        }
        (true, Some(c)) => Err(format!("casting complex64 to {} is not supported", dtype_name(c))),
        (false, Some(c)) => Err(format!("_to_copy to {} is not supported", dtype_name(c))),
        (false, None) => Err(format!("self is {} and no dtype is given, but a complex result is recorded", x.dtype)),
    }
}

/// slice.Tensor of a complex value: the hidden dimension is left alone.
fn slice(lw: &mut Lowerer, a: &Args) -> R {
    let x = complex_self(lw, a)?;
    if x.logical_sizes().is_empty() {
        return Err("cannot slice a 0-dimensional tensor".into());
    }
    let dim = norm_dim(a.int_or("dim", 0)?, x.logical_sizes().len())?;
    let (start, len, step) = slice_range(lw, a, &x.sizes[dim])?;
    Ok(vec![x.slice(dim, start, len, step)])
}

/// mul by a real number `s`: complex multiplication by (s, 0), `(re s - im 0, im s + re 0)`
/// as torch computes it, so that an infinite or NaN part spreads to both (plain scaling
/// would not).
fn scale(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let s = match a.get("other") {
        Some(Argument::Int(_) | Argument::Float(_) | Argument::Bool(_)) if x.complex => a.scalar("other")?,
        _ => {
            return Err(
                "aten.mul of a complex tensor is supported only as complex `self` times a real number `other`".into()
            )
        }
    };
    let rank = x.logical_sizes().len();
    let at = vars(rank);
    let (re, im) = (part(&x, &at, 0), part(&x, &at, 1));
    let (s, zero) = (constant(s, DType::F32), zero());
    let times = |v: &E, k: &E| binary(Prim::Mul, v.clone(), k.clone());
    let real = binary(Prim::Sub, times(&re, &s), times(&im, &zero));
    let imag = binary(Prim::Add, times(&im, &s), times(&re, &zero));
    Ok(vec![complex_lazy(x.logical_sizes(), select(real_part(rank), real, imag))])
}

/// abs: the magnitude, as hypot does it (without overflow, and infinite when either part
/// is, NaN or not), a float32 value.
fn abs(lw: &mut Lowerer, a: &Args) -> R {
    let x = complex_self(lw, a)?;
    let rank = x.logical_sizes().len();
    let at = vars(rank);
    let f64_part = |p: i64| cast(part(&x, &at, p), DType::F64);
    let (re, im) = (f64_part(0), f64_part(1));
    let inf = constant(Scalar::F(f64::INFINITY), DType::F64);
    let infinite = |v: &E| binary(Prim::Eq, unary(Prim::Abs, v.clone()), inf.clone());
    let squares =
        binary(Prim::Add, binary(Prim::Mul, re.clone(), re.clone()), binary(Prim::Mul, im.clone(), im.clone()));
    let magnitude = select(binary(Prim::Or, infinite(&re), infinite(&im)), inf.clone(), unary(Prim::Sqrt, squares));
    Ok(vec![TensorValue::lazy(DType::F32, x.logical_sizes().to_vec(), magnitude)])
}
