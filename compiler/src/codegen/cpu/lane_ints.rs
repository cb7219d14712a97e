//! Integer values in a body vectorized along one loop variable. Vector lanes hold f32
//! values or masks only, so an integer subexpression (an index, a computed offset, a
//! checked gather index) is computed once per vector, for the first lane, and is usable
//! where its change from lane to lane is known: its lane step ([`LaneSteps`]). A computed
//! offset stepping by 0 or 1 reads a splat or four contiguous elements ([`load_at`]), an
//! integer comparison whose sides' steps differ by at most one is a mask against the lane
//! numbers ([`compare`]), a bool buffer read contiguously is a mask of its bytes, and a
//! cast of a value equal in every lane is a splat. The
//! concatenations, rolls and window gathers that lowering writes with `where` and computed
//! offsets then run on vectors instead of element by element.

use super::expr::{self, Lanes, Memo};
use super::half;
use super::kernel::{clif_type, flags, Cx, R};
use crate::ir::expr::{ExprKind, E};
use crate::ir::{Expr, Prim};
use aotc_abi::DType;
use cranelift_codegen::ir::condcodes::{CondCode, IntCC};
use cranelift_codegen::ir::{types, BlockArg, ConstantData, Endianness, InstBuilder, MemFlagsData, Value};
use std::collections::HashMap;
use std::rc::Rc;

/// An integer dtype (not a float, not a bool).
pub fn is_integer(d: DType) -> bool {
    !d.is_float() && d != DType::Bool
}

/// Lane steps along loop variable `var`, memoized per node: `Some(s)` when the node's value
/// in lane `l` is the first lane's plus `s * l` (integers; other nodes only `Some(0)`,
/// equal in every lane), `None` when it is not known to be.
pub struct LaneSteps {
    var: usize,
    memo: HashMap<*const Expr, Option<i64>>,
}

impl LaneSteps {
    pub fn new(var: usize) -> Self {
        LaneSteps { var, memo: HashMap::new() }
    }

    pub fn of(&mut self, e: &E) -> Option<i64> {
        if let Some(s) = self.memo.get(&Rc::as_ptr(e)) {
            return *s;
        }
        let s = self.compute(e);
        self.memo.insert(Rc::as_ptr(e), s);
        s
    }

    fn compute(&mut self, e: &E) -> Option<i64> {
        let integer = is_integer(e.dtype);
        match &e.kind {
            ExprKind::Const(_) => Some(0),
            ExprKind::Index(a) => a.coef(self.var).as_int().filter(|s| *s == 0 || integer),
            ExprKind::Load { index, .. } => index.coef(self.var).as_int().filter(|s| *s == 0).map(|_| 0),
            ExprKind::LoadAt { offset, .. } => self.uniform(&[offset]),
            ExprKind::CheckIndex { value, .. } => self.uniform(&[value]),
            ExprKind::Unary(Prim::Neg, x) if integer => self.of(x)?.checked_neg(),
            ExprKind::Unary(_, x) => self.uniform(&[x]),
            ExprKind::Binary(op, a, b) if integer => {
                let (sa, sb) = (self.of(a)?, self.of(b)?);
                match op {
                    Prim::Add => sa.checked_add(sb),
                    Prim::Sub => sa.checked_sub(sb),
                    Prim::Mul => match (constant(a), constant(b)) {
                        _ if sa == 0 && sb == 0 => Some(0),
                        (Some(k), _) => sb.checked_mul(k),
                        (_, Some(k)) => sa.checked_mul(k),
                        _ => None,
                    },
                    _ => (sa == 0 && sb == 0).then_some(0),
                }
            }
            ExprKind::Binary(_, a, b) => self.uniform(&[a, b]),
            ExprKind::Where(c, a, b) => self.uniform(&[c, a, b]),
            // A widening (or same-width) integer cast keeps the step; others keep only 0.
            ExprKind::Cast(x) if integer && is_integer(x.dtype) && e.dtype.size() >= x.dtype.size() => self.of(x),
            ExprKind::Cast(x) => self.uniform(&[x]),
        }
    }

    /// `Some(0)` when every one of `xs` is equal in every lane.
    fn uniform(&mut self, xs: &[&E]) -> Option<i64> {
        xs.iter().all(|x| self.of(x) == Some(0)).then_some(0)
    }

