//! Expression bodies to PTX registers: loads, indices, constants, casts and each
//! primitive for every dtype, with the CPU backend's semantics (`codegen/cpu/expr.rs`):
//! float32 arithmetic rounds every operation (`.rn`, which also keeps ptxas from fusing
//! a multiply and an add), float16/bfloat16 are computed in f32 and rounded where the
//! CPU rounds them (casts, constants, stores), and NaN propagates through max and min.

use super::kernel::{Kx, R};
use super::num::{round_half, Num};
use super::ptx::{Kind, Op, Reg};
use super::{intmath, math};
use crate::codegen::cpu::half::{compute_dtype, is_half};
use crate::ir::expr::{Affine, ExprKind, Scalar, E};
use crate::ir::{BufId, Expr, Prim};
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;
use std::collections::HashMap;
use std::rc::Rc;

pub fn emit(kx: &mut Kx, e: &E, vars: &[Reg]) -> R<Reg> {
    go(kx, e, vars, &mut HashMap::new())
}

fn go(kx: &mut Kx, e: &E, vars: &[Reg], memo: &mut HashMap<*const Expr, Reg>) -> R<Reg> {
    if let Some(v) = memo.get(&Rc::as_ptr(e)) {
        return Ok(*v);
    }
    let v = match &e.kind {
        ExprKind::Load { buf, index } => {
            let at = affine(kx, index, vars)?;
            kx.load(*buf, at, None)?
        }
        ExprKind::Const(c) => constant(kx, *c, e.dtype),
        ExprKind::Index(a) => affine(kx, a, vars)?,
        ExprKind::LoadAt { buf, numel, offset } => {
            let off = go(kx, offset, vars, memo)?;
            load_at(kx, *buf, numel, off, e.dtype)?
        }
        ExprKind::CheckIndex { value, bound, wrap, site, record } => {
            let v = go(kx, value, vars, memo)?;
            check_index(kx, v, bound, *wrap, *site, *record)?
        }
        ExprKind::Cast(x) => {
            let xv = go(kx, x, vars, memo)?;
            cast_node(kx, xv, x, e.dtype)?
        }
        ExprKind::Unary(op, x) => {
            let xv = go(kx, x, vars, memo)?;
            unary(kx, *op, xv, compute_dtype(x.dtype))?
        }
        ExprKind::Binary(op, a, b) => {
            let av = go(kx, a, vars, memo)?;
            let bv = go(kx, b, vars, memo)?;
            binary(kx, *op, av, bv, compute_dtype(a.dtype))?
        }
        ExprKind::Where(c, a, b) => {
            let cv = go(kx, c, vars, memo)?;
            let av = go(kx, a, vars, memo)?;
            let bv = go(kx, b, vars, memo)?;
            let p = kx.b.def("setp.ne.u32", Kind::Pred, &[cv.into(), Op::Int(0)]);
            let num = Num::of(e.dtype);
            kx.b.def(&format!("selp.{}", num.bits()), num.kind(), &[av.into(), bv.into(), p.into()])
        }
    };
    memo.insert(Rc::as_ptr(e), v);
    Ok(v)
}

/// `offset + sum(coef * var)` as an s64 register.
pub fn affine(kx: &mut Kx, a: &Affine, vars: &[Reg]) -> R<Reg> {
    let offset = kx.size(&a.offset)?;
    let mut acc = kx.b.def("mov.s64", Kind::B64, &[offset]);
    for (v, c) in &a.terms {
        let var = *vars.get(*v).ok_or_else(|| format!("index variable i{v} is out of range"))?;
        acc = match kx.size(c)? {
            Op::Int(1) => kx.b.def("add.s64", Kind::B64, &[acc.into(), var.into()]),
            c => kx.b.def("mad.lo.s64", Kind::B64, &[var.into(), c, acc.into()]),
        };
    }
    Ok(acc)
}

