//! The Winograd transforms 8 tiles per vector. A tile row's tiles lie side by side, tile
//! t's input patch at padded columns 2t..2t + 4 and its outputs at columns 2t, 2t + 1, so
//! that the vectors are the even and odd columns of 16 contiguous floats (split by one
//! shuffle and one permute), and back (unpack and permute). Plain index loops throughout:
//! an iterator adapter's loop can end up in a function of its own, compiled without AVX,
//! where every intrinsic is a call.

use super::{Epilogue, Strided, PATCH, TILE};
use crate::simd::F32s;
use std::arch::x86_64::*;

/// The even and odd floats of the 16 at `p`.
///
/// # Safety
/// 16 floats at `p`; the CPU has AVX2.
#[inline(always)]
unsafe fn split(p: *const f32) -> (__m256, __m256) {
    // SAFETY: the caller's.
    unsafe {
        let (lo, hi) = (_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)));
        // Per 128-bit lane [lo0 lo2 hi0 hi2], then the 64-bit pairs in order.
        let even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xD8));
        let odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xDD)), 0xD8));
        (even, odd)
    }
}

/// The tile rows's `Y = A^T M A`, row r (of 2): its tiles' left and right outputs.
///
/// # Safety
/// The CPU has AVX2.
#[inline(always)]
unsafe fn rows(p: &[__m256; 16]) -> [(__m256, __m256); TILE] {
    // (No closures: they would be compiled without AVX, this function having no target
    // features of its own.)
    // SAFETY: AVX2 arithmetic.
    unsafe {
        // (A^T M)_r: rows M0 + M1 + M2 and M1 - M2 - M3; then its columns likewise.
        let mut s = [[_mm256_setzero_ps(); PATCH]; TILE];
        for q in 0..PATCH {
            s[0][q] = _mm256_add_ps(_mm256_add_ps(p[q], p[4 + q]), p[8 + q]);
            s[1][q] = _mm256_sub_ps(_mm256_sub_ps(p[4 + q], p[8 + q]), p[12 + q]);
        }
        let mut y = [(_mm256_setzero_ps(), _mm256_setzero_ps()); TILE];
        for r in 0..TILE {
            let s = &s[r];
            y[r] = (_mm256_add_ps(_mm256_add_ps(s[0], s[1]), s[2]), _mm256_sub_ps(_mm256_sub_ps(s[1], s[2]), s[3]));
        }
        y
    }
}

/// [`transform_output`] pooled: each tile's maximum of its four outputs (after the bias
/// and activation), tile t at `out[t]`.
///
/// # Safety
/// As [`transform_output`]'s, `out` at most `width / 2` floats.
#[target_feature(enable = "avx2,fma")]
unsafe fn pooled(m: &[f32], at: Strided, out: &mut [f32], epilogue: &Epilogue) {
    let bias = _mm256_set1_ps(epilogue.bias);
    let mut t = 0;
    while t < out.len() {
        // SAFETY (all): AVX2 arithmetic; the loads read 8 floats of each point from tile
        // t, inside `m` (the caller's check); the store writes out[t..] up to its end.
        unsafe {
            let p: [__m256; 16] =
                std::array::from_fn(|xi| _mm256_loadu_ps(m.as_ptr().add(at.first + xi * at.point + t)));
            let y = |v: __m256| crate::activation::lanes(_mm256_add_ps(v, bias), epilogue.activation);
            let [(a, b), (c, d)] = rows(&p);
            let v = y(a).max_nan(y(b)).max_nan(y(c).max_nan(y(d)));
            store(out.as_mut_ptr().add(t), v, out.len() - t);
        }
        t += 8;
    }
}

/// The first `n` floats at `p` (of 8; the rest 0).
///
/// # Safety
/// `min(n, 8)` floats at `p`; the CPU has AVX.
#[inline(always)]
unsafe fn load(p: *const f32, n: usize) -> __m256 {
    // SAFETY: the caller's.
    unsafe {
        if n >= 8 {
            return _mm256_loadu_ps(p);
        }
        let mut lanes = [0f32; 8];
        std::ptr::copy_nonoverlapping(p, lanes.as_mut_ptr(), n);
        _mm256_loadu_ps(lanes.as_ptr())
    }
}

/// Stores the first `n` lanes of `v` at `p` (a partial store through the stack: AMD's
/// masked stores are microcoded, tens of cycles each).
///
/// # Safety
/// `min(n, 8)` floats at `p`; the CPU has AVX.
#[inline(always)]
unsafe fn store(p: *mut f32, v: __m256, n: usize) {
    // SAFETY: the caller's.
    unsafe {
        if n >= 8 {
            return _mm256_storeu_ps(p, v);
        }
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), v);
        std::ptr::copy_nonoverlapping(lanes.as_ptr(), p, n);
    }
}

