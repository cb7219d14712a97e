//! Softmax and layer norm along contiguous rows, one kernel each (the generated code's
//! `Extern` calls; the compiler lowers float32 ones here when their rows are the trailing,
//! contiguous dimension): a row is read once for its statistics and once for its output,
//! where the loop IR needs a reduction kernel per statistic and a pointwise one after.
//! Rows run on the call's threads, a vector at a time (`crate::simd`: 16 lanes with
//! AVX-512, 8 with AVX2 + FMA; exp as GELU's; short softmax rows 8 rows at a time, one per
//! lane, with AVX2), sums in float64 either way.

use crate::guards::refuse_extern_call;
use crate::isa::Isa;
use crate::pool::for_items;
use aotc_abi::softmax;

/// `rows`, `len` and their product as sizes, or None when one is negative or the product
/// overflows: arguments that describe no tensor.
fn row_counts(rows: i64, len: i64) -> Option<(usize, usize, usize)> {
    let (rows, len) = (usize::try_from(rows).ok()?, usize::try_from(len).ok()?);
    Some((rows, len, rows.checked_mul(len)?))
}

/// `out[r] = softmax(x[r])` for `rows` rows of `len`: `exp(x - max) / sum`, a row holding
/// NaN gives NaN throughout, as in torch. `mode` is one of `aotc_abi::softmax`'s: the
/// log-softmax instead, or the safe softmax, whose rows of nothing but -inf give zeros.
///
/// # Safety
/// `x` and `out` hold `rows * len` floats each and do not overlap.
#[no_mangle]
pub unsafe extern "C" fn __aotc_softmax_f32(out: *mut f32, x: *const f32, rows: i64, len: i64, mode: i64) {
    let Some((rows, len, total)) = row_counts(rows, len) else { return refuse_extern_call("__aotc_softmax_f32") };
    if ![softmax::SOFTMAX, softmax::LOG_SOFTMAX, softmax::SAFE_SOFTMAX].contains(&mode) {
        return refuse_extern_call("__aotc_softmax_f32");
    }
    if total == 0 {
        return;
    }
    // SAFETY: the caller's contract.
    let (x, out) = unsafe { (std::slice::from_raw_parts(x, total), std::slice::from_raw_parts_mut(out, total)) };
    let log = mode == softmax::LOG_SOFTMAX;
    // Short rows (attention over a few positions) go 8 rows at a time, one per lane: one
    // row at a time their vectors are partly padding and their max and sum end in
    // horizontal reductions; scalar code is slower still (on 64 rows of 8 or 16, the
    // 8-row code measured 4.5 to 5.5 times faster).
    let isa = Isa::best();
    for_items(out, rows, len, total * 8, &|begin, end, part| {
        let x = &x[begin * len..end * len];
        #[cfg(target_arch = "x86_64")]
        if len <= SHORT_ROW && isa >= Isa::Avx2 {
            // SAFETY: the CPU has AVX2 and FMA.
            unsafe { avx2::softmax_short_rows(x, part, len, log) };
        } else {
            softmax_each_row(x, part, len, log, isa);
        }
        #[cfg(not(target_arch = "x86_64"))]
        softmax_each_row(x, part, len, log, isa);
        if mode == softmax::SAFE_SOFTMAX {
            // A row that is not all -inf almost always says so at its first value.
            for (x, out) in x.chunks_exact(len).zip(part.chunks_exact_mut(len)) {
                if x.iter().all(|&v| v == f32::NEG_INFINITY) {
                    out.fill(0.0);
                }
            }
        }
    });
}

/// [`softmax_row`] on each row of `len` of `x`, into `out`.
fn softmax_each_row(x: &[f32], out: &mut [f32], len: usize, log: bool, isa: Isa) {
    for (x, out) in x.chunks_exact(len).zip(out.chunks_exact_mut(len)) {
        softmax_row(x, out, log, isa);
    }
}

/// The longest row that softmax takes 8 rows at a time (one per lane) rather than one row
/// 8 lanes at a time (the bound of its stack buffers).
const SHORT_ROW: usize = 31;

