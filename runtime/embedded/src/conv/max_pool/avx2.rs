//! The AVX2 max pool, by rows: each output row first takes the elementwise maximum of its
//! kernel's input rows (contiguous vectors) into a row buffer padded with -inf, then the
//! maximum over each window along that row: at stride 1 straight from the buffer, at
//! stride 2 from its even and odd columns, split once per row, so that every tap is a
//! contiguous load again. -inf is the identity of the maximum, so the padding, and any
//! window that ceil mode puts past the input, read it and need no bounds.

use crate::spare::{Buffer, Handle};
use aotc_abi::conv::Conv2d;
use std::arch::x86_64::*;

/// Whether [`Rows`] runs this geometry: horizontal stride 1 (any dilation) or stride 2
/// with dilation 1; any vertical stride and dilation; rows of at least one vector of
/// outputs (4 x 4 outputs, bench_convnet's last pool, measured 0.13 ms here against 0.09
/// in the portable code: each row's passes cost more than its few maxima).
pub(super) fn fits(g: &Conv2d) -> bool {
    g.out_size[1] >= 8 && (g.stride[1] == 1 || (g.stride[1] == 2 && g.dilation[1] == 1))
}

/// One thread's buffers (the call's spare ones): the padded row (`row`), and at stride 2
/// its even and odd columns.
pub(super) struct Rows {
    row: Buffer,
    even: Buffer,
    odd: Buffer,
}

impl Rows {
    /// Buffers for `g` ([`fits`]), holding -inf.
    pub(super) fn new(g: &Conv2d) -> Rows {
        // Every window's last tap, in padded columns, for the vectors of 8 outputs.
        let reach = (g.out_size[1].next_multiple_of(8) - 1) * g.stride[1] + (g.kernel[1] - 1) * g.dilation[1] + 1;
        // Whole vectors of 16 for the split into even and odd columns.
        let len = (g.padding[1] + g.width).max(reach).next_multiple_of(16);
        let half = if g.stride[1] == 2 { len / 2 } else { 0 };
        let spare = Handle::current();
        let mut rows = Rows { row: spare.take(len), even: spare.take(half), odd: spare.take(half) };
        for buffer in [&mut rows.row, &mut rows.even, &mut rows.odd] {
            buffer.fill(f32::NEG_INFINITY);
        }
        rows
    }

    /// One plane: `out[OH * OW]` from `input[H * W]`.
    ///
    /// # Safety
    /// The CPU has AVX2; `self` is [`Rows::new`]'s for `g`, which [`fits`].
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn plane(&mut self, g: &Conv2d, input: &[f32], out: &mut [f32]) {
        // Plain index loops throughout: an iterator adapter's loop can end up in a function
        // of its own, compiled without AVX, where every intrinsic is a call.
        let (width, pad, ow) = (g.width, g.padding[1], g.out_size[1]);
        for oh in 0..g.out_size[0] {
            let dst = &mut out[oh * ow..][..ow];
            let row = &mut self.row[pad..pad + width];
            let mut first = true;
            for i in 0..g.kernel[0] {
                let Some(ih) =
                    (oh * g.stride[0] + i * g.dilation[0]).checked_sub(g.padding[0]).filter(|&ih| ih < g.height)
                else {
                    continue;
                };
                let src = &input[ih * width..][..width];
                if first {
                    copy_into(row, src);
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
                windows(dst, g.kernel[1], |j| (&self.row[..], j * g.dilation[1]));
            } else {
                split(&self.row, &mut self.even, &mut self.odd);
                windows(dst, g.kernel[1], |j| (if j % 2 == 0 { &self.even[..] } else { &self.odd[..] }, j / 2));
            }
        }
    }
}

/// `a` or `x`, whichever is larger, NaN (in either) winning, as `super::max`.
#[inline(always)]
pub(in crate::conv) unsafe fn vmax(a: __m256, x: __m256) -> __m256 {
    // SAFETY: AVX, which the callers' target features enable. (`max_ps(x, a)` is `a` when
    // either is NaN; the blend then takes a NaN `x`.)
    unsafe { _mm256_blendv_ps(_mm256_max_ps(x, a), x, _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x)) }
}

/// `row.copy_from_slice(src)` without a call to memcpy: rows of small planes are a few
/// vectors.
#[inline(always)]
fn copy_into(row: &mut [f32], src: &[f32]) {
    let n = row.len() / 8 * 8;
    for c in 0..n / 8 {
        let (d, s) = (&mut row[c * 8..][..8], &src[c * 8..][..8]);
        // SAFETY: AVX (the caller's target features); d and s hold 8 floats.
        unsafe { _mm256_storeu_ps(d.as_mut_ptr(), _mm256_loadu_ps(s.as_ptr())) };
    }
    let len = row.len();
    row[n..].copy_from_slice(&src[n..len]);
}

