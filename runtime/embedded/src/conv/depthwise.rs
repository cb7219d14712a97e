//! Depthwise convolution (one input channel per group), plane by plane on the call's
//! threads, the output pass fused: each output plane is its bias plus the input plane
//! shifted and scaled by each kernel tap, then the residual and the activation.
//!
//! - The common geometries (3x3, 5x5 and 7x7, stride 1 and 2) on x86-64 with AVX2 and FMA or
//!   AVX-512 ([`lanes`]): each thread copies its input planes into a zero-padded plane, a
//!   slot of the scratch, and computes each output row 8 or 16 outputs per vector from it.
//! - Any other geometry or CPU ([`plane`]): each output row is its bias plus the input
//!   rows under each tap, vectorized by the compiler along the row, each tap's output
//!   columns worked out once per call ([`TapColumns`]).

#[cfg(target_arch = "x86_64")]
pub(super) mod lanes;

use super::TapColumns;
use crate::pool::for_items;
use aotc_abi::conv::{Conv2d, DEPTHWISE_SLOTS};
use std::sync::Mutex;

/// `out = activation(conv(x, weight) + bias (+ residual))` for one depthwise geometry;
/// `scratch` holds `g.scratch_len()` floats.
pub fn run(
    g: &Conv2d,
    x: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    scratch: &mut [f32],
    out: &mut [f32],
) {
    let (plane_in, positions, taps) = (g.height * g.width, g.positions(), g.kernel[0] * g.kernel[1]);
    let planes = g.batch * g.out_channels;
    // Output channel o's taps and bias, and output plane p's residual.
    let taps_of = |o: usize| &weight[o * taps..][..taps];
    let bias_of = |o: usize| bias.map_or(0.0, |b| b[o]);
    let residual_of = |p: usize| residual.map(|r| &r[p * positions..][..positions]);
    #[cfg(target_arch = "x86_64")]
    if let Some(kernel) = fast_path(g, scratch.len()) {
        // One slot per chunk of planes: chunk i starts at plane begin_i = planes * i /
        // chunks, so that with fewer chunks than channels (the slots at least as many)
        // each has its own; else the lock makes chunks that share one take turns.
        // (Inline: a call allocates nothing.)
        let slots: smallvec::SmallVec<[Mutex<&mut [f32]>; DEPTHWISE_SLOTS]> =
            scratch.chunks_exact_mut(kernel.len()).take(DEPTHWISE_SLOTS).map(Mutex::new).collect();
        return for_items(out, planes, positions, out.len() * taps, &|begin, _, part| {
            let mut slot = slots[begin * slots.len() / planes].lock().unwrap_or_else(|e| e.into_inner());
            kernel.clear(&mut slot);
            // The input plane in the slot (consecutive output channels share one with a
            // multiplier).
            let mut loaded = None;
            for (p, o, input, out) in chunk_planes(g, begin, part) {
                if loaded != Some(input) {
                    kernel.load(&x[input..][..plane_in], &mut slot);
                    loaded = Some(input);
                }
                kernel.plane(&slot, taps_of(o), bias_of(o), residual_of(p), out);
            }
        });
    }
    let columns = TapColumns::of(g);
    for_items(out, planes, positions, out.len() * taps, &|begin, _, part| {
        for (p, o, input, out) in chunk_planes(g, begin, part) {
            plane(g, &columns, &x[input..][..plane_in], taps_of(o), bias_of(o), out);
            if let Some(residual) = residual_of(p) {
                out.iter_mut().zip(residual).for_each(|(o, r)| *o += r);
            }
            crate::activation::apply(g.activation, out);
        }
    });
}

/// [`lanes::Kernel`] for `g` on the widest vector set this CPU runs whose slack fits
/// `scratch` (the 16-lane one reads more slack than the 8-lane one), if any. Rows of
/// at most 8 outputs take 8 lanes: one vector either way, 16 lanes only read more (a 7 x
/// 7 plane measured 15% slower on them).
#[cfg(target_arch = "x86_64")]
pub(super) fn fast_path(g: &Conv2d, scratch: usize) -> Option<lanes::Kernel> {
    use crate::isa::Isa;
    let isa = Isa::best().min(if g.out_size[1] <= 8 { Isa::Avx2 } else { Isa::Avx512 });
    lanes::Kernel::new(g, scratch, isa)
        .or_else(|| (isa == Isa::Avx512).then(|| lanes::Kernel::new(g, scratch, Isa::Avx2))?)
}

/// The output planes of a chunk (`part`, from plane `begin` on): each one's index, its
/// output channel, where its input plane starts in `x`, and the plane; the channels are
/// counted along (divisions per plane would cost more than a small plane's taps).
fn chunk_planes<'a>(
    g: &Conv2d,
    begin: usize,
    part: &'a mut [f32],
) -> impl Iterator<Item = (usize, usize, usize, &'a mut [f32])> {
    let (channels, out_channels, multiplier, plane_in) =
        (g.channels, g.out_channels, g.group_out_channels(), g.height * g.width);
    let (mut n, mut o) = (begin / out_channels, begin % out_channels);
    part.chunks_exact_mut(g.positions()).enumerate().map(move |(i, out)| {
        let input = (n * channels + if multiplier == 1 { o } else { o / multiplier }) * plane_in;
        let item = (begin + i, o, input, out);
        o += 1;
        if o == out_channels {
            (n, o) = (n + 1, 0);
        }
        item
    })
}

/// One output plane, with the AVX2 code where the CPU has it (the loops are the same; the
/// target feature lets the compiler vectorize them 8 wide).
fn plane(g: &Conv2d, columns: &[TapColumns], input: &[f32], w: &[f32], bias: f32, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::isa::Isa::best() >= crate::isa::Isa::Avx2 {
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
            let Some(ih) = (oh * g.stride[0] + i * g.dilation[0]).checked_sub(g.padding[0]).filter(|&ih| ih < g.height)
            else {
                continue;
            };
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
