//! Expression bodies to Cranelift values: each primitive for each dtype, scalar or as
//! f32x4 vectors along one loop variable.

use super::half::{self, in_f32};
use super::kernel::{clif_type, flags, Cx, R};
use super::lane_ints::{self, LaneSteps};
use crate::ir::expr::{visit, Affine, ExprKind, Scalar, E};
use crate::ir::{Expr, Prim};
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, BlockArg, Endianness, InstBuilder, MemFlagsData, Type, Value};
use std::collections::HashMap;
use std::rc::Rc;

/// Scalar code, or four lanes along loop variable `.0` (which then holds the first lane's
/// index).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Lanes {
    Scalar,
    X4(usize),
}

/// Prims the vector path implements (others are scalar only).
fn vector_prim(op: Prim) -> bool {
    use Prim::*;
    !matches!(op, BitNot | BitAnd | BitOr | BitXor | ShrU | Pow)
}

/// Can `body` run on f32x4 lanes along variable `var`? Every value must be computed in
/// f32 (or be a mask: a comparison, a bool load contiguous or constant along `var`), and
/// every load contiguous or constant along `var`, or, with `gather`, any (the others
/// gather their four lanes: a pointwise kernel's, whose lanes are independent; a
/// reduction's would sum in another order). Integers are
/// computed for the first lane ([`lane_ints`]): they may only be offsets stepping by 0 or
/// 1 per lane, sides of comparisons [`LaneSteps::comparable`] accepts, or equal in every
/// lane where cast to f32.
pub fn vectorizable(body: &E, var: usize, gather: bool) -> bool {
    let mut steps = LaneSteps::new(var);
    let mut seen = HashMap::new();
    vector_node(body, var, gather, &mut steps, &mut seen)
}

fn vector_node(e: &E, var: usize, gather: bool, steps: &mut LaneSteps, seen: &mut HashMap<*const Expr, bool>) -> bool {
    if let Some(ok) = seen.get(&Rc::as_ptr(e)) {
        return *ok;
    }
    let mut child = |x: &E| vector_node(x, var, gather, steps, seen);
    let ok = match &e.kind {
        _ if lane_ints::is_integer(e.dtype) => false,
        ExprKind::Load { index, .. } => {
            let contiguous = matches!(index.coef(var), SymExpr::Int(0) | SymExpr::Int(1));
            (in_f32(e.dtype) && (gather || contiguous)) || (e.dtype == DType::Bool && contiguous)
        }
        ExprKind::Const(_) => in_f32(e.dtype) || e.dtype == DType::Bool,
        ExprKind::LoadAt { offset, .. } => in_f32(e.dtype) && matches!(steps.of(offset), Some(0 | 1)),
        ExprKind::Index(_) | ExprKind::CheckIndex { .. } => false,
        ExprKind::Unary(op, x) => {
            vector_prim(*op) && in_f32(x.dtype) && (in_f32(e.dtype) || *op == Prim::Not) && child(x)
        }
        ExprKind::Binary(op, a, b) if op.returns_bool() && lane_ints::is_integer(a.dtype) => steps.comparable(a, b),
        ExprKind::Binary(op, a, b) => {
            vector_prim(*op)
                && (in_f32(a.dtype) || (a.dtype == DType::Bool && matches!(op, Prim::And | Prim::Or)))
                && child(a)
                && child(b)
        }
        ExprKind::Where(c, a, b) => in_f32(a.dtype) && c.dtype == DType::Bool && child(c) && child(a) && child(b),
        ExprKind::Cast(x) if lane_ints::is_integer(x.dtype) => in_f32(e.dtype) && steps.of(x) == Some(0),
        ExprKind::Cast(x) => (x.dtype == e.dtype || (in_f32(x.dtype) && in_f32(e.dtype))) && child(x),
    };
    seen.insert(Rc::as_ptr(e), ok);
    ok
}

/// Values already emitted, per node and lanes (a node of a vectorized body may be emitted
/// both on lanes and as a scalar, the first lane's: [`lane_ints`]), and the body's lane
/// steps.
pub struct Memo {
    values: HashMap<(*const Expr, bool), Value>,
    pub steps: LaneSteps,
}

