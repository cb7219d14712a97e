//! The convolution against a naive loop in float64: every algorithm, strides, padding,
//! dilation, groups, depthwise multipliers, bias, batches, weights packed by the compiler,
//! a residual and a ReLU in the output pass, on 1 and 2 threads.

use super::__aotc_conv2d_f32;
use crate::pool::{with_threads, PoolUser};
use aotc_abi::conv::{winograd, Algorithm, Conv2d, InputTransform, WeightForm};
use aotc_abi::gemm::Activation;

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut z = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            z ^= z << 13;
            z ^= z >> 7;
            z ^= z << 17;
            (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

fn reference(g: &Conv2d, x: &[f32], w: &[f32], bias: Option<&[f32]>) -> Vec<f64> {
    let (cg, og) = (g.group_channels(), g.group_out_channels());
    let [oh_n, ow_n] = g.out_size;
    let mut out = vec![0.0; g.batch * g.out_channels * oh_n * ow_n];
    for n in 0..g.batch {
        for o in 0..g.out_channels {
            let group = o / og;
            for oh in 0..oh_n {
                for ow in 0..ow_n {
                    let mut acc = bias.map_or(0.0, |b| b[o] as f64);
                    for c in 0..cg {
                        for i in 0..g.kernel[0] {
                            for j in 0..g.kernel[1] {
                                let ih = (oh * g.stride[0] + i * g.dilation[0]) as isize - g.padding[0] as isize;
                                let iw = (ow * g.stride[1] + j * g.dilation[1]) as isize - g.padding[1] as isize;
                                if ih < 0 || iw < 0 || ih >= g.height as isize || iw >= g.width as isize {
                                    continue;
                                }
                                let xi = ((n * g.channels + group * cg + c) * g.height + ih as usize) * g.width
                                    + iw as usize;
                                let wi = ((o * cg + c) * g.kernel[0] + i) * g.kernel[1] + j;
                                acc += x[xi] as f64 * w[wi] as f64;
                            }
                        }
                    }
                    out[((n * g.out_channels + o) * oh_n + oh) * ow_n + ow] = acc;
                }
            }
        }
    }
    out
}

/// A geometry with its output size derived.
#[allow(clippy::too_many_arguments)]
fn geometry(
    batch: usize,
    channels: usize,
    hw: [usize; 2],
    out_channels: usize,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
    groups: usize,
    has_bias: bool,
) -> Conv2d {
    let out = |d: usize| (hw[d] + 2 * padding[d] - dilation[d] * (kernel[d] - 1) - 1) / stride[d] + 1;
    Conv2d {
        batch,
        channels,
        height: hw[0],
        width: hw[1],
        out_channels,
        kernel,
        out_size: [out(0), out(1)],
        stride,
        padding,
        dilation,
        groups,
        has_bias,
        weight: WeightForm::Rows,
        residual: false,
        activation: Activation::None,
        pool: false,
        input: InputTransform::None,
    }
}

fn check(g: Conv2d, threads: usize) {
    let x = values(g.batch * g.channels * g.height * g.width, 1);
    let w = values(g.out_channels * g.depth(), 2);
    // What passes::prepack writes: each group's rows packed as a GEMM's left operand
    // (panels of MR output channels), or for the transposed product as a right operand
    // (panels of NR).
    let packed_as = |width| -> Vec<f32> {
        let (depth, og) = (g.depth(), g.group_out_channels());
        (0..g.groups)
            .flat_map(|group| aotc_abi::gemm::pack(depth, og, width, |p, o| w[(group * og + o) * depth + p]).unwrap())
            .collect()
    };
    let (packed, column_packed) = (packed_as(aotc_abi::gemm::MR), packed_as(aotc_abi::gemm::NR));
    let bias = values(g.out_channels, 3);
    let residual = values(g.batch * g.out_channels * g.positions(), 4);
    let (scale, shift) = (values(g.batch * g.channels, 5), values(g.channels, 6));
    let [out_h, out_w] = g.written_size();
    let mut out = vec![f32::NAN; g.batch * g.out_channels * out_h * out_w];
    let mut scratch = vec![f32::NAN; g.scratch_len().unwrap()];
    let transformed = if g.weight == WeightForm::Winograd {
        winograd::transform_weight(&w, g.out_channels, g.channels).unwrap()
    } else {
        Vec::new()
    };
    let weight = match g.weight {
        WeightForm::Rows => w.as_ptr(),
        WeightForm::Panels => packed.as_ptr(),
        WeightForm::Winograd => transformed.as_ptr(),
        WeightForm::ColumnPanels => column_packed.as_ptr(),
    };
    let list = g.to_list();
    // Buffers a kernel takes for the call hold NaN from "earlier calls".
    let spare = crate::spare::Spare::poisoned(threads, 8, 1 << 16);
    crate::spare::lend(&spare, || {
        with_threads(threads, || {
            // SAFETY: every buffer holds what the geometry describes.
            unsafe {
                __aotc_conv2d_f32(
                    out.as_mut_ptr(),
                    x.as_ptr(),
                    weight,
                    bias.as_ptr(),
                    scratch.as_mut_ptr(),
                    residual.as_ptr(),
                    scale.as_ptr(),
                    shift.as_ptr(),
                    list.as_ptr(),
                    list.len() as i64,
                )
            }
        })
    });
    // The reference convolves the input the library was to transform, transformed (in
    // float32, as the graph's kernel).
    let plane = g.height * g.width;
    let input: Vec<f32> = match g.input {
        InputTransform::None => x.clone(),
        InputTransform::Scale => x.iter().enumerate().map(|(i, &v)| v * scale[i / plane.max(1)]).collect(),
        InputTransform::ScaleShiftRelu => {
            let normed: Vec<f32> = x
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    let c = i / plane.max(1) % g.channels;
                    (v * scale[c] + shift[c]).max(0.0)
                })
                .collect();
            assert!(normed.contains(&0.0) && normed.iter().any(|&v| v > 0.0), "{g:?}: the ReLU clamps some inputs");
            normed
        }
    };
    let mut want = reference(&g, &input, &w, g.has_bias.then_some(&bias[..]));
    for (w, &r) in want.iter_mut().zip(&residual) {
        *w += if g.residual { r as f64 } else { 0.0 };
        *w = crate::activation::reference(g.activation, *w);
    }
    if g.pool {
        want = pooled(&g, &want);
    }
    if g.activation == Activation::Relu && g.residual && want.len() >= 16 {
        assert!(want.contains(&0.0) && want.iter().any(|&w| w > 0.0), "{g:?}: the ReLU clamps some outputs, not all");
    }
    // Float32 sums of `depth` products, and the activation's own rounding (an empty
    // depth still rounds the bias and residual through it). Winograd's F(4x4, 3x3) sums
    // transformed values several times the input's and the weight's size, and its output
    // transform takes differences of them: on these cases its error is up to 6.5 times
    // the direct sums' (the same inputs through `Rows`), so its bound is 4 times as wide
    // (`aotc_abi::conv::winograd` has the error measured over 3 to 512 channels).
    let depth = g.depth() as f64;
    let rounding = if g.algorithm() == Algorithm::Winograd { 4.0 } else { 1.0 };
    for (i, (&got, &want)) in out.iter().zip(&want).enumerate() {
        assert!(
            (got as f64 - want).abs() <= rounding * 1e-6 * (depth.sqrt() * 4.0).max(1.0),
            "{g:?} on {threads} threads: element {i} is {got}, expected {want}"
        );
    }
}

