//! A per-channel map of a pointwise convolution's input folded into the convolution: a
//! squeeze-and-excite gate, `conv1x1(x * gate[n, c])` (once `hoist` has computed the gate
//! per channel), or DenseNet's pre-activation, `conv1x1(relu(x * scale[c] + shift[c]))`
//! (an inference batch norm, its factors computed per channel by kernels of their own).
//! Either is a pointwise kernel that writes a whole transformed copy of `x` for the
//! convolution alone to read. The support library's pointwise convolution transforms its
//! input channels itself (`aotc_abi::conv::Conv2d::input`: block by block, in cache), so
//! the kernel goes and the call reads `x` and the factors.
//!
//! CPU only (the support library's call), after `collapse` and `hoist`, which leave the
//! gate's product in this form.

use super::epilogue::{merge_nodes, read_elsewhere};
use super::prepack;
use crate::ir::expr::{Affine, ExprKind, E};
use crate::ir::{BufId, BufKind, ExternArg, Kernel, Prim, Program};
use crate::lower::tensor::{contiguous_strides, same_size as same};
use crate::lower::Lowered;
use aotc_abi::conv::{
    transformed_positions_as_rows, InputTransform, WeightForm, ARG_BIAS, ARG_GEOMETRY, ARG_INPUT_SCALE,
    ARG_INPUT_SHIFT, ARG_RESIDUAL, ARG_X, GEOMETRY_LEN, HAS_BIAS, INPUT_TRANSFORM, POOL, RESIDUAL, SYMBOL, WEIGHT_FORM,
};
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;
use std::collections::HashSet;

pub fn fold_input_maps(lowered: &mut Lowered) {
    let keep = lowered.caller_visible();
    let prog = &mut lowered.program;
    let mut i = 1;
    while i < prog.kernels.len() {
        if let Some((gated, map)) = map_before(prog, i, &keep) {
            let nodes = prog.remove_kernel(i - 1);
            i -= 1;
            let Kernel::Extern(call) = &mut prog.kernels[i] else { unreachable!("map_before checked it") };
            // The transformed buffer was also the stand-in for the arguments the call does
            // not read (`lower/aten/conv/native.rs`): now `x` is.
            for arg in call.args.iter_mut() {
                if let ExternArg::Buf(b) | ExternArg::Workspace(b) = arg {
                    if *b == gated {
                        *b = map.x;
                    }
                }
            }
            call.args[ARG_INPUT_SCALE] = ExternArg::Buf(map.scale);
            if let Some(shift) = map.shift {
                call.args[ARG_INPUT_SHIFT] = ExternArg::Buf(shift);
            }
            if let ExternArg::Sizes(geometry) = &mut call.args[ARG_GEOMETRY] {
                geometry[INPUT_TRANSFORM] = SymExpr::Int(map.transform.code());
            }
            if map.transform == InputTransform::ScaleShiftRelu {
                transpose_for_few_positions(prog, i);
            }
            merge_nodes(prog, i, nodes);
        }
        i += 1;
    }
}

/// After a batch norm and ReLU moves into pointwise convolution `i`, the transposed GEMM
/// runs it faster over planes of few positions (`aotc_abi::conv::transformed_positions_as_rows`);
/// `prepack` chose the weight's form before the transform was known, so it is repacked.
fn transpose_for_few_positions(prog: &mut Program, i: usize) {
    let Kernel::Extern(call) = &prog.kernels[i] else { return };
    let ExternArg::Sizes(geometry) = &call.args[ARG_GEOMETRY] else { return };
    let positions = geometry[7].as_int().zip(geometry[8].as_int()).map(|(h, w)| h.saturating_mul(w));
    if positions.and_then(|n| usize::try_from(n).ok()).is_some_and(transformed_positions_as_rows) {
        prepack::repack_conv_weight_as_columns(prog, i);
    }
}

/// An input transform found: what it computes, on which buffer, with which factors.
struct ChannelMap {
    x: BufId,
    transform: InputTransform,
    scale: BufId,
    shift: Option<BufId>,
}

