//! Softmax and layer norm along contiguous rows, one kernel each (the generated code's
//! `Extern` calls; the compiler lowers float32 ones here when their rows are the trailing,
//! contiguous dimension): a row is read once for its statistics and once for its output,
//! where the loop IR needs a reduction kernel per statistic and a pointwise one after.
//! Rows run on the call's threads, 8 lanes at a time with AVX2 + FMA (exp as GELU's
//! `exp8`), sums in float64 either way.

use crate::pool::for_items;

/// `out[r] = softmax(x[r])` (or `log_softmax` when `log != 0`) for `rows` rows of `len`:
/// `exp(x - max) / sum`, a row holding NaN gives NaN throughout, as in torch.
///
/// # Safety
/// `x` and `out` hold `rows * len` floats each and do not overlap.
#[no_mangle]
pub unsafe extern "C" fn __aotc_softmax_f32(out: *mut f32, x: *const f32, rows: i64, len: i64, log: i64) {
    let (rows, len) = (rows.max(0) as usize, len.max(0) as usize);
    let Some(total) = rows.checked_mul(len) else { return };
    if total == 0 {
        return;
    }
    // SAFETY: the caller's contract.
    let (x, out) = unsafe { (std::slice::from_raw_parts(x, total), std::slice::from_raw_parts_mut(out, total)) };
    // Short rows (attention over a few positions) measured faster one element at a time.
    let vectors = len >= 32 && avx2_fma();
    for_items(out, rows, len, total * 8, &|begin, end, part| {
        for (r, row) in (begin..end).zip(part.chunks_exact_mut(len)) {
            softmax_row(&x[r * len..][..len], row, log != 0, vectors);
        }
    });
}

/// Whether this CPU runs the [`avx2`] row code.
fn avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// One row, 8 lanes at a time with `vectors` ([`avx2_fma`] said so).
fn softmax_row(x: &[f32], out: &mut [f32], log: bool, vectors: bool) {
    #[cfg(target_arch = "x86_64")]
    if vectors {
        // SAFETY: the CPU has AVX2 and FMA.
        return unsafe { avx2::softmax_row(x, out, log) };
    }
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| if v > m || v.is_nan() { v } else { m });
    let mut sum = 0.0f64;
    let shifted: f32;
    if log {
        for &v in x {
            sum += ((v - max) as f64).exp();
        }
        shifted = max + sum.ln() as f32;
        for (o, &v) in out.iter_mut().zip(x) {
            *o = v - shifted;
        }
    } else {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = (v - max).exp();
            sum += *o as f64;
        }
        let inverse = (1.0 / sum) as f32;
        out.iter_mut().for_each(|o| *o *= inverse);
    }
}

