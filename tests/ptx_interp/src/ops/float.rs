//! Floating-point semantics: IEEE operations with PTX's rounding modifiers, `.ftz`,
//! min/max NaN rules, comparisons and `testp`.
//!
//! NaN results are the canonical NaN (all exponent and mantissa bits set), as NVIDIA
//! GPUs produce; `neg`, `abs` and `copysign` only touch the sign bit.

use crate::inst::{CmpOp, FloatBinOp, FloatTy, FloatUnOp, Rounding, TestClass};
use crate::rounding::{f32_directed, f64_directed, f64_overflow};

const F32_CANONICAL_NAN: u32 = 0x7fff_ffff;
const F64_CANONICAL_NAN: u64 = 0x7fff_ffff_ffff_ffff;

/// A subnormal f32 flushed to a zero of the same sign (`.ftz`).
#[inline(always)]
pub(crate) fn flush(x: f32) -> f32 {
    if x.is_subnormal() {
        0.0f32.copysign(x)
    } else {
        x
    }
}

#[inline(always)]
fn canonical32(x: f32) -> u32 {
    if x.is_nan() {
        F32_CANONICAL_NAN
    } else {
        x.to_bits()
    }
}

#[inline(always)]
fn canonical64(x: f64) -> u64 {
    if x.is_nan() {
        F64_CANONICAL_NAN
    } else {
        x.to_bits()
    }
}

/// TwoSum: the exact error of `a + b` rounded to nearest as `sum`.
fn sum_error(a: f64, b: f64, sum: f64) -> f64 {
    let b_part = sum - a;
    (a - (sum - b_part)) + (b - b_part)
}

/// min/max: a NaN operand yields the other one (`.NaN`: yields NaN); -0 is below +0.
fn min_max(a: f64, b: f64, max: bool, propagate_nan: bool) -> f64 {
    if a.is_nan() || b.is_nan() {
        return if propagate_nan || (a.is_nan() && b.is_nan()) {
            f64::NAN
        } else if a.is_nan() {
            b
        } else {
            a
        };
    }
    if a == b {
        // Equal values differ at most in the sign of zero.
        let negative = if max {
            a.is_sign_negative() && b.is_sign_negative()
        } else {
            a.is_sign_negative() || b.is_sign_negative()
        };
        return a.abs().copysign(if negative { -1.0 } else { 1.0 });
    }
    if (a < b) != max {
        a
    } else {
        b
    }
}

#[inline(always)]
pub(crate) fn f32_binary(op: FloatBinOp, rnd: Rounding, ftz: bool, a: u32, b: u32) -> u32 {
    let (mut x, mut y) = (f32::from_bits(a), f32::from_bits(b));
    if ftz {
        x = flush(x);
        y = flush(y);
    }
    let result = match (op, rnd) {
        (FloatBinOp::Add, Rounding::Nearest) => x + y,
        (FloatBinOp::Sub, Rounding::Nearest) => x - y,
        (FloatBinOp::Mul, Rounding::Nearest) => x * y,
        (FloatBinOp::Add | FloatBinOp::Sub, _) => {
            let (x, y) = (x as f64, if op == FloatBinOp::Sub { -y as f64 } else { y as f64 });
            let sum = x + y;
            f32_directed(sum, sum_error(x, y, sum), rnd)
        }
        // The product of two f32 is exact in f64.
        (FloatBinOp::Mul, _) => f32_directed(x as f64 * y as f64, 0.0, rnd),
        (FloatBinOp::Div, _) => x / y,
        (FloatBinOp::Min, _) => min_max(x as f64, y as f64, false, false) as f32,
        (FloatBinOp::Max, _) => min_max(x as f64, y as f64, true, false) as f32,
        (FloatBinOp::MinNan, _) => min_max(x as f64, y as f64, false, true) as f32,
        (FloatBinOp::MaxNan, _) => min_max(x as f64, y as f64, true, true) as f32,
        // copysign d, a, b: b's magnitude with a's sign.
        (FloatBinOp::Copysign, _) => return (b & 0x7fff_ffff) | (a & 0x8000_0000),
    };
    canonical32(if ftz { flush(result) } else { result })
}

