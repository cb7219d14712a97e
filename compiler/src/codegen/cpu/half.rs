//! float16 and bfloat16: stored in 16 bits, computed in float32 (PyTorch's "opmath").
//!
//! A value of one of these dtypes lives in registers as an f32. A load widens exactly; a
//! store, a cast to the dtype and a constant of it round to the nearest value, ties to
//! even, as `c10::Half` and `c10::BFloat16` do (NaN stays NaN, float16 overflows to inf).
//! Cranelift's x64 backend cannot convert `f16` values, so the conversions are bit
//! manipulation. The float arithmetic they use only ever sees or makes normal f32 values,
//! so a caller's flush-to-zero or denormals-are-zero mode does not change the results.

use super::expr::Lanes;
use super::kernel::Cx;
use super::lanes::Ops;
use aotc_abi::DType;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder, Value};

/// Is `d` one of the 16-bit floats (stored in 16 bits, computed in f32)?
pub fn is_half(d: DType) -> bool {
    matches!(d, DType::F16 | DType::BF16)
}

/// The dtype a value of dtype `d` is computed in.
pub fn compute_dtype(d: DType) -> DType {
    if is_half(d) {
        DType::F32
    } else {
        d
    }
}

/// Is a value of dtype `d` an f32 in registers (float32, float16, bfloat16)?
pub fn in_f32(d: DType) -> bool {
    compute_dtype(d) == DType::F32
}

/// The value of dtype `d` nearest to `x` (ties to even), as an f32: what the generated
/// code's rounding gives, computed when compiling (for constants).
pub fn nearest(x: f32, d: DType) -> f32 {
    match d {
        DType::F16 => ::half::f16::from_f32(x).to_f32(),
        DType::BF16 => ::half::bf16::from_f32(x).to_f32(),
        _ => unreachable!("{d} is not a 16-bit float"),
    }
}

/// The f32 that the 16 bits of dtype `d` denote, exactly: `bits` is an i16, or for
/// vectors an i32x4 of zero-extended 16-bit lanes.
pub fn widen(cx: &mut Cx, bits: Value, d: DType, lanes: Lanes) -> Value {
    let mut ops = Ops::new(&mut cx.b, lanes);
    let h = if ops.vector { bits } else { ops.b.ins().uextend(types::I32, bits) };
    let f32_bits = match d {
        // bfloat16 is the upper half of a float32.
        DType::BF16 => ops.shl(h, 16),
        DType::F16 => ops.f16_to_f32_bits(h),
        _ => unreachable!("{d} is not a 16-bit float"),
    };
    ops.as_float(f32_bits)
}

/// `x` (an f32) rounded to the nearest value of dtype `d`, as its 16 bits: an i16, or for
/// vectors an i32x4 of zero-extended 16-bit lanes.
pub fn narrow(cx: &mut Cx, x: Value, d: DType, lanes: Lanes) -> Value {
    let mut ops = Ops::new(&mut cx.b, lanes);
    let bits = ops.as_int(x);
    let h = match d {
        DType::BF16 => ops.f32_to_bf16_bits(bits),
        DType::F16 => ops.f32_to_f16_bits(bits),
        _ => unreachable!("{d} is not a 16-bit float"),
    };
    if ops.vector {
        h
    } else {
        ops.b.ins().ireduce(types::I16, h)
    }
}

/// `x` (an f32) rounded to the nearest value of dtype `d`, still as an f32.
pub fn round(cx: &mut Cx, x: Value, d: DType, lanes: Lanes) -> Value {
    if d == DType::F16 {
        let mut ops = Ops::new(&mut cx.b, lanes);
        let bits = ops.as_int(x);
        let rounded = ops.f32_rounded_to_f16(bits);
        return ops.as_float(rounded);
    }
    let bits = narrow(cx, x, d, lanes);
    widen(cx, bits, d, lanes)
}

