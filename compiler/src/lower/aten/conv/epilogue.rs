//! What folds into the support library's convolution, at compile time or into its output
//! pass, when the convolution's output feeds nothing else: an inference batch norm (into
//! the weight and bias), then a residual add, then a ReLU, then a 2x2 max pool (flags of
//! `aotc_abi::conv::Conv2d`; a hardswish, which the graph spells as five nodes, is fused
//! after lowering by `passes::epilogue`). Each returns the convolution's output, now
//! holding the op's result, or None when it does not apply (and then changes nothing).
//! Nothing folds after the pool.

use crate::ir::{BufId, BufKind, ExternArg, ExternCall, Kernel, StridedRef};
use crate::lower::aten::pool::window::Windows;
use crate::lower::tensor::{contiguous_strides, Repr, TensorValue};
use crate::lower::Lowerer;
use aotc_abi::conv::{
    Algorithm, ACTIVATION, ARG_BIAS, ARG_GEOMETRY, ARG_RESIDUAL, ARG_WEIGHT, HAS_BIAS, POOL, RESIDUAL, SYMBOL,
};
use aotc_abi::gemm::Activation;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

/// The constants of an inference batch norm: `y = (x - mean) / sqrt(var + eps) * gamma +
/// beta` per channel.
pub struct BatchNorm<'a> {
    pub gamma: Option<&'a TensorValue>,
    pub beta: Option<&'a TensorValue>,
    pub mean: &'a TensorValue,
    pub var: &'a TensorValue,
    pub eps: f64,
}

/// The whole contiguous float32 buffer `v` views, and the index of the kernel writing it
/// when that is a support-library convolution whose output is not pooled.
fn convolution_of(lw: &Lowerer, v: &TensorValue) -> Option<(BufId, usize)> {
    let r = whole_buffer(lw, v)?;
    let index = lw.prog.kernels.iter().rposition(|k| k.out() == r)?;
    let Kernel::Extern(call) = &lw.prog.kernels[index] else { return None };
    let ours = call.name == SYMBOL && call.args.len() == ARG_GEOMETRY + 1 && flag(call, POOL) == Some(false);
    ours.then_some((r, index))
}

/// The buffer `v` is, when `v` is a float32 view of all of it in order.
fn whole_buffer(lw: &Lowerer, v: &TensorValue) -> Option<BufId> {
    let Repr::View(StridedRef { buf, offset, strides }) = &v.repr else { return None };
    let whole =
        v.dtype == DType::F32 && !v.complex && *offset == SymExpr::Int(0) && *strides == contiguous_strides(&v.sizes);
    (whole && lw.prog.buffers[*buf].sizes == v.sizes).then_some(*buf)
}

fn call_mut<'l>(lw: &'l mut Lowerer, index: usize) -> &'l mut ExternCall {
    let Kernel::Extern(call) = &mut lw.prog.kernels[index] else { unreachable!("convolution_of found an extern call") };
    call
}

/// Whether the flag at `at` is set (for [`ACTIVATION`]: whether there is one).
fn flag(call: &ExternCall, at: usize) -> Option<bool> {
    let ExternArg::Sizes(geometry) = &call.args[ARG_GEOMETRY] else { return None };
    Some(geometry.get(at)?.as_int()? != 0)
}

fn set_flag(call: &mut ExternCall, at: usize) {
    if let ExternArg::Sizes(geometry) = &mut call.args[ARG_GEOMETRY] {
        geometry[at] = SymExpr::Int(1);
    }
}

fn set_activation(call: &mut ExternCall, activation: Activation) {
    if let ExternArg::Sizes(geometry) = &mut call.args[ARG_GEOMETRY] {
        geometry[ACTIVATION] = SymExpr::Int(activation.code());
    }
}

fn call_at<'l>(lw: &'l Lowerer, index: usize) -> &'l ExternCall {
    let Kernel::Extern(call) = &lw.prog.kernels[index] else { unreachable!("convolution_of found an extern call") };
    call
}

