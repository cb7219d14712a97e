//! exp, expm1, log, log1p, tanh and erf on f32x4 lanes, as inline Cranelift code.
//!
//! Through libm, a vector costs four calls plus moving each lane out and back in; these
//! are range reduction and a polynomial, in IEEE arithmetic and bit operations (no table,
//! no branch). exp, expm1, log and tanh are Cephes's single-precision algorithms; erf's
//! polynomials were fitted for this file. Polynomials are evaluated by Estrin's scheme
//! ([`Ops::poly`]); products and sums are rounded separately (no `fma`, see
//! [`Ops::mul_add`]), so every host computes the same values.
//!
//! Error against float64 references over every 17th float32 bit pattern (252 million
//! inputs), in units in the last place of the float32 result: exp 1.01, expm1 1.70,
//! log 0.82, log1p 1.44, tanh 1.31, erf 1.37 (glibc's expf... 0.50, 0.79, 0.82, 0.82,
//! 2.14, 0.92). NaN propagates; exp overflows to inf and underflows through
//! the subnormals to 0; log(0) = -inf, log(x < 0) = NaN, log(inf) = inf; tanh and erf
//! saturate to +-1. Subnormal inputs and results are computed, not flushed (unless the
//! caller's MXCSR says so).
//!
//! Scalars keep libm: only vectors have four calls to save.
// Cephes's coefficients and the fitted ones are written with the digits they were published or fitted with: clippy would round them to what float parsing gives anyway.
#![allow(clippy::excessive_precision)]

use super::lanes::Ops;
use crate::ir::Prim;
use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{InstBuilder, Value};

/// The inline f32x4 code for `op`, where there is one.
pub fn function(op: Prim) -> Option<fn(&mut Ops, Value) -> Value> {
    Some(match op {
        Prim::Exp => exp,
        Prim::Expm1 => expm1,
        Prim::Log => log,
        Prim::Log1p => log1p,
        Prim::Tanh => tanh,
        Prim::Erf => erf,
        _ => return None,
    })
}

/// ln 2 in two parts: `LN2_HI` has 9 significant bits, so `n * LN2_HI` is exact for the
/// |n| < 2^8 of the range reductions.
const LN2_HI: f32 = 0.693359375;
const LN2_LO: f32 = -2.12194440e-4;

/// Cephes's expf: `expm1(r) ~ r + r^2 P(r)` for |r| <= ln2 / 2.
const EXPM1_P: [f32; 6] =
    [1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1];

/// Cephes's logf: `log(1 + f) ~ f - f^2 / 2 + f^3 P(f)` for f in [sqrt(1/2) - 1, sqrt(2) - 1).
const LOG_P: [f32; 9] = [
    7.0376836292e-2,
    -1.1514610310e-1,
    1.1676998740e-1,
    -1.2420140846e-1,
    1.4249322787e-1,
    -1.6668057665e-1,
    2.0000714765e-1,
    -2.4999993993e-1,
    3.3333331174e-1,
];

/// Cephes's tanhf: `tanh(x) ~ x + x^3 P(x^2)` for |x| < 0.625.
const TANH_P: [f32; 5] = [-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1];

/// `erf(x) ~ x + x P(x^2)` for |x| < 1: Chebyshev fit (mpmath.chebyfit, degree 6) of
/// `erf(x) / x - 1` on x^2 in [0, 1], max error 1.2e-9.
const ERF_P: [f32; 7] = [
    7.8758750626854883e-5,
    -8.0168642871658695e-4,
    5.189087423433974e-3,
    -2.6854212010626412e-2,
    1.1283594715160218e-1,
    -3.7612626666720331e-1,
    1.2837916584835095e-1,
];

/// `erfc(x) ~ e^(-x^2) R(1/x)` for x >= 1: Chebyshev fit (degree 7) of `erfc(x) e^(x^2)` on
/// 1/x in [0.25, 1]; times e^(-x^2), its error is at most 1.2e-9.
const ERFC_R: [f32; 8] = [
    -1.9605029369706144e-2,
    1.2847945060292617e-1,
    -3.6856255862597054e-1,
    5.8989717301079351e-1,
    -5.1389912240258173e-1,
    5.3599493622805151e-2,
    5.5729263504968306e-1,
    3.8153229441997627e-4,
];