/// A constant of dtype `d`; one of a 16-bit float dtype is that dtype's nearest value,
/// rounded through f32 as `c10::Half(double)` does.
fn constant(kx: &mut Kx, c: Scalar, d: DType) -> Reg {
    let num = Num::of(d);
    let i = match num {
        Num::U8 => c.as_i64() as u8 as i64,
        Num::S8 => c.as_i64() as i8 as i64,
        Num::S16 => c.as_i64() as i16 as i64,
        Num::S32 => c.as_i64() as i32 as i64,
        _ => c.as_i64(),
    };
    let v = num.constant(&mut kx.b, c.as_f64(), i);
    round_half(&mut kx.b, v, d)
}

/// `buf[offset]` when `0 <= offset < numel`, else zero: the load runs only then.
fn load_at(kx: &mut Kx, buf: BufId, numel: &SymExpr, offset: Reg, d: DType) -> R<Reg> {
    let n = kx.size(numel)?;
    let inside = kx.b.def("setp.lo.u64", Kind::Pred, &[offset.into(), n]);
    let zero = Num::of(d).constant(&mut kx.b, 0.0, 0);
    kx.load(buf, offset, Some((inside, zero)))
}

/// An index into a dimension of size `bound`, normalized to `0..bound` (negatives count
/// from the end when `wrap`); out of range, the first error recorded in the call wins
/// the record's first word (site + 1) and writes the index and bound after it, as on the
/// CPU, and the result is 0 so the access it feeds stays in bounds.
fn check_index(kx: &mut Kx, v: Reg, bound: &SymExpr, wrap: bool, site: usize, record: BufId) -> R<Reg> {
    let n = kx.size(bound)?;
    let index = if wrap {
        let negative = kx.b.def("setp.lt.s64", Kind::Pred, &[v.into(), Op::Int(0)]);
        let wrapped = kx.b.def("add.s64", Kind::B64, &[v.into(), n.clone()]);
        kx.b.def("selp.b64", Kind::B64, &[wrapped.into(), v.into(), negative.into()])
    } else {
        v
    };
    let inside = kx.b.def("setp.lo.u64", Kind::Pred, &[index.into(), n.clone()]);
    let zero = kx.b.def("mov.s64", Kind::B64, &[Op::Int(0)]);
    let at = kx.elem_addr(record, zero)?;
    let first = kx.b.reg(Kind::B64);
    kx.b.set("mov.b64", first, &[Op::Int(-1)]);
    kx.b.emit_if(
        inside,
        true,
        "atom.global.cas.b64",
        &[first.into(), Op::At(at, 0), Op::Int(0), Op::Int(site as i64 + 1)],
    );
    let won = kx.b.def("setp.eq.s64", Kind::Pred, &[first.into(), Op::Int(0)]);
    let n_reg = kx.b.def("mov.s64", Kind::B64, &[n]);
    kx.b.emit_if(won, false, "st.global.s64", &[Op::At(at, 8), v.into()]);
    kx.b.emit_if(won, false, "st.global.s64", &[Op::At(at, 16), n_reg.into()]);
    Ok(kx.b.def("selp.b64", Kind::B64, &[index.into(), zero.into(), inside.into()]))
}

/// A Cast node from `x` to `to`: a 16-bit float that arithmetic may have left between
/// two values of its dtype is rounded first (unless it certainly holds one), and a cast
/// to one rounds the result, as on the CPU.
fn cast_node(kx: &mut Kx, xv: Reg, x: &E, to: DType) -> R<Reg> {
    let from = x.dtype;
    if from == to {
        return Ok(xv);
    }
    let rounded =
        matches!(x.kind, ExprKind::Load { .. } | ExprKind::LoadAt { .. } | ExprKind::Const(_) | ExprKind::Cast(_));
    let xv = if is_half(from) && !rounded { round_half(&mut kx.b, xv, from) } else { xv };
    let v = cast(kx, xv, compute_dtype(from), compute_dtype(to));
    Ok(round_half(&mut kx.b, v, to))
}

