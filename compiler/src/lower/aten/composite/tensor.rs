//! Tensor manipulations: conversions, new tensors, reshapes and splits, stacking,
//! triangles, differences, masked fills, windows, and the operator aliases (`min.other`,
//! `__and__.Tensor`, `where.Scalar...`) of Core ATen operators.

use super::{converted, delegate, same, R};
use crate::frontend::schema::Argument;
use crate::ir::expr::{binary, cast, constant, index_value, select, Affine};
use crate::ir::{Prim, Scalar};
use crate::lower::args::Args;
use crate::lower::aten::index::concat;
use crate::lower::aten::promote::promote_types;
use crate::lower::aten::registry::LowerFn;
use crate::lower::checks::show;
use crate::lower::tensor::{norm_dim, vars, TensorValue};
use crate::lower::Lowerer;
use aotc_abi::manifest::GuardOp;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

pub const OPS: &[(&str, LowerFn)] = &[
    ("to.dtype", to),
    ("to.device", to),
    ("to.dtype_layout", to),
    ("type_as.default", type_as),
    ("contiguous.default", |lw, a| Ok(vec![a.tensor(lw, "self")?])),
    ("new_zeros.default", |lw, a| new_filled(lw, a, Some(Scalar::I(0)))),
    ("new_ones.default", |lw, a| new_filled(lw, a, Some(Scalar::I(1)))),
    ("new_empty.default", |lw, a| new_filled(lw, a, Some(Scalar::I(0)))),
    ("new_full.default", |lw, a| new_filled(lw, a, None)),
    ("zeros.default", |lw, a| filled(lw, a, Scalar::I(0))),
    ("ones.default", |lw, a| filled(lw, a, Scalar::I(1))),
    ("flatten.using_ints", flatten),
    ("unflatten.int", unflatten),
    ("chunk.default", chunk),
    ("stack.default", stack),
    ("tril.default", |lw, a| triangle(lw, a, Prim::Le)),
    ("triu.default", |lw, a| triangle(lw, a, Prim::Ge)),
    ("diff.default", diff),
    ("masked_fill.Scalar", masked_fill),
    ("masked_fill.Tensor", masked_fill),
    ("repeat_interleave.self_int", repeat_interleave),
    ("unfold.default", unfold),
    ("roll.default", roll),
    ("min.other", |lw, a| alias(lw, a, "minimum.default", &["self", "other"])),
    ("max.other", |lw, a| alias(lw, a, "maximum.default", &["self", "other"])),
    ("where.ScalarOther", |lw, a| alias(lw, a, "where.self", &["condition", "self", "other"])),
    ("where.ScalarSelf", |lw, a| alias(lw, a, "where.self", &["condition", "self", "other"])),
    ("where.Scalar", |lw, a| alias(lw, a, "where.self", &["condition", "self", "other"])),
    ("__and__.Tensor", |lw, a| alias(lw, a, "bitwise_and.Tensor", &["self", "other"])),
    ("__or__.Tensor", |lw, a| alias(lw, a, "bitwise_or.Tensor", &["self", "other"])),
    ("__xor__.Tensor", |lw, a| alias(lw, a, "bitwise_xor.Tensor", &["self", "other"])),
];

/// An operator that is another one under another name, with the same arguments.
fn alias(lw: &mut Lowerer, a: &Args, op: &str, names: &[&str]) -> R {
    delegate(lw, a, op, same(a, names))
}

/// to.dtype, to.device, to.dtype_layout: the values converted to `dtype`. The device is
/// the one aotc compiles for, and the layout and memory format do not change values.
fn to(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let d = a.opt_dtype("dtype")?.unwrap_or(x.dtype);
    Ok(vec![converted(&x, d)])
}

fn type_as(lw: &mut Lowerer, a: &Args) -> R {
    let (x, other) = (a.tensor(lw, "self")?, a.tensor(lw, "other")?);
    Ok(vec![converted(&x, other.dtype)])
}

/// new_zeros/new_ones/new_empty (`value`) and new_full (`fill_value`): `size` filled, in
/// the dtype of `self` unless `dtype` says otherwise. Empty memory is zeros here.
fn new_filled(lw: &mut Lowerer, a: &Args, value: Option<Scalar>) -> R {
    let x = a.tensor(lw, "self")?;
    let value = match value {
        Some(v) => v,
        None => a.scalar("fill_value")?,
    };
    let d = a.opt_dtype("dtype")?.unwrap_or(x.dtype);
    Ok(vec![TensorValue::lazy(d, a.sym_ints(lw, "size")?, constant(value, d))])
}