/// The conversions, on one value or on four lanes ([`Ops`]).
impl Ops<'_, '_> {
    /// float16 bits (zero-extended to 32) to float32 bits. The exponent and mantissa move
    /// into place and the exponent is rebiased (+112); an all-ones exponent (inf, NaN)
    /// stays all ones; a subnormal `m * 2^-24` is made by putting `m` under the exponent
    /// of 2^-14 and subtracting 2^-14 in float arithmetic (which gives +0 for zero).
    fn f16_to_f32_bits(&mut self, h: Value) -> Value {
        const REBIAS: u32 = 112 << 23;
        const EXP_MASK: u32 = 0x7c00 << 13;
        const TWO_POW_M14: u32 = 113 << 23;
        let magnitude = self.and(h, 0x7fff);
        let shifted = self.shl(magnitude, 13);
        let exp = self.and(shifted, EXP_MASK);
        let normal = self.add(shifted, REBIAS);
        let inf_nan = self.add(normal, REBIAS);
        let scaled = self.add(shifted, TWO_POW_M14);
        let scaled = self.as_float(scaled);
        let two_pow_m14 = self.splat_float(f32::from_bits(TWO_POW_M14));
        let subnormal = self.b.ins().fsub(scaled, two_pow_m14);
        let subnormal = self.as_int(subnormal);
        let is_inf_nan = self.compare(IntCC::Equal, exp, EXP_MASK);
        let is_subnormal = self.compare(IntCC::Equal, exp, 0);
        let finite = self.choose(is_subnormal, subnormal, normal);
        let unsigned = self.choose(is_inf_nan, inf_nan, finite);
        let sign = self.and(h, 0x8000);
        let sign = self.shl(sign, 16);
        self.b.ins().bor(unsigned, sign)
    }

    /// float32 bits to float16 bits (zero-extended to 32), rounding to nearest even.
    /// Three ranges of the magnitude `a`: from 2^16 up it is inf (or NaN: the quiet
    /// 0x7e00, signed, as in PyTorch); below 2^-14 the result is subnormal, rounded by the
    /// float addition of 0.5 (which puts the f16 mantissa at the bottom of the f32
    /// mantissa, where the hardware rounds to nearest even); in between, the exponent is
    /// rebiased and the 13 dropped mantissa bits are rounded by adding 0xfff plus the
    /// lowest kept bit (the carry may bump the exponent, up to inf from 65520 on).
    fn f32_to_f16_bits(&mut self, bits: Value) -> Value {
        const F32_INF: u32 = 0x7f80_0000;
        const F16_OVERFLOW: u32 = (127 + 16) << 23;
        const F16_MIN_NORMAL: u32 = (127 - 14) << 23;
        const HALF: u32 = ((127 - 15) + (23 - 10) + 1) << 23;
        const REBIAS_AND_ROUND: u32 = 0xfff_u32.wrapping_sub(112 << 23);
        let sign = self.and(bits, 0x8000_0000);
        let a = self.b.ins().bxor(bits, sign);

        let is_nan = self.compare(IntCC::UnsignedGreaterThan, a, F32_INF);
        let (quiet_nan, inf) = (self.splat(0x7e00), self.splat(0x7c00));
        let overflow = self.choose(is_nan, quiet_nan, inf);

        let af = self.as_float(a);
        let half = self.splat_float(f32::from_bits(HALF));
        let sum = self.b.ins().fadd(af, half);
        let sum = self.as_int(sum);
        let subnormal = self.add(sum, HALF.wrapping_neg());

        let odd = self.shr(a, 13);
        let odd = self.and(odd, 1);
        let biased = self.add(a, REBIAS_AND_ROUND);
        let rounded = self.b.ins().iadd(biased, odd);
        let normal = self.shr(rounded, 13);

        let is_overflow = self.compare(IntCC::UnsignedGreaterThanOrEqual, a, F16_OVERFLOW);
        let is_subnormal = self.compare(IntCC::UnsignedLessThan, a, F16_MIN_NORMAL);
        let finite = self.choose(is_subnormal, subnormal, normal);
        let unsigned = self.choose(is_overflow, overflow, finite);
        let sign = self.shr(sign, 16);
        self.b.ins().bor(unsigned, sign)
    }