/// Conversion between compute dtypes: float to integer saturates to int64 (NaN to 0)
/// and then wraps to the narrower type, as the CPU's `fcvt_to_sint_sat` + `ireduce`.
pub fn cast(kx: &mut Kx, x: Reg, from: DType, to: DType) -> Reg {
    let (f, t) = (Num::of(from), Num::of(to));
    if from == to {
        return x;
    }
    let b = &mut kx.b;
    if to == DType::Bool {
        let p = match f {
            Num::F32 | Num::F64 => b.def(&format!("setp.neu.{}", f.ty()), Kind::Pred, &[x.into(), f.imm(0.0, 0)]),
            _ => b.def(&format!("setp.ne.{}", f.bits()), Kind::Pred, &[x.into(), Op::Int(0)]),
        };
        return b.def("selp.u32", Kind::B32, &[Op::Int(1), Op::Int(0), p.into()]);
    }
    match (f.is_float(), t.is_float()) {
        (true, true) => b.def(
            &format!("cvt{}.{}.{}", if t == Num::F32 { ".rn" } else { "" }, t.ty(), f.ty()),
            t.kind(),
            &[x.into()],
        ),
        (false, true) => b.def(&format!("cvt.rn.{}.{}", t.ty(), f.ty()), t.kind(), &[x.into()]),
        (true, false) => {
            let wide = b.def(&format!("cvt.rzi.s64.{}", f.ty()), Kind::B64, &[x.into()]);
            narrow_int(b, wide, Num::S64, t)
        }
        (false, false) => narrow_int(b, x, f, t),
    }
}

/// An integer register of class `f` as class `t`: sign or zero extension by the source
/// (already extended in its register), truncation to the target's width.
fn narrow_int(b: &mut super::ptx::Body, x: Reg, f: Num, t: Num) -> Reg {
    match (f.kind(), t.kind()) {
        (Kind::B64, Kind::B64) => x,
        (Kind::B32, Kind::B64) => {
            b.def(if f.is_unsigned() { "cvt.u64.u32" } else { "cvt.s64.s32" }, Kind::B64, &[x.into()])
        }
        (Kind::B64, _) => {
            let low = b.def("cvt.u32.u64", Kind::B32, &[x.into()]);
            t.normalize(b, low)
        }
        _ => t.normalize(b, x),
    }
}

/// A comparison's predicate as a bool value (0 or 1).
pub fn bool_of(kx: &mut Kx, p: Reg) -> Reg {
    kx.b.def("selp.u32", Kind::B32, &[Op::Int(1), Op::Int(0), p.into()])
}

fn unary(kx: &mut Kx, op: Prim, x: Reg, d: DType) -> R<Reg> {
    let num = Num::of(d);
    let ty = num.ty();
    let k = num.kind();
    let b = &mut kx.b;
    Ok(match (op, num.is_float()) {
        (Prim::Neg, true) => b.def(&format!("neg.{ty}"), k, &[x.into()]),
        (Prim::Neg, false) => {
            let v = b.def(&format!("neg.{}", if num == Num::U8 { "s32" } else { ty }), k, &[x.into()]);
            num.normalize(b, v)
        }
        (Prim::Abs, true) => b.def(&format!("abs.{ty}"), k, &[x.into()]),
        (Prim::Abs, false) if num.is_unsigned() => x,
        (Prim::Abs, false) => {
            let v = b.def(&format!("abs.{ty}"), k, &[x.into()]);
            num.normalize(b, v)
        }
        (Prim::Sqrt, true) => b.def(&format!("sqrt.rn.{ty}"), k, &[x.into()]),
        (Prim::Rsqrt, true) => {
            let s = b.def(&format!("sqrt.rn.{ty}"), k, &[x.into()]);
            b.def(&format!("div.rn.{ty}"), k, &[num.imm(1.0, 1), s.into()])
        }
        (Prim::Recip, true) => b.def(&format!("div.rn.{ty}"), k, &[num.imm(1.0, 1), x.into()]),
        (Prim::Floor, true) => b.def(&format!("cvt.rmi.{ty}.{ty}"), k, &[x.into()]),
        (Prim::Ceil, true) => b.def(&format!("cvt.rpi.{ty}.{ty}"), k, &[x.into()]),
        (Prim::Trunc, true) => b.def(&format!("cvt.rzi.{ty}.{ty}"), k, &[x.into()]),
        (Prim::Round, true) => b.def(&format!("cvt.rni.{ty}.{ty}"), k, &[x.into()]),
        // 1 / (1 + exp(-x))
        (Prim::Sigmoid, true) => {
            let n = b.def(&format!("neg.{ty}"), k, &[x.into()]);
            let e = math::unary(kx, Prim::Exp, n, num)?;
            let den = kx.b.def(&format!("add.rn.{ty}"), k, &[num.imm(1.0, 1), e.into()]);
            kx.b.def(&format!("div.rn.{ty}"), k, &[num.imm(1.0, 1), den.into()])
        }
        (Prim::Not, _) => {
            let nz = if d == DType::Bool { x } else { cast(kx, x, d, DType::Bool) };
            kx.b.def("xor.b32", Kind::B32, &[nz.into(), Op::Int(1)])
        }
        (Prim::BitNot, false) => {
            let v = b.def(&format!("not.{}", num.bits()), k, &[x.into()]);
            num.normalize(b, v)
        }
        (op, true) => math::unary(kx, op, x, num)?,
        (op, false) => return Err(format!("{} is not defined for {d}", op.name())),
    })
}

