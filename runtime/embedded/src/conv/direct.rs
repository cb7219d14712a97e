//! Direct convolution of few input channels: a network's stem (3 channels in, 16 to 64
//! out, 3x3 or 7x7 at stride 2). As a GEMM its depth is only `C * KH * KW` (27 or 147),
//! so writing the windows (im2col) costs about as much as the product, and the register
//! tiles write C after very few multiply-adds. Here the products read the input where it
//! lies: each input plane is copied once into a zero-padded plane (stride 2: each row's
//! even columns, then its odd ones), the layout of the depthwise kernel
//! ([`lanes::Kernel`]), so that a tap's inputs for consecutive outputs are contiguous
//! floats. A register tile is the 6 output channels of a panel of the packed weight (its
//! taps side by side, as the GEMM reads them) by up to 4 vectors of one output row: per
//! tap, one load per vector, one broadcast per channel, and 6 multiply-adds per vector.
//! The threads take whole output rows of every channel.
//!
//! Measured (kernels bench, 1 thread, AMD EPYC Zen 4, AVX-512), against the windows' GEMM:
//! 3 -> 16 channels 3x3 /2 at 224: 251 -> 163 us; 3 -> 64: 639 -> 519 us; 7x7 3 -> 64:
//! 2780 -> 2228 us (0.9 of the FMA peak). The 3x3 ones reach about 0.7: a tile of 27 taps
//! leaves its fixed costs less to hide behind.

use super::depthwise::lanes::{self, Kernel};
use crate::pool::{self, SharedOut};
use crate::simd::{for_each_isa, F32s};
use crate::spare::Handle;
use aotc_abi::conv::{Conv2d, InputTransform, WeightForm};
use aotc_abi::gemm::{KC, MR};

/// Input channels up to which a convolution goes direct, when its geometry is one of
/// [`lanes::Kernel`]'s (square 3x3, 5x5 or 7x7, stride 1 or 2, no dilation).
const MAX_CHANNELS: usize = 4;

/// The most taps (`C * KH * KW`) of a direct convolution: one depth block of the packed
/// weight, whose panels then hold each channel's taps together.
const MAX_TAPS: usize = MAX_CHANNELS * 7 * 7;
const _: () = assert!(MAX_TAPS <= KC);

/// The padded-plane layout for `g` when this path takes it: one group of few input
/// channels, its weight packed as the GEMM's left operand (`WeightForm::Panels`), not
/// pooled and its input not transformed.
pub fn kernel(g: &Conv2d) -> Option<Kernel> {
    let taken = g.groups == 1
        && g.channels <= MAX_CHANNELS
        && g.weight == WeightForm::Panels
        && !g.pool
        && g.input == InputTransform::None;
    taken.then(|| super::depthwise::fast_path(g, usize::MAX))?
}

/// `out = activation(conv(x, weight) + bias (+ residual))` for `g`, whose [`kernel`] is
/// `k`; `weight` is packed in panels of `MR` output channels (`packed_group_len` floats).
#[allow(clippy::too_many_arguments)]
pub fn run(
    g: &Conv2d,
    k: &Kernel,
    x: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    out: &mut [f32],
    threads: usize,
    spare: Handle,
) {
    let (image_in, image_out) = (g.channels * g.height * g.width, g.out_channels * g.positions());
    let ([kh, kw], depth) = (g.kernel, g.depth());
    let threads = super::threads_for(image_out * depth, threads);
    assert!(weight.len() >= g.out_channels.div_ceil(MR) * MR * depth);
    // Where each tap (c, i, j), in the weight's order, reads for an output row's first
    // output, from the row's first input row in the first plane.
    let mut taps = [0; MAX_TAPS];
    for (t, tap) in taps[..depth].iter_mut().enumerate() {
        let (c, i, j) = (t / (kh * kw), t / kw % kh, t % kw);
        *tap = c * k.len() + i * k.row() + lanes::column(k.stride(), k.half(), j);
    }
    let mut planes = spare.take(g.channels * k.len());
    let plane_in = g.height * g.width;
    for (n, (x, out)) in x.chunks_exact(image_in).zip(out.chunks_exact_mut(image_out)).enumerate() {
        let slots = SharedOut::new(&mut planes);
        pool::parallel_for(threads, g.channels, &|c| {
            // SAFETY: slot c of the `channels` slots of `k.len()` floats, this chunk's alone.
            let slot = unsafe { std::slice::from_raw_parts_mut(slots.get().add(c * k.len()), k.len()) };
            k.clear(slot);
            k.load(&x[c * plane_in..][..plane_in], slot);
        });
        let residual = residual.map(|r| &r[n * image_out..][..image_out]);
        let out_h = g.out_size[0];
        let chunks = threads.min(out_h).max(1);
        let (planes, base) = (&planes[..], SharedOut::new(out));
        pool::parallel_for(chunks, chunks, &|i| {
            let rows = out_h * i / chunks..out_h * (i + 1) / chunks;
            let image = Image {
                k,
                planes,
                taps: &taps[..depth],
                weight,
                bias,
                residual,
                out: base.get(),
                out_channels: g.out_channels,
            };
            // SAFETY: the CPU runs `k.isa` (`Kernel::new`'s contract); the planes hold
            // `channels` slots of `k.len()` floats loaded for this geometry; the weight
            // holds every panel (asserted above); `out` (and the residual) `out_channels`
            // planes of the output size, of which this chunk alone writes rows `rows`.
            unsafe { output_rows(k.isa(), &image, rows) }
        });
    }
}

