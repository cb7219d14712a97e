//! Reductions (sum, mean, var, amax, max.dim, argmax...) and the softmax and layer norm
//! built from them.

use super::promote::float_of;
use super::registry::LowerFn;
use crate::ir::expr::{self, binary, cast, unary, Affine, E};
use crate::ir::{Kernel, Prim, ReduceOp, Scalar};
use crate::lower::args::Args;
use crate::lower::tensor::{norm_dim, vars, TensorValue};
use crate::lower::Lowerer;
use aotc_abi::manifest::GuardOp;
use aotc_abi::softmax as softmax_mode;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

mod rows;

type R = Result<Vec<TensorValue>, String>;

pub const OPS: &[(&str, LowerFn)] = &[
    ("sum.dim_IntList", |lw, a| sum_mean(lw, a, false)),
    ("sum.default", |lw, a| sum_mean(lw, a, false)),
    ("mean.dim", |lw, a| sum_mean(lw, a, true)),
    ("mean.default", |lw, a| sum_mean(lw, a, true)),
    ("prod.default", |lw, a| simple(lw, a, ReduceOp::Prod)),
    ("prod.dim_int", |lw, a| simple(lw, a, ReduceOp::Prod)),
    ("amax.default", |lw, a| simple(lw, a, ReduceOp::Max)),
    ("amin.default", |lw, a| simple(lw, a, ReduceOp::Min)),
    ("argmax.default", |lw, a| arg(lw, a, ReduceOp::ArgMax)),
    ("argmin.default", |lw, a| arg(lw, a, ReduceOp::ArgMin)),
    ("max.dim", |lw, a| extremum_dim(lw, a, ReduceOp::Max, ReduceOp::ArgMax)),
    ("min.dim", |lw, a| extremum_dim(lw, a, ReduceOp::Min, ReduceOp::ArgMin)),
    ("var.correction", |lw, a| {
        let correction = a.opt_scalar("correction")?.map_or(1.0, Scalar::as_f64);
        var(lw, a, correction)
    }),
    ("var.dim", |lw, a| {
        let correction = if a.bool_or("unbiased", true)? { 1.0 } else { 0.0 };
        var(lw, a, correction)
    }),
    ("any.dim", |lw, a| logical(lw, a, ReduceOp::Max)),
    ("any.dims", |lw, a| logical(lw, a, ReduceOp::Max)),
    ("any.default", |lw, a| logical(lw, a, ReduceOp::Max)),
    ("all.dim", |lw, a| logical(lw, a, ReduceOp::Min)),
    ("all.default", |lw, a| logical(lw, a, ReduceOp::Min)),
    ("_softmax.default", |lw, a| softmax(lw, a, false)),
    ("_log_softmax.default", |lw, a| softmax(lw, a, true)),
    ("native_layer_norm.default", layer_norm),
];

