//! GELU (erf form) of contiguous float32 values, `0.5 x (1 + erf(x / sqrt 2))`, a vector
//! at a time (16 lanes with AVX-512, 8 with AVX2 + FMA, `crate::simd`): for the outputs of GEMMs and convolutions (already in memory,
//! so nothing is lost by leaving the generated code's pointwise kernels, which are 4 lanes
//! wide and without FMA). The GELU is `x Phi(x)` with the normal distribution's tail
//! fitted here (one exponential, one division, no erf: see [`lanes::gelu`]), within 7.6e-8
//! (1 + |gelu|) of float64; the exp of the softmax rows and SiLU is the algorithm and
//! coefficients of the compiler's `codegen/cpu/vmath.rs`. Both are evaluated with fused
//! multiply-adds; values past the last whole vector go through the same vector code.
// exp's coefficients are vmath.rs's, digit for digit: clippy would round them to what float parsing gives anyway.
#![allow(clippy::excessive_precision)]

use crate::guards::refuse_extern_call;
use crate::isa::Isa;
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
    gelu_with(Isa::best(), x, out)
}

/// [`gelu`] on the set `isa` (the tests pick each): vectors, or scalar code.
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
fn gelu_with(isa: Isa, x: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Portable {
        // SAFETY: the CPU runs `isa`; x and out have the same length (the callers').
        return unsafe { lanes::gelu_slice(isa, x, out) };
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

/// Below this (ln of the smallest normal float32, rounded up) the vector exp returns 0
/// rather than the subnormal e^x: an error under 1.2e-38, where a subnormal result costs a
/// microcode assist per lane on x86 (SiLU over GEMM outputs above 87 measured 5 times slower) and
/// makes every later product with it as slow (softmax weights of masked attention, -100
/// scores in Swin's shifted windows, feed a GEMM). Every use loses nothing: SiLU's `1 + e`
/// and a softmax sum round the same either way.
pub(crate) const FLUSH_BELOW: f32 = -87.336_54;

/// GELU and exp on vectors of either width ([`F32s`](crate::simd::F32s)): the same
/// operations lane for lane, so AVX2 and AVX-512 give the same values.
#[cfg(target_arch = "x86_64")]
pub(crate) mod lanes {
    use crate::simd::{for_each_isa, F32s};

    /// [`gelu`]'s `u = 1 / (1 + P_SCALE |x|)` and P(u) (highest degree first), for the
    /// normal distribution's upper tail `Q = 0.5 erfc(|x| / sqrt 2) = 2^w u P(u)`, `w =
    /// -x^2 log2(e) / 2`. P is the minimax (Remez exchange on a grid, in float64) of the
    /// error this makes in gelu on its negative side (the larger one), `|x| dQ / (1 + |x|
    /// Q)`, over |x| in [0, 14] (the tail below 1e-44 past it), P_SCALE the best of a
    /// search over [0.38, 0.42]: at most 5.6e-9, 6.0e-9 with the coefficients rounded to
    /// float32 one at a time (the others refitted each time). Five coefficients (at most
    /// 3.7e-8) made the float32 GELU's error about 1.05e-7 (1 + |gelu|), above the 8.3e-8 of
    /// `0.5 x (1 + erf)` (with libm's erff or the vector erf this replaced); six, 7.6e-8.
    const P_SCALE: f32 = 0.3998;
    const TAIL_P: [f32; 6] = [0.057361446, -0.25849563, 0.3457521, 0.008832009, 0.1901307, 0.15641978];
    /// 2^f for f in [-1/2, 1/2] (highest degree first): the relative minimax (Remez, in
    /// float64) of degree 5, rounded to float32 as [`TAIL_P`]: relative error 1.3e-7,
    /// which gelu's error weighs by at most 0.15 (`|x| Q / (1 + |x| Q)`).
    const EXP2_P: [f32; 6] = [0.0013643823, 0.009684761, 0.05549736, 0.24021919, 0.6931474, 1.0000001];
    const EXPM1_P: [f32; 6] =
        [1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1];
    const LN2_HI: f32 = 0.693359375;
    const LN2_LO: f32 = -2.12194440e-4;

    for_each_isa! {
        /// `out[i] = gelu(x[i])`, the values past the last whole vector through a partial one.
        pub(super) fn gelu_slice(x: &[f32], out: &mut [f32]) => gelu_slice_generic
    }

    #[inline(always)]
    unsafe fn gelu_slice_generic<V: F32s>(x: &[f32], out: &mut [f32]) {
        assert_eq!(x.len(), out.len());
        let mut i = 0;
        // SAFETY (all): the CPU runs V's set (the caller's); each access is of the
        // floats below x.len() from i.
        unsafe {
            while i + V::LANES <= x.len() {
                gelu(V::load(x.as_ptr().add(i))).store(out.as_mut_ptr().add(i));
                i += V::LANES;
            }
            if i < x.len() {
                let n = x.len() - i;
                gelu(V::load_first(x.as_ptr().add(i), n, 0.0)).store_first(out.as_mut_ptr().add(i), n);
            }
        }
    }

    /// The polynomial of coefficients `c` (highest degree first) at `x` by Horner's rule:
    /// one multiply-add per coefficient, no x^2 as in [`poly`]. The cheaper where other
    /// work overlaps its longer chain: [`gelu`]'s two polynomials, independent of each
    /// other and of its division, took 5% longer through `poly` (Zen 3).
    #[inline(always)]
    unsafe fn horner<V: F32s>(x: V, c: &[f32]) -> V {
        // SAFETY: the caller's.
        unsafe {
            let mut acc = V::splat(c[0]);
            for &v in &c[1..] {
                acc = acc.mul_add(x, V::splat(v));
            }
            acc
        }
    }

    /// The polynomial of coefficients `c` (highest degree first) at `x`, by second-order
    /// Horner: pairs `c_i x + c_i+1` (independent of each other) folded in powers of x^2,
    /// about N/2 multiply-adds deep rather than Horner's N - 1. The chain's length bounds
    /// how many vectors the CPU overlaps (Estrin's scheme, as deep for exp's 6
    /// coefficients, measured exp 15-20% faster than Horner on Zen 3). Plain loops over the
    /// slice: Estrin's over an array of vectors, which every kernel inlines, made LLVM take
    /// about three times as long to build the crate.
    #[inline(always)]
    unsafe fn poly<V: F32s>(x: V, c: &[f32]) -> V {
        // SAFETY: the caller's.
        unsafe {
            let x2 = x.mul(x);
            let (mut acc, pairs) = if c.len() % 2 == 1 {
                (V::splat(c[0]), &c[1..])
            } else {
                (V::splat(c[0]).mul_add(x, V::splat(c[1])), &c[2..])
            };
            for pair in pairs.chunks_exact(2) {
                acc = acc.mul_add(x2, V::splat(pair[0]).mul_add(x, V::splat(pair[1])));
            }
            acc
        }
    }

    /// `0.5 x (1 + erf(x / sqrt 2)) = x Phi(x)`, Phi the normal distribution: Phi(x) = Q
    /// for x < 0 and 1 - Q from 0 on, Q = Phi(-|x|) the upper tail, [`TAIL_P`]'s `2^w u
    /// P(u)`. One division, one exponential and two short polynomials: erf, which
    /// computed both of its branches (`x P(x^2)` below 1, `1 - e^(-x^2) R(1/|x|)` above)
    /// for every lane, took twice as long. Q itself, not `1 + erf` rounded near 0, makes
    /// gelu where x < 0, so the small values there keep their digits. Within 7.6e-8 (1 +
    /// |gelu|) of float64 (`gelu_error_over_every_float_of_the_range` checks). At x = +inf, u =
    /// 0 makes Q 0 and gelu +inf; at -inf, gelu is -inf * 0 = NaN, as `0.5 x (1 + erf)`
    /// gives it in PyTorch; NaN stays NaN.
    ///
    /// # Safety
    /// The CPU runs V's set (the caller is compiled for it).
    #[inline(always)]
    pub(crate) unsafe fn gelu<V: F32s>(x: V) -> V {
        // SAFETY: the caller's.
        unsafe {
            let one = V::splat(1.0);
            let u = one.div(x.abs().mul_add(V::splat(P_SCALE), one));
            // w = -x^2 log2(e) / 2 (NaN kept), at least -64: n = round(w) in the range of
            // `pow2_of_rounded` and Q normal (a subnormal costs a microcode assist) at every
            // |x| up to 1e17. Past 9.4, where w reaches -64, gelu is x or, for x < 0, below
            // 3e-20 either way.
            let w = V::splat(-64.0).max(x.mul(V::splat(-0.5 * std::f32::consts::LOG2_E)).mul(x));
            // n = round(w) in the low mantissa bits of w + 1.5 * 2^23 (as in `reduced`);
            // f = w - n is exact.
            let magic = V::splat(12_582_912.0);
            let rounded = w.add(magic);
            let f = w.sub(rounded.sub(magic));
            let tail = horner(f, &EXP2_P).mul(rounded.pow2_of_rounded()).mul(u.mul(horner(u, &TAIL_P)));
            x.mul(V::select(x.lt(V::zero()), tail, one.sub(tail)))
        }
    }

    /// e^x: 0 below [`super::FLUSH_BELOW`], x clamped to 89 above (NaN kept); `2^n (1 +
    /// expm1(r))`, 2^n as two factors (2^128 overflows one).
    ///
    /// # Safety
    /// The CPU runs V's set (the caller is compiled for it).
    #[inline(always)]
    pub(crate) unsafe fn exp<V: F32s>(x: V) -> V {
        // SAFETY: the caller's.
        unsafe {
            let (_, n, em1) = reduced(x);
            let e = em1.add(V::splat(1.0)).scale_pow2(n);
            V::select(x.not_lt(V::splat(super::FLUSH_BELOW)), e, V::zero())
        }
    }

    /// e^x for x clamped to [[`super::FLUSH_BELOW`], 89] (NaN kept): [`exp`]'s value up to
    /// 88.37, infinity from there on (n = 128: 2^n is infinity), 2^n one factor built
    /// from the rounding sum's bits, and no select. For the logistic function's 1 + e^-x,
    /// which is 1 below the range, infinite past its top (a logistic of 0, as PyTorch's,
    /// so that SiLU(-inf) is NaN as there), and a logistic below 3e-39 in between: on
    /// AVX2 about a third fewer instructions than [`exp`], whose chain of dependent
    /// instructions bounds how many vectors the CPU overlaps.
    ///
    /// # Safety
    /// The CPU runs V's set (the caller is compiled for it).
    #[inline(always)]
    pub(crate) unsafe fn exp_for_logistic<V: F32s>(x: V) -> V {
        // SAFETY: the caller's.
        unsafe {
            let (rounded, _, em1) = reduced(x);
            em1.add(V::splat(1.0)).mul(rounded.pow2_of_rounded())
        }
    }

    /// e^x = 2^n (1 + expm1(r)) for x clamped to [FLUSH_BELOW, 89] (NaN kept): (x log2 e +
    /// 1.5 * 2^23, whose low mantissa bits hold n; n; expm1(r)).
    ///
    /// # Safety
    /// The CPU runs V's set (the caller is compiled for it).
    #[inline(always)]
    unsafe fn reduced<V: F32s>(x: V) -> (V, V, V) {
        // SAFETY: the caller's.
        unsafe {
            // max/min return their second operand when either is NaN: x.
            let clamped = V::splat(89.0).min(V::splat(super::FLUSH_BELOW).max(x));
            // n = round(x log2 e): adding 1.5 * 2^23 leaves the integer part, rounded to
            // nearest even, in the mantissa (one FMA off the dependency chain where round
            // took its own latency; the chain's length bounds how many vectors the CPU
            // overlaps).
            let magic = V::splat(12_582_912.0);
            let rounded = clamped.mul_add(V::splat(std::f32::consts::LOG2_E), magic);
            let n = rounded.sub(magic);
            let r = n.neg_mul_add(V::splat(LN2_HI), clamped);
            let r = n.neg_mul_add(V::splat(LN2_LO), r);
            (rounded, n, poly(r, &EXPM1_P).mul_add(r.mul(r), r))
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
        check(&x, &out);
        // Each set this CPU runs (the portable one is scalar code), tails of every length included.
        for isa in Isa::every_available() {
            for end in [x.len(), x.len() - 1, x.len() - 5, x.len() - 9, x.len() - 13] {
                let mut out = vec![0f32; end];
                gelu_with(isa, &x[..end], &mut out);
                check(&x[..end], &out);
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    crate::simd::for_each_isa! {
        /// The vector exp of each value, a vector at a time.
        fn exp_each(x: &[f32]) -> Vec<f32> => exp_each_generic
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn exp_each_generic<V: crate::simd::F32s>(x: &[f32]) -> Vec<f32> {
        let mut out = vec![0f32; x.len()];
        // SAFETY (all): the CPU runs V's set (the caller's); each access is of the floats
        // below x.len().
        unsafe {
            for (x, out) in x.chunks(V::LANES).zip(out.chunks_mut(V::LANES)) {
                if x.len() == V::LANES {
                    lanes::exp(V::load(x.as_ptr())).store(out.as_mut_ptr());
                } else {
                    lanes::exp(V::load_first(x.as_ptr(), x.len(), 0.0)).store_first(out.as_mut_ptr(), x.len());
                }
            }
        }
        out
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn vector_exp_is_exact_to_an_ulp_or_two_and_zero_where_libm_gives_a_subnormal() {
        let mut x: Vec<f32> = (0..4001).map(|i| (i as f32 - 2000.0) * 0.0443).collect();
        x.extend([FLUSH_BELOW, -87.3, -87.4, -100.0, -104.0, 88.7, 89.0, 100.0]);
        x.extend([f32::NEG_INFINITY, f32::INFINITY, f32::NAN, 0.0, -0.0]);
        for isa in Isa::every_available().filter(|&isa| isa != Isa::Portable) {
            // SAFETY: the CPU runs `isa`.
            let got = unsafe { exp_each(isa, &x) };
            for (&v, &e) in x.iter().zip(&got) {
                let want = (v as f64).exp();
                if v.is_nan() {
                    assert!(e.is_nan(), "{isa:?} exp(NaN) = {e}");
                } else if v < FLUSH_BELOW {
                    assert_eq!(e, 0.0, "{isa:?} exp({v}): 0, not the subnormal {want}");
                } else if want > f32::MAX as f64 {
                    assert_eq!(e, f32::INFINITY, "{isa:?} exp({v})");
                } else {
                    assert!(e.is_normal() || e == 0.0 && want == 0.0, "{isa:?} exp({v}) = {e}");
                    assert!((e as f64 - want).abs() <= 2.5e-7 * want, "{isa:?} exp({v}) = {e}, expected {want}");
                }
            }
        }
    }

    /// The largest `|got - want| / (1 + |want|)` of [`check`]'s, on each set, over every
    /// float32 of |x| in [2^-30, 16) (below, gelu is x / 2 to the last bit; above, x or
    /// within 3e-20 of 0) and 10 million random ones. Slow, about 20 s in release: `cargo test -p
    /// aotc-embedded --lib --release gelu -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn gelu_error_over_every_float_of_the_range() {
        let isas: Vec<Isa> = Isa::every_available().collect();
        // Per set: the largest error, and where.
        let mut worst = vec![(0f64, 0f32); isas.len()];
        let mut sweep = |x: &[f32]| {
            for (&isa, worst) in isas.iter().zip(&mut worst) {
                let mut out = vec![0f32; x.len()];
                gelu_with(isa, x, &mut out);
                for (&v, &got) in x.iter().zip(&out) {
                    // SAFETY: erf is a pure libm function.
                    let want = v as f64 * 0.5 * (1.0 + unsafe { erf(v as f64 * std::f64::consts::FRAC_1_SQRT_2) });
                    let e = (got as f64 - want).abs() / (1.0 + want.abs());
                    if e > worst.0 || e.is_nan() {
                        *worst = (e, v);
                    }
                }
            }
        };
        let (low, high) = ((2f32).powi(-30).to_bits(), 16f32.to_bits());
        for start in (low..high).step_by(1 << 20) {
            let x: Vec<f32> =
                (start..high.min(start + (1 << 20))).flat_map(|b| [f32::from_bits(b), -f32::from_bits(b)]).collect();
            sweep(&x);
        }
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let x: Vec<f32> = (0..10_000_000)
            .map(|i| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                // Half uniform in [-40, 40], half any finite float.
                let bits = (state >> 32) as u32;
                if i % 2 == 0 {
                    (bits as f64 / 2f64.powi(32) * 80.0 - 40.0) as f32
                } else {
                    let v = f32::from_bits(bits);
                    if v.is_finite() {
                        v
                    } else {
                        1.0
                    }
                }
            })
            .collect();
        sweep(&x);
        for (isa, (e, v)) in isas.into_iter().zip(worst) {
            println!("{isa:?}: max |got - want| / (1 + |want|) = {e:.3e} at x = {v:e}");
            assert!(e <= 2e-7, "{isa:?}");
        }
    }

    fn check(x: &[f32], out: &[f32]) {
        for (&v, &got) in x.iter().zip(out) {
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
