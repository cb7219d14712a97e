//! Pooling: max, average and adaptive average pooling over 1 to 3 trailing spatial
//! dimensions, and their gradients.
//!
//! A pooled value is a reduction over window offsets of the window's elements
//! ([`window::taps`]), positions outside the input masked: the lowest value for max, 0
//! for sums, which are then divided by a count computed per window. Max pooling reduces
//! with ArgMax and derives both the value and its index into the flattened spatial plane
//! from the winning offset. Gradients sum, for each input position, over the windows that
//! read it ([`window::sum_over_windows`], [`window::adaptive_sum`]).

mod native;
pub mod window;

use super::conv::epilogue::fuse_max_pool;
use super::registry::LowerFn;
use crate::ir::expr::{binary, cast, constant, index_value, select, Affine, E};
use crate::ir::expr::{int, size_value};
use crate::ir::{Prim, ReduceOp, Scalar};
use crate::lower::args::Args;
use crate::lower::aten::reduction::reduce;
use crate::lower::checks::show;
use crate::lower::tensor::{vars, TensorValue};
use crate::lower::Lowerer;
use aotc_abi::manifest::GuardOp;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;
use window::{
    adaptive_count, adaptive_sum, add, all_of, floor_div, in_range, mul, per_dim, round_div, sum_over_windows, taps,
    Windows,
};

type R = Result<Vec<TensorValue>, String>;

pub const OPS: &[(&str, LowerFn)] = &[
    ("max_pool2d_with_indices.default", |lw, a| max_pool(lw, a, 2)),
    ("max_pool3d_with_indices.default", |lw, a| max_pool(lw, a, 3)),
    ("avg_pool1d.default", |lw, a| avg_pool(lw, a, 1)),
    ("avg_pool2d.default", |lw, a| avg_pool(lw, a, 2)),
    ("avg_pool3d.default", |lw, a| avg_pool(lw, a, 3)),
    ("adaptive_avg_pool1d.default", |lw, a| adaptive_avg_pool(lw, a, 1)),
    ("_adaptive_avg_pool2d.default", |lw, a| adaptive_avg_pool(lw, a, 2)),
    ("_adaptive_avg_pool3d.default", |lw, a| adaptive_avg_pool(lw, a, 3)),
    ("max_pool2d_with_indices_backward.default", |lw, a| max_pool_backward(lw, a, 2)),
    ("avg_pool2d_backward.default", |lw, a| avg_pool_backward(lw, a, 2)),
    ("_adaptive_avg_pool2d_backward.default", |lw, a| adaptive_avg_pool_backward(lw, a, 2)),
];

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Max,
    Avg,
}

/// The number of leading (channel, batch) dims of a pooled input: pooling takes
/// [C, spatial...] or [N, C, spatial...] with non-empty spatial dims.
fn leading_dims(lw: &mut Lowerer, x: &TensorValue, nd: usize) -> Result<usize, String> {
    if x.rank() != nd + 1 && x.rank() != nd + 2 {
        return Err(format!("expected a {}-D or {}-D input, got [{}]", nd + 1, nd + 2, show(&x.sizes)));
    }
    let lead = x.rank() - nd;
    for d in lead..x.rank() {
        lw.require(
            SymExpr::Int(1),
            GuardOp::Le,
            x.sizes[d].clone(),
            &format!("spatial dimension {d} of the input must not be empty"),
        )?;
    }
    Ok(lead)
}

