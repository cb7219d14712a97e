//! The float math library, in software: PTX has approximate f32 instructions only, and
//! nothing for f64. Every function is written once, in f64, from range reductions and
//! Taylor polynomials long enough to stay within an ulp or two of the true value (their
//! coefficients are computed here, not copied from tables); a float32 (or 16-bit)
//! operand is widened, computed in f64 and rounded once, which makes the f32 results
//! nearly correctly rounded. NaN and infinities follow C's libm, as on the CPU.
//!
//! Known limits: sin/cos/tan reduce by a three-part pi/2, exact for |x| below about
//! 2^30 (larger arguments lose accuracy); f64 `pow` loses up to ~|log(result)| ulp; f64
//! `fmod` with a subnormal divisor is wrong.

mod exp_log;
mod special;
mod trig;

use super::kernel::{Kx, R};
use super::num::Num;
use super::ptx::{Body, Kind, Op, Reg};
use crate::ir::Prim;

/// f64 arithmetic on a kernel body, for the functions of this library.
pub(super) struct M<'b> {
    pub b: &'b mut Body,
}

/// A float operand: a register or an f64 immediate.
pub(super) fn k(v: f64) -> Op {
    Op::F64(v)
}

impl M<'_> {
    fn f(&mut self, opcode: &str, args: &[Op]) -> Reg {
        self.b.def(opcode, Kind::F64, args)
    }
    pub fn add(&mut self, x: impl Into<Op>, y: impl Into<Op>) -> Reg {
        self.f("add.rn.f64", &[x.into(), y.into()])
    }
    pub fn sub(&mut self, x: impl Into<Op>, y: impl Into<Op>) -> Reg {
        self.f("sub.rn.f64", &[x.into(), y.into()])
    }
    pub fn mul(&mut self, x: impl Into<Op>, y: impl Into<Op>) -> Reg {
        self.f("mul.rn.f64", &[x.into(), y.into()])
    }
    pub fn div(&mut self, x: impl Into<Op>, y: impl Into<Op>) -> Reg {
        self.f("div.rn.f64", &[x.into(), y.into()])
    }
    /// `x * y + z`, rounded once.
    pub fn fma(&mut self, x: impl Into<Op>, y: impl Into<Op>, z: impl Into<Op>) -> Reg {
        self.f("fma.rn.f64", &[x.into(), y.into(), z.into()])
    }
    pub fn abs(&mut self, x: Reg) -> Reg {
        self.f("abs.f64", &[x.into()])
    }
    pub fn sqrt(&mut self, x: impl Into<Op>) -> Reg {
        self.f("sqrt.rn.f64", &[x.into()])
    }
    /// Rounded to the nearest integer, ties to even.
    pub fn rint(&mut self, x: Reg) -> Reg {
        self.f("cvt.rni.f64.f64", &[x.into()])
    }
    /// `|x|` with the sign of `sign`.
    pub fn copysign(&mut self, x: Reg, sign: Reg) -> Reg {
        // PTX's copysign takes the sign source first.
        self.f("copysign.f64", &[sign.into(), x.into()])
    }
    pub fn min(&mut self, x: impl Into<Op>, y: impl Into<Op>) -> Reg {
        self.f("min.f64", &[x.into(), y.into()])
    }
    pub fn max(&mut self, x: impl Into<Op>, y: impl Into<Op>) -> Reg {
        self.f("max.f64", &[x.into(), y.into()])
    }
    /// A predicate: `x cc y` (`cc` one of setp's float comparisons).
    pub fn test(&mut self, cc: &str, x: impl Into<Op>, y: impl Into<Op>) -> Reg {
        self.b.def(&format!("setp.{cc}.f64"), Kind::Pred, &[x.into(), y.into()])
    }
    pub fn is_nan(&mut self, x: Reg) -> Reg {
        self.test("nan", x, x)
    }
    /// `p ? a : b`.
    pub fn sel(&mut self, p: Reg, a: impl Into<Op>, b: impl Into<Op>) -> Reg {
        self.f("selp.f64", &[a.into(), b.into(), p.into()])
    }
    pub fn and(&mut self, p: Reg, q: Reg) -> Reg {
        self.b.def("and.pred", Kind::Pred, &[p.into(), q.into()])
    }
    pub fn or(&mut self, p: Reg, q: Reg) -> Reg {
        self.b.def("or.pred", Kind::Pred, &[p.into(), q.into()])
    }
    pub fn not(&mut self, p: Reg) -> Reg {
        self.b.def("not.pred", Kind::Pred, &[p.into()])
    }
    /// Is the sign bit of `x` set (also for -0 and NaNs)?
    pub fn sign_bit(&mut self, x: Reg) -> Reg {
        let bits = self.b.def("mov.b64", Kind::B64, &[x.into()]);
        self.b.def("setp.lt.s64", Kind::Pred, &[bits.into(), Op::Int(0)])
    }
    /// `coefs[0] + x * (coefs[1] + x * (...))` by Horner's rule with fused steps.
    pub fn poly(&mut self, x: Reg, coefs: &[f64]) -> Reg {
        let Some((&last, rest)) = coefs.split_last() else { return self.f("mov.f64", &[k(0.0)]) };
        let mut acc = self.f("mov.f64", &[k(last)]);
        for &c in rest.iter().rev() {
            acc = self.fma(acc, x, k(c));
        }
        acc
    }
    /// `x * 2^n` for an integral `n` (an f64) with `|n| <= 2200`, rounded once: two
    /// exact power-of-two factors whose product is `2^n`, so no step overflows early.
    pub fn ldexp(&mut self, x: Reg, n: Reg) -> Reg {
        let n = self.max(n, k(-2200.0));
        let n = self.min(n, k(2200.0));
        let n = self.b.def("cvt.rzi.s64.f64", Kind::B64, &[n.into()]);
        let half = self.b.def("shr.s64", Kind::B64, &[n.into(), Op::Int(1)]);
        let other = self.b.def("sub.s64", Kind::B64, &[n.into(), half.into()]);
        let first = self.power_of_two(half);
        let second = self.power_of_two(other);
        let y = self.mul(x, first);
        self.mul(y, second)
    }
    /// `2^n` for an s64 `n` in `-1022..=1023`.
    fn power_of_two(&mut self, n: Reg) -> Reg {
        let biased = self.b.def("add.s64", Kind::B64, &[n.into(), Op::Int(1023)]);
        let bits = self.b.def("shl.b64", Kind::B64, &[biased.into(), Op::Int(52)]);
        self.f("mov.b64", &[bits.into()])
    }
}