    /// float32 bits to the float32 bits of the nearest float16 value (ties to even): what
    /// narrowing then widening gives, in half the operations. Adding and subtracting
    /// `magic`, the power of two 13 binades above the magnitude `a`'s (at least 2^-1, so
    /// that below 2^-14 it is the subnormals' fixed spacing 2^-24), leaves `a` rounded by
    /// the hardware to the 11 significant bits float16 keeps. From 65520 on the result
    /// is inf (`a` times 2^127 overflows), and NaN stays NaN. `a` is below 2^31, so the
    /// comparisons are signed ones, which SSE2 has.
    fn f32_rounded_to_f16(&mut self, bits: Value) -> Value {
        const F16_MIN_NORMAL: u32 = (127 - 14) << 23;
        const MAGIC_SHIFT: u32 = 13 << 23;
        const ROUNDS_TO_INF: u32 = 0x477f_f000; // 65520
        let sign = self.and(bits, 0x8000_0000);
        let a = self.b.ins().bxor(bits, sign);

        let exp = self.and(a, 0x7f80_0000);
        let is_subnormal = self.compare(IntCC::SignedLessThan, exp, F16_MIN_NORMAL);
        let min_normal = self.splat(F16_MIN_NORMAL);
        let exp = self.choose(is_subnormal, min_normal, exp);
        let magic = self.add(exp, MAGIC_SHIFT);
        let magic = self.as_float(magic);
        let af = self.as_float(a);
        let sum = self.b.ins().fadd(af, magic);
        let rounded = self.b.ins().fsub(sum, magic);

        let two_pow_127 = self.splat_float(f32::from_bits(254 << 23));
        let overflow = self.b.ins().fmul(af, two_pow_127);
        let is_overflow = self.compare(IntCC::SignedGreaterThanOrEqual, a, ROUNDS_TO_INF);
        let unsigned = self.choose(is_overflow, overflow, rounded);
        let unsigned = self.as_int(unsigned);
        self.b.ins().bor(unsigned, sign)
    }

    /// float32 bits to bfloat16 bits (zero-extended to 32), rounding to nearest even by
    /// adding 0x7fff plus the lowest kept bit before truncating; the carry turns the
    /// largest values into inf. NaN becomes the quiet NaN 0x7fc0, as in PyTorch.
    fn f32_to_bf16_bits(&mut self, bits: Value) -> Value {
        let upper = self.shr(bits, 16);
        let odd = self.and(upper, 1);
        let biased = self.add(bits, 0x7fff);
        let rounded = self.b.ins().iadd(biased, odd);
        let rounded = self.shr(rounded, 16);
        let quiet_nan = self.splat(0x7fc0);
        let magnitude = self.and(bits, 0x7fff_ffff);
        let is_nan = self.compare(IntCC::UnsignedGreaterThan, magnitude, 0x7f80_0000);
        self.choose(is_nan, quiet_nan, rounded)
    }
}

#[cfg(test)]
mod tests {
    //! The conversions, compiled into a library and run over every 16-bit pattern and
    //! the float32 values around every rounding boundary, against a reference that
    //! rounds by searching the sorted values of the dtype.

    use super::super::test_kernel::run_pointwise;
    use crate::ir::expr::cast;
    use aotc_abi::DType;

    /// `x.to(to)` for a 1-D `x` of dtype `from` given as little-endian `input`, on f32x4
    /// lanes when `vector`; returns the result's bytes.
    fn convert(from: DType, to: DType, input: Vec<u8>, vector: bool) -> Vec<u8> {
        run_pointwise(from, to, input, vector, |x| cast(x, to))
    }

