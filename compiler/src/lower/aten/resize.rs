//! Resampling: upsampling (nearest, linear, cubic), grid sampling ([`grid`]) and col2im
//! ([`fold`]).
//!
//! Every output element interpolates input elements at positions computed from its index
//! (and, for grid sampling, from data): per spatial axis a few taps, each an input index
//! and a weight. The positions follow torch's CPU kernels formula for formula, in the
//! same precision, so that the chosen elements and weights are torch's; the input is
//! read through `LoadAt`, which cannot leave its buffer whatever a position is.

mod fold;
mod grid;

use super::norm::opmath;
use super::pad::{int, int_const, var};
use super::registry::LowerFn;
use crate::frontend::schema::Argument;
use crate::ir::expr::{self, binary, cast, unary, E};
use crate::ir::{Prim, Scalar};
use crate::lower::args::Args;
use crate::lower::tensor::TensorValue;
use crate::lower::Lowerer;
use aotc_abi::manifest::GuardOp;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

type R = Result<Vec<TensorValue>, String>;

pub const OPS: &[(&str, LowerFn)] = &[
    ("upsample_nearest2d.vec", |lw, a| upsample(lw, a, 2, Interp::Nearest)),
    ("upsample_bilinear2d.vec", |lw, a| upsample(lw, a, 2, Interp::Linear)),
    ("upsample_bicubic2d.vec", |lw, a| upsample(lw, a, 2, Interp::Cubic)),
    ("grid_sampler_2d.default", grid::grid_sampler_2d),
    ("col2im.default", fold::col2im),
];

pub(super) fn float_const(v: f64, d: DType) -> E {
    expr::constant(Scalar::F(v), d)
}

/// One input position along one axis: its index, its weight (none for nearest), and
/// whether it lies inside the input where it may not (grid sampling with zero padding).
pub(super) struct Tap {
    pub index: E,
    pub weight: Option<E>,
    pub inside: Option<E>,
}

fn both(a: Option<E>, b: Option<E>) -> Option<E> {
    match (a, b) {
        (Some(a), Some(b)) => Some(binary(Prim::And, a, b)),
        (a, b) => a.or(b),
    }
}

/// The interpolation over one tap per spatial axis, nested as torch nests it (the last
/// axis innermost): `Σ_a (Σ_b ... x[lead, a, b, ...] * w_b ...) * w_a`, in `d`. A tap
/// outside the input reads 0. `x` must be realized (every tap reads it).
pub(super) fn interpolate(lw: &mut Lowerer, x: &TensorValue, lead: &[E], axes: &[Vec<Tap>], d: DType, name: &str) -> E {
    fn go(
        lw: &mut Lowerer,
        x: &TensorValue,
        index: &mut Vec<E>,
        inside: Option<E>,
        axes: &[Vec<Tap>],
        d: DType,
        name: &str,
    ) -> E {
        let Some((taps, rest)) = axes.split_first() else {
            let value = cast(lw.load_at_indices(x, index, name), d);
            return match inside {
                Some(c) => expr::select(c, value, float_const(0.0, d)),
                None => value,
            };
        };
        let mut sum: Option<E> = None;
        for tap in taps {
            index.push(tap.index.clone());
            let value = go(lw, x, index, both(inside.clone(), tap.inside.clone()), rest, d, name);
            index.pop();
            let term = match &tap.weight {
                Some(w) => binary(Prim::Mul, value, w.clone()),
                None => value,
            };
            sum = Some(match sum {
                Some(s) => binary(Prim::Add, s, term),
                None => term,
            });
        }
        sum.expect("every axis has a tap")
    }
    go(lw, x, &mut lead.to_vec(), None, axes, d, name)
}

#[derive(Clone, Copy, PartialEq)]
enum Interp {
    Nearest,
    Linear,
    Cubic,
}

/// One spatial axis of an upsampling: the input and output sizes and the scale factor
/// the caller gave, if any.
struct Axis {
    input: SymExpr,
    output: SymExpr,
    scale: Option<f64>,
}