/// The windows of a pooling node: kernel_size, stride (absent or empty: the kernel),
/// padding, dilation and ceil_mode, with torch's limit on padding (at most half the
/// window, so that every window holds an input element).
fn pool_windows(lw: &mut Lowerer, a: &Args, x: &TensorValue, nd: usize, kind: Kind) -> Result<Windows, String> {
    let kernel = per_dim(a.ints("kernel_size")?, nd, "kernel_size")?;
    let stride = match a.opt_ints("stride")? {
        Some(s) if !s.is_empty() => per_dim(s, nd, "stride")?,
        _ => kernel.clone(),
    };
    let padding = per_dim(a.opt_ints("padding")?.unwrap_or(vec![0]), nd, "padding")?;
    let dilation = per_dim(a.opt_ints("dilation")?.unwrap_or(vec![1]), nd, "dilation")?;
    for d in 0..nd {
        if kernel[d] <= 0 || dilation[d] <= 0 {
            return Err(format!("kernel_size and dilation must be positive, got {kernel:?} and {dilation:?}"));
        }
        let extent = kernel[d]
            .checked_sub(1)
            .and_then(|k| k.checked_mul(dilation[d]))
            .and_then(|e| e.checked_add(1))
            .ok_or("the dilated kernel overflows")?;
        let limit = if kind == Kind::Max { extent / 2 } else { kernel[d] / 2 };
        if padding[d] > limit {
            return Err(format!(
                "padding {} of spatial dimension {d} must be at most half of the kernel ({limit})",
                padding[d]
            ));
        }
    }
    let ceil_mode = a.bool_or("ceil_mode", false)?;
    let lead = x.rank() - nd;
    Windows::new(
        lw,
        &x.sizes[lead..],
        kernel.into_iter().map(SymExpr::Int).collect(),
        stride,
        padding,
        dilation,
        ceil_mode,
    )
}

/// The output positions of a pooled tensor with `lead` leading dims, as int64 values.
fn window_positions(lead: usize, nd: usize) -> Vec<E> {
    (lead..lead + nd).map(|v| index_value(Affine::var(v))).collect()
}

/// The value below every other of `dtype`: what padding holds for max pooling.
fn lowest(dtype: DType) -> E {
    let v = match dtype {
        d if d.is_float() => Scalar::F(f64::NEG_INFINITY),
        DType::Bool | DType::U8 => Scalar::I(0),
        DType::I8 => Scalar::I(i8::MIN.into()),
        DType::I16 => Scalar::I(i16::MIN.into()),
        DType::I32 => Scalar::I(i32::MIN.into()),
        _ => Scalar::I(i64::MIN),
    };
    constant(v, dtype)
}

/// Sums are accumulated in float32 for narrower floats, in int64 for integers.
pub fn accumulator(dtype: DType) -> DType {
    match dtype {
        d if d.is_float() && d.size() < 4 => DType::F32,
        d if d.is_float() => d,
        _ => DType::I64,
    }
}

/// `v` as `dtype`: itself when it has it, else a lazy cast.
pub fn with_dtype(v: &TensorValue, dtype: DType) -> TensorValue {
    if v.dtype == dtype {
        return v.clone();
    }
    TensorValue::lazy(dtype, v.sizes.clone(), cast(v.load(&vars(v.rank())), dtype))
}

/// `v / divisor` for a sum `v` and an int64 divisor: integer sums divide truncating,
/// as torch's integer pooling does.
fn divide(v: E, divisor: E) -> E {
    if v.dtype.is_float() {
        let d = v.dtype;
        binary(Prim::Div, v, cast(divisor, d))
    } else {
        round_div(cast(v, DType::I64), divisor, Prim::Trunc)
    }
}

/// Windows of at most this many taps (static sizes) are summed in the expression, a load
/// per tap, instead of by a reduction kernel: the mean stays lazy and fuses into its
/// reader. (DenseNet-121's 2x2 transition pools, as reductions over windows of 4 and a
/// copy each: 1.38 ms of the model's 57 on 1 thread, AMD EPYC Zen 4; ONNX Runtime's 0.08.)
const SUMMED_TAPS: i64 = 9;