#[inline(always)]
pub(crate) fn f64_binary(op: FloatBinOp, rnd: Rounding, a: u64, b: u64) -> u64 {
    let (x, y) = (f64::from_bits(a), f64::from_bits(b));
    let result = match op {
        FloatBinOp::Add | FloatBinOp::Sub => {
            let y = if op == FloatBinOp::Sub { -y } else { y };
            let sum = x + y;
            if rnd == Rounding::Nearest {
                sum
            } else if sum.is_infinite() && x.is_finite() && y.is_finite() {
                f64_overflow(sum, rnd)
            } else {
                f64_directed(sum, sum_error(x, y, sum), rnd)
            }
        }
        FloatBinOp::Mul => {
            let product = x * y;
            if rnd == Rounding::Nearest {
                product
            } else if product.is_infinite() && x.is_finite() && y.is_finite() {
                f64_overflow(product, rnd)
            } else {
                // Only the error's sign matters, and fma gets that right even in underflow.
                f64_directed(product, x.mul_add(y, -product), rnd)
            }
        }
        FloatBinOp::Div => x / y,
        FloatBinOp::Min => min_max(x, y, false, false),
        FloatBinOp::Max => min_max(x, y, true, false),
        FloatBinOp::MinNan => min_max(x, y, false, true),
        FloatBinOp::MaxNan => min_max(x, y, true, true),
        FloatBinOp::Copysign => return (b & !(1 << 63)) | (a & (1 << 63)),
    };
    canonical64(result)
}

pub(crate) fn f32_unary(op: FloatUnOp, ftz: bool, a: u32) -> u32 {
    let x = if ftz { flush(f32::from_bits(a)) } else { f32::from_bits(a) };
    // The approximate functions are computed in f64 and rounded once (SUBSET.md).
    let wide = x as f64;
    let result = match op {
        FloatUnOp::Neg => return (-x).to_bits(),
        FloatUnOp::Abs => return x.abs().to_bits(),
        FloatUnOp::Sqrt => x.sqrt(),
        FloatUnOp::Rcp => 1.0 / x,
        FloatUnOp::Rsqrt => (1.0 / wide.sqrt()) as f32,
        FloatUnOp::Ex2 => wide.exp2() as f32,
        FloatUnOp::Lg2 => wide.log2() as f32,
        FloatUnOp::Sin => wide.sin() as f32,
        FloatUnOp::Cos => wide.cos() as f32,
        FloatUnOp::Tanh => wide.tanh() as f32,
    };
    canonical32(if ftz { flush(result) } else { result })
}

pub(crate) fn f64_unary(op: FloatUnOp, a: u64) -> u64 {
    let x = f64::from_bits(a);
    let result = match op {
        FloatUnOp::Neg => return (-x).to_bits(),
        FloatUnOp::Abs => return x.abs().to_bits(),
        FloatUnOp::Sqrt => x.sqrt(),
        FloatUnOp::Rcp => 1.0 / x,
        FloatUnOp::Rsqrt => 1.0 / x.sqrt(),
        FloatUnOp::Ex2 => x.exp2(),
        FloatUnOp::Lg2 => x.log2(),
        FloatUnOp::Sin => x.sin(),
        FloatUnOp::Cos => x.cos(),
        FloatUnOp::Tanh => x.tanh(),
    };
    canonical64(result)
}

#[inline(always)]
pub(crate) fn fma(ty: FloatTy, ftz: bool, a: u64, b: u64, c: u64) -> u64 {
    match ty {
        FloatTy::F32 => {
            let [x, y, z] = [a, b, c].map(|bits| f32::from_bits(bits as u32)).map(|v| if ftz { flush(v) } else { v });
            let result = x.mul_add(y, z);
            canonical32(if ftz { flush(result) } else { result }) as u64
        }
        FloatTy::F64 => canonical64(f64::from_bits(a).mul_add(f64::from_bits(b), f64::from_bits(c))),
    }
}

/// A float comparison; the `u` forms are true when either operand is NaN.
#[inline(always)]
pub(crate) fn compare(cmp: CmpOp, x: f64, y: f64) -> bool {
    let unordered = x.is_nan() || y.is_nan();
    match cmp {
        CmpOp::Eq => x == y,
        CmpOp::Ne => !unordered && x != y,
        CmpOp::Lt => x < y,
        CmpOp::Le => x <= y,
        CmpOp::Gt => x > y,
        CmpOp::Ge => x >= y,
        CmpOp::Equ => unordered || x == y,
        CmpOp::Neu => x != y,
        CmpOp::Ltu => unordered || x < y,
        CmpOp::Leu => unordered || x <= y,
        CmpOp::Gtu => unordered || x > y,
        CmpOp::Geu => unordered || x >= y,
        CmpOp::Num => !unordered,
        CmpOp::Nan => unordered,
    }
}

