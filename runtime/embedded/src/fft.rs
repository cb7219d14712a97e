//! The FFT kernel the generated code calls (`aotc_abi::fft`): 1-D transforms along the
//! middle axis of contiguous `[outer, len, inner]` float32 data, computed by rustfft.
//! The compiler splits a multi-dimensional FFT into one call per dimension, as PyTorch's
//! CPU backend does for complex-to-real transforms.

use crate::guards::refuse_extern_call;
use aotc_abi::fft as abi;
use rustfft::num_complex::Complex32;
use rustfft::{FftDirection, FftPlanner};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Forward,
    Inverse,
    RealToComplex,
    ComplexToReal,
}

/// One call's sizes, checked: every index below its element counts fits in usize.
struct Transform {
    kind: Kind,
    /// The signal length (the FFT size).
    n: usize,
    scale: f32,
    outer: usize,
    len_in: usize,
    len_out: usize,
    inner: usize,
    /// Floats read and written (two per complex value).
    in_floats: usize,
    out_floats: usize,
}

impl Transform {
    /// None for a call the compiler never makes (its shape rules and guards rule it out).
    fn new(kind: i64, norm: i64, outer: i64, len_in: i64, len_out: i64, inner: i64) -> Option<Transform> {
        let kind = match kind {
            abi::FORWARD => Kind::Forward,
            abi::INVERSE => Kind::Inverse,
            abi::REAL_TO_COMPLEX => Kind::RealToComplex,
            abi::COMPLEX_TO_REAL => Kind::ComplexToReal,
            _ => return None,
        };
        let size = |v: i64| usize::try_from(v).ok();
        let (outer, len_in, len_out, inner) = (size(outer)?, size(len_in)?, size(len_out)?, size(inner)?);
        let n = match kind {
            Kind::Forward | Kind::Inverse if len_in == len_out => len_in,
            Kind::RealToComplex if len_out == len_in || len_out == len_in / 2 + 1 => len_in,
            Kind::ComplexToReal if len_out == 0 || len_in > len_out / 2 => len_out,
            _ => return None,
        };
        let scale = match norm {
            abi::NORM_NONE => 1.0,
            abi::NORM_BY_ROOT_N => 1.0 / (n as f64).sqrt(),
            abi::NORM_BY_N => 1.0 / n as f64,
            _ => return None,
        } as f32;
        let floats =
            |len: usize, complex: bool| outer.checked_mul(len)?.checked_mul(inner)?.checked_mul(1 + complex as usize);
        let in_floats = floats(len_in, kind != Kind::RealToComplex)?;
        let out_floats = floats(len_out, kind != Kind::ComplexToReal)?;
        Some(Transform { kind, n, scale, outer, len_in, len_out, inner, in_floats, out_floats })
    }

    fn run(&self, input: &[f32], output: &mut [f32]) {
        if self.n == 0 {
            // The transform of an empty signal: empty sums.
            output.fill(0.0);
            return;
        }
        let direction = match self.kind {
            Kind::Forward | Kind::RealToComplex => FftDirection::Forward,
            Kind::Inverse | Kind::ComplexToReal => FftDirection::Inverse,
        };
        let fft = FftPlanner::<f32>::new().plan_fft(self.n, direction);
        let mut line = vec![Complex32::default(); self.n];
        let mut scratch = vec![Complex32::default(); fft.get_inplace_scratch_len()];
        for o in 0..self.outer {
            for i in 0..self.inner {
                self.gather(input, o, i, &mut line);
                fft.process_with_scratch(&mut line, &mut scratch);
                self.scatter(&line, o, i, output);
            }
        }
    }

    /// Line (o, i) of the input as the n complex values to transform.
    fn gather(&self, input: &[f32], o: usize, i: usize, line: &mut [Complex32]) {
        let at = |k: usize| (o * self.len_in + k) * self.inner + i;
        let complex = |k: usize| Complex32::new(input[2 * at(k)], input[2 * at(k) + 1]);
        match self.kind {
            Kind::Forward | Kind::Inverse => line.iter_mut().enumerate().for_each(|(k, x)| *x = complex(k)),
            Kind::RealToComplex => {
                line.iter_mut().enumerate().for_each(|(k, x)| *x = Complex32::new(input[at(k)], 0.0))
            }
            Kind::ComplexToReal => {
                // The full spectrum of the Hermitian signal: x[n - k] = conj(x[k]). The
                // result's real part ignores the imaginary parts of x[0] and x[n / 2]
                // (n even), as a C2R transform does.
                let half = self.n / 2 + 1;
                for k in 0..self.n {
                    line[k] = if k < half { complex(k) } else { line[self.n - k].conj() };
                }
            }
        }
    }

