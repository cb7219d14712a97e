//! Compile-time work on weights: no kernel copies a weight on every call (transformer_block's
//! output projection weight, transposed and expanded for its batched product, is read in
//! place: a view; a copy would be folded into a weight, `passes/fold.rs`'s own test), the
//! Linear layers and the projection read their weights packed, and the biases and the GELU
//! after ff1 are applied in the GEMMs' output pass; the library still gives PyTorch's
//! results.

use aotc::ir::expr::ExprKind;
use aotc::ir::{BufKind, Kernel};
use aotc_abi::gemm::Activation;
use aotc_runtime::{Device, Model};
use aotc_tests::{check_call, compile, fixture, recorded, tolerance};

#[test]
fn weight_copies_fold_and_linear_weights_are_packed() {
    let dir = fixture("transformer_block");
    let (_src, lowered) = aotc::lower_file(&dir.join("model.pt2"), &Default::default()).expect("lower");
    let prog = &lowered.program;
    for k in &prog.kernels {
        if let Kernel::Pointwise { body, .. } = k {
            if let ExprKind::Load { buf, .. } = &body.kind {
                let written_elsewhere = prog.kernels.iter().filter(|other| other.out() == k.out()).count() > 1;
                assert!(
                    written_elsewhere || !matches!(prog.buffers[*buf].kind, BufKind::Weight(_)),
                    "a kernel only copies weight {}",
                    prog.buffers[*buf].name
                );
            }
        }
    }
    let packed = prog.kernels.iter().filter(|k| matches!(k, Kernel::Matmul(m) if m.packed_b)).count();
    assert_eq!(packed, 4, "qkv, the projection, ff1 and ff2 read their weights packed");
    let fused: Vec<_> = prog
        .kernels
        .iter()
        .filter_map(|k| match k {
            Kernel::Matmul(m) if m.packed_b => {
                Some((m.bias.map(|b| prog.buffers[b].name.clone()), m.activation, m.accumulate))
            }
            _ => None,
        })
        .collect();
    let bias = |name: &str| Some(name.to_string());
    // (The projection's bias is added with the residual, in the pointwise kernel after it.)
    let plain = (None, Activation::None, false);
    assert_eq!(
        fused,
        [
            (bias("qkv.bias"), Activation::None, false),
            plain,
            (bias("ff1.bias"), Activation::Gelu, false),
            (bias("ff2.bias"), Activation::None, false)
        ]
    );
    assert!(
        !prog
            .kernels
            .iter()
            .any(|k| matches!(k, Kernel::Extern(call) if call.name == aotc_abi::internal_symbols::GELU)),
        "the GELU kernel is gone"
    );

    let (_tmp, so) = compile(&dir.join("model.pt2"));
    let mut model = Model::load(&so, Device::Cpu).expect("load");
    let (inputs, expected) = recorded(&dir, 0);
    check_call(&mut model, &inputs, &expected, tolerance(&dir), "transformer_block");
}