/// `x` limited to `lo..=hi`; NaN stays NaN.
fn clamp(ops: &mut Ops, x: Value, lo: f32, hi: f32) -> Value {
    let above = ops.fcompare(FloatCC::GreaterThan, x, hi);
    let x = ops.replace(above, hi, x);
    let below = ops.fcompare(FloatCC::LessThan, x, lo);
    ops.replace(below, lo, x)
}

/// 2^n for integer lanes `n` in -126..=127.
fn pow2(ops: &mut Ops, n: Value) -> Value {
    let biased = ops.add(n, 127);
    let bits = ops.shl(biased, 23);
    ops.as_float(bits)
}

/// `(n, expm1(r))` with `x = n ln2 + r`, `n` an integer (as i32 lanes) and |r| <= ln2 / 2
/// (a little more where `x log2(e)` rounds across a half), for |x| < 2^21.
fn reduce(ops: &mut Ops, x: Value) -> (Value, Value) {
    // Adding 1.5 * 2^23 rounds to an integer, to nearest, which the low mantissa bits then hold.
    const ROUND: f32 = 12582912.0;
    let round = ops.splat_float(ROUND);
    let t = ops.mul_const_add(x, std::f32::consts::LOG2_E, round);
    let n_float = ops.b.ins().fsub(t, round);
    let t_bits = ops.as_int(t);
    let n = ops.add(t_bits, ROUND.to_bits().wrapping_neg());
    let r = ops.mul_const_add(n_float, -LN2_HI, x);
    let r = ops.mul_const_add(n_float, -LN2_LO, r);
    let r2 = ops.b.ins().fmul(r, r);
    let p = ops.poly(r, &EXPM1_P);
    (n, ops.mul_add(p, r2, r))
}

/// `e^x = 2^n (1 + expm1(r))`.
pub fn exp(ops: &mut Ops, x: Value) -> Value {
    // Below -104 e^x rounds to 0, above 89 to inf: the clamp keeps n in -150..=128.
    let x = clamp(ops, x, -104.0, 89.0);
    let (n, em1) = reduce(ops, x);
    let one = ops.splat_float(1.0);
    let mantissa = ops.b.ins().fadd(em1, one);
    // 2^n as two normal factors: the first product is exact, the second rounds once,
    // to inf on overflow and to a subnormal or 0 on underflow.
    let half = ops.sshr(n, 1);
    let rest = ops.b.ins().isub(n, half);
    let (half, rest) = (pow2(ops, half), pow2(ops, rest));
    let scaled = ops.b.ins().fmul(mantissa, half);
    ops.b.ins().fmul(scaled, rest)
}

/// `e^x - 1 = 2^n (1 + expm1(r)) - 1`, computed as `2 (t expm1(r) + (t - 1/2))` with
/// `t = 2^(n-1)`: finite up to n = 128, and exactly `expm1(r)` for n = 0 (|x| < ln2 / 2),
/// where cancellation would lose the small results.
pub fn expm1(ops: &mut Ops, x: Value) -> Value {
    // Below -20 the result rounds to -1, above 89 to inf.
    let x = clamp(ops, x, -20.0, 89.0);
    let (n, em1) = reduce(ops, x);
    let n_minus_1 = ops.add(n, u32::MAX);
    let t = pow2(ops, n_minus_1);
    let half = ops.splat_float(0.5);
    let t_minus_half = ops.b.ins().fsub(t, half);
    let sum = ops.mul_add(t, em1, t_minus_half);
    ops.b.ins().fadd(sum, sum)
}

