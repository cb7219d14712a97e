//! `cvt` between all integer and float types, with PTX's rounding, saturation and `.ftz`.

use crate::float16::{bf16_to_f32, f16_to_f32};
use crate::inst::{CvtRounding, NumTy, Rounding};
use crate::ops::float::flush;
use crate::rounding::{f64_to_format, int_to_format, round_integral, Format, BF16, F16, F32, F64};

enum Value {
    Int(i128),
    /// Every float source is exact in f64.
    Float(f64),
}

fn format_of(ty: NumTy) -> Format {
    match ty {
        NumTy::F16 => F16,
        NumTy::Bf16 => BF16,
        NumTy::F32 => F32,
        _ => F64,
    }
}

pub(crate) fn cvt(to: NumTy, from: NumTy, rnd: CvtRounding, sat: bool, ftz: bool, a: u64) -> u64 {
    let value = match from {
        NumTy::Int(ty) => Value::Int(ty.extend(a)),
        NumTy::F16 => Value::Float(f16_to_f32(a as u16) as f64),
        NumTy::Bf16 => Value::Float(bf16_to_f32(a as u16) as f64),
        NumTy::F32 => {
            let x = f32::from_bits(a as u32);
            Value::Float(if ftz { flush(x) } else { x } as f64)
        }
        NumTy::F64 => Value::Float(f64::from_bits(a)),
    };
    match (to, value) {
        (NumTy::Int(ty), Value::Int(v)) => {
            let (low, high) = ty.range();
            ty.wrap(if sat { v.clamp(low, high) } else { v })
        }
        (NumTy::Int(ty), Value::Float(x)) => {
            // Float to integer always saturates; NaN gives 0.
            if x.is_nan() {
                return 0;
            }
            let mode = match rnd {
                CvtRounding::Integral(mode) => mode,
                _ => Rounding::Zero,
            };
            let (low, high) = ty.range();
            let rounded = round_integral(x, mode);
            let clamped = if rounded <= low as f64 {
                low
            } else if rounded >= high as f64 {
                high
            } else {
                rounded as i128
            };
            ty.wrap(clamped)
        }
        (_, Value::Int(v)) => {
            let mode = match rnd {
                CvtRounding::Float(mode) => mode,
                _ => Rounding::Nearest,
            };
            let bits = int_to_format(v, format_of(to), mode);
            if sat {
                saturate(to, bits)
            } else {
                bits
            }
        }
        (_, Value::Float(mut x)) => {
            let mode = match rnd {
                CvtRounding::Integral(mode) => {
                    x = round_integral(x, mode);
                    Rounding::Nearest
                }
                CvtRounding::Float(mode) => mode,
                CvtRounding::None => Rounding::Nearest,
            };
            if sat {
                x = if x.is_nan() { 0.0 } else { x.clamp(0.0, 1.0) };
            }
            let bits = f64_to_format(x, format_of(to), mode);
            if ftz && to == NumTy::F32 {
                flush(f32::from_bits(bits as u32)).to_bits() as u64
            } else {
                bits
            }
        }
    }
}

