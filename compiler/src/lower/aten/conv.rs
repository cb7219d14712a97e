//! Convolution as matrix products.
//!
//! A regular convolution gathers the input's windows into a matrix (im2col: the
//! [`taps`] of every window, laid out as [groups, channels/group * kernel, batch *
//! positions] and realized once) and multiplies the weight, seen as [groups,
//! out_channels/groups, channels/group * kernel], by it: one batched GEMM with the groups
//! as batch. A transposed convolution multiplies the transposed weight by the input,
//! which gives what each input position contributes at each kernel offset, and sums
//! those onto the output positions they land on (col2im, [`sum_over_windows`]).

pub(super) mod epilogue;
mod frames;
mod native;

use super::linalg;
use super::pool::window::{per_dim, sum_over_windows, taps, Windows};
use super::pool::{accumulator, with_dtype};
use super::registry::LowerFn;
use crate::frontend::schema::Argument;
use crate::ir::expr::{binary, constant, index_value, E};
use crate::ir::{Prim, ReduceOp, Scalar};
use crate::lower::args::Args;
use crate::lower::aten::reduction::reduce;
use crate::lower::checks::show;
use crate::lower::tensor::{vars, TensorValue};
use crate::lower::Lowerer;
use aotc_abi::manifest::GuardOp;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

type R = Result<Vec<TensorValue>, String>;

pub const OPS: &[(&str, LowerFn)] =
    &[("convolution.default", convolution), ("convolution_backward.default", convolution_backward)];

/// The arguments of a convolution beside its tensors.
struct Params {
    stride: Vec<i64>,
    padding: Vec<i64>,
    dilation: Vec<i64>,
    output_padding: Vec<i64>,
    groups: i64,
    transposed: bool,
}

impl Params {
    fn parse(lw: &Lowerer, a: &Args, nd: usize) -> Result<Params, String> {
        let list = |name: &str| -> Result<Vec<i64>, String> {
            let values = a
                .sym_ints(lw, name)?
                .iter()
                .map(|s| s.as_int().ok_or_else(|| format!("{name} must be static, got {s}")))
                .collect::<Result<_, _>>()?;
            per_dim(values, nd, name)
        };
        let groups = a.sym_int(lw, "groups")?.as_int().ok_or("groups must be static")?;
        if groups <= 0 {
            return Err(format!("groups must be positive, got {groups}"));
        }
        let p = Params {
            stride: list("stride")?,
            padding: list("padding")?,
            dilation: list("dilation")?,
            output_padding: list("output_padding")?,
            groups,
            transposed: a.bool_or("transposed", false)?,
        };
        if p.stride.iter().chain(&p.dilation).any(|&v| v <= 0)
            || p.padding.iter().chain(&p.output_padding).any(|&v| v < 0)
        {
            return Err(format!("stride and dilation must be positive, padding and output_padding non-negative; got stride {:?}, padding {:?}, dilation {:?}, output_padding {:?}", p.stride, p.padding, p.dilation, p.output_padding));
        }
        Ok(p)
    }
}

fn convolution(lw: &mut Lowerer, a: &Args) -> R {
    let (x, weight, bias) = (a.tensor(lw, "input")?, a.tensor(lw, "weight")?, a.opt_tensor(lw, "bias")?);
    let name = a.node_name();
    check_operands(&x, &weight, &[])?;
    if let Some(b) = bias.as_ref().filter(|b| b.dtype != x.dtype || b.rank() != 1) {
        return Err(format!("bias must be a 1-D {} tensor, got {}[{}]", x.dtype, b.dtype, show(&b.sizes)));
    }
    let p = Params::parse(lw, a, x.rank() - 2)?;
    let w = windows(lw, &x, &weight, &p)?;
    if let Some(y) = as_linear(lw, &x, &weight, bias.as_ref(), &p, &w, &name)? {
        return Ok(vec![y]);
    }
    if let Some(y) = native::lower(lw, &x, &weight, bias.as_ref(), &p, &w, &name)? {
        return Ok(vec![y]);
    }
    if let Some(y) = frames::lower(lw, &x, &weight, bias.as_ref(), &p, &w, &name)? {
        return Ok(vec![y]);
    }
    let y = if p.transposed {
        transposed(lw, &x, &weight, p.groups, &w, &name)?
    } else {
        regular(lw, &x, &weight, p.groups, &w, &name)?
    };
    let Some(bias) = bias else { return Ok(vec![y]) };
    lw.require(bias.sizes[0].clone(), GuardOp::Eq, y.sizes[1].clone(), "bias has one element per output channel")?;
    let idx = vars(y.rank());
    let body = binary(Prim::Add, y.load(&idx), bias.load(&idx[1..2]));
    Ok(vec![TensorValue::lazy(y.dtype, y.sizes.clone(), body)])
}

