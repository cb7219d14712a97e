//! Depthwise convolution (one input channel per group), two ways:
//!
//! - Large planes, plane by plane ([`planes`]): each output row is its bias plus the input
//!   rows shifted and scaled by each kernel tap, vectorized along the row; the planes run
//!   on the call's threads.
//! - Small planes (late layers: 7x7 with 576 channels), channels last ([`channels_last`]):
//!   per image the input is transposed into zero-padded `[H + 2 PH, W + 2 PW, O]` rows
//!   (each output channel beside a copy of its input channel), the weight into `[taps, O]`,
//!   and each output position is its bias plus, per tap, a product along the channels, 8
//!   wide; the `[positions, O]` sums are then transposed into the output planes. Rows of 7
//!   would leave the vectors mostly empty; the channels fill them.

use super::TapColumns;
use crate::pool::for_items;
use aotc_abi::conv::Conv2d;

/// Output positions up to which a plane is small (14 x 14).
const SMALL_PLANE: usize = 196;

/// `out = conv(x, weight) + bias` for one depthwise geometry; `scratch` holds
/// `g.scratch_len()` floats.
pub fn run(g: &Conv2d, x: &[f32], weight: &[f32], bias: Option<&[f32]>, scratch: &mut [f32], out: &mut [f32]) {
    if g.positions() <= SMALL_PLANE {
        channels_last(g, x, weight, bias, scratch, out)
    } else {
        planes(g, x, weight, bias, out)
    }
}

/// Plane by plane.
fn planes(g: &Conv2d, x: &[f32], weight: &[f32], bias: Option<&[f32]>, out: &mut [f32]) {
    let (plane_in, positions, taps) = (g.height * g.width, g.positions(), g.kernel[0] * g.kernel[1]);
    let multiplier = g.group_out_channels();
    let columns = TapColumns::of(g);
    for_items(out, g.batch * g.out_channels, positions, out.len() * taps, &|begin, end, part| {
        for (p, out) in (begin..end).zip(part.chunks_exact_mut(positions)) {
            let (n, o) = (p / g.out_channels, p % g.out_channels);
            let input = &x[(n * g.channels + o / multiplier) * plane_in..][..plane_in];
            plane(g, &columns, input, &weight[o * taps..][..taps], bias.map_or(0.0, |b| b[o]), out);
        }
    });
}