pub fn emit(cx: &mut Cx, e: &E, vars: &[Value], lanes: Lanes) -> R<Value> {
    let var = match lanes {
        Lanes::X4(var) => var,
        Lanes::Scalar => 0,
    };
    let mut memo = Memo { values: HashMap::new(), steps: LaneSteps::new(var) };
    go(cx, e, vars, lanes, &mut memo)
}

pub(super) fn go(cx: &mut Cx, e: &E, vars: &[Value], lanes: Lanes, memo: &mut Memo) -> R<Value> {
    let key = (Rc::as_ptr(e), lanes == Lanes::Scalar);
    if let Some(v) = memo.values.get(&key) {
        return Ok(*v);
    }
    let v = match lanes {
        Lanes::X4(var) if lane_ints::handles(e) => lane_ints::emit(cx, e, vars, var, memo)?,
        _ => node(cx, e, vars, lanes, memo)?,
    };
    memo.values.insert(key, v);
    Ok(v)
}

/// Node `e` on `lanes`, its operands through [`go`].
fn node(cx: &mut Cx, e: &E, vars: &[Value], lanes: Lanes, memo: &mut Memo) -> R<Value> {
    Ok(match &e.kind {
        ExprKind::Load { buf, index } => {
            let at = affine(cx, index, vars);
            match lanes {
                Lanes::X4(var) => match index.coef(var) {
                    SymExpr::Int(1) => cx.load_elems(*buf, at, lanes)?,
                    SymExpr::Int(0) => {
                        let s = cx.load_elems(*buf, at, Lanes::Scalar)?;
                        cx.b.ins().splat(types::F32X4, s)
                    }
                    step => gather(cx, *buf, at, &step)?,
                },
                Lanes::Scalar => cx.load_elems(*buf, at, lanes)?,
            }
        }
        ExprKind::Const(c) => {
            let s = constant(cx, *c, e.dtype)?;
            match lanes {
                Lanes::X4(_) if e.dtype == DType::Bool => {
                    let wide = cx.b.ins().iconst(types::I32, if c.as_i64() != 0 { -1 } else { 0 });
                    cx.b.ins().splat(types::I32X4, wide)
                }
                Lanes::X4(_) => cx.b.ins().splat(types::F32X4, s),
                Lanes::Scalar => s,
            }
        }
        ExprKind::Index(a) => affine(cx, a, vars),
        ExprKind::LoadAt { buf, numel, offset } => {
            let off = go(cx, offset, vars, lanes, memo)?;
            load_at(cx, *buf, numel, off, clif_type(e.dtype)?)?
        }
        ExprKind::CheckIndex { value, bound, wrap, site, record } => {
            let v = go(cx, value, vars, lanes, memo)?;
            check_index(cx, v, bound, *wrap, *site, *record)
        }
        ExprKind::Cast(x) => {
            let xv = go(cx, x, vars, lanes, memo)?;
            cast_node(cx, xv, x, e.dtype, lanes)?
        }
        ExprKind::Unary(op, x) => {
            let xv = go(cx, x, vars, lanes, memo)?;
            unary(cx, *op, xv, half::compute_dtype(x.dtype), lanes)?
        }
        ExprKind::Binary(op, a, b) => {
            let av = go(cx, a, vars, lanes, memo)?;
            let bv = go(cx, b, vars, lanes, memo)?;
            binary(cx, *op, av, bv, half::compute_dtype(a.dtype), lanes)?
        }
        ExprKind::Where(c, a, b) => {
            let cv = go(cx, c, vars, lanes, memo)?;
            let av = go(cx, a, vars, lanes, memo)?;
            let bv = go(cx, b, vars, lanes, memo)?;
            match lanes {
                Lanes::Scalar => cx.b.ins().select(cv, av, bv),
                Lanes::X4(_) => {
                    let mask =
                        cx.b.ins().bitcast(types::F32X4, MemFlagsData::new().with_endianness(Endianness::Little), cv);
                    cx.b.ins().bitselect(mask, av, bv)
                }
            }
        }
    })
}

