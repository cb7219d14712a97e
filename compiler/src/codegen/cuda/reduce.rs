//! Reduction kernels: one CTA per output element (a grid-stride loop over outputs), its
//! 256 threads each combining a strided share of the reduction, then the partials
//! combined by `shfl.sync.bfly` butterflies within each warp and once more across the
//! warps through a 32-slot shared buffer. Values accumulate in the CPU kernel's type
//! (the body's compute dtype: f32 for 16-bit floats), max and min propagate NaN, and
//! argmax/argmin give the first index of the best value (NaN beating everything), the
//! CPU's sequential answer, whatever the order of combination.

use super::expr;
use super::kernel::{Kx, R, THREADS};
use super::num::Num;
use super::ptx::{Kind, Op, Reg};
use crate::ir::expr::E;
use crate::ir::{BufId, Prim, ReduceOp};
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

/// The running state of one thread: its value and (for arg reductions) its index.
#[derive(Clone, Copy)]
struct Partial {
    value: Reg,
    index: Reg,
}

pub fn reduction(kx: &mut Kx, out: BufId, ranges: &[SymExpr], reduce: &[SymExpr], op: ReduceOp, body: &E) -> R<()> {
    let dtype = body.dtype;
    let num = Num::of(dtype);
    let outputs = kx.product(ranges)?;
    let length = kx.product(reduce)?;
    let (first, step, tid) = kx.cta();
    let tid64 = kx.b.def("cvt.u64.u32", Kind::B64, &[tid.into()]);
    let threads = kx.b.def("mov.s64", Kind::B64, &[Op::Int(THREADS as i64)]);
    let lane = kx.b.def("and.b32", Kind::B32, &[tid.into(), Op::Int(31)]);
    let warp = kx.b.def("shr.u32", Kind::B32, &[tid.into(), Op::Int(5)]);
    kx.b.shared("partial_values", 8, 32 * 8);
    kx.b.shared("partial_indices", 8, 32 * 8);
    let slot = kx.b.def("mul.wide.u32", Kind::B64, &[warp.into(), Op::Int(8)]);
    let lane_slot = kx.b.def("mul.wide.u32", Kind::B64, &[lane.into(), Op::Int(8)]);
    let values = kx.b.def("mov.u64", Kind::B64, &[Op::Sym("partial_values".into())]);
    let indices = kx.b.def("mov.u64", Kind::B64, &[Op::Sym("partial_indices".into())]);
    let is_arg = matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin);
    kx.strided_loop(first, outputs, step, &mut |kx, o| {
        let outer = kx.unflatten(o, ranges)?;
        let acc = Partial { value: kx.b.reg(num.kind()), index: kx.b.reg(Kind::B64) };
        init(kx, acc, op, dtype);
        kx.strided_loop(tid64, length, threads, &mut |kx, j| {
            let mut vars = outer.clone();
            vars.extend(kx.unflatten(j, reduce)?);
            let x = expr::emit(kx, body, &vars)?;
            let take = match is_arg {
                true => Some(better(kx, op, num, x, acc.value)),
                false => None,
            };
            merge(kx, op, dtype, acc, Partial { value: x, index: j }, take)
        })?;
        butterfly(kx, op, dtype, acc)?;
        // Lane 0 of each warp publishes; warp 0 combines the published partials.
        let lane0 = kx.b.def("setp.eq.u32", Kind::Pred, &[lane.into(), Op::Int(0)]);
        let (vaddr, iaddr) = (add(kx, values, slot), add(kx, indices, slot));
        let st = format!("st.shared.{}", num.bits());
        kx.b.emit_if(lane0, false, &st, &[Op::At(vaddr, 0), acc.value.into()]);
        if is_arg {
            kx.b.emit_if(lane0, false, "st.shared.b64", &[Op::At(iaddr, 0), acc.index.into()]);
        }
        kx.b.emit("bar.sync", &[Op::Int(0)]);
        let skip = kx.b.label();
        let not_warp0 = kx.b.def("setp.ne.u32", Kind::Pred, &[warp.into(), Op::Int(0)]);
        kx.b.bra_if(not_warp0, false, skip);
        init(kx, acc, op, dtype);
        let published = kx.b.def("setp.lt.u32", Kind::Pred, &[lane.into(), Op::Int((THREADS / 32) as i64)]);
        let (vaddr, iaddr) = (add(kx, values, lane_slot), add(kx, indices, lane_slot));
        kx.b.emit_if(published, false, &format!("ld.shared.{}", num.bits()), &[acc.value.into(), Op::At(vaddr, 0)]);
        if is_arg {
            kx.b.emit_if(published, false, "ld.shared.b64", &[acc.index.into(), Op::At(iaddr, 0)]);
        }
        butterfly(kx, op, dtype, acc)?;
        let store = kx.b.label();
        let not_lane0 = kx.b.def("setp.ne.u32", Kind::Pred, &[lane.into(), Op::Int(0)]);
        kx.b.bra_if(not_lane0, false, store);
        kx.store(out, o, if is_arg { acc.index } else { acc.value })?;
        kx.b.place(store);
        kx.b.place(skip);
        // The buffer is reused by the next output.
        kx.b.emit("bar.sync", &[Op::Int(0)]);
        Ok(())
    })
}

fn add(kx: &mut Kx, base: Reg, offset: Reg) -> Reg {
    kx.b.def("add.s64", Kind::B64, &[base.into(), offset.into()])
}