/// zeros/ones: float32 unless `dtype` says otherwise.
fn filled(lw: &mut Lowerer, a: &Args, value: Scalar) -> R {
    let d = a.opt_dtype("dtype")?.unwrap_or(DType::F32);
    Ok(vec![TensorValue::lazy(d, a.sym_ints(lw, "size")?, constant(value, d))])
}

/// Dimensions `start_dim..=end_dim` merged into one (a 0-dim tensor becomes [1]).
fn flatten(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let name = a.node_name();
    if x.rank() == 0 {
        return Ok(vec![lw.reshape(&x, &[SymExpr::Int(1)], &name)]);
    }
    let (start, end) = (norm_dim(a.int_or("start_dim", 0)?, x.rank())?, norm_dim(a.int_or("end_dim", -1)?, x.rank())?);
    if start > end {
        return Err(format!("flatten's start_dim {start} comes after its end_dim {end}"));
    }
    let merged = SymExpr::product(x.sizes[start..=end].iter());
    let sizes: Vec<SymExpr> =
        x.sizes[..start].iter().cloned().chain([merged]).chain(x.sizes[end + 1..].iter().cloned()).collect();
    Ok(vec![lw.reshape(&x, &sizes, &name)])
}

/// Dimension `dim` split into `sizes` (one of them may be -1: what the others leave).
fn unflatten(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let dim = norm_dim(a.int("dim")?, x.rank())?;
    let mut parts = a.sym_ints(lw, "sizes")?;
    let inferred: Vec<usize> = (0..parts.len()).filter(|&i| parts[i] == SymExpr::Int(-1)).collect();
    let known = SymExpr::product(parts.iter().filter(|s| **s != SymExpr::Int(-1)));
    match inferred.as_slice() {
        [] => {}
        [i] => {
            lw.require(SymExpr::Int(1), GuardOp::Le, known.clone(), "the sizes other than -1 are not zero")?;
            parts[*i] = SymExpr::floor_div(x.sizes[dim].clone(), known);
        }
        _ => return Err(format!("unflatten's sizes [{}] have more than one -1", show(&parts))),
    }
    lw.require(
        SymExpr::product(parts.iter()),
        GuardOp::Eq,
        x.sizes[dim].clone(),
        "unflatten's sizes multiply to the size of the dimension",
    )?;
    let sizes: Vec<SymExpr> =
        x.sizes[..dim].iter().cloned().chain(parts).chain(x.sizes[dim + 1..].iter().cloned()).collect();
    Ok(vec![lw.reshape(&x, &sizes, &a.node_name())])
}

/// `split.Tensor` into pieces of `ceil(size / chunks)`.
fn chunk(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let dim = norm_dim(a.int_or("dim", 0)?, x.rank())?;
    let n = x.sizes[dim].as_int().ok_or("chunk of a dynamic dimension is not supported")?;
    let chunks = a.int("chunks")?;
    if chunks <= 0 {
        return Err(format!("chunks must be positive, got {chunks}"));
    }
    let piece = ((n + chunks - 1) / chunks).max(1);
    let args = vec![
        ("self", a.get("self").cloned().ok_or("missing argument 'self'")?),
        ("split_size", Argument::Int(piece)),
        ("dim", Argument::Int(dim as i64)),
    ];
    delegate(lw, a, "split.Tensor", args)
}

/// The tensors (one shape) along a new dimension `dim`, promoted to one dtype.
fn stack(lw: &mut Lowerer, a: &Args) -> R {
    let ts = a.tensors(lw, "tensors")?;
    let Some(first) = ts.first() else { return Err("stack needs at least one tensor".into()) };
    let dim = norm_dim(a.int_or("dim", 0)?, first.rank() + 1)?;
    for t in &ts[1..] {
        if t.rank() != first.rank() {
            return Err(format!(
                "stack needs tensors of one shape, got [{}] and [{}]",
                show(&first.sizes),
                show(&t.sizes)
            ));
        }
        for (s, f) in t.sizes.iter().zip(&first.sizes) {
            lw.require(s.clone(), GuardOp::Eq, f.clone(), "the stacked tensors have one shape")?;
        }
    }
    let d = ts.iter().map(|t| t.dtype).reduce(promote_types).unwrap_or(first.dtype);
    let mut sizes = first.sizes.clone();
    sizes.insert(dim, SymExpr::Int(ts.len() as i64));
    let idx = vars(sizes.len());
    let inner: Vec<Affine> = idx.iter().enumerate().filter(|(i, _)| *i != dim).map(|(_, v)| v.clone()).collect();
    let position = index_value(idx[dim].clone());
    let last = cast(ts[ts.len() - 1].load(&inner), d);
    let body = ts[..ts.len() - 1].iter().enumerate().rev().fold(last, |rest, (i, t)| {
        let here = binary(Prim::Eq, position.clone(), constant(Scalar::I(i as i64), DType::I64));
        select(here, cast(t.load(&inner), d), rest)
    });
    Ok(vec![TensorValue::lazy(d, sizes, body)])
}