    /// Whether the integer comparison `a op b` has a mask [`compare`] emits: the sides'
    /// steps differ by at most one, and by none unless the values are signed 32- or 64-bit
    /// (where the difference of two indices is exact).
    pub fn comparable(&mut self, a: &E, b: &E) -> bool {
        match (self.of(a), self.of(b)) {
            (Some(sa), Some(sb)) => match sa.checked_sub(sb) {
                Some(0) => true,
                Some(-1 | 1) => matches!(a.dtype, DType::I64 | DType::I32),
                _ => false,
            },
            _ => false,
        }
    }
}

fn constant(e: &E) -> Option<i64> {
    match &e.kind {
        ExprKind::Const(c) => Some(c.as_i64()),
        _ => None,
    }
}

/// The nodes of a vectorized body that [`emit`] computes: integers, computed-offset loads,
/// bool loads, integer comparisons and casts from integers.
pub fn handles(e: &E) -> bool {
    is_integer(e.dtype)
        || match &e.kind {
            ExprKind::LoadAt { .. } => true,
            ExprKind::Load { .. } => e.dtype == DType::Bool,
            ExprKind::Binary(op, a, _) => op.returns_bool() && is_integer(a.dtype),
            ExprKind::Cast(x) => is_integer(x.dtype),
            _ => false,
        }
}

/// Node `e` (one that [`handles`]) in a body on four lanes along `var`, `vars[var]` the
/// first lane's index: an integer is its first lane's value (a scalar), the others vectors.
pub fn emit(cx: &mut Cx, e: &E, vars: &[Value], var: usize, memo: &mut Memo) -> R<Value> {
    if is_integer(e.dtype) {
        return expr::go(cx, e, vars, Lanes::Scalar, memo);
    }
    Ok(match &e.kind {
        ExprKind::LoadAt { buf, numel, offset } => {
            let at = expr::go(cx, offset, vars, Lanes::Scalar, memo)?;
            if memo.steps.of(offset) == Some(0) {
                let x = expr::load_at(cx, *buf, numel, at, clif_type(e.dtype)?)?;
                cx.b.ins().splat(types::F32X4, x)
            } else {
                load_at(cx, *buf, numel, at, var)?
            }
        }
        ExprKind::Load { buf, index } => {
            let at = expr::affine(cx, index, vars);
            bool_mask(cx, *buf, at, index.coef(var).as_int() == Some(1))
        }
        ExprKind::Binary(op, a, b) => compare(cx, *op, a, b, vars, memo)?,
        ExprKind::Cast(_) => {
            let x = expr::go(cx, e, vars, Lanes::Scalar, memo)?;
            cx.b.ins().splat(types::F32X4, x)
        }
        _ => return Err(format!("lane_ints::emit: a node it does not handle: {}", e)),
    })
}

/// The i32x4 mask of bools: the four of `buf` from element `at` on when `contiguous`, else
/// element `at` in every lane.
fn bool_mask(cx: &mut Cx, buf: crate::ir::BufId, at: Value, contiguous: bool) -> Value {
    let addr = cx.elem_addr(buf, at);
    let zero = cx.b.ins().iconst(types::I32, 0);
    let zeros = cx.b.ins().splat(types::I32X4, zero);
    let lanes = if contiguous {
        // Four bytes widened to four 32-bit lanes.
        let bytes = cx.b.ins().load(types::I32, flags(), addr, 0);
        let v = cx.b.ins().scalar_to_vector(types::I32X4, bytes);
        let v = cx.b.ins().bitcast(types::I8X16, MemFlagsData::new().with_endianness(Endianness::Little), v);
        let v = cx.b.ins().uwiden_low(v);
        cx.b.ins().uwiden_low(v)
    } else {
        let byte = cx.b.ins().uload8(types::I32, flags(), addr, 0);
        cx.b.ins().splat(types::I32X4, byte)
    };
    cx.b.ins().icmp(IntCC::NotEqual, lanes, zeros)
}

