//! Rounding an exact value into an IEEE binary format in any of PTX's four directions.
//!
//! One routine, `round_to_format`, serves every narrowing the interpreter does (f64 or
//! f32 into f16/bf16/f32, integers into any float), so the rounding rules live in one
//! place and are tested once.

use crate::inst::Rounding;

/// An IEEE binary interchange format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Format {
    /// Explicit mantissa bits (10 for f16).
    pub mantissa_bits: u32,
    pub exponent_bits: u32,
}

pub(crate) const F16: Format = Format { mantissa_bits: 10, exponent_bits: 5 };
pub(crate) const BF16: Format = Format { mantissa_bits: 7, exponent_bits: 8 };
pub(crate) const F32: Format = Format { mantissa_bits: 23, exponent_bits: 8 };
pub(crate) const F64: Format = Format { mantissa_bits: 52, exponent_bits: 11 };

impl Format {
    fn bias(self) -> i32 {
        (1 << (self.exponent_bits - 1)) - 1
    }

    fn max_biased_exponent(self) -> u64 {
        (1 << self.exponent_bits) - 1
    }

    fn sign_bit(self) -> u64 {
        1 << (self.mantissa_bits + self.exponent_bits)
    }

    pub(crate) fn infinity(self, negative: bool) -> u64 {
        self.sign(negative) | self.max_biased_exponent() << self.mantissa_bits
    }

    fn max_finite(self, negative: bool) -> u64 {
        self.infinity(negative) - 1
    }

    pub(crate) fn zero(self, negative: bool) -> u64 {
        self.sign(negative)
    }

    fn sign(self, negative: bool) -> u64 {
        if negative {
            self.sign_bit()
        } else {
            0
        }
    }

    /// The canonical NaN NVIDIA GPUs produce: all exponent and mantissa bits set.
    pub(crate) fn canonical_nan(self) -> u64 {
        self.sign_bit() - 1
    }
}

/// The bits of `±mantissa * 2^exponent` in `format`, rounded as `mode` says.
/// A zero mantissa gives a signed zero.
pub(crate) fn round_to_format(negative: bool, mantissa: u128, exponent: i32, format: Format, mode: Rounding) -> u64 {
    if mantissa == 0 {
        return format.zero(negative);
    }
    let m = format.mantissa_bits as i32;
    let min_exponent = 1 - format.bias();
    let leading = 127 - mantissa.leading_zeros() as i32 + exponent;
    // The weight of the result's last mantissa bit (subnormals share the smallest one).
    let quantum = leading.max(min_exponent) - m;
    let shift = quantum as i64 - exponent as i64;
    let (mut kept, half, sticky) = if shift <= 0 {
        // Exact: the value has no bits below the quantum (and fits: leading - quantum <= m).
        (mantissa << (-shift) as u32, false, false)
    } else if shift >= 128 {
        (0, false, true)
    } else {
        let shift = shift as u32;
        let kept = mantissa >> shift;
        let rest = mantissa & ((1u128 << shift) - 1);
        let half_bit = 1u128 << (shift - 1);
        (kept, rest & half_bit != 0, rest & (half_bit - 1) != 0)
    };
    let inexact = half || sticky;
    let round_up = match mode {
        Rounding::Nearest => half && (sticky || kept & 1 == 1),
        Rounding::Zero => false,
        Rounding::Up => !negative && inexact,
        Rounding::Down => negative && inexact,
    };
    let mut quantum = quantum;
    if round_up {
        kept += 1;
        if kept == 1u128 << (m + 1) {
            kept >>= 1;
            quantum += 1;
        }
    }
    let biased = if kept >= 1u128 << m { (quantum + m + format.bias()) as i64 } else { 0 };
    if biased >= format.max_biased_exponent() as i64 {
        let to_infinity = match mode {
            Rounding::Nearest => true,
            Rounding::Zero => false,
            Rounding::Up => !negative,
            Rounding::Down => negative,
        };
        return if to_infinity { format.infinity(negative) } else { format.max_finite(negative) };
    }
    let fraction = (kept as u64) & ((1u64 << m) - 1);
    format.sign(negative) | (biased as u64) << m | fraction
}

/// A finite f64 as `(negative, mantissa, exponent)` with value `mantissa * 2^exponent`.
pub(crate) fn decompose_f64(x: f64) -> (bool, u128, i32) {
    let bits = x.to_bits();
    let negative = bits >> 63 != 0;
    let biased = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & ((1 << 52) - 1);
    if biased == 0 {
        (negative, fraction as u128, -1074)
    } else {
        (negative, (fraction | 1 << 52) as u128, biased - 1075)
    }
}

/// `x` (any f64, f32 widened exactly included) in `format`, rounded as `mode` says.
pub(crate) fn f64_to_format(x: f64, format: Format, mode: Rounding) -> u64 {
    if x.is_nan() {
        return format.canonical_nan();
    }
    if x.is_infinite() {
        return format.infinity(x < 0.0);
    }
    let (negative, mantissa, exponent) = decompose_f64(x);
    round_to_format(negative, mantissa, exponent, format, mode)
}

/// An integer in `format`, rounded as `mode` says.
pub(crate) fn int_to_format(value: i128, format: Format, mode: Rounding) -> u64 {
    round_to_format(value < 0, value.unsigned_abs(), 0, format, mode)
}