/// The mean of each window: the sum of `taps`' trailing `nd` axes over `divisor(output
/// position)`, as `dtype`.
fn average(
    lw: &mut Lowerer,
    taps: &TensorValue,
    nd: usize,
    divisor: &dyn Fn(&[E]) -> E,
    dtype: DType,
    name: &str,
) -> TensorValue {
    let outer = taps.rank() - nd;
    let positions = window_positions(outer - nd, nd);
    let kernel: Option<Vec<i64>> = taps.sizes[outer..].iter().map(|k| k.as_int()).collect();
    let count = kernel.as_ref().map_or(0, |k| k.iter().product::<i64>());
    if let Some(kernel) = kernel.filter(|_| (1..=SUMMED_TAPS).contains(&count)) {
        // Tap by tap in the kernel's row-major order, in the accumulator's type, as the
        // reduction adds them.
        let tap = |flat: i64| {
            let mut index = vars(taps.rank());
            let mut rest = flat;
            for d in (0..nd).rev() {
                index[outer + d] = Affine::constant(SymExpr::Int(rest % kernel[d]));
                rest /= kernel[d];
            }
            cast(taps.load(&index), accumulator(dtype))
        };
        let sum = (1..count).fold(tap(0), |sum, flat| binary(Prim::Add, sum, tap(flat)));
        return TensorValue::lazy(dtype, taps.sizes[..outer].to_vec(), divide(sum, divisor(&positions)));
    }
    let axes: Vec<usize> = (outer..taps.rank()).collect();
    let sum = reduce(lw, taps, &axes, false, ReduceOp::Sum, accumulator(dtype), name);
    let body = divide(sum.load(&vars(sum.rank())), divisor(&positions));
    TensorValue::lazy(dtype, sum.sizes.clone(), body)
}

/// (values, indices): the maximum of each window (NaN wins) and its index in the
/// flattened spatial plane of the input.
fn max_pool(lw: &mut Lowerer, a: &Args, nd: usize) -> R {
    let x = a.tensor(lw, "self")?;
    let name = a.node_name();
    let lead = leading_dims(lw, &x, nd)?;
    let w = pool_windows(lw, a, &x, nd, Kind::Max)?;
    let indices_read = a.node.outputs.get(1).is_some_and(|indices| lw.is_used(indices));
    // Inference reads only the values: a max (NaN wins, as in the arg reduction), without
    // tracking where. The indices, which nothing reads, stay an unrealized 0.
    let unread = |values: TensorValue| {
        let zeros = TensorValue::lazy(DType::I64, values.sizes.clone(), int(0));
        vec![values, zeros]
    };
    if !indices_read {
        let fused = || a.get("self").is_some_and(|x| lw.used_once(x));
        if let Some(values) = fused().then(|| fuse_max_pool(lw, &x, &w)).flatten() {
            return Ok(unread(values));
        }
        if let Some(values) = native::max_pool(lw, &x, &w, &name) {
            return Ok(unread(values));
        }
    }
    // The winner is read again below: realize a lazy input once.
    let x = lw.realize(&x, &format!("{name}.input"));
    let all = taps(lw, &x, &w, lowest(x.dtype), &name);
    let axes: Vec<usize> = (lead + nd..lead + 2 * nd).collect();
    if !indices_read {
        return Ok(unread(reduce(lw, &all, &axes, false, ReduceOp::Max, x.dtype, &name)));
    }
    let best = reduce(lw, &all, &axes, false, ReduceOp::ArgMax, DType::I64, &format!("{name}.argmax"));
    let o = window_positions(lead, nd);
    let offsets = unflatten(best.load(&vars(best.rank())), &w.kernel);
    let mut positions: Vec<E> = (0..nd).map(|d| w.position_of(d, &o[d], &offsets[d])).collect();
    let leaving = w.leaving();
    if !leaving.is_empty() {
        // A window whose elements are all the lowest value (-inf) keeps offset 0, which
        // may lie in the padding; torch reports its first element inside the input.
        let inside = all_of(leaving.iter().map(|&d| in_range(positions[d].clone(), &w.input[d])))
            .expect("some dimension leaves");
        positions = (0..nd)
            .map(|d| select(inside.clone(), positions[d].clone(), w.position_of(d, &o[d], &w.first_inside(d, &o[d]))))
            .collect();
    }
    let mut flat = positions[0].clone();
    for (p, size) in positions.iter().zip(&w.input).skip(1) {
        flat = add(mul(flat, size_value(size)), p.clone());
    }
    let mut at: Vec<E> = (0..lead).map(|l| index_value(Affine::var(l))).collect();
    at.extend(positions);
    let value = lw.load_at_indices(&x, &at, &name);
    Ok(vec![
        TensorValue::lazy(x.dtype, best.sizes.clone(), value),
        TensorValue::lazy(DType::I64, best.sizes.clone(), flat),
    ])
}

