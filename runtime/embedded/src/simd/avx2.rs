//! [`F32s`] for AVX2 + FMA: `__m256`, comparison masks as vectors of all-ones lanes.

use super::F32s;
use std::arch::x86_64::*;

// SAFETY (the impl and each method): AVX2 and FMA instructions, which the callers'
// target features enable (the trait's contract); pointers as each method documents.
unsafe impl F32s for __m256 {
    const LANES: usize = 8;
    const ISA: crate::isa::Isa = crate::isa::Isa::Avx2;
    type Mask = __m256;
    type Sum = __m256d;

    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm256_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm256_storeu_ps(p, self) }
    }
    /// A masked load (it reads only the first `n` lanes, and faults on none of the others),
    /// the other lanes then `fill`. Through the stack instead (a copy of `n` floats, a call
    /// to memcpy) took 11-15 ns a load on Zen 3 against 3.6 for this.
    #[inline(always)]
    unsafe fn load_first(p: *const f32, n: usize, fill: f32) -> Self {
        // SAFETY: the trait's contract (see the impl).
        unsafe {
            let first = _mm256_cmpgt_epi32(_mm256_set1_epi32(n as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            let loaded = _mm256_maskload_ps(p, first);
            if fill.to_bits() == 0 {
                // The masked lanes are +0 already.
                return loaded;
            }
            _mm256_blendv_ps(_mm256_set1_ps(fill), loaded, _mm256_castsi256_ps(first))
        }
    }
    /// 4, 2 and 1 floats at a time (a masked store would cost about 10 cycles on AMD's
    /// cores, these few stores one each).
    #[inline(always)]
    unsafe fn store_first(self, p: *mut f32, n: usize) {
        // SAFETY: the trait's contract (see the impl).
        unsafe {
            let (mut p, mut n, mut part) = (p, n, _mm256_castps256_ps128(self));
            if n >= 4 {
                _mm_storeu_ps(p, part);
                (p, n, part) = (p.add(4), n - 4, _mm256_extractf128_ps::<1>(self));
            }
            if n >= 2 {
                _mm_storel_epi64(p.cast(), _mm_castps_si128(part));
                (p, n, part) = (p.add(2), n - 2, _mm_movehl_ps(part, part));
            }
            if n == 1 {
                _mm_store_ss(p, part);
            }
        }
    }
    #[inline(always)]
    unsafe fn add(self, b: Self) -> Self {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm256_add_ps(self, b) }
    }
    #[inline(always)]
    unsafe fn sub(self, b: Self) -> Self {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm256_sub_ps(self, b) }
    }
    #[inline(always)]
    unsafe fn mul(self, b: Self) -> Self {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm256_mul_ps(self, b) }
    }
    #[inline(always)]
    unsafe fn div(self, b: Self) -> Self {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm256_div_ps(self, b) }
    }
    #[inline(always)]
    unsafe fn mul_add(self, b: Self, c: Self) -> Self {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm256_fmadd_ps(self, b, c) }
    }
    #[inline(always)]
    unsafe fn neg_mul_add(self, b: Self, c: Self) -> Self {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm256_fnmadd_ps(self, b, c) }
    }
    #[inline(always)]
    unsafe fn max(self, b: Self) -> Self {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm256_max_ps(self, b) }
    }
    #[inline(always)]
    unsafe fn min(self, b: Self) -> Self {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm256_min_ps(self, b) }
    }
    #[inline(always)]
    unsafe fn scale_pow2(self, n: Self) -> Self {
        // SAFETY: the trait's contract (see the impl).
        unsafe {
            let n = _mm256_cvtps_epi32(n);
            let half = _mm256_srai_epi32::<1>(n);
            let rest = _mm256_sub_epi32(n, half);
            let pow2 =
                |k: __m256i| _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(k, _mm256_set1_epi32(127))));
            _mm256_mul_ps(_mm256_mul_ps(self, pow2(half)), pow2(rest))
        }
    }
    #[inline(always)]
    unsafe fn pow2_of_rounded(self) -> Self {
        // The bits are 0x4B40_0000 + n: shifted left by 23 only n's low 9 bits stay, in
        // the exponent field, to which the bias is added.
        // SAFETY: the trait's contract (see the impl).
        unsafe {
            _mm256_castsi256_ps(_mm256_add_epi32(
                _mm256_slli_epi32::<23>(_mm256_castps_si256(self)),
                _mm256_set1_epi32(127 << 23),
            ))
        }
    }
    #[inline(always)]
    unsafe fn abs(self) -> Self {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm256_andnot_ps(_mm256_set1_ps(-0.0), self) }
    }
    #[inline(always)]
    unsafe fn lt(self, b: Self) -> Self::Mask {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm256_cmp_ps::<_CMP_LT_OQ>(self, b) }
    }
    #[inline(always)]
    unsafe fn not_lt(self, b: Self) -> Self::Mask {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm256_cmp_ps::<_CMP_NLT_UQ>(self, b) }
    }
    #[inline(always)]
    unsafe fn is_nan(self) -> Self::Mask {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm256_cmp_ps::<_CMP_UNORD_Q>(self, self) }
    }
    #[inline(always)]
    unsafe fn select(mask: Self::Mask, if_true: Self, if_false: Self) -> Self {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm256_blendv_ps(if_false, if_true, mask) }
    }
    #[inline(always)]
    unsafe fn zero_sum() -> Self::Sum {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm256_setzero_pd() }
    }
    /// The two halves' sum added: one float64 vector of 4.
    #[inline(always)]
    unsafe fn add_to_sum(self, acc: Self::Sum) -> Self::Sum {
        // SAFETY: the trait's contract (see the impl).
        unsafe {
            let (lo, hi) =
                (_mm256_cvtps_pd(_mm256_castps256_ps128(self)), _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(self)));
            _mm256_add_pd(acc, _mm256_add_pd(lo, hi))
        }
    }
    #[inline(always)]
    unsafe fn add_squares_to_sum(self, mean: f64, acc: Self::Sum) -> Self::Sum {
        // SAFETY: the trait's contract (see the impl).
        unsafe {
            let mean = _mm256_set1_pd(mean);
            let mut acc = acc;
            for half in [_mm256_castps256_ps128(self), _mm256_extractf128_ps::<1>(self)] {
                let d = _mm256_sub_pd(_mm256_cvtps_pd(half), mean);
                acc = _mm256_fmadd_pd(d, d, acc);
            }
            acc
        }
    }
    #[inline(always)]
    unsafe fn total(acc: Self::Sum) -> f64 {
        let mut l = [0f64; 4];
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm256_storeu_pd(l.as_mut_ptr(), acc) };
        (l[0] + l[1]) + (l[2] + l[3])
    }
    /// Each 128-bit half of the shuffles holds (lo, lo, hi, hi) pairs; the permutation
    /// puts the pairs from `lo` first.
    #[inline(always)]
    unsafe fn even_odd(lo: Self, hi: Self) -> (Self, Self) {
        // SAFETY: the trait's contract (see the impl).
        unsafe {
            let order = |v: __m256| _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(v)));
            (order(_mm256_shuffle_ps::<0b10_00_10_00>(lo, hi)), order(_mm256_shuffle_ps::<0b11_01_11_01>(lo, hi)))
        }
    }
    #[inline(always)]
    unsafe fn shifted(self, next: Self, shift: usize) -> Self {
        // SAFETY: the trait's contract (see the impl).
        unsafe {
            // Per 128-bit half, `alignr` of (self's high half, next's low half) over self,
            // or over that middle vector for shifts from 4 on.
            let middle = _mm256_castps_si256(_mm256_permute2f128_ps::<0x21>(self, next));
            let (a, b) = (_mm256_castps_si256(self), _mm256_castps_si256(next));
            _mm256_castsi256_ps(match shift {
                0 => a,
                1 => _mm256_alignr_epi8::<4>(middle, a),
                2 => _mm256_alignr_epi8::<8>(middle, a),
                3 => _mm256_alignr_epi8::<12>(middle, a),
                4 => middle,
                5 => _mm256_alignr_epi8::<4>(b, middle),
                6 => _mm256_alignr_epi8::<8>(b, middle),
                _ => _mm256_alignr_epi8::<12>(b, middle),
            })
        }
    }
    #[inline(always)]
    unsafe fn to_array(self) -> [f32; 16] {
        let mut lanes = [0f32; 16];
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), self) };
        lanes
    }
}