/// `log(x) = e ln2 + log(1 + f)` with `x = (1 + f) 2^e`, 1 + f in [sqrt(1/2), sqrt(2)).
pub fn log(ops: &mut Ops, x: Value) -> Value {
    // A subnormal x is scaled by 2^25 into the normal range first.
    let subnormal = ops.fcompare(FloatCC::LessThan, x, f32::MIN_POSITIVE);
    let scale = ops.splat_float(33554432.0);
    let scaled = ops.b.ins().fmul(x, scale);
    let x_normal = ops.choose(subnormal, scaled, x);
    // x = m 2^e with m in [0.5, 1): the exponent field less 126, and the mantissa under
    // the exponent of 0.5.
    let bits = ops.as_int(x_normal);
    let exponent = ops.shr(bits, 23);
    let e = ops.add(exponent, (-126i32) as u32);
    let (minus_25, zero) = (ops.splat((-25i32) as u32), ops.splat(0));
    let correction = ops.choose(subnormal, minus_25, zero);
    let e = ops.b.ins().iadd(e, correction);
    let mantissa = ops.and(bits, 0x007f_ffff);
    let m = ops.add(mantissa, 0x3f00_0000);
    let m = ops.as_float(m);
    // Below sqrt(1/2), m is doubled (and e decremented): 1 + f = m or 2m.
    let low = ops.fcompare(FloatCC::LessThan, m, std::f32::consts::FRAC_1_SQRT_2);
    let (one, zero) = (ops.splat_float(1.0), ops.splat_float(0.0));
    let decrement = ops.choose(low, one, zero);
    let e = ops.int_to_float(e);
    let e = ops.b.ins().fsub(e, decrement);
    let extra = ops.choose(low, m, zero);
    let f = ops.b.ins().fsub(m, one);
    let f = ops.b.ins().fadd(f, extra);
    let f2 = ops.b.ins().fmul(f, f);
    let f3 = ops.b.ins().fmul(f, f2);
    let p = ops.poly(f, &LOG_P);
    let y = ops.b.ins().fmul(f3, p);
    let y = ops.mul_const_add(e, LN2_LO, y);
    let y = ops.mul_const_add(f2, -0.5, y);
    let y = ops.b.ins().fadd(f, y);
    let y = ops.mul_const_add(e, LN2_HI, y);
    let is_inf = ops.fcompare(FloatCC::Equal, x, f32::INFINITY);
    let y = ops.replace(is_inf, f32::INFINITY, y);
    let is_zero = ops.fcompare(FloatCC::Equal, x, 0.0);
    let y = ops.replace(is_zero, f32::NEG_INFINITY, y);
    let invalid = ops.fcompare(FloatCC::UnorderedOrLessThan, x, 0.0);
    ops.replace(invalid, f32::NAN, y)
}

/// `log(1 + x) = log(u) + d / u` to first order in d, where `u = 1 + x` rounded and
/// `d = x - (u - 1)` is what the rounding lost.
pub fn log1p(ops: &mut Ops, x: Value) -> Value {
    let one = ops.splat_float(1.0);
    let u = ops.b.ins().fadd(one, x);
    let u_minus_1 = ops.b.ins().fsub(u, one);
    let d = ops.b.ins().fsub(x, u_minus_1);
    let correction = ops.b.ins().fdiv(d, u);
    // NaN where u is 0 or inf (0/0, inf - inf): there log(u) alone is the answer.
    let undefined = ops.b.ins().fcmp(FloatCC::Unordered, correction, correction);
    let correction = ops.replace(undefined, 0.0, correction);
    let log_u = log(ops, u);
    ops.b.ins().fadd(log_u, correction)
}

/// `tanh(x)`: a polynomial below |x| = 0.625, else `1 - 2 / (e^(2|x|) + 1)` with the sign
/// of x, which rounds to 1 from |x| = 9.01 on (and stays 1 as e^(2|x|) overflows).
pub fn tanh(ops: &mut Ops, x: Value) -> Value {
    let a = ops.b.ins().fabs(x);
    let x2 = ops.b.ins().fmul(x, x);
    let x3 = ops.b.ins().fmul(x, x2);
    let p = ops.poly(x2, &TANH_P);
    let small = ops.mul_add(x3, p, x);
    let two_a = ops.b.ins().fadd(a, a);
    let e = exp(ops, two_a);
    let (one, two) = (ops.splat_float(1.0), ops.splat_float(2.0));
    let denominator = ops.b.ins().fadd(e, one);
    let fraction = ops.b.ins().fdiv(two, denominator);
    let large = ops.b.ins().fsub(one, fraction);
    let large = ops.with_sign_of(large, x);
    let is_small = ops.fcompare(FloatCC::LessThan, a, 0.625);
    ops.choose(is_small, small, large)
}