/// The 2x2 max pool at stride 2 of `full`, the convolution's output.
fn pooled(g: &Conv2d, full: &[f64]) -> Vec<f64> {
    let ([h, w], [ph, pw]) = (g.out_size, g.written_size());
    let mut out = Vec::with_capacity(g.batch * g.out_channels * ph * pw);
    for plane in full.chunks_exact(h * w) {
        for (r, c) in (0..ph).flat_map(|r| (0..pw).map(move |c| (r, c))) {
            let at = |i: usize, j: usize| plane[(2 * r + i) * w + 2 * c + j];
            out.push(at(0, 0).max(at(0, 1)).max(at(1, 0)).max(at(1, 1)));
        }
    }
    out
}

#[test]
fn every_algorithm_matches_the_naive_convolution() {
    on_every_isa(|| {
        let user = PoolUser::acquire(2);
        let cases = [
            geometry(1, 3, [17, 19], 8, [3, 3], [1, 1], [1, 1], [1, 1], 1, true),
            geometry(2, 4, [12, 9], 6, [5, 3], [2, 3], [2, 0], [1, 2], 2, false),
            geometry(1, 3, [40, 40], 16, [7, 7], [2, 2], [3, 3], [1, 1], 1, false),
            geometry(2, 8, [10, 11], 5, [1, 1], [1, 1], [0, 0], [1, 1], 1, true),
            geometry(1, 8, [10, 11], 4, [1, 1], [2, 2], [0, 0], [1, 1], 1, true),
            geometry(1, 16, [64, 64], 32, [1, 1], [1, 1], [0, 0], [1, 1], 1, false),
            // Enough input channels that a scaled input goes in several blocks of columns.
            geometry(2, 300, [13, 17], 20, [1, 1], [1, 1], [0, 0], [1, 1], 1, true),
            geometry(2, 6, [15, 14], 6, [3, 3], [1, 1], [1, 1], [1, 1], 6, true),
            geometry(1, 6, [15, 14], 12, [5, 5], [2, 2], [2, 2], [1, 1], 6, false),
            geometry(1, 4, [9, 9], 4, [3, 3], [1, 1], [2, 2], [2, 2], 4, true),
            geometry(1, 72, [56, 56], 72, [3, 3], [2, 2], [1, 1], [1, 1], 72, true),
            geometry(1, 2, [3, 3], 2, [3, 3], [1, 1], [0, 0], [1, 1], 1, true),
            geometry(1, 1, [1, 50], 3, [1, 5], [1, 1], [0, 2], [1, 1], 1, true),
            geometry(2, 0, [4, 5], 3, [3, 3], [1, 1], [1, 1], [1, 1], 1, true),
            // Few positions (the transposed product's planes): ResNet's layer4 shapes, smaller.
            geometry(1, 40, [7, 7], 36, [3, 3], [1, 1], [1, 1], [1, 1], 1, true),
            // As large as the input, dilated, on a plane wider than tall (windows as shifted planes).
            geometry(1, 5, [6, 9], 7, [3, 3], [1, 1], [2, 2], [2, 2], 1, true),
            geometry(2, 24, [14, 14], 20, [3, 3], [2, 2], [1, 1], [1, 1], 2, false),
            geometry(1, 48, [7, 7], 40, [1, 1], [1, 1], [0, 0], [1, 1], 1, true),
            geometry(1, 48, [13, 13], 33, [1, 1], [2, 2], [0, 0], [1, 1], 1, false),
            // Work enough for 2 threads and no more output channels than positions: the
            // transposed product's threads each write the windows of their positions, cut
            // from shifted planes (DenseNet's 128 -> 32 at 7x7) or from window rows.
            geometry(1, 128, [7, 7], 32, [3, 3], [1, 1], [1, 1], [1, 1], 1, true),
            geometry(1, 64, [27, 27], 16, [3, 3], [2, 2], [1, 1], [1, 1], 1, false),
            // More output channels than positions, work enough for 2 threads: the threads
            // take ranges of channels (whole panels, the last one partial), each
            // transposing its own product (ShuffleNet's 192 -> 1024 at 7x7, smaller).
            geometry(1, 128, [7, 7], 200, [1, 1], [1, 1], [0, 0], [1, 1], 1, true),
            geometry(1, 32, [7, 7], 100, [3, 3], [1, 1], [1, 1], [1, 1], 1, true),
        ];
        let algorithms: Vec<Algorithm> = cases.iter().map(|g| g.algorithm()).collect();
        for a in [Algorithm::Columns, Algorithm::Pointwise, Algorithm::Depthwise] {
            assert!(algorithms.contains(&a), "{a:?} not covered");
        }
        for g in cases {
            for threads in [1, 2] {
                check(g, threads);
                check(Conv2d { residual: true, activation: Activation::Relu, ..g }, threads);
                check(Conv2d { activation: Activation::Relu, ..g }, threads);
                check(Conv2d { residual: true, activation: Activation::Hardswish, ..g }, threads);
                check(Conv2d { activation: Activation::Gelu, ..g }, threads);
                if g.algorithm() != Algorithm::Depthwise {
                    check(Conv2d { weight: WeightForm::Panels, ..g }, threads);
                    check(Conv2d { weight: WeightForm::Panels, residual: true, ..g }, threads);
                    check(Conv2d { weight: WeightForm::ColumnPanels, ..g }, threads);
                    check(
                        Conv2d { weight: WeightForm::ColumnPanels, residual: true, activation: Activation::Relu, ..g },
                        threads,
                    );
                    check(Conv2d { weight: WeightForm::ColumnPanels, activation: Activation::Silu, ..g }, threads);
                }
                if g.algorithm() == Algorithm::Pointwise && g.groups == 1 {
                    for weight in [WeightForm::Panels, WeightForm::ColumnPanels] {
                        for input in [InputTransform::Scale, InputTransform::ScaleShiftRelu] {
                            check(Conv2d { weight, input, ..g }, threads);
                            check(Conv2d { weight, input, residual: true, activation: Activation::Silu, ..g }, threads);
                        }
                    }
                }
                if g.algorithm().pools() {
                    check(Conv2d { pool: true, activation: Activation::Relu, ..g }, threads);
                    check(
                        Conv2d { pool: true, weight: WeightForm::Panels, activation: Activation::Hardswish, ..g },
                        threads,
                    );
                }
            }
        }
        drop(user);
    });
}

