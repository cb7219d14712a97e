//! exp, expm1, log (natural, base 2, base 10) and log1p in f64.
// Fdlibm's constants, with the digits fdlibm publishes: clippy would round them to what float parsing gives anyway.
#![allow(clippy::excessive_precision)]

use super::{k, taylor, M};
use crate::codegen::cuda::ptx::{Kind, Op, Reg};

/// fdlibm's split of ln 2: `LN2_HI` has 32 significant bits, so `n * LN2_HI` is exact
/// for the `|n| < 2^11` that occur, and `LN2_HI + LN2_LO` is ln 2 to 2^-86.
const LN2_HI: f64 = 6.931_471_803_691_238_164_90e-1;
const LN2_LO: f64 = 1.908_214_929_270_587_700_02e-10;

/// `x = n ln2 + r` with `|r| <= ln2 / 2`: (n, expm1(r)), `expm1(r)` from its Taylor
/// series (to r^13/13!, below 2^-57 there).
fn reduce(m: &mut M, x: Reg) -> (Reg, Reg) {
    // Beyond +-1000 every result has overflowed or underflowed; the clamp keeps n small.
    let x = m.max(x, k(-1000.0));
    let x = m.min(x, k(1000.0));
    let scaled = m.mul(x, k(std::f64::consts::LOG2_E));
    let n = m.rint(scaled);
    let neg_n = m.f("neg.f64", &[n.into()]);
    let r = m.fma(neg_n, k(LN2_HI), x);
    let r = m.fma(neg_n, k(LN2_LO), r);
    // expm1(r) = r * (1 + r/2! + r^2/3! + ...)
    let p = m.poly(r, &taylor(1, 13, 1, false));
    (n, m.mul(r, p))
}

pub fn exp(m: &mut M, x: Reg) -> Reg {
    let (n, q) = reduce(m, x);
    let one_plus = m.add(q, k(1.0));
    let y = m.ldexp(one_plus, n);
    let nan = m.is_nan(x);
    m.sel(nan, x, y)
}

/// `exp(x) - 1` without cancellation: `2^n expm1(r) + (2^n - 1)`, `expm1(r)` itself for
/// `n = 0`, `exp(x)` once `2^n - 1` is `2^n` in f64 (n > 56).
pub fn expm1(m: &mut M, x: Reg) -> Reg {
    let (n, q) = reduce(m, x);
    let one = m.f("mov.f64", &[k(1.0)]);
    let scaled_q = m.ldexp(q, n);
    let power = m.ldexp(one, n);
    let power_minus_one = m.sub(power, k(1.0));
    let general = m.add(scaled_q, power_minus_one);
    let small = m.test("eq", n, k(0.0));
    let y = m.sel(small, q, general);
    let large = m.test("gt", n, k(56.0));
    let e = exp(m, x);
    let y = m.sel(large, e, y);
    let nan = m.is_nan(x);
    m.sel(nan, x, y)
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Base {
    E,
    Two,
    Ten,
}

/// `x = 2^e * m` with `m` in [sqrt(1/2), sqrt(2)): (e, log(m)) for a positive finite `x`.
/// log(m) = log1p(f) with f = m - 1 exact: with s = f / (2 + f), log1p(f) = 2 atanh(s)
/// = f - s (f - R), R = 2 z/3 + 2 z^2/5 + ... (z = s^2 <= 0.0295, to z^11).
fn reduce_log(m: &mut M, x: Reg) -> (Reg, Reg) {
    // Subnormals: scaled into the normal range first.
    let subnormal = m.test("lt", x, k(f64::MIN_POSITIVE));
    let scaled = m.mul(x, k(2f64.powi(54)));
    let x = m.sel(subnormal, scaled, x);
    let adjust = m.sel(subnormal, k(-54.0), k(0.0));
    let bits = m.b.def("mov.b64", Kind::B64, &[x.into()]);
    let biased = m.b.def("shr.u64", Kind::B64, &[bits.into(), Op::Int(52)]);
    let mantissa = m.b.def("and.b64", Kind::B64, &[bits.into(), Op::Int(0x000f_ffff_ffff_ffff)]);
    let one_to_two = m.b.def("or.b64", Kind::B64, &[mantissa.into(), Op::Int(0x3ff0_0000_0000_0000)]);
    let mant = m.f("mov.b64", &[one_to_two.into()]);
    let above = m.test("gt", mant, k(std::f64::consts::SQRT_2));
    let halved = m.mul(mant, k(0.5));
    let mant = m.sel(above, halved, mant);
    let e = m.b.def("cvt.rn.f64.s64", Kind::F64, &[biased.into()]);
    let e = m.sub(e, k(1023.0));
    let e = m.add(e, adjust);
    let bump = m.sel(above, k(1.0), k(0.0));
    let e = m.add(e, bump);
    let f = m.sub(mant, k(1.0));
    let two_plus = m.add(f, k(2.0));
    let s = m.div(f, two_plus);
    let z = m.mul(s, s);
    let coefs: Vec<f64> = (1..=11).map(|i| 2.0 / (2 * i + 1) as f64).collect();
    let p = m.poly(z, &coefs);
    let r = m.mul(z, p);
    let f_minus_r = m.sub(f, r);
    let correction = m.mul(s, f_minus_r);
    (e, m.sub(f, correction))
}

/// C's special values of the logarithms around `y`: -inf at 0, NaN below 0 and for
/// NaN, inf at inf.
fn log_specials(m: &mut M, x: Reg, y: Reg) -> Reg {
    let zero = m.test("eq", x, k(0.0));
    let y = m.sel(zero, k(f64::NEG_INFINITY), y);
    let negative = m.test("lt", x, k(0.0));
    let y = m.sel(negative, k(f64::NAN), y);
    let inf = m.test("eq", x, k(f64::INFINITY));
    let y = m.sel(inf, k(f64::INFINITY), y);
    let nan = m.is_nan(x);
    m.sel(nan, x, y)
}

pub fn log(m: &mut M, x: Reg, base: Base) -> Reg {
    let (e, log_m) = reduce_log(m, x);
    let y = match base {
        // e ln2 + log(m): e * LN2_HI is exact, so the sum rounds once.
        Base::E | Base::Ten => {
            let low = m.fma(e, k(LN2_LO), log_m);
            let ln = m.fma(e, k(LN2_HI), low);
            if base == Base::Ten {
                m.mul(ln, k(std::f64::consts::LOG10_E))
            } else {
                ln
            }
        }
        // Exact for powers of two.
        Base::Two => m.fma(log_m, k(std::f64::consts::LOG2_E), e),
    };
    log_specials(m, x, y)
}

/// `log(1 + x)`: with u = 1 + x rounded, log(u) * x / (u - 1) corrects the rounding of u
/// (and is x itself where u is 1).
pub fn log1p(m: &mut M, x: Reg) -> Reg {
    let u = m.add(x, k(1.0));
    let log_u = log(m, u, Base::E);
    let u_minus_one = m.sub(u, k(1.0));
    let ratio = m.div(x, u_minus_one);
    let corrected = m.mul(log_u, ratio);
    let exact = m.test("eq", u, k(1.0));
    let y = m.sel(exact, x, corrected);
    let inf = m.test("eq", x, k(f64::INFINITY));
    m.sel(inf, x, y)
}
