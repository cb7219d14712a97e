//! Output passes fused after lowering (`passes::epilogue`), on conv_activations (made by
//! tests/fixtures/make_conv_activations.py): the hardswish after each convolution whose
//! own result nothing else needs becomes the convolution's activation, whatever its
//! algorithm (GEMM, depthwise, pointwise); a convolution whose result is also an output
//! keeps it and its hardswish stays a kernel; the Linear layer's bias and GELU go into its
//! GEMM. The library still gives PyTorch's results.

use aotc::ir::{ExternArg, Kernel};
use aotc::lower::Lowered;
use aotc_abi::conv::{Conv2d, InputTransform, WeightForm, ARG_GEOMETRY, SYMBOL};
use aotc_abi::gemm::Activation;
use aotc_tests::{check_fixture, fixture};

/// The fixture's program lowered and optimized, and each of its support-library
/// convolutions: the geometry, and the name of the buffer it writes.
fn convolutions(name: &str) -> (Lowered, Vec<(Conv2d, String)>) {
    let (_src, lowered) = aotc::lower_file(&fixture(name).join("model.pt2"), &Default::default()).expect("lower");
    let prog = &lowered.program;
    let convs = prog
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
    (lowered, convs)
}

#[test]
fn hardswish_and_gelu_fuse_where_nothing_else_reads_the_result() {
    let (lowered, convs) = convolutions("conv_activations");
    let prog = &lowered.program;
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
    let (lowered, convs) = convolutions("models/efficientnet_b0_w040");
    let prog = &lowered.program;
    let convs: Vec<Conv2d> = convs.into_iter().map(|(g, _)| g).collect();
    let silu = convs.iter().filter(|g| g.activation == Activation::Silu).count();
    assert!(silu >= 10, "{silu} convolutions apply their SiLU");
    assert_eq!(convs.iter().filter(|g| g.input == InputTransform::Scale).count(), 16, "the gates");
    for k in &prog.kernels {
        if let Kernel::Pointwise { ranges, .. } | Kernel::Reduction { ranges, .. } = k {
            assert!(ranges.len() == 1 || ranges[0] != aotc_abi::sym::SymExpr::Int(1), "{ranges:?}");
        }
    }
    check_fixture("models/efficientnet_b0_w040");
}

/// DenseNet's pre-activation, an inference batch norm and a ReLU before each 1x1
/// convolution (one pointwise kernel once lowered, its factors per channel computed by
/// kernels of their own), goes into the convolution, which transforms its input
/// (`passes::gate`): the five dense layers' and the transition's.
#[test]
fn batch_norm_and_relu_before_a_pointwise_convolution_fold_into_it() {
    let (_lowered, convs) = convolutions("models/densenet_tiny");
    let normed: Vec<_> = convs.iter().filter(|(g, _)| g.input == InputTransform::ScaleShiftRelu).collect();
    assert_eq!(normed.len(), 6, "{convs:?}");
    assert!(normed.iter().all(|(g, _)| g.kernel == [1, 1]));
    // Planes of 16x16 and 8x8: the transposed GEMM, its weight repacked for it.
    assert!(normed.iter().all(|(g, _)| g.weight == WeightForm::ColumnPanels), "{normed:?}");
    check_fixture("models/densenet_tiny");
}
