//! GELU (erf form) of contiguous float32 values, `0.5 x (1 + erf(x / sqrt 2))`, 8 lanes at
//! a time with AVX2 + FMA: for the outputs of GEMMs and convolutions (already in memory,
//! so nothing is lost by leaving the generated code's pointwise kernels, which are 4 lanes
//! wide and without FMA). erf and exp are the algorithms and coefficients of the
//! compiler's `codegen/cpu/vmath.rs` (erf within 1.4 ulp), evaluated with fused
//! multiply-adds; values past the last whole vector go through the same vector code.
// The coefficients are vmath.rs's, digit for digit: clippy would round them to what float parsing gives anyway.
#![allow(clippy::excessive_precision)]

use crate::guards::refuse_extern_call;
use crate::pool::for_items;

/// `out[i] = gelu(x[i])` for `i < n`.
///
/// # Safety
/// `x` and `out` hold `n` floats each and do not overlap.
#[no_mangle]
pub unsafe extern "C" fn __aotc_gelu_f32(out: *mut f32, x: *const f32, n: i64) {
    let Ok(n) = usize::try_from(n) else { return refuse_extern_call("__aotc_gelu_f32") };
    if n == 0 {
        return;
    }
    // SAFETY: the caller's contract.
    let (x, out) = unsafe { (std::slice::from_raw_parts(x, n), std::slice::from_raw_parts_mut(out, n)) };
    // Whole chunks on the call's threads, then the rest.
    const CHUNK: usize = 4096;
    let bulk = n / CHUNK * CHUNK;
    let (out_bulk, out_rest) = out.split_at_mut(bulk);
    for_items(out_bulk, bulk / CHUNK, CHUNK, bulk * 16, &|begin, end, part| gelu(&x[begin * CHUNK..end * CHUNK], part));
    gelu(&x[bulk..], out_rest);
}

fn gelu(x: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has AVX2 and FMA.
        return unsafe { avx2::gelu(x, out) };
    }
    for (o, &v) in out.iter_mut().zip(x) {
        *o = gelu_scalar(v);
    }
}