/// The four elements of `buf` `step` apart from element `at`, as the lanes of an f32x4.
fn gather(cx: &mut Cx, buf: crate::ir::BufId, at: Value, step: &SymExpr) -> R<Value> {
    let step = cx.sym(step);
    let first = cx.load_elems(buf, at, Lanes::Scalar)?;
    let (mut v, mut at) = (cx.b.ins().scalar_to_vector(types::F32X4, first), at);
    for lane in 1..4 {
        at = cx.b.ins().iadd(at, step);
        let x = cx.load_elems(buf, at, Lanes::Scalar)?;
        v = cx.b.ins().insertlane(v, x, lane);
    }
    Ok(v)
}

/// Whether `body` reads some buffer transposed with respect to loop variables `row` and
/// `col` (the output's last two): a load that steps by one element along `row` and by
/// more along `col`. Row by row, such a read falls on a new cache line at every element.
pub fn reads_transposed(body: &E, row: usize, col: usize) -> bool {
    let mut found = false;
    visit(body, &mut |e| {
        if let ExprKind::Load { index, .. } = &e.kind {
            found |=
                index.coef(row) == SymExpr::Int(1) && !matches!(index.coef(col), SymExpr::Int(0) | SymExpr::Int(1));
        }
    });
    found
}

/// `buf[offset]` when `0 <= offset < numel`, else zero of type `ty`: the load runs only
/// on the in-bounds branch.
pub(super) fn load_at(cx: &mut Cx, buf: crate::ir::BufId, numel: &SymExpr, offset: Value, ty: Type) -> R<Value> {
    let n = cx.sym(numel);
    let inside = cx.b.ins().icmp(IntCC::UnsignedLessThan, offset, n);
    let (load_block, merge) = (cx.b.create_block(), cx.b.create_block());
    cx.b.append_block_param(merge, ty);
    let zero = if ty.is_float() { float_const(cx, 0.0, ty, Lanes::Scalar) } else { cx.b.ins().iconst(ty, 0) };
    cx.b.ins().brif(inside, load_block, &[], merge, &[BlockArg::Value(zero)]);
    cx.b.switch_to_block(load_block);
    cx.b.seal_block(load_block);
    let v = cx.load_elems(buf, offset, Lanes::Scalar)?;
    cx.b.ins().jump(merge, &[BlockArg::Value(v)]);
    cx.b.switch_to_block(merge);
    cx.b.seal_block(merge);
    Ok(cx.b.block_params(merge)[0])
}

/// An index into a dimension of size `bound`, normalized to `0..bound` (negatives count
/// from the end when `wrap`); out of range, the first such error of the call is recorded
/// as (site + 1, index, bound) and the result is 0, so the access it feeds stays in bounds.
/// The record goes to the first failing check on any thread, whole: a compare-and-swap
/// claims its site word, and only the check that claimed it writes the index and size
/// (the CUDA backend's `atom.cas`, the same way).
fn check_index(cx: &mut Cx, v: Value, bound: &SymExpr, wrap: bool, site: usize, record: crate::ir::BufId) -> Value {
    let n = cx.sym(bound);
    let index = if wrap {
        let negative = cx.b.ins().icmp_imm_s(IntCC::SignedLessThan, v, 0);
        let wrapped = cx.b.ins().iadd(v, n);
        cx.b.ins().select(negative, wrapped, v)
    } else {
        v
    };
    let inside = cx.b.ins().icmp(IntCC::UnsignedLessThan, index, n);
    let (fail, merge) = (cx.b.create_block(), cx.b.create_block());
    cx.b.append_block_param(merge, types::I64);
    cx.b.ins().brif(inside, merge, &[BlockArg::Value(index)], fail, &[]);
    cx.b.switch_to_block(fail);
    cx.b.seal_block(fail);
    let base = cx.base(record);
    let (none, site_id) = (cx.b.ins().iconst(types::I64, 0), cx.b.ins().iconst(types::I64, site as i64 + 1));
    let claimed_by = cx.b.ins().atomic_cas(flags(), base, none, site_id);
    let (write, done) = (cx.b.create_block(), cx.b.create_block());
    cx.b.ins().brif(claimed_by, done, &[], write, &[]);
    cx.b.switch_to_block(write);
    cx.b.seal_block(write);
    cx.b.ins().store(flags(), v, base, 8);
    cx.b.ins().store(flags(), n, base, 16);
    cx.b.ins().jump(done, &[]);
    cx.b.switch_to_block(done);
    cx.b.seal_block(done);
    let zero = cx.b.ins().iconst(types::I64, 0);
    cx.b.ins().jump(merge, &[BlockArg::Value(zero)]);
    cx.b.switch_to_block(merge);
    cx.b.seal_block(merge);
    cx.b.block_params(merge)[0]
}

