//! The AVX2 + FMA short rows of [`super`]'s softmax, 8 at a time, one row per lane (on
//! AVX-512 CPUs too: rows this short fill 8 lanes as well as 16).

use crate::gelu::lanes::exp;
use crate::isa::Isa;
use crate::simd::transpose8;
use std::arch::x86_64::*;
use std::mem::MaybeUninit;

/// The fewest rows that [`softmax_short_rows`] takes 8 at a time (through a zero-padded
/// copy under 8): a block of 8 costs about as much as 5 rows one at a time, measured.
const FEWEST_ROWS: usize = 5;

/// `super::softmax_row` over the rows of `len` (at most [`super::SHORT_ROW`]) in `x`
/// into `out` (any range of rows that `for_items` hands out), 8 rows at a time with
/// one row per lane ([`softmax_8_rows`]). When the count is not a multiple of 8 the
/// last 8 rows overlap the 8 before (recomputed bit for bit: lanes do not interact),
/// so no lane is wasted and nothing outside the rows is touched; 5 to 7 rows go
/// through a zero-padded copy, fewer one at a time (8 lanes at a time from a row of 8,
/// which measured faster than scalar code there, not below).
#[target_feature(enable = "avx2,fma")]
pub unsafe fn softmax_short_rows(x: &[f32], out: &mut [f32], len: usize, log: bool) {
    const N: usize = super::SHORT_ROW;
    assert!((1..=N).contains(&len) && x.len() == out.len() && x.len().is_multiple_of(len));
    let rows = x.len() / len;
    if rows < FEWEST_ROWS {
        for (x, out) in x.chunks_exact(len).zip(out.chunks_exact_mut(len)) {
            super::softmax_row(x, out, log, if len >= 8 { Isa::Avx2 } else { Isa::Portable });
        }
        return;
    }
    // Left uninitialized: zeroing its 2 KB measured 4% of a call on 64 rows of 8.
    let mut scratch = [MaybeUninit::<__m256>::uninit(); 2 * N];
    // SAFETY: AVX2 and FMA by this function's target features; 8 rows each.
    unsafe {
        if rows >= 8 {
            for first in (0..rows).step_by(8) {
                let first = first.min(rows - 8);
                softmax_8_rows(
                    &x[first * len..][..8 * len],
                    &mut out[first * len..][..8 * len],
                    len,
                    log,
                    &mut scratch,
                );
            }
        } else {
            let (mut padded, mut results) = ([0f32; 8 * N], [0f32; 8 * N]);
            padded[..x.len()].copy_from_slice(x);
            softmax_8_rows(&padded[..8 * len], &mut results[..8 * len], len, log, &mut scratch);
            out.copy_from_slice(&results[..x.len()]);
        }
    }
}