/// A convolution with one input and one output position (a squeeze-and-excitation
/// block's, after a global pooling) is a Linear layer over the channels: `x[N, C] @
/// weight[O, C]^T + bias`, one GEMM for the batch that reads the weight (packed as a
/// right operand) once, instead of a product per image with one column. None for any
/// other convolution.
fn as_linear(
    lw: &mut Lowerer,
    x: &TensorValue,
    weight: &TensorValue,
    bias: Option<&TensorValue>,
    p: &Params,
    w: &Windows,
    name: &str,
) -> Result<Option<TensorValue>, String> {
    let one = |v: &[SymExpr]| v.iter().all(|s| s.as_int() == Some(1));
    let float = matches!(x.dtype, DType::F32 | DType::F64);
    if p.transposed
        || p.groups != 1
        || !float
        || !one(&w.input)
        || !one(&w.output)
        || !one(&w.kernel)
        || p.padding.iter().any(|&v| v != 0)
    {
        return Ok(None);
    }
    let (batch, channels, out_channels) = (x.sizes[0].clone(), x.sizes[1].clone(), weight.sizes[0].clone());
    let rows = lw.reshape(x, &[batch.clone(), channels.clone()], &format!("{name}.input"));
    let columns = lw.reshape(weight, &[out_channels.clone(), channels], &format!("{name}.weight")).permute(&[1, 0])?;
    if let Some(b) = bias {
        lw.require(b.sizes[0].clone(), GuardOp::Eq, out_channels.clone(), "bias has one element per output channel")?;
    }
    let y = linalg::emit(lw, name, &rows, &columns, bias.map(|b| (b, 1.0)), 1.0)?;
    let sizes: Vec<SymExpr> = [batch, out_channels].into_iter().chain(w.output.iter().cloned()).collect();
    Ok(Some(lw.reshape(&y, &sizes, name)))
}

/// Input and weight (and the other tensors of a gradient): one dtype, and ranks that
/// make a convolution over at least one spatial dimension.
fn check_operands(x: &TensorValue, weight: &TensorValue, others: &[&TensorValue]) -> Result<(), String> {
    if weight.rank() < 3 || x.rank() != weight.rank() || others.iter().any(|t| t.rank() != x.rank()) {
        return Err(format!(
            "expected a weight of rank >= 3 and inputs of its rank, got weight [{}] and input [{}]",
            show(&weight.sizes),
            show(&x.sizes)
        ));
    }
    if x.dtype != weight.dtype || others.iter().any(|t| t.dtype != x.dtype) {
        return Err(format!(
            "the tensors of a convolution must have one dtype, got input {} and weight {}",
            x.dtype, weight.dtype
        ));
    }
    Ok(())
}

/// `channels / groups`, requiring that the groups divide the channels evenly.
fn per_group(lw: &mut Lowerer, channels: &SymExpr, groups: i64, what: &str) -> Result<SymExpr, String> {
    let g = SymExpr::Int(groups);
    lw.require(
        SymExpr::modulo(channels.clone(), g.clone()),
        GuardOp::Eq,
        SymExpr::Int(0),
        &format!("{what} ({channels}) must divide by groups ({groups})"),
    )?;
    Ok(SymExpr::floor_div(channels.clone(), g))
}