/// `out[r] = (x[r] - mean) / sqrt(var + eps) * weight + bias` over `rows` rows of `len`
/// (biased variance); `weight` and `bias` (`len` floats) are read when their flags are
/// set; `eps` is an f64's bits.
///
/// # Safety
/// `x` and `out` hold `rows * len` floats each and do not overlap; `weight` and `bias`
/// hold `len` floats where read.
#[no_mangle]
pub unsafe extern "C" fn __aotc_layer_norm_f32(
    out: *mut f32, x: *const f32, weight: *const f32, bias: *const f32, rows: i64, len: i64, has_weight: i64, has_bias: i64, eps: i64,
) {
    let (rows, len) = (rows.max(0) as usize, len.max(0) as usize);
    let Some(total) = rows.checked_mul(len) else { return };
    if total == 0 {
        return;
    }
    // SAFETY: the caller's contract.
    let (x, out) = unsafe { (std::slice::from_raw_parts(x, total), std::slice::from_raw_parts_mut(out, total)) };
    // SAFETY: as above, where the flags say they exist.
    let weight = (has_weight != 0).then(|| unsafe { std::slice::from_raw_parts(weight, len) });
    // SAFETY: as above.
    let bias = (has_bias != 0).then(|| unsafe { std::slice::from_raw_parts(bias, len) });
    let eps = f64::from_bits(eps as u64);
    let vectors = avx2_fma();
    for_items(out, rows, len, total * 4, &|begin, end, part| {
        for (r, row) in (begin..end).zip(part.chunks_exact_mut(len)) {
            let x = &x[r * len..][..len];
            #[cfg(target_arch = "x86_64")]
            if vectors {
                // SAFETY: the CPU has AVX2 and FMA.
                unsafe { avx2::layer_norm_row(x, row, weight, bias, eps) };
                continue;
            }
            let mean = x.iter().map(|&v| v as f64).sum::<f64>() / len as f64;
            let var = x.iter().map(|&v| (v as f64 - mean) * (v as f64 - mean)).sum::<f64>() / len as f64;
            let (mean, rstd) = (mean as f32, (1.0 / (var + eps).sqrt()) as f32);
            for (i, (o, &v)) in row.iter_mut().zip(x).enumerate() {
                let y = (v - mean) * rstd;
                let y = weight.map_or(y, |w| y * w[i]);
                *o = bias.map_or(y, |b| y + b[i]);
            }
        }
    });
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use crate::gelu::avx2::exp8;
    use std::arch::x86_64::*;

    /// The 8 lanes of `x` from `i` (past its end: `fill`), and which of them exist.
    #[inline(always)]
    unsafe fn lanes(x: &[f32], i: usize, fill: f32) -> (__m256, __m256) {
        // SAFETY (all): AVX, the callers' target features; 8 floats read where they exist.
        unsafe {
            if i + 8 <= x.len() {
                return (_mm256_loadu_ps(x.as_ptr().add(i)), _mm256_castsi256_ps(_mm256_set1_epi32(-1)));
            }
            let (mut v, mut valid) = ([fill; 8], [0i32; 8]);
            for j in 0..x.len() - i {
                v[j] = x[i + j];
                valid[j] = -1;
            }
            (_mm256_loadu_ps(v.as_ptr()), _mm256_castsi256_ps(_mm256_loadu_si256(valid.as_ptr().cast())))
        }
    }

    /// Writes the existing lanes of `v` to `out` from `i`.
    #[inline(always)]
    unsafe fn store(out: &mut [f32], i: usize, v: __m256) {
        // SAFETY: AVX; 8 floats written where they exist.
        unsafe {
            if i + 8 <= out.len() {
                return _mm256_storeu_ps(out.as_mut_ptr().add(i), v);
            }
            let mut lanes = [0f32; 8];
            _mm256_storeu_ps(lanes.as_mut_ptr(), v);
            let n = out.len() - i;
            out[i..].copy_from_slice(&lanes[..n]);
        }
    }

    /// The float64 sum of the 8 lanes added into `acc` (two 4-lane halves).
    #[inline(always)]
    unsafe fn add_f64(acc: __m256d, v: __m256) -> __m256d {
        // SAFETY: AVX.
        unsafe { _mm256_add_pd(acc, _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(v)))) }
    }

    #[inline(always)]
    unsafe fn sum_f64(v: __m256d) -> f64 {
        let mut l = [0f64; 4];
        // SAFETY: AVX; 4 doubles.
        unsafe { _mm256_storeu_pd(l.as_mut_ptr(), v) };
        (l[0] + l[1]) + (l[2] + l[3])
    }

    /// `super::softmax_row` 8 lanes at a time: the same max (NaN if any lane is), exp of
    /// the shifted values, float64 sum.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn softmax_row(x: &[f32], out: &mut [f32], log: bool) {
        // SAFETY (all): AVX2 and FMA by this function's target features; `lanes` and
        // `store` stay inside the rows.
        unsafe {
            let (mut vmax, mut nan) = (_mm256_set1_ps(f32::NEG_INFINITY), _mm256_setzero_ps());
            for i in (0..x.len()).step_by(8) {
                let (v, _) = lanes(x, i, f32::NEG_INFINITY);
                nan = _mm256_or_ps(nan, _mm256_cmp_ps::<_CMP_UNORD_Q>(v, v));
                vmax = _mm256_max_ps(vmax, v);
            }
            let mut m = [0f32; 8];
            _mm256_storeu_ps(m.as_mut_ptr(), vmax);
            let max = if _mm256_movemask_ps(nan) != 0 { f32::NAN } else { m.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) };
            let vmax = _mm256_set1_ps(max);
            let mut sum = _mm256_setzero_pd();
            for i in (0..x.len()).step_by(8) {
                let (v, valid) = lanes(x, i, 0.0);
                let shifted = _mm256_sub_ps(v, vmax);
                // exp8 clamps its argument at -104: below, e^x is 0 in float32 (as expf
                // gives it), not a denormal (masked attention scores are -inf). NaN stays.
                let representable = _mm256_cmp_ps::<_CMP_NLT_UQ>(shifted, _mm256_set1_ps(-104.0));
                let e = _mm256_and_ps(exp8(shifted), _mm256_and_ps(valid, representable));
                if !log {
                    store(out, i, e);
                }
                sum = add_f64(sum, e);
            }
            let sum = sum_f64(sum);
            if log {
                let shifted = _mm256_set1_ps(max + sum.ln() as f32);
                for i in (0..x.len()).step_by(8) {
                    store(out, i, _mm256_sub_ps(lanes(x, i, 0.0).0, shifted));
                }
            } else {
                let inverse = _mm256_set1_ps((1.0 / sum) as f32);
                for i in (0..out.len()).step_by(8) {
                    let (e, _) = lanes(out, i, 0.0);
                    store(out, i, _mm256_mul_ps(e, inverse));
                }
            }
        }
    }

    /// One row of `super::__aotc_layer_norm_f32`: float64 mean and biased variance, then
    /// `(x - mean) * rstd * weight + bias` in float32, as the scalar code computes them.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn layer_norm_row(x: &[f32], out: &mut [f32], weight: Option<&[f32]>, bias: Option<&[f32]>, eps: f64) {
        let len = x.len() as f64;
        // SAFETY (all): as in `softmax_row`; weight and bias hold the row's length.
        unsafe {
            let mut sum = _mm256_setzero_pd();
            for i in (0..x.len()).step_by(8) {
                sum = add_f64(sum, lanes(x, i, 0.0).0);
            }
            let mean = sum_f64(sum) / len;
            let (vmean, mut squares) = (_mm256_set1_pd(mean), _mm256_setzero_pd());
            for i in (0..x.len()).step_by(8) {
                let (v, valid) = lanes(x, i, 0.0);
                for half in [_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v)].into_iter().zip([_mm256_castps256_ps128(valid), _mm256_extractf128_ps::<1>(valid)]) {
                    let d = _mm256_sub_pd(_mm256_cvtps_pd(half.0), vmean);
                    let d = _mm256_and_pd(d, _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm_castps_si128(half.1))));
                    squares = _mm256_fmadd_pd(d, d, squares);
                }
            }
            let var = sum_f64(squares) / len;
            let (vmean, rstd) = (_mm256_set1_ps(mean as f32), _mm256_set1_ps((1.0 / (var + eps).sqrt()) as f32));
            for i in (0..x.len()).step_by(8) {
                let y = _mm256_mul_ps(_mm256_sub_ps(lanes(x, i, 0.0).0, vmean), rstd);
                let y = match weight {
                    Some(w) => _mm256_mul_ps(y, lanes(w, i, 0.0).0),
                    None => y,
                };
                let y = match bias {
                    Some(b) => _mm256_add_ps(y, lanes(b, i, 0.0).0),
                    None => y,
                };
                store(out, i, y);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::{with_threads, PoolUser};

    fn values(n: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 7919) % 113) as f32 / 11.0 - 5.0).collect()
    }

    #[test]
    fn softmax_rows_match_float64_and_nan_spreads() {
        let user = PoolUser::acquire(2);
        // Vectors with a partial one, and short rows done one element at a time.
        for len in [37, 7] {
            softmax_rows(300, len);
        }
        drop(user);
    }

    fn softmax_rows(rows: usize, len: usize) {
        let mut x = values(rows * len);
        x[len + 3] = f32::NAN;
        // A masked score: exactly 0 after softmax, as expf gives it.
        x[2 * len + 1] = f32::NEG_INFINITY;
        for log in [0, 1] {
            for threads in [1, 2] {
                let mut out = vec![0f32; rows * len];
                // SAFETY: both hold rows * len floats.
                with_threads(threads, || unsafe { __aotc_softmax_f32(out.as_mut_ptr(), x.as_ptr(), rows as i64, len as i64, log) });
                for r in 0..rows {
                    let row = &x[r * len..][..len];
                    let max = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
                    let sum: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
                    for (i, &v) in row.iter().enumerate() {
                        let want = if log == 1 { v as f64 - max - sum.ln() } else { (v as f64 - max).exp() / sum };
                        let got = out[r * len + i] as f64;
                        if r == 1 {
                            assert!(got.is_nan(), "a NaN makes its row NaN");
                        } else if v == f32::NEG_INFINITY {
                            assert_eq!(got, want, "len {len} log={log}: softmax of -inf");
                        } else {
                            assert!((got - want).abs() <= 1e-6 * (1.0 + want.abs()), "len {len} log={log} row {r} [{i}]: {got} vs {want}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn layer_norm_rows_match_float64() {
        let user = PoolUser::acquire(2);
        // Whole vectors, a partial one, and less than one.
        for len in [48, 37, 5] {
            layer_norm_rows(100, len);
        }
        drop(user);
    }

    fn layer_norm_rows(rows: usize, len: usize) {
        let x = values(rows * len);
        let (w, b) = (values(len).iter().map(|v| v * 0.3).collect::<Vec<_>>(), values(len + 5)[5..].to_vec());
        for (has_w, has_b) in [(0, 0), (1, 1), (1, 0)] {
            let mut out = vec![0f32; rows * len];
            // SAFETY: x and out hold rows * len floats, w and b len.
            with_threads(2, || unsafe {
                __aotc_layer_norm_f32(out.as_mut_ptr(), x.as_ptr(), w.as_ptr(), b.as_ptr(), rows as i64, len as i64, has_w, has_b, 1e-5f64.to_bits() as i64)
            });
            for r in 0..rows {
                let row = &x[r * len..][..len];
                let mean = row.iter().map(|&v| v as f64).sum::<f64>() / len as f64;
                let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / len as f64;
                for i in 0..len {
                    let mut want = (row[i] as f64 - mean) / (var + 1e-5).sqrt();
                    want = if has_w == 1 { want * w[i] as f64 } else { want };
                    want = if has_b == 1 { want + b[i] as f64 } else { want };
                    let got = out[r * len + i] as f64;
                    assert!((got - want).abs() <= 1e-5 * (1.0 + want.abs()), "len {len} row {r} [{i}]: {got} vs {want}");
                }
            }
        }
    }
}
