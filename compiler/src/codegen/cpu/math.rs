//! Primitives beyond the basic arithmetic of `expr.rs`: the math library (inline code
//! from `vmath.rs` on f32x4 lanes where it has the function, else libm calls) and integer
//! division, remainder and power, per dtype.

use super::expr::{call_libm, is_unsigned, Lanes};
use super::kernel::{Cx, R};
use super::lanes::Ops;
use super::vmath;
use crate::ir::Prim;
use aotc_abi::DType;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{BlockArg, InstBuilder, Value};

/// The libm function that computes `op` on floats, for the primitives that are one call.
fn libm_function(op: Prim) -> Option<&'static str> {
    use Prim::*;
    Some(match op {
        Exp => "exp",
        Expm1 => "expm1",
        Log => "log",
        Log1p => "log1p",
        Sin => "sin",
        Cos => "cos",
        Tan => "tan",
        Asin => "asin",
        Acos => "acos",
        Atan => "atan",
        Sinh => "sinh",
        Cosh => "cosh",
        Asinh => "asinh",
        Acosh => "acosh",
        Atanh => "atanh",
        Tanh => "tanh",
        Erf => "erf",
        Log2 => "log2",
        Log10 => "log10",
        Fmod => "fmod",
        Atan2 => "atan2",
        _ => return None,
    })
}

fn undefined(op: Prim, d: DType) -> String {
    format!("{} is not defined for {d}", op.name())
}

pub fn unary(cx: &mut Cx, op: Prim, x: Value, d: DType, lanes: Lanes) -> R<Value> {
    // Vector lanes are f32 (see `expr::vectorizable`).
    if let (Lanes::X4(_), Some(f)) = (lanes, vmath::function(op)) {
        return Ok(f(&mut Ops::new(&mut cx.b, lanes), x));
    }
    match libm_function(op) {
        Some(f) if d.is_float() => call_libm(cx, f, &[x], d, lanes),
        _ => Err(undefined(op, d)),
    }
}

pub fn binary(cx: &mut Cx, op: Prim, a: Value, b: Value, d: DType, lanes: Lanes) -> R<Value> {
    if d.is_float() {
        return match libm_function(op) {
            Some(f) => call_libm(cx, f, &[a, b], d, lanes),
            None => Err(undefined(op, d)),
        };
    }
    // Integer values are never vectorized, so from here on everything is scalar.
    match op {
        Prim::Div => Ok(int_div(cx, a, b, d)),
        Prim::Fmod => Ok(int_rem(cx, a, b, d)),
        Prim::Pow => Ok(int_pow(cx, a, b, d)),
        _ => Err(undefined(op, d)),
    }
}

/// `b` with 0 and (when signed) -1 replaced by 1: the divisors for which the hardware
/// traps (x / 0, MIN / -1) or that the callers handle themselves.
fn safe_divisor(cx: &mut Cx, b: Value, d: DType) -> Value {
    let ty = cx.b.func.dfg.value_type(b);
    let one = cx.b.ins().iconst(ty, 1);
    let zero = cx.b.ins().icmp_imm_s(IntCC::Equal, b, 0);
    let unsafe_divisor = if is_unsigned(d) {
        zero
    } else {
        let minus_one = cx.b.ins().icmp_imm_s(IntCC::Equal, b, -1);
        cx.b.ins().bor(zero, minus_one)
    };
    cx.b.ins().select(unsafe_divisor, one, b)
}

/// Truncating division. torch raises ZeroDivisionError for an integer division by zero;
/// generated code cannot raise, so `a / 0` is 0. `a / -1` is `-a`, wrapping for MIN as
/// two's complement arithmetic does.
fn int_div(cx: &mut Cx, a: Value, b: Value, d: DType) -> Value {
    let ty = cx.b.func.dfg.value_type(a);
    let divisor = safe_divisor(cx, b, d);
    let quotient = if is_unsigned(d) {
        cx.b.ins().udiv(a, divisor)
    } else {
        let q = cx.b.ins().sdiv(a, divisor);
        let minus_one = cx.b.ins().icmp_imm_s(IntCC::Equal, b, -1);
        let negated = cx.b.ins().ineg(a);
        cx.b.ins().select(minus_one, negated, q)
    };
    let zero_divisor = cx.b.ins().icmp_imm_s(IntCC::Equal, b, 0);
    let zero = cx.b.ins().iconst(ty, 0);
    cx.b.ins().select(zero_divisor, zero, quotient)
}