/// `offset + sum(coef * var)` as an i64.
pub(super) fn affine(cx: &mut Cx, a: &Affine, vars: &[Value]) -> Value {
    let mut acc = cx.sym(&a.offset);
    for (v, c) in &a.terms {
        let term = match c.as_int() {
            Some(1) => vars[*v],
            Some(k) => cx.b.ins().imul_imm_s(vars[*v], k),
            None => {
                let cv = cx.sym(c);
                cx.b.ins().imul(vars[*v], cv)
            }
        };
        acc = cx.b.ins().iadd(acc, term);
    }
    acc
}

/// A constant of dtype `d`; one of a 16-bit float dtype is that dtype's nearest value
/// (rounded through f32, as `c10::Half(double)` does).
fn constant(cx: &mut Cx, c: Scalar, d: DType) -> R<Value> {
    let ty = clif_type(d)?;
    Ok(match ty {
        types::F32 if half::is_half(d) => cx.b.ins().f32const(half::nearest(c.as_f64() as f32, d)),
        types::F32 => cx.b.ins().f32const(c.as_f64() as f32),
        types::F64 => cx.b.ins().f64const(c.as_f64()),
        _ => cx.b.ins().iconst(ty, c.as_i64()),
    })
}

/// A Cast node from `x` to `to`. A 16-bit float is an f32 in registers that arithmetic
/// may have left between two values of its dtype, so a cast from one rounds it first
/// (unless it is known to hold such a value), and a cast to one rounds the result.
fn cast_node(cx: &mut Cx, xv: Value, x: &E, to: DType, lanes: Lanes) -> R<Value> {
    let from = x.dtype;
    if from == to {
        return Ok(xv);
    }
    let xv = if half::is_half(from) && !is_rounded(x) { half::round(cx, xv, from, lanes) } else { xv };
    let v = cast(cx, xv, half::compute_dtype(from), half::compute_dtype(to))?;
    Ok(if half::is_half(to) { half::round(cx, v, to, lanes) } else { v })
}

/// Does `e` certainly hold a value of its dtype: loaded, constant, cast to it, or picked
/// from or sign-changed from such values (max, min, where, neg, abs)?
fn is_rounded(e: &E) -> bool {
    match &e.kind {
        ExprKind::Load { .. } | ExprKind::LoadAt { .. } | ExprKind::Const(_) | ExprKind::Cast(_) => true,
        ExprKind::Unary(Prim::Neg | Prim::Abs, x) => is_rounded(x),
        ExprKind::Binary(Prim::Max | Prim::Min, a, b) | ExprKind::Where(_, a, b) => is_rounded(a) && is_rounded(b),
        _ => false,
    }
}

pub(super) fn is_unsigned(d: DType) -> bool {
    matches!(d, DType::U8 | DType::Bool)
}

pub(super) fn cast(cx: &mut Cx, x: Value, from: DType, to: DType) -> R<Value> {
    if from == to {
        return Ok(x);
    }
    let (ft, tt) = (clif_type(from)?, clif_type(to)?);
    let ins = cx.b.ins();
    Ok(match (ft.is_float(), tt.is_float()) {
        _ if to == DType::Bool => {
            if ft.is_float() {
                let zero = if ft == types::F32 { ins.f32const(0.0) } else { ins.f64const(0.0) };
                cx.b.ins().fcmp(FloatCC::NotEqual, x, zero)
            } else {
                ins.icmp_imm_s(IntCC::NotEqual, x, 0)
            }
        }
        (true, true) => {
            if ft.bits() < tt.bits() {
                ins.fpromote(tt, x)
            } else {
                ins.fdemote(tt, x)
            }
        }
        (false, true) => {
            if is_unsigned(from) {
                ins.fcvt_from_uint(tt, x)
            } else {
                ins.fcvt_from_sint(tt, x)
            }
        }
        (true, false) => {
            // Saturating, then wrapped to the narrow type (torch's cast is undefined out of range).
            let wide = ins.fcvt_to_sint_sat(types::I64, x);
            if tt == types::I64 {
                wide
            } else {
                cx.b.ins().ireduce(tt, wide)
            }
        }
        (false, false) => match ft.bits().cmp(&tt.bits()) {
            std::cmp::Ordering::Less => {
                if is_unsigned(from) {
                    ins.uextend(tt, x)
                } else {
                    ins.sextend(tt, x)
                }
            }
            std::cmp::Ordering::Greater => ins.ireduce(tt, x),
            std::cmp::Ordering::Equal => x,
        },
    })
}

