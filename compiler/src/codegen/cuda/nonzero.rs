//! nonzero's scan (the support library's `__aotc_nonzero` in runtime/embedded/src/
//! kernels.rs is the reference) as one CTA: it walks the mask in chunks of
//! [`THREADS`] elements, each thread one element; a block-wide prefix sum of the
//! nonzero flags (warp shuffles, then the warps' counts through shared memory) gives each
//! nonzero element its row, counted on from the chunks before. The rows are the first
//! `rows` nonzero positions in row-major order, each as its coordinates; rows the mask
//! does not fill (none, when `rows` is its count, as the program computes it) are zeroed.

use super::kernel::{Kx, R, THREADS};
use super::ptx::{Kind, Op, Reg};
use super::Work;
use crate::ir::{ExternArg, ExternCall};
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

pub use aotc_abi::nonzero::SYMBOL;

const WARPS: i64 = THREADS as i64 / 32;

/// `__aotc_nonzero(out, mask, sizes, rows)`: `out` is `rows` x `sizes.len()` int64.
pub fn nonzero(kx: &mut Kx, call: &ExternCall) -> R<Work> {
    let [ExternArg::Buf(mask), ExternArg::Sizes(sizes), ExternArg::Size(rows)] = call.args.as_slice() else {
        return Err(format!("{SYMBOL} takes (mask, sizes, rows)"));
    };
    let (mask, out) = (*mask, call.out);
    let (mask_dtype, out_dtype) = (kx.program.buffers[mask].dtype, kx.program.buffers[out].dtype);
    if !matches!(mask_dtype, DType::Bool | DType::U8) || out_dtype != DType::I64 {
        return Err(format!("{SYMBOL}: the mask is {mask_dtype} and the output {out_dtype}, expected bool and int64"));
    }
    let ndim = sizes.len() as i64;
    let numel = kx.product(sizes)?;
    let rows = kx.size(rows)?;
    let rows = kx.b.def("mov.s64", Kind::B64, &[rows]);
    let rows = kx.b.def("max.s64", Kind::B64, &[rows.into(), Op::Int(0)]);
    kx.b.shared("warp_counts", 4, (WARPS * 4) as u64);
    let counts = kx.b.def("mov.u64", Kind::B64, &[Op::Sym("warp_counts".into())]);
    let tid = kx.b.def("mov.u32", Kind::B32, &[Op::Special("%tid.x")]);
    let tid64 = kx.b.def("cvt.u64.u32", Kind::B64, &[tid.into()]);
    let lane = kx.b.def("and.b32", Kind::B32, &[tid.into(), Op::Int(31)]);
    let warp = kx.b.def("shr.u32", Kind::B32, &[tid.into(), Op::Int(5)]);
    let warp_slot = kx.b.def("mul.wide.u32", Kind::B64, &[warp.into(), Op::Int(4)]);
    let warp_slot = kx.b.def("add.s64", Kind::B64, &[counts.into(), warp_slot.into()]);
    let threads = kx.b.def("mov.s64", Kind::B64, &[Op::Int(THREADS as i64)]);
    // Rows found in the chunks before: the same in every thread.
    let found = kx.b.def("mov.s64", Kind::B64, &[Op::Int(0)]);
    let start = kx.b.def("mov.s64", Kind::B64, &[Op::Int(0)]);
    kx.strided_loop(start, numel, threads, &mut |kx, chunk| {
        let index = kx.b.def("add.s64", Kind::B64, &[chunk.into(), tid64.into()]);
        let inside = kx.b.def("setp.lt.s64", Kind::Pred, &[index.into(), numel.into()]);
        let outside_value = kx.b.def("mov.u32", Kind::B32, &[Op::Int(0)]);
        let value = kx.load(mask, index, Some((inside, outside_value)))?;
        let nonzero = kx.b.def("setp.ne.u32", Kind::Pred, &[value.into(), Op::Int(0)]);
        let flag = kx.b.def("selp.u32", Kind::B32, &[Op::Int(1), Op::Int(0), nonzero.into()]);
        let within_warp = inclusive_warp_sum(kx, flag, lane);
        let last_lane = kx.b.def("setp.eq.u32", Kind::Pred, &[lane.into(), Op::Int(31)]);
        kx.b.emit_if(last_lane, false, "st.shared.u32", &[Op::At(warp_slot, 0), within_warp.into()]);
        kx.b.emit("bar.sync", &[Op::Int(0)]);
        let (before, total) =
            (kx.b.def("mov.u32", Kind::B32, &[Op::Int(0)]), kx.b.def("mov.u32", Kind::B32, &[Op::Int(0)]));
        for w in 0..WARPS {
            let count = kx.b.def("ld.shared.u32", Kind::B32, &[Op::At(counts, 4 * w)]);
            kx.b.set("add.u32", total, &[total.into(), count.into()]);
            let earlier = kx.b.def("setp.gt.u32", Kind::Pred, &[warp.into(), Op::Int(w)]);
            kx.b.emit_if(earlier, false, "add.u32", &[before.into(), before.into(), count.into()]);
        }
        // The counts are rewritten by the next chunk.
        kx.b.emit("bar.sync", &[Op::Int(0)]);
        // This element's row: the rows before it, its flag excluded.
        let rank = kx.b.def("add.u32", Kind::B32, &[before.into(), within_warp.into()]);
        let rank = kx.b.def("sub.u32", Kind::B32, &[rank.into(), flag.into()]);
        let rank = kx.b.def("cvt.u64.u32", Kind::B64, &[rank.into()]);
        let row = kx.b.def("add.s64", Kind::B64, &[found.into(), rank.into()]);
        let wanted = kx.b.def("setp.lt.s64", Kind::Pred, &[row.into(), rows.into()]);
        let write = kx.b.def("and.pred", Kind::Pred, &[nonzero.into(), wanted.into()]);
        let skip = kx.b.label();
        kx.b.bra_if(write, true, skip);
        let coords = kx.unflatten(index, sizes)?;
        let row_start = kx.b.def("mul.lo.s64", Kind::B64, &[row.into(), Op::Int(ndim)]);
        for (d, c) in coords.into_iter().enumerate() {
            let at = kx.b.def("add.s64", Kind::B64, &[row_start.into(), Op::Int(d as i64)]);
            kx.store(out, at, c)?;
        }
        kx.b.place(skip);
        let total = kx.b.def("cvt.u64.u32", Kind::B64, &[total.into()]);
        kx.b.set("add.s64", found, &[found.into(), total.into()]);
        Ok(())
    })?;
    let filled = kx.b.def("min.s64", Kind::B64, &[found.into(), rows.into()]);
    let first = kx.b.def("mad.lo.s64", Kind::B64, &[filled.into(), Op::Int(ndim), tid64.into()]);
    let end = kx.b.def("mul.lo.s64", Kind::B64, &[rows.into(), Op::Int(ndim)]);
    let zero = kx.b.def("mov.s64", Kind::B64, &[Op::Int(0)]);
    kx.strided_loop(first, end, threads, &mut |kx, at| kx.store(out, at, zero))?;
    Ok(Work::Ctas(SymExpr::Int(1)))
}

/// The sum of `flag` (u32) over lanes 0 to this one of the warp, by shuffles up.
fn inclusive_warp_sum(kx: &mut Kx, flag: Reg, lane: Reg) -> Reg {
    let sum = kx.b.def("mov.u32", Kind::B32, &[flag.into()]);
    for offset in [1, 2, 4, 8, 16] {
        let from = kx.b.def("shfl.sync.up.b32", Kind::B32, &[sum.into(), Op::Int(offset), Op::Int(0), Op::Int(-1)]);
        let has = kx.b.def("setp.ge.u32", Kind::Pred, &[lane.into(), Op::Int(offset)]);
        kx.b.emit_if(has, false, "add.u32", &[sum.into(), sum.into(), from.into()]);
    }
    sum
}
