//! View operators: index remapping, no copies (a copy only for a reshape of memory that is
//! not contiguous).

use super::registry::LowerFn;
use crate::frontend::schema::Argument;
use crate::ir::expr::Affine;
use crate::ir::StridedRef;
use crate::lower::args::Args;
use crate::lower::tensor::{contiguous_strides, norm_dim, Repr, TensorValue};
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
    ("alias.default", alias),
    ("diagonal.default", diagonal),
    ("flip.default", flip),
    ("repeat.default", repeat),
    ("as_strided.default", as_strided),
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
    let i = select_index(lw, a.sym_int(lw, "index")?, &x.sizes[dim], dim)?;
    Ok(vec![x.select(dim, i)])
}

/// A select index `i` into dimension `dim` of size `n`, required to lie inside it; a
/// negative index counts from the end (python). An index that may be negative (a data
/// value) lies in `[-n, n)` and wraps as `i mod n`.
pub fn select_index(lw: &mut Lowerer, i: SymExpr, n: &SymExpr, dim: usize) -> Result<SymExpr, String> {
    let rule = format!("select index must lie in dimension {dim}");
    let i = match i.as_int() {
        Some(v) if v < 0 => SymExpr::add([n.clone(), i]),
        _ if !lw.non_negative(&i) => {
            lw.require(SymExpr::mul([n.clone(), SymExpr::Int(-1)]), GuardOp::Le, i.clone(), &rule)?;
            lw.require(SymExpr::add([i.clone(), SymExpr::Int(1)]), GuardOp::Le, n.clone(), &rule)?;
            return Ok(SymExpr::modulo(i, n.clone()));
        }
        _ => i,
    };
    lw.require(SymExpr::Int(0), GuardOp::Le, i.clone(), &rule)?;
    lw.require(SymExpr::add([i.clone(), SymExpr::Int(1)]), GuardOp::Le, n.clone(), &rule)?;
    Ok(i)
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
    let (start, len, step) = slice_range(lw, a, &x.sizes[dim])?;
    Ok(vec![x.slice(dim, start, len, step)])
}

/// The (start, length, step) of the python slice `start:end:step` (arguments of `a`)
/// of a dimension of `size`.
pub fn slice_range(lw: &mut Lowerer, a: &Args, size: &SymExpr) -> Result<(SymExpr, SymExpr, i64), String> {
    let start = if a.get("start").is_some_and(|s| !matches!(s, Argument::None(_))) {
        a.sym_int(lw, "start")?
    } else {
        SymExpr::Int(0)
    };
    let end = if a.get("end").is_some_and(|s| !matches!(s, Argument::None(_))) {
        a.sym_int(lw, "end")?
    } else {
        size.clone()
    };
    let step = a.int_or("step", 1)?;
    if step <= 0 {
        return Err(format!("slice step must be positive, got {step}"));
    }
    let (start, end) = (clamp_bound(lw, start, size)?, clamp_bound(lw, end, size)?);
    // len = max(0, ceil((end - start) / step))
    let span = SymExpr::max(SymExpr::add([end, SymExpr::mul([start.clone(), SymExpr::Int(-1)])]), SymExpr::Int(0));
    let len = SymExpr::floor_div(SymExpr::add([span, SymExpr::Int(step - 1)]), SymExpr::Int(step));
    Ok((start, len, step))
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
        lw.require(
            SymExpr::Int(1),
            GuardOp::Le,
            known.clone(),
            "the sizes beside an inferred (-1) dimension must not be zero",
        )?;
        sizes[d] = inferred_size(&numel, &known);
    }
    if let Some(s) = sizes.iter().find(|s| s.as_int().is_some_and(|v| v < 0)) {
        return Err(format!("invalid size {s} in {:?}", sizes.iter().map(|s| s.to_string()).collect::<Vec<_>>()));
    }
    lw.require(SymExpr::product(sizes.iter()), GuardOp::Eq, numel, "a view keeps the number of elements")?;
    let name = a.node_name();
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
    lw.require(
        SymExpr::add(sizes.iter().cloned()),
        GuardOp::Eq,
        x.sizes[dim].clone(),
        &format!("split sizes add up to the size of dimension {dim}"),
    )?;
    let mut start = SymExpr::Int(0);
    Ok(sizes
        .into_iter()
        .map(|len| {
            let part = x.slice(dim, start.clone(), len.clone(), 1);
            start = SymExpr::add([start.clone(), len]);
            part
        })
        .collect())
}

fn split(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let dim = norm_dim(a.int_or("dim", 0)?, x.rank())?;
    let n = x.sizes[dim].as_int().ok_or("split of a dynamic dimension is not supported")?;
    let chunk = a.int("split_size")?;
    if chunk <= 0 {
        return Err(format!("split_size must be positive, got {chunk}"));
    }
    Ok((0..n)
        .step_by(chunk as usize)
        .map(|s| x.slice(dim, SymExpr::Int(s), SymExpr::Int(chunk.min(n - s)), 1))
        .collect())
}