#[test]
fn direct_convolutions_of_few_channels_match_the_naive_convolution() {
    on_every_isa(|| {
        let user = PoolUser::acquire(2);
        let cases = [
            // Stems: stride 2, rows of several vectors, the last partial; output channels
            // not a multiple of a panel's 6.
            geometry(1, 3, [37, 41], 24, [3, 3], [2, 2], [1, 1], [1, 1], 1, true),
            geometry(1, 3, [50, 50], 64, [7, 7], [2, 2], [3, 3], [1, 1], 1, false),
            geometry(1, 3, [16, 17], 16, [3, 3], [2, 2], [0, 0], [1, 1], 1, true),
            // Stride 1, two images; one channel, rows wider than 4 vectors.
            geometry(2, 4, [20, 70], 13, [3, 3], [1, 1], [1, 1], [1, 1], 1, true),
            geometry(1, 1, [9, 90], 5, [5, 5], [1, 1], [2, 2], [1, 1], 1, true),
            // Rows narrower than a vector, two images.
            geometry(2, 3, [13, 6], 8, [3, 3], [1, 1], [1, 1], [1, 1], 1, true),
        ];
        for g in cases {
            let g = Conv2d { weight: WeightForm::Panels, ..g };
            if crate::isa::Isa::best() != crate::isa::Isa::Portable {
                assert!(super::direct::kernel(&g).is_some(), "{g:?} not direct");
            }
            for threads in [1, 2] {
                check(g, threads);
                check(Conv2d { residual: true, activation: Activation::Relu, ..g }, threads);
                check(Conv2d { activation: Activation::Hardswish, ..g }, threads);
            }
        }
        drop(user);
    });
}

