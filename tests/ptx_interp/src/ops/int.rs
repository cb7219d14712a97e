//! Integer semantics on register bit patterns.

use crate::inst::{IntBinOp, IntTy, IntUnOp, MulPart};

/// `None` for a division or remainder by zero.
#[inline(always)]
pub(crate) fn binary(op: IntBinOp, ty: IntTy, a: u64, b: u64) -> Option<u64> {
    let bits = ty.bits();
    let value = match op {
        IntBinOp::Add => a.wrapping_add(b),
        IntBinOp::Sub => a.wrapping_sub(b),
        IntBinOp::MulLo => a.wrapping_mul(b),
        IntBinOp::And => a & b,
        IntBinOp::Or => a | b,
        IntBinOp::Xor => a ^ b,
        IntBinOp::Shl => {
            let amount = b as u32;
            if amount >= bits {
                0
            } else {
                a << amount
            }
        }
        IntBinOp::Shr => {
            // Shift amounts past the width fill with the sign (or zero).
            let amount = (b as u32).min(bits - 1 + u32::from(!ty.signed()));
            if amount >= bits {
                0
            } else {
                (ty.extend(a) >> amount) as u64
            }
        }
        IntBinOp::MulHi => high_half(ty, a, b),
        IntBinOp::Div | IntBinOp::Rem => {
            let (x, y) = (ty.extend(a), ty.extend(b));
            if y == 0 {
                return None;
            }
            // i128 has room for every quotient; MIN / -1 wraps below as PTX does.
            if op == IntBinOp::Div {
                (x / y) as u64
            } else {
                (x % y) as u64
            }
        }
        IntBinOp::Min => ty.extend(a).min(ty.extend(b)) as u64,
        IntBinOp::Max => ty.extend(a).max(ty.extend(b)) as u64,
    };
    Some(ty.wrap(value as i128))
}

#[inline(always)]
pub(crate) fn unary(op: IntUnOp, ty: IntTy, a: u64) -> u64 {
    let bits = ty.bits();
    let value = match op {
        IntUnOp::Neg => (ty.extend(a)).wrapping_neg() as u64,
        IntUnOp::Abs => ty.extend(a).unsigned_abs() as u64,
        IntUnOp::Not => !a,
        IntUnOp::Cnot => u64::from(ty.wrap(a as i128) == 0),
        IntUnOp::Popc => return (ty.wrap(a as i128)).count_ones() as u64,
        IntUnOp::Clz => return ((ty.wrap(a as i128)).leading_zeros() - (64 - bits)) as u64,
        IntUnOp::Brev => (ty.wrap(a as i128)).reverse_bits() >> (64 - bits),
    };
    ty.wrap(value as i128)
}

/// `mad.lo/.hi/.wide`: `a * b + c` keeping the low half, the high half, or the full
/// double-width product (with `c` double-width).
#[inline(always)]
pub(crate) fn mad(ty: IntTy, part: MulPart, a: u64, b: u64, c: u64) -> u64 {
    let product = ty.extend(a).wrapping_mul(ty.extend(b));
    let bits = ty.bits();
    match part {
        MulPart::Lo => ty.wrap(product.wrapping_add(c as i128)),
        MulPart::Hi => ty.wrap((high_half(ty, a, b) as i128).wrapping_add(c as i128)),
        MulPart::Wide => {
            let wide = if bits == 16 { IntTy::U32 } else { IntTy::U64 };
            wide.wrap(product.wrapping_add(c as i128))
        }
    }
}

/// The upper `bits` of the double-width product (unsigned products in u128: no overflow).
#[inline(always)]
fn high_half(ty: IntTy, a: u64, b: u64) -> u64 {
    let bits = ty.bits();
    if ty.signed() {
        ((ty.extend(a) * ty.extend(b)) >> bits) as u64
    } else {
        ((ty.extend(a) as u128 * ty.extend(b) as u128) >> bits) as u64
    }
}

/// `mul.wide`: the full product, as wide as twice the type.
#[inline(always)]
pub(crate) fn mul_wide(ty: IntTy, a: u64, b: u64) -> u64 {
    mad(ty, MulPart::Wide, a, b, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use IntBinOp::*;
    use IntTy::*;

    #[test]
    fn widths_signs_and_shifts() {
        assert_eq!(binary(Add, U32, 0xffff_ffff, 1), Some(0));
        assert_eq!(binary(Sub, S16, 0, 1), Some(0xffff));
        assert_eq!(binary(Div, S32, (-7i32) as u32 as u64, 2), Some((-3i32) as u32 as u64));
        assert_eq!(binary(Rem, S32, (-7i32) as u32 as u64, 2), Some((-1i32) as u32 as u64));
        assert_eq!(binary(Div, U32, (-7i32) as u32 as u64, 2), Some(0x7fff_fffc));
        assert_eq!(binary(Div, S32, i32::MIN as u32 as u64, u32::MAX as u64), Some(i32::MIN as u32 as u64));
        assert_eq!(binary(Div, U64, 1, 0), None);
        assert_eq!(binary(Shl, U32, 1, 32), Some(0));
        assert_eq!(binary(Shl, U32, 1, 31), Some(0x8000_0000));
        assert_eq!(binary(Shr, U32, 0x8000_0000, 40), Some(0));
        assert_eq!(binary(Shr, S32, 0x8000_0000, 40), Some(0xffff_ffff));
        assert_eq!(binary(Shr, S32, 0x8000_0000, 4), Some(0xf800_0000));
        assert_eq!(binary(Shr, S64, 1 << 63, u32::MAX as u64), Some(u64::MAX));
        assert_eq!(binary(MulHi, S32, (-2i32) as u32 as u64, 3), Some(u32::MAX as u64));
        assert_eq!(binary(MulHi, U64, u64::MAX, u64::MAX), Some(u64::MAX - 1));
        assert_eq!(binary(Min, S32, (-1i32) as u32 as u64, 1), Some(u32::MAX as u64));
        assert_eq!(binary(Min, U32, (-1i32) as u32 as u64, 1), Some(1));
        assert_eq!(mul_wide(S32, (-3i32) as u32 as u64, 4), (-12i64) as u64);
        assert_eq!(mul_wide(U32, u32::MAX as u64, 2), 0x1_ffff_fffe);
        assert_eq!(mad(S32, MulPart::Wide, (-1i32) as u32 as u64, 5, 100), 95);
        assert_eq!(unary(IntUnOp::Neg, S32, 5), (-5i32) as u32 as u64);
        assert_eq!(unary(IntUnOp::Abs, S32, i32::MIN as u32 as u64), 0x8000_0000);
        assert_eq!(unary(IntUnOp::Clz, U32, 1), 31);
        assert_eq!(unary(IntUnOp::Brev, U32, 1), 0x8000_0000);
        assert_eq!(unary(IntUnOp::Cnot, U16, 0x1_0000), 1);
        assert_eq!(unary(IntUnOp::Not, U16, 0), 0xffff);
    }
}
