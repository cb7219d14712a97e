//! The fast path of floating-point 1-D and 2-D convolutions: one call of the support
//! library's float32 convolution (`aotc_abi::conv`: a GEMM per image and group over the
//! input's windows, gathered as the GEMM packs them, or a channels-last depthwise kernel),
//! the bias added inside it. float16 and bfloat16 convolutions run it on their operands
//! widened to float32 and round the result once, which is how PyTorch computes them on
//! the CPU (float32 accumulation).
//! Other convolutions (transposed, 3-D, other dtypes, symbolic channel counts, and all
//! of them when lowering for CUDA) take the general lowering of `conv.rs`; so do the
//! epilogue folds of `epilogue.rs`, which apply only to this call.

use super::Params;
use crate::ir::{BufKind, ExternArg, ExternCall, Kernel};
use crate::lower::aten::pool::window::Windows;
use crate::lower::aten::pool::with_dtype;
use crate::lower::tensor::TensorValue;
use crate::lower::Lowerer;
use aotc_abi::conv::{scratch_len, Algorithm, SYMBOL};
use aotc_abi::manifest::GuardOp;
use aotc_abi::sym::SymExpr;
use aotc_abi::DType;

/// `conv(x, weight) + bias` through the support library, or None when the convolution is
/// not one it computes (the caller then lowers it in general). The caller has checked the
/// operands and computed the windows.
pub fn lower(
    lw: &mut Lowerer,
    x: &TensorValue,
    weight: &TensorValue,
    bias: Option<&TensorValue>,
    p: &Params,
    w: &Windows,
    name: &str,
) -> Result<Option<TensorValue>, String> {
    let nd = w.rank();
    let half = matches!(x.dtype, DType::F16 | DType::BF16);
    if !lw.native_calls() || p.transposed || !(x.dtype == DType::F32 || half) || !(1..=2).contains(&nd) {
        return Ok(None);
    }
    let statics = |v: &[SymExpr]| {
        v.iter().map(|s| s.as_int().and_then(|i| usize::try_from(i).ok())).collect::<Option<Vec<usize>>>()
    };
    let params = |v: &[i64]| v.iter().map(|&i| usize::try_from(i).ok()).collect::<Option<Vec<usize>>>();
    let known = (
        statics(&x.sizes[1..2]),
        statics(&weight.sizes[..1]),
        statics(&w.kernel),
        params(&p.stride),
        params(&p.padding),
        params(&p.dilation),
    );
    let (Some(channels), Some(out_channels), Some(kernel), Some(stride), Some(padding), Some(dilation)) = known else {
        return Ok(None);
    };
    let (channels, out_channels, groups) = (channels[0], out_channels[0], p.groups as usize);
    if let Some(b) = bias {
        lw.require(
            b.sizes[0].clone(),
            GuardOp::Eq,
            SymExpr::Int(out_channels as i64),
            "bias has one element per output channel",
        )?;
    }
    // A 1-D convolution is a 2-D one over a height of 1.
    let pair = |v: &[usize], one: usize| if nd == 1 { [one, v[0]] } else { [v[0], v[1]] };
    let (kernel, stride, padding, dilation) =
        (pair(&kernel, 1), pair(&stride, 1), pair(&padding, 0), pair(&dilation, 1));
    let algorithm = Algorithm::choose(channels / groups, groups, kernel, stride, padding);
    let spatial = |v: &[SymExpr]| if nd == 1 { [SymExpr::Int(1), v[0].clone()] } else { [v[0].clone(), v[1].clone()] };
    let ([height, width], [out_h, out_w]) = (spatial(&w.input), spatial(&w.output));
    let int = |v: usize| SymExpr::Int(v as i64);
    let geometry = vec![
        x.sizes[0].clone(),
        int(channels),
        height.clone(),
        width.clone(),
        int(out_channels),
        int(kernel[0]),
        int(kernel[1]),
        out_h.clone(),
        out_w.clone(),
        int(stride[0]),
        int(stride[1]),
        int(padding[0]),
        int(padding[1]),
        int(dilation[0]),
        int(dilation[1]),
        int(groups),
        int(bias.is_some() as usize),
        // The weight as it is (passes::prepack packs a constant one); no residual,
        // activation or pooling yet (epilogue.rs folds those in), no input scale
        // (passes::gate folds one in).
        int(0),
        int(0),
        int(0),
        int(0),
        int(0),
    ];
    let input = lw.contiguous(&with_dtype(x, DType::F32), &format!("{name}.input"));
    let weights = lw.contiguous(&with_dtype(weight, DType::F32), &format!("{name}.weight"));
    let bias = bias.map(|b| lw.contiguous(&with_dtype(b, DType::F32), &format!("{name}.bias")));
    let positions = SymExpr::mul([out_h.clone(), out_w.clone()]);
    let depth = SymExpr::Int((channels / groups * kernel[0] * kernel[1]) as i64);
    let scratch = match algorithm {
        Algorithm::Depthwise => {
            let len = scratch_len(
                algorithm,
                out_channels,
                kernel,
                padding,
                [height.clone(), width.clone()],
                [out_h.clone(), out_w.clone()],
            );
            ExternArg::Workspace(lw.prog.add_buffer(format!("{name}.scratch"), DType::F32, vec![len], BufKind::Scratch))
        }
        // Not read (the GEMMs need no scratch; passes::prepack may make the call Winograd's,
        // whose blocks are the library's own): any buffer gives the call a valid pointer,
        // and the input is one the call only reads.
        Algorithm::Columns | Algorithm::Pointwise | Algorithm::Winograd => ExternArg::Buf(input),
    };
    let out_sizes: Vec<SymExpr> =
        [x.sizes[0].clone(), int(out_channels)].into_iter().chain(w.output.iter().cloned()).collect();
    let out = lw.prog.add_buffer(name, DType::F32, out_sizes.clone(), BufKind::Scratch);
    // In the order of aotc_abi::conv's ARG_ constants; an unused buffer is `input`.
    let args = vec![
        ExternArg::Buf(input),
        ExternArg::Buf(weights),
        ExternArg::Buf(bias.unwrap_or(input)),
        scratch,
        ExternArg::Buf(input),
        ExternArg::Buf(input),
        ExternArg::Buf(input),
        ExternArg::Sizes(geometry),
    ];
    let flops = SymExpr::mul([SymExpr::Int(2), x.sizes[0].clone(), int(out_channels), positions, depth]);
    lw.prog.kernels.push(Kernel::Extern(Box::new(ExternCall { name: SYMBOL, out, args, flops })));
    Ok(Some(with_dtype(&TensorValue::view_of(out, DType::F32, out_sizes), x.dtype)))
}
