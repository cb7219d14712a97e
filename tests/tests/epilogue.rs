//! Output passes fused after lowering (`passes::epilogue`), on conv_activations (made by
//! tests/fixtures/make_conv_activations.py): the hardswish after each convolution whose
//! own result nothing else needs becomes the convolution's activation, whatever its
//! algorithm (GEMM, depthwise, pointwise); a convolution whose result is also an output
//! keeps it and its hardswish stays a kernel; the Linear layer's bias and GELU go into its
//! GEMM. The library still gives PyTorch's results.

use aotc::ir::{ExternArg, Kernel};
use aotc_abi::conv::{Conv2d, ARG_GEOMETRY, SYMBOL};
use aotc_abi::gemm::Activation;
use aotc_tests::{check_fixture, fixture};

#[test]
fn hardswish_and_gelu_fuse_where_nothing_else_reads_the_result() {
    let (_src, lowered) =
        aotc::lower_file(&fixture("conv_activations").join("model.pt2"), &Default::default()).expect("lower");
    let prog = &lowered.program;
    let convs: Vec<(Conv2d, String)> = prog
        .kernels
        .iter()
        .filter_map(|k| match k {
            Kernel::Extern(call) if call.name == SYMBOL => {
                let ExternArg::Sizes(list) = &call.args[ARG_GEOMETRY] else { return None };
                let list: Vec<i64> = list.iter().map(|s| s.as_int().expect("static")).collect();
                Some((Conv2d::from_list(&list).expect("a valid geometry"), prog.buffers[call.out].name.clone()))
            }
            _ => None,
        })
        .collect();
    let activations: Vec<_> = convs.iter().map(|(g, _)| (g.algorithm(), g.activation)).collect();
    use aotc_abi::conv::Algorithm::*;
    assert_eq!(
        activations,
        [
            (Columns, Activation::Hardswish),
            (Depthwise, Activation::Hardswish),
            (Pointwise, Activation::None),
            (Pointwise, Activation::Relu)
        ]
    );
    // The pointwise convolution's result is the second output: kept, its hardswish apart.
    let output = lowered.outputs[1].1;
    assert!(prog.kernels.iter().any(|k| k.out() == output && matches!(k, Kernel::Extern(c) if c.name == SYMBOL)));
    assert_eq!(
        prog.kernels.iter().filter(|k| matches!(k, Kernel::Pointwise { .. })).count(),
        2,
        "the kept hardswish and the mean's division"
    );
    let gemm = prog
        .kernels
        .iter()
        .find_map(|k| match k {
            Kernel::Matmul(m) => Some(m),
            _ => None,
        })
        .expect("the Linear layer");
    assert!(
        gemm.packed_b && gemm.bias.is_some() && gemm.activation == Activation::Gelu && gemm.out == lowered.outputs[0].1
    );

    check_fixture("conv_activations");
}

/// EfficientNet's SiLU (sigmoid and mul, one pointwise kernel once lowered) after a
/// convolution becomes the convolution's activation; each of its 16 squeeze-and-excite
/// gates goes into the projection convolution after it, which scales its input
/// (`passes::gate`); and every kernel of this batch-1 network loops from a dimension
/// larger than 1 (`passes::squeeze`), so that it splits across threads.
#[test]
fn silu_and_gates_fuse_into_convolutions_and_batch_one_kernels_split() {
    let path = fixture("models/efficientnet_b0_w040").join("model.pt2");
    let (_src, lowered) = aotc::lower_file(&path, &Default::default()).expect("lower");
    let prog = &lowered.program;
    let convs: Vec<Conv2d> = prog
        .kernels
        .iter()
        .filter_map(|k| match k {
            Kernel::Extern(call) if call.name == SYMBOL => {
                let ExternArg::Sizes(list) = &call.args[ARG_GEOMETRY] else { return None };
                let list: Vec<i64> = list.iter().map(|s| s.as_int().expect("static")).collect();
                Some(Conv2d::from_list(&list).expect("a valid geometry"))
            }
            _ => None,
        })
        .collect();
    let silu = convs.iter().filter(|g| g.activation == Activation::Silu).count();
    assert!(silu >= 10, "{silu} convolutions apply their SiLU");
    assert_eq!(convs.iter().filter(|g| g.input_scale).count(), 16, "the gates");
    for k in &prog.kernels {
        if let Kernel::Pointwise { ranges, .. } | Kernel::Reduction { ranges, .. } = k {
            assert!(ranges.len() == 1 || ranges[0] != aotc_abi::sym::SymExpr::Int(1), "{ranges:?}");
        }
    }
    check_fixture("models/efficientnet_b0_w040");
}