/// The f32 nearest in direction `mode` to the exact value `sum + error`, where `sum`
/// is an f64 rounded to nearest and `error` the exact rounding error (TwoSum); used
/// for f32 `add/sub/mul` with `.rz/.rm/.rp`. Any f32 lying between the exact value and
/// `sum` would be a closer f64, so only a tie at an f32 needs `error`'s sign.
pub(crate) fn f32_directed(sum: f64, error: f64, mode: Rounding) -> f32 {
    let nearest = sum as f32;
    if sum.is_nan() || mode == Rounding::Nearest {
        return nearest;
    }
    let above = (nearest as f64) > sum || ((nearest as f64) == sum && error < 0.0);
    let below = (nearest as f64) < sum || ((nearest as f64) == sum && error > 0.0);
    let toward_zero_is_down = sum > 0.0 || (sum == 0.0 && error > 0.0);
    let down = match mode {
        Rounding::Down => true,
        Rounding::Up => false,
        _ => toward_zero_is_down,
    };
    if down && above {
        nearest.next_down()
    } else if !down && below {
        nearest.next_up()
    } else {
        nearest
    }
}

/// The same for an f64 result: `sum` rounded to nearest, `error` the exact remainder.
pub(crate) fn f64_directed(sum: f64, error: f64, mode: Rounding) -> f64 {
    if mode == Rounding::Nearest || sum.is_nan() || error == 0.0 || error.is_nan() {
        return sum;
    }
    let toward_zero_is_down = sum > 0.0;
    let down = match mode {
        Rounding::Down => true,
        Rounding::Up => false,
        _ => toward_zero_is_down,
    };
    if down && error < 0.0 {
        sum.next_down()
    } else if !down && error > 0.0 {
        sum.next_up()
    } else {
        sum
    }
}

/// An f64 sum or product that overflowed to infinity from finite operands, rounded as
/// `mode` says (directed modes stop at the largest finite value on one side).
pub(crate) fn f64_overflow(infinity: f64, mode: Rounding) -> f64 {
    let keep = match mode {
        Rounding::Nearest => true,
        Rounding::Zero => false,
        Rounding::Up => infinity > 0.0,
        Rounding::Down => infinity < 0.0,
    };
    if keep {
        infinity
    } else {
        f64::MAX.copysign(infinity)
    }
}

/// `x` rounded to an integral value in direction `mode`.
pub(crate) fn round_integral(x: f64, mode: Rounding) -> f64 {
    match mode {
        Rounding::Nearest => x.round_ties_even(),
        Rounding::Zero => x.trunc(),
        Rounding::Down => x.floor(),
        Rounding::Up => x.ceil(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_format_matches_rust_casts() {
        for x in [1.0f64, 0.1, -3.75, 1e-40, 1e-46, 3.4e38, 3.5e38, 1.0 + f64::EPSILON, 2.5e-45] {
            assert_eq!(f64_to_format(x, F32, Rounding::Nearest), (x as f32).to_bits() as u64, "{x}");
        }
    }

    #[test]
    fn directed_rounding_to_f32() {
        let x = 0.1f64; // not an f32: its two neighbours differ by one ulp
        let down = f64_to_format(x, F32, Rounding::Down);
        let up = f64_to_format(x, F32, Rounding::Up);
        assert_eq!(up, down + 1);
        assert_eq!(f64_to_format(-x, F32, Rounding::Zero), (1 << 31) | down);
        assert_eq!(f64_to_format(1e300, F32, Rounding::Zero), f32::MAX.to_bits() as u64);
        assert_eq!(f64_to_format(-1e300, F32, Rounding::Up), (-f32::MAX).to_bits() as u64);
        assert_eq!(f64_to_format(1e-300, F32, Rounding::Up), 1);
        assert_eq!(f64_to_format(-1e-300, F32, Rounding::Up), 1 << 31);
    }

    #[test]
    fn integers_round_with_sticky_bits() {
        // 2^60 + 2^52 + 1 is just above a bf16 tie: it must round up, not to even.
        let x = (1i128 << 60) + (1 << 52) + 1;
        let bits = int_to_format(x, BF16, Rounding::Nearest);
        assert_eq!(bits, 0x5d81);
        assert_eq!(int_to_format(-1, F32, Rounding::Nearest), (-1f32).to_bits() as u64);
        assert_eq!(int_to_format(u64::MAX as i128, F32, Rounding::Nearest), (u64::MAX as f32).to_bits() as u64);
        assert_eq!(int_to_format(u64::MAX as i128, F32, Rounding::Zero), 0x5f7fffff);
    }

    #[test]
    fn directed_sums() {
        let (a, b) = (1.0f32, 1e-10f32);
        let sum = a as f64 + b as f64;
        let error = b as f64 - (sum - a as f64);
        assert_eq!(f32_directed(sum, error, Rounding::Up), 1.0f32.next_up());
        assert_eq!(f32_directed(sum, error, Rounding::Down), 1.0);
        assert_eq!(f32_directed(-sum, -error, Rounding::Zero), -1.0);
        assert_eq!(f64_directed(1.0, -1e-30, Rounding::Down), 1.0f64.next_down());
        assert_eq!(f64_directed(1.0, -1e-30, Rounding::Up), 1.0);
    }
}
