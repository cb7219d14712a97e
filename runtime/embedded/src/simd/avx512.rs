//! [`F32s`] for AVX-512F: `__m512`, comparison masks as `__mmask16`, partial vectors as
//! masked loads and stores (which neither fault nor write past their lanes). Only
//! AVX-512F instructions: the float bitwise ones (AVX-512DQ) are done on integers.

use super::F32s;
use std::arch::x86_64::*;

/// The first `n` (below 16) lanes.
#[inline(always)]
fn first(n: usize) -> __mmask16 {
    ((1u32 << n) - 1) as __mmask16
}

// SAFETY (the impl and each method): AVX-512F instructions, which the callers' target
// features enable (the trait's contract); pointers as each method documents.
unsafe impl F32s for __m512 {
    const LANES: usize = 16;
    const ISA: crate::isa::Isa = crate::isa::Isa::Avx512;
    type Mask = __mmask16;
    type Sum = __m512d;

    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm512_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm512_storeu_ps(p, self) }
    }
    #[inline(always)]
    unsafe fn load_first(p: *const f32, n: usize, fill: f32) -> Self {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm512_mask_loadu_ps(_mm512_set1_ps(fill), first(n), p) }
    }
    #[inline(always)]
    unsafe fn store_first(self, p: *mut f32, n: usize) {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm512_mask_storeu_ps(p, first(n), self) }
    }
    #[inline(always)]
    unsafe fn add(self, b: Self) -> Self {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm512_add_ps(self, b) }
    }
    #[inline(always)]
    unsafe fn sub(self, b: Self) -> Self {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm512_sub_ps(self, b) }
    }
    #[inline(always)]
    unsafe fn mul(self, b: Self) -> Self {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm512_mul_ps(self, b) }
    }
    #[inline(always)]
    unsafe fn div(self, b: Self) -> Self {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm512_div_ps(self, b) }
    }
    #[inline(always)]
    unsafe fn mul_add(self, b: Self, c: Self) -> Self {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm512_fmadd_ps(self, b, c) }
    }
    #[inline(always)]
    unsafe fn neg_mul_add(self, b: Self, c: Self) -> Self {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm512_fnmadd_ps(self, b, c) }
    }
    #[inline(always)]
    unsafe fn max(self, b: Self) -> Self {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm512_max_ps(self, b) }
    }
    #[inline(always)]
    unsafe fn min(self, b: Self) -> Self {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm512_min_ps(self, b) }
    }
    #[inline(always)]
    unsafe fn scale_pow2(self, n: Self) -> Self {
        // One instruction (`vscalefps`: self * 2^floor(n), rounded once, overflowing to
        // infinity and underflowing through the subnormals to 0 as two factors would).
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm512_scalef_ps(self, n) }
    }
    #[inline(always)]
    unsafe fn pow2_of_rounded(self) -> Self {
        // The bits are 0x4B40_0000 + n: shifted left by 23 only n's low 9 bits stay, in
        // the exponent field, to which the bias is added.
        // SAFETY: the trait's contract (see the impl).
        unsafe {
            _mm512_castsi512_ps(_mm512_add_epi32(
                _mm512_slli_epi32::<23>(_mm512_castps_si512(self)),
                _mm512_set1_epi32(127 << 23),
            ))
        }
    }
    #[inline(always)]
    unsafe fn abs(self) -> Self {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm512_abs_ps(self) }
    }
    #[inline(always)]
    unsafe fn lt(self, b: Self) -> Self::Mask {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm512_cmp_ps_mask::<_CMP_LT_OQ>(self, b) }
    }
    #[inline(always)]
    unsafe fn not_lt(self, b: Self) -> Self::Mask {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm512_cmp_ps_mask::<_CMP_NLT_UQ>(self, b) }
    }
    #[inline(always)]
    unsafe fn is_nan(self) -> Self::Mask {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(self, self) }
    }
    #[inline(always)]
    unsafe fn select(mask: Self::Mask, if_true: Self, if_false: Self) -> Self {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm512_mask_blend_ps(mask, if_false, if_true) }
    }
    #[inline(always)]
    unsafe fn zero_sum() -> Self::Sum {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm512_setzero_pd() }
    }
    /// The two halves' sum added: one float64 vector of 8.
    #[inline(always)]
    unsafe fn add_to_sum(self, acc: Self::Sum) -> Self::Sum {
        // SAFETY: the trait's contract (see the impl).
        unsafe {
            let (lo, hi) = halves(self);
            _mm512_add_pd(acc, _mm512_add_pd(lo, hi))
        }
    }
    #[inline(always)]
    unsafe fn add_squares_to_sum(self, mean: f64, acc: Self::Sum) -> Self::Sum {
        // SAFETY: the trait's contract (see the impl).
        unsafe {
            let mean = _mm512_set1_pd(mean);
            let (lo, hi) = halves(self);
            let (lo, hi) = (_mm512_sub_pd(lo, mean), _mm512_sub_pd(hi, mean));
            _mm512_fmadd_pd(hi, hi, _mm512_fmadd_pd(lo, lo, acc))
        }
    }
    #[inline(always)]
    unsafe fn total(acc: Self::Sum) -> f64 {
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm512_reduce_add_pd(acc) }
    }
    /// One two-source permutation each (indices 16.. select from `hi`).
    #[inline(always)]
    unsafe fn even_odd(lo: Self, hi: Self) -> (Self, Self) {
        // SAFETY: the trait's contract (see the impl).
        unsafe {
            let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
            let odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
            (_mm512_permutex2var_ps(lo, even, hi), _mm512_permutex2var_ps(lo, odd, hi))
        }
    }
    #[inline(always)]
    unsafe fn shifted(self, next: Self, shift: usize) -> Self {
        // SAFETY: the trait's contract (see the impl).
        unsafe {
            let (a, b) = (_mm512_castps_si512(next), _mm512_castps_si512(self));
            _mm512_castsi512_ps(match shift {
                0 => b,
                1 => _mm512_alignr_epi32::<1>(a, b),
                2 => _mm512_alignr_epi32::<2>(a, b),
                3 => _mm512_alignr_epi32::<3>(a, b),
                4 => _mm512_alignr_epi32::<4>(a, b),
                5 => _mm512_alignr_epi32::<5>(a, b),
                6 => _mm512_alignr_epi32::<6>(a, b),
                7 => _mm512_alignr_epi32::<7>(a, b),
                8 => _mm512_alignr_epi32::<8>(a, b),
                9 => _mm512_alignr_epi32::<9>(a, b),
                10 => _mm512_alignr_epi32::<10>(a, b),
                11 => _mm512_alignr_epi32::<11>(a, b),
                12 => _mm512_alignr_epi32::<12>(a, b),
                13 => _mm512_alignr_epi32::<13>(a, b),
                14 => _mm512_alignr_epi32::<14>(a, b),
                _ => _mm512_alignr_epi32::<15>(a, b),
            })
        }
    }
    #[inline(always)]
    unsafe fn to_array(self) -> [f32; 16] {
        let mut lanes = [0f32; 16];
        // SAFETY: the trait's contract (see the impl).
        unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), self) };
        lanes
    }
}

/// The low and the high 8 lanes in float64.
#[inline(always)]
unsafe fn halves(v: __m512) -> (__m512d, __m512d) {
    // SAFETY: AVX-512F (the callers' target features).
    unsafe {
        let hi = _mm256_castsi256_ps(_mm512_extracti64x4_epi64::<1>(_mm512_castps_si512(v)));
        (_mm512_cvtps_pd(_mm512_castps512_ps256(v)), _mm512_cvtps_pd(hi))
    }
}