fn alias(lw: &mut Lowerer, a: &Args) -> R {
    Ok(vec![a.tensor(lw, "self")?])
}

/// The diagonal of the (dim1, dim2) planes, `offset` above (> 0) or below (< 0) the main
/// one, as a new last dimension.
fn diagonal(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let offset = a.int_or("offset", 0)?;
    let (d1, d2) = (norm_dim(a.int_or("dim1", 0)?, x.rank())?, norm_dim(a.int_or("dim2", 1)?, x.rank())?);
    if d1 == d2 || x.rank() < 2 {
        return Err(format!(
            "diagonal needs two different dimensions of a tensor of rank >= 2, got dim1 {d1}, dim2 {d2}, rank {}",
            x.rank()
        ));
    }
    // Row and column of the diagonal's first element.
    let (row, col) = (offset.saturating_neg().max(0), offset.max(0));
    let len = SymExpr::max(
        SymExpr::min(
            SymExpr::add([x.sizes[d1].clone(), SymExpr::Int(-row)]),
            SymExpr::add([x.sizes[d2].clone(), SymExpr::Int(-col)]),
        ),
        SymExpr::Int(0),
    );
    let kept: Vec<usize> = (0..x.rank()).filter(|&d| d != d1 && d != d2).collect();
    let mut sizes: Vec<SymExpr> = kept.iter().map(|&d| x.sizes[d].clone()).collect();
    sizes.push(len);
    Ok(vec![x.remap(sizes, &|v| {
        let k = &v[kept.len()];
        let mut old = vec![Affine::constant(SymExpr::Int(0)); kept.len() + 2];
        for (j, &d) in kept.iter().enumerate() {
            old[d] = v[j].clone();
        }
        old[d1] = k.plus(&Affine::constant(SymExpr::Int(row)));
        old[d2] = k.plus(&Affine::constant(SymExpr::Int(col)));
        old
    })])
}

/// Reverses the given dimensions: element `i` reads `n - 1 - i`.
fn flip(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let mut dims = vec![];
    for d in a.ints("dims")? {
        let d = norm_dim(d, x.rank())?;
        if dims.contains(&d) {
            return Err(format!("flip: dimension {d} appears twice in dims"));
        }
        dims.push(d);
    }
    if x.rank() == 0 {
        return Ok(vec![x]);
    }
    let sizes = x.sizes.clone();
    Ok(vec![x.remap(sizes.clone(), &|v| {
        v.iter()
            .enumerate()
            .map(|(d, i)| {
                if !dims.contains(&d) {
                    return i.clone();
                }
                Affine::constant(SymExpr::add([sizes[d].clone(), SymExpr::Int(-1)])).plus(&i.scale(&SymExpr::Int(-1)))
            })
            .collect()
    })])
}

/// Tiles `self` `repeats[d]` times along each dimension (leading 1s pad `self` to the
/// length of `repeats`): the view [1, n0, 1, n1, ...] expanded to [r0, n0, r1, n1, ...],
/// then reshaped to [r0 * n0, r1 * n1, ...].
fn repeat(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let repeats = a.sym_ints(lw, "repeats")?;
    if repeats.len() < x.rank() {
        return Err(format!(
            "repeat needs at least as many repeats ({}) as self has dimensions ({})",
            repeats.len(),
            x.rank()
        ));
    }
    for r in &repeats {
        lw.require(SymExpr::Int(0), GuardOp::Le, r.clone(), "repeats must not be negative")?;
    }
    let mut padded = x;
    while padded.rank() < repeats.len() {
        padded = padded.unsqueeze(0);
    }
    let mut interleaved = padded.clone();
    let mut expanded_sizes = vec![];
    for (d, r) in repeats.iter().enumerate() {
        interleaved = interleaved.unsqueeze(2 * d);
        expanded_sizes.extend([r.clone(), padded.sizes[d].clone()]);
    }
    let expanded = interleaved.expand(&expanded_sizes)?;
    let sizes: Vec<SymExpr> = expanded_sizes.chunks(2).map(|rn| SymExpr::mul(rn.iter().cloned())).collect();
    let name = a.node_name();
    Ok(vec![lw.reshape(&expanded, &sizes, &name)])
}

