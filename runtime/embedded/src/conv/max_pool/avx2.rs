//! The AVX2 max pool, by rows: each output row first takes the elementwise maximum of its
//! kernel's input rows (contiguous vectors) into a row buffer padded with -inf, then the
//! maximum over each window along that row: at stride 1 straight from the buffer, at
//! stride 2 from its even and odd columns, split once per row, so that every tap is a
//! contiguous load again. -inf is the identity of the maximum, so the padding, and any
//! window that ceil mode puts past the input, read it and need no bounds.

use aotc_abi::conv::Conv2d;
use std::arch::x86_64::*;

/// Whether [`Rows`] runs this geometry: horizontal stride 1 (any dilation) or stride 2
/// with dilation 1; any vertical stride and dilation.
pub(super) fn fits(g: &Conv2d) -> bool {
    g.stride[1] == 1 || (g.stride[1] == 2 && g.dilation[1] == 1)
}

/// One thread's buffers: the padded row (`row`), and at stride 2 its even and odd columns.
pub(super) struct Rows {
    row: Vec<f32>,
    even: Vec<f32>,
    odd: Vec<f32>,
}

impl Rows {
    /// Buffers for `g` ([`fits`]), holding -inf.
    pub(super) fn new(g: &Conv2d) -> Rows {
        // Every window's last tap, in padded columns, for the vectors of 8 outputs.
        let reach = (g.out_size[1].next_multiple_of(8) - 1) * g.stride[1] + (g.kernel[1] - 1) * g.dilation[1] + 1;
        // Whole vectors of 16 for the split into even and odd columns.
        let len = (g.padding[1] + g.width).max(reach).next_multiple_of(16);
        let half = if g.stride[1] == 2 { len / 2 } else { 0 };
        Rows { row: vec![f32::NEG_INFINITY; len], even: vec![f32::NEG_INFINITY; half], odd: vec![f32::NEG_INFINITY; half] }
    }

    /// One plane: `out[OH * OW]` from `input[H * W]`.
    ///
    /// # Safety
    /// The CPU has AVX2; `self` is [`Rows::new`]'s for `g`, which [`fits`].
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn plane(&mut self, g: &Conv2d, input: &[f32], out: &mut [f32]) {
        let (width, pad) = (g.width, g.padding[1]);
        for (oh, dst) in out.chunks_exact_mut(g.out_size[1]).enumerate() {
            let row = &mut self.row[pad..pad + width];
            let mut first = true;
            for i in 0..g.kernel[0] {
                let Some(ih) = (oh * g.stride[0] + i * g.dilation[0]).checked_sub(g.padding[0]).filter(|&ih| ih < g.height) else { continue };
                let src = &input[ih * width..][..width];
                if first {
                    row.copy_from_slice(src);
                    first = false;
                } else {
                    max_into(row, src);
                }
            }
            if first {
                // No kernel row inside the plane: every window is empty.
                row.fill(f32::NEG_INFINITY);
            }
            if g.stride[1] == 1 {
                windows(dst, g.kernel[1], |j| (&self.row, j * g.dilation[1]));
            } else {
                split(&self.row, &mut self.even, &mut self.odd);
                windows(dst, g.kernel[1], |j| (if j % 2 == 0 { &self.even } else { &self.odd }, j / 2));
            }
        }
    }
}

/// `a` or `x`, whichever is larger, NaN (in either) winning, as `super::max`.
#[inline(always)]
unsafe fn vmax(a: __m256, x: __m256) -> __m256 {
    // SAFETY: AVX, which the callers' target features enable. (`max_ps(x, a)` is `a` when
    // either is NaN; the blend then takes a NaN `x`.)
    unsafe { _mm256_blendv_ps(_mm256_max_ps(x, a), x, _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x)) }
}

/// `row[c] = max(row[c], src[c])`.
#[inline(always)]
fn max_into(row: &mut [f32], src: &[f32]) {
    let n = row.len() / 8 * 8;
    for (d, s) in row[..n].chunks_exact_mut(8).zip(src.chunks_exact(8)) {
        // SAFETY: AVX2 (the caller's target features); d and s hold 8 floats.
        unsafe { _mm256_storeu_ps(d.as_mut_ptr(), vmax(_mm256_loadu_ps(d.as_ptr()), _mm256_loadu_ps(s.as_ptr()))) };
    }
    for (d, &s) in row[n..].iter_mut().zip(&src[n..]) {
        *d = super::max(*d, s);
    }
}

/// The even and odd columns of `row`, 16 at a time.
#[inline(always)]
fn split(row: &[f32], even: &mut [f32], odd: &mut [f32]) {
    for ((s, e), o) in row.chunks_exact(16).zip(even.chunks_exact_mut(8)).zip(odd.chunks_exact_mut(8)) {
        // SAFETY: AVX2 (the caller's target features); s holds 16 floats, e and o 8. Each
        // 128-bit half of the shuffles holds (lo, lo, hi, hi) pairs; the permutation puts
        // the pairs from `lo` first.
        unsafe {
            let (lo, hi) = (_mm256_loadu_ps(s.as_ptr()), _mm256_loadu_ps(s.as_ptr().add(8)));
            let order = |v: __m256| _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(v)));
            _mm256_storeu_ps(e.as_mut_ptr(), order(_mm256_shuffle_ps::<0b10_00_10_00>(lo, hi)));
            _mm256_storeu_ps(o.as_mut_ptr(), order(_mm256_shuffle_ps::<0b11_01_11_01>(lo, hi)));
        }
    }
}

/// `dst[o] = max over taps j of src(j).0[o + src(j).1]`: 8 outputs at a time, then one.
#[inline(always)]
fn windows<'a>(dst: &mut [f32], taps: usize, src: impl Fn(usize) -> (&'a Vec<f32>, usize)) {
    let n = dst.len() / 8 * 8;
    for o in (0..n).step_by(8) {
        let mut v = unsafe { _mm256_set1_ps(f32::NEG_INFINITY) };
        for j in 0..taps {
            let (s, at) = src(j);
            // (`Rows::new` sized the buffers for 8 outputs past any start.)
            let s = &s[o + at..][..8];
            // SAFETY: AVX2 (the caller's target features); s holds 8 floats.
            v = unsafe { vmax(v, _mm256_loadu_ps(s.as_ptr())) };
        }
        // SAFETY: as above; dst holds 8 floats from o.
        unsafe { _mm256_storeu_ps(dst[o..][..8].as_mut_ptr(), v) };
    }
    for (o, d) in dst.iter_mut().enumerate().skip(n) {
        *d = (0..taps).fold(f32::NEG_INFINITY, |m, j| {
            let (s, at) = src(j);
            super::max(m, s[o + at])
        });
    }
}