/// The four elements of `buf` (of `numel`) from `at` on; an offset outside `0..numel`
/// reads as zero, lane by lane, as `expr::load_at`'s do.
fn load_at(cx: &mut Cx, buf: crate::ir::BufId, numel: &aotc_abi::sym::SymExpr, at: Value, var: usize) -> R<Value> {
    let n = cx.sym(numel);
    let last = cx.b.ins().iadd_imm_s(at, 3);
    let first_in = cx.b.ins().icmp(IntCC::UnsignedLessThan, at, n);
    let last_in = cx.b.ins().icmp(IntCC::UnsignedLessThan, last, n);
    let inside = cx.b.ins().band(first_in, last_in);
    let (whole, by_lane, merge) = (cx.b.create_block(), cx.b.create_block(), cx.b.create_block());
    cx.b.append_block_param(merge, types::F32X4);
    cx.b.ins().brif(inside, whole, &[], by_lane, &[]);
    cx.b.switch_to_block(whole);
    cx.b.seal_block(whole);
    let v = cx.load_elems(buf, at, Lanes::X4(var))?;
    cx.b.ins().jump(merge, &[BlockArg::Value(v)]);
    cx.b.switch_to_block(by_lane);
    cx.b.seal_block(by_lane);
    let zero = cx.b.ins().f32const(0.0);
    let mut v = cx.b.ins().splat(types::F32X4, zero);
    for lane in 0..4u8 {
        let at = cx.b.ins().iadd_imm_s(at, lane as i64);
        let x = expr::load_at(cx, buf, numel, at, types::F32)?;
        v = cx.b.ins().insertlane(v, x, lane);
    }
    cx.b.ins().jump(merge, &[BlockArg::Value(v)]);
    cx.b.switch_to_block(merge);
    cx.b.seal_block(merge);
    Ok(cx.b.block_params(merge)[0])
}

/// The i32x4 mask of integer comparison `a op b` ([`LaneSteps::comparable`]). With `a`
/// stepping one more per lane than `b`, lane `l` compares `l` with `b - a` of the first
/// lane (clamped to `-1..=4`, which keeps every comparison with `0..4`); one less, `a - b`
/// with `l` the other way round; equal steps, one scalar comparison for all lanes.
fn compare(cx: &mut Cx, op: Prim, a: &E, b: &E, vars: &[Value], memo: &mut Memo) -> R<Value> {
    let d = half::compute_dtype(a.dtype);
    let (a0, b0) = (expr::go(cx, a, vars, Lanes::Scalar, memo)?, expr::go(cx, b, vars, Lanes::Scalar, memo)?);
    let (sa, sb) = (memo.steps.of(a), memo.steps.of(b));
    let step = sa.zip(sb).and_then(|(sa, sb)| sa.checked_sub(sb));
    let (threshold, cc) = match step {
        Some(0) => {
            let all = expr::binary(cx, op, a0, b0, d, Lanes::Scalar)?;
            let (on, off) = (cx.b.ins().iconst(types::I32, -1), cx.b.ins().iconst(types::I32, 0));
            let lane = cx.b.ins().select(all, on, off);
            return Ok(cx.b.ins().splat(types::I32X4, lane));
        }
        Some(1) => (difference(cx, b0, a0, d), lane_cc(op, false)?),
        Some(-1) => (difference(cx, a0, b0, d), lane_cc(op, true)?),
        _ => return Err(format!("lane_ints::compare: steps {sa:?} and {sb:?}")),
    };
    let threshold = cx.b.ins().splat(types::I32X4, threshold);
    let mut lane_numbers = Vec::with_capacity(16);
    for lane in 0..4i32 {
        lane_numbers.extend_from_slice(&lane.to_le_bytes());
    }
    let handle = cx.b.func.dfg.constants.insert(ConstantData::from(lane_numbers));
    let lane_numbers = cx.b.ins().vconst(types::I32X4, handle);
    Ok(cx.b.ins().icmp(cc, lane_numbers, threshold))
}

/// `x - y` as an i32 clamped to `-1..=4`.
fn difference(cx: &mut Cx, x: Value, y: Value, d: DType) -> Value {
    let wide = |cx: &mut Cx, v: Value| if d == DType::I64 { v } else { cx.b.ins().sextend(types::I64, v) };
    let (x, y) = (wide(cx, x), wide(cx, y));
    let diff = cx.b.ins().isub(x, y);
    let (low, high) = (cx.b.ins().iconst(types::I64, -1), cx.b.ins().iconst(types::I64, 4));
    let clamped = cx.b.ins().smax(diff, low);
    let clamped = cx.b.ins().smin(clamped, high);
    cx.b.ins().ireduce(types::I32, clamped)
}

/// The comparison of the lane number `l` with the threshold `t` that `op` becomes:
/// `l op t`, or with `swapped`, `t op l`.
fn lane_cc(op: Prim, swapped: bool) -> R<IntCC> {
    let cc = match op {
        Prim::Eq => IntCC::Equal,
        Prim::Ne => IntCC::NotEqual,
        Prim::Lt => IntCC::SignedLessThan,
        Prim::Le => IntCC::SignedLessThanOrEqual,
        Prim::Gt => IntCC::SignedGreaterThan,
        Prim::Ge => IntCC::SignedGreaterThanOrEqual,
        op => return Err(format!("lane_ints::compare: {} is not a comparison", op.name())),
    };
    Ok(if swapped { cc.swap_args() } else { cc })
}
