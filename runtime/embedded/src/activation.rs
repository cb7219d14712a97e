//! The activations of the output passes (`aotc_abi::gemm::Activation`), applied by the
//! GEMM as it writes each register tile and by the convolutions as they write their
//! output: one element, 8 lanes (AVX2 + FMA), or a whole slice. Each computes what the
//! graph's decomposition computes, in its order (NaN stays NaN).

use aotc_abi::gemm::Activation;

/// One element.
pub fn scalar(activation: Activation, x: f32) -> f32 {
    match activation {
        Activation::None => x,
        // `<`: NaN stays.
        Activation::Relu => {
            if x < 0.0 {
                0.0
            } else {
                x
            }
        }
        Activation::Gelu => crate::gelu::gelu_scalar(x),
        // clamp keeps NaN (f32::max/min would drop it).
        Activation::Hardswish => x * (x + 3.0).clamp(0.0, 6.0) / 6.0,
    }
}

/// Every element of `out`, 8 at a time where the CPU has AVX2 and FMA.
pub fn apply(activation: Activation, out: &mut [f32]) {
    if activation == Activation::None {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has AVX2 and FMA.
        return unsafe { avx2::apply(activation, out) };
    }
    out.iter_mut().for_each(|v| *v = scalar(activation, *v));
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use aotc_abi::gemm::Activation;
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn apply(activation: Activation, out: &mut [f32]) {
        let mut chunks = out.chunks_exact_mut(8);
        for c in &mut chunks {
            // SAFETY: 8 floats at c.
            unsafe { _mm256_storeu_ps(c.as_mut_ptr(), lanes8(_mm256_loadu_ps(c.as_ptr()), activation)) };
        }
        let tail = chunks.into_remainder();
        let mut lanes = [0f32; 8];
        lanes[..tail.len()].copy_from_slice(tail);
        // SAFETY: 8 floats in lanes.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), lanes8(_mm256_loadu_ps(lanes.as_ptr()), activation)) };
        let n = tail.len();
        tail.copy_from_slice(&lanes[..n]);
    }

    /// 8 lanes ([`super::scalar`]'s values).
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA (the caller's target features include them).
    #[inline(always)]
    pub unsafe fn lanes8(v: __m256, activation: Activation) -> __m256 {
        // SAFETY (all): the caller's. max(a, v) and min(a, v) return their second
        // operand, v, when either is NaN: NaN stays.
        unsafe {
            match activation {
                Activation::None => v,
                Activation::Relu => _mm256_max_ps(_mm256_setzero_ps(), v),
                Activation::Gelu => crate::gelu::avx2::gelu8(v),
                Activation::Hardswish => {
                    let t = _mm256_add_ps(v, _mm256_set1_ps(3.0));
                    let t = _mm256_min_ps(_mm256_set1_ps(6.0), _mm256_max_ps(_mm256_setzero_ps(), t));
                    _mm256_div_ps(_mm256_mul_ps(v, t), _mm256_set1_ps(6.0))
                }
            }
        }
    }
}

/// Each activation in float64, for the tests of the kernels that apply them.
#[cfg(test)]
pub(crate) fn reference(activation: Activation, x: f64) -> f64 {
    extern "C" {
        /// glibc's, linked by std.
        fn erf(x: f64) -> f64;
    }
    match activation {
        Activation::None => x,
        Activation::Relu => x.max(0.0),
        // SAFETY: erf is a pure libm function.
        Activation::Gelu => x * 0.5 * (1.0 + unsafe { erf(x * std::f64::consts::FRAC_1_SQRT_2) }),
        Activation::Hardswish => x * (x + 3.0).clamp(0.0, 6.0) / 6.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_agree_with_one_element_at_a_time_specials_included() {
        let mut x: Vec<f32> = (0..1003).map(|i| (i as f32 - 500.0) * 0.0173).collect();
        x.extend([0.0, -0.0, -3.0, 3.0, 6.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e30, -1e30]);
        for activation in Activation::ALL {
            let mut out = x.clone();
            apply(activation, &mut out);
            for (&v, &got) in x.iter().zip(&out) {
                let want = scalar(activation, v);
                let close =
                    got == want || (got - want).abs() <= 2e-7 * (1.0 + want.abs()) || (got.is_nan() && want.is_nan());
                assert!(close, "{activation:?}({v}) = {got}, one at a time {want}");
            }
        }
        assert!(scalar(Activation::Hardswish, f32::NAN).is_nan() && scalar(Activation::Relu, f32::NAN).is_nan());
        assert_eq!(scalar(Activation::Hardswish, -4.0), 0.0);
        assert_eq!(scalar(Activation::Hardswish, 4.0), 4.0);
    }
}
