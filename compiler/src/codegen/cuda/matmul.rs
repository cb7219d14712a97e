//! Matmul kernels: a tiled GEMM. Each CTA computes 32x32 tiles of `out` (a grid-stride
//! loop over batch x row tiles x column tiles); per step of 32 along k, its 256 threads
//! stage a 32x32 tile of A and of B in shared memory, then each thread accumulates a
//! column of four outputs (rows ty, ty+8, ty+16, ty+24) with fused multiply-adds, as the
//! CPU's GEMM does. float16/bfloat16 operands are widened and accumulated in f32.

use super::kernel::{Kx, R};
use super::num::Num;
use super::ptx::{Kind, Op, Reg};
use crate::ir::{Matmul, StridedRef};
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

pub const TILE: i64 = 32;
const ROWS_PER_THREAD: i64 = 4;

/// The number of CTA work items: batch x row tiles x column tiles.
pub fn tiles(m: &Matmul) -> SymExpr {
    let ceil = |x: &SymExpr| SymExpr::floor_div(SymExpr::add([x.clone(), SymExpr::Int(TILE - 1)]), SymExpr::Int(TILE));
    SymExpr::mul([m.batch.clone(), ceil(&m.m), ceil(&m.n)])
}

pub fn matmul(kx: &mut Kx, m: &Matmul) -> R<()> {
    if m.packed_b || m.bias.is_some() || m.activation != aotc_abi::gemm::Activation::None {
        return Err("a matmul with a packed operand or a fused output pass has no CUDA form (both are CPU-only)".into());
    }
    if !matches!(m.dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
        return Err(format!("no GEMM for {}", m.dtype));
    }
    let num = Num::of(m.dtype);
    let (ty, elem) = (num.ty(), if num == Num::F64 { 8 } else { 4 });
    kx.b.shared("tile_a", 8, (TILE * TILE * elem) as u64);
    kx.b.shared("tile_b", 8, (TILE * TILE * elem) as u64);
    let (first, step, tid) = kx.cta();
    let tx32 = kx.b.def("and.b32", Kind::B32, &[tid.into(), Op::Int(TILE - 1)]);
    let ty32 = kx.b.def("shr.u32", Kind::B32, &[tid.into(), Op::Int(5)]);
    let tx = kx.b.def("cvt.u64.u32", Kind::B64, &[tx32.into()]);
    let ty_ = kx.b.def("cvt.u64.u32", Kind::B64, &[ty32.into()]);
    let tile_a = kx.b.def("mov.u64", Kind::B64, &[Op::Sym("tile_a".into())]);
    let tile_b = kx.b.def("mov.u64", Kind::B64, &[Op::Sym("tile_b".into())]);
    let (mm, nn, kk) = (kx.size(&m.m)?, kx.size(&m.n)?, kx.size(&m.k)?);
    let reg = |kx: &mut Kx, o: Op| kx.b.def("mov.s64", Kind::B64, &[o]);
    let (mm, nn, kk) = (reg(kx, mm), reg(kx, nn), reg(kx, kk));
    let round_up = |kx: &mut Kx, x: Reg| {
        let up = kx.b.def("add.s64", Kind::B64, &[x.into(), Op::Int(TILE - 1)]);
        kx.b.def("div.s64", Kind::B64, &[up.into(), Op::Int(TILE)])
    };
    let (row_tiles, col_tiles) = (round_up(kx, mm), round_up(kx, nn));
    let batch = kx.size(&m.batch)?;
    let per_batch = kx.b.def("mul.lo.s64", Kind::B64, &[row_tiles.into(), col_tiles.into()]);
    let total = kx.b.def("mul.lo.s64", Kind::B64, &[per_batch.into(), batch]);
    let out_stride = kx.b.def("mul.lo.s64", Kind::B64, &[mm.into(), nn.into()]);
    kx.strided_loop(first, total, step, &mut |kx, t| {
        let col_tile = kx.b.def("rem.s64", Kind::B64, &[t.into(), col_tiles.into()]);
        let rest = kx.b.def("div.s64", Kind::B64, &[t.into(), col_tiles.into()]);
        let row_tile = kx.b.def("rem.s64", Kind::B64, &[rest.into(), row_tiles.into()]);
        let bi = kx.b.def("div.s64", Kind::B64, &[rest.into(), row_tiles.into()]);
        let row0 = kx.b.def("mul.lo.s64", Kind::B64, &[row_tile.into(), Op::Int(TILE)]);
        let col0 = kx.b.def("mul.lo.s64", Kind::B64, &[col_tile.into(), Op::Int(TILE)]);
        let col = kx.b.def("add.s64", Kind::B64, &[col0.into(), tx.into()]);
        let acc: Vec<Reg> = (0..ROWS_PER_THREAD).map(|_| num.constant(&mut kx.b, 0.0, 0)).collect();
        let a_base = operand_base(kx, &m.a, bi)?;
        let b_base = operand_base(kx, &m.b, bi)?;
        let zero = kx.b.def("mov.s64", Kind::B64, &[Op::Int(0)]);
        let tile_step = kx.b.def("mov.s64", Kind::B64, &[Op::Int(TILE)]);
        kx.strided_loop(zero, kk, tile_step, &mut |kx, k0| {
            // Thread (tx, ty) stages A[row0 + r][k0 + tx] and B[k0 + r][col0 + tx] for
            // r = ty + 8i: every element of both tiles once, zero outside the matrices.
            let a_col = kx.b.def("add.s64", Kind::B64, &[k0.into(), tx.into()]);
            for i in 0..ROWS_PER_THREAD {
                let r = kx.b.def("add.s64", Kind::B64, &[ty_.into(), Op::Int(8 * i)]);
                let a_row = kx.b.def("add.s64", Kind::B64, &[row0.into(), r.into()]);
                let a = stage(kx, &m.a, a_base, a_row, mm, a_col, kk, num)?;
                let b_row = kx.b.def("add.s64", Kind::B64, &[k0.into(), r.into()]);
                let b = stage(kx, &m.b, b_base, b_row, kk, col, nn, num)?;
                let cell = kx.b.def("mad.lo.s64", Kind::B64, &[r.into(), Op::Int(TILE), tx.into()]);
                let offset = kx.b.def("mul.lo.s64", Kind::B64, &[cell.into(), Op::Int(elem)]);
                let at_a = kx.b.def("add.s64", Kind::B64, &[tile_a.into(), offset.into()]);
                let at_b = kx.b.def("add.s64", Kind::B64, &[tile_b.into(), offset.into()]);
                kx.b.emit(&format!("st.shared.{ty}"), &[Op::At(at_a, 0), a.into()]);
                kx.b.emit(&format!("st.shared.{ty}"), &[Op::At(at_b, 0), b.into()]);
            }
            kx.b.emit("bar.sync", &[Op::Int(0)]);
            // A rows ty + 8i (the same for the whole warp: broadcast), B column tx.
            let a_row0 = kx.b.def("mul.lo.s64", Kind::B64, &[ty_.into(), Op::Int(TILE * elem)]);
            let a_row0 = kx.b.def("add.s64", Kind::B64, &[tile_a.into(), a_row0.into()]);
            let b_col = kx.b.def("mad.lo.s64", Kind::B64, &[tx.into(), Op::Int(elem), tile_b.into()]);
            for step in 0..TILE {
                let b = kx.b.def(&format!("ld.shared.{ty}"), num.kind(), &[Op::At(b_col, step * TILE * elem)]);
                for (i, &c) in acc.iter().enumerate() {
                    let a = kx.b.def(
                        &format!("ld.shared.{ty}"),
                        num.kind(),
                        &[Op::At(a_row0, (8 * i as i64 * TILE + step) * elem)],
                    );
                    kx.b.set(&format!("fma.rn.{ty}"), c, &[a.into(), b.into(), c.into()]);
                }
            }
            kx.b.emit("bar.sync", &[Op::Int(0)]);
            Ok(())
        })?;
        let col_inside = kx.b.def("setp.lt.s64", Kind::Pred, &[col.into(), nn.into()]);
        let out_base = kx.b.def("mul.lo.s64", Kind::B64, &[bi.into(), out_stride.into()]);
        for (i, &c) in acc.iter().enumerate() {
            let row = kx.b.def("add.s64", Kind::B64, &[row0.into(), ty_.into()]);
            let row = kx.b.def("add.s64", Kind::B64, &[row.into(), Op::Int(8 * i as i64)]);
            let row_inside = kx.b.def("setp.lt.s64", Kind::Pred, &[row.into(), mm.into()]);
            let inside = kx.b.def("and.pred", Kind::Pred, &[row_inside.into(), col_inside.into()]);
            let skip = kx.b.label();
            kx.b.bra_if(inside, true, skip);
            let at = kx.b.def("mad.lo.s64", Kind::B64, &[row.into(), nn.into(), col.into()]);
            let at = kx.b.def("add.s64", Kind::B64, &[at.into(), out_base.into()]);
            let mut v = c;
            if m.alpha != 1.0 {
                v = kx.b.def(&format!("mul.rn.{ty}"), num.kind(), &[v.into(), num.imm(m.alpha, 0)]);
            }
            if m.accumulate {
                let old = kx.load(m.out, at, None)?;
                v = kx.b.def(&format!("add.rn.{ty}"), num.kind(), &[v.into(), old.into()]);
            }
            kx.store(m.out, at, v)?;
            kx.b.place(skip);
        }
        Ok(())
    })
}