/// What the tiles of one image read and write.
struct Image<'a> {
    k: &'a Kernel,
    /// The input channels' padded planes, `k.len()` floats apart.
    planes: &'a [f32],
    /// Where each tap reads in `planes`, from an output row's first input row.
    taps: &'a [usize],
    /// The weight's panels, each `taps.len()` depths of `MR` channels.
    weight: &'a [f32],
    bias: Option<&'a [f32]>,
    residual: Option<&'a [f32]>,
    out: *mut f32,
    out_channels: usize,
}

for_each_isa! {
    /// Output rows `rows` of every output channel of `image`.
    fn output_rows(image: &Image, rows: std::ops::Range<usize>) => output_rows_generic
}

/// Each output row, panel of output channels by panel, in tiles of 4 vectors (AVX2: 2,
/// of its 16 registers) and one of those left.
///
/// # Safety
/// The CPU runs V's set; `image` as in [`run`]'s call.
#[inline(always)]
unsafe fn output_rows_generic<V: F32s>(image: &Image, rows: std::ops::Range<usize>) {
    let out_w = image.k.out_size()[1];
    let vectors = out_w.div_ceil(V::LANES);
    let widest = if V::LANES == 16 { 4 } else { 2 };
    for oh in rows {
        for panel in 0..image.out_channels.div_ceil(MR) {
            let mut v = 0;
            while v < vectors {
                let tile = Tile { oh, panel, vector: v };
                // SAFETY: the caller's; the tile's vectors lie in the row.
                unsafe {
                    match (vectors - v).min(widest) {
                        1 => tile.run::<V, 1>(image),
                        2 => tile.run::<V, 2>(image),
                        3 => tile.run::<V, 3>(image),
                        _ => tile.run::<V, 4>(image),
                    }
                }
                v += widest;
            }
        }
    }
}

/// A register tile: output row `oh`, the output channels of weight panel `panel`, the
/// row's vectors from `vector` on.
#[derive(Clone, Copy)]
struct Tile {
    oh: usize,
    panel: usize,
    vector: usize,
}

impl Tile {
    /// `MR` channels by `W` vectors, through the output pass.
    ///
    /// # Safety
    /// As [`output_rows_generic`]; the tile's `W` vectors start inside the row.
    #[inline(always)]
    unsafe fn run<V: F32s, const W: usize>(self, image: &Image) {
        let k = image.k;
        let lanes = V::LANES;
        let [out_h, out_w] = k.out_size();
        let first = self.vector * lanes;
        // SAFETY: the caller's: each load reads the padded planes (up to the last output's
        // reach, `Kernel::new`), the weights the panel's `taps * MR` floats.
        unsafe {
            let mut sums = [[V::zero(); W]; MR];
            let window = image.planes.as_ptr().add(self.oh * k.stride() * k.row() + first);
            let mut w = image.weight.as_ptr().add(self.panel * image.taps.len() * MR);
            for &tap in image.taps {
                let at = window.add(tap);
                let x: [V; W] = std::array::from_fn(|v| V::load(at.add(v * lanes)));
                for (r, sums) in sums.iter_mut().enumerate() {
                    let w = V::splat(*w.add(r));
                    for (sum, &x) in sums.iter_mut().zip(&x) {
                        *sum = x.mul_add(w, *sum);
                    }
                }
                w = w.add(MR);
            }
            // The output pass: the channels of the panel that exist, the outputs of the row.
            let (positions, left) = (out_h * out_w, out_w - first);
            for (r, sums) in sums.into_iter().enumerate() {
                let o = self.panel * MR + r;
                if o >= image.out_channels {
                    break;
                }
                let bias = V::splat(image.bias.map_or(0.0, |b| b[o]));
                let at = o * positions + self.oh * out_w + first;
                for (v, sum) in sums.into_iter().enumerate() {
                    let n = left.saturating_sub(v * lanes);
                    if n == 0 {
                        break;
                    }
                    let mut sum = sum.add(bias);
                    if let Some(residual) = image.residual {
                        sum = sum.add(V::load_up_to(residual.as_ptr().add(at + v * lanes), n, 0.0));
                    }
                    crate::activation::lanes(sum, k.activation()).store_up_to(image.out.add(at + v * lanes), n);
                }
            }
        }
    }
}
