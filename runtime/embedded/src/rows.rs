//! Softmax and layer norm along contiguous rows, one kernel each (the generated code's
//! `Extern` calls; the compiler lowers float32 ones here when their rows are the trailing,
//! contiguous dimension): a row is read once for its statistics and once for its output,
//! where the loop IR needs a reduction kernel per statistic and a pointwise one after.
//! Rows run on the call's threads.

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
    for_items(out, rows, len, total * 8, &|begin, end, part| {
        for (r, row) in (begin..end).zip(part.chunks_exact_mut(len)) {
            softmax_row(&x[r * len..][..len], row, log != 0);
        }
    });
}

fn softmax_row(x: &[f32], out: &mut [f32], log: bool) {
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
    for_items(out, rows, len, total * 4, &|begin, end, part| {
        for (r, row) in (begin..end).zip(part.chunks_exact_mut(len)) {
            let x = &x[r * len..][..len];
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
        let (rows, len) = (300, 37);
        let mut x = values(rows * len);
        x[len + 3] = f32::NAN;
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
                        } else {
                            assert!((got - want).abs() <= 1e-6 * (1.0 + want.abs()), "log={log} row {r} [{i}]: {got} vs {want}");
                        }
                    }
                }
            }
        }
        drop(user);
    }

    #[test]
    fn layer_norm_rows_match_float64() {
        let user = PoolUser::acquire(2);
        let (rows, len) = (100, 48);
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
                    assert!((got - want).abs() <= 1e-5 * (1.0 + want.abs()), "row {r} [{i}]: {got} vs {want}");
                }
            }
        }
        drop(user);
    }
}
