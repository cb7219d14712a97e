//! sin, cos, tan, atan, atan2, asin and acos in f64.
// Fdlibm's constants, with the digits fdlibm publishes: clippy would round them to what float parsing gives anyway.
#![allow(clippy::excessive_precision)]

use super::{k, taylor, M};
use crate::codegen::cuda::ptx::{Kind, Op, Reg};
use std::f64::consts::{FRAC_PI_2, FRAC_PI_6, PI};

/// fdlibm's three-part pi/2 (33, 33 and 33+ significant bits): `n * PIO2_1` and
/// `n * PIO2_2` are exact for `|n| < 2^20`.
const PIO2_1: f64 = 1.570_796_326_734_125_614_17;
const PIO2_2: f64 = 6.077_100_506_303_965_976_60e-11;
const PIO2_3: f64 = 2.022_266_248_711_166_455_80e-21;

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Trig {
    Sin,
    Cos,
    Tan,
}

/// `x = n pi/2 + r`, `|r| <= pi/4`: sin(r) and cos(r) by their Taylor series (to r^17
/// and r^18), with the quadrant `n mod 4` that picks and signs them.
struct Reduced {
    sin: Reg,
    cos: Reg,
    /// `n` odd: sin and cos trade places.
    odd: Reg,
    /// `n mod 4` is 2 or 3: sin x is negated (cos x for quadrants 1 and 2).
    high: Reg,
}

fn reduce(m: &mut M, x: Reg) -> Reduced {
    let scaled = m.mul(x, k(2.0 / PI));
    let n = m.rint(scaled);
    let neg_n = m.f("neg.f64", &[n.into()]);
    let r = m.fma(neg_n, k(PIO2_1), x);
    let r = m.fma(neg_n, k(PIO2_2), r);
    let r = m.fma(neg_n, k(PIO2_3), r);
    let z = m.mul(r, r);
    // sin r = r + r z (-1/3! + z/5! - ...), cos r = 1 + z (-1/2! + z/4! - ...)
    let sin_tail = m.poly(z, &taylor(3, 8, 2, true).iter().map(|c| -c).collect::<Vec<_>>());
    let rz = m.mul(r, z);
    let sin = m.fma(rz, sin_tail, r);
    let cos_tail = m.poly(z, &taylor(2, 9, 2, true).iter().map(|c| -c).collect::<Vec<_>>());
    let cos = m.fma(z, cos_tail, k(1.0));
    // The quadrant, from n's low two bits (an infinite or NaN x gives a NaN r anyway).
    let n_int = m.b.def("cvt.rzi.s64.f64", Kind::B64, &[n.into()]);
    let q = m.b.def("and.b64", Kind::B64, &[n_int.into(), Op::Int(3)]);
    let odd_bit = m.b.def("and.b64", Kind::B64, &[q.into(), Op::Int(1)]);
    let odd = m.b.def("setp.ne.s64", Kind::Pred, &[odd_bit.into(), Op::Int(0)]);
    let high_bit = m.b.def("and.b64", Kind::B64, &[q.into(), Op::Int(2)]);
    let high = m.b.def("setp.ne.s64", Kind::Pred, &[high_bit.into(), Op::Int(0)]);
    Reduced { sin, cos, odd, high }
}

/// sin x: q = 0 sin r, 1 cos r, 2 -sin r, 3 -cos r.
fn pick_sin(m: &mut M, r: &Reduced) -> Reg {
    let pos = m.sel(r.odd, r.cos, r.sin);
    let neg = m.f("neg.f64", &[pos.into()]);
    m.sel(r.high, neg, pos)
}

/// cos x: q = 0 cos r, 1 -sin r, 2 -cos r, 3 sin r.
fn pick_cos(m: &mut M, r: &Reduced) -> Reg {
    let base = m.sel(r.odd, r.sin, r.cos);
    let neg = m.f("neg.f64", &[base.into()]);
    // Negated in quadrants 1 and 2: exactly one of odd and high.
    let negate = m.b.def("xor.pred", Kind::Pred, &[r.odd.into(), r.high.into()]);
    m.sel(negate, neg, base)
}