/// 8 rows of `len` (1 to [`super::SHORT_ROW`]) with one row per lane, so the max and
/// the float64 sum are vertical and no lane is padding. Each position of the 8 rows
/// becomes a vector (in `scratch`, then the results): rows of 8 or more through 8x8
/// transposes (the last 8 positions overlapping the group before when `len` is not a
/// multiple of 8), which measured faster than gathers; shorter rows through gathers
/// with stride `len` in and out (from the results, to whole vectors of `out`).
#[inline(always)]
unsafe fn softmax_8_rows(
    x: &[f32],
    out: &mut [f32],
    len: usize,
    log: bool,
    scratch: &mut [MaybeUninit<__m256>; 2 * super::SHORT_ROW],
) {
    const N: usize = super::SHORT_ROW;
    assert!(len <= N && x.len() == 8 * len && out.len() == 8 * len);
    let (v, y) = scratch.split_at_mut(N);
    let (v, y) = (&mut v[..len], &mut y[..len]);
    // SAFETY (all): AVX2 and FMA, the callers' target features; loads and stores of
    // positions j0..j0 + 8 of each row with j0 + 8 <= len, gathers of position j of
    // each row, and of floats of the results (under 8 * len); `v` and `y` are read
    // as initialized once each of their `len` vectors is written.
    unsafe {
        if len >= 8 {
            for j0 in (0..len).step_by(8) {
                let j0 = j0.min(len - 8);
                let mut group = [_mm256_setzero_ps(); 8];
                for (r, g) in group.iter_mut().enumerate() {
                    *g = _mm256_loadu_ps(x.as_ptr().add(r * len + j0));
                }
                for (v, &t) in v[j0..j0 + 8].iter_mut().zip(&transpose8(group)) {
                    v.write(t);
                }
            }
        } else {
            let stride = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(len as i32));
            for (j, v) in v.iter_mut().enumerate() {
                v.write(_mm256_i32gather_ps::<4>(x.as_ptr().add(j), stride));
            }
        }
        // Every position was written just above.
        let v = &*(v as *const [MaybeUninit<__m256>] as *const [__m256]);
        // The max may skip a NaN (max_ps returns its second operand then), but the
        // NaN's exp is NaN, so its row's sum, so the whole row.
        let mut vmax = _mm256_set1_ps(f32::NEG_INFINITY);
        for &v in v {
            vmax = _mm256_max_ps(vmax, v);
        }
        for (y, &v) in y.iter_mut().zip(v) {
            let shifted = _mm256_sub_ps(v, vmax);
            // As in `softmax_row`: 0 below FLUSH_BELOW (exp's; masked scores), NaN stays.
            y.write(exp(shifted));
        }
        // Every position was written just above.
        let y = &mut *(y as *mut [MaybeUninit<__m256>] as *mut [__m256]);
        // Summed after, not in the loop above: a chain through it measured slower.
        let (mut lo, mut hi) = (_mm256_setzero_pd(), _mm256_setzero_pd());
        for y in &*y {
            lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(*y)));
            hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(*y)));
        }
        if log {
            let mut sums = [0f64; 8];
            _mm256_storeu_pd(sums.as_mut_ptr(), lo);
            _mm256_storeu_pd(sums.as_mut_ptr().add(4), hi);
            let ln = sums.map(|s| s.ln() as f32);
            let shifted = _mm256_add_ps(vmax, _mm256_loadu_ps(ln.as_ptr()));
            for (y, &v) in y.iter_mut().zip(v) {
                *y = _mm256_sub_ps(v, shifted);
            }
        } else {
            let one = _mm256_set1_pd(1.0);
            let inverse =
                _mm256_set_m128(_mm256_cvtpd_ps(_mm256_div_pd(one, hi)), _mm256_cvtpd_ps(_mm256_div_pd(one, lo)));
            for y in y.iter_mut() {
                *y = _mm256_mul_ps(*y, inverse);
            }
        }
        if len >= 8 {
            for j0 in (0..len).step_by(8) {
                let j0 = j0.min(len - 8);
                let mut group = [_mm256_setzero_ps(); 8];
                group.copy_from_slice(&y[j0..j0 + 8]);
                for (r, &g) in transpose8(group).iter().enumerate() {
                    _mm256_storeu_ps(out.as_mut_ptr().add(r * len + j0), g);
                }
            }
        } else {
            // Output float p = 8 k + lane is row p / len, position p % len: lane
            // p / len of y[p % len], float 8 (p % len) + p / len of y.
            let p = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            let inverse_len = _mm256_set1_ps(1.0 / len as f32);
            for k in 0..len {
                let p = _mm256_add_epi32(p, _mm256_set1_epi32(8 * k as i32));
                // p < 64: the float quotient, nudged up by half, truncates exactly.
                let r = _mm256_cvttps_epi32(_mm256_mul_ps(
                    _mm256_add_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(0.5)),
                    inverse_len,
                ));
                let j = _mm256_sub_epi32(p, _mm256_mullo_epi32(r, _mm256_set1_epi32(len as i32)));
                let index = _mm256_add_epi32(_mm256_slli_epi32::<3>(j), r);
                _mm256_storeu_ps(out.as_mut_ptr().add(8 * k), _mm256_i32gather_ps::<4>(y.as_ptr().cast(), index));
            }
        }
    }
}