/// When kernel `i` is a pointwise convolution of one group, a packed weight and an
/// untransformed input, and kernel `i - 1` writes that input, for it alone, as one of the
/// [`InputTransform`]s of a buffer `x`: `(input, the map)`.
fn map_before(prog: &Program, i: usize, keep: &HashSet<BufId>) -> Option<(BufId, ChannelMap)> {
    let Kernel::Extern(call) = &prog.kernels[i] else { return None };
    let ExternArg::Sizes(geometry) = call.args.get(ARG_GEOMETRY)? else { return None };
    let (plane, channels) = transformable_input(call.name, geometry)?;
    let ExternArg::Buf(gated) = call.args[ARG_X] else { return None };
    let Kernel::Pointwise { out, ranges, body } = &prog.kernels[i - 1] else { return None };
    let map = channel_map(body, &Walk::new(ranges, &plane, channels)?)?;
    let read = [Some(map.x), Some(map.scale), map.shift];
    let flag = |at: usize| geometry[at].as_int() == Some(1);
    let read_for_real = (flag(HAS_BIAS) && matches!(call.args[ARG_BIAS], ExternArg::Buf(b) if b == gated))
        || (flag(RESIDUAL) && matches!(call.args[ARG_RESIDUAL], ExternArg::Buf(b) if b == gated));
    let region_starts_here = prog.loops.iter().any(|l| [l.cond, l.body, l.end].contains(&i));
    let fits = *out == gated
        && prog.buffers[gated].kind == BufKind::Scratch
        && !read.contains(&Some(gated))
        && !keep.contains(&gated)
        && !read_for_real
        && !region_starts_here
        && !read_elsewhere(prog, gated, [i - 1, i]);
    fits.then_some((gated, map))
}

/// The positions per plane and the channels of a call of the support library's
/// convolution that can transform its input (`aotc_abi::conv::Conv2d::from_list`'s rule):
/// a 1x1 kernel at unit stride without padding, one group, a packed weight, not pooled,
/// not transformed yet. (Entries in `Conv2d::to_list`'s order; heights and widths may be
/// symbolic, the others never are.)
fn transformable_input(name: &str, geometry: &[SymExpr]) -> Option<(SymExpr, usize)> {
    let int = |at: usize| geometry.get(at).and_then(|s| s.as_int());
    let ([kh, kw], [sh, sw], [ph, pw], groups) = ([int(5), int(6)], [int(9), int(10)], [int(11), int(12)], int(15));
    let pointwise = [kh, kw, sh, sw, groups].iter().all(|&v| v == Some(1)) && ph == Some(0) && pw == Some(0);
    let packed = [WeightForm::Panels, WeightForm::ColumnPanels].iter().any(|f| int(WEIGHT_FORM) == Some(f.code()));
    let plain = int(POOL) == Some(0) && int(INPUT_TRANSFORM) == Some(InputTransform::None.code());
    let channels = usize::try_from(int(1)?).ok()?;
    (name == SYMBOL && geometry.len() == GEOMETRY_LEN && pointwise && packed && plain)
        .then(|| (SymExpr::mul([geometry[7].clone(), geometry[8].clone()]), channels))
}

/// The loops of a pointwise kernel over the convolution's `[N, C, plane]` input:
/// contiguous `ranges` and their strides, the loops from `first` on multiplying to
/// `plane`.
struct Walk<'a> {
    ranges: &'a [SymExpr],
    strides: Vec<SymExpr>,
    first: usize,
    plane: &'a SymExpr,
    channels: usize,
}

/// Which element of the input, or of a table beside it, an index reads.
#[derive(Clone, Copy)]
enum Reads {
    /// The element written.
    Element,
    /// Its image and channel's entry of an `[N, C]` table.
    ImageChannel,
    /// Its channel's entry of a `[C]` table.
    Channel,
}

