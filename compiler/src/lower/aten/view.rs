//! View operators: index remapping, no copies (a copy only for a reshape of memory that is
//! not contiguous).

use super::registry::LowerFn;
use crate::lower::args::Args;
use crate::lower::tensor::{norm_dim, TensorValue};
use crate::lower::Lowerer;
use aotc_abi::sym::SymExpr;

type R = Result<Vec<TensorValue>, String>;

pub const OPS: &[(&str, LowerFn)] = &[
    ("permute.default", permute),
    ("t.default", t),
    ("transpose.int", transpose),
    ("expand.default", expand),
    ("unsqueeze.default", unsqueeze),
    ("squeeze.dim", squeeze),
    ("squeeze.dims", squeeze),
    ("squeeze.default", squeeze),
    ("select.int", select),
    ("slice.Tensor", slice),
    ("view.default", view),
    ("_unsafe_view.default", view),
    ("reshape.default", view),
    ("split_with_sizes.default", split_with_sizes),
    ("split.Tensor", split),
];

fn permute(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let dims = a.ints("dims")?.iter().map(|&d| norm_dim(d, x.rank())).collect::<Result<Vec<_>, _>>()?;
    Ok(vec![x.permute(&dims)?])
}

fn t(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    Ok(vec![if x.rank() < 2 { x } else { x.permute(&[1, 0])? }])
}

fn transpose(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let (d0, d1) = (norm_dim(a.int("dim0")?, x.rank())?, norm_dim(a.int("dim1")?, x.rank())?);
    let mut dims: Vec<usize> = (0..x.rank()).collect();
    dims.swap(d0, d1);
    Ok(vec![x.permute(&dims)?])
}

fn expand(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let mut sizes = a.sym_ints(lw, "size")?;
    let lead = sizes.len().saturating_sub(x.rank());
    for (d, s) in sizes.iter_mut().enumerate() {
        if *s == SymExpr::Int(-1) && d >= lead {
            *s = x.sizes[d - lead].clone();
        }
    }
    Ok(vec![x.expand(&sizes)?])
}

fn unsqueeze(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let dim = norm_dim(a.int("dim")?, x.rank() + 1)?;
    Ok(vec![x.unsqueeze(dim)])
}

fn squeeze(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let dims = match a.opt_ints(if a.get("dim").is_some() { "dim" } else { "dims" })? {
        Some(ds) => ds.iter().map(|&d| norm_dim(d, x.rank())).collect::<Result<Vec<_>, _>>()?,
        None => (0..x.rank()).collect(),
    };
    Ok(vec![x.squeeze(&dims)])
}

fn select(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let dim = norm_dim(a.int("dim")?, x.rank())?;
    let i = a.sym_int(lw, "index")?;
    let i = match (i.as_int(), x.sizes[dim].as_int()) {
        (Some(i), Some(n)) if i < -n || i >= n => return Err(format!("index {i} out of range for dimension {dim} of size {n}")),
        (Some(i), Some(n)) if i < 0 => SymExpr::Int(i + n),
        (Some(i), None) if i < 0 => SymExpr::add([x.sizes[dim].clone(), SymExpr::Int(i)]),
        _ => i,
    };
    Ok(vec![x.select(dim, i)])
}

/// Clamps a python slice bound into `[0, size]`.
fn clamp_bound(b: SymExpr, size: &SymExpr) -> SymExpr {
    match (b.as_int(), size.as_int()) {
        (Some(v), Some(n)) => SymExpr::Int(if v < 0 { (v + n).max(0) } else { v.min(n) }),
        (Some(v), None) if v >= i64::MAX / 4 => size.clone(),
        (Some(v), None) if v < 0 => SymExpr::max(SymExpr::add([size.clone(), SymExpr::Int(v)]), SymExpr::Int(0)),
        (Some(v), None) => SymExpr::min(SymExpr::Int(v), size.clone()),
        _ => SymExpr::min(b, size.clone()),
    }
}

fn slice(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let dim = norm_dim(a.int_or("dim", 0)?, x.rank())?;
    let size = x.sizes[dim].clone();
    let start = if a.get("start").is_some_and(|s| !matches!(s, crate::frontend::schema::Argument::None(_))) { a.sym_int(lw, "start")? } else { SymExpr::Int(0) };
    let end = if a.get("end").is_some_and(|s| !matches!(s, crate::frontend::schema::Argument::None(_))) { a.sym_int(lw, "end")? } else { size.clone() };
    let step = a.int_or("step", 1)?;
    if step <= 0 {
        return Err(format!("slice step must be positive, got {step}"));
    }
    let (start, end) = (clamp_bound(start, &size), clamp_bound(end, &size));
    // len = max(0, ceil((end - start) / step))
    let span = SymExpr::max(SymExpr::add([end, SymExpr::mul([start.clone(), SymExpr::Int(-1)])]), SymExpr::Int(0));
    let len = SymExpr::floor_div(SymExpr::add([span, SymExpr::Int(step - 1)]), SymExpr::Int(step));
    Ok(vec![x.slice(dim, start, len, step)])
}

fn view(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let mut sizes = a.sym_ints(lw, if a.get("size").is_some() { "size" } else { "shape" })?;
    if let Some(infer) = sizes.iter().position(|s| *s == SymExpr::Int(-1)) {
        let known = SymExpr::product(sizes.iter().filter(|s| **s != SymExpr::Int(-1)));
        sizes[infer] = SymExpr::floor_div(SymExpr::product(x.sizes.iter()), known);
    }
    let name = a.node.name.clone().unwrap_or_default();
    Ok(vec![lw.reshape(&x, &sizes, &name)])
}

fn split_with_sizes(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let dim = norm_dim(a.int_or("dim", 0)?, x.rank())?;
    let sizes = a.sym_ints(lw, "split_sizes")?;
    let mut start = SymExpr::Int(0);
    Ok(sizes.into_iter().map(|len| {
        let part = x.slice(dim, start.clone(), len.clone(), 1);
        start = SymExpr::add([start.clone(), len]);
        part
    }).collect())
}

fn split(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let dim = norm_dim(a.int_or("dim", 0)?, x.rank())?;
    let n = x.sizes[dim].as_int().ok_or("split of a dynamic dimension is not supported")?;
    let chunk = a.int("split_size")?.max(1);
    Ok((0..n).step_by(chunk as usize).map(|s| x.slice(dim, SymExpr::Int(s), SymExpr::Int(chunk.min(n - s)), 1)).collect())
}