fn opt_floats(a: &Args, name: &str) -> Result<Option<Vec<f64>>, String> {
    match a.get(name) {
        None | Some(Argument::None(_)) => Ok(None),
        Some(Argument::Floats(v)) => Ok(Some(v.clone())),
        other => Err(format!("argument '{name}' should be a list of floats, got {other:?}")),
    }
}

/// `(input * scale)` truncated, as torch computes an output size from a scale factor.
/// Static sizes use the double product itself. A symbolic size uses the exact product
/// with the scale as the dyadic rational it is, which is the double product when that
/// is exact: required at run time (input * numerator <= 2^53).
fn scaled_size(lw: &mut Lowerer, input: &SymExpr, scale: f64) -> Result<SymExpr, String> {
    if !(scale.is_finite() && scale > 0.0) {
        return Err(format!("scale factors must be positive, got {scale}"));
    }
    if let Some(n) = input.as_int() {
        return Ok(SymExpr::Int((n as f64 * scale) as i64));
    }
    let (mut numerator, mut shift) = (scale, 0u32);
    while numerator.fract() != 0.0 {
        numerator *= 2.0;
        shift += 1;
    }
    let numerator = numerator as i64;
    if shift > 52 || numerator >= 1 << 53 {
        return Err(format!(
            "scale factor {scale} of a symbolic size: its output size needs more than double precision"
        ));
    }
    let product = SymExpr::mul([input.clone(), SymExpr::Int(numerator)]);
    lw.require(product.clone(), GuardOp::Le, SymExpr::Int(1 << 53), &format!("the output size {input} * {scale} is computed exactly as {input} * {numerator} / 2^{shift}, which must stay within 2^53"))?;
    let denominator = 1i64 << shift;
    // 4*s * 0.5 is 2*s, not floordiv(4*s, 2): sizes must compare equal structurally.
    Ok(match &product {
        SymExpr::Mul(factors) => match factors.split_first() {
            Some((SymExpr::Int(c), rest)) if c % denominator == 0 => {
                SymExpr::mul(std::iter::once(SymExpr::Int(c / denominator)).chain(rest.iter().cloned()))
            }
            _ => SymExpr::floor_div(product, SymExpr::Int(denominator)),
        },
        _ => SymExpr::floor_div(product, SymExpr::Int(denominator)),
    })
}

/// The spatial axes: from `output_size` or from `scale_factors`, exactly one given.
fn upsample_axes(lw: &mut Lowerer, a: &Args, x: &TensorValue, k: usize) -> Result<Vec<Axis>, String> {
    let given = !matches!(a.get("output_size"), None | Some(Argument::None(_)));
    let scales = opt_floats(a, "scale_factors")?;
    let inputs = &x.sizes[2..];
    let (outputs, scales) = match (given, scales) {
        (true, None) => (a.sym_ints(lw, "output_size")?, vec![None; k]),
        (false, Some(s)) if s.len() == k => {
            let outputs = inputs.iter().zip(&s).map(|(n, &f)| scaled_size(lw, n, f)).collect::<Result<Vec<_>, _>>()?;
            (outputs, s.into_iter().map(Some).collect())
        }
        (false, Some(s)) => return Err(format!("scale_factors has {} entries, expected {k}", s.len())),
        _ => return Err("exactly one of output_size and scale_factors must be given".into()),
    };
    if outputs.len() != k {
        return Err(format!("output_size has {} entries, expected {k}", outputs.len()));
    }
    let mut axes = vec![];
    for (i, ((input, output), scale)) in inputs.iter().zip(outputs).zip(scales).enumerate() {
        for (s, what) in [(input, "input"), (&output, "output")] {
            lw.require(
                SymExpr::Int(1),
                GuardOp::Le,
                s.clone(),
                &format!("upsampling needs a non-empty {what} along spatial dimension {i}"),
            )?;
        }
        axes.push(Axis { input: input.clone(), output, scale });
    }
    Ok(axes)
}

/// A size as a float of `d`.
pub(super) fn float_size(s: &SymExpr, d: DType) -> E {
    match s.as_int() {
        Some(v) => float_const(v as f64, d),
        None => cast(int(s), d),
    }
}