/// The per-dimension offsets of a flat (row-major) offset into a window of `kernel`.
fn unflatten(flat: E, kernel: &[SymExpr]) -> Vec<E> {
    let mut offsets = vec![int(0); kernel.len()];
    let mut rest = flat;
    for d in (1..kernel.len()).rev().filter(|&d| kernel[d] != SymExpr::Int(1)) {
        let k = size_value(&kernel[d]);
        let outer = floor_div(rest.clone(), k.clone());
        offsets[d] = binary(Prim::Sub, rest, mul(outer.clone(), k));
        rest = outer;
    }
    offsets[0] = rest;
    offsets
}

/// The divisor of each window, from its output position.
type Divisor<'w> = Box<dyn Fn(&[E]) -> E + 'w>;

/// The divisor of avg pooling at output position `o`: divisor_override, or the window's
/// size with or without the padding it covers.
fn avg_divisor<'w>(a: &Args, w: &'w Windows) -> Result<Divisor<'w>, String> {
    let include_pad = a.bool_or("count_include_pad", true)?;
    Ok(match a.opt_int("divisor_override")? {
        Some(0) => return Err("divisor_override must not be zero".into()),
        Some(v) => Box::new(move |_| int(v)),
        None => Box::new(move |o| w.count(o, include_pad)),
    })
}

fn avg_pool(lw: &mut Lowerer, a: &Args, nd: usize) -> R {
    let x = a.tensor(lw, "self")?;
    let name = a.node_name();
    leading_dims(lw, &x, nd)?;
    let w = pool_windows(lw, a, &x, nd, Kind::Avg)?;
    let all = taps(lw, &x, &w, constant(Scalar::I(0), x.dtype), &name);
    let divisor = avg_divisor(a, &w)?;
    Ok(vec![average(lw, &all, nd, &*divisor, x.dtype, &name)])
}

fn output_size(lw: &mut Lowerer, a: &Args, nd: usize) -> Result<Vec<SymExpr>, String> {
    let out = a.sym_ints(lw, "output_size")?;
    if out.len() != nd {
        return Err(format!("output_size must have {nd} elements, got {}", out.len()));
    }
    for (d, s) in out.iter().enumerate() {
        lw.require(SymExpr::Int(0), GuardOp::Le, s.clone(), &format!("output_size[{d}] must not be negative"))?;
    }
    Ok(out)
}

/// Windows `floor(i * in / out) .. ceil((i + 1) * in / out)`; when every size divides
/// evenly these are plain strided windows, read without masks.
fn adaptive_avg_pool(lw: &mut Lowerer, a: &Args, nd: usize) -> R {
    let x = a.tensor(lw, "self")?;
    let name = a.node_name();
    let lead = leading_dims(lw, &x, nd)?;
    let out = output_size(lw, a, nd)?;
    let input = x.sizes[lead..].to_vec();
    let even: Option<Vec<i64>> = input
        .iter()
        .zip(&out)
        .map(|(i, o)| match (i.as_int(), o.as_int()) {
            (Some(i), Some(o)) if o > 0 && i % o == 0 => Some(i / o),
            _ => None,
        })
        .collect();
    if let Some(k) = even {
        let size = k.iter().product::<i64>();
        let w = Windows {
            kernel: k.iter().map(|&k| SymExpr::Int(k)).collect(),
            stride: k,
            padding: vec![0; nd],
            dilation: vec![1; nd],
            input,
            output: out,
        };
        let all = taps(lw, &x, &w, constant(Scalar::I(0), x.dtype), &name);
        return Ok(vec![average(lw, &all, nd, &|_| int(size), x.dtype, &name)]);
    }
    let sum = adaptive_sum(lw, &x, &out, accumulator(x.dtype), &name);
    let body = divide(sum.load(&vars(sum.rank())), adaptive_count(&window_positions(lead, nd), &input, &out));
    Ok(vec![TensorValue::lazy(x.dtype, sum.sizes.clone(), body)])
}

/// `grad_output` must have the pooled shape: the input's leading dims, then `output`.
fn check_grad(
    lw: &mut Lowerer,
    grad: &TensorValue,
    x: &TensorValue,
    output: &[SymExpr],
    what: &str,
) -> Result<(), String> {
    let lead = x.rank() - output.len();
    let want: Vec<SymExpr> = x.sizes[..lead].iter().chain(output).cloned().collect();
    if grad.rank() != want.len() {
        return Err(format!("{what} must be [{}], got [{}]", show(&want), show(&grad.sizes)));
    }
    for (d, (g, s)) in grad.sizes.iter().zip(&want).enumerate() {
        lw.require(g.clone(), GuardOp::Eq, s.clone(), &format!("{what} has the pooled shape at dimension {d}"))?;
    }
    Ok(())
}