/// The windows of a convolution, after checking that its operands agree. They slide
/// over the wide side, one per position of the narrow side: a regular convolution's
/// input and output, a transposed convolution's output and input, whose size is
/// (in - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1.
fn windows(lw: &mut Lowerer, x: &TensorValue, weight: &TensorValue, p: &Params) -> Result<Windows, String> {
    let kernel = weight.sizes[2..].to_vec();
    if !p.transposed {
        lw.require(
            x.sizes[1].clone(),
            GuardOp::Eq,
            SymExpr::mul([weight.sizes[1].clone(), SymExpr::Int(p.groups)]),
            "the input has weight.size(1) * groups channels",
        )?;
        per_group(lw, &weight.sizes[0], p.groups, "the output channels (weight.size(0))")?;
        return Windows::new(lw, &x.sizes[2..], kernel, p.stride.clone(), p.padding.clone(), p.dilation.clone(), false);
    }
    lw.require(x.sizes[1].clone(), GuardOp::Eq, weight.sizes[0].clone(), "the input has weight.size(0) channels")?;
    per_group(lw, &x.sizes[1], p.groups, "the input channels")?;
    let mut output = vec![];
    for (d, k) in kernel.iter().enumerate() {
        if p.output_padding[d] >= p.stride[d] && p.output_padding[d] >= p.dilation[d] {
            return Err(format!(
                "output_padding {:?} must be smaller than the stride {:?} or the dilation {:?}",
                p.output_padding, p.stride, p.dilation
            ));
        }
        lw.require(
            SymExpr::Int(1),
            GuardOp::Le,
            k.clone(),
            &format!("the kernel size of spatial dimension {d} must be positive"),
        )?;
        // in * stride + (dilation * (kernel - 1) - stride - 2 * padding + output_padding + 1),
        // grouped so that a static remainder folds (8 * s, as torch records it).
        let size = SymExpr::add([
            SymExpr::mul([x.sizes[2 + d].clone(), SymExpr::Int(p.stride[d])]),
            SymExpr::mul([SymExpr::Int(p.dilation[d]), SymExpr::add([k.clone(), SymExpr::Int(-1)])]),
            SymExpr::Int(-p.stride[d]),
            SymExpr::mul([SymExpr::Int(-2), SymExpr::Int(p.padding[d])]),
            SymExpr::Int(p.output_padding[d]),
            SymExpr::Int(1),
        ]);
        lw.require(
            SymExpr::Int(1),
            GuardOp::Le,
            size.clone(),
            &format!("spatial dimension {d} of the output must not be empty"),
        )?;
        output.push(size);
    }
    Ok(Windows {
        kernel,
        stride: p.stride.clone(),
        padding: p.padding.clone(),
        dilation: p.dilation.clone(),
        input: output,
        output: x.sizes[2..].to_vec(),
    })
}

/// im2col: the windows of x [N, C, w.input...] as a matrix [G, C/G * kernel, N * w.output],
/// realized.
fn im2col(lw: &mut Lowerer, x: &TensorValue, w: &Windows, groups: i64, name: &str) -> Result<TensorValue, String> {
    let nd = w.rank();
    let g = SymExpr::Int(groups);
    let group_in = per_group(lw, &x.sizes[1], groups, "the input channels")?;
    // taps [N, C, out..., kernel...] seen as [G, C/G, kernel..., N, out...]
    let all = taps(lw, x, w, constant(Scalar::I(0), x.dtype), name);
    let sizes: Vec<SymExpr> = [g.clone(), group_in.clone()]
        .into_iter()
        .chain(w.kernel.iter().cloned())
        .chain([x.sizes[0].clone()])
        .chain(w.output.iter().cloned())
        .collect();
    let cols = all.remap(sizes, &|v| {
        let channel = v[0].scale(&group_in).plus(&v[1]);
        [v[2 + nd].clone(), channel]
            .into_iter()
            .chain(v[3 + nd..].iter().cloned())
            .chain(v[2..2 + nd].iter().cloned())
            .collect()
    });
    let depth = SymExpr::mul([group_in.clone()].into_iter().chain(w.kernel.iter().cloned()));
    let positions = SymExpr::mul([x.sizes[0].clone()].into_iter().chain(w.output.iter().cloned()));
    Ok(lw.reshape(&cols, &[g, depth, positions], &format!("{name}.cols")))
}