/// A batch norm of `x` folded into the convolution at compile time when its weight and
/// the norm's parameters are float32 constants (and no residual or activation is in its
/// output pass yet): weight rows scaled by `s = gamma / sqrt(var + eps)`, bias
/// `(bias - mean) * s + beta`.
pub fn fold_batch_norm(lw: &mut Lowerer, x: &TensorValue, bn: &BatchNorm) -> Option<TensorValue> {
    let (out, index) = convolution_of(lw, x)?;
    let call = call_at(lw, index);
    if flag(call, RESIDUAL)? || flag(call, ACTIVATION)? {
        return None;
    }
    let (&ExternArg::Buf(weight), &ExternArg::Buf(bias)) = (&call.args[ARG_WEIGHT], &call.args[ARG_BIAS]) else {
        return None;
    };
    let has_bias = flag(call, HAS_BIAS)?;
    let out_channels = usize::try_from(x.sizes.get(1)?.as_int()?).ok()?;
    let weights = lw.constant_f32(&TensorValue::view_of(weight, DType::F32, lw.prog.buffers[weight].sizes.clone()))?;
    let conv_bias = if has_bias {
        lw.constant_f32(&TensorValue::view_of(bias, DType::F32, vec![SymExpr::Int(out_channels as i64)]))?
    } else {
        vec![0.0; out_channels]
    };
    let per_channel = |v: Option<&TensorValue>, default: f32| match v {
        Some(v) => lw.constant_f32(v).filter(|c| c.len() == out_channels),
        None => Some(vec![default; out_channels]),
    };
    let (gamma, beta) = (per_channel(bn.gamma, 1.0)?, per_channel(bn.beta, 0.0)?);
    let (mean, var) = (per_channel(Some(bn.mean), 0.0)?, per_channel(Some(bn.var), 0.0)?);
    if out_channels == 0 || weights.len() % out_channels != 0 || conv_bias.len() != out_channels {
        return None;
    }
    // In float32 as torch computes the norm's scale and shift.
    let scale: Vec<f32> = (0..out_channels).map(|o| gamma[o] / (var[o] + bn.eps as f32).sqrt()).collect();
    let row = weights.len() / out_channels;
    let folded: Vec<u8> = weights.iter().enumerate().flat_map(|(i, &w)| (w * scale[i / row]).to_le_bytes()).collect();
    let shift: Vec<u8> =
        (0..out_channels).flat_map(|o| ((conv_bias[o] - mean[o]) * scale[o] + beta[o]).to_le_bytes()).collect();
    let name = lw.prog.buffers[out].name.clone();
    let weight_sizes = lw.prog.buffers[weight].sizes.clone();
    let new_weight = lw.add_constant(&format!("{name}.folded_weight"), DType::F32, weight_sizes, folded);
    let new_bias =
        lw.add_constant(&format!("{name}.folded_bias"), DType::F32, vec![SymExpr::Int(out_channels as i64)], shift);
    let call = call_mut(lw, index);
    call.args[ARG_WEIGHT] = ExternArg::Buf(new_weight);
    call.args[ARG_BIAS] = ExternArg::Buf(new_bias);
    set_flag(call, HAS_BIAS);
    lw.fold_node_into(index);
    Some(x.clone())
}

/// `conv + other` in the convolution's output pass, when `other` is a whole float32
/// buffer of the same sizes that exists before the convolution runs (an input, a weight,
/// or the output of an earlier kernel) and no activation is applied yet.
pub fn fuse_residual(lw: &mut Lowerer, conv: &TensorValue, other: &TensorValue) -> Option<TensorValue> {
    let (out, index) = convolution_of(lw, conv)?;
    let residual = whole_buffer(lw, other)?;
    let call = call_at(lw, index);
    if flag(call, RESIDUAL)? || flag(call, ACTIVATION)? || residual == out || other.sizes != conv.sizes {
        return None;
    }
    let ready = match lw.prog.buffers[residual].kind {
        BufKind::Scratch => lw.prog.kernels[..index].iter().any(|k| k.out() == residual),
        BufKind::Input(_) | BufKind::Weight(_) | BufKind::State(_) => true,
        BufKind::IndexErrors => false,
    };
    if !ready {
        return None;
    }
    let call = call_mut(lw, index);
    call.args[ARG_RESIDUAL] = ExternArg::Buf(residual);
    set_flag(call, RESIDUAL);
    lw.fold_node_into(index);
    Some(conv.clone())
}

/// `relu(conv)` in the convolution's output pass.
pub fn fuse_relu(lw: &mut Lowerer, conv: &TensorValue) -> Option<TensorValue> {
    let (_, index) = convolution_of(lw, conv)?;
    if flag(call_at(lw, index), ACTIVATION)? {
        return None;
    }
    set_activation(call_mut(lw, index), Activation::Relu);
    lw.fold_node_into(index);
    Some(conv.clone())
}

/// `max_pool2d(conv, 2, 2)` in the convolution's output pass: windows of 2x2 at stride 2,
/// no padding or dilation, as many as fit (a ceil-mode window past an odd size is not one
/// the library writes), on the output of a convolution without a residual whose algorithm
/// pools (prepack may turn a windows one into Winograd's, which pools too). The output
/// buffer shrinks to the pooled sizes.
pub fn fuse_max_pool(lw: &mut Lowerer, conv: &TensorValue, w: &Windows) -> Option<TensorValue> {
    let (out, index) = convolution_of(lw, conv)?;
    let call = call_at(lw, index);
    let ExternArg::Sizes(geometry) = &call.args[ARG_GEOMETRY] else { return None };
    let at = |i: usize| geometry.get(i)?.as_int().and_then(|v| usize::try_from(v).ok());
    let (channels, groups) = (at(1)?, at(15)?.max(1));
    let pair = |i: usize| Some([at(i)?, at(i + 1)?]);
    let (kernel, stride, padding) = (pair(5)?, pair(9)?, pair(11)?);
    let two = SymExpr::Int(2);
    let windows = w.kernel == [two.clone(), two] && w.stride == [2, 2] && w.padding == [0, 0] && w.dilation == [1, 1];
    let spatial = |v: &[SymExpr]| v.iter().map(|s| s.as_int()).collect::<Option<Vec<i64>>>();
    let (Some(conv_size), Some(pooled)) = (spatial(conv.sizes.get(2..)?), spatial(&w.output)) else { return None };
    let halves = conv.rank() == 4 && conv_size.iter().map(|s| s / 2).eq(pooled.iter().copied());
    let pools = Algorithm::choose(channels / groups, groups, kernel, stride, padding).pools();
    if !windows || !halves || !pools || flag(call, RESIDUAL)? {
        return None;
    }
    let sizes: Vec<SymExpr> = conv.sizes[..2].iter().cloned().chain(pooled.into_iter().map(SymExpr::Int)).collect();
    lw.prog.buffers[out].sizes = sizes.clone();
    set_flag(call_mut(lw, index), POOL);
    lw.fold_node_into(index);
    Some(TensorValue::view_of(out, DType::F32, sizes))
}