/// `row[c] = max(row[c], src[c])`.
#[inline(always)]
fn max_into(row: &mut [f32], src: &[f32]) {
    let n = row.len() / 8 * 8;
    for c in 0..n / 8 {
        let (d, s) = (&mut row[c * 8..][..8], &src[c * 8..][..8]);
        // SAFETY: AVX2 (the caller's target features); d and s hold 8 floats.
        unsafe { _mm256_storeu_ps(d.as_mut_ptr(), vmax(_mm256_loadu_ps(d.as_ptr()), _mm256_loadu_ps(s.as_ptr()))) };
    }
    for c in n..row.len() {
        row[c] = super::max(row[c], src[c]);
    }
}

/// The even and odd floats of the 16 in `lo` then `hi`.
#[inline(always)]
unsafe fn even_odd(lo: __m256, hi: __m256) -> (__m256, __m256) {
    // SAFETY: AVX2 (the callers' target features). Each 128-bit half of the shuffles
    // holds (lo, lo, hi, hi) pairs; the permutation puts the pairs from `lo` first.
    unsafe {
        let order = |v: __m256| _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(v)));
        (order(_mm256_shuffle_ps::<0b10_00_10_00>(lo, hi)), order(_mm256_shuffle_ps::<0b11_01_11_01>(lo, hi)))
    }
}

/// The even and odd columns of `row`, 16 at a time.
#[inline(always)]
fn split(row: &[f32], even: &mut [f32], odd: &mut [f32]) {
    for c in 0..row.len() / 16 {
        let (s, e, o) = (&row[c * 16..][..16], &mut even[c * 8..][..8], &mut odd[c * 8..][..8]);
        // SAFETY: AVX2 (the caller's target features); s holds 16 floats, e and o 8.
        unsafe {
            let (ev, od) = even_odd(_mm256_loadu_ps(s.as_ptr()), _mm256_loadu_ps(s.as_ptr().add(8)));
            _mm256_storeu_ps(e.as_mut_ptr(), ev);
            _mm256_storeu_ps(o.as_mut_ptr(), od);
        }
    }
}

/// [`super::row_pairs`]: 8 outputs from 16 columns of both rows at a time, the rest one by
/// one.
///
/// # Safety
/// The CPU has AVX2; `src` holds a pair of rows of `width` per row of `width / 2` in `dst`.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn row_pairs(src: &[f32], width: usize, dst: &mut [f32]) {
    let half = width / 2;
    let pairs = dst.len() / half.max(1);
    assert!(src.len() >= pairs * 2 * width);
    for p in 0..pairs {
        let (a, b) = (&src[2 * p * width..][..width], &src[(2 * p + 1) * width..][..width]);
        let out = &mut dst[p * half..][..half];
        let mut c = 0;
        while c + 8 <= half {
            // SAFETY: AVX2; columns 2c..2c + 16 lie in both rows (c + 8 <= width / 2), and
            // out[c..c + 8] in `out`.
            unsafe {
                let (a, b) = (a[2 * c..].as_ptr(), b[2 * c..].as_ptr());
                let lo = vmax(_mm256_loadu_ps(a), _mm256_loadu_ps(b));
                let hi = vmax(_mm256_loadu_ps(a.add(8)), _mm256_loadu_ps(b.add(8)));
                let (even, odd) = even_odd(lo, hi);
                _mm256_storeu_ps(out[c..].as_mut_ptr(), vmax(even, odd));
            }
            c += 8;
        }
        for c in c..half {
            out[c] = super::max(super::max(a[2 * c], a[2 * c + 1]), super::max(b[2 * c], b[2 * c + 1]));
        }
    }
}

/// `dst[o] = max over taps j of src(j).0[o + src(j).1]`, 8 outputs at a time (a last
/// partial 8 through a masked store: small planes, as 4 x 4, are all tail).
#[inline(always)]
fn windows<'a>(dst: &mut [f32], taps: usize, src: impl Fn(usize) -> (&'a [f32], usize)) {
    let len = dst.len();
    for c in 0..len.div_ceil(8) {
        let o = c * 8;
        let dst = &mut dst[o..][..8.min(len - o)];
        // SAFETY: AVX (the caller's target features).
        let mut v = unsafe { _mm256_set1_ps(f32::NEG_INFINITY) };
        for j in 0..taps {
            let (s, at) = src(j);
            // (`Rows::new` sized the buffers for 8 outputs from any start.)
            let s = &s[o + at..][..8];
            // SAFETY: AVX (the caller's target features); s holds 8 floats.
            v = unsafe { vmax(v, _mm256_loadu_ps(s.as_ptr())) };
        }
        // SAFETY: AVX (the caller's target features); dst holds the lanes below its length,
        // which are the only ones the mask writes.
        unsafe {
            let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(dst.len() as i32), lanes);
            _mm256_maskstore_ps(dst.as_mut_ptr(), mask, v);
        }
    }
}
