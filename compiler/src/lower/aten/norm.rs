//! Normalization: batch norm (inference with running statistics, training with batch
//! statistics), group norm, and the backward of layer and group norm; the p-norm
//! distances cdist and pdist live in [`distance`].
//!
//! Every norm is the same steps over some axes of the input: the statistics (`moments`:
//! the mean and 1/sqrt(biased variance + eps)), the normalized value `(x - mean) * rstd`,
//! and a per-channel affine transform. Group norm sees its input as [N, G, C/G, HxW], so
//! that a group is a set of trailing axes and its channel is an affine index.

mod distance;

use super::conv::epilogue::{fold_batch_norm, BatchNorm};
use super::pool::with_dtype;
use super::promote::float_of;
use super::reduction::reduce;
use super::registry::LowerFn;
use crate::frontend::schema::Argument;
use crate::ir::expr::{self, binary, cast, unary, Affine, E};
use crate::ir::{Prim, ReduceOp, Scalar};
use crate::lower::args::Args;
use crate::lower::checks::show;
use crate::lower::tensor::{vars, TensorValue};
use crate::lower::Lowerer;
use aotc_abi::manifest::GuardOp;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

type R = Result<Vec<TensorValue>, String>;

pub const OPS: &[(&str, LowerFn)] = &[
    ("_native_batch_norm_legit_no_training.default", batch_norm_inference),
    ("_native_batch_norm_legit.default", batch_norm_legit),
    ("_native_batch_norm_legit.no_stats", batch_norm_training),
    ("native_group_norm.default", group_norm),
    ("native_layer_norm_backward.default", layer_norm_backward),
    ("native_group_norm_backward.default", group_norm_backward),
    ("_cdist_forward.default", distance::cdist),
    ("_pdist_forward.default", distance::pdist),
];

/// The dtype statistics are computed in: float32 for the 16-bit floats (torch's opmath).
pub(super) fn opmath(d: DType) -> DType {
    match d {
        DType::F16 | DType::BF16 => DType::F32,
        d => float_of(d),
    }
}

fn float_input(lw: &Lowerer, a: &Args, name: &str, min_rank: usize) -> Result<TensorValue, String> {
    let x = a.tensor(lw, name)?;
    if !x.dtype.is_float() {
        return Err(format!("{name} must be a floating-point tensor, got {}", x.dtype));
    }
    if x.rank() < min_rank {
        return Err(format!("{name} must have at least {min_rank} dimensions, got rank {}", x.rank()));
    }
    Ok(x)
}

/// `t` seen with `sizes`, which must hold as many elements (torch accepts a per-channel
/// parameter of any shape holding one element per channel, and statistics kept or not).
fn reshaped(
    lw: &mut Lowerer,
    t: &TensorValue,
    sizes: &[SymExpr],
    what: &str,
    name: &str,
) -> Result<TensorValue, String> {
    let want = SymExpr::product(sizes.iter());
    lw.require(
        SymExpr::product(t.sizes.iter()),
        GuardOp::Eq,
        want.clone(),
        &format!("{what} must hold {want} elements ([{}])", show(sizes)),
    )?;
    Ok(if t.sizes == sizes { t.clone() } else { lw.reshape(t, sizes, &format!("{name}.{what}")) })
}

fn opt_reshaped(
    lw: &mut Lowerer,
    a: &Args,
    arg: &str,
    sizes: &[SymExpr],
    name: &str,
) -> Result<Option<TensorValue>, String> {
    a.opt_tensor(lw, arg)?.map(|t| reshaped(lw, &t, sizes, arg, name)).transpose()
}

/// Every dimension of `t` equals `x`'s (a gradient and the input it belongs to).
fn require_same_sizes(lw: &mut Lowerer, t: &TensorValue, x: &TensorValue, what: &str) -> Result<(), String> {
    if t.rank() != x.rank() {
        return Err(format!("{what} has rank {}, the input rank {}", t.rank(), x.rank()));
    }
    for (d, (got, want)) in t.sizes.iter().zip(&x.sizes).enumerate() {
        lw.require(got.clone(), GuardOp::Eq, want.clone(), &format!("{what} matches the input in dimension {d}"))?;
    }
    Ok(())
}

fn count_of(sizes: &[SymExpr], axes: &[usize], d: DType) -> E {
    cast(expr::index_value(Affine::constant(SymExpr::product(axes.iter().map(|&i| &sizes[i])))), d)
}