/// A libm call, lane by lane for vectors.
pub(super) fn call_libm(cx: &mut Cx, name: &str, args: &[Value], d: DType, lanes: Lanes) -> R<Value> {
    let ty = clif_type(d)?;
    let symbol = if ty == types::F32 { format!("{name}f") } else { name.to_string() };
    let f = cx.libm(&symbol, ty, args.len())?;
    match lanes {
        Lanes::Scalar => {
            let call = cx.b.ins().call(f, args);
            Ok(cx.b.inst_results(call)[0])
        }
        Lanes::X4(_) => {
            let zero = cx.b.ins().f32const(0.0);
            let mut out = cx.b.ins().splat(types::F32X4, zero);
            for lane in 0..4u8 {
                let lane_args: Vec<Value> = args.iter().map(|a| cx.b.ins().extractlane(*a, lane)).collect();
                let call = cx.b.ins().call(f, &lane_args);
                let r = cx.b.inst_results(call)[0];
                out = cx.b.ins().insertlane(out, r, lane);
            }
            Ok(out)
        }
    }
}

pub(super) fn float_const(cx: &mut Cx, v: f64, ty: Type, lanes: Lanes) -> Value {
    let s = if ty == types::F64 { cx.b.ins().f64const(v) } else { cx.b.ins().f32const(v as f32) };
    match lanes {
        Lanes::X4(_) => cx.b.ins().splat(types::F32X4, s),
        Lanes::Scalar => s,
    }
}

fn unary(cx: &mut Cx, op: Prim, x: Value, d: DType, lanes: Lanes) -> R<Value> {
    let ty = clif_type(d)?;
    let float = d.is_float();
    let one = |cx: &mut Cx| float_const(cx, 1.0, ty, lanes);
    Ok(match (op, float) {
        (Prim::Neg, true) => cx.b.ins().fneg(x),
        (Prim::Neg, false) => cx.b.ins().ineg(x),
        (Prim::Abs, true) => cx.b.ins().fabs(x),
        (Prim::Abs, false) => {
            if is_unsigned(d) {
                x
            } else {
                cx.b.ins().iabs(x)
            }
        }
        (Prim::Sqrt, true) => cx.b.ins().sqrt(x),
        (Prim::Rsqrt, true) => {
            let s = cx.b.ins().sqrt(x);
            let o = one(cx);
            cx.b.ins().fdiv(o, s)
        }
        (Prim::Recip, true) => {
            let o = one(cx);
            cx.b.ins().fdiv(o, x)
        }
        (Prim::Floor, true) => cx.b.ins().floor(x),
        (Prim::Ceil, true) => cx.b.ins().ceil(x),
        (Prim::Trunc, true) => cx.b.ins().trunc(x),
        (Prim::Round, true) => cx.b.ins().nearest(x),
        // 1 / (1 + exp(-x))
        (Prim::Sigmoid, true) => {
            let n = cx.b.ins().fneg(x);
            let e = super::math::unary(cx, Prim::Exp, n, d, lanes)?;
            let o = one(cx);
            let den = cx.b.ins().fadd(o, e);
            let o = one(cx);
            cx.b.ins().fdiv(o, den)
        }
        (Prim::Not, _) => match lanes {
            Lanes::X4(_) => cx.b.ins().bnot(x),
            Lanes::Scalar if d == DType::Bool => cx.b.ins().bxor_imm_s(x, 1),
            Lanes::Scalar => {
                let nz = cast(cx, x, d, DType::Bool)?;
                cx.b.ins().bxor_imm_s(nz, 1)
            }
        },
        (Prim::BitNot, false) => cx.b.ins().bnot(x),
        (op, _) => return super::math::unary(cx, op, x, d, lanes),
    })
}