/// tril (`keep` Le) / triu (Ge): the elements whose `column - row` compares so with
/// `diagonal` in the last two dimensions, zeros elsewhere.
fn triangle(lw: &mut Lowerer, a: &Args, keep: Prim) -> R {
    let x = a.tensor(lw, "self")?;
    let rank = x.rank();
    if rank < 2 {
        return Err(format!("tril/triu need a tensor of rank >= 2, got rank {rank}"));
    }
    let diagonal = match a.get("diagonal") {
        None => SymExpr::Int(0),
        Some(_) => a.sym_int(lw, "diagonal")?,
    };
    let idx = vars(rank);
    let offset = idx[rank - 1].plus(&idx[rank - 2].scale(&SymExpr::Int(-1)));
    let kept = binary(keep, index_value(offset), index_value(Affine::constant(diagonal)));
    let body = select(kept, x.load(&idx), constant(Scalar::I(0), x.dtype));
    Ok(vec![TensorValue::lazy(x.dtype, x.sizes.clone(), body)])
}

/// The `n`-th forward difference along `dim` (`!=` for bool) of `prepend`, `self` and
/// `append` concatenated along `dim`.
fn diff(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let n = a.int_or("n", 1)?;
    if n < 0 || x.rank() == 0 {
        return Err(format!("diff needs n >= 0 and a tensor of rank >= 1, got n = {n} and rank {}", x.rank()));
    }
    let dim = norm_dim(a.int_or("dim", -1)?, x.rank())?;
    let name = a.node_name();
    let (prepend, append) = (a.opt_tensor(lw, "prepend")?, a.opt_tensor(lw, "append")?);
    let mut x = if prepend.is_some() || append.is_some() {
        let parts: Vec<TensorValue> = prepend.into_iter().chain([x]).chain(append).collect();
        concat(lw, &parts, dim as i64, &format!("{name}.input"))?
    } else {
        x
    };
    let op = if x.dtype == DType::Bool { Prim::Ne } else { Prim::Sub };
    for step in 0..n {
        let len = SymExpr::max(SymExpr::add([x.sizes[dim].clone(), SymExpr::Int(-1)]), SymExpr::Int(0));
        let (next, prev) = (x.slice(dim, SymExpr::Int(1), len.clone(), 1), x.slice(dim, SymExpr::Int(0), len, 1));
        let idx = vars(x.rank());
        let body = binary(op, next.load(&idx), prev.load(&idx));
        let difference = TensorValue::lazy(x.dtype, next.sizes.clone(), body);
        x = if step + 1 < n { lw.realize(&difference, &format!("{name}.{step}")) } else { difference };
    }
    Ok(vec![x])
}

/// `value` (a number or a 0-dim tensor, in the dtype of `self`) where the boolean mask
/// (broadcast to `self`) is true.
fn masked_fill(lw: &mut Lowerer, a: &Args) -> R {
    let (x, mask) = (a.tensor(lw, "self")?, a.tensor(lw, "mask")?);
    if mask.dtype != DType::Bool {
        return Err(format!("masked_fill needs a bool mask, got {}", mask.dtype));
    }
    let value = match a.get("value") {
        Some(Argument::Tensor(_)) => {
            let v = a.tensor(lw, "value")?;
            if v.rank() != 0 {
                return Err(format!("masked_fill's value tensor must be 0-dim, got [{}]", show(&v.sizes)));
            }
            cast(v.load(&[]), x.dtype)
        }
        _ => constant(a.scalar("value")?, x.dtype),
    };
    let idx = vars(x.rank());
    let body = select(mask.expand(&x.sizes)?.load(&idx), value, x.load(&idx));
    Ok(vec![TensorValue::lazy(x.dtype, x.sizes.clone(), body)])
}