/// `erf(x)`: `x + x P(x^2)` below |x| = 1 (x kept out of the polynomial, so the leading
/// term is exact), else `1 - e^(-x^2) R(1/|x|)` with the sign of x, which rounds to 1 from
/// |x| = 3.92 on (and stays 1 as e^(-x^2) underflows, 1/|x| reaching 0).
pub fn erf(ops: &mut Ops, x: Value) -> Value {
    let a = ops.b.ins().fabs(x);
    let x2 = ops.b.ins().fmul(x, x);
    let p = ops.poly(x2, &ERF_P);
    let small = ops.mul_add(x, p, x);
    let one = ops.splat_float(1.0);
    let inverse = ops.b.ins().fdiv(one, a);
    let r = ops.poly(inverse, &ERFC_R);
    let minus_x2 = ops.b.ins().fneg(x2);
    let e = exp(ops, minus_x2);
    let erfc = ops.b.ins().fmul(e, r);
    let large = ops.b.ins().fsub(one, erfc);
    let large = ops.with_sign_of(large, x);
    let is_small = ops.fcompare(FloatCC::LessThan, a, 1.0);
    ops.choose(is_small, small, large)
}

#[cfg(test)]
mod tests {
    //! Each function compiled on f32x4 lanes and run over a sweep of float32 bit patterns
    //! and the special values, against float64 references; errors are in units in the last
    //! place of the float32 result. The bounds are the errors measured over every 17th bit
    //! pattern, rounded up.

    use super::super::test_kernel::{compile_pointwise, run_pointwise};
    use crate::ir::expr::unary;
    use crate::ir::Prim;
    use aotc_abi::DType;

    extern "C" {
        /// glibc's, linked by std: Rust has no erf.
        fn erf(x: f64) -> f64;
    }

    /// Where the functions change algorithm, clamp, overflow or underflow, and the
    /// values IEEE treats apart.
    const SPECIAL: [f32; 24] = [
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MIN_POSITIVE,
        1e-45,
        -1e-45,
        f32::MAX,
        f32::MIN,
        1.0,
        -1.0,
        0.625,
        -0.625,
        88.7228,
        88.7229,
        89.0,
        100.0,
        -87.3,
        -103.3,
        -104.0,
        -110.0,
        3.92,
        -4.0,
    ];

    /// Every 4099th bit pattern (all exponents, both signs, NaNs) and the special values.
    fn inputs() -> Vec<f32> {
        const STEP: u32 = 4099;
        let mut v: Vec<f32> = (0..=u32::MAX / STEP).map(|i| f32::from_bits(i * STEP)).collect();
        v.extend(SPECIAL);
        v
    }

    /// `op` on f32x4 lanes over `x`.
    fn run(op: Prim, x: &[f32]) -> Vec<f32> {
        let mut bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        // Whole vectors only: the scalar remainder would call libm.
        bytes.resize(x.len().next_multiple_of(4) * 4, 0);
        let out = run_pointwise(DType::F32, DType::F32, bytes, true, |x| unary(op, x));
        out.chunks_exact(4).take(x.len()).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()
    }

    /// The spacing of float32 values at `y`'s magnitude.
    fn ulp(y: f32) -> f64 {
        let exponent = (y.abs().max(f32::MIN_POSITIVE).to_bits() >> 23) as i32 - 127;
        2f64.powi(exponent - 23)
    }

    /// `got`'s distance from `want` in ulps; infinite when only one is NaN. inf counts as
    /// 2^128, the next power of two after the largest float32.
    fn ulp_error(got: f32, want: f64) -> f64 {
        if want.is_nan() || got.is_nan() {
            return if want.is_nan() && got.is_nan() { 0.0 } else { f64::INFINITY };
        }
        if got.is_infinite() && got == want as f32 {
            return 0.0;
        }
        let got = if got.is_infinite() { 2f64.powi(128).copysign(got as f64) } else { got as f64 };
        (got - want).abs() / ulp(want as f32)
    }

