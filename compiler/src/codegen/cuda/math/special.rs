//! The hyperbolic functions and their inverses, erf, pow and fmod in f64.

use super::exp_log::{exp, expm1, log, log1p, Base};
use super::{k, M};
use crate::codegen::cuda::ptx::{Kind, Op, Reg};
use std::f64::consts::LN_2;

/// exp(a/2)^2 / 2: exp(a) / 2 where exp(a) alone would overflow (a > 700).
fn half_exp_large(m: &mut M, a: Reg) -> Reg {
    let half_a = m.mul(a, k(0.5));
    let h = exp(m, half_a);
    let h2 = m.mul(h, k(0.5));
    m.mul(h2, h)
}

/// sinh |x| = (e + e / (e + 1)) / 2 with e = expm1(|x|), signed like x.
pub fn sinh(m: &mut M, x: Reg) -> Reg {
    let a = m.abs(x);
    let e = expm1(m, a);
    let e1 = m.add(e, k(1.0));
    let q = m.div(e, e1);
    let s = m.add(e, q);
    let y = m.mul(s, k(0.5));
    let large = m.test("gt", a, k(700.0));
    let big = half_exp_large(m, a);
    let y = m.sel(large, big, y);
    let y = m.copysign(y, x);
    let nan = m.is_nan(x);
    m.sel(nan, x, y)
}

pub fn cosh(m: &mut M, x: Reg) -> Reg {
    let a = m.abs(x);
    let e = exp(m, a);
    let inv = m.div(k(1.0), e);
    let s = m.add(e, inv);
    let y = m.mul(s, k(0.5));
    let large = m.test("gt", a, k(700.0));
    let big = half_exp_large(m, a);
    m.sel(large, big, y)
}

/// tanh |x| = e / (e + 2) with e = expm1(2|x|); 1 beyond 22, signed like x.
pub fn tanh(m: &mut M, x: Reg) -> Reg {
    let a = m.abs(x);
    let two_a = m.add(a, a);
    let e = expm1(m, two_a);
    let den = m.add(e, k(2.0));
    let y = m.div(e, den);
    let saturated = m.test("gt", a, k(22.0));
    let y = m.sel(saturated, k(1.0), y);
    m.copysign(y, x)
}

/// log(x) + ln 2: the inverse hyperbolics where x^2 would overflow or swamp 1.
fn log_twice(m: &mut M, a: Reg) -> Reg {
    let l = log(m, a, Base::E);
    m.add(l, k(LN_2))
}

/// asinh |x| = log1p(a + a^2 / (1 + sqrt(1 + a^2))), signed like x.
pub fn asinh(m: &mut M, x: Reg) -> Reg {
    let a = m.abs(x);
    let a2 = m.mul(a, a);
    let r = m.add(a2, k(1.0));
    let root = m.sqrt(r);
    let den = m.add(root, k(1.0));
    let q = m.div(a2, den);
    let arg = m.add(a, q);
    let y = log1p(m, arg);
    let large = m.test("gt", a, k(2f64.powi(28)));
    let big = log_twice(m, a);
    let y = m.sel(large, big, y);
    m.copysign(y, x)
}

/// acosh x = log1p(t + sqrt(2t + t^2)) with t = x - 1; NaN below 1.
pub fn acosh(m: &mut M, x: Reg) -> Reg {
    let t = m.sub(x, k(1.0));
    let two_t = m.add(t, t);
    let r = m.fma(t, t, two_t);
    let root = m.sqrt(r);
    let arg = m.add(t, root);
    let y = log1p(m, arg);
    let large = m.test("gt", x, k(2f64.powi(28)));
    let big = log_twice(m, x);
    let y = m.sel(large, big, y);
    let below = m.test("lt", x, k(1.0));
    m.sel(below, k(f64::NAN), y)
}