/// `v`'s element at output index `idx` of a value of `sizes` (broadcasting `v`), as `d`.
fn at(v: &TensorValue, sizes: &[SymExpr], idx: &[Affine], d: DType) -> Result<E, String> {
    Ok(cast(v.expand(sizes)?.load(idx), d))
}

/// The mean of `x` over `axes` (kept as size-1 dimensions), in `d`; the sum is realized.
fn mean(lw: &mut Lowerer, x: &TensorValue, axes: &[usize], d: DType, name: &str) -> TensorValue {
    let sum = reduce(lw, x, axes, true, ReduceOp::Sum, d, name);
    let body = binary(Prim::Div, sum.load(&vars(sum.rank())), count_of(&x.sizes, axes, d));
    TensorValue::lazy(d, sum.sizes.clone(), body)
}

/// The statistics of `x` over `axes`, kept as size-1 dimensions and computed in `d`: the
/// mean and 1/sqrt(biased variance + eps) (two passes, as torch's CPU kernels), both
/// realized since every element of the output reads them.
fn moments(
    lw: &mut Lowerer,
    x: &TensorValue,
    axes: &[usize],
    eps: f64,
    d: DType,
    name: &str,
) -> Result<(TensorValue, TensorValue), String> {
    let m = mean(lw, x, axes, d, &format!("{name}.sum"));
    let m = lw.realize(&m, &format!("{name}.mean"));
    let c = centered(x, &m, d)?;
    let squares = TensorValue::lazy(d, x.sizes.clone(), binary(Prim::Mul, c.clone(), c));
    let var = mean(lw, &squares, axes, d, &format!("{name}.ssq"));
    let eps = expr::constant(Scalar::F(eps), d);
    let rstd = unary(Prim::Rsqrt, binary(Prim::Add, var.load(&vars(var.rank())), eps));
    let rstd = lw.realize(&TensorValue::lazy(d, var.sizes.clone(), rstd), &format!("{name}.rstd"));
    Ok((m, rstd))
}

/// `x - mean` over `x`'s sizes, in `d` (the mean broadcast).
fn centered(x: &TensorValue, mean: &TensorValue, d: DType) -> Result<E, String> {
    let idx = vars(x.rank());
    Ok(binary(Prim::Sub, cast(x.load(&idx), d), at(mean, &x.sizes, &idx, d)?))
}

/// `(x - mean) * rstd` over `x`'s sizes, in `d` (the statistics broadcast).
fn normalized(x: &TensorValue, mean: &TensorValue, rstd: &TensorValue, d: DType) -> Result<E, String> {
    Ok(binary(Prim::Mul, centered(x, mean, d)?, at(rstd, &x.sizes, &vars(x.rank()), d)?))
}

/// An empty [0] result: the statistics batch norm does not save in inference.
fn empty(dtype: DType) -> TensorValue {
    TensorValue::lazy(dtype, vec![SymExpr::Int(0)], expr::constant(Scalar::I(0), dtype))
}

fn eps(a: &Args) -> Result<f64, String> {
    Ok(a.scalar("eps")?.as_f64())
}

/// Batch norm's output `x * scale[c] + shift[c]` along channel dimension 1, with
/// scale = weight * rstd and shift = bias - mean * scale (torch's CPU form), both [C]
/// vectors realized once.
fn batch_norm_output(
    lw: &mut Lowerer,
    a: &Args,
    x: &TensorValue,
    mean: &TensorValue,
    rstd: &TensorValue,
    d: DType,
    name: &str,
) -> Result<TensorValue, String> {
    let channels = [x.sizes[1].clone()];
    let c = vars(1);
    let mut scale = rstd.load(&c);
    if let Some(w) = opt_reshaped(lw, a, "weight", &channels, name)? {
        scale = binary(Prim::Mul, cast(w.load(&c), d), scale);
    }
    let scale = lw.realize(&TensorValue::lazy(d, channels.to_vec(), scale), &format!("{name}.scale"));
    let mean_scale = binary(Prim::Mul, mean.load(&c), scale.load(&c));
    let shift = match opt_reshaped(lw, a, "bias", &channels, name)? {
        Some(b) => binary(Prim::Sub, cast(b.load(&c), d), mean_scale),
        None => unary(Prim::Neg, mean_scale),
    };
    let shift = lw.realize(&TensorValue::lazy(d, channels.to_vec(), shift), &format!("{name}.shift"));
    let idx = vars(x.rank());
    let channel = [idx[1].clone()];
    let body = binary(Prim::Add, binary(Prim::Mul, cast(x.load(&idx), d), scale.load(&channel)), shift.load(&channel));
    Ok(TensorValue::lazy(x.dtype, x.sizes.clone(), cast(body, x.dtype)))
}