/// `num / den` in `d` (torch divides the sizes as floats); folded when both are static.
pub(super) fn ratio(num: &SymExpr, den: &SymExpr, d: DType) -> E {
    match (num.as_int(), den.as_int()) {
        (Some(n), Some(m)) if d == DType::F32 => float_const((n as f32 / m as f32) as f64, d),
        (Some(n), Some(m)) => float_const(n as f64 / m as f64, d),
        _ => binary(Prim::Div, float_size(num, d), float_size(den, d)),
    }
}

fn minus_one(s: &SymExpr) -> SymExpr {
    SymExpr::add([s.clone(), SymExpr::Int(-1)])
}

/// torch's `area_pixel_compute_scale` in `d`: the input distance of one output step.
fn step(axis: &Axis, align_corners: bool, d: DType) -> E {
    if align_corners {
        // (in - 1) / (out - 1), or 0 for a single output.
        let r = ratio(&minus_one(&axis.input), &minus_one(&axis.output), d);
        return match axis.output.as_int() {
            Some(o) if o > 1 => r,
            Some(_) => float_const(0.0, d),
            None => expr::select(binary(Prim::Gt, int(&axis.output), int_const(1)), r, float_const(0.0, d)),
        };
    }
    match axis.scale.filter(|&s| s > 0.0) {
        // 1/scale in double, then rounded to `d` (a float32 constant for float32).
        Some(s) => float_const(1.0 / s, d),
        None => ratio(&axis.input, &axis.output, d),
    }
}

/// torch's `area_pixel_compute_source_index`: the input coordinate of output index `o`.
fn source_coordinate(step: E, o: E, align_corners: bool, d: DType) -> E {
    let o = cast(o, d);
    if align_corners {
        return binary(Prim::Mul, step, o);
    }
    let half = float_const(0.5, d);
    let c = binary(Prim::Sub, binary(Prim::Mul, step, binary(Prim::Add, o, half.clone())), half);
    expr::select(binary(Prim::Lt, c.clone(), float_const(0.0, d)), float_const(0.0, d), c)
}

/// The taps of output index `o` along `axis`. Nearest: floor(step * o), at most the last
/// index (torch's legacy nearest). Linear: torch's `compute_source_index_and_lambda`,
/// the two neighbours of the source coordinate with weights 1 - λ and λ (each rounded
/// to the input's dtype, as torch stores them), or the same index when the sizes agree.
fn upsample_taps(axis: &Axis, o: E, interp: Interp, align_corners: bool, d: DType, dtype: DType) -> Vec<Tap> {
    let last = int(&minus_one(&axis.input));
    let step = step(axis, align_corners, d);
    let tap = |index: E, weight: Option<E>| Tap { index, weight, inside: None };
    if interp == Interp::Nearest {
        let c = binary(Prim::Mul, step, cast(o, d));
        return vec![tap(binary(Prim::Min, cast(unary(Prim::Floor, c), DType::I64), last), None)];
    }
    if interp == Interp::Cubic {
        return cubic_taps(step, o, last, align_corners, d);
    }
    let c = source_coordinate(step, o.clone(), align_corners, d);
    let i0 = binary(Prim::Min, cast(unary(Prim::Floor, c.clone()), DType::I64), last.clone());
    let lambda = binary(Prim::Sub, c, cast(i0.clone(), d));
    let lambda = binary(Prim::Min, binary(Prim::Max, lambda, float_const(0.0, d)), float_const(1.0, d));
    let i1 = binary(Prim::Add, i0.clone(), cast(binary(Prim::Lt, i0.clone(), last), DType::I64));
    let stored = |w: E| cast(cast(w, dtype), d);
    let (l0, l1) = (stored(binary(Prim::Sub, float_const(1.0, d), lambda.clone())), stored(lambda));
    let same = if axis.input == axis.output {
        Some(true)
    } else {
        match (axis.input.as_int(), axis.output.as_int()) {
            (Some(i), Some(n)) => Some(i == n),
            _ => None,
        }
    };
    let (one, zero) = (float_const(1.0, d), float_const(0.0, d));
    match same {
        Some(true) => vec![tap(o.clone(), Some(one)), tap(o, Some(zero))],
        Some(false) => vec![tap(i0, Some(l0)), tap(i1, Some(l1))],
        None => {
            let same = binary(Prim::Eq, int(&axis.input), int(&axis.output));
            let pick = |a: E, b: E| expr::select(same.clone(), a, b);
            vec![tap(pick(o.clone(), i0), Some(pick(one, l0))), tap(pick(o, i1), Some(pick(zero, l1)))]
        }
    }
}