    /// The largest error of `op` over `x` against `reference`, and where.
    fn max_error(op: Prim, x: &[f32], reference: impl Fn(f64) -> f64) -> (f64, f32) {
        let got = run(op, x);
        let mut worst = (0.0, f32::NAN);
        for (&x, &y) in x.iter().zip(&got) {
            let e = ulp_error(y, reference(x as f64));
            if e > worst.0 {
                worst = (e, x);
            }
        }
        println!("{}: max error {:.3} ulp at x = {:e}", op.name(), worst.0, worst.1);
        worst
    }

    fn check(op: Prim, bound: f64, reference: impl Fn(f64) -> f64) {
        let (error, x) = max_error(op, &inputs(), reference);
        assert!(error <= bound, "{}: {error} ulp at x = {x:e} ({:#010x})", op.name(), x.to_bits());
    }

    #[test]
    fn exp() {
        check(Prim::Exp, 1.1, f64::exp);
    }

    #[test]
    fn expm1() {
        check(Prim::Expm1, 1.75, f64::exp_m1);
    }

    #[test]
    fn log() {
        check(Prim::Log, 1.0, f64::ln);
    }

    #[test]
    fn log1p() {
        check(Prim::Log1p, 1.5, f64::ln_1p);
    }

    #[test]
    fn tanh() {
        check(Prim::Tanh, 1.5, f64::tanh);
    }

    #[test]
    fn erf_() {
        check(Prim::Erf, 1.4, |x| unsafe { erf(x) });
    }

    /// Sigmoid is `1 / (1 + exp(-x))` (expr.rs), with this file's exp on vectors: its two
    /// roundings make 2.34 ulp with libm's exp too. Below x = -88.7, exp(-x) overflows and
    /// the result is 0 instead of a value under 2^-126, as with libm's exp and in
    /// PyTorch: the sweep stops at -87.
    #[test]
    fn sigmoid() {
        let x: Vec<f32> = inputs().into_iter().filter(|x| x.is_nan() || *x >= -87.0).collect();
        let (error, at) = max_error(Prim::Sigmoid, &x, |x| 1.0 / (1.0 + (-x).exp()));
        assert!(error <= 2.5, "sigmoid: {error} ulp at x = {at:e}");
        assert_eq!(run(Prim::Sigmoid, &[-100.0, f32::NEG_INFINITY]), [0.0, 0.0]);
    }

    /// Nanoseconds per element on f32x4 lanes and through libm called per element (the
    /// scalar loop), less a copy kernel's time on the same path; 2^16 inputs in [-10, 10]
    /// ((0, 20] for the logarithms). The four kernels take turns, and each keeps its
    /// fastest of 201 runs: the least disturbed by the rest of the machine. Not part of the
    /// suite: `cargo test --release -p aotc --lib vmath -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn speed() {
        const N: usize = 1 << 16;
        for op in [Prim::Exp, Prim::Expm1, Prim::Log, Prim::Log1p, Prim::Tanh, Prim::Erf, Prim::Sigmoid] {
            let positive = matches!(op, Prim::Log | Prim::Log1p);
            let x: Vec<u8> = (0..N)
                .map(|i| i as f32 / N as f32)
                .map(|t| if positive { 20.0 * t + 1e-3 } else { 20.0 * t - 10.0 })
                .flat_map(f32::to_le_bytes)
                .collect();
            // (vector, op), (vector, copy), (scalar, op), (scalar, copy).
            let mut kernels = [(true, true), (true, false), (false, true), (false, false)].map(|(vector, apply)| {
                compile_pointwise(DType::F32, DType::F32, N as i64, vector, |x| if apply { unary(op, x) } else { x })
            });
            let mut fastest = [f64::INFINITY; 4];
            for _ in 0..201 {
                for (kernel, best) in kernels.iter_mut().zip(&mut fastest) {
                    let input = x.clone();
                    let start = std::time::Instant::now();
                    kernel.run(input);
                    *best = best.min(start.elapsed().as_secs_f64() * 1e9);
                }
            }
            let [vector, scalar] = [0, 2].map(|k| (fastest[k] - fastest[k + 1]) / N as f64);
            println!(
                "{}: {vector:.2} ns/element on f32x4 lanes, {scalar:.2} through libm ({:.1}x)",
                op.name(),
                scalar / vector
            );
        }
    }
}