pub fn sin_cos_tan(m: &mut M, x: Reg, which: Trig) -> Reg {
    let r = reduce(m, x);
    match which {
        Trig::Sin => pick_sin(m, &r),
        Trig::Cos => pick_cos(m, &r),
        Trig::Tan => {
            let even = m.div(r.sin, r.cos);
            let neg_cos = m.f("neg.f64", &[r.cos.into()]);
            let odd_value = m.div(neg_cos, r.sin);
            m.sel(r.odd, odd_value, even)
        }
    }
}

/// sin x and cos x from one range reduction.
pub fn sin_and_cos(m: &mut M, x: Reg) -> (Reg, Reg) {
    let r = reduce(m, x);
    (pick_sin(m, &r), pick_cos(m, &r))
}

/// atan of `a` in [0, inf]: 1/a above 1 (then pi/2 minus), the identity
/// atan(t) = pi/6 + atan((t sqrt3 - 1) / (sqrt3 + t)) above tan(pi/12), then the
/// series t - t^3/3 + ... (|t| <= 0.268, to t^29).
fn atan_positive(m: &mut M, a: Reg) -> Reg {
    let sqrt3 = 3f64.sqrt();
    let inverted = m.test("gt", a, k(1.0));
    let inv = m.div(k(1.0), a);
    let t = m.sel(inverted, inv, a);
    let shifted = m.test("gt", t, k(0.267_949_192_431_122_7));
    let num = m.fma(t, k(sqrt3), k(-1.0));
    let den = m.add(t, k(sqrt3));
    let moved = m.div(num, den);
    let t = m.sel(shifted, moved, t);
    let z = m.mul(t, t);
    let coefs: Vec<f64> = (0..15).map(|i| if i % 2 == 0 { 1.0 } else { -1.0 } / (2 * i + 1) as f64).collect();
    let p = m.poly(z, &coefs);
    let base = m.sel(shifted, k(FRAC_PI_6), k(0.0));
    let y = m.fma(t, p, base);
    let complement = m.sub(k(FRAC_PI_2), y);
    m.sel(inverted, complement, y)
}

pub fn atan(m: &mut M, x: Reg) -> Reg {
    let a = m.abs(x);
    let y = atan_positive(m, a);
    let y = m.copysign(y, x);
    let nan = m.is_nan(x);
    m.sel(nan, x, y)
}

/// C's atan2, signed zeros and infinities included.
pub fn atan2(m: &mut M, y: Reg, x: Reg) -> Reg {
    let (ax, ay) = (m.abs(x), m.abs(y));
    let big = m.max(ax, ay);
    let small = m.min(ax, ay);
    let ratio = m.div(small, big);
    let both_zero = m.test("eq", big, k(0.0));
    let ratio = m.sel(both_zero, k(0.0), ratio);
    let both_inf = m.test("eq", small, k(f64::INFINITY));
    let ratio = m.sel(both_inf, k(1.0), ratio);
    let a = atan_positive(m, ratio);
    let steep = m.test("gt", ay, ax);
    let complement = m.sub(k(FRAC_PI_2), a);
    let a = m.sel(steep, complement, a);
    let left = m.sign_bit(x);
    let mirrored = m.sub(k(PI), a);
    let a = m.sel(left, mirrored, a);
    let r = m.copysign(a, y);
    let nan = m.test("nan", x, y);
    let sum = m.add(x, y);
    m.sel(nan, sum, r)
}

/// sqrt((1 - x)(1 + x)): cos of asin x, NaN outside [-1, 1].
fn cofactor(m: &mut M, x: Reg) -> Reg {
    let a = m.sub(k(1.0), x);
    let b = m.add(k(1.0), x);
    let p = m.mul(a, b);
    m.sqrt(p)
}

pub fn asin(m: &mut M, x: Reg) -> Reg {
    let c = cofactor(m, x);
    atan2(m, x, c)
}

pub fn acos(m: &mut M, x: Reg) -> Reg {
    let c = cofactor(m, x);
    atan2(m, c, x)
}