/// Inference: the running statistics normalize; the saved statistics are empty.
fn batch_norm_inference(lw: &mut Lowerer, a: &Args) -> R {
    let x = float_input(lw, a, "input", 2)?;
    let (d, name) = (opmath(x.dtype), a.node_name());
    let channels = [x.sizes[1].clone()];
    let mean = reshaped(lw, &a.tensor(lw, "running_mean")?, &channels, "running_mean", &name)?;
    let var = reshaped(lw, &a.tensor(lw, "running_var")?, &channels, "running_var", &name)?;
    // Folded into the convolution that computes its input, when it can be.
    if a.get("input").is_some_and(|i| lw.used_once(i)) {
        let (gamma, beta) =
            (opt_reshaped(lw, a, "weight", &channels, &name)?, opt_reshaped(lw, a, "bias", &channels, &name)?);
        let bn = BatchNorm { gamma: gamma.as_ref(), beta: beta.as_ref(), mean: &mean, var: &var, eps: eps(a)? };
        if let Some(out) = fold_batch_norm(lw, &x, &bn) {
            return Ok(vec![out, empty(x.dtype), empty(x.dtype)]);
        }
    }
    let eps = expr::constant(Scalar::F(eps(a)?), d);
    let c = vars(1);
    let mean = TensorValue::lazy(d, channels.to_vec(), cast(mean.load(&c), d));
    let rstd =
        TensorValue::lazy(d, channels.to_vec(), unary(Prim::Rsqrt, binary(Prim::Add, cast(var.load(&c), d), eps)));
    let out = batch_norm_output(lw, a, &x, &mean, &rstd, d, &name)?;
    Ok(vec![out, empty(x.dtype), empty(x.dtype)])
}

/// Training: statistics over every dimension but the channel's; (out, mean, rstd).
fn batch_norm_training(lw: &mut Lowerer, a: &Args) -> R {
    if !a.bool_or("training", false)? {
        return Err("batch norm without running statistics must be in training mode (training=True)".into());
    }
    let x = float_input(lw, a, "input", 2)?;
    let (d, name) = (opmath(x.dtype), a.node_name());
    let axes: Vec<usize> = (0..x.rank()).filter(|&i| i != 1).collect();
    let (mean, rstd) = moments(lw, &x, &axes, eps(a)?, d, &name)?;
    let channels = [x.sizes[1].clone()];
    let (mean, rstd) = (lw.reshape(&mean, &channels, &name), lw.reshape(&rstd, &channels, &name));
    let out = batch_norm_output(lw, a, &x, &mean, &rstd, d, &name)?;
    Ok(vec![out, with_dtype(&mean, x.dtype), with_dtype(&rstd, x.dtype)])
}

/// With running statistics: inference only (training would update them in place, which
/// a functional export expresses with another operator).
fn batch_norm_legit(lw: &mut Lowerer, a: &Args) -> R {
    if a.bool_or("training", false)? {
        return Err("batch norm in training mode updates running_mean and running_var in place; aotc compiles inference programs (export the model in eval mode)".into());
    }
    batch_norm_inference(lw, a)
}

/// A group norm's sizes: N, C, HxW and the group count, checked against the input.
struct Groups {
    n: SymExpr,
    c: SymExpr,
    hw: SymExpr,
    g: SymExpr,
}

impl Groups {
    fn parse(lw: &mut Lowerer, a: &Args, x: &TensorValue) -> Result<Groups, String> {
        let (n, c, hw) = (a.sym_int(lw, "N")?, a.sym_int(lw, "C")?, a.sym_int(lw, "HxW")?);
        let group = a.int("group")?;
        if group <= 0 {
            return Err(format!("group must be positive, got {group}"));
        }
        let g = SymExpr::Int(group);
        lw.require(
            SymExpr::product(x.sizes.iter()),
            GuardOp::Eq,
            SymExpr::mul([n.clone(), c.clone(), hw.clone()]),
            "the input holds N * C * HxW elements",
        )?;
        lw.require(
            SymExpr::modulo(c.clone(), g.clone()),
            GuardOp::Eq,
            SymExpr::Int(0),
            "the channels divide into groups",
        )?;
        Ok(Groups { n, c, hw, g })
    }

