//! The Winograd transforms 8 tiles per vector. A tile row's tiles lie side by side, tile
//! t's input patch at padded columns 4t..4t + 6 and its outputs at columns 4t..4t + 4:
//! a patch's column l over 8 tiles is a 4x4 transpose (within 128-bit lanes) of 4
//! vectors loaded two tiles each (tiles t and t + 4, t + 1 and t + 5, ...), so that the
//! lanes keep the tiles' order; and back, the same transpose and a swap of halves. Plain
//! index loops throughout: an iterator adapter's loop can end up in a function of its
//! own, compiled without AVX, where every intrinsic is a call.

use super::{sandwich, Epilogue, Lanes, Strided, AT, BT, PATCH, POINTS, TILE};
use crate::simd::F32s;
use std::arch::x86_64::*;

impl Lanes for __m256 {
    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: the trait's contract (AVX).
        unsafe { _mm256_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn mul_add(self, c: f32, acc: Self) -> Self {
        // SAFETY: the trait's contract (FMA).
        unsafe { _mm256_fmadd_ps(self, _mm256_set1_ps(c), acc) }
    }
}

/// The 4x4 transposes of the 128-bit lanes of `a`, `b`, `c`, `d`: lane h of result l is
/// `[a[4h + l], b[4h + l], c[4h + l], d[4h + l]]`.
///
/// # Safety
/// The CPU has AVX.
#[inline(always)]
unsafe fn transpose(a: __m256, b: __m256, c: __m256, d: __m256) -> [__m256; 4] {
    // SAFETY: AVX shuffles.
    unsafe {
        let (ab_lo, ab_hi) = (_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));
        let (cd_lo, cd_hi) = (_mm256_unpacklo_ps(c, d), _mm256_unpackhi_ps(c, d));
        [
            _mm256_shuffle_ps::<0x44>(ab_lo, cd_lo),
            _mm256_shuffle_ps::<0xEE>(ab_lo, cd_lo),
            _mm256_shuffle_ps::<0x44>(ab_hi, cd_hi),
            _mm256_shuffle_ps::<0xEE>(ab_hi, cd_hi),
        ]
    }
}

/// Columns 0..4 of 8 tiles of 4 columns each from `p` (tile t at `p + 4 t`): vector l is
/// column l of tiles 0..8.
///
/// # Safety
/// 32 floats at `p`; the CPU has AVX.
#[inline(always)]
unsafe fn columns(p: *const f32) -> [__m256; 4] {
    // SAFETY: the caller's.
    unsafe {
        transpose(
            _mm256_loadu2_m128(p.add(16), p),
            _mm256_loadu2_m128(p.add(20), p.add(4)),
            _mm256_loadu2_m128(p.add(24), p.add(8)),
            _mm256_loadu2_m128(p.add(28), p.add(12)),
        )
    }
}

/// [`super::transform_input`], writing whole vectors: up to 7 floats past each point's
/// tiles, which the caller writes later or never reads (see its safety section).
///
/// # Safety
/// The CPU has AVX2 and FMA; each row holds `4 * at.len` rounded up to 32, and 8, floats;
/// `v` points to `v_len` floats, of which no other thread touches those at `at`'s tiles,
/// rounded up to 8, meanwhile.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn transform_input(rows: [&[f32]; PATCH], v: *mut f32, v_len: usize, at: Strided) {
    let tiles = at.len;
    assert!(
        rows.iter().all(|r| r.len() >= TILE * tiles.next_multiple_of(8) + 8)
            && at.first + (POINTS - 1) * at.point + tiles.next_multiple_of(8) <= v_len
    );
    let mut t = 0;
    while t < tiles {
        let mut d = [[_mm256_setzero_ps(); PATCH]; PATCH];
        for k in 0..PATCH {
            // SAFETY: the patch columns of tiles t..t + 8 and the 4 after them, from
            // column 4t: inside each row (checked above).
            unsafe {
                let p = rows[k].as_ptr().add(TILE * t);
                let [c0, c1, c2, c3] = columns(p);
                let [c4, c5, _, _] = columns(p.add(TILE));
                d[k] = [c0, c1, c2, c3, c4, c5];
            }
        }
        // SAFETY: AVX2 and FMA arithmetic; the stores write 8 floats from tile t of each
        // point, inside `v` (checked above).
        unsafe {
            let values = sandwich(&BT, &d);
            for xi in 0..POINTS {
                let value = values[xi / PATCH][xi % PATCH];
                _mm256_storeu_ps(v.add(at.first + xi * at.point + t), value);
            }
        }
        t += 8;
    }
}