pub(crate) fn testp(class: TestClass, ty: FloatTy, a: u64) -> bool {
    let (nan, infinite, subnormal, zero) = match ty {
        FloatTy::F32 => {
            let x = f32::from_bits(a as u32);
            (x.is_nan(), x.is_infinite(), x.is_subnormal(), x == 0.0)
        }
        FloatTy::F64 => {
            let x = f64::from_bits(a);
            (x.is_nan(), x.is_infinite(), x.is_subnormal(), x == 0.0)
        }
    };
    match class {
        TestClass::NotANumber => nan,
        TestClass::Number => !nan,
        TestClass::Finite => !nan && !infinite,
        TestClass::Infinite => infinite,
        TestClass::Normal => !nan && !infinite && !subnormal && !zero,
        TestClass::Subnormal => subnormal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use FloatBinOp::*;
    use Rounding::*;

    fn f32op(op: FloatBinOp, rnd: Rounding, ftz: bool, a: f32, b: f32) -> f32 {
        f32::from_bits(f32_binary(op, rnd, ftz, a.to_bits(), b.to_bits()))
    }

    #[test]
    fn rounding_modes_and_ftz() {
        assert_eq!(f32op(Add, Nearest, false, 1.0, 1e-10), 1.0);
        assert_eq!(f32op(Add, Up, false, 1.0, 1e-10), 1.0f32.next_up());
        assert_eq!(f32op(Sub, Zero, false, 1.0, 1e-10), 1.0f32.next_down());
        assert_eq!(f32op(Mul, Down, false, 0.1, 0.1), f32op(Mul, Up, false, 0.1, 0.1).next_down());
        assert_eq!(f32op(Mul, Zero, false, f32::MAX, 2.0), f32::MAX);
        let tiny = f32::from_bits(1);
        assert_eq!(f32op(Add, Nearest, false, tiny, tiny).to_bits(), 2);
        assert_eq!(f32op(Add, Nearest, true, tiny, tiny).to_bits(), 0);
        assert_eq!(f32op(Mul, Nearest, true, -1e-20, 1e-20).to_bits(), 0x8000_0000);
        let f64add = |rnd, a: f64, b: f64| f64::from_bits(f64_binary(Add, rnd, a.to_bits(), b.to_bits()));
        assert_eq!(f64add(Up, 1.0, 1e-30), 1.0f64.next_up());
        assert_eq!(f64add(Down, 1.0, 1e-30), 1.0);
        assert_eq!(f64add(Zero, -1.0, -1e-30), -1.0);
        assert_eq!(f64add(Zero, f64::MAX, f64::MAX), f64::MAX);
    }

    #[test]
    fn min_max_nan_and_zero_rules() {
        assert_eq!(f32op(Min, Nearest, false, f32::NAN, 2.0), 2.0);
        assert_eq!(f32op(Max, Nearest, false, 1.0, f32::NAN), 1.0);
        assert_eq!(f32op(MaxNan, Nearest, false, 1.0, f32::NAN).to_bits(), F32_CANONICAL_NAN);
        assert_eq!(f32op(Min, Nearest, false, f32::NAN, f32::NAN).to_bits(), F32_CANONICAL_NAN);
        assert_eq!(f32op(Min, Nearest, false, 0.0, -0.0).to_bits(), 0x8000_0000);
        assert_eq!(f32op(Max, Nearest, false, -0.0, 0.0).to_bits(), 0);
        assert_eq!(f32op(Add, Nearest, false, f32::INFINITY, f32::NEG_INFINITY).to_bits(), F32_CANONICAL_NAN);
        assert_eq!(f32op(Copysign, Nearest, false, -1.0, 2.0), -2.0);
    }

    #[test]
    fn comparisons_and_classes() {
        assert!(!compare(CmpOp::Ne, f64::NAN, 1.0));
        assert!(compare(CmpOp::Neu, f64::NAN, 1.0));
        assert!(compare(CmpOp::Ltu, f64::NAN, 1.0));
        assert!(!compare(CmpOp::Lt, f64::NAN, 1.0));
        assert!(compare(CmpOp::Nan, 1.0, f64::NAN));
        assert!(testp(TestClass::Subnormal, FloatTy::F32, 1));
        assert!(!testp(TestClass::Normal, FloatTy::F32, 0));
        assert!(testp(TestClass::Finite, FloatTy::F64, 1.0f64.to_bits()));
        assert!(testp(TestClass::NotANumber, FloatTy::F32, F32_CANONICAL_NAN as u64));
    }
}
