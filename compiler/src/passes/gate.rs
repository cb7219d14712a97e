//! A squeeze-and-excite gate folded into the pointwise convolution that reads it. The
//! block ends `conv1x1(x * gate[n, c])`: once `hoist` has computed the gate per channel,
//! the product is a pointwise kernel of one multiply that writes a whole scaled copy of
//! `x` for the convolution alone to read. The support library's pointwise convolution
//! scales its input channels itself (`aotc_abi::conv::Conv2d::input_scale`: block by
//! block, in cache), so the kernel goes and the call reads `x` and the gate.
//!
//! CPU only (the support library's call), after `collapse` and `hoist`, which leave the
//! gate's product in this form.

use super::epilogue::{merge_nodes, read_elsewhere};
use crate::ir::expr::{Affine, ExprKind, E};
use crate::ir::{BufId, BufKind, ExternArg, Kernel, Prim, Program};
use crate::lower::tensor::{contiguous_strides, same_size as same};
use crate::lower::Lowered;
use aotc_abi::conv::{
    WeightForm, ARG_BIAS, ARG_GEOMETRY, ARG_INPUT_SCALE, ARG_RESIDUAL, ARG_X, GEOMETRY_LEN, HAS_BIAS, INPUT_SCALE,
    POOL, RESIDUAL, SYMBOL, WEIGHT_FORM,
};
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;
use std::collections::HashSet;

pub fn fold_input_gates(lowered: &mut Lowered) {
    let keep = lowered.caller_visible();
    let prog = &mut lowered.program;
    let mut i = 1;
    while i < prog.kernels.len() {
        if let Some((gated, x, scale)) = gate_before(prog, i, &keep) {
            let nodes = prog.remove_kernel(i - 1);
            i -= 1;
            let Kernel::Extern(call) = &mut prog.kernels[i] else { unreachable!("gate_before checked it") };
            // The gated buffer was also the stand-in for the arguments the call does not
            // read (`lower/aten/conv/native.rs`): now `x` is.
            for arg in call.args.iter_mut() {
                if let ExternArg::Buf(b) | ExternArg::Workspace(b) = arg {
                    if *b == gated {
                        *b = x;
                    }
                }
            }
            call.args[ARG_INPUT_SCALE] = ExternArg::Buf(scale);
            if let ExternArg::Sizes(geometry) = &mut call.args[ARG_GEOMETRY] {
                geometry[INPUT_SCALE] = SymExpr::Int(1);
            }
            merge_nodes(prog, i, nodes);
        }
        i += 1;
    }
}

/// When kernel `i` is a pointwise convolution of one group, a packed weight and an
/// unscaled input, and kernel `i - 1` writes that input as `x * scale` with one factor
/// per image and channel, for it alone: `(input, x, scale)`.
fn gate_before(prog: &Program, i: usize, keep: &HashSet<BufId>) -> Option<(BufId, BufId, BufId)> {
    let Kernel::Extern(call) = &prog.kernels[i] else { return None };
    let ExternArg::Sizes(geometry) = call.args.get(ARG_GEOMETRY)? else { return None };
    let plane = scalable_plane(call.name, geometry)?;
    let ExternArg::Buf(gated) = call.args[ARG_X] else { return None };
    let Kernel::Pointwise { out, ranges, body } = &prog.kernels[i - 1] else { return None };
    let (x, scale) = gated_product(body, ranges, &plane)?;
    let flag = |at: usize| geometry[at].as_int() == Some(1);
    let read_for_real = (flag(HAS_BIAS) && matches!(call.args[ARG_BIAS], ExternArg::Buf(b) if b == gated))
        || (flag(RESIDUAL) && matches!(call.args[ARG_RESIDUAL], ExternArg::Buf(b) if b == gated));
    let region_starts_here = prog.loops.iter().any(|l| [l.cond, l.body, l.end].contains(&i));
    let fits = *out == gated
        && prog.buffers[gated].kind == BufKind::Scratch
        && ![x, scale].contains(&gated)
        && !keep.contains(&gated)
        && !read_for_real
        && !region_starts_here
        && !read_elsewhere(prog, gated, [i - 1, i]);
    fits.then_some((gated, x, scale))
}

/// The positions per plane of a call of the support library's convolution that can scale
/// its input (`aotc_abi::conv::Conv2d::from_list`'s rule): a 1x1 kernel at unit stride
/// without padding, one group, a packed weight, not pooled, not scaled yet. (Entries in
/// `Conv2d::to_list`'s order; heights and widths may be symbolic, the others never are.)
fn scalable_plane(name: &str, geometry: &[SymExpr]) -> Option<SymExpr> {
    let int = |at: usize| geometry.get(at).and_then(|s| s.as_int());
    let ([kh, kw], [sh, sw], [ph, pw], groups) = ([int(5), int(6)], [int(9), int(10)], [int(11), int(12)], int(15));
    let pointwise = [kh, kw, sh, sw, groups].iter().all(|&v| v == Some(1)) && ph == Some(0) && pw == Some(0);
    let packed = [WeightForm::Panels, WeightForm::ColumnPanels].iter().any(|f| int(WEIGHT_FORM) == Some(f.code()));
    let plain = int(POOL) == Some(0) && int(INPUT_SCALE) == Some(0);
    (name == SYMBOL && geometry.len() == GEOMETRY_LEN && pointwise && packed && plain)
        .then(|| SymExpr::mul([geometry[7].clone(), geometry[8].clone()]))
}

/// `(x, scale)` when `body`, over contiguous `ranges` of planes of `plane` elements, is the
/// float32 product (either way round) of `x` at the element it writes and `scale` at that
/// element's plane: the loops end with some whose sizes multiply to `plane`, which
/// `scale`'s index does not step, and the others step it by their stride over `plane`.
fn gated_product(body: &E, ranges: &[SymExpr], plane: &SymExpr) -> Option<(BufId, BufId)> {
    let ExprKind::Binary(Prim::Mul, a, b) = &body.kind else { return None };
    let load = |e: &E| match &e.kind {
        ExprKind::Load { buf, index } if e.dtype == DType::F32 => Some((*buf, index.clone())),
        _ => None,
    };
    let (a, b) = (load(a)?, load(b)?);
    let strides = contiguous_strides(ranges);
    let first = (0..=ranges.len()).find(|&f| same(&SymExpr::product(&ranges[f..]), plane))?;
    // Offset 0, and each loop of more than one iteration stepping as `step` allows.
    let walks = |i: &Affine, step: &dyn Fn(usize, SymExpr) -> bool| {
        i.offset.as_int() == Some(0)
            && i.terms.iter().all(|(v, _)| *v < ranges.len())
            && (0..ranges.len()).all(|v| ranges[v].as_int() == Some(1) || step(v, i.coef(v)))
    };
    let element = |i: &Affine| walks(i, &|v, c| same(&c, &strides[v]));
    let plane_of = |i: &Affine| {
        walks(i, &|v, c| {
            if v >= first {
                c.as_int() == Some(0)
            } else {
                same(&SymExpr::mul([c, plane.clone()]), &strides[v])
            }
        })
    };
    if element(&a.1) && plane_of(&b.1) {
        Some((a.0, b.0))
    } else if element(&b.1) && plane_of(&a.1) {
        Some((b.0, a.0))
    } else {
        None
    }
}