/// The reduced axes: `dim`/`dims` given as an int, a list, or absent/empty (= all).
fn axes(a: &Args, rank: usize) -> Result<Vec<usize>, String> {
    let list = match a.get("dim").or(a.get("dims")) {
        None | Some(crate::frontend::schema::Argument::None(_)) => vec![],
        Some(_) => a.ints(if a.get("dim").is_some() { "dim" } else { "dims" })?,
    };
    if list.is_empty() {
        return Ok((0..rank).collect());
    }
    if rank == 0 {
        // norm_dim accepts 0 and -1 for a 0-dim tensor, which has nothing to reduce.
        list.iter().try_for_each(|&d| norm_dim(d, 0).map(drop))?;
        return Ok(vec![]);
    }
    let mut out = list.iter().map(|&d| norm_dim(d, rank)).collect::<Result<Vec<_>, _>>()?;
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The axes of a reduction along `dim`: none on a 0-dim tensor (which accepts dim 0 or
/// -1 and is its own reduction).
fn reduced_dim(x: &TensorValue, dim: i64) -> Result<Vec<usize>, String> {
    let d = norm_dim(dim, x.rank())?;
    Ok(if x.rank() == 0 { vec![] } else { vec![d] })
}

/// Reduces `x` over `axes` with `op`, into a new buffer of `dtype`; the body is `x`'s
/// elements cast to `dtype`.
pub fn reduce(
    lw: &mut Lowerer,
    x: &TensorValue,
    axes: &[usize],
    keepdim: bool,
    op: ReduceOp,
    dtype: DType,
    name: &str,
) -> TensorValue {
    let rank = x.rank();
    if rank == 0 {
        // A 0-dim tensor is its own reduction (torch accepts dim 0 or -1 on it); the
        // index of its one element is 0.
        let body = match op {
            ReduceOp::ArgMax | ReduceOp::ArgMin => expr::constant(crate::ir::Scalar::I(0), DType::I64),
            _ => cast(x.load(&[]), dtype),
        };
        return TensorValue::lazy(dtype, vec![], body);
    }
    // Output variables cover the kept dims (and size-1 reduced dims when keepdim).
    let mut out_sizes = vec![];
    let mut index: Vec<Option<usize>> = vec![None; rank];
    for (d, size) in x.sizes.iter().enumerate() {
        if axes.contains(&d) {
            if keepdim {
                out_sizes.push(SymExpr::Int(1));
            }
        } else {
            index[d] = Some(out_sizes.len());
            out_sizes.push(size.clone());
        }
    }
    let n_out = out_sizes.len();
    let reduce: Vec<SymExpr> = axes.iter().map(|&d| x.sizes[d].clone()).collect();
    let at: Vec<Affine> = (0..rank)
        .map(|d| match index[d] {
            Some(v) => Affine::var(v),
            None => Affine::var(n_out + axes.iter().position(|&a| a == d).expect("reduced axis")),
        })
        .collect();
    let body = x.load(&at);
    let body = if matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin) { body } else { cast(body, dtype) };
    let out = lw.new_reduction_out(name, dtype, out_sizes.clone());
    lw.prog.kernels.push(Kernel::Reduction { out, ranges: out_sizes.clone(), reduce, op, body });
    TensorValue::view_of(out, dtype, out_sizes)
}

fn sum_mean(lw: &mut Lowerer, a: &Args, mean: bool) -> R {
    let x = a.tensor(lw, "self")?;
    let ax = axes(a, x.rank())?;
    let keepdim = a.bool_or("keepdim", false)?;
    let dtype = match a.opt_dtype("dtype")? {
        Some(d) => d,
        None if mean => x.dtype,
        None if x.dtype.is_float() => x.dtype,
        None => DType::I64,
    };
    if mean && !dtype.is_float() {
        return Err(format!("mean of {dtype} is not defined (torch requires a floating dtype)"));
    }
    let s = reduce(lw, &x, &ax, keepdim, ReduceOp::Sum, dtype, &a.node_name());
    if !mean {
        return Ok(vec![s]);
    }
    let count = SymExpr::product(ax.iter().map(|&d| &x.sizes[d]));
    let idx = vars(s.rank());
    let body = binary(Prim::Div, s.load(&idx), cast(expr::index_value(Affine::constant(count)), dtype));
    Ok(vec![TensorValue::lazy(dtype, s.sizes.clone(), body)])
}

fn simple(lw: &mut Lowerer, a: &Args, op: ReduceOp) -> R {
    let x = a.tensor(lw, "self")?;
    let ax = axes(a, x.rank())?;
    let keepdim = a.bool_or("keepdim", false)?;
    let dtype =
        a.opt_dtype("dtype")?.unwrap_or(if op == ReduceOp::Prod && !x.dtype.is_float() { DType::I64 } else { x.dtype });
    if op != ReduceOp::Prod {
        require_non_empty(lw, &x, &ax)?;
    }
    Ok(vec![reduce(lw, &x, &ax, keepdim, op, dtype, &a.node_name())])
}

/// torch has no maximum or minimum (nor its index) of nothing: every reduced dimension
/// must be non-empty (checked on each call when it is dynamic).
fn require_non_empty(lw: &mut Lowerer, x: &TensorValue, axes: &[usize]) -> Result<(), String> {
    for &d in axes {
        lw.require(
            SymExpr::Int(1),
            GuardOp::Le,
            x.sizes[d].clone(),
            &format!("reduced dimension {d} must not be empty"),
        )?;
    }
    Ok(())
}

fn arg(lw: &mut Lowerer, a: &Args, op: ReduceOp) -> R {
    let x = a.tensor(lw, "self")?;
    let keepdim = a.bool_or("keepdim", false)?;
    match a.opt_int("dim")? {
        Some(d) => {
            let ax = reduced_dim(&x, d)?;
            require_non_empty(lw, &x, &ax)?;
            Ok(vec![reduce(lw, &x, &ax, keepdim, op, DType::I64, &a.node_name())])
        }
        None => {
            // Over the flattened tensor: reshape to 1-D first.
            let n = SymExpr::product(x.sizes.iter());
            let flat = lw.reshape(&x, &[n], &a.node_name());
            require_non_empty(lw, &flat, &[0])?;
            let r = reduce(lw, &flat, &[0], false, op, DType::I64, &a.node_name());
            Ok(vec![if keepdim { lw.reshape(&r, &vec![SymExpr::Int(1); x.rank()], &a.node_name()) } else { r }])
        }
    }
}

/// (values, indices) of the maximum (minimum) along `dim`: the first one on ties, the
/// first NaN if there is one (NaN propagates, as in torch).
fn extremum_dim(lw: &mut Lowerer, a: &Args, value: ReduceOp, index: ReduceOp) -> R {
    let x = a.tensor(lw, "self")?;
    let ax = reduced_dim(&x, a.int("dim")?)?;
    require_non_empty(lw, &x, &ax)?;
    let keepdim = a.bool_or("keepdim", false)?;
    let name = a.node_name();
    let values = reduce(lw, &x, &ax, keepdim, value, x.dtype, &format!("{name}.values"));
    let indices = reduce(lw, &x, &ax, keepdim, index, DType::I64, &format!("{name}.indices"));
    Ok(vec![values, indices])
}

/// Variance with `correction` (Bessel's is 1): the squared deviations from the mean,
/// summed in a second pass for accuracy, over `max(0, N - correction)`.
fn var(lw: &mut Lowerer, a: &Args, correction: f64) -> R {
    let x = a.tensor(lw, "self")?;
    if !x.dtype.is_float() {
        return Err(format!("var is defined for floating dtypes only, not {}", x.dtype));
    }
    let ax = axes(a, x.rank())?;
    let keepdim = a.bool_or("keepdim", false)?;
    let name = a.node_name();
    let (_, deviation) = mean_and_deviation(lw, &x, &ax, x.dtype, &name)?;
    let ssq = sum_of_squares(lw, &x.sizes, &deviation, &ax, keepdim, &name);
    let c = |v: f64| expr::constant(Scalar::F(v), x.dtype);
    let dof = binary(Prim::Max, binary(Prim::Sub, element_count(&x, &ax, x.dtype), c(correction)), c(0.0));
    let body = binary(Prim::Div, ssq.load(&vars(ssq.rank())), dof);
    Ok(vec![TensorValue::lazy(x.dtype, ssq.sizes.clone(), body)])
}

/// The number of elements of `x` over `axes`, as a value of `dtype`.
fn element_count(x: &TensorValue, axes: &[usize], dtype: DType) -> E {
    cast(expr::index_value(Affine::constant(SymExpr::product(axes.iter().map(|&d| &x.sizes[d])))), dtype)
}

/// The mean of `x` over `axes` (kept as size-1 dimensions, in a buffer: every element
/// reads it) and the deviation `x - mean` of each element, in `dtype`.
fn mean_and_deviation(
    lw: &mut Lowerer,
    x: &TensorValue,
    axes: &[usize],
    dtype: DType,
    name: &str,
) -> Result<(TensorValue, E), String> {
    let idx = vars(x.rank());
    let sum = reduce(lw, x, axes, true, ReduceOp::Sum, dtype, &format!("{name}.sum"));
    let mean =
        TensorValue::lazy(dtype, sum.sizes.clone(), binary(Prim::Div, sum.load(&idx), element_count(x, axes, dtype)));
    let mean = lw.realize(&mean, &format!("{name}.mean"));
    let deviation = binary(Prim::Sub, cast(x.load(&idx), dtype), mean.expand(&x.sizes)?.load(&idx));
    Ok((mean, deviation))
}

/// The sum over `axes` of `deviation * deviation` (a body over the index of a tensor of
/// `sizes`).
fn sum_of_squares(
    lw: &mut Lowerer,
    sizes: &[SymExpr],
    deviation: &E,
    axes: &[usize],
    keepdim: bool,
    name: &str,
) -> TensorValue {
    let squares =
        TensorValue::lazy(deviation.dtype, sizes.to_vec(), binary(Prim::Mul, deviation.clone(), deviation.clone()));
    reduce(lw, &squares, axes, keepdim, ReduceOp::Sum, deviation.dtype, &format!("{name}.ssq"))
}

/// any/all: max/min over the values as bools.
fn logical(lw: &mut Lowerer, a: &Args, op: ReduceOp) -> R {
    let x = a.tensor(lw, "self")?;
    let ax = axes(a, x.rank())?;
    let keepdim = a.bool_or("keepdim", false)?;
    let b = TensorValue::lazy(DType::Bool, x.sizes.clone(), cast(x.load(&vars(x.rank())), DType::Bool));
    Ok(vec![reduce(lw, &b, &ax, keepdim, op, DType::Bool, &a.node_name())])
}

/// softmax = exp(x - max) / sum(exp(x - max)); log_softmax = x - max - log(sum(...)).
fn softmax(lw: &mut Lowerer, a: &Args, log: bool) -> R {
    let x = a.tensor(lw, "self")?;
    let dim = norm_dim(a.int("dim")?, x.rank())?;
    let mode = if log { softmax_mode::LOG_SOFTMAX } else { softmax_mode::SOFTMAX };
    Ok(vec![softmax_of(lw, &x, dim, mode, &a.node_name())?])
}

/// Softmax of `x` along `dim` in one of `aotc_abi::softmax`'s modes (softmax, log-softmax,
/// safe softmax), in `x`'s floating dtype (float32 for integers).
pub(crate) fn softmax_of(
    lw: &mut Lowerer,
    x: &TensorValue,
    dim: usize,
    mode: i64,
    name: &str,
) -> Result<TensorValue, String> {
    let d = float_of(x.dtype);
    if let Some(out) = rows::softmax(lw, x, dim, mode, name) {
        return Ok(out);
    }
    let m = reduce(lw, x, &[dim], true, ReduceOp::Max, d, &format!("{name}.max"));
    let idx = vars(x.rank());
    let mx = m.expand(&x.sizes)?.load(&idx);
    let shifted = binary(Prim::Sub, cast(x.load(&idx), d), mx);
    let e = TensorValue::lazy(d, x.sizes.clone(), unary(Prim::Exp, shifted.clone()));
    let s = reduce(lw, &e, &[dim], true, ReduceOp::Sum, d, &format!("{name}.sum"));
    let sum = s.expand(&x.sizes)?.load(&idx);
    let body = if mode == softmax_mode::LOG_SOFTMAX {
        binary(Prim::Sub, shifted, unary(Prim::Log, sum))
    } else {
        binary(Prim::Div, unary(Prim::Exp, shifted), sum)
    };
    if mode != softmax_mode::SAFE_SOFTMAX {
        return Ok(TensorValue::lazy(d, x.sizes.clone(), body));
    }
    // Zero where the row holds nothing but -inf: where no value is above it.
    let minus_infinity = expr::constant(Scalar::F(f64::NEG_INFINITY), d);
    let live = binary(Prim::Ne, cast(x.load(&idx), d), minus_infinity);
    let live = TensorValue::lazy(DType::Bool, x.sizes.clone(), live);
    let any_live = reduce(lw, &live, &[dim], true, ReduceOp::Max, DType::Bool, &format!("{name}.live"));
    let keep = any_live.expand(&x.sizes)?.load(&idx);
    Ok(TensorValue::lazy(d, x.sizes.clone(), expr::select(keep, body, expr::constant(Scalar::F(0.0), d))))
}

/// (out, mean, rstd) over the trailing `normalized_shape` dims:
/// out = (x - mean) * rsqrt(var + eps) * weight + bias, with the biased variance.
fn layer_norm(lw: &mut Lowerer, a: &Args) -> R {
    let x = a.tensor(lw, "input")?;
    let normalized_shape = a.sym_ints(lw, "normalized_shape")?;
    let norm = normalized_shape.len();
    let trailing = x.rank().checked_sub(norm).map(|lead| &x.sizes[lead..]);
    if trailing != Some(&normalized_shape[..]) {
        let show = |s: &[SymExpr]| s.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(", ");
        return Err(format!(
            "normalized_shape [{}] is not the trailing shape of the input [{}]",
            show(&normalized_shape),
            show(&x.sizes)
        ));
    }
    let (w, b) = (a.opt_tensor(lw, "weight")?, a.opt_tensor(lw, "bias")?);
    let eps = a.scalar("eps")?.as_f64();
    let d = float_of(x.dtype);
    let name = a.node_name();
    let rank = x.rank();
    let stats_read = a.node.outputs.iter().skip(1).any(|o| lw.is_used(o));
    if let Some(outs) = rows::layer_norm(lw, &x, rank - norm, w.as_ref(), b.as_ref(), eps, stats_read, &name) {
        return Ok(outs);
    }
    let axes: Vec<usize> = (rank - norm..rank).collect();
    let idx = vars(rank);
    let (mean, centered) = mean_and_deviation(lw, &x, &axes, d, &name)?;
    let ssq = sum_of_squares(lw, &x.sizes, &centered, &axes, true, &name);
    let var = binary(Prim::Div, ssq.load(&idx), element_count(&x, &axes, d));
    let eps = expr::constant(Scalar::F(eps), d);
    let rstd = TensorValue::lazy(d, ssq.sizes.clone(), unary(Prim::Rsqrt, binary(Prim::Add, var, eps)));
    let rstd = lw.realize(&rstd, &format!("{name}.rstd"));
    let mut out = binary(Prim::Mul, centered, rstd.expand(&x.sizes)?.load(&idx));
    if let Some(w) = w {
        out = binary(Prim::Mul, out, cast(w.expand(&x.sizes)?.load(&idx), d));
    }
    if let Some(b) = b {
        out = binary(Prim::Add, out, cast(b.expand(&x.sizes)?.load(&idx), d));
    }
    Ok(vec![TensorValue::lazy(x.dtype, x.sizes.clone(), cast(out, x.dtype)), mean, rstd])
}