    /// Channels per group.
    fn per_group(&self) -> SymExpr {
        SymExpr::floor_div(self.c.clone(), self.g.clone())
    }

    /// [N, G, C/G, HxW]: a group is the last two axes.
    fn grouped(&self) -> Vec<SymExpr> {
        vec![self.n.clone(), self.g.clone(), self.per_group(), self.hw.clone()]
    }

    /// A per-channel [C] parameter as [G, C/G].
    fn channels(&self) -> Vec<SymExpr> {
        vec![self.g.clone(), self.per_group()]
    }

    /// The [N, G] statistics as [N, G, 1, 1].
    fn stats(&self) -> Vec<SymExpr> {
        vec![self.n.clone(), self.g.clone(), SymExpr::Int(1), SymExpr::Int(1)]
    }
}

/// A per-channel [G, C/G] value at index (n, g, c, hw) of the grouped view.
fn per_channel(v: &TensorValue, idx: &[Affine], d: DType) -> E {
    cast(v.load(&idx[1..3]), d)
}

/// (out, mean [N, G], rstd [N, G]).
fn group_norm(lw: &mut Lowerer, a: &Args) -> R {
    let x = float_input(lw, a, "input", 2)?;
    let groups = Groups::parse(lw, a, &x)?;
    normalize_groups(lw, a, &x, &groups, eps(a)?)
}

/// `group_norm` (not Core ATen): native_group_norm's output, its N, C and HxW the input's
/// own sizes.
pub(crate) fn group_norm_of_input(lw: &mut Lowerer, a: &Args) -> R {
    let x = float_input(lw, a, "input", 2)?;
    let group = a.int("num_groups")?;
    if group <= 0 {
        return Err(format!("num_groups must be positive, got {group}"));
    }
    let groups = Groups {
        n: x.sizes[0].clone(),
        c: x.sizes[1].clone(),
        hw: SymExpr::product(x.sizes[2..].iter()),
        g: SymExpr::Int(group),
    };
    lw.require(
        SymExpr::modulo(groups.c.clone(), groups.g.clone()),
        GuardOp::Eq,
        SymExpr::Int(0),
        "the channels divide into groups",
    )?;
    let eps = a.opt_scalar("eps")?.map_or(1e-5, Scalar::as_f64);
    let mut outs = normalize_groups(lw, a, &x, &groups, eps)?;
    outs.truncate(1);
    Ok(outs)
}

/// (out, mean [N, G], rstd [N, G]) of `x` normalized per group of `groups`.
fn normalize_groups(lw: &mut Lowerer, a: &Args, x: &TensorValue, groups: &Groups, eps: f64) -> R {
    let (d, name) = (opmath(x.dtype), a.node_name());
    let xg = lw.reshape(x, &groups.grouped(), &name);
    let (mean, rstd) = moments(lw, &xg, &[2, 3], eps, d, &name)?;
    let idx = vars(4);
    let mut out = normalized(&xg, &mean, &rstd, d)?;
    if let Some(w) = opt_reshaped(lw, a, "weight", &groups.channels(), &name)? {
        out = binary(Prim::Mul, out, per_channel(&w, &idx, d));
    }
    if let Some(b) = opt_reshaped(lw, a, "bias", &groups.channels(), &name)? {
        out = binary(Prim::Add, out, per_channel(&b, &idx, d));
    }
    let out = TensorValue::lazy(x.dtype, xg.sizes.clone(), cast(out, x.dtype));
    let out = lw.reshape(&out, &x.sizes, &name);
    let stats = [groups.n.clone(), groups.g.clone()];
    let mean = lw.reshape(&with_dtype(&mean, x.dtype), &stats, &name);
    let rstd = lw.reshape(&with_dtype(&rstd, x.dtype), &stats, &name);
    Ok(vec![out, mean, rstd])
}

