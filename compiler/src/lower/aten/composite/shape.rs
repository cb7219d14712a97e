//! Shape operators of the default IR outside Core ATen: `unbind`, `expand_as`,
//! `reshape_as`/`view_as`, `swapaxes`, `numpy_T`, `meshgrid`, `empty_like` and `pad`,
//! as views (no copy) or onto the Core lowerings they decompose to.

use super::{delegate, renamed, same};
use crate::frontend::schema::Argument;
use crate::ir::expr::Affine;
use crate::lower::args::Args;
use crate::lower::aten::registry::LowerFn;
use crate::lower::tensor::{norm_dim, TensorValue};
use crate::lower::Lowerer;
use aotc_abi::sym::SymExpr;

type R = Result<Vec<TensorValue>, String>;

pub const OPS: &[(&str, LowerFn)] = &[
    ("unbind.int", unbind),
    ("expand_as.default", |lw, a| Ok(vec![a.tensor(lw, "self")?.expand(&a.tensor(lw, "other")?.sizes)?])),
    ("reshape_as.default", reshape_as),
    ("view_as.default", reshape_as),
    ("swapaxes.default", |lw, a| {
        let args = [renamed(a, "self", "self"), renamed(a, "axis0", "dim0"), renamed(a, "axis1", "dim1")];
        delegate(lw, a, "transpose.int", args.into_iter().flatten().collect())
    }),
    ("numpy_T.default", |lw, a| {
        let x = a.tensor(lw, "self")?;
        Ok(vec![x.permute(&(0..x.rank()).rev().collect::<Vec<_>>())?])
    }),
    ("meshgrid.default", meshgrid),
    ("meshgrid.indexing", meshgrid),
    ("empty_like.default", |lw, a| {
        let names = ["self", "dtype", "layout", "device", "pin_memory", "memory_format"];
        delegate(lw, a, "zeros_like.default", same(a, &names))
    }),
    ("pad.default", pad),
];

/// The slices of `self` along `dim`, which must be static.
fn unbind(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let dim = norm_dim(a.int_or("dim", 0)?, x.rank())?;
    let n = x.sizes[dim].as_int().ok_or("unbind of a dynamic dimension is not supported")?;
    Ok((0..n).map(|i| x.select(dim, SymExpr::Int(i))).collect())
}

fn reshape_as(lw: &mut Lowerer, a: &Args) -> R {
    let (x, other) = (a.tensor(lw, "self")?, a.tensor(lw, "other")?);
    Ok(vec![lw.reshape(&x, &other.sizes, &a.node_name())])
}

/// Each 1-D input spread along its own dimension of the grid ("ij"), the first two
/// swapped for "xy" (numpy's order).
fn meshgrid(lw: &mut Lowerer, a: &Args) -> R {
    let all = a.tensors(lw, "tensors")?;
    if let Some(t) = all.iter().find(|t| t.rank() > 1) {
        return Err(format!("meshgrid takes 0-d or 1-D tensors, got rank {}", t.rank()));
    }
    let indexing = a.string_or("indexing", "ij")?;
    let mut position: Vec<usize> = (0..all.len()).collect();
    match indexing.as_str() {
        "ij" => {}
        "xy" if all.len() >= 2 => position.swap(0, 1),
        "xy" => {}
        other => return Err(format!("meshgrid indexing must be \"ij\" or \"xy\", got \"{other}\"")),
    }
    let length = |t: &TensorValue| t.sizes.first().cloned().unwrap_or(SymExpr::Int(1));
    let mut sizes = vec![SymExpr::Int(1); all.len()];
    for (t, &p) in all.iter().zip(&position) {
        sizes[p] = length(t);
    }
    Ok(all
        .iter()
        .zip(&position)
        .map(|(t, &p)| {
            let rank = t.rank();
            t.remap(sizes.clone(), &|v: &[Affine]| if rank == 1 { vec![v[p].clone()] } else { vec![] })
        })
        .collect())
}

/// F.pad: "constant" onto constant_pad_nd, "reflect" and "replicate" onto the padding
/// operators of the rank the pad list gives.
fn pad(lw: &mut Lowerer, a: &Args) -> R {
    let mode = a.string_or("mode", "constant")?;
    let sides = match a.get("pad") {
        Some(Argument::Ints(v)) => v.len(),
        Some(Argument::SymInts(v)) => v.len(),
        other => return Err(format!("argument 'pad' should be a list of ints, got {other:?}")),
    };
    if mode == "constant" {
        let mut args = same(a, &["self", "pad"]);
        if let Some(v @ (Argument::Float(_) | Argument::Int(_))) = a.get("value") {
            args.push(("value", v.clone()));
        }
        return delegate(lw, a, "constant_pad_nd.default", args);
    }
    let kind = match mode.as_str() {
        "reflect" => "reflection",
        "replicate" => "replication",
        other => return Err(format!("pad mode \"{other}\" is not supported (constant, reflect and replicate are)")),
    };
    if sides % 2 != 0 || !(2..=6).contains(&sides) {
        return Err(format!("{mode} padding takes 2, 4 or 6 pad values, got {sides}"));
    }
    let args = [renamed(a, "self", "self"), renamed(a, "pad", "padding")].into_iter().flatten().collect();
    delegate(lw, a, &format!("{kind}_pad{}d.default", sides / 2), args)
}