/// v [N, C, spatial...] as a matrix per group: [G, C/G, N * spatial] (a copy unless N is 1).
fn group_rows(lw: &mut Lowerer, v: &TensorValue, groups: i64, name: &str) -> Result<TensorValue, String> {
    let group_channels = per_group(lw, &v.sizes[1], groups, "the channels")?;
    let channels_first = v.permute(&[1, 0].into_iter().chain(2..v.rank()).collect::<Vec<_>>())?;
    let positions = SymExpr::mul([v.sizes[0].clone()].into_iter().chain(v.sizes[2..].iter().cloned()));
    Ok(lw.reshape(&channels_first, &[SymExpr::Int(groups), group_channels, positions], &format!("{name}.rows")))
}

/// x [N, C, w.input...] * weight [O, C/G, kernel...] → [N, O, w.output...]: the weight
/// times the im2col matrix, per group.
fn regular(
    lw: &mut Lowerer,
    x: &TensorValue,
    weight: &TensorValue,
    groups: i64,
    w: &Windows,
    name: &str,
) -> Result<TensorValue, String> {
    let g = SymExpr::Int(groups);
    let cols = im2col(lw, x, w, groups, name)?;
    let out_channels = weight.sizes[0].clone();
    let group_out = per_group(lw, &out_channels, groups, "the output channels (weight.size(0))")?;
    let wm = lw.reshape(weight, &[g, group_out, cols.sizes[1].clone()], &format!("{name}.weight"));
    let y = linalg::emit(lw, name, &wm, &cols, None, 1.0)?;
    // [G, O/G, N * out] is [O, N, out...] in memory.
    let y = lw.reshape(
        &y,
        &[out_channels, x.sizes[0].clone()].into_iter().chain(w.output.iter().cloned()).collect::<Vec<_>>(),
        name,
    );
    y.permute(&[1, 0].into_iter().chain(2..y.rank()).collect::<Vec<_>>())
}

/// x [N, C, w.output...] * weight [C, O/G, kernel...] transposed → [N, O, w.input...]:
/// the transposed weight times x gives what each input position contributes at each
/// kernel offset, and each output position sums the contributions landing on it.
fn transposed(
    lw: &mut Lowerer,
    x: &TensorValue,
    weight: &TensorValue,
    groups: i64,
    w: &Windows,
    name: &str,
) -> Result<TensorValue, String> {
    let g = SymExpr::Int(groups);
    let batch = x.sizes[0].clone();
    let (group_in, group_out) = (per_group(lw, &x.sizes[1], groups, "the input channels")?, weight.sizes[1].clone());
    let taps_per_group = SymExpr::mul([group_out.clone()].into_iter().chain(w.kernel.iter().cloned()));
    let wt =
        lw.reshape(weight, &[g.clone(), group_in, taps_per_group], &format!("{name}.weight")).permute(&[0, 2, 1])?;
    let xm = group_rows(lw, x, groups, name)?;
    let contributions = linalg::emit(lw, name, &wt, &xm, None, 1.0)?;
    let sizes: Vec<SymExpr> = [g.clone(), group_out.clone()]
        .into_iter()
        .chain(w.kernel.iter().cloned())
        .chain([batch.clone()])
        .chain(w.output.iter().cloned())
        .collect();
    let contributions = lw.reshape(&contributions, &sizes, &format!("{name}.contributions"));
    // col2im: y[n, g, o', out...] sums contributions[g, o', k..., n, window...].
    let acc = accumulator(x.dtype);
    let y = sum_over_windows(
        lw,
        w,
        &[batch.clone(), g.clone(), group_out.clone()],
        acc,
        name,
        &mut |lw, l, _, window, k| {
            let at: Vec<E> = [&l[1], &l[2]]
                .into_iter()
                .cloned()
                .map(index_value)
                .chain(k.iter().cloned())
                .chain([index_value(l[0].clone())])
                .chain(window.iter().cloned())
                .collect();
            lw.load_at_indices(&contributions, &at, name)
        },
    );
    let out_sizes: Vec<SymExpr> =
        [batch, SymExpr::mul([g, group_out])].into_iter().chain(w.input.iter().cloned()).collect();
    Ok(with_dtype(&lw.reshape(&y, &out_sizes, name), x.dtype))
}

