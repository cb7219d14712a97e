//! float16 and bfloat16: decoding to f32 (exact, by hand). Encoding is
//! `rounding::f64_to_format` with the `F16`/`BF16` formats (NaNs become the canonical
//! NaN `0x7fff`, as `cvt` does on NVIDIA GPUs); its tests against known bit patterns
//! are here.

/// The f32 equal to an f16 (exact; NaNs become the canonical f32 NaN).
pub(crate) fn f16_to_f32(bits: u16) -> f32 {
    let negative = bits & 0x8000 != 0;
    let exponent = ((bits >> 10) & 0x1f) as u32;
    let fraction = (bits & 0x3ff) as u32;
    let sign = if negative { 1u32 << 31 } else { 0 };
    let magnitude = match (exponent, fraction) {
        (0, 0) => 0,
        (0, _) => {
            // Subnormal: fraction * 2^-24, normalised for f32.
            let shift = fraction.leading_zeros() - 21; // moves the leading 1 to bit 10
            let normalised = (fraction << shift) & 0x3ff;
            let exponent = 127 - 15 + 1 - shift;
            exponent << 23 | normalised << 13
        }
        (0x1f, 0) => 0x7f80_0000,
        (0x1f, _) => return f32::from_bits(0x7fff_ffff),
        _ => (exponent + 127 - 15) << 23 | fraction << 13,
    };
    f32::from_bits(sign | magnitude)
}

/// The f32 equal to a bf16 (exact: bf16 is f32's upper half; NaNs become canonical).
pub(crate) fn bf16_to_f32(bits: u16) -> f32 {
    let widened = f32::from_bits((bits as u32) << 16);
    if widened.is_nan() {
        f32::from_bits(0x7fff_ffff)
    } else {
        widened
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inst::Rounding::{self, *};
    use crate::rounding::{f64_to_format, BF16, F16};

    fn f64_to_f16(x: f64, mode: Rounding) -> u16 {
        f64_to_format(x, F16, mode) as u16
    }

    fn f64_to_bf16(x: f64, mode: Rounding) -> u16 {
        f64_to_format(x, BF16, mode) as u16
    }

    fn f16(x: f32) -> u16 {
        f64_to_f16(x as f64, Nearest)
    }

    fn bf16(x: f32) -> u16 {
        f64_to_bf16(x as f64, Nearest)
    }

    #[test]
    fn f16_known_patterns() {
        assert_eq!(f16(1.0), 0x3c00);
        assert_eq!(f16(-2.0), 0xc000);
        assert_eq!(f16(0.0), 0x0000);
        assert_eq!(f16(-0.0), 0x8000);
        assert_eq!(f16(65504.0), 0x7bff);
        assert_eq!(f16(65519.99), 0x7bff); // below the halfway point to 65536
        assert_eq!(f16(65520.0), 0x7c00); // the tie rounds to even: infinity
        assert_eq!(f16(f32::INFINITY), 0x7c00);
        assert_eq!(f16(f32::NEG_INFINITY), 0xfc00);
        assert_eq!(f16(f32::NAN), 0x7fff);
        assert_eq!(f16(2f32.powi(-24)), 0x0001); // smallest subnormal
        assert_eq!(f16(2f32.powi(-25)), 0x0000); // half of it: tie to even (zero)
        assert_eq!(f16(1.5 * 2f32.powi(-25)), 0x0001);
        assert_eq!(f16(3.0 * 2f32.powi(-25)), 0x0002); // 1.5 quanta: tie to even (2)
        assert_eq!(f16(2f32.powi(-14)), 0x0400); // smallest normal
        assert_eq!(f16(2f32.powi(-14) - 2f32.powi(-25)), 0x0400); // rounds up into normals
        assert_eq!(f16(1.0 + 2f32.powi(-11)), 0x3c00); // tie between 1 and 1+ulp: even
        assert_eq!(f16(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02); // tie: even is up
        assert_eq!(f16(0.1), 0x2e66);
    }

    #[test]
    fn f16_directed() {
        assert_eq!(f64_to_f16(0.1, Up), 0x2e67);
        assert_eq!(f64_to_f16(0.1, Down), 0x2e66);
        assert_eq!(f64_to_f16(1e6, Zero), 0x7bff);
        assert_eq!(f64_to_f16(-1e6, Down), 0xfc00);
        assert_eq!(f64_to_f16(1e-10, Up), 0x0001);
    }

    #[test]
    fn bf16_known_patterns() {
        assert_eq!(bf16(1.0), 0x3f80);
        assert_eq!(bf16(-1.0), 0xbf80);
        assert_eq!(bf16(f32::NAN), 0x7fff);
        assert_eq!(bf16(f32::INFINITY), 0x7f80);
        assert_eq!(bf16(f32::MAX), 0x7f80); // rounds up past the largest bf16
        assert_eq!(bf16(f32::from_bits(0x3f80_8000)), 0x3f80); // tie: even
        assert_eq!(bf16(f32::from_bits(0x3f81_8000)), 0x3f82); // tie: even is up
        assert_eq!(bf16(f32::from_bits(0x3f80_8001)), 0x3f81);
        assert_eq!(bf16(f32::from_bits(0x0000_0001)), 0x0000); // tiny subnormal
        assert_eq!(bf16(f32::from_bits(0x0001_8000)), 0x0002); // subnormal tie: even
        assert_eq!(bf16(0.1), 0x3dcd);
    }

    #[test]
    fn decoding_is_exact_and_round_trips() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x03ff), 1023.0 * 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x7bff), 65504.0);
        assert_eq!(f16_to_f32(0xfc00), f32::NEG_INFINITY);
        assert_eq!(f16_to_f32(0x7e00).to_bits(), 0x7fff_ffff);
        assert_eq!(f16_to_f32(0x8000).to_bits(), 0x8000_0000);
        assert_eq!(bf16_to_f32(0x3f80), 1.0);
        assert_eq!(bf16_to_f32(0x0001), f32::from_bits(0x0001_0000));
        for bits in 0..=u16::MAX {
            if f16_to_f32(bits).is_nan() {
                assert_eq!((bits >> 10) & 0x1f, 0x1f);
                continue;
            }
            assert_eq!(f16(f16_to_f32(bits)), bits, "f16 {bits:#06x}");
            if !bf16_to_f32(bits).is_nan() {
                assert_eq!(bf16(bf16_to_f32(bits)), bits, "bf16 {bits:#06x}");
            }
        }
    }
}
