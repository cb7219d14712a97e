//! Matmul kernels: a loop over the batch calling the GEMM of the support library (the
//! one that reads B in packed panels when the compiler packed it).

use super::kernel::{Cx, R};
use crate::ir::Matmul;
use aotc_abi::gemm::Activation;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;
use cranelift_codegen::ir::{types, AbiParam, InstBuilder, Value};
use cranelift_module::{Linkage, Module};

pub fn emit(cx: &mut Cx, m: &Matmul) -> R<()> {
    if m.packed_b {
        return emit_packed_b(cx, m);
    }
    if m.bias.is_some() || m.activation != Activation::None {
        return Err("a fused output pass needs the packed-B GEMM".into());
    }
    let (name, fty) = match m.dtype {
        DType::F32 => ("__aotc_sgemm", types::F32),
        DType::F64 => ("__aotc_dgemm", types::F64),
        d => return Err(format!("no GEMM for {d}")),
    };
    // (m, k, n, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc)
    let mut sig = cx.module.make_signature();
    let i = AbiParam::new(types::I64);
    let f = AbiParam::new(fty);
    sig.params.extend([i, i, i, f, i, i, i, i, i, i, f, i, i, i]);
    let id = cx.module.declare_function(name, Linkage::Import, &sig).map_err(|e| e.to_string())?;
    let gemm = cx.module.declare_func_in_func(id, cx.b.func);

    let (mm, nn, kk) = (cx.sym(&m.m), cx.sym(&m.n), cx.sym(&m.k));
    let alpha = float(cx, m.alpha, fty);
    let beta = float(cx, if m.accumulate { 1.0 } else { 0.0 }, fty);
    let (a_off, b_off) = (cx.sym(&m.a.offset), cx.sym(&m.b.offset));
    let (a_bs, a_rs, a_cs) = (cx.sym(&m.a.strides[0]), cx.sym(&m.a.strides[1]), cx.sym(&m.a.strides[2]));
    let (b_bs, b_rs, b_cs) = (cx.sym(&m.b.strides[0]), cx.sym(&m.b.strides[1]), cx.sym(&m.b.strides[2]));
    let c_bs = cx.sym(&SymExpr::mul([m.m.clone(), m.n.clone()]));
    let one = cx.b.ins().iconst(types::I64, 1);
    let (first, end) = cx.loop_bounds(0, &m.batch);
    cx.for_loop(first, end, 1, &mut |cx, bi| {
        let at = |cx: &mut Cx, off: Value, stride: Value| {
            let s = cx.b.ins().imul(bi, stride);
            cx.b.ins().iadd(off, s)
        };
        let ai = at(cx, a_off, a_bs);
        let bi_ = at(cx, b_off, b_bs);
        let ci = cx.b.ins().imul(bi, c_bs);
        let (pa, pb, pc) = (cx.elem_addr(m.a.buf, ai), cx.elem_addr(m.b.buf, bi_), cx.elem_addr(m.out, ci));
        cx.b.ins().call(gemm, &[mm, kk, nn, alpha, pa, a_rs, a_cs, pb, b_rs, b_cs, beta, pc, nn, one]);
        Ok(())
    })?;
    Ok(())
}

/// `__aotc_sgemm_packed_b(m, k, n, alpha, a, rsa, csa, b, beta, c, rsc, csc, bias,
/// activation)` per batch, every batch reading the same packed B and bias.
fn emit_packed_b(cx: &mut Cx, m: &Matmul) -> R<()> {
    let mut sig = cx.module.make_signature();
    let (i, f) = (AbiParam::new(types::I64), AbiParam::new(types::F32));
    sig.params.extend([i, i, i, f, i, i, i, i, f, i, i, i, i, i]);
    let id = cx
        .module
        .declare_function(aotc_abi::gemm::PACKED_SGEMM_SYMBOL, Linkage::Import, &sig)
        .map_err(|e| e.to_string())?;
    let gemm = cx.module.declare_func_in_func(id, cx.b.func);
    let (mm, nn, kk) = (cx.sym(&m.m), cx.sym(&m.n), cx.sym(&m.k));
    let alpha = float(cx, m.alpha, types::F32);
    let beta = float(cx, if m.accumulate { 1.0 } else { 0.0 }, types::F32);
    let a_off = cx.sym(&m.a.offset);
    let (a_bs, a_rs, a_cs) = (cx.sym(&m.a.strides[0]), cx.sym(&m.a.strides[1]), cx.sym(&m.a.strides[2]));
    let c_bs = cx.sym(&SymExpr::mul([m.m.clone(), m.n.clone()]));
    let one = cx.b.ins().iconst(types::I64, 1);
    let zero = cx.b.ins().iconst(types::I64, 0);
    let pb = cx.elem_addr(m.b.buf, zero);
    let bias = match m.bias {
        Some(buf) => cx.elem_addr(buf, zero),
        None => zero,
    };
    let activation = cx.b.ins().iconst(types::I64, m.activation.code());
    let (first, end) = cx.loop_bounds(0, &m.batch);
    cx.for_loop(first, end, 1, &mut |cx, bi| {
        let s = cx.b.ins().imul(bi, a_bs);
        let ai = cx.b.ins().iadd(a_off, s);
        let ci = cx.b.ins().imul(bi, c_bs);
        let (pa, pc) = (cx.elem_addr(m.a.buf, ai), cx.elem_addr(m.out, ci));
        cx.b.ins().call(gemm, &[mm, kk, nn, alpha, pa, a_rs, a_cs, pb, beta, pc, nn, one, bias, activation]);
        Ok(())
    })?;
    Ok(())
}

fn float(cx: &mut Cx, v: f64, ty: cranelift_codegen::ir::Type) -> Value {
    if ty == types::F32 {
        cx.b.ins().f32const(v as f32)
    } else {
        cx.b.ins().f64const(v)
    }
}