impl<'a> Walk<'a> {
    /// None unless some last loops of `ranges` multiply to `plane`.
    fn new(ranges: &'a [SymExpr], plane: &'a SymExpr, channels: usize) -> Option<Walk<'a>> {
        let first = (0..=ranges.len()).find(|&f| same(&SymExpr::product(&ranges[f..]), plane))?;
        Some(Walk { ranges, strides: contiguous_strides(ranges), first, plane, channels })
    }

    /// Whether `index` reads as `how` says: offset 0, and each loop of more than one
    /// iteration stepping it as the element, its `[N, C]` entry or its `[C]` entry step.
    /// (With one image, the last two read alike.)
    fn reads(&self, index: &Affine, how: Reads) -> bool {
        let (ranges, strides, first) = (self.ranges, &self.strides, self.first);
        let walks = |step: &dyn Fn(usize, SymExpr) -> bool| {
            index.offset.as_int() == Some(0)
                && index.terms.iter().all(|(v, _)| *v < ranges.len())
                && (0..ranges.len()).all(|v| ranges[v].as_int() == Some(1) || step(v, index.coef(v)))
        };
        // Loop v < first steps the flat (image, channel) by `q`, the product of the loops
        // between it and the plane: inside one image's channels it steps the channel by
        // as much; a loop over whole images leaves the channel; none may straddle.
        let channel_step = |v: usize| -> Option<i64> {
            let (q, r) = (SymExpr::product(&ranges[v + 1..first]).as_int()?, ranges[v].as_int()?);
            let c = self.channels as i64;
            if q.checked_mul(r)? <= c && c % (q * r) == 0 {
                Some(q)
            } else {
                (q % c == 0).then_some(0)
            }
        };
        walks(&|v, c| match how {
            Reads::Element => same(&c, &strides[v]),
            // A table entry is the same across the plane.
            _ if v >= first => c.as_int() == Some(0),
            Reads::ImageChannel => same(&SymExpr::mul([c, self.plane.clone()]), &strides[v]),
            Reads::Channel => channel_step(v).is_some_and(|q| c.as_int() == Some(q)),
        })
    }
}

/// The input transform `body` computes over `walk`, when it is one: the float32 product
/// (either way round) of `x` at the element it writes and a factor per image and channel;
/// or `max(x * scale + shift, 0)` (the product and the sum either way round) with a scale
/// and shift per channel.
fn channel_map(body: &E, walk: &Walk) -> Option<ChannelMap> {
    // The buffer `e` loads, when it reads as `how` says.
    let load = |e: &E, how: Reads| match &e.kind {
        ExprKind::Load { buf, index } if e.dtype == DType::F32 && walk.reads(index, how) => Some(*buf),
        _ => None,
    };
    // `(x, table)` when one of `a` and `b` reads the element and the other reads as `how`.
    let either_way = |a: &E, b: &E, how: Reads| {
        Option::or(load(a, Reads::Element).zip(load(b, how)), load(b, Reads::Element).zip(load(a, how)))
    };
    let binary = |e: &E, prim: Prim| match &e.kind {
        ExprKind::Binary(p, a, b) if *p == prim => Some((a.clone(), b.clone())),
        _ => None,
    };
    if let Some((a, b)) = binary(body, Prim::Mul) {
        let (x, scale) = either_way(&a, &b, Reads::ImageChannel)?;
        return Some(ChannelMap { x, transform: InputTransform::Scale, scale, shift: None });
    }
    let (a, b) = binary(body, Prim::Max)?;
    let (sum, z) = match (&a.kind, &b.kind) {
        (_, ExprKind::Const(z)) => (a.clone(), *z),
        (ExprKind::Const(z), _) => (b.clone(), *z),
        _ => return None,
    };
    let (a, b) = binary(&sum, Prim::Add)?;
    let (product, shift) = if matches!(b.kind, ExprKind::Load { .. }) { (a, b) } else { (b, a) };
    let shift = load(&shift, Reads::Channel)?;
    let (p, q) = binary(&product, Prim::Mul)?;
    let (x, scale) = either_way(&p, &q, Reads::Channel)?;
    (z.as_f64() == 0.0).then_some(ChannelMap {
        x,
        transform: InputTransform::ScaleShiftRelu,
        scale,
        shift: Some(shift),
    })
}