    struct Format {
        dtype: DType,
        /// The bits of +inf; every code below it is a finite non-negative value.
        inf: u16,
        /// The exact value of a non-negative code up to `inf`.
        value: fn(u16) -> f64,
        /// The value `inf` stands for when rounding: the next power of two after the
        /// largest finite value (IEEE rounds to inf what would round to it).
        overflow: f64,
    }

    /// float16: 5 exponent bits (bias 15), 10 mantissa bits.
    const F16: Format = Format { dtype: DType::F16, inf: 0x7c00, value: |c| ieee_value(c, 10, 15), overflow: 65536.0 };
    /// bfloat16: 8 exponent bits (bias 127), 7 mantissa bits.
    const BF16: Format = Format {
        dtype: DType::BF16,
        inf: 0x7f80,
        value: |c| ieee_value(c, 7, 127),
        overflow: 3.402823669209385e38, /* 2^128 */
    };

    fn ieee_value(code: u16, mantissa_bits: u32, bias: i32) -> f64 {
        let (exp, mant) = ((code >> mantissa_bits) as i32, (code & ((1 << mantissa_bits) - 1)) as f64);
        let scale = |e: i32| 2f64.powi(e - bias - mantissa_bits as i32);
        if exp == 0 {
            mant * scale(1)
        } else {
            (mant + (1u32 << mantissa_bits) as f64) * scale(exp)
        }
    }

    impl Format {
        fn decode(&self, bits: u16) -> f32 {
            let magnitude = bits & 0x7fff;
            let v = if magnitude > self.inf {
                f64::NAN
            } else if magnitude == self.inf {
                f64::INFINITY
            } else {
                (self.value)(magnitude)
            };
            (if bits & 0x8000 != 0 { -v } else { v }) as f32
        }

        fn code_value(&self, code: u16) -> f64 {
            if code == self.inf {
                self.overflow
            } else {
                (self.value)(code)
            }
        }

        /// The code nearest to `x`, ties to the even code; NaN is any NaN code.
        fn round(&self, x: f32) -> u16 {
            let sign = if x.is_sign_negative() { 0x8000 } else { 0 };
            let a = x.abs() as f64;
            // The first code whose value is not below `a` (values grow with codes).
            let (mut above, mut end) = (0u32, self.inf as u32 + 1);
            while above < end {
                let mid = (above + end) / 2;
                if self.code_value(mid as u16) < a {
                    above = mid + 1
                } else {
                    end = mid
                }
            }
            let code = if above > self.inf as u32 {
                self.inf
            } else if above == 0 || self.code_value(above as u16) == a {
                above as u16
            } else {
                let (lo, hi) = (above as u16 - 1, above as u16);
                let (dlo, dhi) = (a - self.code_value(lo), self.code_value(hi) - a);
                if dlo < dhi || (dlo == dhi && lo % 2 == 0) {
                    lo
                } else {
                    hi
                }
            };
            sign | code
        }

        /// Every finite value and, between neighbours, the midpoint and the float32 values
        /// just beside it; both signs; zeros, infinities, NaN, float32 subnormals and
        /// values beyond the range.
        fn boundary_values(&self) -> Vec<f32> {
            let mut v = vec![
                0.0,
                f32::INFINITY,
                f32::NAN,
                f32::MIN_POSITIVE,
                f32::from_bits(1),
                f32::from_bits(0x007f_ffff),
                f32::MAX,
                1e30,
            ];
            for code in 0..self.inf {
                let (lo, hi) = ((self.value)(code), self.code_value(code + 1));
                let mid = ((lo + hi) / 2.0) as f32;
                v.extend([lo as f32, mid, f32::from_bits(mid.to_bits() - 1), f32::from_bits(mid.to_bits() + 1)]);
            }
            let negated: Vec<f32> = v.iter().map(|x| -x).collect();
            v.extend(negated);
            v
        }
    }

    fn le_bytes_u16(values: impl Iterator<Item = u16>) -> Vec<u8> {
        values.flat_map(u16::to_le_bytes).collect()
    }