/// One row, a vector at a time on `isa` (scalar without one).
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
fn softmax_row(x: &[f32], out: &mut [f32], log: bool, isa: Isa) {
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Portable {
        // SAFETY: the CPU runs `isa`; x and out are one row each.
        return unsafe { lanes::softmax_row(isa, x, out, log) };
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
            // NaN stays (it is not below).
            *o = if v - max < crate::gelu::FLUSH_BELOW { 0.0 } else { (v - max).exp() };
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
    out: *mut f32,
    x: *const f32,
    weight: *const f32,
    bias: *const f32,
    rows: i64,
    len: i64,
    has_weight: i64,
    has_bias: i64,
    eps: i64,
) {
    let Some((rows, len, total)) = row_counts(rows, len) else {
        return refuse_extern_call("__aotc_layer_norm_f32");
    };
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
    let isa = Isa::best();
    for_items(out, rows, len, total * 4, &|begin, end, part| {
        for (r, row) in (begin..end).zip(part.chunks_exact_mut(len)) {
            layer_norm_row(&x[r * len..][..len], row, weight, bias, eps, isa);
        }
    });
}

/// One row of [`__aotc_layer_norm_f32`], a vector at a time on `isa` (scalar without one).
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
fn layer_norm_row(x: &[f32], row: &mut [f32], weight: Option<&[f32]>, bias: Option<&[f32]>, eps: f64, isa: Isa) {
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Portable {
        // SAFETY: the CPU runs `isa`; a row each, weight and bias as long.
        return unsafe { lanes::layer_norm_row(isa, x, row, weight, bias, eps) };
    }
    let len = x.len();
    let mean = x.iter().map(|&v| v as f64).sum::<f64>() / len as f64;
    let var = x.iter().map(|&v| (v as f64 - mean) * (v as f64 - mean)).sum::<f64>() / len as f64;
    let (mean, rstd) = (mean as f32, (1.0 / (var + eps).sqrt()) as f32);
    for (i, (o, &v)) in row.iter_mut().zip(x).enumerate() {
        let y = (v - mean) * rstd;
        let y = weight.map_or(y, |w| y * w[i]);
        *o = bias.map_or(y, |b| y + b[i]);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod lanes;

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
        // Vectors with a partial one, and short rows 8 rows at a time (or one element at a
        // time without AVX2).
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
                with_threads(threads, || unsafe {
                    __aotc_softmax_f32(out.as_mut_ptr(), x.as_ptr(), rows as i64, len as i64, log)
                });
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
                            assert!(
                                (got - want).abs() <= 1e-6 * (1.0 + want.abs()),
                                "len {len} log={log} row {r} [{i}]: {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// The safe softmax: a row of nothing but -inf gives zeros (plain softmax: NaN, as
    /// torch); every other row, one with -inf and a NaN among them, what softmax gives;
    /// long and short rows, 1 and 2 threads.
    #[test]
    fn safe_softmax_zeroes_only_rows_of_nothing_but_minus_infinity() {
        let user = PoolUser::acquire(2);
        for (rows, len) in [(300, 37), (300, 7), (9, 1)] {
            let mut x = values(rows * len);
            let masked = [0, 5, rows - 1];
            for &r in &masked {
                x[r * len..][..len].fill(f32::NEG_INFINITY);
            }
            // All -inf but one NaN; all -inf but the last value.
            x[2 * len..][..len].fill(f32::NEG_INFINITY);
            x[2 * len] = f32::NAN;
            x[3 * len..][..len - 1].fill(f32::NEG_INFINITY);
            for threads in [1, 2] {
                let call = |mode| {
                    let mut out = vec![7f32; rows * len];
                    // SAFETY: both hold rows * len floats.
                    with_threads(threads, || unsafe {
                        __aotc_softmax_f32(out.as_mut_ptr(), x.as_ptr(), rows as i64, len as i64, mode)
                    });
                    out
                };
                let (plain, safe) = (call(softmax::SOFTMAX), call(softmax::SAFE_SOFTMAX));
                for r in 0..rows {
                    let (plain, safe) = (&plain[r * len..][..len], &safe[r * len..][..len]);
                    if masked.contains(&r) {
                        assert!(plain.iter().all(|v| v.is_nan()), "len {len} row {r}: softmax of all -inf is NaN");
                        assert!(safe.iter().all(|&v| v == 0.0), "len {len} row {r}: safe softmax of all -inf is 0");
                    } else {
                        let bits = |row: &[f32]| row.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(safe), bits(plain), "len {len} row {r}: as softmax");
                    }
                }
                assert!(safe[2 * len..][..len].iter().all(|v| v.is_nan()), "a NaN keeps its row NaN");
            }
        }
        drop(user);
    }

    /// Rows of every short length, row counts around multiples of 8, and in each of the
    /// rows (by index) ordinary values, a NaN, some -inf, all -inf, a +inf, or values far
    /// from 0 (exp underflows below -104); for softmax and log_softmax through the entry
    /// point on 1 and 2 threads (chunks starting inside blocks of 8 rows), against float64
    /// and against the scalar code.
    #[test]
    fn short_softmax_rows_match_float64_and_the_scalar_code() {
        let user = PoolUser::acquire(2);
        for len in 1..=SHORT_ROW {
            for rows in [1, 7, 8, 9, 64, 67] {
                check_short_rows(rows, len, |x, out, log| with_threads(1, || entry(x, out, len, log)));
            }
        }
        // Enough work for 8 chunks of 50 rows (or 41 and 42) on 2 threads.
        for (rows, len) in [(400, 23), (333, 31)] {
            check_short_rows(rows, len, |x, out, log| with_threads(2, || entry(x, out, len, log)));
        }
        drop(user);
    }

    /// The 8-rows-at-a-time code itself (where the CPU has it), on ranges of rows as
    /// `for_items` hands them, with the rows at the end of readable memory followed by an
    /// unreadable page: a read past them faults, a write past a range shows.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn short_softmax_rows_read_only_their_rows() {
        if !Isa::Avx2.available() {
            return;
        }
        // Room for 67 rows of 31, then the unreadable page.
        const READABLE: usize = 1 << 16;
        // SAFETY: a fresh private mapping, its last page made unreadable, unmapped at the
        // end; nothing else refers to it.
        let (map, size) = unsafe {
            let page = libc::sysconf(libc::_SC_PAGESIZE) as usize;
            let map = libc::mmap(
                std::ptr::null_mut(),
                READABLE + page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(map, libc::MAP_FAILED);
            assert_eq!(libc::mprotect(map.cast::<u8>().add(READABLE).cast(), page, libc::PROT_NONE), 0);
            (map, READABLE + page)
        };
        for len in 1..=SHORT_ROW {
            for rows in [1, 7, 8, 9, 64, 67] {
                let floats = rows * len;
                // SAFETY: the last `floats` floats of the readable memory (at most 2077).
                let x = unsafe {
                    std::slice::from_raw_parts_mut(map.cast::<u8>().add(READABLE - 4 * floats).cast::<f32>(), floats)
                };
                check_short_rows(rows, len, |xs, out, log| {
                    x.copy_from_slice(xs);
                    // Ranges of rows starting inside blocks of 8 (as for_items hands them
                    // out), each written alone: the floats around it stay as they were.
                    for (begin, end) in [(0, rows / 3), (rows / 3, rows / 2), (rows / 2, rows)] {
                        let mut part = vec![7.0f32; rows * len];
                        let range = begin * len..end * len;
                        // SAFETY: the CPU has AVX2 and FMA.
                        unsafe { avx2::softmax_short_rows(&x[range.clone()], &mut part[range.clone()], len, log != 0) };
                        assert!(
                            part[..range.start].iter().chain(&part[range.end..]).all(|&v| v == 7.0),
                            "len {len} rows {begin}..{end}"
                        );
                        out[range.clone()].copy_from_slice(&part[range]);
                    }
                });
            }
        }
        // SAFETY: the mapping made above.
        assert_eq!(unsafe { libc::munmap(map, size) }, 0);
    }

    /// One row at a time on each vector set this CPU runs, partial vectors included,
    /// against float64 and the scalar code (as the short rows above).
    #[test]
    fn softmax_rows_agree_on_every_vector_set() {
        for isa in Isa::every_available() {
            for len in [1, 7, 8, 15, 16, 17, 31, 33, 48, 100] {
                check_short_rows(9, len, |x, out, log| {
                    for (x, out) in x.chunks_exact(len).zip(out.chunks_exact_mut(len)) {
                        softmax_row(x, out, log == 1, isa);
                    }
                });
            }
        }
    }

    fn entry(x: &[f32], out: &mut [f32], len: usize, log: i64) {
        // SAFETY: both hold rows * len floats.
        unsafe { __aotc_softmax_f32(out.as_mut_ptr(), x.as_ptr(), (x.len() / len) as i64, len as i64, log) }
    }

    /// Runs `softmax(x, out, log)` on rows of the kinds above and checks every output.
    fn check_short_rows(rows: usize, len: usize, mut softmax: impl FnMut(&[f32], &mut [f32], i64)) {
        let mut x = values(rows * len);
        for (r, row) in x.chunks_exact_mut(len).enumerate() {
            match (r + rows) % 7 {
                1 => row[r % len] = f32::NAN,
                2 => row.iter_mut().step_by(3).for_each(|v| *v = f32::NEG_INFINITY),
                3 => row.fill(f32::NEG_INFINITY),
                4 => row[(r + 1) % len] = f32::INFINITY,
                5 => row.iter_mut().for_each(|v| *v = *v * 30.0 + 1e4),
                6 => row.iter_mut().for_each(|v| *v = *v * 20.0 - 1e3),
                _ => {}
            }
        }
        for log in [0, 1] {
            let mut out = vec![0f32; rows * len];
            softmax(&x, &mut out, log);
            let mut scalar = vec![0f32; rows * len];
            for (row, s) in x.chunks_exact(len).zip(scalar.chunks_exact_mut(len)) {
                softmax_row(row, s, log == 1, Isa::Portable);
            }
            for r in 0..rows {
                let row = &x[r * len..][..len];
                let max = row.iter().fold(f64::NEG_INFINITY, |m, &v| {
                    if v.is_nan() || m.is_nan() {
                        f64::NAN
                    } else {
                        m.max(v as f64)
                    }
                });
                let sum: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
                for (i, &v) in row.iter().enumerate() {
                    let want = if log == 1 { v as f64 - max - sum.ln() } else { (v as f64 - max).exp() / sum };
                    let (got, scalar) = (out[r * len + i] as f64, scalar[r * len + i] as f64);
                    let at =
                        || format!("len {len} rows {rows} log={log} row {r} [{i}]: {got} vs {want}, scalar {scalar}");
                    if want.is_nan() {
                        // NaN in the row, all -inf, or +inf (inf - inf).
                        assert!(got.is_nan() && scalar.is_nan(), "{}", at());
                    } else if v == f32::NEG_INFINITY {
                        assert!(got == want && scalar == want, "{}", at());
                    } else {
                        // log_softmax adds ln(sum) to the max in float32.
                        let tolerance = 1e-6 * (1.0 + want.abs() + if log == 1 { max.abs() } else { 0.0 });
                        assert!((got - want).abs() <= tolerance && (got - scalar).abs() <= tolerance, "{}", at());
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

    /// One row at a time on each vector set this CPU runs and the scalar code, against
    /// float64 (within 1e-5, as above) and each other (within 1e-6).
    #[test]
    fn layer_norm_rows_agree_on_every_vector_set() {
        for len in [1, 7, 8, 15, 16, 17, 33, 48, 100] {
            let x = values(3 * len).iter().map(|v| v * 7.0 + 300.0).collect::<Vec<_>>();
            let (w, b) = (values(len).iter().map(|v| v * 0.3).collect::<Vec<_>>(), values(len + 5)[5..].to_vec());
            for (weight, bias) in [(None, None), (Some(&w[..]), Some(&b[..]))] {
                let norm = |isa| {
                    let mut out = vec![0f32; x.len()];
                    for (x, out) in x.chunks_exact(len).zip(out.chunks_exact_mut(len)) {
                        layer_norm_row(x, out, weight, bias, 1e-5, isa);
                    }
                    out
                };
                let scalar = norm(Isa::Portable);
                for (r, row) in x.chunks_exact(len).enumerate() {
                    let mean = row.iter().map(|&v| v as f64).sum::<f64>() / len as f64;
                    let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / len as f64;
                    for i in 0..len {
                        let mut want = (row[i] as f64 - mean) / (var + 1e-5).sqrt();
                        want = weight.map_or(want, |w| want * w[i] as f64);
                        want = bias.map_or(want, |b| want + b[i] as f64);
                        let got = scalar[r * len + i] as f64;
                        assert!((got - want).abs() <= 1e-5 * (1.0 + want.abs()), "len {len} [{i}]: {got} vs {want}");
                    }
                }
                for isa in Isa::every_available().filter(|&isa| isa != Isa::Portable) {
                    for (i, (&got, &want)) in norm(isa).iter().zip(&scalar).enumerate() {
                        assert!(
                            (got - want).abs() <= 1e-6 * (1.0 + want.abs()),
                            "{isa:?} len {len} [{i}]: {got} vs {want}"
                        );
                    }
                }
            }
        }
    }

    fn layer_norm_rows(rows: usize, len: usize) {
        let x = values(rows * len);
        let (w, b) = (values(len).iter().map(|v| v * 0.3).collect::<Vec<_>>(), values(len + 5)[5..].to_vec());
        for (has_w, has_b) in [(0, 0), (1, 1), (1, 0)] {
            let mut out = vec![0f32; rows * len];
            // SAFETY: x and out hold rows * len floats, w and b len.
            with_threads(2, || unsafe {
                __aotc_layer_norm_f32(
                    out.as_mut_ptr(),
                    x.as_ptr(),
                    w.as_ptr(),
                    b.as_ptr(),
                    rows as i64,
                    len as i64,
                    has_w,
                    has_b,
                    1e-5f64.to_bits() as i64,
                )
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
                    assert!(
                        (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                        "len {len} row {r} [{i}]: {got} vs {want}"
                    );
                }
            }
        }
    }
}