/// atanh |x| = log1p(2a / (1 - a)) / 2, signed like x.
pub fn atanh(m: &mut M, x: Reg) -> Reg {
    let a = m.abs(x);
    let two_a = m.add(a, a);
    let den = m.sub(k(1.0), a);
    let q = m.div(two_a, den);
    let l = log1p(m, q);
    let y = m.mul(l, k(0.5));
    m.copysign(y, x)
}

/// Beyond this, erf is 1 - erfc with erfc from its continued fraction.
const ERFC_FROM: f64 = 2.5;

/// erf |x|, signed like x. Up to 2.5: 2/sqrt(pi) exp(-a^2) sum_n (2a^2)^n a / (1 3 5 ...
/// (2n+1)), every term positive (no cancellation), summed until a term falls below
/// `tolerance` times the sum (at most 200 terms). Beyond: 1 - erfc(a), erfc(a) =
/// exp(-a^2) / (sqrt(pi) (a + (1/2) / (a + 1 / (a + (3/2) / ...)))) to 40 levels (within
/// 3e-16 of erfc there).
pub fn erf(m: &mut M, x: Reg, tolerance: f64) -> Reg {
    let abs_x = m.abs(x);
    let tail = one_minus_erfc(m, abs_x);
    let a = m.min(abs_x, k(ERFC_FROM));
    let two_a2 = m.mul(a, a);
    let two_a2 = m.add(two_a2, two_a2);
    let (term, sum, den, count) = (m.b.reg(Kind::F64), m.b.reg(Kind::F64), m.b.reg(Kind::F64), m.b.reg(Kind::B32));
    m.b.set("mov.f64", term, &[a.into()]);
    m.b.set("mov.f64", sum, &[a.into()]);
    m.b.set("mov.f64", den, &[k(1.0)]);
    m.b.set("mov.u32", count, &[Op::Int(0)]);
    let (top, done) = (m.b.label(), m.b.label());
    m.b.place(top);
    m.b.set("add.rn.f64", den, &[den.into(), k(2.0)]);
    let ratio = m.div(two_a2, den);
    m.b.set("mul.rn.f64", term, &[term.into(), ratio.into()]);
    m.b.set("add.rn.f64", sum, &[sum.into(), term.into()]);
    m.b.set("add.u32", count, &[count.into(), Op::Int(1)]);
    let limit = m.mul(sum, k(tolerance));
    let small = m.test("le", term, limit);
    let many = m.b.def("setp.ge.u32", Kind::Pred, &[count.into(), Op::Int(200)]);
    let stop = m.or(small, many);
    m.b.bra_if(stop, true, top);
    m.b.place(done);
    let a2 = m.mul(a, a);
    let neg_a2 = m.f("neg.f64", &[a2.into()]);
    let e = exp(m, neg_a2);
    let scaled = m.mul(e, k(2.0 / std::f64::consts::PI.sqrt()));
    let y = m.mul(scaled, sum);
    let far = m.test("gt", abs_x, k(ERFC_FROM));
    let y = m.sel(far, tail, y);
    let y = m.copysign(y, x);
    let nan = m.is_nan(x);
    m.sel(nan, x, y)
}

/// 1 - erfc(a) for a >= 2.5 (1 for an infinite a).
fn one_minus_erfc(m: &mut M, a: Reg) -> Reg {
    let a = m.min(a, k(30.0));
    let mut t = m.f("mov.f64", &[a.into()]);
    for level in (1..=40).rev() {
        let q = m.div(k(level as f64 / 2.0), t);
        t = m.add(a, q);
    }
    let a2 = m.mul(a, a);
    let neg_a2 = m.f("neg.f64", &[a2.into()]);
    let e = exp(m, neg_a2);
    let den = m.mul(t, k(std::f64::consts::PI.sqrt()));
    let erfc = m.div(e, den);
    m.sub(k(1.0), erfc)
}

