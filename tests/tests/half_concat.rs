//! Native paths for float16/bfloat16 convolutions and for torch.cat, on half_concat (made
//! by tests/fixtures/make_half_concat.py): every convolution, whatever its dtype, is one
//! call of the float32 convolution kernel (no generated per-element loop), the max pool
//! one of the max pool kernel; a cat of convolution outputs is one byte copy, along
//! channels (the fire module) and along height (batch 2: one block per image), and a cat
//! with a computed part keeps the general lowering. The library still gives PyTorch's
//! results.

use aotc::ir::{ExternArg, Kernel};
use aotc_tests::{check_fixture, fixture};

#[test]
fn half_convolutions_and_concatenations_take_the_native_kernels() {
    let (_src, lowered) =
        aotc::lower_file(&fixture("half_concat").join("model.pt2"), &Default::default()).expect("lower");
    let prog = &lowered.program;
    let calls = |name: &str| {
        prog.kernels.iter().filter(move |k| matches!(k, Kernel::Extern(c) if c.name == name)).collect::<Vec<_>>()
    };
    // fire: squeeze, e1, e3; a and b (twice: the traced program calls each module twice);
    // h3, hdw and f16.
    assert_eq!(calls(aotc_abi::conv::SYMBOL).len(), 10);
    assert_eq!(calls(aotc_abi::conv::MAX_POOL_SYMBOL).len(), 1);
    let copies = calls(aotc_abi::concat::SYMBOL);
    let blocks: Vec<i64> = copies
        .iter()
        .map(|k| {
            let Kernel::Extern(c) = k else { unreachable!() };
            let [ExternArg::Bufs(parts), ExternArg::Sizes(sizes)] = c.args.as_slice() else {
                panic!("concat arguments: {:?}", c.args)
            };
            assert_eq!(3 * parts.len() + 1, sizes.len());
            sizes[0].as_int().expect("static")
        })
        .collect();
    // A block is everything before the cat dimension: the fire module's cat along channels
    // copies one per image, the tall one along height one per image and channel.
    assert_eq!(blocks, [2, 2 * 5]);
    check_fixture("half_concat");
}