/// Each element `repeats` times in a row along `dim` (of the flattened tensor when
/// `dim` is None): a broadcast along a new dimension after `dim`, merged into it.
fn repeat_interleave(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let repeats = a.sym_int(lw, "repeats")?;
    lw.require(SymExpr::Int(0), GuardOp::Le, repeats.clone(), "repeats is not negative")?;
    let name = a.node_name();
    let (x, dim) = match a.opt_int("dim")? {
        Some(d) => {
            let dim = norm_dim(d, x.rank())?;
            (x, dim)
        }
        None => (lw.reshape(&x, &[SymExpr::product(x.sizes.iter())], &format!("{name}.flat")), 0),
    };
    let mut wide = x.sizes.clone();
    wide.insert(dim + 1, repeats.clone());
    let expanded = x.unsqueeze(dim + 1).expand(&wide)?;
    let mut sizes = x.sizes.clone();
    sizes[dim] = SymExpr::mul([x.sizes[dim].clone(), repeats]);
    Ok(vec![lw.reshape(&expanded, &sizes, &name)])
}

/// Tensor.unfold: the windows of `size` elements every `step` along `dimension`, as a
/// view with the window's elements in a new last dimension.
fn unfold(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let dim = norm_dim(a.int("dimension")?, x.rank())?;
    let (size, step) = (a.int("size")?, a.int("step")?);
    if size < 0 || step <= 0 {
        return Err(format!("unfold needs size >= 0 and step > 0, got size {size} and step {step}"));
    }
    let length = if x.rank() == 0 { SymExpr::Int(1) } else { x.sizes[dim].clone() };
    lw.require(SymExpr::Int(size), GuardOp::Le, length.clone(), "the window fits in the dimension")?;
    let count = SymExpr::add([
        SymExpr::floor_div(SymExpr::add([length, SymExpr::Int(-size)]), SymExpr::Int(step)),
        SymExpr::Int(1),
    ]);
    if x.rank() == 0 {
        return Ok(vec![x.unsqueeze(0)]);
    }
    let mut sizes = x.sizes.clone();
    sizes[dim] = count;
    sizes.push(SymExpr::Int(size));
    let last = sizes.len() - 1;
    Ok(vec![x.remap(sizes, &|v| {
        let mut old = v[..last].to_vec();
        old[dim] = v[dim].scale(&SymExpr::Int(step)).plus(&v[last]);
        old
    })])
}

/// Each of `dims` rotated by its shift (the flattened tensor when `dims` is empty): the
/// last `shift` elements first, as two slices concatenated.
fn roll(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let shifts = a.sym_ints(lw, "shifts")?;
    let shifts: Vec<i64> = shifts
        .iter()
        .map(|s| s.as_int().ok_or_else(|| format!("roll needs static shifts, got {s}")))
        .collect::<Result<_, _>>()?;
    let dims = a.opt_ints("dims")?.unwrap_or_default();
    let name = a.node_name();
    if dims.is_empty() {
        let [shift] = shifts[..] else { return Err(format!("roll without dims takes one shift, got {shifts:?}")) };
        let flat = lw.reshape(&x, &[SymExpr::product(x.sizes.iter())], &format!("{name}.flat"));
        let rolled = roll_dim(lw, &flat, 0, shift, &name)?;
        return Ok(vec![lw.reshape(&rolled, &x.sizes, &name)]);
    }
    if dims.len() != shifts.len() {
        return Err(format!("roll got {} shifts for {} dims", shifts.len(), dims.len()));
    }
    let mut out = x;
    for (d, shift) in dims.into_iter().zip(shifts) {
        let dim = norm_dim(d, out.rank())?;
        out = roll_dim(lw, &out, dim, shift, &name)?;
    }
    Ok(vec![out])
}

/// `x` rotated by `shift` along `dim` (of a static size).
fn roll_dim(lw: &mut Lowerer, x: &TensorValue, dim: usize, shift: i64, name: &str) -> Result<TensorValue, String> {
    let n = x.sizes[dim]
        .as_int()
        .ok_or_else(|| format!("roll of a dynamic dimension ({}) is not supported", x.sizes[dim]))?;
    let shift = if n == 0 { 0 } else { shift.rem_euclid(n) };
    if shift == 0 {
        return Ok(x.clone());
    }
    let tail = x.slice(dim, SymExpr::Int(n - shift), SymExpr::Int(shift), 1);
    let head = x.slice(dim, SymExpr::Int(0), SymExpr::Int(n - shift), 1);
    concat(lw, &[tail, head], dim as i64, name)
}