pub fn binary(kx: &mut Kx, op: Prim, a: Reg, bv: Reg, d: DType) -> R<Reg> {
    let num = Num::of(d);
    let (ty, k, float) = (num.ty(), num.kind(), num.is_float());
    let args = [a.into(), bv.into()];
    let wrap = |kx: &mut Kx, opcode: String| {
        let v = kx.b.def(&opcode, k, &args);
        num.normalize(&mut kx.b, v)
    };
    let cmp = |kx: &mut Kx, cc: &str| {
        // Float comparisons are ordered (false with a NaN) except `ne`, as on the CPU.
        let cc = if float && cc == "ne" { "neu" } else { cc };
        let p = kx.b.def(&format!("setp.{cc}.{ty}"), Kind::Pred, &args);
        bool_of(kx, p)
    };
    Ok(match (op, float) {
        (Prim::Add, true) => kx.b.def(&format!("add.rn.{ty}"), k, &args),
        (Prim::Sub, true) => kx.b.def(&format!("sub.rn.{ty}"), k, &args),
        (Prim::Mul, true) => kx.b.def(&format!("mul.rn.{ty}"), k, &args),
        (Prim::Div, true) => kx.b.def(&format!("div.rn.{ty}"), k, &args),
        (Prim::Add, false) => wrap(kx, format!("add.{ty}")),
        (Prim::Sub, false) => wrap(kx, format!("sub.{ty}")),
        (Prim::Mul, false) => wrap(kx, format!("mul.lo.{ty}")),
        (Prim::Max | Prim::Min, true) => math::min_max(kx, op == Prim::Max, a, bv, num),
        (Prim::Max, false) => kx.b.def(&format!("max.{ty}"), k, &args),
        (Prim::Min, false) => kx.b.def(&format!("min.{ty}"), k, &args),
        (Prim::Eq, _) => cmp(kx, "eq"),
        (Prim::Ne, _) => cmp(kx, "ne"),
        (Prim::Lt, _) => cmp(kx, "lt"),
        (Prim::Le, _) => cmp(kx, "le"),
        (Prim::Gt, _) => cmp(kx, "gt"),
        (Prim::Ge, _) => cmp(kx, "ge"),
        (Prim::And | Prim::Or, _) => {
            let (x, y) =
                if d == DType::Bool { (a, bv) } else { (cast(kx, a, d, DType::Bool), cast(kx, bv, d, DType::Bool)) };
            kx.b.def(if op == Prim::And { "and.b32" } else { "or.b32" }, Kind::B32, &[x.into(), y.into()])
        }
        (Prim::BitAnd, false) => kx.b.def(&format!("and.{}", num.bits()), k, &args),
        (Prim::BitOr, false) => kx.b.def(&format!("or.{}", num.bits()), k, &args),
        (Prim::BitXor, false) => kx.b.def(&format!("xor.{}", num.bits()), k, &args),
        (Prim::ShrU, false) => intmath::shr_u(kx, a, bv, num),
        (Prim::Div, false) => intmath::div(kx, a, bv, num),
        (Prim::Fmod, false) => intmath::rem(kx, a, bv, num),
        (Prim::Pow, false) => intmath::pow(kx, a, bv, num),
        (op, true) => math::binary(kx, op, a, bv, num)?,
        (op, false) => return Err(format!("{} is not defined for {d}", op.name())),
    })
}