pub(super) fn binary(cx: &mut Cx, op: Prim, a: Value, b: Value, d: DType, lanes: Lanes) -> R<Value> {
    let float = d.is_float();
    let uns = is_unsigned(d);
    // On f32x4 lanes a compare gives an i32x4 mask.
    let fcmp = |cx: &mut Cx, cc: FloatCC| cx.b.ins().fcmp(cc, a, b);
    let icmp = |cx: &mut Cx, s: IntCC, u: IntCC| cx.b.ins().icmp(if uns { u } else { s }, a, b);
    Ok(match (op, float) {
        (Prim::Add, true) => cx.b.ins().fadd(a, b),
        (Prim::Add, false) => cx.b.ins().iadd(a, b),
        (Prim::Sub, true) => cx.b.ins().fsub(a, b),
        (Prim::Sub, false) => cx.b.ins().isub(a, b),
        (Prim::Mul, true) => cx.b.ins().fmul(a, b),
        (Prim::Mul, false) => cx.b.ins().imul(a, b),
        (Prim::Div, true) => cx.b.ins().fdiv(a, b),
        (Prim::Max, true) => cx.b.ins().fmax(a, b),
        (Prim::Min, true) => cx.b.ins().fmin(a, b),
        (Prim::Max, false) => {
            if uns {
                cx.b.ins().umax(a, b)
            } else {
                cx.b.ins().smax(a, b)
            }
        }
        (Prim::Min, false) => {
            if uns {
                cx.b.ins().umin(a, b)
            } else {
                cx.b.ins().smin(a, b)
            }
        }
        (Prim::Pow, true) => call_libm(cx, "pow", &[a, b], d, lanes)?,
        (Prim::Eq, true) => fcmp(cx, FloatCC::Equal),
        (Prim::Ne, true) => fcmp(cx, FloatCC::NotEqual),
        (Prim::Lt, true) => fcmp(cx, FloatCC::LessThan),
        (Prim::Le, true) => fcmp(cx, FloatCC::LessThanOrEqual),
        (Prim::Gt, true) => fcmp(cx, FloatCC::GreaterThan),
        (Prim::Ge, true) => fcmp(cx, FloatCC::GreaterThanOrEqual),
        (Prim::Eq, false) => icmp(cx, IntCC::Equal, IntCC::Equal),
        (Prim::Ne, false) => icmp(cx, IntCC::NotEqual, IntCC::NotEqual),
        (Prim::Lt, false) => icmp(cx, IntCC::SignedLessThan, IntCC::UnsignedLessThan),
        (Prim::Le, false) => icmp(cx, IntCC::SignedLessThanOrEqual, IntCC::UnsignedLessThanOrEqual),
        (Prim::Gt, false) => icmp(cx, IntCC::SignedGreaterThan, IntCC::UnsignedGreaterThan),
        (Prim::Ge, false) => icmp(cx, IntCC::SignedGreaterThanOrEqual, IntCC::UnsignedGreaterThanOrEqual),
        (Prim::And, _) if d == DType::Bool => cx.b.ins().band(a, b),
        (Prim::Or, _) if d == DType::Bool => cx.b.ins().bor(a, b),
        (Prim::And | Prim::Or, _) => {
            let (x, y) = (cast(cx, a, d, DType::Bool)?, cast(cx, b, d, DType::Bool)?);
            if op == Prim::And {
                cx.b.ins().band(x, y)
            } else {
                cx.b.ins().bor(x, y)
            }
        }
        (Prim::BitAnd, false) => cx.b.ins().band(a, b),
        (Prim::BitOr, false) => cx.b.ins().bor(a, b),
        (Prim::BitXor, false) => cx.b.ins().bxor(a, b),
        (Prim::ShrU, false) => cx.b.ins().ushr(a, b),
        (op, _) => return super::math::binary(cx, op, a, b, d, lanes),
    })
}

#[cfg(test)]
mod tests {
    use super::{reads_transposed, vectorizable};
    use crate::ir::expr::{binary, cast, constant, index_value, int, load, load_at, select, unary, Affine};
    use crate::ir::{BufId, Prim, Scalar};
    use aotc_abi::sym::SymExpr;
    use aotc_abi::DType;
    use cranelift_codegen::entity::EntityRef;

