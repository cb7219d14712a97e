//! Scatters: every output element combines the source elements that target it.
//!
//! The IR has no scatter kernel (a kernel writes its output in full, in order), so a
//! scatter is written as a gather over its sources: `out[i] = combine { src[j] : j
//! targets i }`, a Reduction over the source positions masked by "targets i"
//! ([`reduce_where`]). That costs O(outputs x sources), along the scattered dimension only
//! where the others line up, and is exact: a sum adds the same elements, and "the last
//! write wins" picks the largest matching source position.

use super::registry::LowerFn;
use crate::ir::expr::{self, binary, cast, constant, index_value, int, size_value, Affine, E};
use crate::ir::{Kernel, Prim, ReduceOp, Scalar};
use crate::lower::args::Args;
use crate::lower::tensor::{broadcast_shapes, contiguous_strides, norm_dim, vars, TensorValue};
use crate::lower::Lowerer;
use aotc_abi::manifest::GuardOp;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

type R = Result<Vec<TensorValue>, String>;

pub const OPS: &[(&str, LowerFn)] = &[
    ("scatter.src", |lw, a| scatter(lw, a, Written::Tensor)),
    ("scatter.value", |lw, a| scatter(lw, a, Written::Value)),
    ("scatter_add.default", |lw, a| scatter_reduce(lw, a, Combine::Sum, true)),
    ("scatter_reduce.two", scatter_reduce_two),
    ("select_scatter.default", select_scatter),
    ("slice_scatter.default", slice_scatter),
    ("masked_scatter.default", masked_scatter),
];

/// The largest (`highest`) or smallest value of `dtype`: the identity of min and max.
fn extreme(dtype: DType, highest: bool) -> Scalar {
    if dtype.is_float() {
        return Scalar::F(if highest { f64::INFINITY } else { f64::NEG_INFINITY });
    }
    let (lo, hi) = dtype.int_range();
    Scalar::I(if highest { hi } else { lo })
}

/// What a position that matches no source contributes to a reduction by `op`.
fn identity(op: ReduceOp, dtype: DType) -> E {
    let v = match op {
        ReduceOp::Sum => Scalar::I(0),
        ReduceOp::Prod => Scalar::I(1),
        ReduceOp::Max | ReduceOp::ArgMax => extreme(dtype, false),
        ReduceOp::Min | ReduceOp::ArgMin => extreme(dtype, true),
    };
    constant(v, dtype)
}

/// `out[i] = op { value(i, j) : matches(i, j) }`: a Reduction over the source positions
/// `j` (body variables `ranges.len()..`, sizes `reduce`), the identity of `op` where
/// nothing matches (ArgMax/ArgMin: the int64 position of the first best value). The
/// building block of every op without a kernel of its own.
pub fn reduce_where(
    lw: &mut Lowerer,
    name: &str,
    ranges: &[SymExpr],
    reduce: &[SymExpr],
    op: ReduceOp,
    matches: E,
    value: E,
) -> TensorValue {
    let body = expr::select(matches, value.clone(), identity(op, value.dtype));
    let dtype = if matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin) { DType::I64 } else { value.dtype };
    if reduce.is_empty() {
        // One source position: nothing to reduce.
        let body = if dtype == value.dtype { body } else { int(0) };
        return TensorValue::lazy(dtype, ranges.to_vec(), body);
    }
    let out = lw.new_reduction_out(name, dtype, ranges.to_vec());
    lw.prog.kernels.push(Kernel::Reduction { out, ranges: ranges.to_vec(), reduce: reduce.to_vec(), op, body });
    TensorValue::view_of(out, dtype, ranges.to_vec())
}

/// Loop variable `v` as an int64 value.
pub fn var_value(v: usize) -> E {
    index_value(Affine::var(v))
}

/// The position of element `index` (variables) in a row-major walk of `sizes`.
pub fn flat_position(sizes: &[SymExpr], index: &[Affine]) -> E {
    let strides = contiguous_strides(sizes);
    index_value(index.iter().zip(&strides).fold(Affine::constant(SymExpr::Int(0)), |acc, (i, s)| acc.plus(&i.scale(s))))
}

/// `v` with its elements converted to `dtype`.
pub fn converted(v: &TensorValue, dtype: DType) -> TensorValue {
    if v.dtype == dtype {
        return v.clone();
    }
    TensorValue::lazy(dtype, v.sizes.clone(), v.load(&vars(v.rank())))
}

