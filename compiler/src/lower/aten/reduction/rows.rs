//! Float32 softmax and layer norm over the trailing dimension(s) as one call each of the
//! support library (`__aotc_softmax_f32`, `__aotc_layer_norm_f32`): a row read once for
//! its statistics and once for its output, instead of a kernel per statistic. None when
//! the op is not such (another dtype, another dimension, statistics read by the graph):
//! the caller lowers it from reductions.

use crate::ir::expr::constant;
use crate::ir::{BufKind, ExternArg, ExternCall, Kernel, Scalar};
use crate::lower::tensor::TensorValue;
use crate::lower::Lowerer;
use aotc_abi::internal_symbols::{LAYER_NORM, SOFTMAX};
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

/// (rows, row length) of `x` cut before dimension `first`.
fn rows(x: &TensorValue, first: usize) -> (SymExpr, SymExpr) {
    (SymExpr::product(x.sizes[..first].iter()), SymExpr::product(x.sizes[first..].iter()))
}

/// Softmax of `x` along its last dimension `dim`, in `aotc_abi::softmax` mode `mode`.
pub fn softmax(lw: &mut Lowerer, x: &TensorValue, dim: usize, mode: i64, name: &str) -> Option<TensorValue> {
    if !lw.native_calls() || x.dtype != DType::F32 || x.complex || dim + 1 != x.rank() {
        return None;
    }
    let input = lw.contiguous(x, &format!("{name}.input"));
    let out = lw.prog.add_buffer(name, DType::F32, x.sizes.clone(), BufKind::Scratch);
    let (rows, len) = rows(x, dim);
    let args =
        vec![ExternArg::Buf(input), ExternArg::Size(rows), ExternArg::Size(len), ExternArg::Size(SymExpr::Int(mode))];
    lw.prog.kernels.push(Kernel::Extern(Box::new(ExternCall { name: SOFTMAX, out, args, flops: SymExpr::Int(0) })));
    Some(TensorValue::view_of(out, DType::F32, x.sizes.clone()))
}

/// Layer norm of `x` over its dimensions from `first` on, when the mean and rstd outputs
/// are not read (`stats_read` false): (out, mean, rstd), the last two never computed.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm(
    lw: &mut Lowerer,
    x: &TensorValue,
    first: usize,
    weight: Option<&TensorValue>,
    bias: Option<&TensorValue>,
    eps: f64,
    stats_read: bool,
    name: &str,
) -> Option<Vec<TensorValue>> {
    let f32_or_none = |t: Option<&TensorValue>| t.is_none_or(|t| t.dtype == DType::F32 && !t.complex);
    if !lw.native_calls()
        || x.dtype != DType::F32
        || x.complex
        || stats_read
        || !f32_or_none(weight)
        || !f32_or_none(bias)
    {
        return None;
    }
    let input = lw.contiguous(x, &format!("{name}.input"));
    let weight = weight.map(|w| lw.contiguous(w, &format!("{name}.weight")));
    let bias = bias.map(|b| lw.contiguous(b, &format!("{name}.bias")));
    let out = lw.prog.add_buffer(name, DType::F32, x.sizes.clone(), BufKind::Scratch);
    let (rows, len) = rows(x, first);
    let flag = |b: bool| ExternArg::Size(SymExpr::Int(b as i64));
    let args = vec![
        ExternArg::Buf(input),
        // An absent weight or bias: any buffer gives the call a valid pointer.
        ExternArg::Buf(weight.unwrap_or(input)),
        ExternArg::Buf(bias.unwrap_or(input)),
        ExternArg::Size(rows),
        ExternArg::Size(len),
        flag(weight.is_some()),
        flag(bias.is_some()),
        ExternArg::Size(SymExpr::Int(eps.to_bits() as i64)),
    ];
    lw.prog.kernels.push(Kernel::Extern(Box::new(ExternCall { name: LAYER_NORM, out, args, flops: SymExpr::Int(0) })));
    // The statistics' shapes, holding nothing: no node reads them (`stats_read`).
    let stat_sizes: Vec<SymExpr> =
        x.sizes[..first].iter().cloned().chain(x.sizes[first..].iter().map(|_| SymExpr::Int(1))).collect();
    let unread = TensorValue::lazy(DType::F32, stat_sizes, constant(Scalar::F(f64::NAN), DType::F32));
    Some(vec![TensorValue::view_of(out, DType::F32, x.sizes.clone()), unread.clone(), unread])
}