#[test]
fn both_ways_of_cutting_the_windows_match_the_naive_convolution() {
    on_every_isa(|| {
        let user = PoolUser::acquire(2);
        let cases = [
            // More positions than channels: several column blocks (the last partial), two
            // depth blocks, rows of 9 positions (several runs per panel).
            geometry(1, 40, [30, 9], 16, [3, 3], [1, 1], [1, 1], [1, 1], 1, true),
            // Stride 2, dilation 2, 7 positions per row, blocks of ResNet's stem shape.
            geometry(1, 3, [45, 39], 24, [7, 7], [2, 2], [3, 3], [2, 1], 1, false),
            // Stride 3 (the gather's general lanes) and uneven padding.
            geometry(1, 5, [20, 23], 7, [3, 4], [3, 3], [1, 2], [1, 1], 1, true),
            // More channels than positions: the whole windows, three depth blocks, a row of
            // 7 and 49 positions (ResNet's layer4 shape, scaled down).
            geometry(1, 64, [7, 7], 70, [3, 3], [1, 1], [1, 1], [1, 1], 1, true),
            geometry(1, 70, [14, 14], 200, [3, 3], [2, 2], [1, 1], [1, 1], 1, false),
            // Groups, each its own product, and a 1x1 strided kernel.
            geometry(2, 32, [12, 12], 64, [3, 3], [1, 1], [1, 1], [1, 1], 2, true),
            geometry(1, 64, [14, 14], 128, [1, 1], [2, 2], [0, 0], [1, 1], 1, true),
        ];
        for g in cases {
            assert_eq!(g.algorithm(), Algorithm::Columns);
            for threads in [1, 2] {
                check(g, threads);
                check(
                    Conv2d { weight: WeightForm::Panels, residual: true, activation: Activation::Hardswish, ..g },
                    threads,
                );
                check(Conv2d { weight: WeightForm::Panels, ..g }, threads);
                // Pooled: blocks of row pairs (a last odd row and column dropped), or the
                // whole windows' planes pooled after their GEMM.
                check(Conv2d { pool: true, weight: WeightForm::Panels, activation: Activation::Relu, ..g }, threads);
                check(Conv2d { pool: true, activation: Activation::Hardswish, ..g }, threads);
            }
        }
        drop(user);
    });
}