    fn widens_every_pattern_exactly(f: &Format, vector: bool) {
        let out = convert(f.dtype, DType::F32, le_bytes_u16(0..=u16::MAX), vector);
        for (bits, got) in (0..=u16::MAX).zip(out.chunks_exact(4)) {
            let got = f32::from_le_bytes(got.try_into().unwrap());
            let want = f.decode(bits);
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{} {bits:#06x}: got {got:e}, want {want:e}",
                f.dtype
            );
        }
    }

    fn narrows_to_nearest_even(f: &Format, vector: bool) {
        let inputs = f.boundary_values();
        let out = convert(DType::F32, f.dtype, inputs.iter().flat_map(|x| x.to_le_bytes()).collect(), vector);
        for (x, got) in inputs.iter().zip(out.chunks_exact(2)) {
            let got = u16::from_le_bytes(got.try_into().unwrap());
            if x.is_nan() {
                assert!(f.decode(got).is_nan(), "{} NaN became {got:#06x}", f.dtype);
            } else {
                assert_eq!(got, f.round(*x), "{} from {x:e} ({:#010x})", f.dtype, x.to_bits());
            }
        }
    }

    #[test]
    fn float16_widens_exactly() {
        widens_every_pattern_exactly(&F16, false);
        widens_every_pattern_exactly(&F16, true);
    }

    #[test]
    fn bfloat16_widens_exactly() {
        widens_every_pattern_exactly(&BF16, false);
        widens_every_pattern_exactly(&BF16, true);
    }

    #[test]
    fn float16_rounds_to_nearest_even() {
        narrows_to_nearest_even(&F16, false);
        narrows_to_nearest_even(&F16, true);
    }

    #[test]
    fn bfloat16_rounds_to_nearest_even() {
        narrows_to_nearest_even(&BF16, false);
        narrows_to_nearest_even(&BF16, true);
    }

    /// `x.to(float16).to(float32)` kept in registers (`round`) gives the narrowed value
    /// widened, NaN a NaN.
    fn rounds_in_registers(f: &Format, vector: bool) {
        let inputs = f.boundary_values();
        let bytes = inputs.iter().flat_map(|x| x.to_le_bytes()).collect();
        let out = run_pointwise(DType::F32, DType::F32, bytes, vector, |x| cast(cast(x, f.dtype), DType::F32));
        for (x, got) in inputs.iter().zip(out.chunks_exact(4)) {
            let got = f32::from_le_bytes(got.try_into().unwrap());
            let want = if x.is_nan() { f32::NAN } else { f.decode(f.round(*x)) };
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{} from {x:e} ({:#010x}): got {got:e}, want {want:e}",
                f.dtype,
                x.to_bits()
            );
        }
    }

    #[test]
    fn float16_and_bfloat16_round_in_registers() {
        for vector in [false, true] {
            rounds_in_registers(&F16, vector);
            rounds_in_registers(&BF16, vector);
        }
    }

    #[test]
    fn reference_rounding_cases() {
        // Ties go to the even mantissa; overflow goes to inf; the smallest subnormal's half is 0.
        assert_eq!(F16.round(1.0 + 2f32.powi(-11)), 0x3c00);
        assert_eq!(F16.round(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02);
        assert_eq!(F16.round(65519.0), 0x7bff);
        assert_eq!(F16.round(65520.0), 0x7c00);
        assert_eq!(F16.round(2f32.powi(-25)), 0);
        assert_eq!(F16.round(-3.0 * 2f32.powi(-25)), 0x8002);
        assert_eq!(BF16.round(1.0 + 2f32.powi(-8)), 0x3f80);
        assert_eq!(BF16.round(f32::MAX), 0x7f80);
        assert_eq!(F16.decode(0x0001), 2f32.powi(-24));
        assert_eq!(BF16.decode(0xc040), -3.0);
    }
}