/// The identity: 0, 1, or the lowest/highest value of the dtype (index 0).
fn init(kx: &mut Kx, acc: Partial, op: ReduceOp, dtype: DType) {
    let num = Num::of(dtype);
    let (lo, hi) = dtype.int_range();
    let v = match op {
        ReduceOp::Sum => num.imm(0.0, 0),
        ReduceOp::Prod => num.imm(1.0, 1),
        ReduceOp::Max | ReduceOp::ArgMax => num.imm(f64::NEG_INFINITY, lo),
        ReduceOp::Min | ReduceOp::ArgMin => num.imm(f64::INFINITY, hi),
    };
    kx.b.set(&format!("mov.{}", num.ty()), acc.value, &[v]);
    kx.b.set("mov.b64", acc.index, &[Op::Int(0)]);
}

/// For argmax/argmin: is `x` strictly better than `best`? NaN beats everything but NaN.
fn better(kx: &mut Kx, op: ReduceOp, num: Num, x: Reg, best: Reg) -> Reg {
    let cc = if op == ReduceOp::ArgMax { "gt" } else { "lt" };
    let strictly = kx.b.def(&format!("setp.{cc}.{}", num.ty()), Kind::Pred, &[x.into(), best.into()]);
    if !num.is_float() {
        return strictly;
    }
    let x_nan = kx.b.def(&format!("setp.nan.{}", num.ty()), Kind::Pred, &[x.into(), x.into()]);
    let best_num = kx.b.def(&format!("setp.num.{}", num.ty()), Kind::Pred, &[best.into(), best.into()]);
    let nan_wins = kx.b.def("and.pred", Kind::Pred, &[x_nan.into(), best_num.into()]);
    kx.b.def("or.pred", Kind::Pred, &[strictly.into(), nan_wins.into()])
}

/// Folds `x` into `acc`. For arg reductions `take` says whether `x` replaces it (a
/// sequential scan passes "strictly better", so the first index wins ties).
fn merge(kx: &mut Kx, op: ReduceOp, dtype: DType, acc: Partial, x: Partial, take: Option<Reg>) -> R<()> {
    let num = Num::of(dtype);
    match (op, take) {
        (ReduceOp::ArgMax | ReduceOp::ArgMin, Some(take)) => {
            kx.b.set(&format!("selp.{}", num.bits()), acc.value, &[x.value.into(), acc.value.into(), take.into()]);
            kx.b.set("selp.b64", acc.index, &[x.index.into(), acc.index.into(), take.into()]);
        }
        (ReduceOp::ArgMax | ReduceOp::ArgMin, None) => return Err("an arg reduction needs its comparison".into()),
        _ => {
            let prim = match op {
                ReduceOp::Sum => Prim::Add,
                ReduceOp::Prod => Prim::Mul,
                ReduceOp::Max => Prim::Max,
                _ => Prim::Min,
            };
            let combined = expr::binary(kx, prim, acc.value, x.value, compute(dtype))?;
            kx.b.set(&format!("mov.{}", num.bits()), acc.value, &[combined.into()]);
        }
    }
    Ok(())
}

fn compute(d: DType) -> DType {
    crate::codegen::cpu::half::compute_dtype(d)
}

/// Combines the partials of a warp's 32 lanes, leaving the result in every lane.
fn butterfly(kx: &mut Kx, op: ReduceOp, dtype: DType, acc: Partial) -> R<()> {
    let num = Num::of(dtype);
    for offset in [16, 8, 4, 2, 1] {
        let value = shuffle(kx, acc.value, offset);
        match op {
            ReduceOp::ArgMax | ReduceOp::ArgMin => {
                let other = Partial { value, index: shuffle(kx, acc.index, offset) };
                // The other lane's partial wins when better, or when neither is better
                // (equal, or both NaN) and its index comes first.
                let other_better = better(kx, op, num, other.value, acc.value);
                let mine_better = better(kx, op, num, acc.value, other.value);
                let earlier = kx.b.def("setp.lt.s64", Kind::Pred, &[other.index.into(), acc.index.into()]);
                let tie = kx.b.def("not.pred", Kind::Pred, &[mine_better.into()]);
                let tie_earlier = kx.b.def("and.pred", Kind::Pred, &[tie.into(), earlier.into()]);
                let take = kx.b.def("or.pred", Kind::Pred, &[other_better.into(), tie_earlier.into()]);
                merge(kx, op, dtype, acc, other, Some(take))?;
            }
            _ => merge(kx, op, dtype, acc, Partial { value, index: acc.index }, None)?,
        }
    }
    Ok(())
}

/// `shfl.sync.bfly` of a 32- or 64-bit register (the latter as two halves).
fn shuffle(kx: &mut Kx, v: Reg, offset: i64) -> Reg {
    let args = |x: Reg, d: Reg| [d.into(), x.into(), Op::Int(offset), Op::Int(31), Op::Int(-1)];
    match v.kind {
        Kind::B64 | Kind::F64 => {
            let (lo, hi) = (kx.b.reg(Kind::B32), kx.b.reg(Kind::B32));
            kx.b.emit("mov.b64", &[Op::Pair(lo, hi), v.into()]);
            let (lo2, hi2) = (kx.b.reg(Kind::B32), kx.b.reg(Kind::B32));
            kx.b.emit("shfl.sync.bfly.b32", &args(lo, lo2));
            kx.b.emit("shfl.sync.bfly.b32", &args(hi, hi2));
            let d = kx.b.reg(v.kind);
            kx.b.emit("mov.b64", &[d.into(), Op::Pair(lo2, hi2)]);
            d
        }
        kind => {
            let d = kx.b.reg(kind);
            kx.b.emit("shfl.sync.bfly.b32", &args(v, d));
            d
        }
    }
}