#[test]
fn winograd_matches_the_naive_convolution() {
    on_every_isa(|| {
        let user = PoolUser::acquire(2);
        let cases = [
            // Many tile rows, several blocks, padding 1 (ResNet's layers, scaled down).
            geometry(1, 16, [30, 30], 16, [3, 3], [1, 1], [1, 1], [1, 1], 1, true),
            // Odd output sizes (half tiles at the right and bottom), no padding, two images
            // whose tile rows share blocks, output channels not whole panels.
            geometry(2, 5, [11, 9], 7, [3, 3], [1, 1], [0, 0], [1, 1], 1, false),
            // Padding 2 (tiles wholly in the padding), one tile column.
            geometry(1, 3, [3, 2], 4, [3, 3], [1, 1], [2, 2], [1, 1], 1, true),
            // One block of a 7x7 plane: the output channels cut between the threads; a depth
            // of two blocks (300 channels).
            geometry(1, 300, [14, 14], 40, [3, 3], [1, 1], [1, 1], [1, 1], 1, true),
            // Many images of small planes in one block (bench_convnet's last layer, scaled).
            geometry(4, 32, [8, 8], 64, [3, 3], [1, 1], [1, 1], [1, 1], 1, true),
            // Pooled rows of more than 8 tiles (a vector and a tail), several blocks.
            geometry(1, 16, [36, 38], 16, [3, 3], [1, 1], [1, 1], [1, 1], 1, true),
            // A plane one row high, uneven padding.
            geometry(1, 4, [1, 20], 6, [3, 3], [1, 1], [1, 2], [1, 1], 1, false),
        ];
        for g in cases {
            let g = Conv2d { weight: WeightForm::Winograd, ..g };
            assert!(winograd::fits(g.kernel, g.stride, g.dilation, g.groups));
            assert_eq!(Conv2d::from_list(&g.to_list()), Some(g), "a valid geometry");
            assert_eq!(g.algorithm(), Algorithm::Winograd);
            for threads in [1, 2] {
                check(g, threads);
                check(Conv2d { residual: true, activation: Activation::Relu, ..g }, threads);
                check(Conv2d { activation: Activation::Hardswish, ..g }, threads);
                // Pooled in the output transform: a tile per window (a last half tile dropped).
                check(Conv2d { pool: true, activation: Activation::Relu, ..g }, threads);
                check(Conv2d { pool: true, activation: Activation::Hardswish, ..g }, threads);
            }
        }
        drop(user);
    });
}