/// The gradient of `(x - mean) * rstd` (normalized over `axes`) given `g`, the gradient
/// of the normalized value: rstd * (g - mean(g) - x_hat * mean(g * x_hat)).
fn normalized_grad(
    lw: &mut Lowerer,
    g: &TensorValue,
    x_hat: &TensorValue,
    rstd: &TensorValue,
    axes: &[usize],
    d: DType,
    name: &str,
) -> Result<TensorValue, String> {
    let sizes = &g.sizes;
    let idx = vars(g.rank());
    let g_x_hat = TensorValue::lazy(d, sizes.clone(), binary(Prim::Mul, g.load(&idx), x_hat.load(&idx)));
    let mean_g = mean(lw, g, axes, d, &format!("{name}.sum_grad"));
    let mean_g_x_hat = mean(lw, &g_x_hat, axes, d, &format!("{name}.sum_grad_x_hat"));
    let inner = binary(
        Prim::Sub,
        binary(Prim::Sub, g.load(&idx), at(&mean_g, sizes, &idx, d)?),
        binary(Prim::Mul, x_hat.load(&idx), at(&mean_g_x_hat, sizes, &idx, d)?),
    );
    Ok(TensorValue::lazy(d, sizes.clone(), binary(Prim::Mul, at(rstd, sizes, &idx, d)?, inner)))
}

/// The gradients of an affine `x_hat * weight + bias` whose parameters broadcast over
/// `axes`: (sum of dy * x_hat, sum of dy) over them.
fn affine_grads(
    lw: &mut Lowerer,
    dy: &TensorValue,
    x_hat: &TensorValue,
    axes: &[usize],
    d: DType,
    name: &str,
) -> (TensorValue, TensorValue) {
    let idx = vars(dy.rank());
    let dy_x_hat = TensorValue::lazy(d, dy.sizes.clone(), binary(Prim::Mul, cast(dy.load(&idx), d), x_hat.load(&idx)));
    let grad_weight = reduce(lw, &dy_x_hat, axes, false, ReduceOp::Sum, d, &format!("{name}.grad_weight"));
    let grad_bias = reduce(lw, dy, axes, false, ReduceOp::Sum, d, &format!("{name}.grad_bias"));
    (grad_weight, grad_bias)
}

/// `output_mask`: which of (grad_input, grad_weight, grad_bias) to compute. The others
/// are None outputs, so they are left out of the results.
fn output_mask(a: &Args) -> Result<[bool; 3], String> {
    match a.get("output_mask") {
        Some(Argument::Bools(m)) if m.len() == 3 => Ok([m[0], m[1], m[2]]),
        other => Err(format!("argument 'output_mask' should be 3 bools, got {other:?}")),
    }
}

/// The masked-in gradients, each cast to `dtype` and seen with its sizes.
fn masked(
    lw: &mut Lowerer,
    mask: [bool; 3],
    grads: [(TensorValue, Vec<SymExpr>); 3],
    dtype: DType,
    name: &str,
) -> Vec<TensorValue> {
    grads
        .into_iter()
        .zip(mask)
        .filter(|(_, on)| *on)
        .map(|((v, sizes), _)| {
            let v = with_dtype(&v, dtype);
            if v.sizes == sizes {
                v
            } else {
                lw.reshape(&v, &sizes, name)
            }
        })
        .collect()
}

/// The backward of a normalization, in a view of its input where the statistics
/// broadcast and the normalized axes are `norm_axes`: (grad_input, grad_weight,
/// grad_bias), the parameter gradients summed over `param_axes`. `weight` is the weight
/// at the view's index, if there is one.
#[allow(clippy::too_many_arguments)]
fn norm_backward(
    lw: &mut Lowerer,
    dy: &TensorValue,
    x: &TensorValue,
    mean: &TensorValue,
    rstd: &TensorValue,
    weight: Option<E>,
    norm_axes: &[usize],
    param_axes: &[usize],
    d: DType,
    name: &str,
) -> Result<[TensorValue; 3], String> {
    let x_hat = TensorValue::lazy(d, x.sizes.clone(), normalized(x, mean, rstd, d)?);
    let x_hat = lw.realize(&x_hat, &format!("{name}.x_hat"));
    let dy_value = cast(dy.load(&vars(x.rank())), d);
    let g = match weight {
        Some(w) => binary(Prim::Mul, dy_value, w),
        None => dy_value,
    };
    let g = TensorValue::lazy(d, x.sizes.clone(), g);
    let grad_input = normalized_grad(lw, &g, &x_hat, rstd, norm_axes, d, name)?;
    let (grad_weight, grad_bias) = affine_grads(lw, dy, &x_hat, param_axes, d, name);
    Ok([grad_input, grad_weight, grad_bias])
}

