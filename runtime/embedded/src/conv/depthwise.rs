//! Depthwise convolution (one input channel per group): each output plane is its bias plus
//! the input plane's rows shifted and scaled by each kernel tap, accumulated one output
//! row at a time so that the row stays in L1. Planes run on the call's threads.

use super::{for_items, valid_outputs};
use aotc_abi::conv::Conv2d;

pub fn run(g: &Conv2d, x: &[f32], weight: &[f32], bias: Option<&[f32]>, out: &mut [f32]) {
    let (plane_in, positions, taps) = (g.height * g.width, g.positions(), g.kernel[0] * g.kernel[1]);
    let multiplier = g.group_out_channels();
    let planes = g.batch * g.out_channels;
    for_items(out, planes, positions, out.len() * taps, &|begin, end, part| {
        for (p, out) in (begin..end).zip(part.chunks_exact_mut(positions)) {
            let (n, o) = (p / g.out_channels, p % g.out_channels);
            let input = &x[(n * g.channels + o / multiplier) * plane_in..][..plane_in];
            let w = &weight[o * taps..][..taps];
            plane(g, input, w, bias.map_or(0.0, |b| b[o]), out);
        }
    });
}

/// One output plane, with the AVX2 code where the CPU has it (the loops are the same; the
/// target feature lets the compiler vectorize them 8 wide).
fn plane(g: &Conv2d, input: &[f32], w: &[f32], bias: f32, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        return unsafe { plane_avx2(g, input, w, bias, out) };
    }
    plane_portable(g, input, w, bias, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn plane_avx2(g: &Conv2d, input: &[f32], w: &[f32], bias: f32, out: &mut [f32]) {
    plane_portable(g, input, w, bias, out)
}

#[inline(always)]
fn plane_portable(g: &Conv2d, input: &[f32], w: &[f32], bias: f32, out: &mut [f32]) {
    let [kh, kw] = g.kernel;
    let [out_h, out_w] = g.out_size;
    let (height, width, stride) = (g.height, g.width, g.stride[1]);
    for (oh, row) in out.chunks_exact_mut(out_w).enumerate() {
        row.fill(bias);
        for i in 0..kh {
            let offset_h = i * g.dilation[0];
            if !valid_outputs(offset_h, g.padding[0], g.stride[0], height, out_h).contains(&oh) {
                continue;
            }
            let src = &input[(oh * g.stride[0] + offset_h - g.padding[0]) * width..][..width];
            for (j, &tap) in w[i * kw..(i + 1) * kw].iter().enumerate() {
                let offset_w = j * g.dilation[1];
                let cols = valid_outputs(offset_w, g.padding[1], stride, width, out_w);
                let start = (cols.start as isize * stride as isize + offset_w as isize - g.padding[1] as isize) as usize;
                let dst = &mut row[cols.clone()];
                if stride == 1 {
                    for (o, &s) in dst.iter_mut().zip(&src[start..start + cols.len()]) {
                        *o += tap * s;
                    }
                } else {
                    for (o, &s) in dst.iter_mut().zip(src[start..].iter().step_by(stride)) {
                        *o += tap * s;
                    }
                }
            }
        }
    }
}