    /// `buf[i0 * 8 + i1 * stride]`.
    fn at(buf: usize, stride: i64) -> crate::ir::E {
        let index = Affine::var(0).scale(&SymExpr::Int(8)).plus(&Affine::var(1).scale(&SymExpr::Int(stride)));
        load(BufId::new(buf), DType::F32, index)
    }

    #[test]
    fn vectorizes_contiguous_and_broadcast_bodies_computed_in_f32_only() {
        let x = at(0, 1);
        let bias = load(BufId::new(1), DType::F32, Affine::var(0));
        let gelu_like = binary(Prim::Mul, x.clone(), unary(Prim::Erf, binary(Prim::Add, x.clone(), bias)));
        assert!(vectorizable(&gelu_like, 1, false));
        let relu_mask = select(
            binary(Prim::Gt, x.clone(), constant(Scalar::F(0.0), DType::F32)),
            x.clone(),
            constant(Scalar::F(0.0), DType::F32),
        );
        assert!(vectorizable(&relu_mask, 1, false));
        // A strided (transposed) load, an f64 cast, or vectorizing along the outer variable: scalar.
        assert!(!vectorizable(&at(0, 8), 1, false));
        assert!(!vectorizable(&cast(x.clone(), DType::F64), 1, false));
        assert!(!vectorizable(&x, 0, false));
        // float16 and bfloat16 are computed in f32: their loads, arithmetic and casts
        // to and from float32 vectorize; a cast to an integer does not.
        let h = load(BufId::new(2), DType::F16, Affine::var(1));
        let scaled = binary(Prim::Mul, h.clone(), constant(Scalar::F(0.5), DType::F16));
        assert!(vectorizable(&cast(binary(Prim::Add, cast(scaled, DType::F32), x.clone()), DType::BF16), 1, false));
        assert!(!vectorizable(&cast(h, DType::I32), 1, false));
        // A pointwise body gathers a strided load's lanes.
        assert!(vectorizable(&at(0, 8), 1, true));
        let transposed = load(BufId::new(0), DType::F32, Affine::var(0).plus(&Affine::var(1).scale(&SymExpr::Int(8))));
        assert!(reads_transposed(&binary(Prim::Add, transposed, x.clone()), 0, 1));
        assert!(!reads_transposed(&x, 0, 1));
    }

    /// A body of computed offsets and index comparisons (a concatenation whose seam falls
    /// inside a vector, a roll, reads out of range, a splat, a cast index) vectorizes
    /// along the last variable and matches its meaning lane by lane, in the remainder too.
    #[test]
    fn computed_offsets_and_index_masks_run_on_lanes() {
        let (rows, cols) = (5i64, 23i64);
        let n = rows * cols;
        let x: Vec<f32> = (0..n).map(|v| v as f32 + 0.5).collect();
        let bytes = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        let (i, j) = (
            |k| index_value(Affine::var(0).scale(&SymExpr::Int(k))),
            |k| index_value(Affine::var(1).scale(&SymExpr::Int(k))),
        );
        let add = |a, b| binary(Prim::Add, a, b);
        let out = super::super::test_kernel::run_on_buffer(DType::F32, DType::F32, bytes, &[rows, cols], |buf| {
            // Bounds 5 short of x, so that reading past them would find non-zero values.
            let at = |offset| load_at(buf, DType::F32, SymExpr::Int(n - 5), offset);
            // Columns 0..9 from x[i * 9 + j], the rest from x[45 + i * 14 + j - 9].
            let concat = select(
                binary(Prim::Lt, j(1), int(9)),
                at(add(i(9), j(1))),
                at(add(add(int(45), i(14)), binary(Prim::Sub, j(1), int(9)))),
            );
            // Row (i + 3) mod 5, shifted by 2 columns: the first two read below 0 (zero).
            let roll = at(add(
                binary(Prim::Mul, binary(Prim::Fmod, add(i(1), int(3)), int(rows)), int(cols)),
                add(j(1), int(-2)),
            ));
            // x shifted by one: the first vector starts below the bounds, the last
            // (offsets 107..=110) ends past them.
            let next = at(add(i(cols), add(j(1), int(-1))));
            // x[i] in every lane, or i as a float where i * 3 >= j.
            let uniform = select(binary(Prim::Ge, i(3), j(1)), at(i(1)), cast(i(1), DType::F32));
            let body =
                add(add(add(concat, binary(Prim::Mul, roll, constant(Scalar::F(2.0), DType::F32))), uniform), next);
            assert!(vectorizable(&body, 1, false));
            body
        });
        let got: Vec<f32> = out.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
        let at = |o: i64| if (0..n - 5).contains(&o) { x[o as usize] } else { 0.0 };
        for (r, c) in (0..rows).flat_map(|r| (0..cols).map(move |c| (r, c))) {
            let concat = if c < 9 { at(r * 9 + c) } else { at(45 + r * 14 + c - 9) };
            let roll = at((r + 3) % rows * cols + c - 2);
            let uniform = if r * 3 >= c { at(r) } else { r as f32 };
            let next = at(r * cols + c - 1);
            assert_eq!(got[(r * cols + c) as usize], concat + roll * 2.0 + uniform + next, "y[{r}, {c}]");
        }
        // An offset stepping by 2 per lane, or a comparison whose sides step 2 apart: scalar.
        let x = BufId::new(0);
        assert!(!vectorizable(&load_at(x, DType::F32, SymExpr::Int(n), j(2)), 1, false));
        let far = select(
            binary(Prim::Lt, j(2), i(1)),
            load(x, DType::F32, Affine::var(1)),
            constant(Scalar::F(0.0), DType::F32),
        );
        assert!(!vectorizable(&far, 1, false));
    }