/// `a / count` as torch's mean divides: true division for floats, floor division for
/// integers (the count is positive: C's truncating division, one less where a negative
/// dividend leaves a remainder).
fn divide_by_count(a: E, count: E) -> E {
    let dtype = a.dtype;
    let count = cast(count, dtype);
    if dtype.is_float() {
        return binary(Prim::Div, a, count);
    }
    let q = binary(Prim::Div, a.clone(), count.clone());
    let remainder = binary(Prim::Fmod, a, count);
    let one = constant(Scalar::I(1), dtype);
    expr::select(binary(Prim::Lt, remainder, constant(Scalar::I(0), dtype)), binary(Prim::Sub, q.clone(), one), q)
}

/// The conjunction of `conds` (true when there are none).
pub fn all(conds: impl IntoIterator<Item = E>) -> E {
    conds.into_iter().reduce(|a, b| binary(Prim::And, a, b)).unwrap_or_else(|| constant(Scalar::B(true), DType::Bool))
}

/// A scatter along `dim`: `index` (of self's rank) sends `src[p]` to `self[p']`, where
/// `p'` is `p` with `p[dim]` replaced by `index[p]`.
///
/// Its reductions run over the "partial" shape, `index`'s with `dim` resized to self's:
/// partial position `p` gathers the sources `j` along `dim` with `index[p, dim = j] ==
/// p[dim]`, every other coordinate equal, so only `dim` is reduced over.
struct DimScatter {
    x: TensorValue,
    index: TensorValue,
    dim: usize,
    partial: Vec<SymExpr>,
    /// The partial shape is self's: every output position can receive sources.
    covers_self: bool,
    /// self was 0-dim (handled as 1-D, squeezed back at the end).
    scalar: bool,
}

impl DimScatter {
    /// Reads self, dim and index, and `src` when the op has one, with torch's shape rules:
    /// equal ranks, `index.size(d) <= src.size(d)` and `<= self.size(d)` for `d != dim`.
    fn new(lw: &mut Lowerer, a: &Args, src: Option<&TensorValue>) -> Result<(DimScatter, Option<TensorValue>), String> {
        let x = a.tensor(lw, "self")?;
        let index = a.tensor(lw, "index")?;
        let dim = norm_dim(a.int("dim")?, x.rank())?;
        if index.dtype.is_float() || index.dtype == DType::Bool {
            return Err(format!("index must be an integer tensor, got {}", index.dtype));
        }
        let scalar = x.rank() == 0;
        let lift = |t: &TensorValue| if t.rank() == 0 { t.unsqueeze(0) } else { t.clone() };
        let (x, index, src) = (lift(&x), lift(&index), src.map(lift));
        if index.rank() != x.rank() || src.as_ref().is_some_and(|s| s.rank() != x.rank()) {
            return Err(format!(
                "self, index and src must have the same rank, got {}, {} and {}",
                x.rank(),
                index.rank(),
                src.as_ref().map_or(x.rank(), |s| s.rank())
            ));
        }
        for d in 0..x.rank() {
            if let Some(s) = &src {
                lw.require(
                    index.sizes[d].clone(),
                    GuardOp::Le,
                    s.sizes[d].clone(),
                    &format!("index dimension {d} must not exceed src's"),
                )?;
            }
            if d != dim {
                lw.require(
                    index.sizes[d].clone(),
                    GuardOp::Le,
                    x.sizes[d].clone(),
                    &format!("index dimension {d} must not exceed self's"),
                )?;
            }
        }
        let mut partial = index.sizes.clone();
        partial[dim] = x.sizes[dim].clone();
        let covers_self = partial == x.sizes;
        let src = src.map(|s| converted(&s, x.dtype));
        Ok((DimScatter { x, index, dim, partial, covers_self, scalar }, src))
    }

    /// The source position `j` of a reduction over the partial shape: variables
    /// `0..rank` with `dim` replaced by the reduction variable.
    fn source_at(&self) -> Vec<Affine> {
        let mut at = vars(self.x.rank());
        at[self.dim] = Affine::var(self.x.rank());
        at
    }

    /// `op` over the sources that target each partial position, of `value` (a body over
    /// the partial position and the source variable).
    fn reduce(&self, lw: &mut Lowerer, name: &str, op: ReduceOp, value: E) -> TensorValue {
        let target = self.index.load(&self.source_at());
        let target = lw.checked_index(
            target,
            self.x.sizes[self.dim].clone(),
            false,
            &format!("scatter index along dimension {}", self.dim),
        );
        let matches = binary(Prim::Eq, target, var_value(self.dim));
        reduce_where(lw, name, &self.partial, &[self.index.sizes[self.dim].clone()], op, matches, value)
    }

    /// A partial result at the output position (variables `0..rank`), where `covered`.
    fn read(&self, lw: &mut Lowerer, partial: &TensorValue, name: &str) -> E {
        if self.covers_self {
            return partial.load(&vars(self.x.rank()));
        }
        let at: Vec<E> = (0..self.x.rank()).map(var_value).collect();
        lw.load_at_indices(partial, &at, name)
    }