/// torch's bicubic taps (`upsample_bicubic2d`'s CPU kernel): the four neighbours
/// `floor(c) - 1 ..= floor(c) + 2` of the source coordinate `c` (not clamped below 0, unlike
/// linear), each index clamped into the input, weighted by Keys' cubic convolution with
/// A = -0.75 at the fraction `t = c - floor(c)`.
fn cubic_taps(step: E, o: E, last: E, align_corners: bool, d: DType) -> Vec<Tap> {
    let k = |v: f64| float_const(v, d);
    let o = cast(o, d);
    let c = if align_corners {
        binary(Prim::Mul, step, o)
    } else {
        binary(Prim::Sub, binary(Prim::Mul, step, binary(Prim::Add, o, k(0.5))), k(0.5))
    };
    let floor = unary(Prim::Floor, c.clone());
    let t = binary(Prim::Sub, c, floor.clone());
    let base = cast(floor, DType::I64);
    const A: f64 = -0.75;
    let mul = |a: E, b: E| binary(Prim::Mul, a, b);
    let (add, sub) = (|a: E, b: E| binary(Prim::Add, a, b), |a: E, b: E| binary(Prim::Sub, a, b));
    // ((A + 2) x - (A + 3)) x x + 1 for |x| <= 1; ((A x - 5A) x + 8A) x - 4A for 1 < |x| < 2.
    let near = |x: E| add(mul(mul(sub(mul(k(A + 2.0), x.clone()), k(A + 3.0)), x.clone()), x), k(1.0));
    let far = |x: E| sub(mul(add(mul(sub(mul(k(A), x.clone()), k(5.0 * A)), x.clone()), k(8.0 * A)), x), k(4.0 * A));
    let weights = [far(add(t.clone(), k(1.0))), near(t.clone()), near(sub(k(1.0), t.clone())), far(sub(k(2.0), t))];
    weights
        .into_iter()
        .enumerate()
        .map(|(j, w)| {
            let index = add(base.clone(), int_const(j as i64 - 1));
            let index = binary(Prim::Min, binary(Prim::Max, index, int_const(0)), last.clone());
            Tap { index, weight: Some(w), inside: None }
        })
        .collect()
}

/// upsample_{nearest,bilinear,bicubic}{k}d.vec over the last `k` dimensions of [N, C, ...].
fn upsample(lw: &mut Lowerer, a: &Args, k: usize, interp: Interp) -> R {
    let x = a.tensor(lw, "input")?;
    if x.rank() != k + 2 || !x.dtype.is_float() {
        return Err(format!("expected a {}-D floating-point input, got {}[rank {}]", k + 2, x.dtype, x.rank()));
    }
    let align_corners = interp != Interp::Nearest && a.bool_or("align_corners", false)?;
    let axes = upsample_axes(lw, a, &x, k)?;
    let (d, name) = (opmath(x.dtype), a.node_name());
    let x = lw.realize(&x, &name);
    let taps: Vec<Vec<Tap>> = axes
        .iter()
        .enumerate()
        .map(|(i, axis)| upsample_taps(axis, var(2 + i), interp, align_corners, d, x.dtype))
        .collect();
    let body = interpolate(lw, &x, &[var(0), var(1)], &taps, d, &name);
    let sizes = x.sizes[..2].iter().cloned().chain(axes.into_iter().map(|a| a.output)).collect();
    Ok(vec![TensorValue::lazy(x.dtype, sizes, cast(body, x.dtype))])
}