    /// Bool buffers read on lanes: four contiguous bytes as a mask, or one byte in every lane.
    #[test]
    fn bool_loads_run_on_lanes() {
        let (rows, cols) = (3i64, 13i64);
        let x: Vec<u8> = (0..rows * cols).map(|v| u8::from(v % 3 == 0 || v % 7 == 1)).collect();
        let f = |v: f64| constant(Scalar::F(v), DType::F32);
        let out = super::super::test_kernel::run_on_buffer(DType::Bool, DType::F32, x.clone(), &[rows, cols], |buf| {
            let flag = |index| load(buf, DType::Bool, index);
            let own = flag(Affine::var(0).scale(&SymExpr::Int(cols)).plus(&Affine::var(1)));
            let row = flag(Affine::var(0));
            let body = binary(Prim::Add, select(own, f(1.0), f(2.0)), select(row, f(10.0), f(0.0)));
            assert!(vectorizable(&body, 1, false));
            body
        });
        let got: Vec<f32> = out.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
        for (r, c) in (0..rows as usize).flat_map(|r| (0..cols as usize).map(move |c| (r, c))) {
            let own = if x[r * cols as usize + c] != 0 { 1.0 } else { 2.0 };
            let row = if x[r] != 0 { 10.0 } else { 0.0 };
            assert_eq!(got[r * cols as usize + c], own + row, "y[{r}, {c}]");
        }
    }

    #[test]
    fn transposed_reads_match_the_transpose_in_tiles_and_their_edges() {
        // 37 x 21: neither a multiple of the 16 x 16 tiles nor of the 4 lanes.
        let (rows, cols) = (37usize, 21usize);
        let x: Vec<f32> = (0..rows * cols).map(|i| i as f32 * 0.5 - 100.0).collect();
        let bytes = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        let out = super::super::test_kernel::run_transposed(DType::F32, DType::F32, bytes, rows as i64, |x| {
            binary(Prim::Mul, x, constant(Scalar::F(2.0), DType::F32))
        });
        let got: Vec<f32> = out.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
        let want: Vec<f32> = (0..rows * cols).map(|o| 2.0 * x[o / cols + rows * (o % cols)]).collect();
        assert_eq!(got, want);
        // float16 values gathered, widened and rounded back.
        let h: Vec<u8> = (0..rows * cols).flat_map(|i| ::half::f16::from_f32(i as f32).to_le_bytes()).collect();
        let out = super::super::test_kernel::run_transposed(DType::F16, DType::F16, h, rows as i64, |x| x);
        let got: Vec<f32> = out.chunks_exact(2).map(|b| ::half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect();
        let want: Vec<f32> = (0..rows * cols).map(|o| (o / cols + rows * (o % cols)) as f32).collect();
        assert_eq!(got, want);
    }
}