/// C's `a % b` (the sign of `a`). A zero divisor gives 0 (torch raises, see [`int_div`]);
/// `a % -1` is 0, which the replaced divisor 1 gives too.
fn int_rem(cx: &mut Cx, a: Value, b: Value, d: DType) -> Value {
    let divisor = safe_divisor(cx, b, d);
    if is_unsigned(d) {
        cx.b.ins().urem(a, divisor)
    } else {
        cx.b.ins().srem(a, divisor)
    }
}

/// torch's integer power (`powi`): square-and-multiply, wrapping on overflow; for a
/// negative exponent 1 when the base is 1, +-1 (by the exponent's parity) when it is -1,
/// else 0.
fn int_pow(cx: &mut Cx, base: Value, exponent: Value, d: DType) -> Value {
    if is_unsigned(d) {
        return square_and_multiply(cx, base, exponent);
    }
    let ty = cx.b.func.dfg.value_type(base);
    let one = cx.b.ins().iconst(ty, 1);
    let zero = cx.b.ins().iconst(ty, 0);
    let negative = cx.b.ins().icmp_imm_s(IntCC::SignedLessThan, exponent, 0);
    let non_negative = cx.b.ins().select(negative, zero, exponent);
    let power = square_and_multiply(cx, base, non_negative);
    let minus_one = cx.b.ins().iconst(ty, -1);
    let odd = cx.b.ins().band_imm_s(exponent, 1);
    let of_minus_one = cx.b.ins().select(odd, minus_one, one);
    let base_is_one = cx.b.ins().icmp_imm_s(IntCC::Equal, base, 1);
    let base_is_minus_one = cx.b.ins().icmp_imm_s(IntCC::Equal, base, -1);
    let reciprocal = cx.b.ins().select(base_is_minus_one, of_minus_one, zero);
    let reciprocal = cx.b.ins().select(base_is_one, one, reciprocal);
    cx.b.ins().select(negative, reciprocal, power)
}

/// `base ** exponent` for `exponent >= 0` (read as unsigned): a loop over its bits.
fn square_and_multiply(cx: &mut Cx, base: Value, exponent: Value) -> Value {
    let ty = cx.b.func.dfg.value_type(base);
    let (header, body, exit) = (cx.b.create_block(), cx.b.create_block(), cx.b.create_block());
    for _ in 0..3 {
        cx.b.append_block_param(header, ty);
    }
    cx.b.append_block_param(exit, ty);
    let one = cx.b.ins().iconst(ty, 1);
    cx.b.ins().jump(header, &[BlockArg::Value(one), BlockArg::Value(base), BlockArg::Value(exponent)]);
    cx.b.switch_to_block(header);
    let (result, square, rest) =
        (cx.b.block_params(header)[0], cx.b.block_params(header)[1], cx.b.block_params(header)[2]);
    cx.b.ins().brif(rest, body, &[], exit, &[BlockArg::Value(result)]);
    cx.b.switch_to_block(body);
    cx.b.seal_block(body);
    let bit = cx.b.ins().band_imm_s(rest, 1);
    let product = cx.b.ins().imul(result, square);
    let result = cx.b.ins().select(bit, product, result);
    let square = cx.b.ins().imul(square, square);
    let rest = cx.b.ins().ushr_imm_s(rest, 1);
    cx.b.ins().jump(header, &[BlockArg::Value(result), BlockArg::Value(square), BlockArg::Value(rest)]);
    cx.b.seal_block(header);
    cx.b.switch_to_block(exit);
    cx.b.seal_block(exit);
    cx.b.block_params(exit)[0]
}