/// `output_mask` and the weight: torch cannot compute grad_weight without a weight.
fn mask_with(a: &Args, weight: &Option<TensorValue>) -> Result<[bool; 3], String> {
    let mask = output_mask(a)?;
    if mask[1] && weight.is_none() {
        return Err("grad_weight is requested (output_mask) without a weight".into());
    }
    Ok(mask)
}

/// The backward of native_layer_norm over the trailing `normalized_shape` dimensions.
fn layer_norm_backward(lw: &mut Lowerer, a: &Args) -> R {
    let x = float_input(lw, a, "input", 0)?;
    let dy = a.tensor(lw, "grad_out")?;
    require_same_sizes(lw, &dy, &x, "grad_out")?;
    let normalized_shape = a.sym_ints(lw, "normalized_shape")?;
    let lead =
        x.rank().checked_sub(normalized_shape.len()).filter(|&l| x.sizes[l..] == normalized_shape[..]).ok_or_else(
            || {
                format!(
                    "normalized_shape [{}] is not the trailing shape of the input [{}]",
                    show(&normalized_shape),
                    show(&x.sizes)
                )
            },
        )?;
    let (d, name) = (opmath(x.dtype), a.node_name());
    let stat_sizes: Vec<SymExpr> =
        x.sizes.iter().enumerate().map(|(i, s)| if i < lead { s.clone() } else { SymExpr::Int(1) }).collect();
    let mean = reshaped(lw, &a.tensor(lw, "mean")?, &stat_sizes, "mean", &name)?;
    let rstd = reshaped(lw, &a.tensor(lw, "rstd")?, &stat_sizes, "rstd", &name)?;
    let weight = opt_reshaped(lw, a, "weight", &normalized_shape, &name)?;
    let mask = mask_with(a, &weight)?;
    let weight = weight.map(|w| at(&w, &x.sizes, &vars(x.rank()), d)).transpose()?;
    let norm_axes: Vec<usize> = (lead..x.rank()).collect();
    let outer_axes: Vec<usize> = (0..lead).collect();
    let [grad_input, grad_weight, grad_bias] =
        norm_backward(lw, &dy, &x, &mean, &rstd, weight, &norm_axes, &outer_axes, d, &name)?;
    let grads = [(grad_input, x.sizes.clone()), (grad_weight, normalized_shape.clone()), (grad_bias, normalized_shape)];
    Ok(masked(lw, mask, grads, x.dtype, &name))
}

/// The backward of native_group_norm, in the grouped [N, G, C/G, HxW] view.
fn group_norm_backward(lw: &mut Lowerer, a: &Args) -> R {
    let x = float_input(lw, a, "input", 2)?;
    let dy = a.tensor(lw, "grad_out")?;
    require_same_sizes(lw, &dy, &x, "grad_out")?;
    let (d, name) = (opmath(x.dtype), a.node_name());
    let groups = Groups::parse(lw, a, &x)?;
    let xg = lw.reshape(&x, &groups.grouped(), &name);
    let dyg = lw.reshape(&dy, &groups.grouped(), &name);
    let mean = reshaped(lw, &a.tensor(lw, "mean")?, &groups.stats(), "mean", &name)?;
    let rstd = reshaped(lw, &a.tensor(lw, "rstd")?, &groups.stats(), "rstd", &name)?;
    let weight = opt_reshaped(lw, a, "weight", &groups.channels(), &name)?;
    let mask = mask_with(a, &weight)?;
    let weight = weight.map(|w| per_channel(&w, &vars(4), d));
    let [grad_input, grad_weight, grad_bias] =
        norm_backward(lw, &dyg, &xg, &mean, &rstd, weight, &[2, 3], &[0, 3], d, &name)?;
    let channels = vec![groups.c.clone()];
    let grads = [(grad_input, x.sizes.clone()), (grad_weight, channels.clone()), (grad_bias, channels)];
    Ok(masked(lw, mask, grads, x.dtype, &name))
}