/// `output_mask`: which of (grad_input, grad_weight, grad_bias) to compute. The others
/// are None outputs, left out of the results.
fn output_mask(a: &Args) -> Result<[bool; 3], String> {
    match a.get("output_mask") {
        Some(Argument::Bools(m)) if m.len() == 3 => Ok([m[0], m[1], m[2]]),
        other => Err(format!("argument 'output_mask' should be 3 bools, got {other:?}")),
    }
}

/// The gradients of a convolution. The forward's windows slide over the wide side
/// (input of a regular convolution, output of a transposed one) with one narrow
/// position each; a gradient of one side is the convolution of the other kind, and
/// grad_weight[g] = narrow[g] @ im2col(wide)[g]^T.
fn convolution_backward(lw: &mut Lowerer, a: &Args) -> R {
    let (grad, x, weight) = (a.tensor(lw, "grad_output")?, a.tensor(lw, "input")?, a.tensor(lw, "weight")?);
    let name = a.node_name();
    check_operands(&x, &weight, &[&grad])?;
    let p = Params::parse(lw, a, x.rank() - 2)?;
    let mask = output_mask(a)?;
    let w = windows(lw, &x, &weight, &p)?;
    let (out_channels, out_spatial) = if p.transposed {
        (SymExpr::mul([weight.sizes[1].clone(), SymExpr::Int(p.groups)]), &w.input)
    } else {
        (weight.sizes[0].clone(), &w.output)
    };
    let expected: Vec<SymExpr> =
        [x.sizes[0].clone(), out_channels].into_iter().chain(out_spatial.iter().cloned()).collect();
    for (d, (got, want)) in grad.sizes.iter().zip(&expected).enumerate() {
        lw.require(
            got.clone(),
            GuardOp::Eq,
            want.clone(),
            &format!("grad_output has the convolution's output shape at dimension {d}"),
        )?;
    }
    let (wide, narrow) = if p.transposed { (&grad, &x) } else { (&x, &grad) };
    let mut results = vec![];
    if mask[0] {
        let g = if p.transposed {
            regular(lw, &grad, &weight, p.groups, &w, &name)?
        } else {
            transposed(lw, &grad, &weight, p.groups, &w, &name)?
        };
        results.push(g);
    }
    if mask[1] {
        let cols = im2col(lw, wide, &w, p.groups, &name)?.permute(&[0, 2, 1])?;
        let rows = group_rows(lw, narrow, p.groups, &name)?;
        let g = linalg::emit(lw, &format!("{name}.grad_weight"), &rows, &cols, None, 1.0)?;
        results.push(lw.reshape(&g, &weight.sizes, &format!("{name}.grad_weight")));
    }
    if mask[2] {
        let axes: Vec<usize> = [0].into_iter().chain(2..grad.rank()).collect();
        let g = reduce(lw, &grad, &axes, false, ReduceOp::Sum, accumulator(grad.dtype), &format!("{name}.grad_bias"));
        results.push(with_dtype(&g, grad.dtype));
    }
    Ok(results)
}