    /// Whether the output position lies inside the partial shape.
    fn covered(&self) -> E {
        all((0..self.x.rank())
            .filter(|&d| d != self.dim && self.partial[d] != self.x.sizes[d])
            .map(|d| binary(Prim::Lt, var_value(d), size_value(&self.partial[d]))))
    }

    /// `where(hit, value, self)` at every output position.
    fn finish(&self, hit: E, value: E) -> TensorValue {
        let x_i = self.x.load(&vars(self.x.rank()));
        let out =
            TensorValue::lazy(self.x.dtype, self.x.sizes.clone(), expr::select(hit, cast(value, self.x.dtype), x_i));
        if self.scalar {
            out.squeeze(&[0])
        } else {
            out
        }
    }
}

enum Written {
    Tensor,
    Value,
}

/// scatter: the last source (in index order) that targets a position replaces it, as
/// torch's CPU kernel writes them in order.
fn scatter(lw: &mut Lowerer, a: &Args, written: Written) -> R {
    let src = match written {
        Written::Tensor => Some(a.tensor(lw, "src")?),
        Written::Value => None,
    };
    let (s, src) = DimScatter::new(lw, a, src.as_ref())?;
    let name = a.node_name();
    let last = s.reduce(lw, &format!("{name}.last"), ReduceOp::Max, var_value(s.x.rank()));
    let last = s.read(lw, &last, &name);
    let hit = binary(Prim::And, s.covered(), binary(Prim::Ge, last.clone(), int(0)));
    let value = match src {
        Some(src) => {
            let mut at: Vec<E> = (0..s.x.rank()).map(var_value).collect();
            at[s.dim] = binary(Prim::Max, last, int(0));
            lw.load_at_indices(&src, &at, &name)
        }
        None => constant(a.scalar("value")?, s.x.dtype),
    };
    Ok(vec![s.finish(hit, value)])
}

#[derive(Clone, Copy, PartialEq)]
enum Combine {
    Sum,
    Prod,
    Mean,
    Max,
    Min,
}

fn scatter_reduce_two(lw: &mut Lowerer, a: &Args) -> R {
    let combine = match a.string_or("reduce", "")?.as_str() {
        "sum" => Combine::Sum,
        "prod" => Combine::Prod,
        "mean" => Combine::Mean,
        "amax" => Combine::Max,
        "amin" => Combine::Min,
        other => return Err(format!("reduce must be one of sum, prod, mean, amax, amin; got '{other}'")),
    };
    scatter_reduce(lw, a, combine, a.bool_or("include_self", true)?)
}

/// scatter_add and scatter_reduce: the sources targeting a position, reduced together
/// with self's element when `include_self`; positions no source targets keep self's.
fn scatter_reduce(lw: &mut Lowerer, a: &Args, combine: Combine, include_self: bool) -> R {
    let src = a.tensor(lw, "src")?;
    let (s, src) = DimScatter::new(lw, a, Some(&src))?;
    let src = src.expect("scatter_reduce has a source");
    let name = a.node_name();
    let (op, prim) = match combine {
        Combine::Sum | Combine::Mean => (ReduceOp::Sum, Prim::Add),
        Combine::Prod => (ReduceOp::Prod, Prim::Mul),
        Combine::Max => (ReduceOp::Max, Prim::Max),
        Combine::Min => (ReduceOp::Min, Prim::Min),
    };
    let partial = s.reduce(lw, &name, op, src.load(&s.source_at()));
    let partial = s.read(lw, &partial, &name);
    let x_i = s.x.load(&vars(s.x.rank()));
    let mut value = if include_self { binary(prim, x_i, partial) } else { partial };
    let mut hit = s.covered();
    if combine == Combine::Mean || !include_self {
        let count = s.reduce(lw, &format!("{name}.count"), ReduceOp::Sum, int(1));
        let count = s.read(lw, &count, &name);
        if combine == Combine::Mean {
            value = divide_by_count(value, binary(Prim::Add, count.clone(), int(include_self as i64)));
        }
        if !include_self {
            hit = binary(Prim::And, hit, binary(Prim::Gt, count, int(0)));
        }
    }
    Ok(vec![s.finish(hit, value)])
}