/// `.sat` on an integer's float result: clamp to [0, 1].
fn saturate(to: NumTy, bits: u64) -> u64 {
    let x = match to {
        NumTy::F16 => f16_to_f32(bits as u16) as f64,
        NumTy::Bf16 => bf16_to_f32(bits as u16) as f64,
        NumTy::F32 => f32::from_bits(bits as u32) as f64,
        _ => f64::from_bits(bits),
    };
    f64_to_format(x.clamp(0.0, 1.0), format_of(to), Rounding::Nearest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inst::IntTy::*;
    use CvtRounding::*;
    use Rounding::*;

    fn f32_to(ty: crate::inst::IntTy, mode: Rounding, x: f32) -> u64 {
        cvt(NumTy::Int(ty), NumTy::F32, Integral(mode), false, false, x.to_bits() as u64)
    }

    #[test]
    fn float_to_int_rounds_saturates_and_zeroes_nan() {
        assert_eq!(f32_to(S32, Nearest, 2.5), 2);
        assert_eq!(f32_to(S32, Nearest, 3.5), 4);
        assert_eq!(f32_to(S32, Zero, -2.7), (-2i32) as u32 as u64);
        assert_eq!(f32_to(S32, Down, -2.2), (-3i32) as u32 as u64);
        assert_eq!(f32_to(S32, Up, 2.2), 3);
        assert_eq!(f32_to(S32, Zero, f32::NAN), 0);
        assert_eq!(f32_to(S32, Zero, 3e9), i32::MAX as u64);
        assert_eq!(f32_to(S32, Zero, -3e9), i32::MIN as u32 as u64);
        assert_eq!(f32_to(U32, Zero, -1.0), 0);
        assert_eq!(f32_to(U8, Nearest, 300.0), 255);
        assert_eq!(f32_to(S8, Nearest, -300.0), 0x80);
        assert_eq!(f32_to(U64, Zero, f32::INFINITY), u64::MAX);
        assert_eq!(f32_to(S64, Zero, f32::NEG_INFINITY), i64::MIN as u64);
    }

    #[test]
    fn int_to_int_extends_truncates_and_saturates() {
        let narrow = |to, from, sat, a| cvt(NumTy::Int(to), NumTy::Int(from), None, sat, false, a);
        assert_eq!(narrow(U64, S32, false, 0xffff_fffe), (-2i64) as u64);
        assert_eq!(narrow(U64, U32, false, 0xffff_fffe), 0xffff_fffe);
        assert_eq!(narrow(U8, U32, false, 0x1ff), 0xff);
        assert_eq!(narrow(S8, S32, true, 1000), 127);
        assert_eq!(narrow(U16, S32, true, (-5i32) as u32 as u64), 0);
    }

    #[test]
    fn float_conversions() {
        let f16 = cvt(NumTy::F16, NumTy::F32, Float(Nearest), false, false, 1.0f32.to_bits() as u64);
        assert_eq!(f16, 0x3c00);
        let back = cvt(NumTy::F32, NumTy::F16, None, false, false, 0x3c00);
        assert_eq!(back, 1.0f32.to_bits() as u64);
        let bf16 = cvt(NumTy::Bf16, NumTy::F32, Float(Nearest), false, false, 1.0f32.to_bits() as u64);
        assert_eq!(bf16, 0x3f80);
        let narrowed = cvt(NumTy::F32, NumTy::F64, Float(Zero), false, false, 0.1f64.to_bits());
        assert_eq!(narrowed, 0x3dcc_cccc); // 0.1 rounds up to 0x3dcccccd, so toward zero is below
        let integral = cvt(NumTy::F32, NumTy::F32, Integral(Nearest), false, false, 2.5f32.to_bits() as u64);
        assert_eq!(f32::from_bits(integral as u32), 2.0);
        let saturated = cvt(NumTy::F32, NumTy::F32, None, true, false, 7.0f32.to_bits() as u64);
        assert_eq!(f32::from_bits(saturated as u32), 1.0);
        let nan_sat = cvt(NumTy::F32, NumTy::F32, None, true, false, f32::NAN.to_bits() as u64);
        assert_eq!(nan_sat, 0);
        let from_int = cvt(NumTy::F32, NumTy::Int(S32), Float(Nearest), false, false, 16_777_217);
        assert_eq!(f32::from_bits(from_int as u32), 16_777_216.0);
        let from_int_up = cvt(NumTy::F32, NumTy::Int(S32), Float(Up), false, false, 16_777_217);
        assert_eq!(f32::from_bits(from_int_up as u32), 16_777_218.0);
        let ftz = cvt(NumTy::F32, NumTy::F64, Float(Nearest), false, true, 1e-40f64.to_bits());
        assert_eq!(ftz, 0);
    }
}