/// One output plane, with the AVX2 code where the CPU has it (the loops are the same; the
/// target feature lets the compiler vectorize them 8 wide).
fn plane(g: &Conv2d, columns: &[TapColumns], input: &[f32], w: &[f32], bias: f32, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        return unsafe { plane_avx2(g, columns, input, w, bias, out) };
    }
    plane_portable(g, columns, input, w, bias, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn plane_avx2(g: &Conv2d, columns: &[TapColumns], input: &[f32], w: &[f32], bias: f32, out: &mut [f32]) {
    plane_portable(g, columns, input, w, bias, out)
}

#[inline(always)]
fn plane_portable(g: &Conv2d, columns: &[TapColumns], input: &[f32], w: &[f32], bias: f32, out: &mut [f32]) {
    let (width, stride) = (g.width, g.stride[1]);
    for (oh, row) in out.chunks_exact_mut(g.out_size[1]).enumerate() {
        row.fill(bias);
        for (i, taps) in w.chunks_exact(g.kernel[1]).enumerate() {
            // The input row of kernel row i, when inside the plane.
            let Some(ih) = (oh * g.stride[0] + i * g.dilation[0]).checked_sub(g.padding[0]).filter(|&ih| ih < g.height) else { continue };
            let src = &input[ih * width..][..width];
            for (&tap, cols) in taps.iter().zip(columns) {
                let dst = &mut row[cols.outputs.clone()];
                if stride == 1 {
                    for (o, &s) in dst.iter_mut().zip(&src[cols.first..]) {
                        *o += tap * s;
                    }
                } else {
                    for (o, &s) in dst.iter_mut().zip(src[cols.first..].iter().step_by(stride)) {
                        *o += tap * s;
                    }
                }
            }
        }
    }
}

/// Channels last.
fn channels_last(g: &Conv2d, x: &[f32], weight: &[f32], bias: Option<&[f32]>, scratch: &mut [f32], out: &mut [f32]) {
    let channels = g.out_channels;
    let [kh, kw] = g.kernel;
    let (taps, positions) = (kh * kw, g.positions());
    let (padded_h, padded_w) = (g.height + 2 * g.padding[0], g.width + 2 * g.padding[1]);
    let (padded, rest) = scratch.split_at_mut(padded_h * padded_w * channels);
    let (sums, taps_weight) = rest.split_at_mut(positions * channels);
    for (t, row) in taps_weight[..taps * channels].chunks_exact_mut(channels).enumerate() {
        for (o, w) in row.iter_mut().enumerate() {
            *w = weight[o * taps + t];
        }
    }
    let taps_weight = &taps_weight[..taps * channels];
    let (plane_in, multiplier) = (g.height * g.width, g.group_out_channels());
    for (x, out) in x.chunks_exact(g.channels * plane_in).zip(out.chunks_exact_mut(channels * positions)) {
        // The padded rows: zeros around, the input's rows channels last inside.
        for_items(padded, padded_h, padded_w * channels, padded.len(), &|begin, end, rows| {
            for (r, row) in (begin..end).zip(rows.chunks_exact_mut(padded_w * channels)) {
                let Some(ih) = r.checked_sub(g.padding[0]).filter(|&ih| ih < g.height) else {
                    row.fill(0.0);
                    continue;
                };
                let (left, inside) = row.split_at_mut(g.padding[1] * channels);
                let (inside, right) = inside.split_at_mut(g.width * channels);
                left.fill(0.0);
                right.fill(0.0);
                for o in 0..channels {
                    let src = &x[(o / multiplier) * plane_in + ih * g.width..][..g.width];
                    for (iw, &v) in src.iter().enumerate() {
                        inside[iw * channels + o] = v;
                    }
                }
            }
        });
        let padded = &*padded;
        for_items(sums, positions, channels, positions * channels * taps, &|begin, end, part| {
            for (q, acc) in (begin..end).zip(part.chunks_exact_mut(channels)) {
                let (oh, ow) = (q / g.out_size[1], q % g.out_size[1]);
                position(g, padded, padded_w, taps_weight, bias, oh, ow, acc);
            }
        });
        let sums = &*sums;
        for_items(out, channels, positions, positions * channels, &|begin, end, planes| {
            for (o, plane) in (begin..end).zip(planes.chunks_exact_mut(positions)) {
                for (q, v) in plane.iter_mut().enumerate() {
                    *v = sums[q * channels + o];
                }
            }
        });
    }
}

/// `acc[o] = bias[o] + sum over taps of weight[tap, o] * padded[window(tap), o]`, with the
/// AVX2 code where the CPU has it (the loops are the same; the target feature lets the
/// compiler vectorize them 8 wide).
#[allow(clippy::too_many_arguments)]
fn position(g: &Conv2d, padded: &[f32], padded_w: usize, taps_weight: &[f32], bias: Option<&[f32]>, oh: usize, ow: usize, acc: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        return unsafe { position_avx2(g, padded, padded_w, taps_weight, bias, oh, ow, acc) };
    }
    position_portable(g, padded, padded_w, taps_weight, bias, oh, ow, acc)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
unsafe fn position_avx2(g: &Conv2d, padded: &[f32], padded_w: usize, taps_weight: &[f32], bias: Option<&[f32]>, oh: usize, ow: usize, acc: &mut [f32]) {
    position_portable(g, padded, padded_w, taps_weight, bias, oh, ow, acc)
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn position_portable(g: &Conv2d, padded: &[f32], padded_w: usize, taps_weight: &[f32], bias: Option<&[f32]>, oh: usize, ow: usize, acc: &mut [f32]) {
    let channels = acc.len();
    match bias {
        Some(b) => acc.copy_from_slice(b),
        None => acc.fill(0.0),
    }
    let mut weights = taps_weight.chunks_exact(channels);
    for i in 0..g.kernel[0] {
        let row = oh * g.stride[0] + i * g.dilation[0];
        for j in 0..g.kernel[1] {
            let col = ow * g.stride[1] + j * g.dilation[1];
            let src = &padded[(row * padded_w + col) * channels..][..channels];
            let Some(w) = weights.next() else { return };
            for ((a, &w), &s) in acc.iter_mut().zip(w).zip(src) {
                *a += w * s;
            }
        }
    }
}