#[test]
fn depthwise_fast_paths_match_the_naive_convolution() {
    on_every_isa(|| {
        let user = PoolUser::acquire(2);
        // (channels, multiplier, [H, W], kernel, stride, padding, batch)
        let cases = [
            (6, 1, [13, 11], 3, 1, [1, 1], 1),
            (5, 1, [7, 7], 3, 1, [1, 1], 2),
            (3, 1, [28, 70], 3, 1, [1, 1], 1),
            (4, 1, [10, 83], 3, 1, [0, 0], 1),
            (3, 1, [6, 9], 3, 1, [2, 2], 1),
            (3, 1, [9, 45], 3, 1, [1, 1], 1),
            (2, 1, [21, 8], 3, 1, [1, 1], 1),
            (2, 1, [19, 12], 5, 2, [2, 2], 1),
            (3, 1, [9, 12], 3, 1, [1, 2], 1),
            (4, 1, [112, 112], 3, 2, [1, 1], 1),
            (3, 1, [15, 17], 3, 2, [1, 1], 2),
            (4, 1, [11, 13], 3, 2, [1, 1], 1),
            (3, 1, [10, 9], 5, 2, [1, 1], 1),
            (3, 1, [33, 100], 3, 2, [0, 0], 1),
            (2, 1, [9, 37], 3, 2, [2, 2], 1),
            (5, 1, [7, 7], 5, 1, [2, 2], 2),
            (3, 1, [14, 14], 5, 1, [2, 2], 1),
            (3, 1, [20, 23], 5, 1, [0, 0], 1),
            (4, 1, [14, 14], 5, 2, [2, 2], 1),
            (3, 1, [29, 31], 5, 2, [2, 2], 1),
            (2, 1, [21, 40], 5, 2, [1, 1], 1),
            (3, 2, [15, 19], 3, 2, [1, 1], 1),
            (3, 2, [12, 9], 5, 1, [2, 2], 2),
            (2, 1, [1, 1], 3, 1, [1, 1], 1),
            (2, 1, [2, 3], 5, 2, [2, 2], 1),
            // 7x7 (ConvNeXt's, scaled down), wide rows and a plane smaller than the kernel.
            (3, 1, [14, 14], 7, 1, [3, 3], 1),
            (2, 1, [9, 40], 7, 1, [3, 3], 2),
            (2, 1, [4, 5], 7, 1, [3, 3], 1),
            (3, 1, [15, 17], 7, 2, [3, 3], 1),
            // More chunks than channels on 2 threads: chunks share the padded planes.
            (2, 1, [64, 64], 3, 1, [1, 1], 4),
        ];
        for (channels, multiplier, hw, k, s, padding, batch) in cases {
            let g =
                geometry(batch, channels, hw, channels * multiplier, [k, k], [s, s], padding, [1, 1], channels, true);
            assert_eq!(g.algorithm(), Algorithm::Depthwise);
            #[cfg(target_arch = "x86_64")]
            if crate::isa::Isa::best() != crate::isa::Isa::Portable {
                let fast = super::depthwise::fast_path(&g, g.scratch_len().unwrap()).is_some();
                assert!(fast, "{g:?} takes the fast path");
            }
            for threads in [1, 2] {
                for (residual, activation) in [
                    (false, Activation::None),
                    (true, Activation::None),
                    (false, Activation::Relu),
                    (true, Activation::Hardswish),
                    (false, Activation::Silu),
                ] {
                    check(Conv2d { residual, activation, ..g }, threads);
                    check(Conv2d { residual, activation, has_bias: false, ..g }, threads);
                }
            }
        }
        drop(user);
    });
}

#[test]
fn the_depthwise_relu_keeps_nan() {
    on_every_isa(|| {
        for (k, s) in [(3, 1), (5, 2), (3, 3)] {
            let g = Conv2d {
                activation: Activation::Relu,
                ..geometry(1, 2, [9, 10], 2, [k, k], [s, s], [1, 1], [1, 1], 2, false)
            };
            let mut x = values(g.channels * g.height * g.width, 5);
            x[4 * g.width + 4] = f32::NAN;
            let w = values(g.out_channels * g.depth(), 6);
            let mut out = vec![0.0f32; g.out_channels * g.positions()];
            let mut scratch = vec![0.0f32; g.scratch_len().unwrap()];
            let list = g.to_list();
            // SAFETY: every buffer holds what the geometry describes (no bias, no residual).
            unsafe {
                __aotc_conv2d_f32(
                    out.as_mut_ptr(),
                    x.as_ptr(),
                    w.as_ptr(),
                    w.as_ptr(),
                    scratch.as_mut_ptr(),
                    x.as_ptr(),
                    x.as_ptr(),
                    x.as_ptr(),
                    list.as_ptr(),
                    list.len() as i64,
                )
            };
            let (plane0, plane1) = out.split_at(g.positions());
            assert!(plane0.iter().any(|v| v.is_nan()), "{g:?}: the windows over the NaN stay NaN");
            assert!(plane1.iter().all(|v| *v >= 0.0) && plane1.contains(&0.0), "{g:?}: the other plane is clamped");
        }
    });
}

#[test]
fn an_inconsistent_geometry_writes_nothing() {
    let g = geometry(1, 2, [4, 4], 2, [3, 3], [1, 1], [1, 1], [1, 1], 1, false);
    let mut list = g.to_list();
    list[7] = 5;
    let mut out = vec![7.0f32; 32];
    let x = [1.0f32; 32];
    // SAFETY: the buffers are larger than the (refused) geometry's.
    unsafe {
        __aotc_conv2d_f32(
            out.as_mut_ptr(),
            x.as_ptr(),
            x.as_ptr(),
            x.as_ptr(),
            out.as_mut_ptr(),
            x.as_ptr(),
            x.as_ptr(),
            x.as_ptr(),
            list.as_ptr(),
            list.len() as i64,
        )
    };
    assert!(out.iter().all(|&v| v == 7.0));
}

