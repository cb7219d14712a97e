//! The fast path of floating-point 2-D max pooling whose indices nothing reads: one call
//! of the support library's float32 max pool (`aotc_abi::conv::MAX_POOL_SYMBOL`, row-wise
//! maxima over the kernel taps), instead of a reduction over every window element.
//! float16 and bfloat16 pool widened to float32: exact both ways, as a maximum is one of
//! its operands.

use super::window::Windows;
use super::with_dtype;
use crate::ir::{BufKind, ExternArg, ExternCall, Kernel};
use crate::lower::tensor::TensorValue;
use crate::lower::Lowerer;
use aotc_abi::conv::MAX_POOL_SYMBOL;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

/// The pooled values of `x` ([C, H, W] or [N, C, H, W]), or None when the library's
/// kernel does not apply (another dtype or rank).
pub fn max_pool(lw: &mut Lowerer, x: &TensorValue, w: &Windows, name: &str) -> Option<TensorValue> {
    let float = matches!(x.dtype, DType::F32 | DType::F16 | DType::BF16);
    if !lw.native_calls() || !float || w.rank() != 2 {
        return None;
    }
    let (batch, channels) = match x.rank() {
        4 => (x.sizes[0].clone(), x.sizes[1].clone()),
        _ => (SymExpr::Int(1), x.sizes[0].clone()),
    };
    let int = SymExpr::Int;
    let geometry = vec![
        batch,
        channels.clone(),
        w.input[0].clone(),
        w.input[1].clone(),
        channels,
        w.kernel[0].clone(),
        w.kernel[1].clone(),
        w.output[0].clone(),
        w.output[1].clone(),
        int(w.stride[0]),
        int(w.stride[1]),
        int(w.padding[0]),
        int(w.padding[1]),
        int(w.dilation[0]),
        int(w.dilation[1]),
        // Groups (unused by pooling), no bias, weight, residual, activation, pooling
        // of the result or input scale.
        int(1),
        int(0),
        int(0),
        int(0),
        int(0),
        int(0),
        int(0),
    ];
    let input = lw.contiguous(&with_dtype(x, DType::F32), &format!("{name}.input"));
    let sizes: Vec<SymExpr> = x.sizes[..x.rank() - 2].iter().chain(&w.output).cloned().collect();
    let out = lw.prog.add_buffer(name, DType::F32, sizes.clone(), BufKind::Scratch);
    let args = vec![ExternArg::Buf(input), ExternArg::Sizes(geometry)];
    lw.prog.kernels.push(Kernel::Extern(Box::new(ExternCall { name: MAX_POOL_SYMBOL, out, args, flops: int(0) })));
    Some(with_dtype(&TensorValue::view_of(out, DType::F32, sizes), x.dtype))
}
