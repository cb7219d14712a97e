//! Divisions and remainders: true, truncating and floor division (`div` and its
//! rounding_mode), `remainder` (python's sign rule: the divisor's sign) and `fmod` (C's:
//! the dividend's sign).
//!
//! On integers these never trap (see `Prim::Div`): where torch raises ZeroDivisionError
//! for a zero divisor, the generated code gives 0.

use super::{float_binary, one, R};
use crate::frontend::schema::Argument;
use crate::ir::expr::{binary, constant, select, unary, E};
use crate::ir::{Prim, Scalar};
use crate::lower::args::Args;
use crate::lower::aten::promote::{map, operand, result_type};
use crate::lower::Lowerer;

/// div.Tensor, div.Scalar and their `_mode` overloads.
pub fn div(lw: &mut Lowerer, a: &Args) -> R {
    match rounding_mode(a)? {
        None => float_binary(lw, a, Prim::Div),
        Some("trunc") => combine(lw, a, truncating_div),
        Some("floor") => combine(lw, a, floor_div),
        Some(other) => {
            Err(format!("div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '{other}'"))
        }
    }
}

pub fn remainder(lw: &mut Lowerer, a: &Args) -> R {
    combine(lw, a, |x, y| {
        let m = binary(Prim::Fmod, x.clone(), y.clone());
        select(signs_differ(&m, y), binary(Prim::Add, m.clone(), y.clone()), m)
    })
}

pub fn fmod(lw: &mut Lowerer, a: &Args) -> R {
    combine(lw, a, |x, y| binary(Prim::Fmod, x.clone(), y.clone()))
}

fn rounding_mode<'a>(a: &Args<'a>) -> Result<Option<&'a str>, String> {
    match a.get("rounding_mode") {
        None | Some(Argument::None(_)) => Ok(None),
        Some(Argument::String(m)) => Ok(Some(m)),
        Some(other) => Err(format!("argument 'rounding_mode' should be a string or None, got {other:?}")),
    }
}

/// `f(self, other)` in their promoted dtype, which the result keeps.
fn combine(lw: &mut Lowerer, a: &Args, f: impl Fn(&E, &E) -> E) -> R {
    let (x, y) = (operand(lw, a, "self")?, operand(lw, a, "other")?);
    let d = result_type(&[&x, &y]);
    one(map(&[&x, &y], d, d, |v| f(&v[0], &v[1]))?)
}

/// Is `rem`, the C remainder of a division by `divisor`, non-zero and of the other sign?
/// Then the floor quotient is one less than the truncated one.
fn signs_differ(rem: &E, divisor: &E) -> E {
    let zero = constant(Scalar::I(0), rem.dtype);
    let negative = |v: &E| binary(Prim::Lt, v.clone(), zero.clone());
    let nonzero = binary(Prim::Ne, rem.clone(), zero.clone());
    binary(Prim::And, nonzero, binary(Prim::Ne, negative(rem), negative(divisor)))
}

fn truncating_div(x: &E, y: &E) -> E {
    let q = binary(Prim::Div, x.clone(), y.clone());
    if x.dtype.is_float() {
        unary(Prim::Trunc, q)
    } else {
        q
    }
}

fn floor_div(x: &E, y: &E) -> E {
    if x.dtype.is_float() {
        return floor_div_float(x, y);
    }
    let q = binary(Prim::Div, x.clone(), y.clone());
    let rem = binary(Prim::Fmod, x.clone(), y.clone());
    select(signs_differ(&rem, y), binary(Prim::Sub, q.clone(), constant(Scalar::I(1), q.dtype)), q)
}

/// torch's `div_floor_floating`: the quotient of `x - fmod(x, y)`, which is exact, then
/// floored and rounded to the nearest integer, so that it agrees with `remainder`.
/// A zero divisor gives the IEEE quotient; a zero result has the quotient's sign.
fn floor_div_float(x: &E, y: &E) -> E {
    let c = |v: f64| constant(Scalar::F(v), x.dtype);
    let quotient = binary(Prim::Div, x.clone(), y.clone());
    let rem = binary(Prim::Fmod, x.clone(), y.clone());
    let exact = binary(Prim::Div, binary(Prim::Sub, x.clone(), rem.clone()), y.clone());
    let exact = select(signs_differ(&rem, y), binary(Prim::Sub, exact.clone(), c(1.0)), exact);
    let floor = unary(Prim::Floor, exact.clone());
    let round_up = binary(Prim::Gt, binary(Prim::Sub, exact.clone(), floor.clone()), c(0.5));
    let floor = select(round_up, binary(Prim::Add, floor.clone(), c(1.0)), floor);
    // |x| < |y| here, so the quotient is finite and `quotient * 0` is copysign(0, quotient).
    let signed_zero = binary(Prim::Mul, quotient.clone(), c(0.0));
    let result = select(binary(Prim::Ne, exact, c(0.0)), floor, signed_zero);
    select(binary(Prim::Eq, y.clone(), c(0.0)), quotient, result)
}