/// The gradient of max pooling: each input position gets the gradients of the windows
/// whose recorded index is its own.
fn max_pool_backward(lw: &mut Lowerer, a: &Args, nd: usize) -> R {
    let (grad, x, indices) = (a.tensor(lw, "grad_output")?, a.tensor(lw, "self")?, a.tensor(lw, "indices")?);
    let name = a.node_name();
    let lead = leading_dims(lw, &x, nd)?;
    let w = pool_windows(lw, a, &x, nd, Kind::Max)?;
    check_grad(lw, &grad, &x, &w.output, "grad_output")?;
    check_grad(lw, &indices, &x, &w.output, "indices")?;
    let acc = accumulator(x.dtype);
    let zero = constant(Scalar::I(0), acc);
    let sum = sum_over_windows(lw, &w, &x.sizes[..lead], acc, &name, &mut |lw, l, h, o, _| {
        let here =
            h.iter().zip(&w.input).fold(Affine::constant(SymExpr::Int(0)), |acc, (h, size)| acc.scale(size).plus(h));
        let at: Vec<E> = l.iter().cloned().map(index_value).chain(o.iter().cloned()).collect();
        let chosen = binary(Prim::Eq, lw.load_at_indices(&indices, &at, &name), index_value(here));
        select(chosen, cast(lw.load_at_indices(&grad, &at, &name), acc), zero.clone())
    });
    Ok(vec![with_dtype(&sum, x.dtype)])
}

/// The gradient of avg pooling: each input position gets grad / divisor of every window
/// that holds it.
fn avg_pool_backward(lw: &mut Lowerer, a: &Args, nd: usize) -> R {
    let (grad, x) = (a.tensor(lw, "grad_output")?, a.tensor(lw, "self")?);
    let name = a.node_name();
    let lead = leading_dims(lw, &x, nd)?;
    let w = pool_windows(lw, a, &x, nd, Kind::Avg)?;
    check_grad(lw, &grad, &x, &w.output, "grad_output")?;
    let divisor = avg_divisor(a, &w)?;
    let acc = accumulator(x.dtype);
    let sum = sum_over_windows(lw, &w, &x.sizes[..lead], acc, &name, &mut |lw, l, _, o, _| {
        let at: Vec<E> = l.iter().cloned().map(index_value).chain(o.iter().cloned()).collect();
        divide(cast(lw.load_at_indices(&grad, &at, &name), acc), divisor(o))
    });
    Ok(vec![with_dtype(&sum, x.dtype)])
}

/// The gradient of adaptive avg pooling. Input position `h` lies in the windows
/// `floor(h * out / in) .. ceil((h + 1) * out / in)`: the adaptive windows with the
/// roles of input and output swapped, over grad / window size.
fn adaptive_avg_pool_backward(lw: &mut Lowerer, a: &Args, nd: usize) -> R {
    let (grad, x) = (a.tensor(lw, "grad_output")?, a.tensor(lw, "self")?);
    let name = a.node_name();
    let lead = leading_dims(lw, &x, nd)?;
    if grad.rank() != x.rank() {
        return Err(format!("grad_output [{}] and self [{}] differ in rank", show(&grad.sizes), show(&x.sizes)));
    }
    let out = grad.sizes[lead..].to_vec();
    check_grad(lw, &grad, &x, &out, "grad_output")?;
    let input = x.sizes[lead..].to_vec();
    let acc = accumulator(x.dtype);
    let scaled =
        divide(cast(grad.load(&vars(grad.rank())), acc), adaptive_count(&window_positions(lead, nd), &input, &out));
    let scaled = TensorValue::lazy(acc, grad.sizes.clone(), scaled);
    let sum = adaptive_sum(lw, &scaled, &input, acc, &name);
    Ok(vec![with_dtype(&sum, x.dtype)])
}