/// One value's GELU, with libm's erf.
pub fn gelu_scalar(x: f32) -> f32 {
    x * 0.5 * (1.0 + erf_scalar(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// libm's erf, for CPUs without AVX2.
fn erf_scalar(x: f32) -> f32 {
    extern "C" {
        fn erff(x: f32) -> f32;
    }
    // SAFETY: erff is a pure libm function.
    unsafe { erff(x) }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    /// vmath.rs's coefficients (highest degree first).
    const ERF_P: [f32; 7] = [
        7.8758750626854883e-5,
        -8.0168642871658695e-4,
        5.189087423433974e-3,
        -2.6854212010626412e-2,
        1.1283594715160218e-1,
        -3.7612626666720331e-1,
        1.2837916584835095e-1,
    ];
    const ERFC_R: [f32; 8] = [
        -1.9605029369706144e-2,
        1.2847945060292617e-1,
        -3.6856255862597054e-1,
        5.8989717301079351e-1,
        -5.1389912240258173e-1,
        5.3599493622805151e-2,
        5.5729263504968306e-1,
        3.8153229441997627e-4,
    ];
    const EXPM1_P: [f32; 6] =
        [1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1];
    const LN2_HI: f32 = 0.693359375;
    const LN2_LO: f32 = -2.12194440e-4;

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn gelu(x: &[f32], out: &mut [f32]) {
        let (chunks, tail) = (x.chunks_exact(8), x.len() % 8);
        for (i, c) in chunks.enumerate() {
            // SAFETY: 8 floats at c and at out[8 i..].
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(8 * i), gelu8(_mm256_loadu_ps(c.as_ptr()))) };
        }
        if tail > 0 {
            let start = x.len() - tail;
            let mut lanes = [0f32; 8];
            lanes[..tail].copy_from_slice(&x[start..]);
            // SAFETY: 8 floats in lanes.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), gelu8(_mm256_loadu_ps(lanes.as_ptr()))) };
            out[start..].copy_from_slice(&lanes[..tail]);
        }
    }

    #[inline(always)]
    unsafe fn splat(v: f32) -> __m256 {
        unsafe { _mm256_set1_ps(v) }
    }

    #[inline(always)]
    unsafe fn poly(x: __m256, c: &[f32]) -> __m256 {
        unsafe {
            let mut acc = splat(c[0]);
            for &k in &c[1..] {
                acc = _mm256_fmadd_ps(acc, x, splat(k));
            }
            acc
        }
    }

    /// `0.5 x (1 + erf(x / sqrt 2))`, as the IR computes it: `(x * 0.5) * (1 + erf(x * c))`.
    #[inline(always)]
    pub(crate) unsafe fn gelu8(x: __m256) -> __m256 {
        unsafe {
            let e = erf8(_mm256_mul_ps(x, splat(std::f32::consts::FRAC_1_SQRT_2)));
            _mm256_mul_ps(_mm256_mul_ps(x, splat(0.5)), _mm256_add_ps(splat(1.0), e))
        }
    }

    /// erf: `x + x P(x^2)` for |x| < 1, else `sign(x) (1 - e^(-x^2) R(1/|x|))`.
    #[inline(always)]
    unsafe fn erf8(x: __m256) -> __m256 {
        unsafe {
            let sign = _mm256_and_ps(x, splat(-0.0));
            let a = _mm256_andnot_ps(splat(-0.0), x);
            let x2 = _mm256_mul_ps(x, x);
            let small = _mm256_fmadd_ps(x, poly(x2, &ERF_P), x);
            let r = poly(_mm256_div_ps(splat(1.0), a), &ERFC_R);
            let e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x2));
            let large = _mm256_or_ps(_mm256_fnmadd_ps(e, r, splat(1.0)), sign);
            let is_small = _mm256_cmp_ps::<_CMP_LT_OQ>(a, splat(1.0));
            _mm256_blendv_ps(large, small, is_small)
        }
    }

    /// e^x, x clamped to [-104, 89] (NaN kept): `2^n (1 + expm1(r))`, 2^n as two factors.
    #[inline(always)]
    pub(crate) unsafe fn exp8(x: __m256) -> __m256 {
        unsafe {
            // max/min return their second operand when either is NaN: x.
            let x = _mm256_min_ps(splat(89.0), _mm256_max_ps(splat(-104.0), x));
            let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
                x,
                splat(std::f32::consts::LOG2_E),
            ));
            let r = _mm256_fnmadd_ps(n, splat(LN2_HI), x);
            let r = _mm256_fnmadd_ps(n, splat(LN2_LO), r);
            let em1 = _mm256_fmadd_ps(poly(r, &EXPM1_P), _mm256_mul_ps(r, r), r);
            let n = _mm256_cvtps_epi32(n);
            let half = _mm256_srai_epi32::<1>(n);
            let rest = _mm256_sub_epi32(n, half);
            let pow2 =
                |k: __m256i| _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(k, _mm256_set1_epi32(127))));
            _mm256_mul_ps(_mm256_mul_ps(_mm256_add_ps(em1, splat(1.0)), pow2(half)), pow2(rest))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    extern "C" {
        /// glibc's, linked by std.
        fn erf(x: f64) -> f64;
    }

    #[test]
    fn gelu_matches_float64_including_the_tail_and_specials() {
        let mut x: Vec<f32> = (0..20_003).map(|i| (i as f32 - 10_000.0) * 1.3e-3).collect();
        x.extend([
            0.0,
            -0.0,
            1e-30,
            -1e-30,
            3.0,
            -3.0,
            9.0,
            -9.0,
            30.0,
            -30.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ]);
        let mut out = vec![0f32; x.len()];
        // SAFETY: both hold x.len() floats.
        unsafe { __aotc_gelu_f32(out.as_mut_ptr(), x.as_ptr(), x.len() as i64) };
        for (&v, &got) in x.iter().zip(&out) {
            let want = if v.is_infinite() {
                if v > 0.0 {
                    f64::INFINITY
                } else {
                    0.0
                }
            } else {
                // SAFETY: erf is a pure libm function.
                v as f64 * 0.5 * (1.0 + unsafe { erf(v as f64 * std::f64::consts::FRAC_1_SQRT_2) })
            };
            if v.is_nan() {
                assert!(got.is_nan());
            } else if v == f32::NEG_INFINITY {
                // -inf * 0.5 * (1 + -1), as the formula (and torch) gives it.
                assert!(got.is_nan(), "gelu(-inf) = {got}");
            } else {
                assert!(
                    got as f64 == want || (got as f64 - want).abs() <= 2e-7 * (1.0 + want.abs()),
                    "gelu({v}) = {got}, expected {want}"
                );
            }
        }
    }
}