    /// Writes the transformed line (o, i), scaled.
    fn scatter(&self, line: &[Complex32], o: usize, i: usize, output: &mut [f32]) {
        let at = |k: usize| (o * self.len_out + k) * self.inner + i;
        for (k, x) in line.iter().take(self.len_out).enumerate() {
            if self.kind == Kind::ComplexToReal {
                output[at(k)] = x.re * self.scale;
            } else {
                output[2 * at(k)] = x.re * self.scale;
                output[2 * at(k) + 1] = x.im * self.scale;
            }
        }
    }
}

/// The FFT entry of the generated code (see `aotc_abi::fft` for the arguments). A call
/// with sizes the compiler never passes leaves `output` untouched instead of touching
/// memory it may not own; nothing here panics for sizes that pass those checks.
///
/// # Safety
/// `input + input_offset` and `output` must hold the floats the sizes describe
/// (`outer * len * inner`, twice that for complex values) and not overlap; either may
/// dangle when its count is 0.
#[no_mangle]
pub unsafe extern "C" fn __aotc_fft(
    output: *mut f32,
    input: *const f32,
    input_offset: i64,
    kind: i64,
    norm: i64,
    outer: i64,
    len_in: i64,
    len_out: i64,
    inner: i64,
) {
    let refuse = || refuse_extern_call("__aotc_fft");
    let Ok(input_offset) = usize::try_from(input_offset) else { return refuse() };
    // SAFETY: the caller's contract: the operand starts `input_offset` floats into `input`.
    let input = unsafe { input.add(input_offset) };
    let Some(t) = Transform::new(kind, norm, outer, len_in, len_out, inner) else { return refuse() };
    if t.out_floats == 0 {
        return;
    }
    let input: &[f32] = if t.in_floats == 0 {
        &[]
    } else {
        // SAFETY: the caller's contract: `input` holds `in_floats` floats.
        unsafe { std::slice::from_raw_parts(input, t.in_floats) }
    };
    // SAFETY: the caller's contract: `output` holds `out_floats` floats, apart from `input`.
    let output = unsafe { std::slice::from_raw_parts_mut(output, t.out_floats) };
    t.run(input, output);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::f64::consts::PI;

    /// The naive DFT of `x` (sign -1 forward, +1 inverse), in f64.
    fn dft(x: &[(f64, f64)], sign: f64) -> Vec<(f64, f64)> {
        let n = x.len();
        (0..n)
            .map(|k| {
                x.iter().enumerate().fold((0.0, 0.0), |(re, im), (j, &(a, b))| {
                    let t = sign * 2.0 * PI * (j * k % n) as f64 / n as f64;
                    (re + a * t.cos() - b * t.sin(), im + a * t.sin() + b * t.cos())
                })
            })
            .collect()
    }

    fn values(count: usize, seed: u32) -> Vec<f32> {
        (0..count).map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 250.0 - 2.0).collect()
    }

    fn call(
        kind: i64,
        norm: i64,
        input: &[f32],
        (outer, len_in, len_out, inner): (usize, usize, usize, usize),
    ) -> Vec<f32> {
        let complex_out = kind != abi::COMPLEX_TO_REAL;
        let mut out = vec![f32::NAN; outer * len_out * inner * (1 + complex_out as usize)];
        // SAFETY: the buffers hold the counts the sizes describe.
        unsafe {
            __aotc_fft(
                out.as_mut_ptr(),
                input.as_ptr(),
                0,
                kind,
                norm,
                outer as i64,
                len_in as i64,
                len_out as i64,
                inner as i64,
            )
        };
        out
    }

    fn close(got: f32, want: f64, what: &str) {
        assert!((got as f64 - want).abs() <= 1e-4 * (1.0 + want.abs()), "{what}: {got} vs {want}");
    }

    fn scale(norm: i64, n: usize) -> f64 {
        [1.0, 1.0 / (n as f64).sqrt(), 1.0 / n as f64][norm as usize]
    }

    #[test]
    fn complex_transforms_match_the_dft() {
        for n in [1, 2, 3, 5, 8, 12] {
            for (kind, sign) in [(abi::FORWARD, -1.0), (abi::INVERSE, 1.0)] {
                for norm in [abi::NORM_NONE, abi::NORM_BY_ROOT_N, abi::NORM_BY_N] {
                    let (outer, inner) = (2, 3);
                    let input = values(outer * n * inner * 2, n as u32);
                    let out = call(kind, norm, &input, (outer, n, n, inner));
                    for o in 0..outer {
                        for i in 0..inner {
                            let at = |k: usize| 2 * ((o * n + k) * inner + i);
                            let line: Vec<_> = (0..n).map(|k| (input[at(k)] as f64, input[at(k) + 1] as f64)).collect();
                            for (k, (re, im)) in dft(&line, sign).into_iter().enumerate() {
                                let what = format!("kind {kind} norm {norm} n {n} line ({o}, {i}) k {k}");
                                close(out[at(k)], re * scale(norm, n), &what);
                                close(out[at(k) + 1], im * scale(norm, n), &what);
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn real_to_complex_keeps_the_half_or_full_spectrum() {
        for n in [1, 4, 7, 10] {
            for half in [true, false] {
                let (outer, inner) = (3, 2);
                let len_out = if half { n / 2 + 1 } else { n };
                let input = values(outer * n * inner, 7);
                let out = call(abi::REAL_TO_COMPLEX, abi::NORM_BY_N, &input, (outer, n, len_out, inner));
                for o in 0..outer {
                    for i in 0..inner {
                        let line: Vec<_> = (0..n).map(|k| (input[(o * n + k) * inner + i] as f64, 0.0)).collect();
                        for (k, (re, im)) in dft(&line, -1.0).into_iter().take(len_out).enumerate() {
                            let at = 2 * ((o * len_out + k) * inner + i);
                            close(out[at], re / n as f64, &format!("n {n} k {k}"));
                            close(out[at + 1], im / n as f64, &format!("n {n} k {k}"));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn complex_to_real_reads_a_hermitian_half_spectrum() {
        for n in [1, 2, 5, 8, 9] {
            // One more input than needed: entries past n / 2 + 1 are ignored.
            let len_in = n / 2 + 2;
            let input = values(len_in * 2, 3);
            let out = call(abi::COMPLEX_TO_REAL, abi::NORM_BY_ROOT_N, &input, (1, len_in, n, 1));
            // The signal's full spectrum; the imaginary parts of x[0] and x[n / 2] (n even)
            // cannot be part of a real signal's and are dropped.
            let full: Vec<(f64, f64)> = (0..n)
                .map(|k| {
                    let (j, sign) = if k <= n / 2 { (k, 1.0) } else { (n - k, -1.0) };
                    let im = if j == 0 || 2 * j == n { 0.0 } else { input[2 * j + 1] as f64 };
                    (input[2 * j] as f64, sign * im)
                })
                .collect();
            for (k, (re, im)) in dft(&full, 1.0).into_iter().enumerate() {
                assert!(im.abs() < 1e-9, "a Hermitian spectrum has a real inverse");
                close(out[k], re / (n as f64).sqrt(), &format!("n {n} k {k}"));
            }
        }
    }

    #[test]
    fn empty_and_impossible_calls_touch_nothing() {
        // SAFETY: every count is 0, so neither pointer is read or written.
        unsafe {
            __aotc_fft(std::ptr::null_mut(), std::ptr::null(), 0, abi::FORWARD, abi::NORM_NONE, 0, 5, 5, 3);
            __aotc_fft(std::ptr::null_mut(), std::ptr::null(), 0, abi::COMPLEX_TO_REAL, abi::NORM_NONE, 4, 3, 0, 2);
        }
        let input = [1.0f32; 8];
        // An input shorter than the half spectrum, an unknown kind and norm, negative and
        // overflowing sizes: the output keeps its NaNs.
        for (kind, norm, sizes) in [
            (abi::COMPLEX_TO_REAL, abi::NORM_NONE, (1, 2, 4, 1)),
            (9, abi::NORM_NONE, (1, 4, 4, 1)),
            (abi::FORWARD, 7, (1, 4, 4, 1)),
            (abi::FORWARD, abi::NORM_NONE, (1, -4, -4, 1)),
            (abi::FORWARD, abi::NORM_NONE, (i64::MAX, 4, 4, 4)),
        ] {
            let mut out = [f32::NAN; 8];
            // SAFETY: the call is refused before any pointer is used.
            unsafe { __aotc_fft(out.as_mut_ptr(), input.as_ptr(), 0, kind, norm, sizes.0, sizes.1, sizes.2, sizes.3) };
            assert!(out.iter().all(|v| v.is_nan()), "kind {kind} norm {norm} {sizes:?}");
        }
        // A real-to-complex transform of an empty signal is empty sums.
        assert_eq!(call(abi::REAL_TO_COMPLEX, abi::NORM_NONE, &[], (2, 0, 1, 1)), [0.0; 4]);
    }
}
