//! View operators: index remapping, no copies (a copy only for a reshape of memory that is
//! not contiguous).

use super::registry::LowerFn;
use crate::lower::args::Args;
use crate::lower::tensor::{norm_dim, TensorValue};
use crate::lower::Lowerer;
use aotc_abi::manifest::GuardOp;
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
    match x.rank() {
        0 | 1 => Ok(vec![x]),
        2 => Ok(vec![x.permute(&[1, 0])?]),
        r => Err(format!("t expects a tensor of at most 2 dimensions, got rank {r}")),
    }
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
    let n = x.sizes[dim].clone();
    // A negative index counts from the end (python), known only when the index is static.
    let i = match i.as_int() {
        Some(v) if v < 0 => SymExpr::add([n.clone(), i]),
        _ => i,
    };
    lw.require(SymExpr::Int(0), GuardOp::Le, i.clone(), &format!("select index must lie in dimension {dim}"))?;
    lw.require(SymExpr::add([i.clone(), SymExpr::Int(1)]), GuardOp::Le, n, &format!("select index must lie in dimension {dim}"))?;
    Ok(vec![x.select(dim, i)])
}

/// Clamps a python slice bound into `[0, size]`. A symbolic bound must not be negative
/// (a run-time guard): counting from the end needs its sign at compile time.
fn clamp_bound(lw: &mut Lowerer, b: SymExpr, size: &SymExpr) -> Result<SymExpr, String> {
    Ok(match (b.as_int(), size.as_int()) {
        (Some(v), Some(n)) => SymExpr::Int(if v < 0 { v.saturating_add(n).max(0) } else { v.min(n) }),
        (Some(v), None) if v >= i64::MAX / 4 => size.clone(),
        (Some(v), None) if v < 0 => SymExpr::max(SymExpr::add([size.clone(), SymExpr::Int(v)]), SymExpr::Int(0)),
        (Some(v), None) => SymExpr::min(SymExpr::Int(v), size.clone()),
        _ => {
            lw.require(SymExpr::Int(0), GuardOp::Le, b.clone(), "a symbolic slice bound must not be negative")?;
            SymExpr::min(b, size.clone())
        }
    })
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
    let (start, end) = (clamp_bound(lw, start, &size)?, clamp_bound(lw, end, &size)?);
    // len = max(0, ceil((end - start) / step))
    let span = SymExpr::max(SymExpr::add([end, SymExpr::mul([start.clone(), SymExpr::Int(-1)])]), SymExpr::Int(0));
    let len = SymExpr::floor_div(SymExpr::add([span, SymExpr::Int(step - 1)]), SymExpr::Int(step));
    Ok(vec![x.slice(dim, start, len, step)])
}

/// view/reshape: the new sizes (one may be -1, inferred) hold as many elements as `self`.
fn view(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let mut sizes = a.sym_ints(lw, if a.get("size").is_some() { "size" } else { "shape" })?;
    let numel = SymExpr::product(x.sizes.iter());
    let inferred: Vec<usize> = (0..sizes.len()).filter(|&d| sizes[d] == SymExpr::Int(-1)).collect();
    if let Some(&d) = inferred.first() {
        if inferred.len() > 1 {
            return Err(format!("only one dimension can be -1 (inferred), got sizes {sizes:?}"));
        }
        let known = SymExpr::product(sizes.iter().filter(|s| **s != SymExpr::Int(-1)));
        lw.require(SymExpr::Int(1), GuardOp::Le, known.clone(), "the sizes beside an inferred (-1) dimension must not be zero")?;
        sizes[d] = SymExpr::floor_div(numel.clone(), known);
    }
    if let Some(s) = sizes.iter().find(|s| s.as_int().is_some_and(|v| v < 0)) {
        return Err(format!("invalid size {s} in {:?}", sizes.iter().map(|s| s.to_string()).collect::<Vec<_>>()));
    }
    lw.require(SymExpr::product(sizes.iter()), GuardOp::Eq, numel, "a view keeps the number of elements")?;
    let name = a.node.name.clone().unwrap_or_default();
    Ok(vec![lw.reshape(&x, &sizes, &name)])
}

/// Consecutive slices of `dim` with the given lengths, which must add up to its size.
fn split_with_sizes(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let dim = norm_dim(a.int_or("dim", 0)?, x.rank())?;
    let sizes = a.sym_ints(lw, "split_sizes")?;
    for len in &sizes {
        lw.require(SymExpr::Int(0), GuardOp::Le, len.clone(), "split sizes must not be negative")?;
    }
    lw.require(SymExpr::add(sizes.iter().cloned()), GuardOp::Eq, x.sizes[dim].clone(), &format!("split sizes add up to the size of dimension {dim}"))?;
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
    let chunk = a.int("split_size")?;
    if chunk <= 0 {
        return Err(format!("split_size must be positive, got {chunk}"));
    }
    Ok((0..n).step_by(chunk as usize).map(|s| x.slice(dim, SymExpr::Int(s), SymExpr::Int(chunk.min(n - s)), 1)).collect())
}
