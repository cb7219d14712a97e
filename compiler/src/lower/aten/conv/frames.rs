//! 3-D convolutions on the CPU as 2-D ones over frames (video networks): with time
//! padded by zero frames, output frame t is the sum over the kernel's time taps kd of the
//! 2-D convolution of input frame `t * stride + kd * dilation` with the weight's slice
//! kd. Each tap is one call of the support library's convolution over every output frame
//! at once (the batch times the output frames as its batch, the input's frames copied
//! frames-first by the support library, a plane at a time), the taps chained through the call's residual input, so the sum costs
//! no pass of its own; the result is the last call's output seen as [N, O, T, H, W].
//! This replaces an im2col matrix `kernel` times the input's size (27x for 3x3x3) with
//! one frames-first copy of the input per time tap. float32 only (the residual chain);
//! others take the general lowering.

use super::{native, Params};
use crate::ir::{BufKind, ExternArg, ExternCall, Kernel};
use crate::lower::aten::conv::epilogue::fuse_residual;
use crate::lower::aten::pool::window::Windows;
use crate::lower::tensor::TensorValue;
use crate::lower::Lowerer;
use aotc_abi::conv::FRAMES_SYMBOL;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

/// `conv3d(x, weight) + bias` as 2-D convolutions, or None when it does not apply. The
/// caller has checked the operands and computed the windows.
pub fn lower(
    lw: &mut Lowerer,
    x: &TensorValue,
    weight: &TensorValue,
    bias: Option<&TensorValue>,
    p: &Params,
    w: &Windows,
    name: &str,
) -> Result<Option<TensorValue>, String> {
    let statics = [&x.sizes[1], &weight.sizes[0]].into_iter().chain(&w.kernel).all(|s| s.as_int().is_some());
    if !lw.native_calls() || p.transposed || w.rank() != 3 || x.dtype != DType::F32 || !statics {
        return Ok(None);
    }
    let taps = w.kernel[0].as_int().expect("static, checked above");
    let (batch, channels, frames_out) = (x.sizes[0].clone(), x.sizes[1].clone(), w.output[0].clone());
    let (stride, dilation) = (p.stride[0], p.dilation[0]);
    let input = lw.contiguous(x, &format!("{name}.input"));
    let plane = Params {
        stride: p.stride[1..].to_vec(),
        padding: p.padding[1..].to_vec(),
        dilation: p.dilation[1..].to_vec(),
        output_padding: p.output_padding[1..].to_vec(),
        groups: p.groups,
        transposed: false,
    };
    let plane_windows = Windows {
        kernel: w.kernel[1..].to_vec(),
        stride: plane.stride.clone(),
        padding: plane.padding.clone(),
        dilation: plane.dilation.clone(),
        input: w.input[1..].to_vec(),
        output: w.output[1..].to_vec(),
    };
    let images = SymExpr::mul([batch.clone(), frames_out.clone()]);
    let mut sum: Option<TensorValue> = None;
    for kd in 0..taps {
        // [N * T_out, C, H, W]: frame t * stride + kd * dilation - padding of the input.
        let image_sizes = vec![images.clone(), channels.clone(), x.sizes[3].clone(), x.sizes[4].clone()];
        let frames =
            lw.prog.add_buffer(format!("{name}.frames{kd}"), DType::F32, image_sizes.clone(), BufKind::Scratch);
        let geometry = vec![
            batch.clone(),
            channels.clone(),
            x.sizes[2].clone(),
            SymExpr::mul([x.sizes[3].clone(), x.sizes[4].clone()]),
            frames_out.clone(),
            SymExpr::Int(stride),
            SymExpr::Int(kd * dilation - p.padding[0]),
        ];
        let args = vec![ExternArg::Buf(input), ExternArg::Sizes(geometry)];
        let call = ExternCall { name: FRAMES_SYMBOL, out: frames, args, flops: SymExpr::Int(0) };
        lw.prog.kernels.push(Kernel::Extern(Box::new(call)));
        let frames = TensorValue::view_of(frames, DType::F32, image_sizes);
        let tap_weight = weight.select(2, SymExpr::Int(kd));
        let tap_name = format!("{name}.tap{kd}");
        let tap_bias = if kd == 0 { bias } else { None };
        let y = native::lower(lw, &frames, &tap_weight, tap_bias, &plane, &plane_windows, &tap_name)?
            .ok_or_else(|| format!("{name}: the 2-D convolution of time tap {kd} has no native kernel"))?;
        sum = Some(match sum {
            None => y,
            Some(earlier) => fuse_residual(lw, &y, &earlier)
                .ok_or_else(|| format!("{name}: time tap {kd} cannot add the earlier taps in its output pass"))?,
        });
    }
    let y = sum.ok_or_else(|| format!("{name}: a kernel of no frames"))?;
    // [N * T_out, O, OH, OW] is [N, T_out, O, OH, OW]: seen as [N, O, T_out, OH, OW].
    let out_channels = weight.sizes[0].clone();
    let frames_first = lw.reshape(
        &y,
        &[batch, frames_out, out_channels, w.output[1].clone(), w.output[2].clone()],
        &format!("{name}.out"),
    );
    Ok(Some(frames_first.permute(&[0, 2, 1, 3, 4])?))
}