/// C's pow: exp(b log|a|), negative bases for integral exponents only (signed by the
/// exponent's parity), pow(x, 0) = pow(1, y) = 1 and pow(-1, +-inf) = 1.
pub fn pow(m: &mut M, a: Reg, b: Reg) -> Reg {
    let abs_a = m.abs(a);
    let l = log(m, abs_a, Base::E);
    let p = m.mul(b, l);
    let r = exp(m, p);
    let rb = m.rint(b);
    let integral = m.test("eq", rb, b);
    let half = m.mul(b, k(0.5));
    let rh = m.rint(half);
    let not_even = m.test("neu", rh, half);
    let odd = m.and(integral, not_even);
    let negative = m.test("lt", a, k(0.0));
    let fractional = m.not(integral);
    let undefined = m.and(negative, fractional);
    let r = m.sel(undefined, k(f64::NAN), r);
    let sign = m.sign_bit(a);
    let flip = m.and(sign, odd);
    let neg_r = m.f("neg.f64", &[r.into()]);
    let r = m.sel(flip, neg_r, r);
    let unit = m.test("eq", abs_a, k(1.0));
    let b_inf = m.test("eq", b, k(f64::INFINITY));
    let b_neg_inf = m.test("eq", b, k(f64::NEG_INFINITY));
    let b_infinite = m.or(b_inf, b_neg_inf);
    let unit_inf = m.and(unit, b_infinite);
    let r = m.sel(unit_inf, k(1.0), r);
    let one_base = m.test("eq", a, k(1.0));
    let zero_exp = m.test("eq", b, k(0.0));
    let one = m.or(one_base, zero_exp);
    m.sel(one, k(1.0), r)
}

/// C's fmod, exactly: subtract from |a| the largest |b| 2^j not above it until it is
/// below |b| (each subtraction exact), then give it a's sign. NaN for b = 0, an
/// infinite a or a NaN.
pub fn fmod(m: &mut M, a: Reg, b: Reg) -> Reg {
    let y = m.abs(b);
    let x = m.b.reg(Kind::F64);
    let abs_a = m.abs(a);
    m.b.set("mov.f64", x, &[abs_a.into()]);
    let y_bits = m.b.def("mov.b64", Kind::B64, &[y.into()]);
    let y_exp = m.b.def("shr.u64", Kind::B64, &[y_bits.into(), Op::Int(52)]);
    let (top, done) = (m.b.label(), m.b.label());
    // Skip the loop for the NaN cases (they would never end).
    let y_zero = m.test("eq", y, k(0.0));
    let x_inf = m.test("eq", abs_a, k(f64::INFINITY));
    let any_nan = m.test("nan", a, b);
    let undefined = m.or(y_zero, x_inf);
    let undefined = m.or(undefined, any_nan);
    m.b.bra_if(undefined, false, done);
    m.b.place(top);
    let below = m.test("lt", x, y);
    m.b.bra_if(below, false, done);
    let x_bits = m.b.def("mov.b64", Kind::B64, &[x.into()]);
    let x_exp = m.b.def("shr.u64", Kind::B64, &[x_bits.into(), Op::Int(52)]);
    let diff = m.b.def("sub.s64", Kind::B64, &[x_exp.into(), y_exp.into()]);
    let shifted = m.b.def("shl.b64", Kind::B64, &[diff.into(), Op::Int(52)]);
    let t_bits = m.b.def("add.s64", Kind::B64, &[y_bits.into(), shifted.into()]);
    let t = m.f("mov.b64", &[t_bits.into()]);
    let too_big = m.test("gt", t, x);
    let halved = m.mul(t, k(0.5));
    let t = m.sel(too_big, halved, t);
    m.b.set("sub.rn.f64", x, &[x.into(), t.into()]);
    m.b.bra(top);
    m.b.place(done);
    let r = m.copysign(x, a);
    let below_y = m.test("lt", abs_a, y);
    let r = m.sel(below_y, a, r);
    m.sel(undefined, k(f64::NAN), r)
}