/// `src` in place of self's slice `index` of `dim`.
fn select_scatter(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let src = a.tensor(lw, "src")?;
    let dim = norm_dim(a.int("dim")?, x.rank())?;
    let index = super::view::select_index(lw, a.sym_int(lw, "index")?, &x.sizes[dim], dim)?;
    let mut slice_sizes = x.sizes.clone();
    slice_sizes.remove(dim);
    check_same_sizes(lw, &src, &slice_sizes, "select_scatter: src has the shape of the selected slice")?;
    let at = vars(x.rank());
    let mut src_at = at.clone();
    src_at.remove(dim);
    let in_slice = binary(Prim::Eq, var_value(dim), size_value(&index));
    let body = expr::select(in_slice, cast(src.load(&src_at), x.dtype), x.load(&at));
    Ok(vec![TensorValue::lazy(x.dtype, x.sizes.clone(), body)])
}

fn check_same_sizes(lw: &mut Lowerer, v: &TensorValue, sizes: &[SymExpr], rule: &str) -> Result<(), String> {
    if v.rank() != sizes.len() {
        return Err(format!("{rule}: rank {} vs {}", v.rank(), sizes.len()));
    }
    for (got, want) in v.sizes.iter().zip(sizes) {
        lw.require(got.clone(), GuardOp::Eq, want.clone(), rule)?;
    }
    Ok(())
}

/// `src` in place of self's slice `start:end:step` of `dim`.
fn slice_scatter(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let src = a.tensor(lw, "src")?;
    let dim = norm_dim(a.int_or("dim", 0)?, x.rank())?;
    let (start, len, step) = super::view::slice_range(lw, a, &x.sizes[dim])?;
    let mut slice_sizes = x.sizes.clone();
    slice_sizes[dim] = len.clone();
    check_same_sizes(lw, &src, &slice_sizes, "slice_scatter: src has the shape of the slice")?;
    // The position along `dim` inside src, or -1 outside the slice.
    let offset = binary(Prim::Sub, var_value(dim), size_value(&start));
    let (pos, on_step) = match step {
        1 => (offset.clone(), binary(Prim::Ge, offset.clone(), int(0))),
        _ => (
            binary(Prim::Div, offset.clone(), int(step)),
            binary(
                Prim::And,
                binary(Prim::Ge, offset.clone(), int(0)),
                binary(Prim::Eq, binary(Prim::Fmod, offset, int(step)), int(0)),
            ),
        ),
    };
    let inside = binary(Prim::And, on_step, binary(Prim::Lt, pos.clone(), size_value(&len)));
    let mut at: Vec<E> = (0..x.rank()).map(var_value).collect();
    at[dim] = expr::select(inside.clone(), pos, int(0));
    let value = cast(lw.load_at_indices(&src, &at, &a.node_name()), x.dtype);
    let body = expr::select(inside, value, x.load(&vars(x.rank())));
    Ok(vec![TensorValue::lazy(x.dtype, x.sizes.clone(), body)])
}

/// Self where `mask` is false; where it is true, source's elements in order: the k-th
/// true position (row-major) takes source's k-th element.
fn masked_scatter(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "self")?;
    let mask = a.tensor(lw, "mask")?;
    let source = a.tensor(lw, "source")?;
    if mask.dtype != DType::Bool {
        return Err(format!("mask must be a bool tensor, got {}", mask.dtype));
    }
    let sizes = broadcast_shapes(&[&x.sizes, &mask.sizes])?;
    let (x, mask) = (x.expand(&sizes)?, mask.expand(&sizes)?);
    let name = a.node_name();
    let rank = sizes.len();
    // rank(i) = #{ j before i : mask[j] }, over every dimension.
    let (i, j): (Vec<Affine>, Vec<Affine>) =
        ((0..rank).map(Affine::var).collect(), (rank..2 * rank).map(Affine::var).collect());
    let before = binary(Prim::Lt, flat_position(&sizes, &j), flat_position(&sizes, &i));
    let matches = binary(Prim::And, before, mask.load(&j));
    let taken = reduce_where(lw, &format!("{name}.rank"), &sizes, &sizes, ReduceOp::Sum, matches, int(1));
    let numel = SymExpr::product(source.sizes.iter());
    let flat_source = lw.reshape(&source, std::slice::from_ref(&numel), &format!("{name}.source"));
    // Checked as k + 1 in 1..=numel where the mask holds and as 0 elsewhere, so that a
    // false position never fails the call, even with an empty source.
    let mask_i = mask.load(&i);
    let k1 = expr::select(mask_i.clone(), binary(Prim::Add, taken.load(&i), int(1)), int(0));
    let k1 = lw.checked_index(
        k1,
        SymExpr::add([numel, SymExpr::Int(1)]),
        false,
        "masked_scatter: source has fewer elements than the mask has true values",
    );
    let value = lw.load_at_indices(&flat_source, &[binary(Prim::Sub, k1, int(1))], &name);
    let body = expr::select(mask_i, cast(value, x.dtype), x.load(&i));
    Ok(vec![TensorValue::lazy(x.dtype, sizes, body)])
}