/// The factorials' reciprocals `1/n!` for `n` in `from..from + count` stepping by `step`,
/// alternating in sign when `alternate`: Taylor coefficients.
pub(super) fn taylor(from: u32, count: usize, step: u32, alternate: bool) -> Vec<f64> {
    let fact = |n: u32| (1..=n).fold(1.0f64, |a, i| a * i as f64);
    (0..count)
        .map(|i| {
            let n = from + step * i as u32;
            let sign = if alternate && i % 2 == 1 { -1.0 } else { 1.0 };
            sign / fact(n)
        })
        .collect()
}

/// sin and cos of an f64 `x`, sharing one range reduction.
pub(super) fn sin_cos(b: &mut Body, x: Reg) -> (Reg, Reg) {
    trig::sin_and_cos(&mut M { b }, x)
}

/// A float primitive of one operand (`num` F32 or F64).
pub fn unary(kx: &mut Kx, op: Prim, x: Reg, num: Num) -> R<Reg> {
    let f32 = num == Num::F32;
    let x64 = if f32 { kx.b.def("cvt.f64.f32", Kind::F64, &[x.into()]) } else { x };
    let m = &mut M { b: &mut kx.b };
    let y = match op {
        Prim::Exp => exp_log::exp(m, x64),
        Prim::Expm1 => exp_log::expm1(m, x64),
        Prim::Log => exp_log::log(m, x64, exp_log::Base::E),
        Prim::Log2 => exp_log::log(m, x64, exp_log::Base::Two),
        Prim::Log10 => exp_log::log(m, x64, exp_log::Base::Ten),
        Prim::Log1p => exp_log::log1p(m, x64),
        Prim::Sin => trig::sin_cos_tan(m, x64, trig::Trig::Sin),
        Prim::Cos => trig::sin_cos_tan(m, x64, trig::Trig::Cos),
        Prim::Tan => trig::sin_cos_tan(m, x64, trig::Trig::Tan),
        Prim::Atan => trig::atan(m, x64),
        Prim::Asin => trig::asin(m, x64),
        Prim::Acos => trig::acos(m, x64),
        Prim::Sinh => special::sinh(m, x64),
        Prim::Cosh => special::cosh(m, x64),
        Prim::Tanh => special::tanh(m, x64),
        Prim::Asinh => special::asinh(m, x64),
        Prim::Acosh => special::acosh(m, x64),
        Prim::Atanh => special::atanh(m, x64),
        // Summing the series to float32's precision is enough for a float32 result.
        Prim::Erf => special::erf(m, x64, if f32 { 2f64.powi(-30) } else { 2f64.powi(-56) }),
        _ => return Err(format!("{} is not defined for floats", op.name())),
    };
    Ok(if f32 { kx.b.def("cvt.rn.f32.f64", Kind::F32, &[y.into()]) } else { y })
}

/// A float primitive of two operands that is not plain arithmetic: pow, atan2, fmod.
pub fn binary(kx: &mut Kx, op: Prim, a: Reg, b: Reg, num: Num) -> R<Reg> {
    let f32 = num == Num::F32;
    let widen = |kx: &mut Kx, v: Reg| if f32 { kx.b.def("cvt.f64.f32", Kind::F64, &[v.into()]) } else { v };
    let (a64, b64) = (widen(kx, a), widen(kx, b));
    let m = &mut M { b: &mut kx.b };
    let y = match op {
        Prim::Pow => special::pow(m, a64, b64),
        Prim::Atan2 => trig::atan2(m, a64, b64),
        Prim::Fmod => special::fmod(m, a64, b64),
        _ => return Err(format!("{} is not defined for floats", op.name())),
    };
    Ok(if f32 { kx.b.def("cvt.rn.f32.f64", Kind::F32, &[y.into()]) } else { y })
}

/// Max or min propagating NaN (Cranelift's `fmax`/`fmin`, torch's maximum/minimum).
pub fn min_max(kx: &mut Kx, max: bool, a: Reg, b: Reg, num: Num) -> Reg {
    let name = if max { "max" } else { "min" };
    if num == Num::F32 {
        return kx.b.def(&format!("{name}.NaN.f32"), Kind::F32, &[a.into(), b.into()]);
    }
    let m = &mut M { b: &mut kx.b };
    let r = m.f(&format!("{name}.f64"), &[a.into(), b.into()]);
    let either_nan = m.test("nan", a, b);
    let nan = m.add(a, b);
    m.sel(either_nan, nan, r)
}