/// [`super::transform_output`].
///
/// # Safety
/// The CPU has AVX2 and FMA; `m` holds 8 floats from every tile of every point of `at`
/// (its slack); `rows` holds `TILE` rows of `row_len`, at least `4 * at.len` rounded up to 32.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn transform_output(m: &[f32], at: Strided, rows: &mut [f32], row_len: usize) {
    let tiles = at.len;
    assert!(
        at.first + (POINTS - 1) * at.point + tiles.next_multiple_of(8) <= m.len()
            && row_len >= TILE * tiles.next_multiple_of(8)
            && rows.len() >= TILE * row_len
    );
    let mut t = 0;
    while t < tiles {
        // SAFETY (all): AVX2 and FMA arithmetic; the loads read 8 floats of each point
        // from tile t, inside `m`, and the stores 32 floats of each row from column 4t,
        // inside `rows` (checked above).
        unsafe {
            let mut p = [[_mm256_setzero_ps(); PATCH]; PATCH];
            for xi in 0..POINTS {
                p[xi / PATCH][xi % PATCH] = _mm256_loadu_ps(m.as_ptr().add(at.first + xi * at.point + t));
            }
            let y = sandwich(&AT, &p);
            for (r, y) in y.iter().enumerate() {
                // Tiles (t, t + 4), (t + 1, t + 5), ... each a run of 4 outputs.
                let [a, b, c, d] = transpose(y[0], y[1], y[2], y[3]);
                let dst = rows.as_mut_ptr().add(r * row_len + TILE * t);
                _mm256_storeu_ps(dst, _mm256_permute2f128_ps::<0x20>(a, b));
                _mm256_storeu_ps(dst.add(8), _mm256_permute2f128_ps::<0x20>(c, d));
                _mm256_storeu_ps(dst.add(16), _mm256_permute2f128_ps::<0x31>(a, b));
                _mm256_storeu_ps(dst.add(24), _mm256_permute2f128_ps::<0x31>(c, d));
            }
        }
        t += 8;
    }
}

/// [`super::finish`].
///
/// # Safety
/// The CPU has AVX2 and FMA; each row of `rows` holds `epilogue.width` rounded up to 16
/// floats; `out` is whole rows of `epilogue.width` (at most `TILE`), the residual as long,
/// or pooled, whole rows of `width / 2` (at most `TILE / 2`), no residual.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn finish(rows: &[f32], row_len: usize, out: &mut [f32], epilogue: &Epilogue) {
    let width = epilogue.width;
    assert!(row_len >= width.next_multiple_of(16) && rows.len() >= TILE * row_len);
    assert!(epilogue.residual.is_none_or(|r| r.len() == out.len() && !epilogue.pool));
    let bias = _mm256_set1_ps(epilogue.bias);
    // SAFETY (both): AVX2 arithmetic; a vector from column c < width of a row reads
    // inside it (checked above).
    let y = |at: usize| unsafe {
        crate::activation::lanes(_mm256_add_ps(_mm256_loadu_ps(rows.as_ptr().add(at)), bias), epilogue.activation)
    };
    if epilogue.pool {
        let pooled = width / 2;
        assert!(out.len() <= TILE / 2 * pooled);
        for r in 0..out.len() / pooled.max(1) {
            let (upper, lower, dst) = (2 * r * row_len, (2 * r + 1) * row_len, r * pooled);
            let mut c = 0;
            while c < pooled {
                // SAFETY: AVX2 arithmetic; columns 2c..2c + 16 of both rows (above); the
                // store writes output row r from column c up to its end.
                unsafe {
                    let left = y(upper + 2 * c).max_nan(y(lower + 2 * c));
                    let right = y(upper + 2 * c + 8).max_nan(y(lower + 2 * c + 8));
                    let (even, odd) = __m256::even_odd(left, right);
                    even.max_nan(odd).store_up_to(out.as_mut_ptr().add(dst + c), pooled - c);
                }
                c += 8;
            }
        }
        return;
    }
    assert!(out.len() <= TILE * width);
    for r in 0..out.len() / width.max(1) {
        let mut c = 0;
        while c < width {
            let (n, at) = (width - c, r * width + c);
            // SAFETY: AVX2 arithmetic; columns c..c + 8 of row r (above); the residual's
            // and the output's accesses stop at the row's end.
            unsafe {
                let mut v = _mm256_add_ps(_mm256_loadu_ps(rows.as_ptr().add(r * row_len + c)), bias);
                if let Some(res) = epilogue.residual {
                    v = _mm256_add_ps(v, __m256::load_up_to(res.as_ptr().add(at), n, 0.0));
                }
                crate::activation::lanes(v, epilogue.activation).store_up_to(out.as_mut_ptr().add(at), n);
            }
            c += 8;
        }
    }
}