/// The element index of batch `bi`'s matrix in a strided operand: offset + bi * stride0.
fn operand_base(kx: &mut Kx, op: &StridedRef, bi: Reg) -> R<Reg> {
    let offset = kx.size(&op.offset)?;
    let stride = kx.size(&op.strides[0])?;
    let offset = kx.b.def("mov.s64", Kind::B64, &[offset]);
    Ok(kx.b.def("mad.lo.s64", Kind::B64, &[bi.into(), stride, offset.into()]))
}

/// Element (row, col) of an operand when `row < rows` and `col < cols`, else zero.
#[allow(clippy::too_many_arguments)]
fn stage(kx: &mut Kx, op: &StridedRef, base: Reg, row: Reg, rows: Reg, col: Reg, cols: Reg, num: Num) -> R<Reg> {
    let (rs, cs) = (kx.size(&op.strides[1])?, kx.size(&op.strides[2])?);
    let at = kx.b.def("mad.lo.s64", Kind::B64, &[row.into(), rs, base.into()]);
    let at = kx.b.def("mad.lo.s64", Kind::B64, &[col.into(), cs, at.into()]);
    let row_inside = kx.b.def("setp.lt.s64", Kind::Pred, &[row.into(), rows.into()]);
    let col_inside = kx.b.def("setp.lt.s64", Kind::Pred, &[col.into(), cols.into()]);
    let inside = kx.b.def("and.pred", Kind::Pred, &[row_inside.into(), col_inside.into()]);
    let zero = num.constant(&mut kx.b, 0.0, 0);
    kx.load(op.buf, at, Some((inside, zero)))
}