/// A strided view of `self`'s storage. torch reads the storage whatever `self`'s own
/// layout, so `self` is written out in the memory order torch recorded for it first;
/// every element the view can reach must lie inside it.
fn as_strided(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let sizes = a.sym_ints(lw, "size")?;
    let strides = a.sym_ints(lw, "stride")?;
    if sizes.len() != strides.len() {
        return Err(format!("as_strided: {} sizes but {} strides", sizes.len(), strides.len()));
    }
    let storage = storage_of(lw, a, &x)?;
    let offset = match a.get("storage_offset") {
        None | Some(Argument::None(_)) => SymExpr::Int(0),
        Some(_) => a.sym_int(lw, "storage_offset")?,
    };
    // The farthest element: offset + sum((size - 1) * stride), every term >= 0.
    let mut last = vec![offset.clone()];
    lw.require(SymExpr::Int(0), GuardOp::Le, offset.clone(), "as_strided: storage_offset must not be negative")?;
    for (size, stride) in sizes.iter().zip(&strides) {
        lw.require(SymExpr::Int(0), GuardOp::Le, size.clone(), "as_strided: sizes must not be negative")?;
        lw.require(SymExpr::Int(0), GuardOp::Le, stride.clone(), "as_strided: strides must not be negative")?;
        last.push(SymExpr::mul([
            SymExpr::max(SymExpr::add([size.clone(), SymExpr::Int(-1)]), SymExpr::Int(0)),
            stride.clone(),
        ]));
    }
    let numel = SymExpr::product(x.sizes.iter());
    lw.require(
        SymExpr::add(last.into_iter().chain([SymExpr::Int(1)])),
        GuardOp::Le,
        numel,
        "as_strided: every element it reaches must lie inside self's storage",
    )?;
    let Repr::View(r) = &storage.repr else { unreachable!("storage_of returns a view") };
    let view = StridedRef { buf: r.buf, offset: SymExpr::add([r.offset.clone(), offset]), strides };
    Ok(vec![TensorValue { dtype: x.dtype, sizes, repr: Repr::View(view), complex: false }])
}

/// `self`'s elements in the order of its storage, as a contiguous view: the layout
/// torch.export recorded for `self` must be dense (a permutation of a contiguous one)
/// and start its storage, else elements torch would read are unknown here.
fn storage_of(lw: &mut Lowerer, a: &Args, x: &TensorValue) -> Result<TensorValue, String> {
    let Some(Argument::Tensor(t)) = a.get("self") else { return Err("argument 'self' should be a tensor".into()) };
    let meta = lw.meta(&t.name)?;
    let recorded: Vec<SymExpr> = meta.strides.iter().map(|s| lw.parse_sym(s)).collect::<Result<_, _>>()?;
    let storage_offset = lw.parse_sym(&meta.storage_offset)?;
    // Dimensions from the outermost in memory to the innermost.
    let mut order: Vec<usize> = (0..x.rank()).collect();
    order.sort_by_key(|&d| std::cmp::Reverse(recorded.get(d).and_then(|s| s.as_int()).unwrap_or(i64::MAX)));
    let permuted = x.permute(&order)?;
    let dense = recorded.len() == x.rank()
        && contiguous_strides(&permuted.sizes)
            .iter()
            .zip(&order)
            .all(|(s, &d)| *s == recorded[d] || x.sizes[d] == SymExpr::Int(1));
    if !dense || storage_offset != SymExpr::Int(0) {
        return Err(format!(
            "as_strided of a tensor that torch.export recorded as a view into a larger storage (strides [{}], storage offset {storage_offset}): aotc only knows the tensor's own elements",
            recorded.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", ")
        ));
    }
    // A reshape to its own sizes: a view of contiguous memory, copying only when needed.
    Ok(lw.reshape(&permuted, &permuted.sizes.clone(), &a.node_name()))
}

/// `numel / known` for an inferred (-1) view dimension, cancelling the symbolic factors
/// they share (`64*s0 / (16*s0)` is 4): exact because `known >= 1` is required first and
/// the element count check follows.
fn inferred_size(numel: &SymExpr, known: &SymExpr) -> SymExpr {
    fn factors(e: &SymExpr) -> (i64, Vec<SymExpr>) {
        match e {
            SymExpr::Int(v) => (*v, vec![]),
            SymExpr::Mul(xs) => match xs.split_first() {
                Some((SymExpr::Int(c), rest)) => (*c, rest.to_vec()),
                _ => (1, xs.clone()),
            },
            other => (1, vec![other.clone()]),
        }
    }
    let ((cn, mut rest), (ck, divisor)) = (factors(numel), factors(known));
    let cancelled = divisor.iter().all(|f| match rest.iter().position(|x| x == f) {
        Some(i) => {
            rest.remove(i);
            true
        }
        None => false,
    });
    if cancelled && ck > 0 && cn % ck == 0 {
        SymExpr::mul(std::iter::once(SymExpr::Int(cn / ck)).chain(rest))
    } else {
        SymExpr::floor_div(numel.clone(), known.clone())
    }
}
