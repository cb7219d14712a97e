//! Integer division, remainder, power and logical shift, with the CPU's rules
//! (`codegen/cpu/math.rs`): division never traps, `a / 0` and `a % 0` are 0, `MIN / -1`
//! wraps to MIN, and a negative exponent gives 1, +-1 or 0 as torch's integer `pow`.

use super::kernel::Kx;
use super::num::Num;
use super::ptx::{Kind, Op, Reg};

/// (is the divisor 0, is it -1 (signed only), the divisor with those replaced by 1).
fn safe_divisor(kx: &mut Kx, b: Reg, num: Num) -> (Reg, Option<Reg>, Reg) {
    let bits = num.bits();
    let zero = kx.b.def(&format!("setp.eq.{bits}"), Kind::Pred, &[b.into(), Op::Int(0)]);
    let minus_one =
        (!num.is_unsigned()).then(|| kx.b.def(&format!("setp.eq.{bits}"), Kind::Pred, &[b.into(), Op::Int(-1)]));
    let unsafe_divisor = match minus_one {
        Some(m) => kx.b.def("or.pred", Kind::Pred, &[zero.into(), m.into()]),
        None => zero,
    };
    let divisor = kx.b.def(&format!("selp.{bits}"), num.kind(), &[Op::Int(1), b.into(), unsafe_divisor.into()]);
    (zero, minus_one, divisor)
}

pub fn div(kx: &mut Kx, a: Reg, b: Reg, num: Num) -> Reg {
    let (zero, minus_one, divisor) = safe_divisor(kx, b, num);
    let bits = num.bits();
    let mut q = kx.b.def(&format!("div.{}", num.ty()), num.kind(), &[a.into(), divisor.into()]);
    if let Some(m) = minus_one {
        let negated = kx.b.def(&format!("neg.{}", num.ty()), num.kind(), &[a.into()]);
        let negated = num.normalize(&mut kx.b, negated);
        q = kx.b.def(&format!("selp.{bits}"), num.kind(), &[negated.into(), q.into(), m.into()]);
    }
    kx.b.def(&format!("selp.{bits}"), num.kind(), &[Op::Int(0), q.into(), zero.into()])
}

/// C's `a % b` (the sign of `a`); `a % 0` is 0 and `a % -1` is 0 (the divisor 1 gives it).
pub fn rem(kx: &mut Kx, a: Reg, b: Reg, num: Num) -> Reg {
    let (zero, _, divisor) = safe_divisor(kx, b, num);
    let r = kx.b.def(&format!("rem.{}", num.ty()), num.kind(), &[a.into(), divisor.into()]);
    kx.b.def(&format!("selp.{}", num.bits()), num.kind(), &[Op::Int(0), r.into(), zero.into()])
}

/// The bits of `a` (read as unsigned in its width) shifted right by `b` modulo the width.
pub fn shr_u(kx: &mut Kx, a: Reg, b: Reg, num: Num) -> Reg {
    let width = num.width() as i64;
    let amount = match num.kind() {
        Kind::B64 => kx.b.def("cvt.u32.u64", Kind::B32, &[b.into()]),
        _ => b,
    };
    let amount = kx.b.def("and.b32", Kind::B32, &[amount.into(), Op::Int(width - 1)]);
    let unsigned = match width {
        8 | 16 => kx.b.def("and.b32", Kind::B32, &[a.into(), Op::Int((1 << width) - 1)]),
        _ => a,
    };
    let ty = if num.kind() == Kind::B64 { "u64" } else { "u32" };
    let v = kx.b.def(&format!("shr.{ty}"), num.kind(), &[unsigned.into(), amount.into()]);
    num.normalize(&mut kx.b, v)
}

/// torch's integer power: square-and-multiply over the exponent's bits (wrapping);
/// for a negative exponent 1 when the base is 1, +-1 by parity when it is -1, else 0.
pub fn pow(kx: &mut Kx, base: Reg, exponent: Reg, num: Num) -> Reg {
    let (k, bits, ty) = (num.kind(), num.bits(), num.ty());
    let result = kx.b.reg(k);
    kx.b.set(&format!("mov.{bits}"), result, &[Op::Int(1)]);
    let square = kx.b.reg(k);
    kx.b.set(&format!("mov.{bits}"), square, &[base.into()]);
    let rest = kx.b.reg(k);
    let negative = kx.b.def(
        &format!("setp.lt.{}", if num.is_unsigned() { "s32" } else { ty }),
        Kind::Pred,
        &[exponent.into(), Op::Int(0)],
    );
    kx.b.set(&format!("selp.{bits}"), rest, &[Op::Int(0), exponent.into(), negative.into()]);
    let (top, done) = (kx.b.label(), kx.b.label());
    kx.b.place(top);
    let finished = kx.b.def(&format!("setp.eq.{bits}"), Kind::Pred, &[rest.into(), Op::Int(0)]);
    kx.b.bra_if(finished, false, done);
    let low = kx.b.def(&format!("and.{bits}"), k, &[rest.into(), Op::Int(1)]);
    let odd = kx.b.def(&format!("setp.ne.{bits}"), Kind::Pred, &[low.into(), Op::Int(0)]);
    let product = kx.b.def(&format!("mul.lo.{ty}"), k, &[result.into(), square.into()]);
    kx.b.set(&format!("selp.{bits}"), result, &[product.into(), result.into(), odd.into()]);
    kx.b.set(&format!("mul.lo.{ty}"), square, &[square.into(), square.into()]);
    let shr = if k == Kind::B64 { "shr.u64" } else { "shr.u32" };
    kx.b.set(shr, rest, &[rest.into(), Op::Int(1)]);
    kx.b.bra(top);
    kx.b.place(done);
    let power = num.normalize(&mut kx.b, result);
    if num.is_unsigned() {
        return power;
    }
    let low = kx.b.def(&format!("and.{bits}"), k, &[exponent.into(), Op::Int(1)]);
    let odd = kx.b.def(&format!("setp.ne.{bits}"), Kind::Pred, &[low.into(), Op::Int(0)]);
    let of_minus_one = kx.b.def(&format!("selp.{bits}"), k, &[Op::Int(-1), Op::Int(1), odd.into()]);
    let is_one = kx.b.def(&format!("setp.eq.{bits}"), Kind::Pred, &[base.into(), Op::Int(1)]);
    let is_minus_one = kx.b.def(&format!("setp.eq.{bits}"), Kind::Pred, &[base.into(), Op::Int(-1)]);
    let reciprocal = kx.b.def(&format!("selp.{bits}"), k, &[of_minus_one.into(), Op::Int(0), is_minus_one.into()]);
    let reciprocal = kx.b.def(&format!("selp.{bits}"), k, &[Op::Int(1), reciprocal.into(), is_one.into()]);
    kx.b.def(&format!("selp.{bits}"), k, &[reciprocal.into(), power.into(), negative.into()])
}
