//! 3-D convolutions as 2-D ones over frames (`lower/aten/conv/frames.rs`), on conv3d (made
//! by tests/fixtures/make_conv3d.py): each time tap of each convolution is one frames copy
//! and one call of the 2-D convolution, the taps after the first adding the earlier ones
//! as the call's residual; no im2col matrix and no generated GEMM. The library still gives
//! PyTorch's results (time padding, spatial and time strides, time dilation, groups, a
//! batch of 2).

use aotc::ir::{ExternArg, Kernel};
use aotc_abi::conv::{Conv2d, Frames, ARG_GEOMETRY, FRAMES_SYMBOL, RESIDUAL, SYMBOL};
use aotc_tests::{check_fixture, fixture};

fn list(arg: &ExternArg) -> Vec<i64> {
    let ExternArg::Sizes(sizes) = arg else { panic!("a geometry list, got {arg:?}") };
    sizes.iter().map(|s| s.as_int().expect("static")).collect()
}

#[test]
fn every_time_tap_is_a_frames_copy_and_a_2d_convolution() {
    let (_src, lowered) = aotc::lower_file(&fixture("conv3d").join("model.pt2"), &Default::default()).expect("lower");
    let prog = &lowered.program;
    let mut frames = vec![];
    let mut residuals = vec![];
    for k in &prog.kernels {
        match k {
            Kernel::Extern(c) if c.name == FRAMES_SYMBOL => frames.push(Frames::from_list(&list(&c.args[1])).unwrap()),
            Kernel::Extern(c) if c.name == SYMBOL => {
                let g = list(&c.args[ARG_GEOMETRY]);
                Conv2d::from_list(&g).expect("a valid geometry");
                residuals.push(g[RESIDUAL] != 0);
            }
            Kernel::Matmul(_) => panic!("a generated GEMM: some convolution took the general lowering"),
            _ => {}
        }
    }
    // Taps: stem 3, c1 3, c2 3, down 1, dilated 2.
    let firsts: Vec<i64> = frames.iter().map(|f| f.first).collect();
    assert_eq!(firsts, [-1, 0, 1, -1, 0, 1, -1, 0, 1, 0, -1, 1]);
    assert_eq!(frames[9].stride, 2, "the downsample strides time");
    assert_eq!(frames[9].frames_out, 3);
    assert!(frames.iter().all(|f| f.batch == 2 && f.frames == 5));
    // The first tap of each convolution starts the sum; the others add it.
    assert_eq!(residuals, [false, true, true, false, true, true, false, true, true, false, false, true]);
    check_fixture("conv3d");
}