/// Rows to columns: lane `j` of vector `i` becomes lane `i` of vector `j`.
#[inline(always)]
pub(crate) unsafe fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    // SAFETY: AVX (the caller is compiled for it).
    unsafe {
        let t: [__m256; 8] = [
            _mm256_unpacklo_ps(r[0], r[1]),
            _mm256_unpackhi_ps(r[0], r[1]),
            _mm256_unpacklo_ps(r[2], r[3]),
            _mm256_unpackhi_ps(r[2], r[3]),
            _mm256_unpacklo_ps(r[4], r[5]),
            _mm256_unpackhi_ps(r[4], r[5]),
            _mm256_unpacklo_ps(r[6], r[7]),
            _mm256_unpackhi_ps(r[6], r[7]),
        ];
        let s: [__m256; 8] = [
            _mm256_shuffle_ps::<0x44>(t[0], t[2]),
            _mm256_shuffle_ps::<0xee>(t[0], t[2]),
            _mm256_shuffle_ps::<0x44>(t[1], t[3]),
            _mm256_shuffle_ps::<0xee>(t[1], t[3]),
            _mm256_shuffle_ps::<0x44>(t[4], t[6]),
            _mm256_shuffle_ps::<0xee>(t[4], t[6]),
            _mm256_shuffle_ps::<0x44>(t[5], t[7]),
            _mm256_shuffle_ps::<0xee>(t[5], t[7]),
        ];
        [
            _mm256_permute2f128_ps::<0x20>(s[0], s[4]),
            _mm256_permute2f128_ps::<0x20>(s[1], s[5]),
            _mm256_permute2f128_ps::<0x20>(s[2], s[6]),
            _mm256_permute2f128_ps::<0x20>(s[3], s[7]),
            _mm256_permute2f128_ps::<0x31>(s[0], s[4]),
            _mm256_permute2f128_ps::<0x31>(s[1], s[5]),
            _mm256_permute2f128_ps::<0x31>(s[2], s[6]),
            _mm256_permute2f128_ps::<0x31>(s[3], s[7]),
        ]
    }
}