#[test]
fn max_pool_matches_the_naive_maximum_with_nan_winning() {
    on_every_isa(|| {
        use super::__aotc_max_pool2d_f32;
        let user = PoolUser::acquire(2);
        // (geometry, extra output window per dimension as ceil mode adds)
        let cases = [
            (geometry(1, 64, [112, 112], 64, [3, 3], [2, 2], [1, 1], [1, 1], 64, false), 0),
            (geometry(2, 3, [9, 10], 3, [2, 3], [1, 2], [1, 1], [2, 1], 3, false), 0),
            (geometry(1, 2, [7, 7], 2, [3, 3], [2, 2], [0, 0], [1, 1], 2, false), 1),
            // The AVX2 rows: 2 x 2 stride 2 (bench_convnet's, then odd sizes with a ceil-mode
            // window), 3 x 3 stride 2 padding 1 on odd sizes, stride 1 dilated, 8 outputs and a
            // tail; and a horizontal stride 3 (like rows of fewer than 8 outputs, above), which
            // they leave to the portable code.
            (geometry(4, 32, [64, 64], 32, [2, 2], [2, 2], [0, 0], [1, 1], 32, false), 0),
            (geometry(1, 3, [9, 19], 3, [2, 2], [2, 2], [0, 0], [1, 1], 3, false), 1),
            (geometry(2, 3, [15, 21], 3, [3, 3], [2, 2], [1, 1], [1, 1], 3, false), 0),
            (geometry(1, 2, [13, 17], 2, [3, 3], [2, 2], [1, 1], [1, 1], 2, false), 1),
            (geometry(1, 2, [10, 21], 2, [3, 3], [1, 1], [1, 1], [1, 2], 2, false), 0),
            (geometry(1, 1, [5, 40], 1, [2, 5], [2, 2], [0, 2], [1, 1], 1, false), 0),
            (geometry(1, 2, [11, 11], 2, [3, 3], [3, 3], [1, 1], [1, 1], 2, false), 0),
            // Kernel rows beyond one pass's three, some of them in the padding.
            (geometry(1, 2, [12, 20], 2, [5, 3], [1, 1], [2, 1], [1, 1], 2, false), 0),
        ];
        for (g, extra) in cases {
            let g = Conv2d { out_size: [g.out_size[0] + extra, g.out_size[1] + extra], ..g };
            let mut x = values(g.batch * g.channels * g.height * g.width, 4);
            x[5] = f32::NAN;
            // NaNs in even and odd columns, and the last element.
            let len = x.len();
            x[len / 2 + 3] = f32::NAN;
            x[len - 1] = f32::NAN;
            for threads in [1, 2] {
                let mut out = vec![0.0f32; g.batch * g.channels * g.positions()];
                let list = g.to_list();
                with_threads(threads, || {
                    // SAFETY: the buffers hold what the geometry describes.
                    unsafe { __aotc_max_pool2d_f32(out.as_mut_ptr(), x.as_ptr(), list.as_ptr(), list.len() as i64) }
                });
                for (p, plane) in out.chunks(g.positions()).enumerate() {
                    for (q, &got) in plane.iter().enumerate() {
                        let (oh, ow) = (q / g.out_size[1], q % g.out_size[1]);
                        let mut want = f32::NEG_INFINITY;
                        for i in 0..g.kernel[0] {
                            for j in 0..g.kernel[1] {
                                let ih = (oh * g.stride[0] + i * g.dilation[0]) as isize - g.padding[0] as isize;
                                let iw = (ow * g.stride[1] + j * g.dilation[1]) as isize - g.padding[1] as isize;
                                if ih >= 0 && iw >= 0 && (ih as usize) < g.height && (iw as usize) < g.width {
                                    let v = x[(p * g.height + ih as usize) * g.width + iw as usize];
                                    want = if v > want || v.is_nan() { v } else { want };
                                }
                            }
                        }
                        assert!(
                            got == want || (got.is_nan() && want.is_nan()),
                            "{g:?}: plane {p} position {q}: {got} vs {want}"
                        );
                    }
                }
                assert!(out.iter().any(|v| v.is_nan()), "the NaN wins its windows");
            }
        }
        drop(user);
    });
}

/// Runs `test` on each instruction set this CPU runs, the portable code included.
fn on_every_isa(test: impl Fn()) {
    for isa in crate::isa::Isa::every_available() {
        isa.forced(&test);
    }
}