/// [`super::transform_input`], writing whole vectors: up to 7 floats past each point's
/// tiles, which the caller writes later or never reads (see its safety section).
///
/// # Safety
/// The CPU has AVX2; each row holds `2 * at.len + 16` floats; `v` holds 8 floats from
/// each point's tiles, rounded up to 8 (its slack).
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn transform_input(rows: [&[f32]; PATCH], v: &mut [f32], at: Strided) {
    let tiles = at.len;
    assert!(
        rows.iter().all(|r| r.len() >= TILE * tiles + 16)
            && at.first + 15 * at.point + tiles.next_multiple_of(8) <= v.len()
    );
    let mut t = 0;
    while t < tiles {
        // SAFETY (the loads): the patch columns of tiles t..t + 8 and 2 more, 18 floats
        // from column 2t, inside each row (checked above).
        let d: [[__m256; PATCH]; PATCH] = std::array::from_fn(|k| unsafe {
            let p = rows[k].as_ptr().add(TILE * t);
            let ((c0, c1), (c2, c3)) = (split(p), split(p.add(2)));
            [c0, c1, c2, c3]
        });
        // SAFETY (all): AVX2 arithmetic; the stores write 8 floats from tile t of each
        // point, inside `v` (checked above).
        unsafe {
            // (B^T d)_i column by column, then (.. B)_j.
            let row = |a: usize, b: usize, add: bool| -> [__m256; PATCH] {
                std::array::from_fn(
                    |l| if add { _mm256_add_ps(d[a][l], d[b][l]) } else { _mm256_sub_ps(d[a][l], d[b][l]) },
                )
            };
            let bt = [row(0, 2, false), row(1, 2, true), row(2, 1, false), row(1, 3, false)];
            for (i, r) in bt.iter().enumerate() {
                let values = [
                    _mm256_sub_ps(r[0], r[2]),
                    _mm256_add_ps(r[1], r[2]),
                    _mm256_sub_ps(r[2], r[1]),
                    _mm256_sub_ps(r[1], r[3]),
                ];
                for (j, value) in values.into_iter().enumerate() {
                    _mm256_storeu_ps(v.as_mut_ptr().add(at.first + (4 * i + j) * at.point + t), value);
                }
            }
        }
        t += 8;
    }
}

/// [`super::transform_output`].
///
/// # Safety
/// The CPU has AVX2 and FMA; `m` holds 8 floats from every tile of every point of `at`
/// (its slack); `out` is one or two whole rows of `epilogue.width`, the residual as long,
/// or pooled, at most one row of `width / 2`, no residual.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn transform_output(m: &[f32], at: Strided, out: &mut [f32], epilogue: &Epilogue) {
    let (tiles, width) = (at.len, epilogue.width);
    let out_rows = out.len() / width.max(1);
    assert!(
        at.first + 15 * at.point + tiles.next_multiple_of(8) <= m.len() && out_rows <= TILE && width <= TILE * tiles
    );
    assert!(epilogue.residual.is_none_or(|r| r.len() == out.len() && !epilogue.pool));
    if epilogue.pool {
        assert!(out.len() <= width / 2);
        // SAFETY: as checked.
        return unsafe { pooled(m, at, out, epilogue) };
    }
    let mut t = 0;
    while t < tiles {
        // SAFETY (all): AVX2 arithmetic; the loads read 8 floats of each point from tile
        // t, inside `m` (checked above); the output's and the residual's accesses stop at
        // the columns < width of rows < out_rows.
        unsafe {
            let p: [__m256; 16] =
                std::array::from_fn(|xi| _mm256_loadu_ps(m.as_ptr().add(at.first + xi * at.point + t)));
            for (r, &(y0, y1)) in rows(&p).iter().enumerate().take(out_rows) {
                // Interleaved: columns 2t.. of the row are y0[0] y1[0] y0[1] y1[1] ...
                let (lo, hi) = (_mm256_unpacklo_ps(y0, y1), _mm256_unpackhi_ps(y0, y1));
                let halves = [_mm256_permute2f128_ps(lo, hi, 0x20), _mm256_permute2f128_ps(lo, hi, 0x31)];
                for (h, &v) in halves.iter().enumerate() {
                    let col = TILE * t + 8 * h;
                    if col >= width {
                        break;
                    }
                    let (n, at_out) = (width - col, r * width + col);
                    let mut v = _mm256_add_ps(v, _mm256_set1_ps(epilogue.bias));
                    if let Some(res) = epilogue.residual {
                        v = _mm256_add_ps(v, load(res.as_ptr().add(at_out), n));
                    }
                    v = crate::activation::lanes(v, epilogue.activation);
                    store(out.as_mut_ptr().add(at_out), v, n);
                }
            }
        }
        t += 8;
    }
}
